/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Internals of the measurement pipeline: the gates as pure functions
 * (gates.c) that measure.c applies in order.  Each gate judges facts (files,
 * runner events, medians) and says why it refuses; none writes the store.
 * docs/internals/gates.md describes each one and its planted cheat.
 */
#ifndef ATB_MEASURE_INT_H
#define ATB_MEASURE_INT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "atb/measure.h"
#include "atb/protocol.h"
#include "atb/runner.h"
#include "atb/task.h"
#include "util.h"

/* ---- surface gate ---- */

/*
 * The candidate folder holds only regular files named in the task's surface
 * (lstat: no symlink, no subfolder, no other name), and the first surface
 * file is there.  ATB_OK when it does; ATB_ERR_CHECK with the reason in why
 * when not; ATB_ERR_IO when the folder cannot be read (also a refusal).
 */
ATBI_FUNC enum atb_status atbi_gate_surface_folder(const struct atb_task *task, const char *dir,
						   char *why, size_t why_size);

struct atbi_hashed_file {
	char *path;
	char sha256[65];   /* of the bytes, or of "symlink:<target>" */
};

/* Files the candidate must not touch, hashed (sorted by path). */
struct atbi_hash_set {
	struct atbi_hashed_file *files;
	size_t n, cap;
};

/*
 * Add path (a file, or a folder walked recursively without following
 * symlinks, at most 8 levels and 4096 files) to hs.  ATB_ERR_IO naming the
 * path, ATB_ERR_NOMEM.
 */
ATBI_FUNC enum atb_status atbi_hash_add(struct atbi_hash_set *hs, const char *path,
					struct atb_error *err);
/* Sort by path; call once after the last add. */
ATBI_FUNC void atbi_hash_sort(struct atbi_hash_set *hs);
/*
 * Compare before and after (both sorted): 0 when equal; otherwise 1 with
 * "changed 'x'", "removed 'x'" or "added 'x'" in what.
 */
ATBI_FUNC int atbi_hash_diff(const struct atbi_hash_set *before, const struct atbi_hash_set *after,
			     char *what, size_t what_size);
ATBI_FUNC void atbi_hash_release(struct atbi_hash_set *hs);

/* ---- correctness, input mutation, result reuse (runner events) ---- */

struct atbi_correctness_state {
	size_t events, candidate_events, failures;
	/* the candidate's first refusal of each kind (reason one line) */
	int mutation, wrong, reuse, aliasing;
	int reuse_same_buffers;  /* reuse failed at same_buffers_new_inputs */
	int reuse_before_wrong;  /* a reuse fact came before any wrong output */
	char mutation_reason[512], wrong_reason[512], reuse_reason[512], aliasing_reason[512];
	json_t *mutation_event, *wrong_event, *reuse_event, *aliasing_event;  /* owned copies */
	/* the naive arm failing: a task bug, never the candidate's fault */
	int naive_wrong;
	char naive_reason[512];
};

/* Judge one "correctness" event. */
ATBI_FUNC void atbi_gate_correctness_event(struct atbi_correctness_state *st, const json_t *ev);
/*
 * The candidate's refusal, in gate order: input_mutation, output_aliasing,
 * result_reuse when it failed at same_buffers_new_inputs or when a reuse
 * fact came before any wrong output (a kernel right on fresh buffers, then
 * wrong on the same inputs in other buffers, depends on an earlier call: on
 * the GPU a stale result in a recycled allocation reads back as the poison),
 * correctness, other result_reuse.  Returns the gate id and fills reason /
 * *event (borrowed), or NULL when every fact passed.
 */
ATBI_FUNC const char *atbi_gate_correctness_verdict(const struct atbi_correctness_state *st,
						    const char **reason, const json_t **event);
ATBI_FUNC void atbi_correctness_release(struct atbi_correctness_state *st);

/* ---- cuda: side stream and throttling ---- */

/*
 * PROTO: gates side_stream.  1 with the reason in why for a "side_stream"
 * event of the candidate arm that escaped: the probe before timing with
 * "escaped" true (every version), or, from gates.side_stream (version 7 on;
 * p->gates.has_side_stream), a "timed" one whose median device wait after
 * the stop event exceeds the reference's by more than abs_slack_us and more
 * than rel_tolerance x its median trial.  0 for any other event.
 */
ATBI_FUNC int atbi_gate_side_stream(const json_t *ev, const struct atb_protocol *p, char *why,
				    size_t why_size);

/*
 * PROTO: gates.physical_floor.cache_allowance (version 4 on): absent, a
 * torch task's floor counts the outputs' bytes beyond twice the caches
 * (protocol/v4-torchtrust.yaml.snippet).
 */
#define ATBI_FLOOR_CACHE_ALLOWANCE 2.0

/* ---- hang and background (gates.c): the runner's liveness and its neighbours ---- */

/*
 * PROTO: gates.hang (version 4 on): the harness's watchdog over the
 * runner's progress events (atb_runner_run_watched).  Versions 1 to 3 have
 * no such keys; their jobs use these values (protocol/v4-residue.yaml.snippet).
 */
#define ATBI_HANG_STARTUP_S 120.0
#define ATBI_HANG_MIN_S 20.0
#define ATBI_HANG_FACTOR 10.0
#define ATBI_HANG_PROGRESS_MS 250
ATBI_FUNC void atbi_hang_watch(const struct atb_protocol *p, struct atb_runner_watch *w);

/*
 * PROTO: gates.background (version 4 on), with these defaults before: the
 * CPU time of the runner's other threads and of the processes beside it
 * over a timed group may be at most max_cpu_share x the group's wall time
 * plus abs_slack_ms.  The processes alive beside it are reported, not
 * judged: an idle one steals nothing, a busy one shows in its CPU time.
 */
#define ATBI_BACKGROUND_MAX_CPU_SHARE 0.02
#define ATBI_BACKGROUND_ABS_SLACK_MS 20.0
struct atbi_background_limits {
	double max_cpu_share;
	int64_t slack_ns;
};
ATBI_FUNC void atbi_background_limits(const struct atb_protocol *p,
				      struct atbi_background_limits *l);

/*
 * A "background" event (runner/watch.c) against the limits: 1 with the
 * reason in why (the seed, the group, the CPU times against the wall time,
 * the threads and processes counted), 0 when within them or for any other
 * event.
 */
ATBI_FUNC int atbi_gate_background(const json_t *ev, const struct atbi_background_limits *l,
				   char *why, size_t why_size);

/* ---- clock (clock.c): the runner's span of a timed group vs the harness's ---- */

/*
 * PROTO: gates.clock.rel_tolerance, gates.clock.abs_slack_ms (version 3
 * on).  Versions 1 and 2 have no such keys; their jobs use these values,
 * the ones asked for v3 (protocol/v3-clock.yaml.snippet).  The slack covers
 * the pipe and the harness's wake-up on a loaded box, per group.
 */
#define ATBI_CLOCK_REL_TOLERANCE 0.01
#define ATBI_CLOCK_ABS_SLACK_MS 25.0
#define atbi_clock_rel_tolerance(p) \
	((p)->gates.has_clock ? (p)->gates.clock_rel_tolerance : ATBI_CLOCK_REL_TOLERANCE)
#define atbi_clock_slack_ns(p) \
	((int64_t)(1e6 * ((p)->gates.has_clock ? (p)->gates.clock_abs_slack_ms \
					       : ATBI_CLOCK_ABS_SLACK_MS)))

/*
 * One timed group as both sides saw it: runner_ns from the samples events'
 * span_ns (-1: none), harness_ns between the marker's and the first samples
 * event's arrival, trials_ns the sum of every arm's times_ns.
 */
struct atbi_clock_group {
	uint64_t seed;
	size_t arms;
	int64_t runner_ns, harness_ns, trials_ns;
	/* PROTO: timing.preemption -- the waits for a CPU the runner took out
	 * of the group's trials (every arm's preempted_ns), and the time the
	 * harness saw its timing thread off the CPU over the group (its wall
	 * less the thread's CPU time, from /proc; -1: not seen) */
	int64_t preempted_ns, offcpu_ns;
	int64_t wall_ns;         /* the harness's wall over the group (harness_background; -1) */
};

/* A job's groups as their events arrive; zero-initialised is empty. */
struct atbi_clock_state {
	int marked;              /* a marker came and its samples not yet */
	int64_t mark_ns;         /* the harness's clock at the marker */
	uint64_t mark_seed;
	size_t mark_arms;
	int in_group;            /* cur is a group whose samples are arriving */
	struct atbi_clock_group cur;
	size_t ngroups;          /* groups judged */
	int64_t total_runner_ns, total_harness_ns;  /* their spans, summed */
	int64_t total_preempted_ns, total_offcpu_ns; /* likewise, where seen */
	/* the box's load as the job met it: the harness's wall and its timing
	   thread's time off the CPU, over every group where both were read */
	int64_t load_wall_ns, load_offcpu_ns;
	int refused;             /* the first refusal: bad and why */
	struct atbi_clock_group bad;
	char why[768];
};

/*
 * 1 (why filled) when the spans differ by more than rel x the larger plus
 * slack_ns, when the trials add up to more than the runner's span, or when
 * runner_ns < 0; else 0.
 */
/*
 * PROTO: timing.preemption -- 1 (why filled) when the runner took more out
 * of a group's trials as waits for a CPU (preempted_ns) than the harness
 * saw its timing thread off the CPU (offcpu_ns) plus slack_ns, or took
 * anything out where the harness saw nothing (offcpu_ns < 0); else 0.
 */
ATBI_FUNC int atbi_gate_preemption(int64_t preempted_ns, int64_t offcpu_ns, int64_t slack_ns,
				   char *why, size_t why_size);
ATBI_FUNC int atbi_gate_clock(int64_t runner_ns, int64_t harness_ns, int64_t trials_ns,
			      double rel, int64_t slack_ns, char *why, size_t why_size);
/* A "timed_begin" event arrived at now_ns (the harness's monotonic clock). */
ATBI_FUNC void atbi_clock_mark(struct atbi_clock_state *s, const json_t *ev, int64_t now_ns,
			       double rel, int64_t slack_ns);
/* A "samples" event arrived at now_ns.  Samples without a marker refuse. */
ATBI_FUNC void atbi_clock_samples(struct atbi_clock_state *s, const json_t *ev,
				  int64_t now_ns, double rel, int64_t slack_ns);
/*
 * The job ended: judge the last group, then the sums of every group's
 * spans so far (a state may span several jobs of one side).  1 when any
 * group or the sum was refused.
 */
ATBI_FUNC int atbi_clock_finish(struct atbi_clock_state *s, double rel, int64_t slack_ns);

/*
 * PROTO: gates tamper (torch).  A "tamper" event (the runner's watch saw
 * the shared interpreter change after the candidate was imported: a torch
 * function replaced, a global hook registered, a flag flipped): 1 with the
 * reason in why, naming where it was first seen and what changed; 0 for
 * any other event.
 */
ATBI_FUNC int atbi_gate_tamper(const json_t *ev, char *why, size_t why_size);

/*
 * PROTO: gates.timed_correctness.  A "samples" event of the candidate arm
 * whose "timed_checks" has failed > 0: 1 with the reason in why (the seed,
 * the first failed round, the rounds failed of those checked, the bad
 * elements, NaNs and largest error, the first bad element); 0 for any
 * other event.
 */
ATBI_FUNC int atbi_gate_timed_checks(const json_t *ev, char *why, size_t why_size);

/*
 * The largest share of a job's timed trials that NVML may see throttled.
 * PROTO: gates.throttle.max_share (version 2 on).  Version 1 has no such
 * key; its jobs use this value, the one v2 froze.
 */
#define ATBI_THROTTLE_MAX_SHARE 0.10
#define atbi_throttle_max_share(p) \
	((p)->gates.has_throttle ? (p)->gates.throttle_max_share : ATBI_THROTTLE_MAX_SHARE)

/*
 * 1 when throttled / total is over max_share (the job is noise); *share
 * receives the share (0 when total is 0).
 */
ATBI_FUNC int atbi_gate_throttle(size_t throttled, size_t total, double max_share,
				 double *share);

/*
 * PROTO: gates.clocks (version 4 on) -- the SM clocks a job's timed trials
 * ran at, read by the runner after every trial ("sm_mhz" of each samples
 * event; 0 a failed read, not counted).  Paired arms run interleaved under
 * the same power management, so a power cap that slows both alike is not
 * noise: what is, is a clock below a floor (nvbench calls under 75% of the
 * default clock throttled) in too many trials, or arms that ran at
 * different clocks.
 */
struct atbi_clocks_state {
	double sum[2];        /* [0] the baseline's, [1] the candidate's readings, paired group */
	size_t n[2];
	unsigned *all;        /* every reading of the job, every arm (owned) */
	size_t nall, cap;
	unsigned max_mhz;     /* the GPU's maximum SM clock (gpu_state events) */
};

struct atbi_clocks_facts {
	size_t total, below;  /* readings, those below the floor */
	double share_below;
	unsigned max_mhz, floor_mhz;
	double mean_base_mhz, mean_cand_mhz, rel_difference;  /* |base / cand - 1| */
};

/* Add one samples event's readings (arm 0 baseline, 1 candidate, -1 other).  0, or -1 (memory). */
ATBI_FUNC int atbi_clocks_add(struct atbi_clocks_state *s, const json_t *samples_ev, int arm);
/* Note a gpu_state event's maximum SM clock. */
ATBI_FUNC void atbi_clocks_gpu_state(struct atbi_clocks_state *s, const json_t *ev);
ATBI_FUNC void atbi_clocks_release(struct atbi_clocks_state *s);

/*
 * The rule: -1 no readings (nothing to judge: the GPU has no NVML), 0 fine,
 * 1 more than max_share_below of the readings below floor_ratio x max_mhz,
 * 2 the arms' mean clocks apart by more than max_rel_difference (checked
 * only when the job has both arms' readings).  *f gets the facts either way.
 */
ATBI_FUNC int atbi_gate_clocks(const struct atbi_clocks_state *s, double floor_ratio,
			       double max_share_below, double max_rel_difference,
			       struct atbi_clocks_facts *f);

/* ---- physical floor ---- */

/*
 * PROTO: gates.physical_floor.margin.  Index of the first per-seed median
 * below margin * floor_ns, or -1 when none is (or floor_ns <= 0: unknown).
 */
ATBI_FUNC long atbi_gate_floor(const double *medians_ns, size_t n, double floor_ns,
			       double margin);

/* ---- baseline drift ---- */

/*
 * PROTO: gates.baseline_drift.tolerance.  ratio = median of the per-seed
 * baseline medians beside the candidate / the same of the baseline alone;
 * within [1/(1+tol), 1+tol] passes (returns 1).  *ratio 0 when undefined.
 */
ATBI_FUNC int atbi_gate_drift(const double *beside_ns, size_t n, const double *alone_ns, size_t m,
			      double tolerance, double *ratio);

/*
 * PROTO: gates.baseline_drift.tolerance, the rule measure applies
 * (docs/internals/gates.md, "baseline drift").  beside_ns[k] and
 * alone_ns[k] are seed k's baseline medians beside the candidate and alone,
 * timed in runners that ran one after the other.  *ratio = the median over
 * seeds of beside_ns[k] / alone_ns[k]; within [1/(1+tol), 1+tol] passes
 * (returns 1).  *spread = the coefficient of variation (sample sd / mean)
 * of the per-seed ratios (0 for one seed), for the record.  *consistent = 1
 * when every per-seed ratio lies outside the band on the side of the
 * median (the candidate drifts the baseline on every seed), 0 when the
 * seeds disagree (the box is too noisy to tell).  On a median that is not
 * positive: returns 0 with *ratio 0, *spread INFINITY, *consistent 0.
 */
/*
 * PROTO: gates.baseline_drift.tolerance -- whose is a drift?  ratio: the
 * baseline beside the candidate over alone (median of per-seed ratios);
 * share1, share2: the share of the paired and the alone runner's timed
 * groups that the harness saw their timing thread off the CPU (its wall
 * less the thread's CPU time, in /proc: the runner cannot forge it).  A
 * busier box slows every call of a runner by about 1 / (1 - share), so the
 * load alone moves the ratio to about (1 - share2) / (1 - share1).  1 when
 * that explains at least half of the drift, in its direction (the box's
 * load changed between the runners: not the candidate's doing, refused as
 * noise); 0 when it does not or a share is unknown (< 0).
 */
ATBI_FUNC int atbi_drift_is_load(double ratio, double share1, double share2);

ATBI_FUNC int atbi_gate_drift_paired(const double *beside_ns, const double *alone_ns, size_t n,
				     double tolerance, double *ratio, double *spread,
				     int *consistent);

/* ---- runner layout (layout.c) ---- */

/* One runner process: the paired arms (paired 1) or the baseline alone with
   its twin (paired 0), on seeds[lo .. hi). */
struct atbi_run_slot {
	int paired;
	size_t lo, hi;
};

/*
 * Seeds per runner process for a task of kind (NULL: cpu): 1 on the cpu
 * (one fresh runner per seed and side); nseeds for "cuda" and "torch" (one
 * runner per side covering every seed: a runner costs seconds to start).
 */
ATBI_FUNC size_t atbi_measure_seeds_per_runner(const char *kind, size_t nseeds);

/*
 * The runner processes of one attempt, in order, into slots (room for
 * 2 * nseeds): seeds grouped per_runner at a time (0 counts as 1); for each
 * group a paired and an alone process, paired first in even groups and
 * alone first in odd ones (P A, A P, P A, ...).  Returns the count.
 */
ATBI_FUNC size_t atbi_measure_layout(size_t nseeds, size_t per_runner,
				     struct atbi_run_slot *slots);

/* Median of n values (copy sorted); NAN for n == 0. */
ATBI_FUNC double atbi_median_of(const double *v, size_t n);

#endif
