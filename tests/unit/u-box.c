/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Unit tests for the box module: the probe on this machine, the identity /
 * volatile split of the fingerprint, the JSON fields docs/box.md promises,
 * NVML absent, the text parsers on other machines' files, and the
 * allocation-failure walk over probe, fingerprint and to_json.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "atb/alloc.h"
#include "atb/box.h"
#include "box/box_int.h"
#include "banned.h"

static struct atb_box *probe(void)
{
	struct atb_error err;
	struct atb_box *box = NULL;
	enum atb_status st;

	atb_error_clear(&err);
	st = atb_box_probe(&box, &err);
	cr_assert_eq(st, ATB_OK, "probe failed: %s", err.msg);
	cr_assert_not_null(box);
	return box;
}

static void fingerprint(const struct atb_box *box, char fp[ATB_BOX_FINGERPRINT_LEN + 1])
{
	struct atb_error err;

	atb_error_clear(&err);
	cr_assert_eq(atb_box_fingerprint(box, fp, &err), ATB_OK, "%s", err.msg);
	cr_assert(atbi_is_sha256_hex(fp), "not a sha-256: '%s'", fp);
}

/* Replace a box string (the box owns its strings; atb_box_free frees them). */
static void replace(char **field, const char *value)
{
	atb_free(*field);
	*field = atb_strdup(value);
	cr_assert_not_null(*field);
}

/* A probe that sees no GPU, even on a GPU machine, for the fake-GPU tests. */
static struct atb_box *probe_no_gpu(void)
{
	setenv("ATB_NVML_LIBRARY", "/nonexistent", 1);
	return probe();
}

/* Give the box one fake GPU so GPU fields can be tested without a GPU. */
static void add_fake_gpu(struct atb_box *box)
{
	cr_assert_eq(box->ngpus, 0);
	box->gpus = atb_calloc(1, sizeof(*box->gpus));
	cr_assert_not_null(box->gpus);
	box->ngpus = 1;
	box->gpus[0].name = atb_strdup("NVIDIA H200");
	box->gpus[0].uuid = atb_strdup("GPU-00000000-1111-2222-3333-444444444444");
	box->gpus[0].memory_total_bytes = 150ull << 30;
	box->gpus[0].sm_clock_max_mhz = 1980;
	box->gpus[0].mem_clock_max_mhz = 3201;
	box->gpus[0].sm_clock_mhz = 345;
	box->gpus[0].mem_clock_mhz = 3201;
	box->gpus[0].memory_free_bytes = 140ull << 30;
	box->gpus[0].temperature_c = 31;
	box->gpus[0].persistence_mode = 1;
	replace(&box->gpu_driver_version, "550.54.15");
	box->cuda_driver_version = 12040;
}

Test(box, probe_works_here)
{
	struct atb_box *box = probe();

	cr_expect_gt(box->logical_cores, 0);
	cr_expect_gt(box->memory_total_bytes, 0);
	cr_expect_not_null(box->kernel);
	cr_expect_not_null(box->arch);
	cr_expect_not_null(box->cpu_model);
	cr_expect_str_eq(box->compiler, "cc");
	cr_expect_not_null(box->gpu_probe);
	atb_box_free(box);
}

Test(box, no_gpu_here_means_empty_gpus_and_no_error)
{
	struct atb_box *box;
	void *lib;

	/* on a box with an NVIDIA driver this is t0902-box-gpu's business */
	lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (lib) {
		dlclose(lib);
		cr_skip_test("libnvidia-ml.so.1 loads here: this box has a driver");
	}
	unsetenv("ATB_NVML_LIBRARY");
	box = probe();
	cr_expect_eq(box->ngpus, 0);
	cr_expect_null(box->gpus);
	cr_expect_null(box->gpu_driver_version);
	cr_expect_eq(box->cuda_driver_version, 0);
	cr_expect(strstr(box->gpu_probe, "no gpu") != NULL, "gpu_probe: %s", box->gpu_probe);
	atb_box_free(box);
}

Test(box, nvml_absent_is_not_an_error)
{
	struct atb_box *box;

	setenv("ATB_NVML_LIBRARY", "/nonexistent", 1);
	box = probe();
	cr_expect_eq(box->ngpus, 0);
	cr_expect(strstr(box->gpu_probe, "cannot load nvml '/nonexistent'") != NULL,
		  "gpu_probe: %s", box->gpu_probe);
	atb_box_free(box);
}

Test(box, nvml_without_symbols_is_not_an_error)
{
	struct atb_box *box;

	/* a real shared object that is not NVML: dlopen works, dlsym does not */
	setenv("ATB_NVML_LIBRARY", "libm.so.6", 1);
	box = probe();
	cr_expect_eq(box->ngpus, 0);
	cr_expect(strstr(box->gpu_probe, "lacks a required nvml symbol") != NULL,
		  "gpu_probe: %s", box->gpu_probe);
	atb_box_free(box);
}

Test(box, fingerprint_is_stable_across_probes)
{
	struct atb_box *a = probe(), *b = probe();
	char fa[ATB_BOX_FINGERPRINT_LEN + 1], fb[ATB_BOX_FINGERPRINT_LEN + 1];

	fingerprint(a, fa);
	fingerprint(b, fb);
	cr_expect_str_eq(fa, fb);
	atb_box_free(a);
	atb_box_free(b);
}

/* Each identity field, changed alone, must change the fingerprint. */
Test(box, identity_fields_change_the_fingerprint)
{
	struct atb_box *box = probe_no_gpu();
	char base[ATB_BOX_FINGERPRINT_LEN + 1], fp[ATB_BOX_FINGERPRINT_LEN + 1];
	char **strings[] = {&box->cpu_model, &box->os, &box->kernel, &box->arch,
			    &box->compiler_version, &box->gpu_driver_version};
	size_t i;

	fingerprint(box, base);
	for (i = 0; i < sizeof(strings) / sizeof(strings[0]); i++) {
		char *saved = *strings[i];

		*strings[i] = atb_strdup("something else");
		fingerprint(box, fp);
		cr_expect_str_neq(fp, base, "identity string %zu did not count", i);
		atb_free(*strings[i]);
		*strings[i] = saved;
	}
	box->logical_cores++;
	fingerprint(box, fp);
	cr_expect_str_neq(fp, base, "logical_cores did not count");
	box->logical_cores--;

	box->memory_total_bytes += 3ull << 30;
	fingerprint(box, fp);
	cr_expect_str_neq(fp, base, "memory_total did not count");
	box->memory_total_bytes -= 3ull << 30;

	fingerprint(box, fp);
	cr_expect_str_eq(fp, base, "restoring the fields did not restore the fingerprint");

	add_fake_gpu(box);
	fingerprint(box, fp);
	cr_expect_str_neq(fp, base, "a gpu did not count");
	memcpy(base, fp, sizeof(fp));
	box->gpus[0].uuid[4] = 'f';
	fingerprint(box, fp);
	cr_expect_str_neq(fp, base, "the gpu uuid did not count");
	box->gpus[0].uuid[4] = '0';
	replace(&box->gpus[0].name, "NVIDIA H100");
	fingerprint(box, fp);
	cr_expect_str_neq(fp, base, "the gpu name did not count");
	atb_box_free(box);
}

/* Volatile and description-only fields must not change the fingerprint. */
Test(box, volatile_fields_do_not_change_the_fingerprint)
{
	struct atb_box *box = probe_no_gpu();
	char base[ATB_BOX_FINGERPRINT_LEN + 1], fp[ATB_BOX_FINGERPRINT_LEN + 1];

	add_fake_gpu(box);
	fingerprint(box, base);
	box->probed_at_ns += 1000000000;
	box->memory_available_bytes /= 2;
	box->loadavg_1m += 3.5;
	replace(&box->gpu_probe, "something else");
	box->gpus[0].sm_clock_mhz = 1980;
	box->gpus[0].mem_clock_mhz = 1593;
	box->gpus[0].memory_free_bytes = 1;
	box->gpus[0].temperature_c = 80;
	box->gpus[0].persistence_mode = 0;
	/* description: not identity either */
	box->physical_cores += 7;
	box->cache_largest_bytes *= 2;
	box->gpus[0].memory_total_bytes -= 1u << 20;
	box->gpus[0].sm_clock_max_mhz = 2000;
	box->cuda_driver_version = 12080;
	replace(&box->compiler, "gcc");
	/* a few MiB of MemTotal (kernel reservations) is the same box */
	box->memory_total_bytes += 5u << 20;
	fingerprint(box, fp);
	cr_expect_str_eq(fp, base);
	atb_box_free(box);
}

/* The fingerprint is the SHA-256 of the canonical text of "identity". */
Test(box, fingerprint_recomputes_from_identity)
{
	struct atb_box *box = probe();
	struct atb_error err;
	char fp[ATB_BOX_FINGERPRINT_LEN + 1], again[ATB_BOX_FINGERPRINT_LEN + 1];
	json_t *o = NULL;
	char *text = NULL;

	atb_error_clear(&err);
	fingerprint(box, fp);
	cr_assert_eq(atb_box_to_json(box, 1, &o, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(atbi_json_canonical(json_object_get(o, "identity"), &text, &err), ATB_OK);
	cr_assert_eq(atbi_sha256_hex(text, strlen(text), again), ATB_OK);
	cr_expect_str_eq(again, fp);
	cr_expect_str_eq(json_string_value(json_object_get(o, "fingerprint")), fp);
	atb_free(text);
	json_decref(o);
	atb_box_free(box);
}

static void expect_keys(const json_t *o, const char *const *keys, size_t n, const char *where)
{
	size_t i;

	cr_assert(json_is_object(o), "%s is not an object", where);
	for (i = 0; i < n; i++)
		cr_expect_not_null(json_object_get(o, keys[i]), "%s lacks '%s'", where, keys[i]);
	cr_expect_eq(json_object_size(o), n, "%s has %zu keys, documented %zu", where,
		     json_object_size(o), n);
}

/* The keys docs/box.md documents, no more and no fewer. */
Test(box, json_has_the_documented_fields)
{
	static const char *const top[] = {
		"fingerprint", "fingerprint_version", "identity", "cpu_model",
		"logical_cores", "physical_cores", "memory_total_bytes",
		"cache_largest_bytes", "os", "kernel", "arch", "compiler",
		"compiler_version", "gpu_driver_version", "cuda_driver_version", "gpus",
		"volatile"};
	static const char *const identity[] = {
		"fingerprint_version", "cpu_model", "logical_cores", "memory_total_gib",
		"os", "kernel", "arch", "compiler_version", "gpu_driver_version", "gpus"};
	static const char *const gpu[] = {
		"index", "name", "uuid", "memory_total_bytes", "sm_clock_max_mhz",
		"mem_clock_max_mhz"};
	static const char *const gpu_id[] = {"name", "uuid"};
	static const char *const vol[] = {
		"probed_at", "memory_available_bytes", "loadavg_1m", "gpu_probe", "gpus"};
	static const char *const gpu_vol[] = {
		"index", "uuid", "sm_clock_mhz", "mem_clock_mhz", "memory_free_bytes",
		"temperature_c", "persistence_mode"};
	struct atb_box *box = probe_no_gpu();
	struct atb_error err;
	json_t *o = NULL, *stable = NULL;

	atb_error_clear(&err);
	add_fake_gpu(box);
	cr_assert_eq(atb_box_to_json(box, 1, &o, &err), ATB_OK, "%s", err.msg);
	expect_keys(o, top, sizeof(top) / sizeof(top[0]), "box");
	expect_keys(json_object_get(o, "identity"), identity,
		    sizeof(identity) / sizeof(identity[0]), "identity");
	expect_keys(json_array_get(json_object_get(o, "gpus"), 0), gpu,
		    sizeof(gpu) / sizeof(gpu[0]), "gpus[0]");
	expect_keys(json_array_get(json_object_get(json_object_get(o, "identity"), "gpus"), 0),
		    gpu_id, 2, "identity.gpus[0]");
	expect_keys(json_object_get(o, "volatile"), vol, sizeof(vol) / sizeof(vol[0]),
		    "volatile");
	expect_keys(json_array_get(json_object_get(json_object_get(o, "volatile"), "gpus"), 0),
		    gpu_vol, sizeof(gpu_vol) / sizeof(gpu_vol[0]), "volatile.gpus[0]");
	cr_expect_eq(json_integer_value(json_object_get(o, "fingerprint_version")),
		     ATB_BOX_FINGERPRINT_VERSION);
	cr_expect(json_is_true(json_object_get(
		json_array_get(json_object_get(json_object_get(o, "volatile"), "gpus"), 0),
		"persistence_mode")));

	cr_assert_eq(atb_box_to_json(box, 0, &stable, &err), ATB_OK, "%s", err.msg);
	cr_expect_null(json_object_get(stable, "volatile"));
	cr_expect_eq(json_object_size(stable), json_object_size(o) - 1);
	cr_expect_str_eq(json_string_value(json_object_get(stable, "fingerprint")),
			 json_string_value(json_object_get(o, "fingerprint")));
	json_decref(o);
	json_decref(stable);
	atb_box_free(box);
}

Test(box, bad_compiler_is_refused_missing_one_is_unknown)
{
	struct atb_error err;
	struct atb_box *box = (struct atb_box *)&err;

	atb_error_clear(&err);
	cr_expect_eq(atb_box_probe_with_compiler(&box, "-rf", &err), ATB_ERR_USAGE);
	cr_expect_null(box);
	cr_expect(strstr(err.msg, "'-rf'") != NULL, "%s", err.msg);
	cr_expect_eq(atb_box_probe_with_compiler(&box, "", &err), ATB_ERR_USAGE);

	atb_error_clear(&err);
	cr_assert_eq(atb_box_probe_with_compiler(&box, "/nonexistent/cc", &err), ATB_OK);
	cr_expect_null(box->compiler_version);
	cr_expect_str_eq(box->compiler, "/nonexistent/cc");
	atb_box_free(box);

	/* a program that fails leaves the version unknown too */
	cr_assert_eq(atb_box_probe_with_compiler(&box, "false", &err), ATB_OK);
	cr_expect_null(box->compiler_version);
	atb_box_free(box);
}

Test(box, the_compiler_runs_in_the_c_locale)
{
	char dir[] = "/tmp/u-box.XXXXXX", prog[64];
	struct atb_error err;
	struct atb_box *box = NULL;
	FILE *f;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(prog, sizeof(prog), "%s/fakecc", dir);
	f = fopen(prog, "w");
	cr_assert_not_null(f);
	fputs("#!/bin/sh\necho \"fakecc $1 $LC_ALL ${LANG-none} ${LC_MESSAGES-none} $KEEP\"\n", f);
	fclose(f);
	cr_assert_eq(chmod(prog, 0700), 0);
	setenv("LANG", "de_DE.UTF-8", 1);
	setenv("LC_MESSAGES", "de_DE.UTF-8", 1);
	setenv("KEEP", "kept", 1);
	atb_error_clear(&err);
	cr_assert_eq(atb_box_probe_with_compiler(&box, prog, &err), ATB_OK, "%s", err.msg);
	cr_expect_str_eq(box->compiler_version, "fakecc --version C none none kept");
	atb_box_free(box);
	unlink(prog);
	rmdir(dir);
}

Test(box, non_ascii_strings_are_refused_by_to_json)
{
	struct atb_box *box = probe();
	struct atb_error err;
	json_t *o = (json_t *)&err;

	atb_error_clear(&err);
	replace(&box->os, "Caf\xc3\xa9 OS");
	cr_expect_eq(atb_box_to_json(box, 1, &o, &err), ATB_ERR_USAGE);
	cr_expect_null(o);
	atb_box_free(box);
}

Test(box, parse_cpuinfo_x86)
{
	const char *text =
		"processor\t: 0\nmodel name\t: Intel(R) Xeon(R) CPU   E5-2680 v4 @ 2.40GHz\n"
		"physical id\t: 0\ncore id\t\t: 0\n\n"
		"processor\t: 1\nmodel name\t: Intel(R) Xeon(R) CPU   E5-2680 v4 @ 2.40GHz\n"
		"physical id\t: 0\ncore id\t\t: 0\n\n"
		"processor\t: 2\nmodel name\t: Intel(R) Xeon(R) CPU   E5-2680 v4 @ 2.40GHz\n"
		"physical id\t: 0\ncore id\t\t: 1\n\n"
		"processor\t: 3\nmodel name\t: Intel(R) Xeon(R) CPU   E5-2680 v4 @ 2.40GHz\n"
		"physical id\t: 1\ncore id\t\t: 0\n";
	char *model = NULL;
	long phys = -1;

	cr_assert_eq(atbi_box_parse_cpuinfo(text, &model, &phys), ATB_OK);
	cr_expect_str_eq(model, "Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz");
	cr_expect_eq(phys, 3);
	atb_free(model);
}

Test(box, parse_cpuinfo_arm)
{
	const char *text =
		"processor\t: 0\nBogoMIPS\t: 2000.00\nCPU implementer\t: 0x41\n"
		"CPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: 0xd4f\n\n";
	char *model = NULL;
	long phys = -1;

	cr_assert_eq(atbi_box_parse_cpuinfo(text, &model, &phys), ATB_OK);
	cr_expect_str_eq(model, "arm implementer 0x41 part 0xd4f");
	cr_expect_eq(phys, 0);
	atb_free(model);
	cr_assert_eq(atbi_box_parse_cpuinfo("", &model, &phys), ATB_OK);
	cr_expect_null(model);
}

Test(box, parse_os_release_and_meminfo_and_cache)
{
	char *name = NULL;

	cr_assert_eq(atbi_box_parse_os_release(
			     "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n",
			     &name), ATB_OK);
	cr_expect_str_eq(name, "Debian GNU/Linux 12 (bookworm)");
	atb_free(name);
	cr_assert_eq(atbi_box_parse_os_release("ID=x\nNAME='Some \"OS\"'\n", &name), ATB_OK);
	cr_expect_str_eq(name, "Some \"OS\"");
	atb_free(name);
	cr_assert_eq(atbi_box_parse_os_release("PRETTY_NAME=\"A \\\"q\\\" B\"", &name), ATB_OK);
	cr_expect_str_eq(name, "A \"q\" B");
	atb_free(name);
	cr_assert_eq(atbi_box_parse_os_release("ID=x\n", &name), ATB_OK);
	cr_expect_null(name);

	cr_expect_eq(atbi_box_parse_meminfo("MemTotal:       16384 kB\nMemFree: 1 kB\n"
					    "MemAvailable:    2048 kB\n", "MemAvailable"),
		     2048u * 1024u);
	cr_expect_eq(atbi_box_parse_meminfo("MemTotal: 1 kB\n", "MemAvailable"), 0);

	cr_expect_eq(atbi_box_parse_cache_size("32K\n"), 32u * 1024u);
	cr_expect_eq(atbi_box_parse_cache_size("32768K"), 32ull << 20);
	cr_expect_eq(atbi_box_parse_cache_size("2M"), 2ull << 20);
	cr_expect_eq(atbi_box_parse_cache_size("512"), 512u);
	cr_expect_eq(atbi_box_parse_cache_size("x"), 0);
	cr_expect_eq(atbi_box_parse_cache_size("12Q"), 0);
}

Test(box, clean_normalises_strings)
{
	char *s = NULL;

	cr_assert_eq(atbi_box_clean("  a\t\tb  c \n", 11, &s), ATB_OK);
	cr_expect_str_eq(s, "a b c");
	atb_free(s);
	cr_assert_eq(atbi_box_clean("x\xc3\xa9y", 4, &s), ATB_OK);
	cr_expect_str_eq(s, "x??y");
	atb_free(s);
	cr_assert_eq(atbi_box_clean(" \t ", 3, &s), ATB_OK);
	cr_expect_null(s);
}

/*
 * Fail allocation k for k = 1..N over probe, fingerprint and to_json: each
 * failure must come back as ATB_ERR_NOMEM with nothing leaked or half-made
 * (ASan builds check the leaks), until a run allocates without failing.
 * nvml is NULL for the real library (on a GPU machine this walks the NVML
 * path too) or a path that does not load.
 */
static void allocation_walk(const char *nvml)
{
	long k;
	int completed = 0;

	if (nvml)
		setenv("ATB_NVML_LIBRARY", nvml, 1);
	else
		unsetenv("ATB_NVML_LIBRARY");
	for (k = 1; k < 10000 && !completed; k++) {
		struct atb_error err;
		struct atb_box *box = (struct atb_box *)&err;
		char fp[ATB_BOX_FINGERPRINT_LEN + 1];
		json_t *o = (json_t *)&err;
		enum atb_status st;

		atb_error_clear(&err);
		atb_alloc_fail_at(k);
		st = atb_box_probe(&box, &err);
		if (st == ATB_OK)
			st = atb_box_fingerprint(box, fp, &err);
		else
			cr_assert_null(box, "k=%ld: failed probe left a box", k);
		if (st == ATB_OK) {
			st = atb_box_to_json(box, 1, &o, &err);
			if (st)
				cr_assert_null(o, "k=%ld: failed to_json left an object", k);
		}
		if (atb_alloc_failed()) {
			cr_assert_eq(st, ATB_ERR_NOMEM, "k=%ld: status %d (%s)", k, st, err.msg);
			cr_assert_eq(err.status, ATB_ERR_NOMEM, "k=%ld: err.status", k);
		} else {
			cr_assert_eq(st, ATB_OK, "k=%ld: %s", k, err.msg);
			completed = 1;
			json_decref(o);
		}
		atb_alloc_fail_at(0);
		atb_box_free(box);
	}
	cr_expect(completed, "never completed without failures");
	cr_expect_gt(k, 10, "suspiciously few allocations: %ld", k);
}

Test(box, allocation_failure_walk_without_nvml)
{
	allocation_walk("/nonexistent");
}

Test(box, allocation_failure_walk_with_this_machines_nvml)
{
	allocation_walk(NULL);
}
