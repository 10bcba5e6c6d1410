/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * atb-runner's cpu backend: load each arm's shared object, generate seeded
 * inputs, run the correctness checks (poisoned outputs, reference against
 * candidate on separate copies, input mutation, result reuse) and the paired
 * timing through the one timing core.  Every buffer is its own allocation,
 * so no output can alias an input or another arm's buffer.
 *
 * Does not: decide pass or fail of a candidate as a whole, compute ratios,
 * or retry anything; it reports what it saw.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>

#include "atb/alloc.h"
#include "atb/kernel.h"
#include "atb/timing.h"
#include "runner_int.h"
#include "util.h"
#include "banned.h"

struct arm_rt {
	const struct atb_runner_arm *arm;
	void *dl;
	atb_kernel_fn fn;
	char sha256[ATB_SHA256_HEX_LEN + 1];
};

/* One set of buffers: every buffer its own allocation. */
struct bufs {
	void *p[ATB_RUNNER_MAX_BUFFERS];
	size_t bytes[ATB_RUNNER_MAX_BUFFERS];
	size_t n;
};

struct rt {
	const struct atb_runner_job *job;
	struct arm_rt arms[ATB_RUNNER_MAX_ARMS];
};

/* ---- buffers ------------------------------------------------------------ */

static void bufs_free(struct bufs *b)
{
	size_t i;

	for (i = 0; i < b->n; i++)
		atb_free(b->p[i]);
	memset(b, 0, sizeof(*b));
}

static int bufs_alloc(struct bufs *b, const struct atb_runner_job *job,
		      const struct atb_runner_set *set)
{
	size_t i;

	memset(b, 0, sizeof(*b));
	for (i = 0; i < job->nbuffers; i++) {
		b->bytes[i] = set->counts[i] * atb_dtype_size(job->buffers[i].dtype);
		b->p[i] = atb_malloc(b->bytes[i]);
		b->n = i + 1;
		if (!b->p[i]) {
			bufs_free(b);
			return -1;
		}
	}
	return 0;
}

static int is_input(const struct atb_runner_buffer *b)
{
	return b->role != ATB_BUFFER_OUT;
}

/* Copy the inputs of src into dst (same shapes). */
static void copy_inputs(struct bufs *dst, const struct bufs *src,
			const struct atb_runner_job *job)
{
	size_t i;

	for (i = 0; i < job->nbuffers; i++)
		if (is_input(&job->buffers[i]))
			memcpy(dst->p[i], src->p[i], src->bytes[i]);
}

/* PROTO: correctness.poison -- NaN for reals, the type's minimum for integers. */
static void poison_outputs(struct bufs *b, const struct atb_runner_job *job,
			   const struct atb_runner_set *set)
{
	size_t i, k;

	for (i = 0; i < job->nbuffers; i++) {
		if (job->buffers[i].role != ATB_BUFFER_OUT)
			continue;
		for (k = 0; k < set->counts[i]; k++) {
			switch (job->buffers[i].dtype) {
			case ATB_DTYPE_FP32:
				((float *)b->p[i])[k] = NAN;
				break;
			case ATB_DTYPE_FP64:
				((double *)b->p[i])[k] = NAN;
				break;
			case ATB_DTYPE_INT32:
				((int32_t *)b->p[i])[k] = INT32_MIN;
				break;
			case ATB_DTYPE_INT64:
				((int64_t *)b->p[i])[k] = INT64_MIN;
				break;
			}
		}
	}
}

/* A splitmix64 step: decorrelates the generator seeds of nearby inputs. */
static uint64_t mix(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ULL;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/*
 * Fill the inputs for (seed, set, dist, stream) deterministically: one GSL
 * mt19937 per buffer seeded from all four and the buffer index.  dist -1 is
 * the task's own generator; otherwise the protocol's distribution dist is
 * used for buffers marked adversarial.  stream separates the correctness
 * inputs (0), the result-reuse second inputs (1) and the timing inputs (2).
 */
static int gen_inputs(struct bufs *b, const struct atb_runner_job *job,
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

static int call_kernel(const struct arm_rt *a, const struct bufs *b,
		       const struct atb_runner_set *set)
{
	struct atb_kernel_args args = {
		.buffers = b->p,
		.ints = set->ints,
		.reals = set->reals,
		.nbuffers = (int)b->n,
		.nints = (int)set->nints,
		.nreals = (int)set->nreals,
		.stream = NULL,
	};

	return a->fn(&args);
}

/* ---- comparison --------------------------------------------------------- */

struct cmp {
	double max_abs, max_rel;
	long long first_bad;  /* -1 when none */
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

/*
 * PROTO: correctness.tolerances -- |got - ref| <= atol + rtol * |ref|; NaN
 * where the reference is finite fails (an unwritten, poisoned element).
 * Integers compare exactly unless the tolerance says otherwise.
 */
static void compare(const void *ref, const void *got, enum atb_dtype d, size_t n,
		    double atol, double rtol, struct cmp *c)
{
	size_t k;

	memset(c, 0, sizeof(*c));
	c->first_bad = -1;
	for (k = 0; k < n; k++) {
		double r, g, ad, rd;
		int ok;

		if (d == ATB_DTYPE_INT64) {
			int64_t ri = ((const int64_t *)ref)[k], gi = ((const int64_t *)got)[k];

			if (ri == gi)
				continue;
		}
		r = elem(ref, d, k);
		g = elem(got, d, k);
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
		if (d == ATB_DTYPE_INT64 && !ok)
			ok = 0;  /* exact compare above already passed equal ones */
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

static void tolerance_for(const struct atb_runner_job *job, enum atb_dtype d,
			  double *atol, double *rtol)
{
	size_t i;

	*atol = *rtol = 0;
	for (i = 0; i < job->ntolerances; i++)
		if (!strcmp(job->tolerances[i].dtype, atb_dtype_name(d))) {
			*atol = job->tolerances[i].atol;
			*rtol = job->tolerances[i].rtol;
		}
}

/* Do every output of got match ref?  Fills per-buffer facts into arr when given. */
static int outputs_match(const struct atb_runner_job *job, const struct atb_runner_set *set,
			 const struct bufs *ref, const struct bufs *got, json_t *arr,
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

/* ---- correctness ------------------------------------------------------- */

static int hash_inputs(const struct atb_runner_job *job, const struct bufs *b,
		       char (*out)[ATB_SHA256_HEX_LEN + 1])
{
	size_t i;

	for (i = 0; i < job->nbuffers; i++)
		if (job->buffers[i].role == ATB_BUFFER_IN &&
		    atbi_sha256_hex(b->p[i], b->bytes[i], out[i]))
			return -1;
	return 0;
}

struct reuse {
	int follows;           /* 1: outputs followed the inputs */
	const char *failed_step;
	int rc;                /* nonzero kernel return */
};

/*
 * Result reuse (PROTO: gates result_reuse): run the arm on inputs A in fresh
 * buffers, then on different inputs B in other fresh buffers while A's are
 * still alive (different pointers, different contents), then on B's contents
 * copied into A's buffers (same pointers, new contents).  Each output must
 * match the reference for its inputs; a kernel that caches results keyed on
 * anything but the full input contents fails one of the three.
 */
static int check_reuse(const struct rt *rt, const struct arm_rt *a,
		       const struct atb_runner_set *set, const struct bufs *in_a,
		       const struct bufs *ref_a, const struct bufs *in_b,
		       const struct bufs *ref_b, struct reuse *res)
{
	const struct atb_runner_job *job = rt->job;
	struct bufs x = {0}, y = {0};
	int rc = -1;

	res->follows = 1;
	res->failed_step = NULL;
	res->rc = 0;
	if (bufs_alloc(&x, job, set) || bufs_alloc(&y, job, set))
		goto out;
	copy_inputs(&x, in_a, job);
	poison_outputs(&x, job, set);
	if ((res->rc = call_kernel(a, &x, set)))
		goto fail_step;
	if (!outputs_match(job, set, ref_a, &x, NULL, NULL, NULL)) {
		res->follows = 0;
		res->failed_step = "fresh_inputs_a";
		rc = 0;
		goto out;
	}
	copy_inputs(&y, in_b, job);
	poison_outputs(&y, job, set);
	if ((res->rc = call_kernel(a, &y, set)))
		goto fail_step;
	if (!outputs_match(job, set, ref_b, &y, NULL, NULL, NULL)) {
		res->follows = 0;
		res->failed_step = "fresh_inputs_b";
		rc = 0;
		goto out;
	}
	copy_inputs(&x, in_b, job);
	poison_outputs(&x, job, set);
	if ((res->rc = call_kernel(a, &x, set)))
		goto fail_step;
	if (!outputs_match(job, set, ref_b, &x, NULL, NULL, NULL)) {
		res->follows = 0;
		res->failed_step = "same_buffers_new_inputs";
	}
	rc = 0;
	goto out;
fail_step:
	res->follows = 0;
	res->failed_step = "kernel_failed";
	rc = 0;
out:
	bufs_free(&x);
	bufs_free(&y);
	return rc;
}

/* The reference's outputs for the inputs in `in`, in fresh buffers. */
static int run_reference(const struct rt *rt, const struct atb_runner_set *set,
			 const struct bufs *in, struct bufs *out, char *msg, size_t msize)
{
	const struct arm_rt *ref = &rt->arms[rt->job->reference];
	int rc;

	if (bufs_alloc(out, rt->job, set)) {
		snprintf(msg, msize, "cannot allocate buffers for set '%s': out of memory",
			 set->name);
		return -1;
	}
	copy_inputs(out, in, rt->job);
	poison_outputs(out, rt->job, set);
	rc = call_kernel(ref, out, set);
	if (rc) {
		snprintf(msg, msize, "reference arm '%s' returned %d on set '%s'",
			 ref->arm->name, rc, set->name);
		return -2;
	}
	return 0;
}

/*
 * One input set: reference once, then every other arm.  Emits one
 * correctness event per arm.  *failures counts events with a failed fact.
 */
static int check_input_set(const struct rt *rt, uint64_t seed, size_t si, int dist,
			   size_t *failures, size_t *nevents)
{
	const struct atb_runner_job *job = rt->job;
	const struct atb_runner_set *set = &job->sets[si];
	struct bufs in_a = {0}, in_b = {0}, ref_a = {0}, ref_b = {0};
	char msg[512] = "";
	const char *input = dist < 0 ? "task" : job->dists[dist].name;
	size_t ai, i;
	int rc = -1, r;

	if (bufs_alloc(&in_a, job, set) || bufs_alloc(&in_b, job, set) ||
	    gen_inputs(&in_a, job, set, seed, si, dist, 0) ||
	    gen_inputs(&in_b, job, set, seed, si, dist, 1)) {
		runner_emit_error("nomem", "cannot allocate correctness inputs");
		goto out;
	}
	r = run_reference(rt, set, &in_a, &ref_a, msg, sizeof(msg));
	if (!r)
		r = run_reference(rt, set, &in_b, &ref_b, msg, sizeof(msg));
	if (r) {
		runner_emit_error(r == -1 ? "nomem" : "reference_failed", msg);
		goto out;
	}
	for (ai = 0; ai < job->narms; ai++) {
		const struct arm_rt *a = &rt->arms[ai];
		char before[ATB_RUNNER_MAX_BUFFERS][ATB_SHA256_HEX_LEN + 1];
		char after[ATB_RUNNER_MAX_BUFFERS][ATB_SHA256_HEX_LEN + 1];
		struct bufs c = {0};
		struct cmp worst;
		const char *worst_name = NULL;
		json_t *bufarr, *mutated, *ev, *first_bad;
		struct reuse reuse;
		int pass, krc;

		if (ai == job->reference || !strcmp(a->arm->name, "baseline_alone"))
			continue;
		memset(before, 0, sizeof(before));
		memset(after, 0, sizeof(after));
		bufarr = json_array();
		mutated = json_array();
		if (!bufarr || !mutated || bufs_alloc(&c, job, set)) {
			json_decref(bufarr);
			json_decref(mutated);
			runner_emit_error("nomem", "cannot allocate candidate buffers");
			goto out;
		}
		copy_inputs(&c, &in_a, job);
		poison_outputs(&c, job, set);
		/* PROTO: gates input_mutation -- hash every input before and after. */
		if (hash_inputs(job, &c, before)) {
			bufs_free(&c);
			json_decref(bufarr);
			json_decref(mutated);
			runner_emit_error("internal", "sha-256 failed");
			goto out;
		}
		krc = call_kernel(a, &c, set);
		hash_inputs(job, &c, after);
		for (i = 0; i < job->nbuffers; i++)
			if (job->buffers[i].role == ATB_BUFFER_IN && strcmp(before[i], after[i]))
				json_array_append_new(mutated, json_string(job->buffers[i].name));
		pass = !krc && outputs_match(job, set, &ref_a, &c, bufarr, &worst, &worst_name);
		if (krc)
			outputs_match(job, set, &ref_a, &c, bufarr, &worst, &worst_name);
		bufs_free(&c);
		/* Reuse is only a question for outputs that were right the first time. */
		memset(&reuse, 0, sizeof(reuse));
		reuse.follows = 1;
		if (pass && check_reuse(rt, a, set, &in_a, &ref_a, &in_b, &ref_b, &reuse)) {
			json_decref(bufarr);
			json_decref(mutated);
			runner_emit_error("nomem", "cannot allocate result-reuse buffers");
			goto out;
		}
		if (!pass || json_array_size(mutated) || !reuse.follows)
			(*failures)++;
		first_bad = worst.first_bad < 0 ? json_null()
			: json_pack("{s:s, s:I, s:o, s:o}", "buffer", worst_name,
				    "index", (json_int_t)worst.first_bad,
				    "ref", runner_real(worst.bad_ref),
				    "got", runner_real(worst.bad_got));
		ev = json_pack("{s:s, s:I, s:s, s:s, s:i, s:s, s:i, s:b, s:i, s:o, s:o, s:o,"
			       " s:I, s:I, s:o,"
			       " s:{s:{s:b, s:o}, s:{s:b, s:b, s:o}, s:{s:b, s:s}}}",
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
			       "output_aliasing", "checked", 0, "reason",
			       "impossible by construction: every buffer is its own allocation");
		if (runner_emit(ev)) {
			fprintf(stderr, "atb-runner: cannot write a correctness event\n");
			goto out;
		}
		(*nevents)++;
	}
	rc = 0;
out:
	bufs_free(&in_a);
	bufs_free(&in_b);
	bufs_free(&ref_a);
	bufs_free(&ref_b);
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
	const struct arm_rt *arms[ATB_RUNNER_MAX_ARMS];
	struct bufs *bufs[ATB_RUNNER_MAX_ARMS];
	const struct atb_runner_set *set;
};

static int timed_call(void *ctx, size_t arm)
{
	struct timing_ctx *t = ctx;

	return call_kernel(t->arms[arm], t->bufs[arm], t->set);
}

static int emit_samples(const struct atb_timing_seed *s, const char *group,
			const char *const *names, size_t narms)
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
			    " s:I, s:o, s:o, s:I}",
			    "event", "samples", "seed", (json_int_t)s->seed, "arm", names[ai],
			    "group", group, "paired_with", with,
			    "stop", atb_timing_stop_name(s->stop),
			    "trials", (json_int_t)a->ntrials, "rounds", s->rounds,
			    "times_ns", times, "round", round, "position", pos,
			    "warmup_iterations", a->warmup_iterations,
			    "warmup_ns", (json_int_t)a->warmup_ns,
			    "median_ns", runner_real(a->median_ns),
			    "ci_rel_halfwidth", runner_real(a->ci_rel_halfwidth),
			    "seed_elapsed_ns", (json_int_t)s->elapsed_ns)))
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
 * One seed: fresh inputs from the seed, a private copy per arm; the paired
 * group (every arm except baseline_alone) interleaved, then baseline_alone
 * by itself.
 */
static int time_seed(const struct rt *rt, struct atb_timer *timer, uint64_t seed)
{
	const struct atb_runner_job *job = rt->job;
	const struct atb_runner_set *set = &job->timing_set;
	struct bufs in = {0}, per_arm[ATB_RUNNER_MAX_ARMS];
	struct timing_ctx tc = {.set = set};
	const char *names[ATB_RUNNER_MAX_ARMS];
	size_t np = 0, ai, alone = SIZE_MAX;
	struct atb_timing_seed res;
	struct atb_error err;
	char msg[1200];
	int rc = -1;

	memset(per_arm, 0, sizeof(per_arm));
	atb_error_clear(&err);
	if (bufs_alloc(&in, job, set) || gen_inputs(&in, job, set, seed, 0, -1, 2)) {
		runner_emit_error("nomem", "cannot allocate timing inputs");
		goto out;
	}
	for (ai = 0; ai < job->narms; ai++) {
		if (bufs_alloc(&per_arm[ai], job, set)) {
			runner_emit_error("nomem", "cannot allocate timing buffers");
			goto out;
		}
		copy_inputs(&per_arm[ai], &in, job);
		poison_outputs(&per_arm[ai], job, set);
		if (!strcmp(job->arms[ai].name, "baseline_alone")) {
			alone = ai;
			continue;
		}
		tc.arms[np] = &rt->arms[ai];
		tc.bufs[np] = &per_arm[ai];
		names[np++] = job->arms[ai].name;
	}
	if (np) {
		if (atb_timing_run_seed(&job->timing, timer, seed, np, timed_call, &tc, &res,
					&err)) {
			atb_error_format(&err, msg, sizeof(msg));
			runner_emit_error(err.status == ATB_ERR_CHECK ? "kernel_failed" : "timing",
					  msg);
			atb_timing_seed_release(&res);
			goto out;
		}
		rc = emit_samples(&res, "paired", names, np);
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
		rc = emit_samples(&res, "alone", names, 1);
		atb_timing_seed_release(&res);
		if (rc)
			goto out;
	}
	rc = 0;
out:
	bufs_free(&in);
	for (ai = 0; ai < job->narms; ai++)
		bufs_free(&per_arm[ai]);
	return rc;
}

/* ---- env and the job ------------------------------------------------- */

static int load_arms(struct rt *rt)
{
	const struct atb_runner_job *job = rt->job;
	char msg[1200];
	size_t i;

	for (i = 0; i < job->narms; i++) {
		struct arm_rt *a = &rt->arms[i];
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

static int emit_env(const struct rt *rt, const struct atb_timer *timer)
{
	const struct atb_runner_job *job = rt->job;
	json_t *arms = json_array(), *cpus = json_array();
	cpu_set_t set;
	size_t i;
	int c;

	if (!arms || !cpus)
		goto nomem;
	for (i = 0; i < job->narms; i++)
		if (json_array_append_new(arms, json_pack("{s:s, s:s, s:s}", "name",
							  rt->arms[i].arm->name, "so",
							  rt->arms[i].arm->so, "sha256",
							  rt->arms[i].sha256)))
			goto nomem;
	CPU_ZERO(&set);
	if (!sched_getaffinity(0, sizeof(set), &set))
		for (c = 0; c < CPU_SETSIZE; c++)
			if (CPU_ISSET(c, &set))
				json_array_append_new(cpus, json_integer(c));
	return runner_emit(json_pack(
		"{s:s, s:s, s:s, s:I, s:o, s:b, s:o, s:I, s:I, s:b, s:s, s:i}",
		"event", "env", "backend", "cpu", "clock", "CLOCK_MONOTONIC",
		"clock_resolution_ns", (json_int_t)timer->ops->resolution_ns(timer->state),
		"cpu_affinity", cpus, "pinned", job->pin_cpu >= 0, "arms", arms,
		"cache_bytes", (json_int_t)job->cache_bytes,
		"flush_bytes", (json_int_t)timer->flush_bytes,
		"flush_enabled", job->timing.flush, "timer", timer->ops->name,
		"seeds", (int)job->nseeds));
nomem:
	json_decref(arms);
	json_decref(cpus);
	return -1;
}

int runner_cpu_run(const struct atb_runner_job *job)
{
	struct rt rt = {.job = job};
	struct atb_timer *timer = NULL;
	struct atb_error err;
	size_t si, k, failures = 0, nevents = 0, flush_bytes = 0;
	int64_t t0 = atbi_monotonic_ns();
	const char *timing = "done";
	char msg[1200];
	int dist, rc = RUNNER_EXIT_FAILED;

	atb_error_clear(&err);
	if (job->pin_cpu >= 0) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(job->pin_cpu, &set);
		if (sched_setaffinity(0, sizeof(set), &set)) {
			snprintf(msg, sizeof(msg), "cannot pin to cpu %d", job->pin_cpu);
			runner_emit_error("affinity", msg);
			return RUNNER_EXIT_FAILED;
		}
	}
	/* PROTO: timing.cache_flush -- factor x largest cache, at least min_bytes. */
	if (job->timing.flush)
		flush_bytes = atb_timing_flush_bytes(job->cache_bytes, job->cache_flush_factor,
						     job->cache_flush_min_bytes);
	if (atb_timer_cpu_new(flush_bytes, &timer, &err)) {
		atb_error_format(&err, msg, sizeof(msg));
		runner_emit_error(err.status == ATB_ERR_NOMEM ? "nomem" : "timer", msg);
		return RUNNER_EXIT_FAILED;
	}
	if (load_arms(&rt))
		goto out;
	if (emit_env(&rt, timer))
		goto out;

	/* Correctness: every seed, every parameter set, the task's inputs and each
	 * protocol distribution (PROTO: correctness.distributions, odd_shapes). */
	for (k = 0; k < job->nseeds; k++)
		for (si = 0; si < job->nsets; si++)
			for (dist = -1; dist < (int)job->ndists; dist++) {
				if (dist >= 0 && !any_adversarial(job))
					break;
				if (check_input_set(&rt, job->seeds[k], si, dist, &failures,
						    &nevents))
					goto out;
			}

	if (job->skip_timing)
		timing = "skipped";
	else if (failures && !job->time_if_incorrect)
		timing = "skipped_incorrect";
	else
		for (k = 0; k < job->nseeds; k++)
			if (time_seed(&rt, timer, job->seeds[k]))
				goto out;

	if (!runner_emit(json_pack("{s:s, s:i, s:I, s:I, s:s, s:I}", "event", "done",
				   "seeds", (int)job->nseeds,
				   "correctness_events", (json_int_t)nevents,
				   "correctness_failures", (json_int_t)failures,
				   "timing", timing,
				   "elapsed_ns", (json_int_t)(atbi_monotonic_ns() - t0))))
		rc = RUNNER_EXIT_OK;
out:
	atb_timer_free(timer);
	/* The shared objects stay loaded: their destructors run at exit. */
	return rc;
}
