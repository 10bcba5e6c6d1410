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
 * Input generation, comparison, input hashes, the result-reuse steps and
 * the correctness and samples events are the shared checking layer
 * (check.c), the same code the cpu backend runs: a seed gives the same
 * inputs on both backends, and one tolerance rule judges both.
 *
 * Does not: judge anything; it reports what it saw.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include <gsl/gsl_rng.h>

#include "atb/alloc.h"
#include "atb/cuda.h"
#include "atb/kernel.h"
#include "atb/timing.h"
#include "runner_cuda.h"
#include "runner_int.h"
#include "util.h"
#include "banned.h"

struct dbufs {
	uint64_t p[ATB_RUNNER_MAX_BUFFERS];      /* what the arm is given */
	uint64_t base[ATB_RUNNER_MAX_BUFFERS];   /* what was allocated (p minus its offset) */
	size_t bytes[ATB_RUNNER_MAX_BUFFERS];
	size_t n;
};

struct crt {
	const struct atb_runner_job *job;
	struct atb_cuda *cu;
	struct runner_arm arms[ATB_RUNNER_MAX_ARMS];
	char msg[1400];
	int sticky;   /* the context saw a fault: nothing more can run */
};

/* ---- device buffers ------------------------------------------------------ */

static int fail(struct crt *rt, const char *what, const struct atb_error *err)
{
	snprintf(rt->msg, sizeof(rt->msg), "%s: %s", what, err->msg);
	return -1;
}

static int fail_msg(struct crt *rt, const char *what)
{
	snprintf(rt->msg, sizeof(rt->msg), "%s", what);
	return -1;
}

static void d_free(struct crt *rt, struct dbufs *b)
{
	size_t i;

	for (i = 0; i < b->n; i++)
		atb_cuda_free(rt->cu, b->base[i] ? b->base[i] : b->p[i]);
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


/*
 * PROTO: timing.placement (shuffled) -- d_alloc with each buffer at an
 * offset drawn from (seed, arm): a pad of 0 to 15 x 2 MiB allocated before
 * it (and freed once the arm has its buffers) moves it to other pages, and
 * an offset of 0 to 8191 x 256 bytes inside its own allocation moves it
 * within them.  256 bytes is what cuMemAlloc promises, so no honest kernel
 * relies on more.  Measured (scripts/aa-study, H200): with the same
 * addresses on every seed a copy of cuda_softmax read 1.059x [1.053, 1.065]
 * against its own baseline, and as much with a copy of the baseline's own
 * object: an address effect, not the code.  keyed (version 9): the same
 * ranges drawn by runner_placement_keyed under the job's key, because the
 * seeds are the same in every measurement (1 to N) and so was every
 * seed's draw: a copy of cuda_gemm at / 16 read +0.55% in four
 * calibrations in a row, all of it from seeds 3 and 5 (about +2% each,
 * scripts/aa-study), one draw of the address effect seen four times.
 */
static int d_alloc_placed(struct crt *rt, struct dbufs *b, const struct atb_runner_set *set,
			  uint64_t seed, size_t arm)
{
	const struct atb_runner_job *job = rt->job;
	uint64_t pads[ATB_RUNNER_MAX_BUFFERS] = {0};
	struct atb_error err;
	gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
	size_t i, npads = 0;
	int rc = 0;

	memset(b, 0, sizeof(*b));
	if (!r)
		return fail_msg(rt, "cannot allocate an rng");
	gsl_rng_set(r, (unsigned long)(seed * 0x9e3779b97f4a7c15ULL ^ (uint64_t)(arm + 1) *
						 0xbf58476d1ce4e5b9ULL));
	atb_error_clear(&err);
	if (job->placement == ATB_PLACEMENT_KEYED && !runner_placement_key(job))
		rc = fail_msg(rt, "cannot draw a placement key (getrandom)");
	for (i = 0; !rc && i < job->nbuffers; i++) {
		size_t pad, off;

		if (job->placement == ATB_PLACEMENT_KEYED) {
			unsigned kp, ko;

			if (runner_placement_keyed(runner_placement_key(job), seed, arm, i, &kp, &ko)) {
				rc = fail_msg(rt, "cannot draw a placement (HMAC-SHA256)");
				break;
			}
			pad = (size_t)kp << 21;
			off = (size_t)ko << 8;
		} else {
			pad = (size_t)gsl_rng_uniform_int(r, 16) << 21;
			off = (size_t)gsl_rng_uniform_int(r, 8192) << 8;
		}

		b->bytes[i] = set->counts[i] * atb_dtype_size(job->buffers[i].dtype);
		if (pad && atb_cuda_alloc(rt->cu, pad, &pads[npads], &err)) {
			rc = fail(rt, "cannot allocate a placement pad", &err);
			break;
		}
		if (pad)
			npads++;
		if (atb_cuda_alloc(rt->cu, b->bytes[i] + off, &b->base[i], &err)) {
			rc = fail(rt, "cannot allocate device buffers", &err);
			break;
		}
		b->p[i] = b->base[i] + off;
		b->n = i + 1;
	}
	while (npads)
		atb_cuda_free(rt->cu, pads[--npads]);
	gsl_rng_free(r);
	if (rc)
		d_free(rt, b);
	return rc;
}

static int d_upload_inputs(struct crt *rt, struct dbufs *d, const struct runner_bufs *h)
{
	struct atb_error err;
	size_t i;

	atb_error_clear(&err);
	for (i = 0; i < rt->job->nbuffers; i++)
		if (runner_is_input(&rt->job->buffers[i]) &&
		    atb_cuda_h2d(rt->cu, d->p[i], h->p[i], d->bytes[i], &err))
			return fail(rt, "cannot copy inputs to the device", &err);
	return 0;
}

/*
 * PROTO: correctness.poison -- the shared layer's pattern as one 32-bit word
 * (runner_poison_word32): NaN for fp32, fp64 (the high word repeated is a
 * NaN too), fp16 and bf16 (their quiet-NaN patterns, two per word), the
 * type's minimum for integers.  A 2-byte buffer with an odd count ends in
 * half a word: that last element is written with a 2-byte copy, so no
 * output element is left unpoisoned.
 */
static int d_poison(struct crt *rt, struct dbufs *d)
{
	const struct atb_runner_job *job = rt->job;
	struct atb_error err;
	size_t i;

	atb_error_clear(&err);
	for (i = 0; i < job->nbuffers; i++) {
		enum atb_dtype dt = job->buffers[i].dtype;
		uint32_t word = runner_poison_word32(dt);
		size_t words = d->bytes[i] / 4;

		if (job->buffers[i].role != ATB_BUFFER_OUT)
			continue;
		if (words && atb_cuda_memset32(rt->cu, d->p[i], word, words, &err))
			return fail(rt, "cannot poison outputs", &err);
		if (d->bytes[i] % 4 == 2) {
			uint16_t last = (uint16_t)(word & 0xffffu);

			if (atb_cuda_h2d(rt->cu, d->p[i] + words * 4, &last, sizeof(last), &err))
				return fail(rt, "cannot poison outputs", &err);
		}
	}
	return 0;
}

static int d_download(struct crt *rt, struct runner_bufs *h, const struct dbufs *d)
{
	struct atb_error err;
	size_t i;

	atb_error_clear(&err);
	for (i = 0; i < rt->job->nbuffers; i++)
		if (atb_cuda_d2h(rt->cu, h->p[i], d->p[i], d->bytes[i], &err))
			return fail(rt, "cannot copy buffers from the device", &err);
	return 0;
}

static int call_kernel(struct crt *rt, const struct runner_arm *a, const struct dbufs *d,
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
static int call_sync(struct crt *rt, const struct runner_arm *a, const struct dbufs *d,
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

/* ---- one call on fresh device buffers ------------------------------------ */

/*
 * Run arm a on host inputs `in` in the device buffers d (allocated by the
 * caller): upload, poison, call, wait, download everything into out.
 * Returns the kernel status; -1 on a runner failure (rt->msg), -1000 sticky.
 */
static int run_on(struct crt *rt, const struct runner_arm *a, const struct atb_runner_set *set,
		  struct dbufs *d, const struct runner_bufs *in, struct runner_bufs *out)
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

/*
 * Emit the error event of a failure whose message is in rt->msg (empty
 * only when a json allocation failed: the run never ends without saying).
 */
static int emit_fail(struct crt *rt, const char *reason)
{
	runner_emit_error(reason, rt->msg[0] ? rt->msg : "out of memory");
	return -1;
}

/* The reference's outputs for `in`, in fresh host and device buffers. */
static int reference_cb(void *ctx, const struct atb_runner_set *set,
			const struct runner_bufs *in, struct runner_bufs *out)
{
	struct crt *rt = ctx;
	const struct runner_arm *ref = &rt->arms[rt->job->reference];
	struct dbufs d;
	int rc;

	if (runner_bufs_alloc(out, rt->job, set)) {
		snprintf(rt->msg, sizeof(rt->msg),
			 "cannot allocate buffers for set '%s': out of memory", set->name);
		return emit_fail(rt, "nomem");
	}
	if (d_alloc(rt, &d, set))
		return emit_fail(rt, "cuda");
	rc = run_on(rt, ref, set, &d, in, out);
	d_free(rt, &d);
	if (rc == -1)
		return emit_fail(rt, "cuda");
	if (rc) {
		/* -1000: the fault's message is already in rt->msg. */
		if (rc != -1000)
			snprintf(rt->msg, sizeof(rt->msg), "reference arm '%s' returned %d on set '%s'",
				 ref->arm->name, rc, set->name);
		return emit_fail(rt, "reference_failed");
	}
	return 0;
}

/* Result reuse on the device: slots 0 and 1 are two fresh sets of allocations. */
struct reuse_ctx {
	struct crt *rt;
	const struct runner_arm *arm;
	const struct atb_runner_set *set;
	struct dbufs slot[2];
	struct runner_bufs got;
};

static int reuse_run(void *ctx, int slot, const struct runner_bufs *in,
		     const struct runner_bufs **got, int *kernel_status)
{
	struct reuse_ctx *c = ctx;
	int k = run_on(c->rt, c->arm, c->set, &c->slot[slot], in, &c->got);

	if (k == -1 || k == -1000)
		return -1;
	*kernel_status = k;
	*got = &c->got;
	return 0;
}

/* PROTO: gates result_reuse -- the shared steps (check.c), on device allocations. */
static int reuse_cb(void *ctx, size_t ai, const struct atb_runner_set *set,
		    const struct runner_bufs *in_a, const struct runner_bufs *ref_a,
		    const struct runner_bufs *in_b, const struct runner_bufs *ref_b,
		    struct runner_reuse *res)
{
	struct crt *rt = ctx;
	struct reuse_ctx c = {.rt = rt, .arm = &rt->arms[ai], .set = set};
	const char *reason = "cuda";
	int rc = -1;

	if (runner_bufs_alloc(&c.got, rt->job, set)) {
		snprintf(rt->msg, sizeof(rt->msg), "cannot allocate result-reuse buffers");
		reason = "nomem";
	} else if (!d_alloc(rt, &c.slot[0], set) && !d_alloc(rt, &c.slot[1], set)) {
		rc = runner_check_reuse(rt->job, set, in_a, ref_a, in_b, ref_b, reuse_run, &c,
					res);
	}
	runner_bufs_free(&c.got);
	d_free(rt, &c.slot[0]);
	d_free(rt, &c.slot[1]);
	if (rc)
		return emit_fail(rt, rt->sticky ? "kernel_fault" : reason);
	return 0;
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

/*
 * A checked arm on fresh device allocations: upload, poison, call, wait,
 * read every buffer back into got; output aliasing from the device address
 * ranges it ran on.
 */
static int arm_cb(void *ctx, size_t ai, const struct atb_runner_set *set,
		  const struct runner_bufs *in, struct runner_bufs *got, int *kernel_status,
		  json_t **aliasing)
{
	struct crt *rt = ctx;
	struct dbufs d;
	int k;

	if (d_alloc(rt, &d, set))
		return emit_fail(rt, "cuda");
	k = run_on(rt, &rt->arms[ai], set, &d, in, got);
	if (k == -1 || k == -1000) {
		d_free(rt, &d);
		return emit_fail(rt, k == -1000 ? "kernel_fault" : "cuda");
	}
	*aliasing = aliasing_fact(rt->job, &d);
	d_free(rt, &d);
	*kernel_status = k;
	return 0;
}

static const struct runner_check_ops check_ops = {
	.reference = reference_cb,
	.arm = arm_cb,
	.reuse = reuse_cb,
};

/* ---- timing ------------------------------------------------------------- */

struct timing_ctx {
	struct crt *rt;
	const struct runner_arm *arms[ATB_RUNNER_MAX_ARMS];
	struct dbufs *bufs[ATB_RUNNER_MAX_ARMS];
	const struct atb_runner_set *set;
	/* PROTO: gates.timed_correctness -- host copies of checked outputs, and
	   the hooks' state (its msg gets a driver failure) */
	struct runner_bufs host[ATB_RUNNER_MAX_ARMS];
	struct runner_timed *timed;
};

static int timed_call(void *ctx, size_t arm)
{
	struct timing_ctx *t = ctx;

	return call_kernel(t->rt, t->arms[arm], t->bufs[arm], t->set);
}

static int timed_fail(struct timing_ctx *t, const char *what, const struct atb_error *err)
{
	fail(t->rt, what, err);
	if (t->timed)
		snprintf(t->timed->msg, sizeof(t->timed->msg), "%s", t->rt->msg);
	return -1;
}

/*
 * The round's preparation on the device: the changed elements of the in
 * buffers (one small copy each), the inout buffers whole, the outputs
 * poisoned, then the whole context waited for, so none of it runs into the
 * round's timed window.
 */
static int timed_prepare(void *ctx, size_t arm, const struct runner_bufs *master,
			 const struct runner_perturb *where)
{
	struct timing_ctx *t = ctx;
	const struct atb_runner_job *job = t->rt->job;
	struct dbufs *d = t->bufs[arm];
	struct atb_error err;
	size_t i, j;

	atb_error_clear(&err);
	for (i = 0; i < job->nbuffers; i++) {
		size_t es = atb_dtype_size(job->buffers[i].dtype);

		if (job->buffers[i].role == ATB_BUFFER_INOUT &&
		    atb_cuda_h2d(t->rt->cu, d->p[i], master->p[i], d->bytes[i], &err))
			return timed_fail(t, "cannot restore an inout buffer", &err);
		if (job->buffers[i].role != ATB_BUFFER_IN)
			continue;
		for (j = 0; j < where->n[i]; j++) {
			size_t off = where->pos[i][j] * es;

			if (atb_cuda_h2d(t->rt->cu, d->p[i] + off, (const char *)master->p[i] + off,
					 es, &err))
				return timed_fail(t, "cannot perturb an input", &err);
		}
	}
	if (d_poison(t->rt, d)) {
		if (t->timed)
			snprintf(t->timed->msg, sizeof(t->timed->msg), "%s", t->rt->msg);
		return -1;
	}
	if (atb_cuda_ctx_sync(t->rt->cu, &err)) {
		t->rt->sticky = 1;
		return timed_fail(t, "the device faulted between timed rounds", &err);
	}
	return 0;
}

/* A checked round's outputs (out and inout), copied to the arm's host buffers. */
static int timed_outputs(void *ctx, size_t arm, const struct runner_bufs **got)
{
	struct timing_ctx *t = ctx;
	const struct atb_runner_job *job = t->rt->job;
	struct runner_bufs *h = &t->host[arm];
	struct atb_error err;
	size_t i;

	atb_error_clear(&err);
	if (!h->n && runner_bufs_alloc(h, job, t->set)) {
		if (t->timed)
			snprintf(t->timed->msg, sizeof(t->timed->msg),
				 "cannot allocate host buffers for timed checks: out of memory");
		return -1;
	}
	if (atb_cuda_ctx_sync(t->rt->cu, &err)) {
		t->rt->sticky = 1;
		return timed_fail(t, "the device faulted in a timed round", &err);
	}
	for (i = 0; i < job->nbuffers; i++)
		if (job->buffers[i].role != ATB_BUFFER_IN &&
		    atb_cuda_d2h(t->rt->cu, h->p[i], t->bufs[arm]->p[i], t->bufs[arm]->bytes[i],
				 &err))
			return timed_fail(t, "cannot copy outputs from the device", &err);
	*got = h;
	return 0;
}

static const struct runner_timed_ops timed_ops = {
	.prepare = timed_prepare,
	.outputs = timed_outputs,
};

/*
 * One group through the timing core with the timed checks when the job has
 * a key (group 0 paired, 1 alone; ref: the reference's index in the group,
 * >= np when it is not in it).  0 with *res filled, or -1 after an error
 * event.
 */
static int time_group(struct timing_ctx *tc, struct atb_timer *timer, uint64_t seed,
		      const struct runner_bufs *in, unsigned group, size_t np, size_t ref,
		      const char *(*timer_why)(const struct atb_timer *),
		      struct runner_timed *tm, struct atb_timing_seed *res)
{
	const struct atb_runner_job *job = tc->rt->job;
	size_t a;
	int rc;

	tc->timed = NULL;
	if (job->timed.on) {
		if (runner_timed_init(tm, job, tc->set, in, seed, group, np, ref, &timed_ops, tc)) {
			runner_timed_release(tm);
			runner_emit_error("nomem", "cannot allocate timed-check inputs");
			return -1;
		}
		tc->timed = tm;
	}
	rc = runner_time_group_timed(job, timer, seed, np, timed_call, tc, timer_why, tc->timed,
				     res);
	for (a = 0; a < ATB_RUNNER_MAX_ARMS; a++)
		runner_bufs_free(&tc->host[a]);
	return rc;
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

/*
 * Side-stream escape (PROTO: gates side_stream): the call bracketed by
 * events on the runner's stream, then the stream waited for, then the
 * whole context.  Work a candidate launched on another stream and left
 * running shows up as device-wide completion long after the event window.
 */
struct side_ctx {
	struct crt *rt;
	const struct runner_arm *a;
	struct dbufs *d;
	const struct atb_runner_set *set;
};

static int side_call(void *ctx)
{
	struct side_ctx *c = ctx;

	return call_kernel(c->rt, c->a, c->d, c->set);
}

/* The shared check (check.c) on this arm's timing buffers; a driver failure is sticky. */
static int side_stream_check(struct crt *rt, const struct runner_arm *a, struct dbufs *d,
			     const struct atb_runner_set *set, uint64_t seed)
{
	struct side_ctx c = {.rt = rt, .a = a, .d = d, .set = set};
	struct atb_error err;
	int r = runner_side_stream(rt->cu, seed, a->arm->name, side_call, &c, &err);

	if (r >= 0)
		return r;
	if (!err.msg[0]) {
		snprintf(rt->msg, sizeof(rt->msg), "cannot write a side_stream event");
		return -1;
	}
	rt->sticky = 1;
	return fail(rt, "side-stream check failed", &err);
}

static int time_seed(struct crt *rt, struct atb_timer *timer, uint64_t seed, size_t *escapes);

/* The seed's index in the job's seeds (0 when not there). */
static size_t seed_index(const struct atb_runner_job *job, uint64_t seed)
{
	size_t k;

	for (k = 0; k < job->nseeds; k++)
		if (job->seeds[k] == seed)
			return k;
	return 0;
}

/* runner_time_and_done's hook. */
static int time_seed_cb(void *ctx, struct atb_timer *timer, uint64_t seed, size_t *escapes)
{
	return time_seed(ctx, timer, seed, escapes);
}

static int time_seed(struct crt *rt, struct atb_timer *timer, uint64_t seed, size_t *escapes)
{
	const struct atb_runner_job *job = rt->job;
	const struct atb_runner_set *set = &job->timing_set;
	struct runner_bufs in = {0};
	struct dbufs per_arm[ATB_RUNNER_MAX_ARMS];
	struct timing_ctx tc = {.rt = rt, .set = set};
	const char *names[ATB_RUNNER_MAX_ARMS];
	struct atb_cuda_gpu_sample g0, g1;
	size_t np = 0, ai, alone = SIZE_MAX, ref = ATB_RUNNER_MAX_ARMS;
	struct atb_timing_seed res;
	struct runner_timed tm;
	int rc = -1, throttled;

	memset(per_arm, 0, sizeof(per_arm));
	if (runner_bufs_alloc(&in, job, set) ||
	    runner_gen_inputs(&in, job, set, seed, 0, -1, RUNNER_STREAM_TIMING)) {
		runner_emit_error("nomem", "cannot allocate timing inputs");
		goto out;
	}
	/* PROTO: timing.placement -- alternate: every other seed allocates the
	 * arms' buffers last arm first, so no arm keeps the same device
	 * addresses (and what they cost) on every seed */
	if (job->placement == ATB_PLACEMENT_ALTERNATE && (seed_index(job, seed) & 1)) {
		for (ai = job->narms; ai-- > 0;)
			if (d_alloc(rt, &per_arm[ai], set)) {
				runner_emit_error("cuda", rt->msg);
				goto out;
			}
	} else if (job->placement == ATB_PLACEMENT_SHUFFLED ||
		   job->placement == ATB_PLACEMENT_KEYED) {
		/*
		 * PROTO: timing.placement (keyed) -- the arms' buffers are
		 * allocated in runner_arm_order's order, which turns by one arm
		 * each seed, as the cpu backend's: allocated in arm order (the
		 * baseline's first on every seed), a copy of cuda_transpose at
		 * its bundled shape read 0.9959 and 0.9961 in two measurements of
		 * 16 seeds on an H100, every one of the 32 per-seed ratios under
		 * 1 (scripts/aa-study), and it missed 1 in two of three
		 * calibrations (docs/calibrate.md).
		 */
		size_t order[ATB_RUNNER_MAX_ARMS], k;

		if (runner_arm_order_announce(job, seed, order))
			goto out;
		for (k = 0; k < job->narms; k++)
			if (d_alloc_placed(rt, &per_arm[order[k]], set, seed, order[k])) {
				runner_emit_error("cuda", rt->msg);
				goto out;
			}
	}
	for (ai = 0; ai < job->narms; ai++) {
		int esc;

		if ((!per_arm[ai].n && d_alloc(rt, &per_arm[ai], set)) ||
		    d_upload_inputs(rt, &per_arm[ai], &in) ||
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
		if (ai == job->reference)
			ref = np;
		tc.arms[np] = &rt->arms[ai];
		tc.bufs[np] = &per_arm[ai];
		names[np++] = job->arms[ai].name;
	}
	atb_cuda_gpu_sample(atb_cuda_info(rt->cu)->pci_bus_id, &g0);
	if (np) {
		rc = time_group(&tc, timer, seed, &in, 0, np, ref, atb_cuda_timer_error, &tm, &res);
		if (!rc) {
			atb_cuda_gpu_sample(atb_cuda_info(rt->cu)->pci_bus_id, &g1);
			throttled = g0.throttled || g1.throttled;
			rc = runner_emit_samples_timed(&res, "paired", names, np, throttled,
						       tc.timed);
			/* PROTO: gates.side_stream.timed -- the arms beside the reference */
			if (!rc)
				rc = runner_emit_timed_side_stream(&res, names, ref);
			atb_timing_seed_release(&res);
		}
		if (tc.timed)
			runner_timed_release(tc.timed);
		if (rc)
			goto out;
		rc = -1;
	}
	if (alone != SIZE_MAX) {
		tc.arms[0] = &rt->arms[alone];
		tc.bufs[0] = &per_arm[alone];
		names[0] = job->arms[alone].name;
		/* As before the shared layer: the core's message only, for this group.
		 * No reference beside it: perturbed and poisoned, never compared. */
		rc = time_group(&tc, timer, seed, &in, 1, 1, 1, NULL, &tm, &res);
		if (!rc) {
			atb_cuda_gpu_sample(atb_cuda_info(rt->cu)->pci_bus_id, &g1);
			rc = runner_emit_samples_timed(&res, "alone", names, 1,
						       g0.throttled || g1.throttled, tc.timed);
			atb_timing_seed_release(&res);
		}
		if (tc.timed)
			runner_timed_release(tc.timed);
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
	runner_bufs_free(&in);
	for (ai = 0; ai < job->narms; ai++)
		d_free(rt, &per_arm[ai]);
	return rc;
}

/* ---- env and the job ------------------------------------------------- */

static int cuda_clock(void *ctx, unsigned *mhz, unsigned long long *reasons)
{
	struct crt *rt = ctx;

	return atb_cuda_sm_clock(atb_cuda_info(rt->cu)->pci_bus_id, mhz, reasons);
}

static int emit_env(const struct crt *rt, const struct atb_timer *timer, size_t l2_flush)
{
	const struct atb_runner_job *job = rt->job;
	const struct atb_cuda_device_info *d = atb_cuda_info(rt->cu);
	struct atb_cuda_gpu_sample g;
	json_t *arms = runner_arms_json(job, rt->arms);
	char cc[24];

	snprintf(cc, sizeof(cc), "%d.%d", d->cc_major, d->cc_minor);
	if (!arms)
		return -1;
	atb_cuda_gpu_sample(d->pci_bus_id, &g);
	return runner_emit(json_pack(
		"{s:s, s:s, s:I, s:o, s:{s:s, s:s, s:i, s:s, s:i, s:I, s:I, s:i, s:i, s:i, s:I},"
		" s:I, s:I, s:b, s:s, s:I, s:i, s:o, s:o}",
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
		(int)job->nseeds, "gpu", gpu_json(&g), "correctness_inputs",
		runner_inputs_json(job)));
}

int runner_cuda_run(const struct atb_runner_job *job)
{
	struct crt *rt = atb_calloc(1, sizeof(*rt));
	struct atb_timer *timer = NULL;
	struct atb_error err;
	struct runner_done done = {.t0_ns = atbi_monotonic_ns(), .has_escapes = 1};
	size_t flush_bytes = 0;
	char msg[1200];
	int rc = RUNNER_EXIT_FAILED;

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
	/* PROTO: gates.clocks -- the SM clock after every timed trial */
	runner_clock_reader(cuda_clock, rt);
	/* PROTO: timing.cache_flush -- factor x the larger of the job's cache and
	 * this GPU's L2, at least min_bytes. */
	if (job->timing.flush) {
		size_t cache = atb_cuda_info(rt->cu)->l2_bytes;

		if (job->cache_bytes > cache)
			cache = job->cache_bytes;
		flush_bytes = atb_timing_flush_bytes(cache, job->cache_flush_factor,
						     job->cache_flush_min_bytes, 0);
	}
	if (atb_cuda_timer_new(rt->cu, flush_bytes, ATB_CUDA_SPIN_NS, &timer, &err)) {
		atb_error_format(&err, msg, sizeof(msg));
		runner_emit_error(err.status == ATB_ERR_NOMEM ? "nomem" : "timer", msg);
		goto out;
	}
	if (runner_load_arms(job, rt->arms) || emit_env(rt, timer, flush_bytes))
		goto out;
	/* Correctness: every seed, set and input set, on the device (check.c). */
	if (runner_check_phase(job, &check_ops, rt, &done))
		goto out;
	if (!runner_time_and_done(job, timer, time_seed_cb, rt, &done))
		rc = RUNNER_EXIT_OK;
out:
	atb_timer_free(timer);
	/* After a device fault the context is unusable; leave it to process exit. */
	if (!rt->sticky)
		atb_cuda_close(rt->cu);
	atb_free(rt);
	return rc;
}
