/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * atb calibrate: the A/A self-test (issue 15, item 3; docs/design.md: "copies of
 * the baseline must read 1.000").  For a task set atb writes, for every
 * task, a candidate that is a copy of the task's honest baseline and
 * measures it through the normal path; a verdict path without bias admits
 * every copy with an interval that contains 1.
 *
 * The copies:
 *  - kind cpu or cuda: the task's baseline source, its local includes
 *    ('#include "X"' of a file X beside it) inlined, written under the
 *    task's first surface file name (the folder holds only that file, as
 *    the surface gate wants), built with the default knobs;
 *  - a KernelBench-format file: the file with every identifier Model
 *    renamed to ModelNew (its class and its references, e.g. super()),
 *    written as the suite's candidate file; the suite copies it as
 *    model_new.py.
 *
 * Storage: a bundled or named task set is a run in the store (proposer
 * ATB_CALIBRATE_PROPOSER), one iteration row per task written when the task
 * is done, its plan the audit entry "calibrate.plan", every measurement an
 * ordinary result or rejection labelled ATB_CALIBRATE_LABEL.  A
 * KernelBench-format folder is measured by atb suite itself (src/suite/:
 * one child process per task, static checks, its timeout), on a candidates
 * folder of copies written beside the runs (runs/calibrate-ID/copies): the
 * run is a suite run, resumable the suite's way.
 *
 * The report's arithmetic (atb_calibrate_summarize) is a pure function of
 * the rows: docs/calibrate.md gives every formula.
 *
 * Does not: print (the progress callback reports), decide a verdict
 * (measure/ and the store do), or change a candidate: every refusal of a
 * copy is a false refusal and is reported as one.
 */
#ifndef ATB_CALIBRATE_H
#define ATB_CALIBRATE_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "atb/status.h"

/* The proposer name of a calibration run row. */
#define ATB_CALIBRATE_PROPOSER "calibrate"
/* The candidate label of every copy's result or rejection (with the task). */
#define ATB_CALIBRATE_LABEL "calibrate copy"
/* The most distinct refusal reasons a summary counts apart; the rest: "other". */
#define ATB_CALIBRATE_MAX_REASONS 32

/* The targets of issue 15's "done when", the defaults of atb calibrate. */
#define ATB_CALIBRATE_MIN_ADMITTED 0.98
#define ATB_CALIBRATE_MIN_COVERAGE 0.90
#define ATB_CALIBRATE_MAX_MEDIAN_DEV 0.003

/* One task's outcome. */
struct atb_calibrate_row {
	int64_t k;
	char task[256];          /* name, or path relative to the suite folder */
	char kind[16];           /* "cpu", "cuda", "torch" */
	char outcome[64];        /* "usable", or why not: a gate id, "quarantined",
				    "rejected:RULE", or a suite outcome (static, timeout, ...) */
	int admitted;            /* outcome "usable": speedup is a measurement */
	double speedup, ci_low, ci_high;   /* when admitted; 0 otherwise */
	int covers;              /* admitted and ci_low <= 1 <= ci_high */
	/*
	 * The seeds' bootstrap interval before PROTO: stats.resolution_rel
	 * widened it (the result's stats "bootstrap_interval", version 10
	 * on); equal to [ci_low, ci_high] when the result has none.
	 */
	double boot_low, boot_high;
	int boot_covers;         /* admitted and boot_low <= 1 <= boot_high */
	char reason[512];        /* why refused; "" when admitted */
	int64_t result_id, rejection_id;
	double wall_s;
};

/* A refusal reason (the row's outcome) and how many copies it refused. */
struct atb_calibrate_refusal {
	char reason[64];
	size_t count;
	double rate;             /* count / tasks */
};

struct atb_calibrate_summary {
	size_t ntasks, nadmitted, ncovered, nrefused;
	double ci_level;         /* of the Wilson intervals */
	/* admitted / tasks with its Wilson interval; 0 and [0, 1] for no task */
	double admitted_rate, admitted_lo, admitted_hi;
	/* covered / admitted with its Wilson interval; has_coverage 0: none admitted */
	int has_coverage;
	double coverage, coverage_lo, coverage_hi;
	/* the same of the bootstrap intervals alone: what the resolution added */
	size_t nboot_covered;
	double boot_coverage;
	/* median and largest |speedup - 1| over the admitted; has_dev 0: none */
	int has_dev;
	double median_abs_dev, max_abs_dev;
	/* refused / tasks: every refusal of a copy is false */
	double false_refusal_rate;
	/* by reason, most frequent first (ties: by name) */
	struct atb_calibrate_refusal refusals[ATB_CALIBRATE_MAX_REASONS];
	size_t nrefusals;
};

/*
 * The summary of rows[0..n-1] at Wilson level ci_level (0, 1) into *out.
 * A row counts as admitted when its admitted flag is set; as covered when
 * admitted and ci_low <= 1 <= ci_high (its covers flag is recomputed here);
 * every other row is a refusal, counted under its outcome (rows beyond
 * ATB_CALIBRATE_MAX_REASONS - 1 distinct outcomes under "other").  The
 * median of |speedup - 1| is the midpoint of the two middle values for an
 * even count.  ATB_ERR_USAGE: rows NULL with n > 0, ci_level outside (0, 1),
 * an admitted row whose speedup or interval is not finite and positive or
 * whose interval does not hold its speedup (named by its task).
 */
enum atb_status atb_calibrate_summarize(struct atb_calibrate_row *rows, size_t n,
					double ci_level, struct atb_calibrate_summary *out,
					struct atb_error *err);

/* Targets a calibration must reach; a negative one is not checked. */
struct atb_calibrate_targets {
	double min_admitted;     /* admitted rate >= */
	double min_coverage;     /* coverage >= (point value) */
	double max_median_dev;   /* median |speedup - 1| <= */
};

struct atb_calibrate_verdict {
	int pass;                /* every checked target met */
	int admitted_ok, coverage_ok, median_ok;  /* 1 also when not checked */
	char line[320];          /* "pass: admitted 100.0% >= 98.0%, ..." or "fail: ..." */
};

/*
 * Judge s against t.  A coverage or median that cannot be computed (no
 * copy admitted) misses its target.
 */
void atb_calibrate_judge(const struct atb_calibrate_summary *s,
			 const struct atb_calibrate_targets *t, struct atb_calibrate_verdict *out);

/*
 * A KernelBench-format file's text with every identifier Model (a whole
 * word: not part of ModelNew, MyModel, Model2) renamed to ModelNew.
 * Caller owns *out (atb_free).  *count (may be NULL): renames made.
 * ATB_ERR_USAGE when text defines no `class Model` (nothing to copy);
 * ATB_ERR_NOMEM.
 */
enum atb_status atb_calibrate_torch_copy(const char *text, char **out, size_t *count,
					 struct atb_error *err);

struct atb_task;

/*
 * Write the copy candidate of a cpu or cuda task into dir (which must
 * exist and is written only): its baseline's source, each line
 * '#include "X"' whose X is a file in the baseline's folder replaced by
 * X's text (one level), under the task's first surface file name.
 * ATB_ERR_USAGE for a task of another kind or without a surface file;
 * ATB_ERR_IO; ATB_ERR_NOMEM.
 */
enum atb_status atb_calibrate_kernel_copy(const struct atb_task *task, const char *dir,
					  struct atb_error *err);

/* ---- running a calibration ---- */

/* What the progress callback sees; valid during the call only. */
struct atb_calibrate_progress {
	const char *run_id;
	int64_t k, ntasks;        /* the task in progress (0-based) of ntasks */
	const char *task;
	const char *phase;        /* "start", measure's phases, "done" */
	const char *last_outcome; /* the task just finished ("done" only) */
	int64_t done, admitted, covered;
	double eta_s;             /* < 0: unknown */
};

struct atb_calibrate_opts {
	const char *home;           /* NULL: atb_home() */
	const char *runner_path;    /* NULL: as measure finds it */
	const char *runs_dir;       /* NULL: "runs" beside the store */
	/* The task set, exactly one of: */
	const char *kind;           /* "cpu" | "cuda": every bundled task of that kind */
	const char *const *tasks;   /* bundled task names or task folders (cpu, cuda) */
	size_t ntasks;
	const char *suite_dir;      /* a KernelBench-format folder (atb suite's DIR);
				       resume: where the suite's folder is now (NULL:
				       the stored one) */
	/* For suite_dir, as atb suite takes them: */
	const char *filter;         /* NULL: every task */
	const char *python;         /* resume: the interpreter here (NULL: the stored one) */
	const char *device;         /* "cpu" | "cuda"; NULL: auto */
	double timeout_per_task_s;  /* 0: the suite's default */
	int64_t seed;               /* first paired seed, >= 0 */
	int64_t paired_seeds;       /* 0: the protocol's stats.min_paired_seeds */
	double ci_level;            /* of the summary's Wilson intervals; 0: the protocol's */
	/* Resume only: go on on a box other than the run's (each result keeps
	   its own box; the report lists the run's boxes). */
	int allow_other_box;
	void (*progress)(void *ctx, const struct atb_calibrate_progress *p);
	void *progress_ctx;
	/* Non-zero: stop after the task in progress (suite: without recording it). */
	volatile sig_atomic_t *stop;
};

struct atb_calibrate_report {
	char run_id[65];
	char mode[8];                /* "tasks" (bundled or named) or "suite" */
	char set[1024];              /* "kind cpu", "tasks relu sgemm", the suite folder */
	char copies_dir[1024];       /* suite: the folder of copies; "" otherwise */
	char protocol_digest[65];
	int protocol_version;
	int64_t paired_seeds;
	int64_t planned;
	struct atb_calibrate_row *rows;   /* done tasks, in order; owned */
	size_t nrows;
	int interrupted;             /* *stop was set: resume it */
	/* The boxes the run was measured on, the run's first; nboxes > 1: it
	   spans boxes (resumed elsewhere with allow_other_box) */
	char boxes[8][65];
	size_t nboxes;
	struct atb_calibrate_summary summary;
	double wall_s;
};

/*
 * Calibrate o's task set on the store at db_path (created when absent):
 * write the copies, measure each (atb_measure_candidate, or atb suite for
 * suite_dir), store every outcome, and fill *out with the rows and their
 * summary.  Returns ATB_OK when every task ran or when stopped
 * (out->interrupted), whatever the verdicts.  Errors before anything is
 * stored: ATB_ERR_USAGE (no task set or more than one, a kind other than
 * cpu or cuda, a named task of another kind, no bundled task of the kind,
 * bad seeds), ATB_ERR_NOT_FOUND (no such task or folder), the task's,
 * suite discovery's and protocol's load errors.  Then ATB_ERR_IO,
 * ATB_ERR_STORE, ATB_ERR_SYSTEM, ATB_ERR_NOMEM (the run stays resumable).
 * Caller owns *out (atb_calibrate_report_release), filled as far as it got.
 */
enum atb_status atb_calibrate_start(const char *db_path, const struct atb_calibrate_opts *o,
				    struct atb_calibrate_report *out, struct atb_error *err);

/*
 * Continue the calibration run_id from its first missing task under its
 * stored plan and protocol (o's task set and seeds are ignored; o->runs_dir,
 * and for a suite calibration o->suite_dir and o->python, say where things
 * are on this machine: the store and runs folder may have been copied from
 * another one, see atb_suite_resume).  Each resume that runs a task is an
 * audit entry ("calibrate.resume", or the suite's "suite.resume").
 * ATB_ERR_NOT_FOUND: no such run, or one that is not a calibration;
 * ATB_ERR_USAGE: this box is not the run's and o->allow_other_box is 0.
 */
enum atb_status atb_calibrate_resume(const char *db_path, const char *run_id,
				     const struct atb_calibrate_opts *o,
				     struct atb_calibrate_report *out, struct atb_error *err);

/* Free what *r owns and zero it.  Idempotent. */
void atb_calibrate_report_release(struct atb_calibrate_report *r);

#endif
