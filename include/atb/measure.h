/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * One measurement job, end to end: the path every number takes
 * (docs/design.md): surface gate -> build -> runner [correctness, paired timing]
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
#define ATB_GATE_STATIC "static"            /* torch: the candidate's source falls back or hides code */
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

/* What opts.progress_detail sees: the phase and where the measurement is;
   valid during the call only. */
struct atb_measure_progress {
	const char *phase;         /* as opts.progress is given it */
	int attempt;               /* the job-1 run in progress, from 1 (PROTO: stats.cv_cap) */
	int max_attempts;          /* job 1 plus the re-runs allowed (3) */
	/* share of this attempt's runner processes finished, 0 to 1 (0 before
	   the first: surface, build, floor) */
	double fraction;
	/* at the phase that announces attempt > 1, why the last one is re-run
	   ("the cross-run cv 0.1180 is over the cap 0.05"); NULL at others */
	const char *rerun_why;
};

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
	/* Kind torch: the candidate file as its author named it, for messages
	   (a static refusal names it and the line); NULL: candidate_dir's file */
	const char *candidate_file;
	/* This machine, probed (atb_box_probe_with_compiler); NULL: probed here.
	   It is registered in the store either way. */
	const struct atb_box *box;
	/* Progress: called with a short phase name ("build", "correctness",
	   "timing seed 3/8", "drift seed 3/8", "ingest"); a re-run is announced
	   by the phase "attempt K of N: re-running because WHY"; may be NULL. */
	void (*progress)(void *ctx, const char *phase);
	/* The same calls with the attempt and the fraction done (ETAs); may be
	   NULL; both are called when both are set, with progress_ctx. */
	void (*progress_detail)(void *ctx, const struct atb_measure_progress *p);
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
	/*
	 * GPU: the SM clocks of the judged job-1 run's timed trials (PROTO:
	 * gates.clocks, version 4 on; judged 0 when no clock was read or the
	 * protocol predates the rule)
	 */
	struct {
		int judged;
		double share_below, rel_difference, mean_base_mhz, mean_cand_mhz;
		unsigned max_mhz, floor_mhz;
		size_t readings;
	} clocks;
	int attempts;              /* job-1 runs (re-runs for noise, PROTO: stats.cv_cap) */
	/*
	 * The figures the statistical gates judged, kept when they refuse too
	 * (0: not reached): the protocol's cap and tolerance, the range over
	 * seeds of the per-seed speedups (baseline median / candidate median)
	 * and of the per-seed drift ratios q (beside / alone) with their cv.
	 */
	double cv_cap, drift_tolerance;
	double seed_speedup_min, seed_speedup_max;
	double drift_min, drift_max, drift_spread;
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
	/* Kind torch: the static checker's finding kinds, comma-separated, in
	   the checker's order ("" none or not checked); refusing or not */
	char findings[160];
	/* Kind torch: the bytes of the reference's outputs that do not alias
	   its inputs, as the baseline-alone runner saw them (-1 unknown), and
	   the share of them the floor does not count (the caches' allowance);
	   floor_ns is then their time at the box's bandwidth */
	int64_t output_bytes, floor_allowance_bytes;
	/*
	 * Where the arms ran and what of the workers' round trip was taken out
	 * (PROTO: timing.isolation, timing.round_trip): isolation "process" or
	 * "none" (cuda and torch: "none", their arms share the runner);
	 * round_trip "subtract", "time" or "none"; deviation "" when both are
	 * as the protocol says, else which override ($ATB_ISOLATION,
	 * $ATB_ROUND_TRIP) changed what (a result measured so is not measured
	 * as its protocol version says).  Set before anything is built.
	 */
	char isolation[16];
	char round_trip[16];
	char deviation[256];
	double build_s, run_s;     /* wall time spent building, measuring */
};

/* ---- static checks of a KernelBench-format (torch) candidate ---- */

/* Where the static checker lives, under ATB_HOME. */
#define ATB_MEASURE_STATIC_SCRIPT "python/atb_static.py"

struct atb_measure_finding {
	/* syntax_error, no_modelnew, fallback_to_reference, dynamic_code,
	   reflection, unanalysable, calls_replaced_op (docs/torch.md) */
	char kind[32];
	int line;          /* in the candidate file, 1-based */
	char detail[256];
	int refuses;       /* atb_measure_finding_refuses(kind) */
};

/*
 * Does a finding of this kind refuse the candidate (a rejection
 * "gate:static", nothing run)?  syntax_error, no_modelnew,
 * fallback_to_reference, dynamic_code, reflection and unanalysable refuse;
 * calls_replaced_op (and any kind this version does not know) only
 * annotates.  docs/torch.md, "Static checks", says why.
 */
int atb_measure_finding_refuses(const char *kind);

/*
 * Run the static checker (home/python/atb_static.py; home NULL: atb_home())
 * with python (NULL: $ATB_PYTHON, else python3) on candidate against
 * reference, in the sandbox, killed after timeout_s (<= 0: 60).  Caller
 * owns *out (atb_free; NULL when none) and *json (the checker's JSON object
 * as text with the sandbox's facts, atb_free; json may be NULL when not
 * wanted).  A candidate that does not parse is a finding (syntax_error),
 * not an error.  atb_measure_candidate calls it for every torch candidate;
 * it is public for callers that want the findings alone.  Errors:
 * ATB_ERR_SCHEMA (the reference cannot be read or parsed: a task problem;
 * the checker's message), ATB_ERR_SYSTEM (the interpreter cannot run, times
 * out, or fails otherwise; stderr's tail in the message), ATB_ERR_PARSE
 * (not the checker's JSON), ATB_ERR_NOMEM.
 */
enum atb_status atb_measure_static_check(const char *home, const char *python,
					 const char *reference, const char *candidate,
					 double timeout_s, struct atb_measure_finding **out,
					 size_t *n, char **json, struct atb_error *err);

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
 * runner), static (kind torch: atb_measure_static_check on the copied
 * candidate; the first refusing finding refuses it with its file, line and
 * rule, before any runner starts; every finding is in the audit entry
 * "measure.static" and out->findings), build (compiler log tail kept), runner (signal, timeout, error
 * event, malformed line; stderr tail kept), input_mutation, correctness,
 * output_aliasing (cuda), result_reuse, side_stream (cuda: the runner saw
 * the candidate's work finish after its timed window), noise for
 * throttling (cuda: more than ATBI_THROTTLE_MAX_SHARE, 10%, of a job's timed
 * trials marked throttled by NVML; job 1 re-run within the same bounds as
 * the cv), physical_floor (any per-seed candidate median below
 * margin x floor; kind torch, which declares no bytes: the bytes of the
 * reference's outputs, from the baseline-alone runner's "outputs" event,
 * beyond PROTO: gates.physical_floor.cache_allowance x the caches (the
 * CPU's data caches, atb_floor_cpu_cache_bytes, or the GPU's L2), one
 * write at the bandwidth, out->output_bytes and floor_allowance_bytes;
 * bandwidth and peak from the store's box capabilities,
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
