/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The one timing core, shared by every backend (cpu now; cuda and torch
 * later).  A backend supplies a timer (a small table of function pointers,
 * nvbench's measurement strategies) and a callback that runs one arm's
 * kernel once; the core does warm-up, paired interleaved trials with the
 * order of each round drawn from the seed, the cache flush before every
 * timed call, and the noise-based stopping rule, and hands back raw
 * per-trial samples.
 *
 * Does not: compute speedups, ratios or verdicts (src/stats and the gates do
 * that in the harness), generate inputs, or print.  Times are CLOCK_MONOTONIC
 * nanoseconds for the cpu timer; a device timer reports device nanoseconds.
 */
#ifndef ATB_TIMING_H
#define ATB_TIMING_H

#include <stddef.h>
#include <stdint.h>

#include "atb/status.h"

/*
 * A measurement strategy.  state is the timer's own; every pointer may be
 * called many times.  start/stop bracket exactly one kernel call (for a
 * device timer they record events on the stream); elapsed_ns returns the
 * time between the last start and stop (waiting for the device if needed)
 * or a negative value when the timer failed.  flush evicts the caches
 * before a timed call (PROTO: timing.cache_flush); it may be NULL when
 * flushing is impossible.  resolution_ns is the clock's resolution.
 * sync waits until every call made so far has completed (a device timer
 * synchronises its stream; the cpu timer's returns at once, a call being
 * complete when it returns): 0, or -1 when the timer failed.  NULL is a
 * no-op.  The core syncs inside the warm-up, so launches never queue up
 * ahead of the device and warm-up time is device-complete time
 * (PROTO: timing.warmup.min_time_ms).
 */
struct atb_timer_ops {
	const char *name;                       /* "cpu", "cuda_events" */
	void (*start)(void *state);
	void (*stop)(void *state);
	int64_t (*elapsed_ns)(void *state);
	void (*flush)(void *state);
	int64_t (*resolution_ns)(void *state);
	void (*release)(void *state);           /* frees state */
	int (*sync)(void *state);               /* NULL: nothing to wait for */
};

/* A timer: its operations and their state.  Handle; atb_timer_free. */
struct atb_timer {
	const struct atb_timer_ops *ops;
	void *state;
	size_t flush_bytes;   /* bytes written and read by one flush; 0: none */
	/* Set by elapsed_ns: how much of the last trial's wall time was taken
	 * out as time the thread waited, runnable, for a CPU (0 unless the
	 * timer subtracts preemption: atb_timer_cpu_subtract_preemption). */
	int64_t last_preempted_ns;
	/* PROTO: gates.side_stream.timed (version 7 on) -- set by elapsed_ns
	 * when measures_device_extra: how long the whole device stayed busy
	 * after the trial's stop event was reached (a context-wide wait timed
	 * on the host; work a call left on streams the timer does not see).
	 * The core keeps it per trial (atb_timing_arm.device_extra_ns). */
	int measures_device_extra;
	int64_t last_device_extra_ns;
};

/*
 * The cpu timer: CLOCK_MONOTONIC read around the call; its flush writes and
 * then reads a private buffer of flush_bytes (0: flush does nothing).
 * Caller owns *out (atb_timer_free); *out is NULL on failure.
 * Errors: ATB_ERR_NOMEM (the flush buffer), ATB_ERR_SYSTEM (no monotonic
 * clock).
 */
enum atb_status atb_timer_cpu_new(size_t flush_bytes, struct atb_timer **out,
				  struct atb_error *err);
void atb_timer_free(struct atb_timer *t);

/*
 * PROTO: timing.preemption (run_delay) -- make a cpu timer take out of each
 * trial the time the calling thread spent runnable but waiting for a CPU
 * (the kernel's run_delay, /proc/thread-self/schedstat, read before the
 * start and after the stop).  A trial the thread was never switched out
 * of (the schedule count unchanged) reads its wall time unchanged, so a
 * quiet box measures exactly what it did; on an oversubscribed one a
 * preempted trial reads what it would have taken on a free CPU.  Time the
 * thread blocked or slept stays in (it is not run_delay).  The subtraction
 * never exceeds the trial's wall time.  Call from the thread that times.
 * Errors: ATB_ERR_SYSTEM (no schedstat for this thread: the kernel lacks
 * CONFIG_SCHED_INFO, or /proc is not there), the timer unchanged.
 */
enum atb_status atb_timer_cpu_subtract_preemption(struct atb_timer *t, struct atb_error *err);

/*
 * Flush size the protocol asks for: max(factor * cache_bytes, min_bytes),
 * then at most max_bytes (0: no bound; a CPU timer's bound from version 6).
 * PROTO: timing.cache_flush.factor, .min_bytes, .cpu_max_bytes
 */
size_t atb_timing_flush_bytes(size_t cache_bytes, double factor, size_t min_bytes,
			      size_t max_bytes);

enum atb_timing_interleave {
	ATB_INTERLEAVE_RANDOMIZED_PAIRS = 0, /* each round's order drawn from the seed */
	ATB_INTERLEAVE_FIXED = 1,            /* arms in the given order every round */
};

/* The protocol's timing values, in the core's units. */
struct atb_timing_config {
	int warmup_min_iterations;     /* PROTO: timing.warmup.min_iterations */
	int64_t warmup_min_time_ns;    /* PROTO: timing.warmup.min_time_ms */
	int trials_min;                /* PROTO: timing.trials.min (rounds) */
	int trials_max;                /* PROTO: timing.trials.max (rounds) */
	double target_rel_halfwidth;   /* PROTO: timing.stopping.target_rel_halfwidth; <= 0: off */
	double ci_level;               /* PROTO: stats.ci_level */
	int64_t max_time_per_seed_ns;  /* PROTO: timing.stopping.max_time_per_seed_s; <= 0: none */
	int flush;                     /* PROTO: timing.cache_flush.enabled */
	enum atb_timing_interleave interleave; /* PROTO: timing.interleave */
};

/* Defaults equal to protocol v1's values (for tests and benchmarks). */
void atb_timing_config_default(struct atb_timing_config *cfg);

/*
 * Parse an interleave name ("randomized_pairs", "fixed").
 * Errors: ATB_ERR_SCHEMA for any other name.
 */
enum atb_status atb_timing_interleave_parse(const char *name,
					    enum atb_timing_interleave *out,
					    struct atb_error *err);

/* Why a seed's trials stopped. */
enum atb_timing_stop {
	ATB_STOP_NONE = 0,
	ATB_STOP_TARGET = 1,      /* every arm's median CI met the target after trials.min */
	ATB_STOP_TRIALS_MAX = 2,  /* trials.max rounds were run */
	ATB_STOP_TIME_BUDGET = 3, /* the seed's time budget was spent */
};

/* "target", "trials_max", "time_budget", "none". */
const char *atb_timing_stop_name(enum atb_timing_stop s);

/*
 * Runs arm `arm` (0-based, in the order given to atb_timing_run_seed) once,
 * untimed by itself: the core brackets it.  Returns 0 on success; any other
 * value aborts the seed with ATB_ERR_CHECK ("kernel failed").
 */
typedef int (*atb_timing_call_fn)(void *ctx, size_t arm);

/* Raw samples of one arm for one seed. */
struct atb_timing_arm {
	int64_t *times_ns;   /* per trial, in the order they ran; owned */
	int *round;          /* per trial: the round (pair) it belongs to; owned */
	int *position;       /* per trial: its place in the round, 0 = first; owned */
	/* per trial: the timer's last_device_extra_ns; NULL unless the timer
	   measures_device_extra; owned */
	int64_t *device_extra_ns;
	size_t ntrials;
	int warmup_iterations;
	int64_t warmup_ns;   /* wall time spent warming up */
	int64_t preempted_ns;    /* taken out of the trials as waits for a CPU */
	size_t preempted_trials; /* trials it was taken out of */
	double median_ns;    /* of the trials; for the stopping rule only */
	double ci_rel_halfwidth; /* relative half-width of the median CI; INFINITY when undefined */
};

/* Raw samples of every arm for one seed. */
struct atb_timing_seed {
	uint64_t seed;
	size_t narms;
	struct atb_timing_arm *arms;  /* narms; owned */
	int rounds;                   /* rounds run */
	enum atb_timing_stop stop;
	int64_t elapsed_ns;           /* whole seed, warm-up included */
	/* PROTO: timing.round_trip -- the trusted empty calls' times, one every
	   hooks->round_trip_every rounds (atb_timing_hooks.round_trip); owned */
	int64_t *round_trip_ns;
	/* where each empty call was in its round: before the arm at that
	   position, narms after them all (atb_timing_hooks.round_trip_slot);
	   owned, nround_trip of them */
	int *round_trip_slot;
	size_t nround_trip;
};

/*
 * Measure narms arms for one seed: warm every arm up (at least
 * warmup_min_iterations calls and warmup_min_time_ns), then run rounds; in
 * each round every arm runs once, in an order drawn from a GSL mt19937
 * generator seeded from `seed` (randomized_pairs; the same seed gives the
 * same orders), each timed call preceded by the timer's flush when
 * cfg->flush.  Stops after trials_min rounds once every arm's median CI
 * relative half-width is at most the target, at trials_max rounds, or when
 * max_time_per_seed_ns is spent (at least one round is always run).
 * Caller owns out's arrays (atb_timing_seed_release), also on failure.
 * Errors: ATB_ERR_USAGE (bad config, narms 0), ATB_ERR_NOMEM,
 * ATB_ERR_CHECK (a call returned nonzero: "arm N failed"), ATB_ERR_SYSTEM
 * (the timer failed).
 */
enum atb_status atb_timing_run_seed(const struct atb_timing_config *cfg,
				    struct atb_timer *timer, uint64_t seed,
				    size_t narms, atb_timing_call_fn call, void *ctx,
				    struct atb_timing_seed *out, struct atb_error *err);

void atb_timing_seed_release(struct atb_timing_seed *s);

/*
 * Work between rounds, outside the timed window (PROTO:
 * gates.timed_correctness): before_round runs before round `round`'s first
 * flush, after_round once every arm of the round has run and been timed.
 * Either may be NULL.  A nonzero return aborts the seed with
 * ATB_ERR_SYSTEM ("round hook failed"); the hook keeps its own message.
 * Warm-up calls see no round hook.  progress (may be NULL) runs after each
 * warm-up batch and after each round, also outside the timed window: the
 * runner's sign of life for the harness's watchdog (PROTO: gates.hang).
 */
struct atb_timing_hooks {
	int (*before_round)(void *ctx, int round);
	int (*after_round)(void *ctx, int round);
	void *ctx;
	/*
	 * After each timed call's time is read (outside its window, before the
	 * next flush): arm `arm`'s trial number `trial` (the index of its time in
	 * times_ns).  For facts taken per trial, such as the GPU's SM clock.  Its
	 * own context; NULL: none.  A nonzero return aborts like a round hook.
	 */
	int (*after_call)(void *call_ctx, size_t arm, size_t trial);
	void *call_ctx;
	void (*progress)(void);
	/*
	 * PROTO: timing.round_trip (version 12 on) -- an empty call through the
	 * same path as the arms' (an arm worker's round trip, no kernel), timed
	 * as an arm's trial is (the flush, then the window) in every
	 * round_trip_every-th round, after its arms unless round_trip_slot puts
	 * it elsewhere, before after_round; its times go
	 * to atb_timing_seed.round_trip_ns.  round_trip_done runs after its
	 * time is read, outside the window (what after_call is to an arm).
	 * round_trip NULL or round_trip_every < 1: none.  A nonzero return
	 * from either aborts like a round hook.
	 */
	int (*round_trip)(void *rt_ctx);
	int (*round_trip_done)(void *rt_ctx);
	void *rt_ctx;
	int round_trip_every;
	/*
	 * PROTO: timing.round_trip.position (version 13 on) -- where in round
	 * `round` of seed `seed`, whose arms run in order[0..narms-1], the
	 * empty call goes: before the arm at position 0..narms-1, or narms,
	 * after them all; NULL or above narms: narms (version 12's place);
	 * SIZE_MAX: the place cannot be drawn, which aborts like a round hook.
	 * The arms' own positions (atb_timing_arm.position) do not count it.
	 */
	size_t (*round_trip_slot)(void *rt_ctx, uint64_t seed, int round, const size_t *order,
				  size_t narms);
};

/*
 * atb_timing_run_seed with hooks between rounds (NULL: none, exactly
 * atb_timing_run_seed).  What the timed window holds is the same either way.
 */
enum atb_status atb_timing_run_seed_hooked(const struct atb_timing_config *cfg,
					   struct atb_timer *timer, uint64_t seed,
					   size_t narms, atb_timing_call_fn call, void *ctx,
					   const struct atb_timing_hooks *hooks,
					   struct atb_timing_seed *out, struct atb_error *err);

/*
 * The order of each of nrounds rounds for narms arms as atb_timing_run_seed
 * draws it: order[r * narms + i] is the arm run i-th in round r.  For tests
 * and for the harness to re-derive the order from the seed.
 * Errors: ATB_ERR_USAGE, ATB_ERR_NOMEM.
 */
enum atb_status atb_timing_round_orders(enum atb_timing_interleave il, uint64_t seed,
					size_t narms, size_t nrounds, size_t *order,
					struct atb_error *err);

/*
 * Median of n samples and the relative half-width of its distribution-free
 * (order-statistic, binomial) confidence interval at `level`: half the
 * distance between the CI's order statistics over the median; INFINITY when
 * n is too small for the level.  This is the stopping rule's quantity; it
 * is computed by atb_stats_median_ci (src/stats).  x is not modified.
 * Errors: ATB_ERR_USAGE (n 0, level outside (0,1)), ATB_ERR_NOMEM.
 */
enum atb_status atb_timing_median_ci(const int64_t *x, size_t n, double level,
				     double *median, double *rel_halfwidth,
				     struct atb_error *err);

#endif
