/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * bench-loop: wall time per tuning-loop iteration on a real task (default
 * sgemm), split into build (surface gate and compiles) and measurement
 * (runner: correctness, paired timing, the baseline alone; stats, gates,
 * ingest), against the same run's reference: the median time of one plain
 * call of the honest baseline as that iteration's job measured it.
 *
 * It runs atb_loop_start on a temporary store with a measure hook that
 * records each outcome's build_s and run_s and passes everything through to
 * atb_measure_candidate, so the figures are the loop's own.
 * Usage: bench-loop [iterations [task]]   (ATB_HOME selects the tree)
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "atb/atb.h"
#include "atb/loop.h"
#include "atb/store.h"
#include "util.h"
#include "banned.h"

#define MAX_IT 64

static struct {
	double build_s, run_s, baseline_ns;
	char verdict[40];
} rec[MAX_IT];
static int nrec;

static enum atb_status timed_measure(struct atb_store *s, const struct atb_protocol *p,
				     const struct atb_task *task, const char *dir,
				     const struct atb_knob_assignment *knobs,
				     const struct atb_measure_opts *opts,
				     struct atb_measure_outcome *out, struct atb_error *err)
{
	enum atb_status st = atb_measure_candidate(s, p, task, dir, knobs, opts, out, err);

	if (st == ATB_OK && nrec < MAX_IT) {
		rec[nrec].build_s = out->build_s;
		rec[nrec].run_s = out->run_s;
		rec[nrec].baseline_ns = out->baseline_median_ns;
		snprintf(rec[nrec].verdict, sizeof(rec[nrec].verdict), "%s",
			 out->verdict == ATB_MEASURE_REJECTED ? out->gate
							      : atb_measure_verdict_name(out->verdict));
		nrec++;
	}
	return st;
}

int main(int argc, char **argv)
{
	struct atb_loop_opts o;
	struct atb_loop_summary sum;
	struct atb_iteration_row *rows = NULL;
	struct atb_store *s = NULL;
	struct atb_error err;
	char dir[] = "/tmp/atb-bench-loop.XXXXXX", db[64], runs[64], cmd[128];
	const char *task = argc > 2 ? argv[2] : "sgemm";
	long iterations = argc > 1 ? strtol(argv[1], NULL, 10) : 2;
	double wall = 0, build = 0, run = 0, base = 0;
	size_t n = 0, i;
	int nbase = 0, rc = 0;

	if (iterations < 1 || iterations > MAX_IT) {
		fprintf(stderr, "bench-loop: iterations is 1 to %d\n", MAX_IT);
		return 2;
	}
	if (!mkdtemp(dir)) {
		perror("bench-loop: mkdtemp");
		return 1;
	}
	snprintf(db, sizeof(db), "%s/atb.db", dir);
	snprintf(runs, sizeof(runs), "%s/runs", dir);
	atb_error_clear(&err);
	memset(&o, 0, sizeof(o));
	o.iterations = iterations;
	o.seed = 1;
	o.naive = 0;   /* the loop as an agent runs it: honest baseline only */
	o.runs_dir = runs;
	o.measure = timed_measure;
	if (atb_store_open(db, ATB_STORE_CREATE, &s, &err) ||
	    atb_loop_start(s, task, &o, &sum, &err) ||
	    atb_store_list_iterations(s, sum.run_id, &rows, &n, &err)) {
		fprintf(stderr, "bench-loop: %s\n", err.msg);
		rc = 1;
		goto out;
	}
	{
		struct atb_run_row r;

		if (atb_store_get_run(s, sum.run_id, &r, &err) == ATB_OK)
			printf("bench-loop: %s, %zu iterations, %" PRId64
			       " paired seeds, naive off\n", task, n, r.paired_seeds);
	}
	printf("%4s  %-16s  %9s  %9s  %9s  %14s  %14s\n", "iter", "outcome", "wall_s",
	       "build_s", "measure_s", "baseline_call", "iter/call");
	for (i = 0; i < n && (int)i < nrec; i++) {
		double ratio = rec[i].baseline_ns > 0 ? rows[i].wall_s * 1e9 / rec[i].baseline_ns : 0;

		printf("%4" PRId64 "  %-16s  %9.2f  %9.2f  %9.2f  %11.3f ms  %14.3g\n", rows[i].k,
		       rows[i].outcome, rows[i].wall_s, rec[i].build_s, rec[i].run_s,
		       rec[i].baseline_ns / 1e6, ratio);
		wall += rows[i].wall_s;
		build += rec[i].build_s;
		run += rec[i].run_s;
		if (rec[i].baseline_ns > 0) {
			base += rec[i].baseline_ns;
			nbase++;
		}
	}
	if (n) {
		printf("mean  wall %.2f s = build %.2f s + measurement %.2f s (+ %.2f s loop)\n",
		       wall / (double)n, build / (double)n, run / (double)n,
		       (wall - build - run) / (double)n);
		if (nbase)
			printf("reference: one plain call of the honest baseline, median in the same "
			       "jobs: %.3f ms; iteration / call = %.3g\n",
			       base / nbase / 1e6, (wall / (double)n) / (base / nbase / 1e9));
	}
out:
	atb_store_iterations_free(rows, n);
	atb_store_close(s);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "bench-loop: cannot remove %s\n", dir);
	return rc;
}
