/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * bench-suite: wall time per verdict of `atb suite` on the bundled
 * KernelBench-format tasks (tasks/kernelbench, copy candidates), and its
 * ratio to the time spent inside timed trials (target: at most 5).
 *
 * It runs atb_suite_start on a temporary store, then sums, from that store,
 * every raw sample (every arm, every seed, every trial: the time inside the
 * timed window) of the jobs the suite's iteration rows name.  Wall time per
 * verdict = the suite's wall time / tasks; the ratio = the suite's wall time
 * / the summed trial time, both measured in this one run.  Everything else
 * (interpreter start, imports, model construction, input generation,
 * correctness on every input set, warm-up, cache flushes between trials,
 * the drift job, stats, ingest) is the overhead the ratio exposes.
 *
 * Usage: bench-suite [--device cpu|cuda] [--filter GLOB] [--python PY]
 *                    [--candidates DIR] [--seeds N]
 * (ATB_HOME selects the tree; the default filter is every task.)
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "atb/atb.h"
#include "atb/suite.h"
#include "util.h"
#include "banned.h"

/* Sum of every sample value (ns) of the jobs named by the suite's rows. */
static double trial_ns(const char *db, const char *run_id, int64_t *nsamples)
{
	const char *q =
		"SELECT coalesce(sum(s.value), 0), count(*) FROM sample s JOIN job j ON j.id = s.job "
		"WHERE j.uuid IN (SELECT job_uuid FROM iteration WHERE run = ?1 AND job_uuid IS NOT "
		"NULL AND job_uuid != '')";
	sqlite3 *h = NULL;
	sqlite3_stmt *st = NULL;
	double sum = 0.0;

	*nsamples = 0;
	if (sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
	    sqlite3_prepare_v2(h, q, -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_text(st, 1, run_id, -1, SQLITE_STATIC);
		if (sqlite3_step(st) == SQLITE_ROW) {
			sum = sqlite3_column_double(st, 0);
			*nsamples = sqlite3_column_int64(st, 1);
		}
	}
	sqlite3_finalize(st);
	sqlite3_close(h);
	return sum;
}

int main(int argc, char **argv)
{
	struct atb_suite_opts o;
	struct atb_suite_report rep;
	struct atb_error err;
	char dir[] = "/tmp/bench-suite-XXXXXX", db[600], suite[4096], cands[4096];
	const char *home = atb_home();
	int64_t t0, t1, nsamples = 0;
	double wall_s, inside_s;
	size_t i;
	int a;

	memset(&o, 0, sizeof(o));
	o.device = "cuda";
	snprintf(suite, sizeof(suite), "%s/tasks/kernelbench", home);
	snprintf(cands, sizeof(cands), "%s/tasks/kernelbench/candidates/copy", home);
	o.candidates_dir = cands;
	for (a = 1; a + 1 < argc; a += 2) {
		if (!strcmp(argv[a], "--device"))
			o.device = argv[a + 1];
		else if (!strcmp(argv[a], "--filter"))
			o.filter = argv[a + 1];
		else if (!strcmp(argv[a], "--python"))
			o.python = argv[a + 1];
		else if (!strcmp(argv[a], "--candidates"))
			o.candidates_dir = argv[a + 1];
		else if (!strcmp(argv[a], "--seeds"))
			o.paired_seeds = strtoll(argv[a + 1], NULL, 10);
		else
			break;
	}
	if (a < argc) {
		fprintf(stderr, "usage: bench-suite [--device cpu|cuda] [--filter GLOB] "
				"[--python PY] [--candidates DIR] [--seeds N]\n");
		return 2;
	}
	if (!mkdtemp(dir)) {
		perror("bench-suite: mkdtemp");
		return 3;
	}
	snprintf(db, sizeof(db), "%s/atb.db", dir);
	atb_error_clear(&err);
	t0 = atbi_monotonic_ns();
	if (atb_suite_start(db, suite, &o, &rep, &err)) {
		char buf[2048];

		atb_error_format(&err, buf, sizeof(buf));
		fprintf(stderr, "bench-suite: %s\n", buf);
		atb_suite_report_release(&rep);
		return 3;
	}
	t1 = atbi_monotonic_ns();
	wall_s = (double)(t1 - t0) / 1e9;
	inside_s = trial_ns(db, rep.run_id, &nsamples) / 1e9;

	printf("bench-suite: %s, device %s, candidates %s, store %s\n", suite, o.device,
	       o.candidates_dir, db);
	printf("%-32s %-14s %9s %9s\n", "task", "outcome", "speedup", "wall_s");
	for (i = 0; i < rep.nrows; i++)
		printf("%-32s %-14s %9.4f %9.2f\n", rep.rows[i].task, rep.rows[i].outcome,
		       rep.rows[i].speedup, rep.rows[i].wall_s);
	printf("tasks (verdicts)          %zu\n", rep.nrows);
	printf("suite wall time           %.2f s\n", wall_s);
	printf("wall time per verdict     %.2f s\n", rep.nrows ? wall_s / (double)rep.nrows : 0.0);
	printf("time inside timed trials  %.2f s (%" PRId64 " samples, every arm and seed)\n",
	       inside_s, nsamples);
	if (inside_s > 0)
		printf("ratio wall / timed        %.2f (target <= 5)\n", wall_s / inside_s);
	else
		printf("ratio wall / timed        not measured (no admitted sample)\n");
	printf("median speedup            %.4f [%.4f, %.4f] over %zu admitted\n",
	       rep.stats.median_speedup.value, rep.stats.median_speedup.lo,
	       rep.stats.median_speedup.hi, rep.stats.nadmitted);
	atb_suite_report_release(&rep);
	return 0;
}
