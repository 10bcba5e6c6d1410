/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * atb-runner's cpu backend: load each arm's shared object, run the
 * correctness checks (poisoned outputs, reference against candidate on
 * separate copies, input mutation, result reuse) on seeded inputs, and the
 * paired timing through the one timing core.  Every buffer is its own
 * allocation, so no output can alias an input or another arm's buffer.
 * Inputs, poison, comparison and the events come from the shared checking
 * layer (check.c), which the cuda backend uses too.
 *
 * Does not: decide pass or fail of a candidate as a whole, compute ratios,
 * or retry anything; it reports what it saw.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "atb/alloc.h"
#include "atb/kernel.h"
#include "atb/timing.h"
#include "runner_int.h"
#include "util.h"
#include "banned.h"

struct rt {
	const struct atb_runner_job *job;
	struct runner_arm arms[ATB_RUNNER_MAX_ARMS];
	/* the arms' workers, then the round trip's (PROTO: timing.round_trip) */
	struct runner_worker workers[RUNNER_MAX_WORKERS];
	size_t nworkers;
	int isolated;           /* each arm in a worker (worker.c) */
	char preemption[256];   /* "run_delay", why not, or "" (the protocol's none) */
};

/* An arm's kernel on b: in its worker when it has one (timed: inside a window). */
static int call_kernel_as(const struct runner_arm *a, const struct runner_bufs *b,
			  const struct atb_runner_set *set, int timed)
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
	int ks = 0;

	/* a worker that fails ends the runner there (worker.c) */
	if (a->worker) {
		runner_worker_call(a->worker, b, set, timed, &ks);
		return ks;
	}
	return a->fn(&args);
}

static int call_kernel(const struct runner_arm *a, const struct runner_bufs *b,
		       const struct atb_runner_set *set)
{
	return call_kernel_as(a, b, set, 0);
}

/* ---- correctness ------------------------------------------------------- */

/* Result reuse on host buffers: slot 0 and 1 are two fresh sets of buffers. */
struct reuse_ctx {
	const struct atb_runner_job *job;
	const struct atb_runner_set *set;
	const struct runner_arm *arm;
	struct runner_bufs slot[2];
};

static int reuse_run(void *ctx, int slot, const struct runner_bufs *in,
		     const struct runner_bufs **got, int *kernel_status)
{
	struct reuse_ctx *c = ctx;
	struct runner_bufs *b = &c->slot[slot];

	runner_copy_inputs(b, in, c->job);
	runner_poison_outputs(b, c->job, c->set);
	*kernel_status = call_kernel(c->arm, b, c->set);
	*got = b;
	return 0;
}

/* PROTO: gates result_reuse -- the shared steps (check.c) on host buffers. */
static int reuse_cb(void *ctx, size_t ai, const struct atb_runner_set *set,
		    const struct runner_bufs *in_a, const struct runner_bufs *ref_a,
		    const struct runner_bufs *in_b, const struct runner_bufs *ref_b,
		    struct runner_reuse *res)
{
	const struct rt *rt = ctx;
	struct reuse_ctx c = {.job = rt->job, .set = set, .arm = &rt->arms[ai]};
	int rc = -1;

	if (!runner_bufs_alloc(&c.slot[0], rt->job, set) &&
	    !runner_bufs_alloc(&c.slot[1], rt->job, set))
		rc = runner_check_reuse(rt->job, set, in_a, ref_a, in_b, ref_b, reuse_run, &c,
					res);
	runner_bufs_free(&c.slot[0]);
	runner_bufs_free(&c.slot[1]);
	if (rc)
		runner_emit_error("nomem", "cannot allocate result-reuse buffers");
	return rc;
}

/* The reference's outputs for the inputs in `in`, in fresh buffers. */
static int reference_cb(void *ctx, const struct atb_runner_set *set,
			const struct runner_bufs *in, struct runner_bufs *out)
{
	const struct rt *rt = ctx;
	const struct runner_arm *ref = &rt->arms[rt->job->reference];
	char msg[512];
	int rc;

	if (runner_bufs_alloc(out, rt->job, set)) {
		snprintf(msg, sizeof(msg), "cannot allocate buffers for set '%s': out of memory",
			 set->name);
		runner_emit_error("nomem", msg);
		return -1;
	}
	runner_copy_inputs(out, in, rt->job);
	runner_poison_outputs(out, rt->job, set);
	rc = call_kernel(ref, out, set);
	if (rc) {
		snprintf(msg, sizeof(msg), "reference arm '%s' returned %d on set '%s'",
			 ref->arm->name, rc, set->name);
		runner_emit_error("reference_failed", msg);
		return -1;
	}
	return 0;
}

/*
 * A checked arm runs on got itself: a fresh copy of the inputs, outputs
 * poisoned.  Every buffer is its own allocation, so nothing can alias.
 */
static int arm_cb(void *ctx, size_t ai, const struct atb_runner_set *set,
		  const struct runner_bufs *in, struct runner_bufs *got, int *kernel_status,
		  json_t **aliasing)
{
	const struct rt *rt = ctx;

	runner_copy_inputs(got, in, rt->job);
	runner_poison_outputs(got, rt->job, set);
	*kernel_status = call_kernel(&rt->arms[ai], got, set);
	*aliasing = json_pack("{s:b, s:s}", "checked", 0, "reason",
			      "impossible by construction: every buffer is its own allocation");
	return 0;
}

static const struct runner_check_ops check_ops = {
	.reference = reference_cb,
	.arm = arm_cb,
	.reuse = reuse_cb,
};

/* ---- timing ------------------------------------------------------------- */

struct timing_ctx {
	const struct atb_runner_job *job;
	const struct runner_arm *arms[ATB_RUNNER_MAX_ARMS];
	struct runner_bufs *bufs[ATB_RUNNER_MAX_ARMS];
	const struct atb_runner_set *set;
};

static int timed_call(void *ctx, size_t arm)
{
	struct timing_ctx *t = ctx;

	return call_kernel_as(t->arms[arm], t->bufs[arm], t->set, 1);
}

/* PROTO: gates.timed_correctness -- host buffers: prepared in place, read in place. */
static int timed_prepare(void *ctx, size_t arm, const struct runner_bufs *master,
			 const struct runner_perturb *where)
{
	struct timing_ctx *t = ctx;

	runner_timed_apply_host(t->bufs[arm], master, t->job, t->set, where);
	return 0;
}

static int timed_outputs(void *ctx, size_t arm, const struct runner_bufs **got)
{
	struct timing_ctx *t = ctx;

	*got = t->bufs[arm];
	return 0;
}

static const struct runner_timed_ops timed_ops = {
	.prepare = timed_prepare,
	.outputs = timed_outputs,
};

/*
 * One group through the timing core, with the timed checks when the job
 * has a key (group 0 paired, 1 alone; ref: the reference's index in the
 * group, np when it is not in it), then its samples events.
 */
static int time_one_group(const struct atb_runner_job *job, struct atb_timer *timer,
			  uint64_t seed, struct timing_ctx *tc, const struct runner_bufs *in,
			  unsigned group, size_t np, size_t ref, const char *const *names)
{
	struct runner_timed tm, *tp = NULL;
	struct atb_timing_seed res;
	int rc = -1;

	if (job->timed.on) {
		if (runner_timed_init(&tm, job, tc->set, in, seed, group, np, ref, &timed_ops,
				      tc)) {
			runner_timed_release(&tm);
			runner_emit_error("nomem", "cannot allocate timed-check inputs");
			return -1;
		}
		tp = &tm;
	}
	if (!runner_time_group_timed(job, timer, seed, np, timed_call, tc, NULL, tp, &res)) {
		rc = runner_emit_samples_timed(&res, group ? "alone" : "paired", names, np, -1, tp);
		atb_timing_seed_release(&res);
	}
	if (tp)
		runner_timed_release(tp);
	return rc;
}

/*
 * One seed: fresh inputs from the seed, a private copy per arm; the paired
 * group (every arm except baseline_alone) interleaved, then baseline_alone
 * by itself.
 */
static int time_seed(const struct rt *rt, struct atb_timer *timer, uint64_t seed);

/* runner_time_and_done's hook; the cpu backend has no side streams. */
static int time_seed_cb(void *ctx, struct atb_timer *timer, uint64_t seed, size_t *escapes)
{
	(void)escapes;
	return time_seed(ctx, timer, seed);
}

static int time_seed(const struct rt *rt, struct atb_timer *timer, uint64_t seed)
{
	const struct atb_runner_job *job = rt->job;
	const struct atb_runner_set *set = &job->timing_set;
	struct runner_bufs in = {0}, per_arm[ATB_RUNNER_MAX_ARMS];
	struct timing_ctx tc = {.job = job, .set = set};
	const char *names[ATB_RUNNER_MAX_ARMS];
	size_t np = 0, ai, k, alone = SIZE_MAX, ref = ATB_RUNNER_MAX_ARMS;
	size_t order[ATB_RUNNER_MAX_ARMS];
	int rc = -1;

	memset(per_arm, 0, sizeof(per_arm));
	if (runner_bufs_alloc(&in, job, set) ||
	    runner_gen_inputs(&in, job, set, seed, 0, -1, RUNNER_STREAM_TIMING)) {
		runner_emit_error("nomem", "cannot allocate timing inputs");
		goto out;
	}
	/*
	 * PROTO: timing.placement (keyed, version 10 on) -- the arms' buffers
	 * are allocated, and their pages first touched, in an order that turns
	 * by one arm each seed from a start drawn under the job's key
	 * (runner_arm_order): allocated always in arm order, the arm allocated
	 * first read up to 6% faster on the 2-core box on every seed (a copy of
	 * relu 0.956-0.971 in three calibrations); drawn per seed, the split
	 * was 3 to 5 in a calibration of 8 seeds and 5 of 6 tasks read below 1
	 * (docs/calibrate.md).  Turned, each arm is first on half the seeds
	 * and the effect cancels in the geometric mean.
	 */
	if (runner_arm_order_announce(job, seed, order))
		goto out;
	for (k = 0; k < job->narms; k++) {
		ai = order[k];
		if (runner_bufs_alloc(&per_arm[ai], job, set)) {
			runner_emit_error("nomem", "cannot allocate timing buffers");
			goto out;
		}
		runner_copy_inputs(&per_arm[ai], &in, job);
		runner_poison_outputs(&per_arm[ai], job, set);
		/* mapped in the arm's worker before any window opens */
		if (rt->arms[ai].worker && runner_worker_map(rt->arms[ai].worker, &per_arm[ai]))
			goto out;
	}
	for (ai = 0; ai < job->narms; ai++) {
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
	if (np && time_one_group(job, timer, seed, &tc, &in, 0, np, ref, names))
		goto out;
	if (alone != SIZE_MAX) {
		tc.arms[0] = &rt->arms[alone];
		tc.bufs[0] = &per_arm[alone];
		names[0] = job->arms[alone].name;
		/* no reference beside it: perturbed and poisoned, never compared */
		if (time_one_group(job, timer, seed, &tc, &in, 1, 1, 1, names))
			goto out;
	}
	rc = 0;
out:
	runner_bufs_free(&in);
	for (ai = 0; ai < job->narms; ai++)
		runner_bufs_free(&per_arm[ai]);
	return rc;
}

/* ---- env and the job ------------------------------------------------- */

static int emit_env(const struct rt *rt, const struct atb_timer *timer)
{
	const struct atb_runner_job *job = rt->job;
	json_t *arms = runner_arms_json(job, rt->arms), *cpus = json_array();
	cpu_set_t set;
	int c;

	if (!arms || !cpus)
		goto nomem;
	CPU_ZERO(&set);
	if (!sched_getaffinity(0, sizeof(set), &set))
		for (c = 0; c < CPU_SETSIZE; c++)
			if (CPU_ISSET(c, &set))
				json_array_append_new(cpus, json_integer(c));
	return runner_emit(json_pack(
		"{s:s, s:s, s:s, s:I, s:o, s:b, s:o, s:I, s:I, s:b, s:s, s:i, s:o, s:s, s:s, s:o}",
		"event", "env", "backend", "cpu", "clock", "CLOCK_MONOTONIC",
		"clock_resolution_ns", (json_int_t)timer->ops->resolution_ns(timer->state),
		"cpu_affinity", cpus, "pinned", job->pin_cpu >= 0 || rt->isolated, "arms", arms,
		"cache_bytes", (json_int_t)job->cache_bytes,
		"flush_bytes", (json_int_t)timer->flush_bytes,
		"flush_enabled", job->timing.flush, "timer", timer->ops->name,
		"seeds", (int)job->nseeds, "correctness_inputs", runner_inputs_json(job),
		"preemption", rt->preemption[0] ? rt->preemption : "none",
		"isolation", rt->isolated ? "process" : "none", "round_trip",
		rt->isolated && job->round_trip_every > 0
			? json_pack("{s:i, s:b, s:f, s:s}", "every_rounds", job->round_trip_every,
				    "subtract", job->round_trip_subtract, "quantile",
				    job->round_trip_quantile, "position",
				    job->round_trip_position == ATB_RT_KEYED ? "keyed"
				    : job->round_trip_position == ATB_RT_AFTER_REFERENCE
					    ? "after_reference"
					    : "after")
			: json_null()));
nomem:
	json_decref(arms);
	json_decref(cpus);
	return -1;
}

/*
 * Every arm in a worker of its own (worker.c): the runner hashes the
 * objects, the workers load them; the buffers come from shared memory.
 * Then the runner tells what it sees of them (the harness counts each
 * worker's first thread as a timing thread).
 */
/* PROTO: timing.round_trip -- the worker that loads nothing, and its empty call */
static struct runner_worker *round_trip_worker;

static int round_trip_call(void)
{
	return runner_worker_null_call(round_trip_worker);
}

static int start_workers(struct rt *rt)
{
	const struct atb_runner_job *job = rt->job;
	json_t *pids = json_array();
	char why[700], msg[1200];
	size_t i;

	if (!pids || runner_hash_arms(job, rt->arms)) {
		json_decref(pids);
		return -1;
	}
	if (runner_shm_setup(why, sizeof(why))) {
		json_decref(pids);
		runner_emit_error("worker", why);
		return -1;
	}
	runner_host_memory(runner_shm_alloc, runner_shm_free, runner_shm_exposed);
	runner_settle(runner_worker_settle);
	rt->isolated = 1;
	for (i = 0; i < job->narms; i++) {
		int lr = -1;

		int sp = runner_worker_spawn(&rt->workers[i], (int)i, job->arms[i].name, why,
					     sizeof(why));

		if (!sp)
			rt->nworkers = i + 1;   /* ended with the others if a later one fails */
		if (sp ||
		    (lr = runner_worker_load(&rt->workers[i], job->arms[i].so, why, sizeof(why)))) {
			if (lr == -2)
				snprintf(msg, sizeof(msg), "no symbol '%s' in arm '%s' ('%s')",
					 ATB_KERNEL_SYMBOL, job->arms[i].name, job->arms[i].so);
			else
				snprintf(msg, sizeof(msg),
					 "cannot load arm '%s' from '%s' in its worker: %s",
					 job->arms[i].name, job->arms[i].so, why);
			runner_emit_error(lr == -2 ? "no_symbol" : "dlopen", msg);
			json_decref(pids);
			return -1;
		}
		rt->arms[i].worker = &rt->workers[i];
		json_array_append_new(pids, json_integer(rt->workers[i].pid));
	}
	/* PROTO: timing.round_trip -- one more worker, which loads nothing: its
	   empty calls time the round trip alone; no candidate code is in it */
	if (job->round_trip_every > 0) {
		struct runner_worker *w = &rt->workers[job->narms];
		int sp = runner_worker_spawn(w, (int)job->narms, "round_trip", why, sizeof(why));

		if (!sp)
			rt->nworkers++;
		/* one untimed empty call: it started and is confined, and it is
		   stopped from here on, as the arms' workers are after their load */
		if (sp || runner_worker_null_ready(w, why, sizeof(why))) {
			snprintf(msg, sizeof(msg), "cannot start the round trip's worker: %s", why);
			runner_emit_error("worker", msg);
			json_decref(pids);
			return -1;
		}
		round_trip_worker = w;
		json_array_append_new(pids, json_integer(w->pid));
		runner_round_trip(round_trip_call, job->round_trip_every,
				  job->round_trip_subtract, job->round_trip_quantile, job);
	}
	runner_background_workers(rt->workers, rt->nworkers);
	return runner_emit(json_pack("{s:s, s:o}", "event", "workers", "pids", pids));
}

int runner_cpu_run(const struct atb_runner_job *job)
{
	struct rt rt = {.job = job};
	struct atb_timer *timer = NULL;
	struct atb_error err;
	struct runner_done done = {.t0_ns = atbi_monotonic_ns()};
	size_t flush_bytes = 0;
	char msg[1200];
	int rc = RUNNER_EXIT_FAILED;

	atb_error_clear(&err);
	/*
	 * With workers, the runner and every worker share one CPU (the one the
	 * runner is on now, unless the job names one): a call is then two
	 * switches on that CPU, not two wake-ups of another (about 20 us a
	 * call against 85 on the 2-core box; the time is inside every arm's
	 * window alike).
	 */
	if (job->pin_cpu >= 0 || job->isolate) {
		cpu_set_t set;
		int cpu = job->pin_cpu >= 0 ? job->pin_cpu : sched_getcpu();

		CPU_ZERO(&set);
		CPU_SET(cpu < 0 ? 0 : cpu, &set);
		if (sched_setaffinity(0, sizeof(set), &set)) {
			snprintf(msg, sizeof(msg), "cannot pin to cpu %d", job->pin_cpu);
			runner_emit_error("affinity", msg);
			return RUNNER_EXIT_FAILED;
		}
	}
	/* PROTO: timing.cache_flush -- factor x largest cache, at least min_bytes. */
	if (job->timing.flush)
		flush_bytes = atb_timing_flush_bytes(job->cache_bytes, job->cache_flush_factor,
						     job->cache_flush_min_bytes,
						     job->cache_flush_cpu_max_bytes);
	if (atb_timer_cpu_new(flush_bytes, &timer, &err)) {
		atb_error_format(&err, msg, sizeof(msg));
		runner_emit_error(err.status == ATB_ERR_NOMEM ? "nomem" : "timer", msg);
		return RUNNER_EXIT_FAILED;
	}
	/* PROTO: timing.preemption -- where this kernel has no schedstat the
	 * trials stay wall time, and the env event says why */
	if (job->preemption && job->isolate) {
		/* the timer reads its own thread's waits; the arms' threads are
		   the workers' (worker.c), whose waits it does not see */
		snprintf(rt.preemption, sizeof(rt.preemption),
			 "not with arm workers: the waits of the arms' threads, in other "
			 "processes, are not read");
	} else if (job->preemption && atb_timer_cpu_subtract_preemption(timer, &err)) {
		atb_error_format(&err, rt.preemption, sizeof(rt.preemption));
		atb_error_clear(&err);
	} else if (job->preemption) {
		snprintf(rt.preemption, sizeof(rt.preemption), "run_delay");
	}
	if (job->isolate) {
		if (start_workers(&rt))
			goto out;
	} else if (runner_load_arms(job, rt.arms)) {
		goto out;
	}
	if (emit_env(&rt, timer))
		goto out;

	/* Correctness: every seed, every parameter set, the task's inputs and the
	 * seed's protocol distributions (check.c). */
	if (runner_check_phase(job, &check_ops, &rt, &done))
		goto out;
	if (!runner_time_and_done(job, timer, time_seed_cb, &rt, &done))
		rc = RUNNER_EXIT_OK;
out:
	atb_timer_free(timer);
	/*
	 * A finished job's workers stay, stopped, until the runner exits (they
	 * die with it, PR_SET_PDEATHSIG): the harness reads the job's CPU
	 * after the last samples event, and a worker reaped before that read
	 * would put its CPU into the runner's children's time, "other" to the
	 * harness (seen under load: a false gate background on the last seed).
	 */
	for (size_t i = 0; rt.isolated && rc != RUNNER_EXIT_OK && i < rt.nworkers; i++)
		runner_worker_end(&rt.workers[i]);
	/* The shared objects stay loaded: their destructors run at exit. */
	return rc;
}
