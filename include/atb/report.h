/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Reports of tuning runs, read back from the store: the trajectory
 * (iteration, knobs, outcome, speedup vs the honest baseline with its
 * confidence interval, and vs the naive baseline, labelled), the best
 * iteration (keep-best: the highest CI lower bound of the honest speedup,
 * as include/atb/loop.h), the usable-iteration count and rate, gate
 * firings by gate, the box (fingerprint and a short description) and the
 * protocol (version and digest).  The honest and the naive numbers always
 * travel together, each with its label: a speedup over a naive start is
 * never shown instead of the honest one (MISSION.md: 10.6x vs 2.03x).
 *
 * Three renderings of one struct atb_report: text (for a terminal), JSON
 * (same content) and CSV (the trajectory, RFC 4180).  Each returns a
 * string; the caller prints or writes it.
 *
 * Does not: measure, recompute statistics (the stored numbers are shown as
 * stored), or print.
 */
#ifndef ATB_REPORT_H
#define ATB_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "atb/status.h"
#include "atb/store.h"

#define ATB_REPORT_MAX_FIRINGS 32

struct atb_report_firing {
	char outcome[64];          /* a gate id, "quarantined", "rejected:<rule>", ... */
	int64_t count;
};

struct atb_report {
	struct atb_run_row run;
	struct atb_iteration_row *iters;   /* run.done rows, in order; owned */
	size_t niters;
	int64_t usable;
	double usable_rate;                /* usable / niters; 0 when none */
	int64_t best;                      /* index into iters, -1 when none usable */
	struct atb_report_firing firings[ATB_REPORT_MAX_FIRINGS];
	size_t nfirings;                   /* by count, then name */
	int protocol_version;              /* 0 when the digest is not frozen here */
	char *box_json;                    /* the stored description; owned; "{}" when absent */
	char box_summary[256];             /* "cpu model, N cores, M GiB, os" */
	/*
	 * An engine task's run (atb/engine.h): the speedup is the ratio of
	 * requests/s against the engine's default configuration; the latency
	 * ratios with their intervals are in each result's stored stats (read
	 * by cli/cmd_report.c through atb_store_result_stats).
	 */
	int engine;
	/* Labels of the two baselines, from the task when it can be loaded. */
	char honest_label[128];
	char naive_label[128];
};

/*
 * Build the report of run_id from the store (and, for the baselines'
 * labels, the task under home; NULL: atb_home(); a task that no longer
 * loads leaves generic labels).  Caller owns *out (atb_report_free); NULL
 * on failure.  Errors: ATB_ERR_NOT_FOUND "no run 'ID' in store 'PATH'",
 * ATB_ERR_STORE, ATB_ERR_NOMEM.
 */
enum atb_status atb_report_build(struct atb_store *s, const char *run_id, const char *home,
				 struct atb_report **out, struct atb_error *err);
void atb_report_free(struct atb_report *r);

/* The report as text for a terminal; caller owns *out (atb_free). */
enum atb_status atb_report_text(const struct atb_report *r, char **out, struct atb_error *err);

/*
 * The report as JSON: {"run", "protocol", "box", "baselines", "trajectory",
 * "best", "usable", "gate_firings"} (docs/report.md lists every key); for
 * an engine run also "engine": true (cli/cmd_report.c adds "requests_per_s"
 * and "latency" to each iteration that has a stored result, from its stats;
 * docs/engine.md).
 * Caller owns *out (json_decref).
 */
enum atb_status atb_report_json(const struct atb_report *r, json_t **out, struct atb_error *err);

/*
 * The trajectory as CSV with a header line: iteration, outcome, usable,
 * honest_speedup, honest_ci_low, honest_ci_high, naive_speedup,
 * naive_ci_low, naive_ci_high, knobs, job_uuid, wall_s, reason (empty
 * cells when not measured).  Caller owns *out (atb_free).
 */
enum atb_status atb_report_csv(const struct atb_report *r, char **out, struct atb_error *err);

/* Every run as a table (text) or a JSON array; caller owns *out. */
enum atb_status atb_report_list_text(struct atb_store *s, char **out, struct atb_error *err);
enum atb_status atb_report_list_json(struct atb_store *s, json_t **out, struct atb_error *err);

#endif
