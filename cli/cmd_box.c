/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * atb box: describe this machine and print its fingerprint, the hash that
 * ties every stored absolute time to the box it was measured on.  The
 * probing and hashing are the library's (atb/box.h); this file parses
 * options and prints.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "atb/box.h"
#include "cli.h"
#include "banned.h"

static const char box_help[] =
	"usage: atb box [--json] [--stable] [--fingerprint] [--compiler CC]\n"
	"\n"
	"Describe this machine (the \"box\") and print its fingerprint.  Every\n"
	"stored result carries the fingerprint of the box it was measured on;\n"
	"absolute times are compared only between results with equal fingerprints.\n"
	"\n"
	"The fingerprint is the SHA-256 of the canonical JSON (sorted keys, no\n"
	"spaces) of the identity fields, which define the box and do not change\n"
	"between two probes of an unchanged machine:\n"
	"  cpu_model, logical_cores, memory_total_gib (rounded to the nearest GiB),\n"
	"  os, kernel, arch, compiler_version, gpu_driver_version, and each\n"
	"  GPU's name and uuid, plus fingerprint_version.\n"
	"A kernel, driver or compiler upgrade therefore makes a new box.  Other\n"
	"fields are description (physical cores, largest CPU cache, exact memory,\n"
	"GPU memory and max clocks) or volatile (probe time, available memory,\n"
	"load, GPU current clocks, free memory, temperature, persistence mode),\n"
	"and never change the fingerprint.\n"
	"\n"
	"GPUs are read through NVIDIA's NVML (libnvidia-ml.so.1, loaded at run\n"
	"time; $ATB_NVML_LIBRARY names another file).  Without it the box simply\n"
	"has no GPUs; the volatile field gpu_probe says why.  NVML lists every GPU\n"
	"of the host, whatever CUDA_VISIBLE_DEVICES says.\n"
	"\n"
	"options:\n"
	"  --json          print the description as JSON: \"fingerprint\",\n"
	"                  \"identity\" (exactly what is hashed), the description\n"
	"                  fields, \"gpus\" and a \"volatile\" object\n"
	"  --stable        with --json, leave out \"volatile\" (the form the store\n"
	"                  keeps)\n"
	"  --fingerprint   print only the fingerprint (64 hex characters)\n"
	"  --compiler CC   the C compiler whose `CC --version` first line is an\n"
	"                  identity field (default: cc; the protocol's\n"
	"                  build.cpu.compiler)\n"
	"  -h, --help      this text\n"
	"\n"
	"The same with `atb --json box`.  See docs/box.md for every field.\n"
	"\n"
	"exit codes: 0 ok, 2 bad usage, 3 the probe failed (memory, uname)\n";

static void print_bytes(const char *label, uint64_t bytes)
{
	if (bytes >= 1024ull * 1024 * 1024)
		printf("%s%.1f GiB", label, (double)bytes / (1024.0 * 1024 * 1024));
	else if (bytes >= 1024ull * 1024)
		printf("%s%.1f MiB", label, (double)bytes / (1024.0 * 1024));
	else
		printf("%s%" PRIu64 " KiB", label, bytes / 1024);
}

static const char *or_unknown(const char *s)
{
	return s ? s : "unknown";
}

static void print_text(const struct atb_box *box, const char *fp)
{
	size_t i;

	printf("fingerprint  %s\n", fp);
	printf("cpu          %s, %ld logical cores", or_unknown(box->cpu_model),
	       box->logical_cores);
	if (box->physical_cores > 0)
		printf(", %ld physical", box->physical_cores);
	printf("\n");
	print_bytes("memory       ", box->memory_total_bytes);
	if (box->memory_available_bytes) {
		print_bytes(" total, ", box->memory_available_bytes);
		printf(" available");
	}
	printf("\n");
	if (box->cache_largest_bytes) {
		print_bytes("cache        largest ", box->cache_largest_bytes);
		printf("\n");
	} else {
		printf("cache        unknown\n");
	}
	printf("os           %s\n", or_unknown(box->os));
	printf("kernel       %s (%s)\n", or_unknown(box->kernel), or_unknown(box->arch));
	printf("compiler     %s: %s\n", box->compiler,
	       box->compiler_version ? box->compiler_version : "cannot be run");
	if (!box->ngpus) {
		printf("gpus         none (%s)\n", or_unknown(box->gpu_probe));
		return;
	}
	printf("gpu driver   %s", or_unknown(box->gpu_driver_version));
	if (box->cuda_driver_version > 0)
		printf(" (CUDA %d.%d)", box->cuda_driver_version / 1000,
		       box->cuda_driver_version % 1000 / 10);
	printf("\n");
	for (i = 0; i < box->ngpus; i++) {
		const struct atb_box_gpu *g = &box->gpus[i];

		printf("gpu %-8u %s, %s", g->index, or_unknown(g->name), or_unknown(g->uuid));
		if (g->memory_total_bytes)
			print_bytes(", ", g->memory_total_bytes);
		if (g->sm_clock_max_mhz)
			printf(", sm max %u MHz", g->sm_clock_max_mhz);
		if (g->mem_clock_max_mhz)
			printf(", mem max %u MHz", g->mem_clock_max_mhz);
		printf("\n             now: sm %u MHz, mem %u MHz", g->sm_clock_mhz,
		       g->mem_clock_mhz);
		if (g->temperature_c >= 0)
			printf(", %d C", g->temperature_c);
		if (g->persistence_mode >= 0)
			printf(", persistence %s", g->persistence_mode ? "on" : "off");
		printf("\n");
	}
}

int cmd_box(int argc, char **argv, struct cli_ctx *ctx)
{
	struct atb_error err;
	struct atb_box *box = NULL;
	char fp[ATB_BOX_FINGERPRINT_LEN + 1];
	const char *compiler = NULL;
	int json = ctx->json, stable = 0, only_fp = 0, i, rc = CLI_OK;
	enum atb_status st;

	if (cli_wants_help(argc, argv)) {
		fputs(box_help, stdout);
		return CLI_OK;
	}
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = 1;
		else if (!strcmp(argv[i], "--stable"))
			stable = 1;
		else if (!strcmp(argv[i], "--fingerprint"))
			only_fp = 1;
		else if (!strcmp(argv[i], "--compiler") && i + 1 < argc)
			compiler = argv[++i];
		else if (!strncmp(argv[i], "--compiler=", 11))
			compiler = argv[i] + 11;
		else if (!strcmp(argv[i], "--compiler"))
			return cli_usage_error("box", "option '--compiler' needs a value");
		else
			return cli_usage_error("box", "unknown argument '%s'", argv[i]);
	}
	if (stable && !json)
		return cli_usage_error("box", "option '--stable' needs '--json'");

	atb_error_clear(&err);
	st = atb_box_probe_with_compiler(&box, compiler, &err);
	if (st)
		return cli_fail(&err);
	st = atb_box_fingerprint(box, fp, &err);
	if (st) {
		atb_box_free(box);
		return cli_fail(&err);
	}
	if (only_fp && !json) {
		printf("%s\n", fp);
	} else if (only_fp) {
		printf("{\"fingerprint\": \"%s\"}\n", fp);
	} else if (json) {
		json_t *o = NULL;

		st = atb_box_to_json(box, !stable, &o, &err);
		if (st) {
			rc = cli_fail(&err);
		} else {
			if (json_dumpf(o, stdout, JSON_INDENT(2) | JSON_SORT_KEYS |
							  JSON_REAL_PRECISION(6)) != 0)
				rc = CLI_RUNTIME;
			printf("\n");
			json_decref(o);
		}
	} else {
		print_text(box, fp);
	}
	atb_box_free(box);
	if (fflush(stdout) != 0)
		rc = CLI_RUNTIME;
	return rc;
}
