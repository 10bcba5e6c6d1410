/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The box as JSON, and its fingerprint.  The fingerprint is the SHA-256 of
 * the canonical text (util's atbi_json_canonical) of the identity object,
 * and to_json prints that same object under "identity", so the hash can be
 * recomputed from the output alone.  The identity recipe is versioned by
 * ATB_BOX_FINGERPRINT_VERSION, which is itself hashed.  Does not probe.
 */
#include <string.h>

#include "atb/alloc.h"
#include "box_int.h"
#include "banned.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

/* Attach v under key; a NULL v (failed allocation) or failed set counts. */
static void put(json_t *o, const char *key, json_t *v, int *failed)
{
	if (json_object_set_new(o, key, v))
		*failed = 1;
}

static json_t *str_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

/* Unknown numbers (0) are null: a 0-core box or a 0-byte cache is not real. */
static json_t *count_or_null(uint64_t v)
{
	return v ? json_integer((json_int_t)v) : json_null();
}

static enum atb_status check_strings(const struct atb_box *box,
				     struct atb_error *err)
{
	const char *const s[] = {box->cpu_model, box->os, box->kernel, box->arch,
				 box->compiler_version, box->gpu_driver_version,
				 box->compiler, box->gpu_probe};
	size_t i;

	for (i = 0; i < sizeof(s) / sizeof(s[0]); i++)
		if (!atbi_box_is_clean(s[i]))
			return atb_error_set(err, ATB_ERR_USAGE,
					     "bad box string '%s': not printable ascii",
					     s[i]);
	for (i = 0; i < box->ngpus; i++)
		if (!atbi_box_is_clean(box->gpus[i].name) ||
		    !atbi_box_is_clean(box->gpus[i].uuid))
			return atb_error_set(err, ATB_ERR_USAGE,
					     "bad box string in gpu %zu: not printable ascii",
					     i);
	if (box->ngpus && !box->gpus)
		return atb_error_set(err, ATB_ERR_USAGE,
				     "bad box: %zu gpus but no gpu array", box->ngpus);
	return ATB_OK;
}

/*
 * Memory total rounded to the nearest GiB: MemTotal moves by a few MiB with
 * the kernel's reservations (a new kernel, a changed crashkernel= setting),
 * and that is not a different box.
 */
static json_int_t memory_gib(uint64_t bytes)
{
	return (json_int_t)((double)bytes / GIB + 0.5);
}

static json_t *identity(const struct atb_box *box)
{
	json_t *o = json_object(), *gpus = json_array();
	int failed = !o || !gpus;
	size_t i;

	for (i = 0; !failed && i < box->ngpus; i++) {
		json_t *g = json_object();

		if (!g) {
			failed = 1;
			break;
		}
		put(g, "name", str_or_null(box->gpus[i].name), &failed);
		put(g, "uuid", str_or_null(box->gpus[i].uuid), &failed);
		if (json_array_append_new(gpus, g))
			failed = 1;
	}
	if (failed) {
		json_decref(o);
		json_decref(gpus);
		return NULL;
	}
	put(o, "fingerprint_version", json_integer(ATB_BOX_FINGERPRINT_VERSION), &failed);
	put(o, "cpu_model", str_or_null(box->cpu_model), &failed);
	put(o, "logical_cores", json_integer(box->logical_cores), &failed);
	put(o, "memory_total_gib", json_integer(memory_gib(box->memory_total_bytes)), &failed);
	put(o, "os", str_or_null(box->os), &failed);
	put(o, "kernel", str_or_null(box->kernel), &failed);
	put(o, "arch", str_or_null(box->arch), &failed);
	put(o, "compiler_version", str_or_null(box->compiler_version), &failed);
	put(o, "gpu_driver_version", str_or_null(box->gpu_driver_version), &failed);
	put(o, "gpus", gpus, &failed);
	if (failed) {
		json_decref(o);
		return NULL;
	}
	return o;
}

enum atb_status atb_box_identity_json(const struct atb_box *box, json_t **out,
				      struct atb_error *err)
{
	enum atb_status st;

	if (!out)
		return atb_error_set(err, ATB_ERR_USAGE, "cannot describe box: no output given");
	*out = NULL;
	if (!box)
		return atb_error_set(err, ATB_ERR_USAGE, "cannot describe box: no box given");
	if ((st = check_strings(box, err)) != ATB_OK)
		return st;
	atb_alloc_install_json();
	*out = identity(box);
	if (!*out)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot describe box: out of memory");
	return ATB_OK;
}

enum atb_status atb_box_fingerprint(const struct atb_box *box,
				    char out[ATB_BOX_FINGERPRINT_LEN + 1],
				    struct atb_error *err)
{
	json_t *id;
	char *text;
	enum atb_status st;

	out[0] = '\0';
	if ((st = atb_box_identity_json(box, &id, err)) != ATB_OK)
		return st;
	/* atbi_json_canonical reads its text back and compares it with the tree */
	st = atbi_json_canonical(id, &text, err);
	json_decref(id);
	if (st) {
		atb_free(text);
		return st;
	}
	st = atbi_sha256_hex(text, strlen(text), out);
	atb_free(text);
	if (st)
		return atb_error_set(err, st, "cannot hash box identity: sha-256 failed");
	return ATB_OK;
}

static json_t *gpu_stable(const struct atb_box_gpu *g)
{
	json_t *o = json_object();
	int failed = !o;

	if (failed)
		return NULL;
	put(o, "index", json_integer(g->index), &failed);
	put(o, "name", str_or_null(g->name), &failed);
	put(o, "uuid", str_or_null(g->uuid), &failed);
	put(o, "memory_total_bytes", count_or_null(g->memory_total_bytes), &failed);
	put(o, "sm_clock_max_mhz", count_or_null(g->sm_clock_max_mhz), &failed);
	put(o, "mem_clock_max_mhz", count_or_null(g->mem_clock_max_mhz), &failed);
	if (failed) {
		json_decref(o);
		return NULL;
	}
	return o;
}

static json_t *gpu_volatile(const struct atb_box_gpu *g)
{
	json_t *o = json_object();
	int failed = !o;

	if (failed)
		return NULL;
	put(o, "index", json_integer(g->index), &failed);
	put(o, "uuid", str_or_null(g->uuid), &failed);
	put(o, "sm_clock_mhz", count_or_null(g->sm_clock_mhz), &failed);
	put(o, "mem_clock_mhz", count_or_null(g->mem_clock_mhz), &failed);
	put(o, "memory_free_bytes",
	    g->memory_total_bytes ? json_integer((json_int_t)g->memory_free_bytes)
				  : json_null(), &failed);
	put(o, "temperature_c",
	    g->temperature_c >= 0 ? json_integer(g->temperature_c) : json_null(), &failed);
	put(o, "persistence_mode",
	    g->persistence_mode >= 0 ? json_boolean(g->persistence_mode) : json_null(),
	    &failed);
	if (failed) {
		json_decref(o);
		return NULL;
	}
	return o;
}

static json_t *volatile_part(const struct atb_box *box)
{
	json_t *o = json_object(), *gpus = json_array();
	char when[40];
	int failed = !o || !gpus;
	size_t i;

	for (i = 0; !failed && i < box->ngpus; i++)
		if (json_array_append_new(gpus, gpu_volatile(&box->gpus[i])))
			failed = 1;
	if (failed) {
		json_decref(o);
		json_decref(gpus);
		return NULL;
	}
	atbi_format_time(box->probed_at_ns, when, sizeof(when));
	put(o, "probed_at", json_string(when), &failed);
	put(o, "memory_available_bytes", count_or_null(box->memory_available_bytes), &failed);
	put(o, "loadavg_1m", box->loadavg_1m >= 0 ? json_real(box->loadavg_1m) : json_null(),
	    &failed);
	put(o, "gpu_probe", str_or_null(box->gpu_probe), &failed);
	put(o, "gpus", gpus, &failed);
	if (failed) {
		json_decref(o);
		return NULL;
	}
	return o;
}

enum atb_status atb_box_to_json(const struct atb_box *box, int include_volatile,
				json_t **out, struct atb_error *err)
{
	char fp[ATB_BOX_FINGERPRINT_LEN + 1];
	json_t *o = NULL, *id = NULL, *gpus = NULL, *vol = NULL;
	int failed = 0;
	size_t i;
	enum atb_status st;

	if (!out)
		return atb_error_set(err, ATB_ERR_USAGE, "cannot describe box: no output given");
	*out = NULL;
	if ((st = atb_box_fingerprint(box, fp, err)) != ATB_OK)
		return st;
	if ((st = atb_box_identity_json(box, &id, err)) != ATB_OK)
		return st;
	o = json_object();
	gpus = json_array();
	if (include_volatile)
		failed = !(vol = volatile_part(box));
	for (i = 0; !failed && gpus && i < box->ngpus; i++)
		if (json_array_append_new(gpus, gpu_stable(&box->gpus[i])))
			failed = 1;
	if (failed || !o || !gpus) {
		json_decref(o);
		json_decref(id);
		json_decref(gpus);
		json_decref(vol);
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot describe box: out of memory");
	}
	put(o, "fingerprint", json_string(fp), &failed);
	put(o, "fingerprint_version", json_integer(ATB_BOX_FINGERPRINT_VERSION), &failed);
	put(o, "identity", id, &failed);
	put(o, "cpu_model", str_or_null(box->cpu_model), &failed);
	put(o, "logical_cores", json_integer(box->logical_cores), &failed);
	put(o, "physical_cores", count_or_null((uint64_t)box->physical_cores), &failed);
	put(o, "memory_total_bytes", count_or_null(box->memory_total_bytes), &failed);
	put(o, "cache_largest_bytes", count_or_null(box->cache_largest_bytes), &failed);
	put(o, "os", str_or_null(box->os), &failed);
	put(o, "kernel", str_or_null(box->kernel), &failed);
	put(o, "arch", str_or_null(box->arch), &failed);
	put(o, "compiler", str_or_null(box->compiler), &failed);
	put(o, "compiler_version", str_or_null(box->compiler_version), &failed);
	put(o, "gpu_driver_version", str_or_null(box->gpu_driver_version), &failed);
	put(o, "cuda_driver_version",
	    box->cuda_driver_version > 0 ? json_integer(box->cuda_driver_version) : json_null(),
	    &failed);
	put(o, "gpus", gpus, &failed);
	if (vol)
		put(o, "volatile", vol, &failed);
	if (failed) {
		json_decref(o);
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot describe box: out of memory");
	}
	*out = o;
	return ATB_OK;
}
