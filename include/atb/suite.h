/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * KernelBench-format suites: a folder of PyTorch reference files (each a
 * `class Model`, `get_inputs()`, `get_init_inputs()`) and a folder of
 * candidates (each a `class ModelNew`), measured task by task against the
 * protocol's kernelbench bars (docs/design.md: `atb suite`).
 *
 * A suite is a run in the store (the same run and iteration tables as the
 * tuning loop, proposer "suite"): one iteration row per task, in order,
 * written when the task is finished, so a killed suite loses at most the
 * task in progress and atb_suite_resume skips the done ones.  Its plan
 * (folders, filter, device, baseline, interpreter, timeout and the task
 * list with each task's candidate) is the audit entry "suite.plan".
 *
 * Each task runs in a child process of the caller (fork):
 * atb_measure_candidate, whose first gates are the static checks
 * (atb_measure_static_check) and which starts its own fresh atb-runner
 * processes.  The child is killed with every process under it when the
 * task's time is up; the caller becomes a child subreaper
 * (PR_SET_CHILD_SUBREAPER) for the suite's duration so that no runner
 * escapes.  Findings that refuse are rejections "gate:static" and every
 * finding is in the audit entry "measure.static" (atb_measure_candidate).
 *
 * The aggregate statistics (correct rate, fast_p, median and geometric
 * mean speedup with bootstrap intervals, each against the bars) are pure
 * functions of the rows: docs/internals/suite.md gives every formula.
 *
 * Does not: print (the progress callback reports), or judge a measurement
 * itself (measure/ and the store do).  Not thread-safe.
 */
#ifndef ATB_SUITE_H
#define ATB_SUITE_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "atb/protocol.h"
#include "atb/status.h"

/* The proposer name of a suite's run row. */
#define ATB_SUITE_PROPOSER "suite"
/* The most tasks one suite may hold. */
#define ATB_SUITE_MAX_TASKS 10000

/* Outcomes a suite adds to the loop's (gate ids, "usable", ...). */
#define ATB_SUITE_NO_CANDIDATE "no_candidate"
#define ATB_SUITE_STATIC "static"        /* refused by a static finding (ATB_GATE_STATIC) */
#define ATB_SUITE_TIMEOUT "timeout"      /* killed at --timeout-per-task */
#define ATB_SUITE_TASK_ERROR "task_error" /* the reference file did not load */

/* ---- discovery ---- */

struct atb_suite_task {
	char *rel;        /* path relative to the suite folder, e.g. "level1/02_ReLU.py" */
	char *path;       /* suite folder + "/" + rel */
	char *candidate;  /* the candidate file, or NULL when there is none */
};

/*
 * The tasks of a suite folder: dir/ *.py and dir/SUB/ *.py one level down
 * (SUB not "candidates" and not starting with '.' or '_'; file names not
 * starting with '.' or '_'), ordered by their leading number then name
 * (KernelBench's "2_" before "10_"), kept when filter (NULL: all) matches
 * the relative path or the file name (fnmatch).  A task's candidate is
 * candidates/NAME.py, else candidates/SUB/NAME.py, else none.
 * Caller owns *out (atb_suite_tasks_free); NULL and 0 on failure.
 * Errors: ATB_ERR_NOT_FOUND (no such folder), ATB_ERR_USAGE (no task
 * matches; more than ATB_SUITE_MAX_TASKS), ATB_ERR_IO, ATB_ERR_NOMEM.
 */
enum atb_status atb_suite_discover(const char *dir, const char *candidates_dir,
				   const char *filter, struct atb_suite_task **out, size_t *n,
				   struct atb_error *err);
void atb_suite_tasks_free(struct atb_suite_task *t, size_t n);

/* ---- rows and aggregate statistics ---- */

/* One task of a suite as stored (an iteration row, read back). */
struct atb_suite_row {
	int64_t k;
	char task[256];          /* relative path */
	char candidate[1024];    /* "" when none */
	char outcome[64];        /* "usable" or why not (atb/loop.h, and ATB_SUITE_*) */
	int correct;             /* passed every correctness gate (atb_suite_outcome_correct) */
	int admitted;            /* its result was admitted: speedup is a measurement */
	double speedup, ci_low, ci_high;   /* vs PyTorch eager; 0 when not admitted */
	/* vs torch.compile of the reference (--baseline compile): the geometric
	   mean of per-seed ratios compiled / candidate and its interval, timed
	   in the same rounds; 0 when not measured (compile_why says why: it did
	   not compile, differs from eager, or the task was not admitted);
	   compile_s: its compilation's wall time (its first call, not timed) */
	double compile_speedup, compile_ci_low, compile_ci_high, compile_s;
	char compile_why[256];
	char inputs_on[8];       /* where the runner made the inputs: "cuda", "cpu"; "" unknown */
	char job_uuid[65];       /* the measurement's job ("" when none ran) */
	char findings[160];      /* the static finding kinds, comma-separated; "" none */
	char reason[512];
	double wall_s;
	int64_t result_id, rejection_id;
};

/*
 * Is a task with this outcome correct?  usable, admitted, quarantined
 * (correct, held for review), noise, baseline_drift and rejected:RULE (the
 * store refused the timing) passed correctness; every other gate, static,
 * no_candidate, timeout and task_error did not.
 */
int atb_suite_outcome_correct(const char *outcome);

/* A statistic with its interval, judged against a bar. */
struct atb_suite_stat {
	int has;            /* 0: nothing to compute it from (e.g. no admitted task) */
	double value, lo, hi;
	double bar;         /* the protocol's bar; 0 when none */
	int meets;          /* value >= bar */
	/* "above" (lo >= bar), "below" (hi < bar), "undecided", or "" (no bar) */
	char ci_verdict[16];
};

struct atb_suite_stats {
	size_t ntasks, ncorrect, nadmitted, nstatic, nmissing, ntimeout;
	struct atb_suite_stat correct_rate;      /* Wilson score interval */
	size_t nfast_p;
	double fast_p_threshold[ATB_PROTOCOL_MAX_FASTP];
	size_t fast_p_count[ATB_PROTOCOL_MAX_FASTP];
	struct atb_suite_stat fast_p[ATB_PROTOCOL_MAX_FASTP]; /* Wilson; no bar */
	struct atb_suite_stat median_speedup;    /* over admitted tasks; bootstrap */
	struct atb_suite_stat geomean_speedup;   /* over admitted tasks; bootstrap */
	struct atb_suite_stat median_compile;    /* vs torch.compile, when measured */
	double ci_level;
	int bootstrap_resamples;
	uint64_t bootstrap_seed;
};

/*
 * The suite's statistics over rows[0..n-1] under p's kernelbench bars and
 * stats section (ci_level, bootstrap_resamples):
 *  - correct rate = correct / n, with the Wilson score interval;
 *  - fast_p for each p of p->kernelbench.fast_p = #(admitted and speedup
 *    > p) / n: over ALL tasks, an incorrect, refused, missing or
 *    unadmitted one counts as not fast (fast_0 = admitted / n);
 *  - median and geometric mean of the admitted tasks' speedups, each with
 *    the percentile bootstrap interval (tasks resampled with replacement,
 *    GSL MT19937 seeded with bootstrap_seed);
 *  - the correct rate against kernelbench.correct_rate_bar and the median
 *    against kernelbench.median_speedup_bar.
 * n may be 0 (every stat has = 0).  ATB_ERR_USAGE for a non-finite or
 * non-positive speedup of an admitted row (named by its task); ATB_ERR_NOMEM.
 */
enum atb_status atb_suite_aggregate(const struct atb_suite_row *rows, size_t n,
				    const struct atb_protocol *p, uint64_t bootstrap_seed,
				    struct atb_suite_stats *out, struct atb_error *err);

/*
 * Wilson score interval of k successes in n trials at level (0, 1) into
 * [*lo, *hi]; n == 0 gives [0, 1].  Exposed for the tests.
 */
void atb_suite_wilson(size_t k, size_t n, double level, double *lo, double *hi);

/* ---- running a suite ---- */

/* What the progress callback sees; valid during the call only. */
struct atb_suite_progress {
	const char *run_id;
	int64_t k;                 /* the task in progress (0-based) */
	int64_t ntasks;
	const char *task;          /* its relative path */
	const char *phase;         /* "static", measure's phases, "done" */
	const char *last_outcome;  /* of the task just finished ("done" only) */
	int64_t done;              /* tasks stored, this suite */
	int64_t correct;           /* of which correct */
	double eta_s;              /* remaining tasks x mean task time; < 0: unknown */
};

struct atb_suite_opts {
	const char *home;            /* NULL: atb_home() */
	const char *runner_path;     /* NULL: atb-runner as measure finds it */
	const char *runs_dir;        /* NULL: "runs" beside the store */
	/* The plan (start only; a resumed suite uses its stored plan, except
	   where a field below says what it means on resume): */
	const char *candidates_dir;  /* required to start; resume: the candidates
					folder here (NULL: the stored one, or the
					runs folder's copy of it) */
	const char *filter;          /* NULL: every task */
	const char *python;          /* NULL: $ATB_PYTHON, else python3; resume:
					the interpreter here (NULL: the stored one) */
	const char *device;          /* "cpu" | "cuda"; NULL: "auto" (cuda when there is one) */
	const char *baseline;        /* "eager" | "compile"; NULL: "eager" */
	int64_t seed;                /* first paired seed, >= 0 */
	int64_t paired_seeds;        /* 0: the protocol's stats.min_paired_seeds */
	double timeout_per_task_s;   /* > 0; 0: 1800 */
	/* Resume only: the suite folder here (NULL: the stored one). */
	const char *suite_dir;
	/* Resume only: go on on a box other than the run's (each task's result
	   records its own box; the report lists the run's boxes). */
	int allow_other_box;
	void (*progress)(void *ctx, const struct atb_suite_progress *p);
	void *progress_ctx;
	/* Non-zero: stop the task in progress (not recorded) and start no other. */
	volatile sig_atomic_t *stop;
};

/* The most boxes a report lists (a run resumed on more is refused).  Every
   call of a lent GPU machine is a fresh machine with its own box id, so a
   long calibration resumed call by call meets a new box each time. */
#define ATB_SUITE_MAX_BOXES 128

/*
 * A run's list of boxes, shared by the suite and the calibration: add fp
 * unless it is there (0), or -1 when the list holds ATB_SUITE_MAX_BOXES.
 */
int atb_suite_boxes_add(char boxes[][65], size_t *nboxes, const char *fp);

/*
 * The run's boxes: own (the run's first box), then the box of each audit
 * entry of kind resume_kind ("suite.resume", "calibrate.resume") for run_id,
 * in order.  Errors: the store's.
 */
struct atb_store;
enum atb_status atb_suite_boxes_load(struct atb_store *s, const char *run_id, const char *own,
				     const char *resume_kind, char boxes[][65], size_t *nboxes,
				     struct atb_error *err);

/* A suite's state as stored: its plan, its rows and their statistics. */
struct atb_suite_report {
	char run_id[65];
	char suite_dir[1024];
	char candidates_dir[1024];
	char filter[256];
	char device[16];
	char baseline[16];
	char python[1024];
	char protocol_digest[65];
	int protocol_version;
	double timeout_per_task_s;
	int64_t paired_seeds;
	int64_t ntasks;              /* planned */
	struct atb_suite_row *rows;  /* done tasks, in order; owned */
	size_t nrows;
	int interrupted;             /* *stop was set: resume with atb_suite_resume */
	/* The boxes the run was measured on: the run's first, then each box a
	   resume went on on (--allow-other-box), in order; nboxes > 1: the run
	   spans boxes */
	char boxes[ATB_SUITE_MAX_BOXES][65];
	size_t nboxes;
	struct atb_suite_stats stats;
	double wall_s;               /* this call's */
};

/*
 * Start a suite of the folder dir with o's plan on the store at db_path
 * (created when absent) and run it to its end or until *o->stop.  The
 * store is opened around each step and never held open across a fork.
 * Returns ATB_OK when every task ran or when stopped (out->interrupted);
 * an error status when it could not go on (store, i/o, system; the suite
 * stays resumable).  Errors before the run row: ATB_ERR_USAGE (bad plan:
 * no candidates folder, device, baseline, seeds below the protocol's
 * minimum, timeout), those of atb_suite_discover and of loading the
 * protocol.  Caller owns *out (atb_suite_report_release), filled as far
 * as the suite got, also on error.
 */
enum atb_status atb_suite_start(const char *db_path, const char *dir,
				const struct atb_suite_opts *o, struct atb_suite_report *out,
				struct atb_error *err);

/*
 * Continue the suite run_id from its first missing task under its stored
 * plan and protocol (o's plan fields are ignored but for suite_dir,
 * candidates_dir and python, which say where the plan's folders and
 * interpreter are on this machine).  The store and the runs folder may
 * have been copied from another machine: the candidates of a calibration
 * (kept under the runs folder) are found under this runs folder, and each
 * task still to run is matched by the SHA-256 of its file and of its
 * candidate as planned (a task file that moved inside the suite folder is
 * found by its content), so a changed file is refused, not measured.  The
 * task that was in progress when the suite was killed left no row: its
 * folder is removed and it is measured again.  Every resume that runs a
 * task is an audit entry "suite.resume" (where the folders and the box
 * were).  ATB_ERR_NOT_FOUND for an unknown run or one that is not a suite,
 * a folder that is not there; ATB_ERR_USAGE when this box is not the run's
 * and o->allow_other_box is 0, and for a task or candidate whose content
 * changed or is gone (named).  A complete suite returns ATB_OK at
 * once with *out filled.
 */
enum atb_status atb_suite_resume(const char *db_path, const char *run_id,
				 const struct atb_suite_opts *o, struct atb_suite_report *out,
				 struct atb_error *err);

/* Free what *r owns and zero it.  Idempotent. */
void atb_suite_report_release(struct atb_suite_report *r);

#endif
