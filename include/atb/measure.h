/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * One measurement job, end to end: the path every number takes
 * (DESIGN.md): surface gate -> build -> runner [correctness, paired timing]
 * -> stats -> result gates -> ingest validator -> store, audit chain.
 *
 * atb_measure_candidate takes a task, a candidate folder (its surface files)
 * and a knob assignment, builds the honest baseline, the naive baseline and
 * the candidate with the protocol's flags, runs them in fresh atb-runners
 * (baseline and candidate interleaved on the protocol's paired seeds), runs
 * the baseline alone in other fresh runners (baseline drift), computes the
 * statistics in the harness, applies every gate, and either ingests the
 * result (admitted, or quarantined by the anomaly breaker) or stores a
 * rejection with its gate and reason.  Every outcome is in the store and
 * the audit chain when it returns, whatever it is.
 *
 * Does not: propose candidates (loop/), print (the callback reports
 * progress), or judge anything the store's validator judges again.
 */
#ifndef ATB_MEASURE_H
#define ATB_MEASURE_H

#include <stddef.h>
#include <stdint.h>

#include "atb/status.h"

struct atb_box;
struct atb_store;
struct atb_protocol;
struct atb_task;
struct atb_knob_assignment;

/* Gate ids: stable strings, stored in rejections as "gate:<id>". */
#define ATB_GATE_SURFACE "surface"
#define ATB_GATE_BUILD "build"
#define ATB_GATE_RUNNER "runner"            /* crash, timeout, malformed events */
#define ATB_GATE_CORRECTNESS "correctness"
#define ATB_GATE_INPUT_MUTATION "input_mutation"
#define ATB_GATE_RESULT_REUSE "result_reuse"
#define ATB_GATE_PHYSICAL_FLOOR "physical_floor"
#define ATB_GATE_BASELINE_DRIFT "baseline_drift"
#define ATB_GATE_NOISE "noise"              /* cross-run CV over the cap, or throttling */
#define ATB_GATE_SIDE_STREAM "side_stream"  /* cuda: work escaping the timed window */
#define ATB_GATE_OUTPUT_ALIASING "output_aliasing" /* cuda: an output overlaps a buffer */
#define ATB_GATE_CLOCK "clock"            /* the runner's clock disagrees with the harness's */
#define ATB_GATE_TAMPER "tamper"            /* torch: the candidate changed the reference's interpreter */
#define ATB_GATE_TIMED_CORRECTNESS "timed_correctness" /* outputs wrong after timed calls */
#define ATB_GATE_HANG "hang"                /* the runner stopped making progress (watchdog) */
#define ATB_GATE_BACKGROUND "background"    /* cpu: a thread or process burning CPU beside the timed calls */
#define ATB_GATE_ANOMALY "anomaly_breaker"  /* quarantine, not rejection */

enum atb_measure_verdict {
	ATB_MEASURE_ADMITTED = 0,
	ATB_MEASURE_QUARANTINED = 1,
	ATB_MEASURE_REJECTED = 2,
};

/* "admitted", "quarantined", "rejected". */
const char *atb_measure_verdict_name(enum atb_measure_verdict v);

struct atb_measure_opts {
	const char *home;          /* NULL: atb_home() */
	const char *runner_path;   /* NULL: atb_runner_find() */
	const char *work_dir;      /* where builds and logs go; must exist */
	uint64_t seed_base;        /* seeds are seed_base, seed_base+1, ... */
	size_t nseeds;             /* 0: the protocol's stats.min_paired_seeds */
	int with_naive;            /* also time the naive baseline, labelled */
	/* Kind torch: also time torch.compile of the reference (mode
	   compile_mode, NULL: "default") in the same interleaved rounds of the
	   paired runner, labelled, never the headline; ignored for other kinds */
	int with_compile;
	const char *compile_mode;
	const char *candidate_label; /* stored as the result's candidate; NULL: knobs */
	/* This machine, probed (atb_box_probe_with_compiler); NULL: probed here.
	   It is registered in the store either way. */
	const struct atb_box *box;
	/* Progress: called with a short phase name ("build", "correctness",
	   "timing seed 3/8", "drift", "ingest"); may be NULL. */
	void (*progress)(void *ctx, const char *phase);
	void *progress_ctx;
};

struct atb_measure_outcome {
	enum atb_measure_verdict verdict;
	char gate[32];             /* the refusing gate when rejected; "" otherwise */
	enum atb_status status;    /* the refusal's status when rejected */
	char reason[512];          /* one line, when rejected or quarantined */
	char job_uuid[65];
	int64_t result_id;         /* > 0 when ingested */
	int64_t rejection_id;      /* > 0 when rejected */
	size_t nseeds;
	/* vs the honest baseline (geometric mean of per-seed ratios) */
	double speedup, ci_low, ci_high, p_value, cv, mde;
	/* vs the naive baseline, labelled; 0 when not measured */
	double naive_speedup, naive_ci_low, naive_ci_high;
	double baseline_median_ns, candidate_median_ns, naive_median_ns;
	double baseline_alone_median_ns;
	double floor_ns;           /* the physical floor of one call; 0: unknown */
	/* 1 when a cpu candidate beat the floor from the cached caps and the
	   caps were measured again (atb_floor_remeasure_cpu); floor_cached_ns
	   is the floor before, floor_ns the one judged */
	int floor_remeasured;
	double floor_cached_ns;
	double drift_ratio;        /* baseline beside / baseline alone; 0: not measured */
	/* cuda: share of timed trials the runner marked throttled (NVML), the
	   worst job-1 run; 0 on the cpu */
	double throttled_share;
	int attempts;              /* job-1 runs (re-runs for noise, PROTO: stats.cv_cap) */
	char note[512];            /* e.g. the naive baseline failed (a task bug); "" none */
	/*
	 * vs torch.compile of the reference (opts.with_compile, kind torch),
	 * labelled; the eager reference stays the baseline of record.
	 * compile_measured 1 when its speedup is a measurement: the geometric
	 * mean of per-seed ratios compiled / candidate with its interval
	 * (compile_speedup > 1: the candidate beats the compiled reference);
	 * otherwise compile_why says why it is absent (it did not compile, it
	 * differs from eager beyond the protocol's tolerances, or the
	 * measurement stopped before it was timed).  compile_s is the wall time
	 * of its first call (torch.compile compiles there), never timed.
	 */
	int compile_measured;
	double compile_speedup, compile_ci_low, compile_ci_high;
	double compile_median_ns, compile_s;
	char compile_mode[32];
	char compile_why[512];
	/* Kind torch: where the runner's inputs were made, "cuda" (born on the
	   device) or "cpu" (the CPU path), and why; "" for other kinds */
	char inputs_on[8];
	char inputs_why[256];
	double build_s, run_s;     /* wall time spent building, measuring */
};

/*
 * Measure candidate_dir (a folder holding only the task's surface files)
 * built with knobs (NULL: the task's defaults) against the task's honest
 * baseline, on this box, under protocol p, and record the outcome in store.
 * Returns ATB_OK whenever the outcome was recorded, whatever the verdict
 * (out->verdict says it); an error status only when it could not be
 * recorded (store, i/o, out of memory), or before anything ran:
 * ATB_ERR_USAGE (knobs not the task's, no work_dir, seeds over 2^62),
 * ATB_ERR_NOT_FOUND (no atb-runner), ATB_ERR_SCHEMA (a task the runner
 * cannot run, e.g. an int8 buffer).  A task of kind cuda runs on the
 * runner's cuda backend ("backend": "cuda" in both jobs).
 *
 * The gates, in order (each a rejection "gate:<id>" with detail JSON):
 * surface (folder contents; hashes of the protocol folder, the task folder,
 * atb-runner and the built baseline/naive objects before and after every
 * runner), build (compiler log tail kept), runner (signal, timeout, error
 * event, malformed line; stderr tail kept), input_mutation, correctness,
 * output_aliasing (cuda), result_reuse, side_stream (cuda: the runner saw
 * the candidate's work finish after its timed window), noise for
 * throttling (cuda: more than ATBI_THROTTLE_MAX_SHARE, 10%, of a job's timed
 * trials marked throttled by NVML; job 1 re-run within the same bounds as
 * the cv), physical_floor (any per-seed candidate median below
 * margin x floor; bandwidth and peak from the store's box capabilities,
 * measured on first use with atb_floor_measure_cpu, or for kind cuda with
 * atb_floor_measure_gpu and stored as "gpu0_*" kinds; on the cpu a
 * candidate that beats the floor from cached caps makes it call
 * atb_floor_remeasure_cpu once per measurement, store the caps it raised,
 * and refuse only if the candidate still beats the new floor:
 * out->floor_remeasured, out->floor_cached_ns and the refusal's detail
 * say so), timed_correctness (PROTO: gates.timed_correctness: between
 * timed rounds every arm's inputs change at a few key-chosen elements and
 * its outputs are poisoned again; on key-chosen rounds the candidate's
 * outputs must match the baseline's of the same round: a candidate that
 * skips or caches work on timed calls is refused with the seed, round and
 * counts), then the cv against stats.cv_cap, baseline_drift, noise, and
 * finally the store's validator, whose anomaly breaker quarantines.
 *
 * Baseline drift (PROTO: gates.baseline_drift.tolerance): the paired arms
 * run in fresh runners and the baseline alone in others that never load
 * the candidate (a byte copy of the baseline's object, its twin, in the
 * candidate's slot, so they do the same work).  Kind cpu: one runner per
 * seed and side, ordered P A, A P, P A, ... (P paired, A alone) so beside
 * and alone of a seed are seconds apart; kinds cuda and torch: one runner
 * per side covering every seed (a runner costs seconds to start).  Per
 * seed q = the baseline's median beside / alone; the drift ratio
 * (out->drift_ratio) is the median of q over seeds and must lie within
 * [1/(1+tol), 1+tol].  A cv over the cap or a ratio outside the band
 * re-runs the whole measurement, at most 2 more times (out->attempts); on
 * the last attempt every q outside the band on the same side is
 * baseline_drift (the candidate changes its baseline), seeds that disagree
 * are noise (the box is too noisy to judge drift); a cv still over the cap
 * is noise.  A naive baseline
 * that fails correctness is a task bug: job 1 is re-run without it and
 * out->note says so; the candidate is not blamed.
 */
enum atb_status atb_measure_candidate(struct atb_store *store, const struct atb_protocol *p,
				      const struct atb_task *task, const char *candidate_dir,
				      const struct atb_knob_assignment *knobs,
				      const struct atb_measure_opts *opts,
				      struct atb_measure_outcome *out, struct atb_error *err);

#endif
