/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * atb-runner's cuda backend (job "backend": "cuda"): open device 0 through
 * the driver API (src/cuda), load each arm's shared object (built by nvcc;
 * its host wrapper launches on args->stream, the runner's stream), generate
 * seeded inputs on the host, copy them into fresh device allocations, and
 * run the same correctness facts as the cpu backend on the device: outputs
 * poisoned with NaN (cuMemsetD32) before every call, the reference and each
 * arm on separate fresh allocations, input mutation (inputs copied back and
 * hashed), result reuse (fresh allocations per input set, then old pointers
 * with new contents), output aliasing (device address ranges compared), a
 * side-stream escape check (device-wide completion against the event
 * window), then paired timing through the one timing core with the
 * CUDA-events timer, and NVML state before and after every seed.
 *
 * The input generator and the comparison follow the cpu backend's rules
 * exactly (same splitmix64 seeding of GSL mt19937, same tolerance rule), so
 * a seed gives the same inputs on both backends; runner/cpu.c keeps its
 * helpers static, so they are restated here (see docs/internals/cuda.md).
 *
 * Does not: judge anything; it reports what it saw.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>

#include "atb/alloc.h"
#include "atb/cuda.h"
#include "atb/kernel.h"
#include "atb/timing.h"
#include "runner_cuda.h"
#include "runner_int.h"
#include "util.h"
#include "banned.h"

struct carm {
	const struct atb_runner_arm *arm;
	void *dl;
	atb_kernel_fn fn;
	char sha256[ATB_SHA256_HEX_LEN + 1];
};

struct hbufs {
	void *p[ATB_RUNNER_MAX_BUFFERS];
	size_t bytes[ATB_RUNNER_MAX_BUFFERS];
	size_t n;
};

struct dbufs {
	uint64_t p[ATB_RUNNER_MAX_BUFFERS];
	size_t bytes[ATB_RUNNER_MAX_BUFFERS];
	size_t n;
};

struct crt {
	const struct atb_runner_job *job;
	struct atb_cuda *cu;
	struct carm arms[ATB_RUNNER_MAX_ARMS];
	char msg[1400];
	int sticky;   /* the context saw a fault: nothing more can run */
};

static int is_input(const struct atb_runner_buffer *b)
{
	return b->role != ATB_BUFFER_OUT;
}

/* ---- host buffers -------------------------------------------------------- */

static void h_free(struct hbufs *b)
{
	size_t i;

	for (i = 0; i < b->n; i++)
		atb_free(b->p[i]);
	memset(b, 0, sizeof(*b));
}

static int h_alloc(struct hbufs *b, const struct atb_runner_job *job,
		   const struct atb_runner_set *set)
{
	size_t i;

	memset(b, 0, sizeof(*b));
	for (i = 0; i < job->nbuffers; i++) {
		b->bytes[i] = set->counts[i] * atb_dtype_size(job->buffers[i].dtype);
		b->p[i] = atb_malloc(b->bytes[i] ? b->bytes[i] : 1);
		b->n = i + 1;
		if (!b->p[i]) {
			h_free(b);
			return -1;
		}
	}
	return 0;
}

static uint64_t mix(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ULL;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* As the cpu backend: (seed, set, dist, stream, buffer) -> one mt19937 each. */
static int gen_inputs(struct hbufs *b, const struct atb_runner_job *job,
		      const struct atb_runner_set *set, uint64_t seed, size_t set_index,
		      int dist, unsigned stream)
{
	gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
	size_t i, k;

	if (!r)
		return -1;
	for (i = 0; i < job->nbuffers; i++) {
		const struct atb_runner_buffer *bf = &job->buffers[i];
		const struct atb_runner_dist *d = &bf->dist;
		uint64_t s = mix(mix(mix(mix(seed) ^ set_index) ^ (uint64_t)(dist + 1)) ^
				 ((uint64_t)stream << 32 | i));

		if (!is_input(bf))
			continue;
		if (dist >= 0 && bf->adversarial)
			d = &job->dists[dist];
		gsl_rng_set(r, (unsigned long)s);
		for (k = 0; k < set->counts[i]; k++) {
			double x = d->normal ? d->mean + gsl_ran_gaussian(r, d->stddev)
					     : d->low + (d->high - d->low) * gsl_rng_uniform(r);

			switch (bf->dtype) {
			case ATB_DTYPE_FP32:
				((float *)b->p[i])[k] = (float)x;
				break;
			case ATB_DTYPE_FP64:
				((double *)b->p[i])[k] = x;
				break;
			case ATB_DTYPE_INT32:
				((int32_t *)b->p[i])[k] = (int32_t)floor(x);
				break;
			case ATB_DTYPE_INT64:
				((int64_t *)b->p[i])[k] = (int64_t)floor(x);
				break;
			}
		}
	}
	gsl_rng_free(r);
	return 0;
}

/* ---- device buffers ------------------------------------------------------ */

static int fail(struct crt *rt, const char *what, const struct atb_error *err)
{
	snprintf(rt->msg, sizeof(rt->msg), "%s: %s", what, err->msg);
	return -1;
}

static void d_free(struct crt *rt, struct dbufs *b)
{
	size_t i;

	for (i = 0; i < b->n; i++)
		atb_cuda_free(rt->cu, b->p[i]);
	memset(b, 0, sizeof(*b));
}

/* Every buffer its own cuMemAlloc: fresh allocations for every input set. */
static int d_alloc(struct crt *rt, struct dbufs *b, const struct atb_runner_set *set)
{
	const struct atb_runner_job *job = rt->job;
	struct atb_error err;
	size_t i;

	memset(b, 0, sizeof(*b));
	atb_error_clear(&err);
	for (i = 0; i < job->nbuffers; i++) {
		b->bytes[i] = set->counts[i] * atb_dtype_size(job->buffers[i].dtype);
		if (atb_cuda_alloc(rt->cu, b->bytes[i], &b->p[i], &err)) {
			d_free(rt, b);
			return fail(rt, "cannot allocate device buffers", &err);
		}
		b->n = i + 1;
	}
	return 0;
}

static int d_upload_inputs(struct crt *rt, struct dbufs *d, const struct hbufs *h)
{
	struct atb_error err;
	size_t i;

	atb_error_clear(&err);
	for (i = 0; i < rt->job->nbuffers; i++)
		if (is_input(&rt->job->buffers[i]) &&
		    atb_cuda_h2d(rt->cu, d->p[i], h->p[i], d->bytes[i], &err))
			return fail(rt, "cannot copy inputs to the device", &err);
	return 0;
}

/* PROTO: correctness.poison -- NaN (0x7fc00000 per float word; the fp64 NaN's
 * high word repeated is a NaN too), integers their type's minimum. */
static int d_poison(struct crt *rt, struct dbufs *d)
{
	const struct atb_runner_job *job = rt->job;
	struct atb_error err;
	size_t i;

	atb_error_clear(&err);
	for (i = 0; i < job->nbuffers; i++) {
		uint32_t word;
		size_t words = d->bytes[i] / 4;

		if (job->buffers[i].role != ATB_BUFFER_OUT)
			continue;
		switch (job->buffers[i].dtype) {
		case ATB_DTYPE_FP32:
			word = 0x7fc00000u;
			break;
		case ATB_DTYPE_FP64:
			word = 0x7ff80000u;  /* 0x7ff800007ff80000: exponent all ones, NaN */
			break;
		case ATB_DTYPE_INT32:
			word = 0x80000000u;
			break;
		default:
			word = 0x80000000u;  /* int64: 0x8000000080000000, very negative */
			break;
		}
		if (atb_cuda_memset32(rt->cu, d->p[i], word, words, &err))
			return fail(rt, "cannot poison outputs", &err);
	}
	return 0;
}

static int d_download(struct crt *rt, struct hbufs *h, const struct dbufs *d)
{
	struct atb_error err;
	size_t i;

	atb_error_clear(&err);
	for (i = 0; i < rt->job->nbuffers; i++)
		if (atb_cuda_d2h(rt->cu, h->p[i], d->p[i], d->bytes[i], &err))
			return fail(rt, "cannot copy buffers from the device", &err);
	return 0;
}

static int call_kernel(struct crt *rt, const struct carm *a, const struct dbufs *d,
		       const struct atb_runner_set *set)
{
	void *ptrs[ATB_RUNNER_MAX_BUFFERS];
	struct atb_kernel_args args;
	size_t i;

	for (i = 0; i < d->n; i++)
		ptrs[i] = (void *)(uintptr_t)d->p[i];
	args.buffers = ptrs;
	args.ints = set->ints;
	args.reals = set->reals;
	args.nbuffers = (int)d->n;
	args.nints = (int)set->nints;
	args.nreals = (int)set->nreals;
	args.stream = atb_cuda_stream(rt->cu);
	(void)rt;
	return a->fn(&args);
}

/*
 * Call and wait for the whole device.  Returns the kernel's status; a fault
 * in the context (an illegal address) is sticky: -1000 and rt->sticky set.
 */
static int call_sync(struct crt *rt, const struct carm *a, const struct dbufs *d,
		     const struct atb_runner_set *set)
{
	struct atb_error err;
	int rc = call_kernel(rt, a, d, set);

	atb_error_clear(&err);
	if (atb_cuda_ctx_sync(rt->cu, &err)) {
		rt->sticky = 1;
		snprintf(rt->msg, sizeof(rt->msg), "arm '%s' faulted on the device: %s",
			 a->arm->name, err.msg);
		return -1000;
	}
	return rc;
}

/* ---- comparison (the cpu backend's rule) -------------------------------- */

struct cmp {
	double max_abs, max_rel;
	long long first_bad;
	double bad_ref, bad_got;
	size_t nbad, nnan;
};

static double elem(const void *p, enum atb_dtype d, size_t k)
{
	switch (d) {
	case ATB_DTYPE_FP32:
		return ((const float *)p)[k];
	case ATB_DTYPE_FP64:
		return ((const double *)p)[k];
	case ATB_DTYPE_INT32:
		return ((const int32_t *)p)[k];
	case ATB_DTYPE_INT64:
		return (double)((const int64_t *)p)[k];
	}
	return NAN;
}

/* PROTO: correctness.tolerances -- |got - ref| <= atol + rtol * |ref|. */
static void compare(const void *ref, const void *got, enum atb_dtype d, size_t n,
		    double atol, double rtol, struct cmp *c)
{
	size_t k;

	memset(c, 0, sizeof(*c));
	c->first_bad = -1;
	for (k = 0; k < n; k++) {
		double r = elem(ref, d, k), g = elem(got, d, k), ad, rd;
		int ok;

		if (d == ATB_DTYPE_INT64 &&
		    ((const int64_t *)ref)[k] == ((const int64_t *)got)[k])
			continue;
		if (isnan(g) && !isnan(r))
			c->nnan++;
		if (isnan(r) || isnan(g)) {
			ok = isnan(r) && isnan(g);
			ad = rd = 0;
		} else if (isinf(r) || isinf(g)) {
			ok = r == g;
			ad = rd = ok ? 0 : INFINITY;
		} else {
			ad = fabs(g - r);
			rd = r != 0 ? ad / fabs(r) : (ad ? INFINITY : 0);
			ok = ad <= atol + rtol * fabs(r);
		}
		if (ad > c->max_abs)
			c->max_abs = ad;
		if (rd > c->max_rel)
			c->max_rel = rd;
		if (!ok) {
			if (c->first_bad < 0) {
				c->first_bad = (long long)k;
				c->bad_ref = r;
				c->bad_got = g;
			}
			c->nbad++;
		}
	}
}

static void tolerance_for(const struct atb_runner_job *job, enum atb_dtype d, double *atol,
			  double *rtol)
{
	size_t i;

	*atol = *rtol = 0;
	for (i = 0; i < job->ntolerances; i++)
		if (!strcmp(job->tolerances[i].dtype, atb_dtype_name(d))) {
			*atol = job->tolerances[i].atol;
			*rtol = job->tolerances[i].rtol;
		}
}

static int outputs_match(const struct atb_runner_job *job, const struct atb_runner_set *set,
			 const struct hbufs *ref, const struct hbufs *got, json_t *arr,
			 struct cmp *worst, const char **worst_name)
{
	size_t i;
	int pass = 1;

	if (worst) {
		memset(worst, 0, sizeof(*worst));
		worst->first_bad = -1;
	}
	for (i = 0; i < job->nbuffers; i++) {
		const struct atb_runner_buffer *bf = &job->buffers[i];
		double atol, rtol;
		struct cmp c;

		if (bf->role == ATB_BUFFER_IN)
			continue;
		tolerance_for(job, bf->dtype, &atol, &rtol);
		compare(ref->p[i], got->p[i], bf->dtype, set->counts[i], atol, rtol, &c);
		if (c.nbad)
			pass = 0;
		if (arr)
			json_array_append_new(arr, json_pack(
				"{s:s, s:s, s:b, s:o, s:o, s:I, s:I, s:I, s:f, s:f}",
				"name", bf->name, "dtype", atb_dtype_name(bf->dtype),
				"pass", !c.nbad, "max_abs_err", runner_real(c.max_abs),
				"max_rel_err", runner_real(c.max_rel),
				"first_bad_index", (json_int_t)c.first_bad,
				"bad_count", (json_int_t)c.nbad, "nan_count", (json_int_t)c.nnan,
				"atol", atol, "rtol", rtol));
		if (worst) {
			if (c.max_abs > worst->max_abs)
				worst->max_abs = c.max_abs;
			if (c.max_rel > worst->max_rel)
				worst->max_rel = c.max_rel;
			worst->nnan += c.nnan;
			worst->nbad += c.nbad;
			if (worst->first_bad < 0 && c.first_bad >= 0) {
				worst->first_bad = c.first_bad;
				worst->bad_ref = c.bad_ref;
				worst->bad_got = c.bad_got;
				*worst_name = bf->name;
			}
		}
	}
	return pass;
}

/* ---- one call on fresh device buffers ------------------------------------ */

/*
 * Run arm a on host inputs `in` in the device buffers d (allocated by the
 * caller): upload, poison, call, wait, download everything into out.
 * Returns the kernel status; -1 on a runner failure (rt->msg), -1000 sticky.
 */
static int run_on(struct crt *rt, const struct carm *a, const struct atb_runner_set *set,
		  struct dbufs *d, const struct hbufs *in, struct hbufs *out)
{
	int krc;

	if (d_upload_inputs(rt, d, in) || d_poison(rt, d))
		return -1;
	krc = call_sync(rt, a, d, set);
	if (krc == -1000)
		return krc;
	if (d_download(rt, out, d))
		return -1;
	return krc;
}

static int run_reference(struct crt *rt, const struct atb_runner_set *set,
			 const struct hbufs *in, struct hbufs *out)
{
	const struct carm *ref = &rt->arms[rt->job->reference];
	struct dbufs d;
	int rc;

	if (h_alloc(out, rt->job, set) || d_alloc(rt, &d, set))
		return -1;
	rc = run_on(rt, ref, set, &d, in, out);
	d_free(rt, &d);
	if (rc > 0 || rc < -1) {
		if (rc != -1000)
			snprintf(rt->msg, sizeof(rt->msg), "reference arm '%s' returned %d on set '%s'",
				 ref->arm->name, rc, set->name);
		return -2;
	}
	return rc;
}

struct reuse {
	int follows;
	const char *failed_step;
};

/* PROTO: gates result_reuse -- as the cpu backend, on device allocations. */
static int check_reuse(struct crt *rt, const struct carm *a, const struct atb_runner_set *set,
		       const struct hbufs *in_a, const struct hbufs *ref_a,
		       const struct hbufs *in_b, const struct hbufs *ref_b, struct reuse *res)
{
	const struct atb_runner_job *job = rt->job;
	struct dbufs x = {0}, y = {0};
	struct hbufs got = {0};
	int rc = -1, k;

	res->follows = 1;
	res->failed_step = NULL;
	if (h_alloc(&got, job, set) || d_alloc(rt, &x, set) || d_alloc(rt, &y, set))
		goto out;
	k = run_on(rt, a, set, &x, in_a, &got);
	if (k == -1 || k == -1000)
		goto out;
	if (k) {
		res->failed_step = "kernel_failed";
		goto failed;
	}
	if (!outputs_match(job, set, ref_a, &got, NULL, NULL, NULL)) {
		res->failed_step = "fresh_inputs_a";
		goto failed;
	}
	k = run_on(rt, a, set, &y, in_b, &got);
	if (k == -1 || k == -1000)
		goto out;
	if (k) {
		res->failed_step = "kernel_failed";
		goto failed;
	}
	if (!outputs_match(job, set, ref_b, &got, NULL, NULL, NULL)) {
		res->failed_step = "fresh_inputs_b";
		goto failed;
	}
	k = run_on(rt, a, set, &x, in_b, &got);
	if (k == -1 || k == -1000)
		goto out;
	if (k) {
		res->failed_step = "kernel_failed";
		goto failed;
	}
	if (!outputs_match(job, set, ref_b, &got, NULL, NULL, NULL))
		res->failed_step = "same_buffers_new_inputs";
	if (res->failed_step)
		goto failed;
	rc = 0;
	goto out;
failed:
	res->follows = 0;
	rc = 0;
out:
	h_free(&got);
	d_free(rt, &x);
	d_free(rt, &y);
	return rc;
}

/* Output aliasing: does any output's device range overlap another buffer's? */
static json_t *aliasing_fact(const struct atb_runner_job *job, const struct dbufs *d)
{
	json_t *over = json_array();
	size_t i, k;

	for (i = 0; over && i < job->nbuffers; i++) {
		if (job->buffers[i].role == ATB_BUFFER_IN)
			continue;
		for (k = 0; k < job->nbuffers; k++)
			if (k != i && d->p[i] < d->p[k] + d->bytes[k] &&
			    d->p[k] < d->p[i] + d->bytes[i])
				json_array_append_new(over, json_pack("[s,s]", job->buffers[i].name,
								      job->buffers[k].name));
	}
	return json_pack("{s:b, s:o, s:s}", "checked", 1, "overlaps", over ? over : json_array(),
			 "how", "device address ranges of every output against every other buffer");
}

static int hash_inputs(const struct atb_runner_job *job, const struct hbufs *b,
		       char (*out)[ATB_SHA256_HEX_LEN + 1])
{
	size_t i;

	for (i = 0; i < job->nbuffers; i++)
		if (job->buffers[i].role == ATB_BUFFER_IN &&
		    atbi_sha256_hex(b->p[i], b->bytes[i], out[i]))
			return -1;
	return 0;
}

static int check_input_set(struct crt *rt, uint64_t seed, size_t si, int dist,
			   size_t *failures, size_t *nevents)
{
	const struct atb_runner_job *job = rt->job;
	const struct atb_runner_set *set = &job->sets[si];
	struct hbufs in_a = {0}, in_b = {0}, ref_a = {0}, ref_b = {0}, got = {0};
	const char *input = dist < 0 ? "task" : job->dists[dist].name;
	const char *reason = "nomem";
	size_t ai, i;
	int rc = -1, r;

	if (h_alloc(&in_a, job, set) || h_alloc(&in_b, job, set) || h_alloc(&got, job, set) ||
	    gen_inputs(&in_a, job, set, seed, si, dist, 0) ||
	    gen_inputs(&in_b, job, set, seed, si, dist, 1)) {
		snprintf(rt->msg, sizeof(rt->msg), "cannot allocate correctness inputs");
		goto out;
	}
	r = run_reference(rt, set, &in_a, &ref_a);
	if (!r)
		r = run_reference(rt, set, &in_b, &ref_b);
	if (r) {
		reason = r == -2 ? "reference_failed" : "cuda";
		goto out;
	}
	for (ai = 0; ai < job->narms; ai++) {
		const struct carm *a = &rt->arms[ai];
		char before[ATB_RUNNER_MAX_BUFFERS][ATB_SHA256_HEX_LEN + 1];
		char after[ATB_RUNNER_MAX_BUFFERS][ATB_SHA256_HEX_LEN + 1];
		struct dbufs d = {0};
		struct cmp worst;
		const char *worst_name = NULL;
		json_t *bufarr, *mutated, *ev, *first_bad, *alias;
		struct reuse reuse;
		int pass, krc, aliased;

		if (ai == job->reference || !strcmp(a->arm->name, "baseline_alone"))
			continue;
		memset(before, 0, sizeof(before));
		memset(after, 0, sizeof(after));
		if (d_alloc(rt, &d, set)) {
			reason = "cuda";
			goto out;
		}
		/* PROTO: gates input_mutation -- the inputs as sent, and as read back. */
		hash_inputs(job, &in_a, before);
		krc = run_on(rt, a, set, &d, &in_a, &got);
		alias = aliasing_fact(job, &d);
		d_free(rt, &d);
		if (krc == -1 || krc == -1000) {
			json_decref(alias);
			reason = krc == -1000 ? "kernel_fault" : "cuda";
			goto out;
		}
		aliased = alias && json_array_size(json_object_get(alias, "overlaps")) > 0;
		hash_inputs(job, &got, after);
		bufarr = json_array();
		mutated = json_array();
		for (i = 0; i < job->nbuffers; i++)
			if (job->buffers[i].role == ATB_BUFFER_IN && strcmp(before[i], after[i]))
				json_array_append_new(mutated, json_string(job->buffers[i].name));
		pass = outputs_match(job, set, &ref_a, &got, bufarr, &worst, &worst_name) && !krc;
		memset(&reuse, 0, sizeof(reuse));
		reuse.follows = 1;
		if (pass && check_reuse(rt, a, set, &in_a, &ref_a, &in_b, &ref_b, &reuse)) {
			json_decref(bufarr);
			json_decref(mutated);
			json_decref(alias);
			reason = rt->sticky ? "kernel_fault" : "cuda";
			goto out;
		}
		if (!pass || json_array_size(mutated) || !reuse.follows || aliased)
			(*failures)++;
		first_bad = worst.first_bad < 0 ? json_null()
			: json_pack("{s:s, s:I, s:o, s:o}", "buffer", worst_name,
				    "index", (json_int_t)worst.first_bad,
				    "ref", runner_real(worst.bad_ref),
				    "got", runner_real(worst.bad_got));
		ev = json_pack("{s:s, s:I, s:s, s:s, s:i, s:s, s:i, s:b, s:i, s:o, s:o, s:o,"
			       " s:I, s:I, s:o,"
			       " s:{s:{s:b, s:o}, s:{s:b, s:b, s:o}, s:o}}",
			       "event", "correctness", "seed", (json_int_t)seed,
			       "arm", a->arm->name, "set", set->name, "set_index", (int)si,
			       "input", input, "input_index", dist + 1,
			       "pass", pass, "kernel_status", krc,
			       "max_abs_err", runner_real(worst.max_abs),
			       "max_rel_err", runner_real(worst.max_rel),
			       "first_bad", first_bad,
			       "bad_count", (json_int_t)worst.nbad,
			       "nan_count", (json_int_t)worst.nnan,
			       "buffers", bufarr,
			       "gates",
			       "input_mutation", "checked", 1, "mutated", mutated,
			       "result_reuse", "checked", pass, "follows_inputs", reuse.follows,
			       "failed_step", reuse.failed_step ? json_string(reuse.failed_step)
								 : json_null(),
			       "output_aliasing", alias ? alias : json_null());
		if (runner_emit(ev)) {
			fprintf(stderr, "atb-runner: cannot write a correctness event\n");
			goto out;
		}
		(*nevents)++;
	}
	rc = 0;
out:
	if (rc && rt->msg[0])
		runner_emit_error(reason, rt->msg);
	h_free(&in_a);
	h_free(&in_b);
	h_free(&ref_a);
	h_free(&ref_b);
	h_free(&got);
	return rc;
}

static int any_adversarial(const struct atb_runner_job *job)
{
	size_t i;

	for (i = 0; i < job->nbuffers; i++)
		if (is_input(&job->buffers[i]) && job->buffers[i].adversarial)
			return 1;
	return 0;
}

/* ---- timing ------------------------------------------------------------- */

struct timing_ctx {
	struct crt *rt;
	const struct carm *arms[ATB_RUNNER_MAX_ARMS];
	struct dbufs *bufs[ATB_RUNNER_MAX_ARMS];
	const struct atb_runner_set *set;
};

static int timed_call(void *ctx, size_t arm)
{
	struct timing_ctx *t = ctx;

	return call_kernel(t->rt, t->arms[arm], t->bufs[arm], t->set);
}

static json_t *gpu_json(const struct atb_cuda_gpu_sample *s)
{
	if (!s->valid)
		return json_pack("{s:b, s:s}", "valid", 0, "why", s->why);
	return json_pack("{s:b, s:i, s:i, s:i, s:I, s:b, s:i, s:i}", "valid", 1,
			 "sm_clock_mhz", (int)s->sm_clock_mhz, "mem_clock_mhz",
			 (int)s->mem_clock_mhz, "sm_clock_max_mhz", (int)s->sm_clock_max_mhz,
			 "throttle_reasons", (json_int_t)s->throttle_reasons, "throttled",
			 s->throttled, "temperature_c", s->temperature_c, "power_mw",
			 (int)s->power_mw);
}

static int emit_samples(const struct atb_timing_seed *s, const char *group,
			const char *const *names, size_t narms, int throttled)
{
	size_t ai, k;

	for (ai = 0; ai < narms; ai++) {
		const struct atb_timing_arm *a = &s->arms[ai];
		json_t *times = json_array(), *round = json_array(), *pos = json_array(),
		       *with = json_array();

		if (!times || !round || !pos || !with)
			goto nomem;
		for (k = 0; k < a->ntrials; k++)
			if (json_array_append_new(times, json_integer(a->times_ns[k])) ||
			    json_array_append_new(round, json_integer(a->round[k])) ||
			    json_array_append_new(pos, json_integer(a->position[k])))
				goto nomem;
		for (k = 0; k < narms; k++)
			if (k != ai)
				json_array_append_new(with, json_string(names[k]));
		if (runner_emit(json_pack(
			    "{s:s, s:I, s:s, s:s, s:o, s:s, s:I, s:i, s:o, s:o, s:o, s:i,"
			    " s:I, s:o, s:o, s:I, s:b}",
			    "event", "samples", "seed", (json_int_t)s->seed, "arm", names[ai],
			    "group", group, "paired_with", with,
			    "stop", atb_timing_stop_name(s->stop),
			    "trials", (json_int_t)a->ntrials, "rounds", s->rounds,
			    "times_ns", times, "round", round, "position", pos,
			    "warmup_iterations", a->warmup_iterations,
			    "warmup_ns", (json_int_t)a->warmup_ns,
			    "median_ns", runner_real(a->median_ns),
			    "ci_rel_halfwidth", runner_real(a->ci_rel_halfwidth),
			    "seed_elapsed_ns", (json_int_t)s->elapsed_ns,
			    "throttled", throttled)))
			return -1;
		continue;
nomem:
		json_decref(times);
		json_decref(round);
		json_decref(pos);
		json_decref(with);
		return -1;
	}
	return 0;
}

/*
 * Side-stream escape (PROTO: gates side_stream): the call bracketed by
 * events on the runner's stream, then the stream waited for, then the
 * whole context.  Work a candidate launched on another stream and left
 * running shows up as device-wide completion long after the event window.
 */
static int side_stream_check(struct crt *rt, const struct carm *a, struct dbufs *d,
			     const struct atb_runner_set *set, uint64_t seed)
{
	struct atb_cuda_events *e = NULL;
	struct atb_error err;
	int64_t event_ns = -1, t0, extra_ns;
	int krc, escaped;

	atb_error_clear(&err);
	if (atb_cuda_ctx_sync(rt->cu, &err) || atb_cuda_events_new(rt->cu, &e, &err) ||
	    atb_cuda_events_record_start(e, &err))
		goto fail;
	krc = call_kernel(rt, a, d, set);
	if (atb_cuda_events_record_stop(e, &err) || atb_cuda_events_elapsed_ns(e, &event_ns, &err))
		goto fail;
	t0 = atbi_monotonic_ns();
	if (atb_cuda_ctx_sync(rt->cu, &err))
		goto fail;
	extra_ns = atbi_monotonic_ns() - t0;
	atb_cuda_events_free(e);
	/* A bare cuCtxSynchronize on an idle device takes a few microseconds. */
	escaped = extra_ns > 50000 && (double)extra_ns > 0.1 * (double)event_ns;
	return runner_emit(json_pack("{s:s, s:I, s:s, s:i, s:I, s:I, s:b}", "event", "side_stream",
				     "seed", (json_int_t)seed, "arm", a->arm->name,
				     "kernel_status", krc, "event_ns", (json_int_t)event_ns,
				     "device_extra_ns", (json_int_t)extra_ns, "escaped", escaped))
		       ? -1 : escaped;
fail:
	atb_cuda_events_free(e);
	rt->sticky = 1;
	return fail(rt, "side-stream check failed", &err);
}

static int time_seed(struct crt *rt, struct atb_timer *timer, uint64_t seed, size_t *escapes)
{
	const struct atb_runner_job *job = rt->job;
	const struct atb_runner_set *set = &job->timing_set;
	struct hbufs in = {0};
	struct dbufs per_arm[ATB_RUNNER_MAX_ARMS];
	struct timing_ctx tc = {.rt = rt, .set = set};
	const char *names[ATB_RUNNER_MAX_ARMS];
	struct atb_cuda_gpu_sample g0, g1;
	size_t np = 0, ai, alone = SIZE_MAX;
	struct atb_timing_seed res;
	struct atb_error err;
	char msg[1400];
	int rc = -1, throttled;

	memset(per_arm, 0, sizeof(per_arm));
	atb_error_clear(&err);
	if (h_alloc(&in, job, set) || gen_inputs(&in, job, set, seed, 0, -1, 2)) {
		runner_emit_error("nomem", "cannot allocate timing inputs");
		goto out;
	}
	for (ai = 0; ai < job->narms; ai++) {
		int esc;

		if (d_alloc(rt, &per_arm[ai], set) || d_upload_inputs(rt, &per_arm[ai], &in) ||
		    d_poison(rt, &per_arm[ai])) {
			runner_emit_error("cuda", rt->msg);
			goto out;
		}
		esc = side_stream_check(rt, &rt->arms[ai], &per_arm[ai], set, seed);
		if (esc < 0) {
			runner_emit_error(rt->sticky ? "kernel_fault" : "internal", rt->msg);
			goto out;
		}
		*escapes += (size_t)esc;
		if (!strcmp(job->arms[ai].name, "baseline_alone")) {
			alone = ai;
			continue;
		}
		tc.arms[np] = &rt->arms[ai];
		tc.bufs[np] = &per_arm[ai];
		names[np++] = job->arms[ai].name;
	}
	atb_cuda_gpu_sample(atb_cuda_info(rt->cu)->pci_bus_id, &g0);
	if (np) {
		if (atb_timing_run_seed(&job->timing, timer, seed, np, timed_call, &tc, &res,
					&err)) {
			atb_error_format(&err, msg, sizeof(msg));
			if (atb_cuda_timer_error(timer)[0])
				snprintf(msg, sizeof(msg), "%s", atb_cuda_timer_error(timer));
			runner_emit_error(err.status == ATB_ERR_CHECK ? "kernel_failed" : "timing",
					  msg);
			atb_timing_seed_release(&res);
			goto out;
		}
		atb_cuda_gpu_sample(atb_cuda_info(rt->cu)->pci_bus_id, &g1);
		throttled = g0.throttled || g1.throttled;
		rc = emit_samples(&res, "paired", names, np, throttled);
		atb_timing_seed_release(&res);
		if (rc)
			goto out;
		rc = -1;
	}
	if (alone != SIZE_MAX) {
		tc.arms[0] = &rt->arms[alone];
		tc.bufs[0] = &per_arm[alone];
		names[0] = job->arms[alone].name;
		if (atb_timing_run_seed(&job->timing, timer, seed, 1, timed_call, &tc, &res,
					&err)) {
			atb_error_format(&err, msg, sizeof(msg));
			runner_emit_error(err.status == ATB_ERR_CHECK ? "kernel_failed" : "timing",
					  msg);
			atb_timing_seed_release(&res);
			goto out;
		}
		atb_cuda_gpu_sample(atb_cuda_info(rt->cu)->pci_bus_id, &g1);
		rc = emit_samples(&res, "alone", names, 1, g0.throttled || g1.throttled);
		atb_timing_seed_release(&res);
		if (rc)
			goto out;
	}
	atb_cuda_gpu_sample(atb_cuda_info(rt->cu)->pci_bus_id, &g1);
	if (runner_emit(json_pack("{s:s, s:I, s:o, s:o}", "event", "gpu_state", "seed",
				  (json_int_t)seed, "before", gpu_json(&g0), "after",
				  gpu_json(&g1))))
		goto out;
	rc = 0;
out:
	h_free(&in);
	for (ai = 0; ai < job->narms; ai++)
		d_free(rt, &per_arm[ai]);
	return rc;
}

/* ---- env and the job ------------------------------------------------- */

static int load_arms(struct crt *rt)
{
	const struct atb_runner_job *job = rt->job;
	char msg[1200];
	size_t i;

	for (i = 0; i < job->narms; i++) {
		struct carm *a = &rt->arms[i];
		struct atb_error err;
		char *data = NULL;
		size_t len = 0;
		void *sym;

		a->arm = &job->arms[i];
		atb_error_clear(&err);
		if (atbi_read_file(a->arm->so, &data, &len, &err)) {
			snprintf(msg, sizeof(msg), "cannot load arm '%s': %s", a->arm->name, err.msg);
			runner_emit_error("dlopen", msg);
			return -1;
		}
		atbi_sha256_hex(data, len, a->sha256);
		atb_free(data);
		a->dl = dlopen(a->arm->so, RTLD_NOW | RTLD_LOCAL);
		if (!a->dl) {
			snprintf(msg, sizeof(msg), "cannot load arm '%s' from '%s': %s",
				 a->arm->name, a->arm->so, dlerror());
			runner_emit_error("dlopen", msg);
			return -1;
		}
		sym = dlsym(a->dl, ATB_KERNEL_SYMBOL);
		if (!sym) {
			snprintf(msg, sizeof(msg), "no symbol '%s' in arm '%s' ('%s')",
				 ATB_KERNEL_SYMBOL, a->arm->name, a->arm->so);
			runner_emit_error("no_symbol", msg);
			return -1;
		}
		memcpy(&a->fn, &sym, sizeof(a->fn));
	}
	return 0;
}

static int emit_env(const struct crt *rt, const struct atb_timer *timer, size_t l2_flush)
{
	const struct atb_runner_job *job = rt->job;
	const struct atb_cuda_device_info *d = atb_cuda_info(rt->cu);
	struct atb_cuda_gpu_sample g;
	json_t *arms = json_array();
	char cc[24];
	size_t i;

	snprintf(cc, sizeof(cc), "%d.%d", d->cc_major, d->cc_minor);
	if (!arms)
		return -1;
	for (i = 0; i < job->narms; i++)
		json_array_append_new(arms, json_pack("{s:s, s:s, s:s}", "name",
						      rt->arms[i].arm->name, "so",
						      rt->arms[i].arm->so, "sha256",
						      rt->arms[i].sha256));
	atb_cuda_gpu_sample(d->pci_bus_id, &g);
	return runner_emit(json_pack(
		"{s:s, s:s, s:I, s:o, s:{s:s, s:s, s:i, s:s, s:i, s:I, s:I, s:i, s:i, s:i, s:I},"
		" s:I, s:I, s:b, s:s, s:I, s:i, s:o}",
		"event", "env", "backend", "cuda", "clock_resolution_ns",
		(json_int_t)timer->ops->resolution_ns(timer->state), "arms", arms,
		"device", "name", d->name, "pci_bus_id", d->pci_bus_id, "ordinal", d->ordinal,
		"compute_capability", cc,
		"sm_count", d->sm_count, "l2_bytes", (json_int_t)d->l2_bytes,
		"total_mem_bytes", (json_int_t)d->total_mem_bytes, "sm_clock_khz",
		d->sm_clock_khz, "mem_clock_khz", d->mem_clock_khz, "driver_version",
		d->driver_version, "persisting_l2_max_bytes",
		(json_int_t)d->persisting_l2_max_bytes,
		"cache_bytes", (json_int_t)job->cache_bytes, "flush_bytes",
		(json_int_t)l2_flush, "flush_enabled", job->timing.flush, "timer",
		timer->ops->name, "spin_ns", (json_int_t)ATB_CUDA_SPIN_NS, "seeds",
		(int)job->nseeds, "gpu", gpu_json(&g)));
}

int runner_cuda_run(const struct atb_runner_job *job)
{
	struct crt *rt = atb_calloc(1, sizeof(*rt));
	struct atb_timer *timer = NULL;
	struct atb_error err;
	size_t si, k, failures = 0, nevents = 0, flush_bytes = 0, escapes = 0;
	int64_t t0 = atbi_monotonic_ns();
	const char *timing = "done";
	char msg[1200];
	int dist, rc = RUNNER_EXIT_FAILED;

	if (!rt) {
		runner_emit_error("nomem", "cannot start the cuda backend");
		return rc;
	}
	rt->job = job;
	atb_error_clear(&err);
	if (atb_cuda_open(0, &rt->cu, &err)) {
		atb_error_format(&err, msg, sizeof(msg));
		runner_emit_error(err.status == ATB_ERR_NOT_FOUND ? "no_cuda" : "cuda", msg);
		atb_free(rt);
		return rc;
	}
	/* PROTO: timing.cache_flush -- factor x the larger of the job's cache and
	 * this GPU's L2, at least min_bytes. */
	if (job->timing.flush) {
		size_t cache = atb_cuda_info(rt->cu)->l2_bytes;

		if (job->cache_bytes > cache)
			cache = job->cache_bytes;
		flush_bytes = atb_timing_flush_bytes(cache, job->cache_flush_factor,
						     job->cache_flush_min_bytes);
	}
	if (atb_cuda_timer_new(rt->cu, flush_bytes, ATB_CUDA_SPIN_NS, &timer, &err)) {
		atb_error_format(&err, msg, sizeof(msg));
		runner_emit_error(err.status == ATB_ERR_NOMEM ? "nomem" : "timer", msg);
		goto out;
	}
	if (load_arms(rt) || emit_env(rt, timer, flush_bytes))
		goto out;
	for (k = 0; k < job->nseeds; k++)
		for (si = 0; si < job->nsets; si++)
			for (dist = -1; dist < (int)job->ndists; dist++) {
				if (dist >= 0 && !any_adversarial(job))
					break;
				if (check_input_set(rt, job->seeds[k], si, dist, &failures,
						    &nevents))
					goto out;
			}
	if (job->skip_timing)
		timing = "skipped";
	else if (failures && !job->time_if_incorrect)
		timing = "skipped_incorrect";
	else
		for (k = 0; k < job->nseeds; k++)
			if (time_seed(rt, timer, job->seeds[k], &escapes))
				goto out;
	if (!runner_emit(json_pack("{s:s, s:i, s:I, s:I, s:s, s:I, s:I}", "event", "done",
				   "seeds", (int)job->nseeds,
				   "correctness_events", (json_int_t)nevents,
				   "correctness_failures", (json_int_t)failures,
				   "timing", timing, "side_stream_escapes", (json_int_t)escapes,
				   "elapsed_ns", (json_int_t)(atbi_monotonic_ns() - t0))))
		rc = RUNNER_EXIT_OK;
out:
	atb_timer_free(timer);
	/* After a device fault the context is unusable; leave it to process exit. */
	if (!rt->sticky)
		atb_cuda_close(rt->cu);
	atb_free(rt);
	return rc;
}
