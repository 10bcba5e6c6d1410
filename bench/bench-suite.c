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
 * Per task it prints the same three figures (the row's wall time, the sum
 * of its job's stored samples, their ratio) and where the runner made the
 * inputs ("cuda": born on the device; "cpu": the CPU path, with why).  With
 * --baseline compile the compiled reference's samples are not in the store
 * (no arm for them), so its timed time is not in the sum: the ratio then
 * counts it, and the compilation, as overhead.
 *
 * Where the time goes: each torch runner appends its "phases" event
 * (runner/torch.c: exclusive seconds per phase) to $ATB_RUNNER_PHASES_LOG,
 * set here to a file in the temporary folder (the harness keeps no runner
 * output of an admitted job); per task, the phases of its paired runners
 * and of its baseline-alone runners are printed, largest first.
 *
 * Usage: bench-suite [--device cpu|cuda] [--filter GLOB] [--python PY]
 *                    [--candidates DIR] [--seeds N] [--baseline eager|compile]
 *                    [--suite DIR]
 * (ATB_HOME selects the tree; the default suite is its tasks/kernelbench, the
 * default filter every task.  --suite DIR: another folder, e.g. a copy of
 * the bundled tasks with sizes cut for a CPU.)
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <sqlite3.h>

#include "atb/atb.h"
#include "atb/suite.h"
#include "util.h"
#include "banned.h"

/*
 * Sum of every sample value (ns) of the jobs named by the suite's rows, or
 * of one job (job_uuid not NULL).
 */
static double trial_ns(const char *db, const char *run_id, const char *job_uuid,
		       int64_t *nsamples)
{
	const char *q =
		"SELECT coalesce(sum(s.value), 0), count(*) FROM sample s JOIN job j ON j.id = s.job "
		"WHERE j.uuid IN (SELECT job_uuid FROM iteration WHERE run = ?1 AND job_uuid IS NOT "
		"NULL AND job_uuid != '')";
	const char *q1 =
		"SELECT coalesce(sum(s.value), 0), count(*) FROM sample s JOIN job j ON j.id = s.job "
		"WHERE j.uuid = ?1";
	sqlite3 *h = NULL;
	sqlite3_stmt *st = NULL;
	double sum = 0.0;

	*nsamples = 0;
	if (sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
	    sqlite3_prepare_v2(h, job_uuid ? q1 : q, -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_text(st, 1, job_uuid ? job_uuid : run_id, -1, SQLITE_STATIC);
		if (sqlite3_step(st) == SQLITE_ROW) {
			sum = sqlite3_column_double(st, 0);
			*nsamples = sqlite3_column_int64(st, 1);
		}
	}
	sqlite3_finalize(st);
	sqlite3_close(h);
	return sum;
}

/* One phase's seconds, summed over a task's runners of one side. */
struct phase {
	char name[32];
	double s[2];  /* paired, alone */
};

#define MAX_PHASES 48

/*
 * The phases of the runners of task (a path ending in "/" task) from the
 * log: per phase, paired and alone seconds; their wall times in wall[2].
 * A job's last line only (a runner logs partial lines after each seed's
 * correctness: *partial is set when a job's last one is partial, a runner
 * killed at the job timeout).  The number of phases (0: none logged).
 */
static size_t task_phases(const char *log, const char *task, struct phase *ph, double *wall,
			  int *partial)
{
	FILE *f = fopen(log, "r");
	json_t *last = json_object(), *ev;
	char *line = NULL;
	size_t cap = 0, n = 0, tl = strlen(task), i;
	ssize_t len;
	const char *id;

	wall[0] = wall[1] = 0;
	*partial = 0;
	while (f && last && (len = getline(&line, &cap, f)) > 0) {
		ev = json_loadb(line, (size_t)len, 0, NULL);
		id = json_string_value(json_object_get(ev, "job"));
		if (id)
			json_object_set_new(last, id, ev);
		else
			json_decref(ev);
	}
	free(line);  /* getline's buffer is libc's */
	if (f)
		fclose(f);
	json_object_foreach(last, id, ev) {
		const char *path = json_string_value(json_object_get(ev, "task")), *k;
		size_t pl = path ? strlen(path) : 0;
		int side = json_is_true(json_object_get(ev, "alone"));
		json_t *v;

		if (!path || pl <= tl || strcmp(path + pl - tl, task) || path[pl - tl - 1] != '/')
			continue;
		*partial |= json_is_true(json_object_get(ev, "partial"));
		wall[side] += json_number_value(json_object_get(ev, "wall_s"));
		json_object_foreach(json_object_get(ev, "seconds"), k, v) {
			for (i = 0; i < n && strcmp(ph[i].name, k); i++)
				;
			if (i == n && n < MAX_PHASES) {
				memset(&ph[n], 0, sizeof(ph[n]));
				snprintf(ph[n++].name, sizeof(ph[0].name), "%s", k);
			}
			if (i < n)
				ph[i].s[side] += json_number_value(v);
		}
	}
	json_decref(last);
	return n;
}

static int by_paired_desc(const void *a, const void *b)
{
	const struct phase *x = a, *y = b;

	return (x->s[0] + x->s[1] < y->s[0] + y->s[1]) - (x->s[0] + x->s[1] > y->s[0] + y->s[1]);
}

/*
 * Print a task's phases; returns the seconds its runners spent starting
 * (phases "interpreter" and "imports", both sides): a cost per runner
 * process that no task size changes.
 */
static double print_phases(const char *log, const char *task)
{
	struct phase ph[MAX_PHASES];
	double wall[2], start_s = 0;
	int partial;
	size_t n = task_phases(log, task, ph, wall, &partial), i;

	if (!n) {
		printf("  phases: none logged (not a torch task, or its runner did not finish)\n");
		return 0;
	}
	for (i = 0; i < n; i++)
		if (!strcmp(ph[i].name, "interpreter") || !strcmp(ph[i].name, "imports"))
			start_s += ph[i].s[0] + ph[i].s[1];
	qsort(ph, n, sizeof(ph[0]), by_paired_desc);
	printf("  %-18s %10s %10s   (runner wall: paired %.2f s, alone %.2f s%s)\n", "phase",
	       "paired_s", "alone_s", wall[0], wall[1],
	       partial ? "; a runner did not finish: its phases up to its last seed's correctness"
		       : "");
	for (i = 0; i < n; i++)
		printf("  %-18s %10.3f %10.3f\n", ph[i].name, ph[i].s[0], ph[i].s[1]);
	return start_s;
}

int main(int argc, char **argv)
{
	struct atb_suite_opts o;
	struct atb_suite_report rep;
	struct atb_error err;
	char dir[] = "/tmp/bench-suite-XXXXXX", db[600], suite[4096], cands[4096], log[600];
	const char *home = atb_home();
	int64_t t0, t1, nsamples = 0;
	double wall_s, inside_s, start_s = 0;
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
		else if (!strcmp(argv[a], "--baseline"))
			o.baseline = argv[a + 1];
		else if (!strcmp(argv[a], "--suite"))
			snprintf(suite, sizeof(suite), "%s", argv[a + 1]);
		else
			break;
	}
	if (a < argc) {
		fprintf(stderr, "usage: bench-suite [--device cpu|cuda] [--filter GLOB] "
				"[--python PY] [--candidates DIR] [--seeds N] "
				"[--baseline eager|compile] [--suite DIR]\n");
		return 2;
	}
	if (!mkdtemp(dir)) {
		perror("bench-suite: mkdtemp");
		return 3;
	}
	snprintf(db, sizeof(db), "%s/atb.db", dir);
	snprintf(log, sizeof(log), "%s/phases.jsonl", dir);
	setenv("ATB_RUNNER_PHASES_LOG", log, 1);
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
	inside_s = trial_ns(db, rep.run_id, NULL, &nsamples) / 1e9;

	printf("bench-suite: %s, device %s, candidates %s, baseline %s, store %s\n", suite,
	       o.device, o.candidates_dir, o.baseline ? o.baseline : "eager", db);
	printf("%-32s %-14s %9s %9s %9s %8s %-6s %s\n", "task", "outcome", "speedup", "wall_s",
	       "timed_s", "ratio", "inputs", "vs compile");
	for (i = 0; i < rep.nrows; i++) {
		const struct atb_suite_row *w = &rep.rows[i];
		int64_t ns = 0;
		double t_s = w->job_uuid[0] ? trial_ns(db, rep.run_id, w->job_uuid, &ns) / 1e9 : 0;
		char ratio[32] = "n/a", vc[64] = "-";

		if (t_s > 0)
			snprintf(ratio, sizeof(ratio), "%.2f", w->wall_s / t_s);
		if (w->compile_speedup > 0)
			snprintf(vc, sizeof(vc), "%.4f (compiled in %.1f s)", w->compile_speedup,
				 w->compile_s);
		else if (w->compile_why[0])
			snprintf(vc, sizeof(vc), "n/a");
		printf("%-32s %-14s %9.4f %9.2f %9.3f %8s %-6s %s\n", w->task, w->outcome,
		       w->speedup, w->wall_s, t_s, ratio, w->inputs_on[0] ? w->inputs_on : "?", vc);
		start_s += print_phases(log, w->task);
	}
	printf("tasks (verdicts)          %zu\n", rep.nrows);
	printf("suite wall time           %.2f s\n", wall_s);
	printf("wall time per verdict     %.2f s\n", rep.nrows ? wall_s / (double)rep.nrows : 0.0);
	printf("time inside timed trials  %.2f s (%" PRId64 " samples, every arm and seed)\n",
	       inside_s, nsamples);
	if (inside_s > 0)
		printf("ratio wall / timed        %.2f (target <= 5)\n", wall_s / inside_s);
	else
		printf("ratio wall / timed        not measured (no admitted sample)\n");
	/* What the ratio would be if a runner cost nothing to start: the part
	   of the overhead that input size, correctness and timing drive. */
	printf("runner start (interpreter + imports, both runners) %.2f s", start_s);
	if (inside_s > 0 && start_s > 0)
		printf("; ratio without it %.2f\n", (wall_s - start_s) / inside_s);
	else
		printf("\n");
	{
		size_t on = 0, known = 0;

		for (i = 0; i < rep.nrows; i++) {
			known += rep.rows[i].inputs_on[0] != '\0';
			on += !strcmp(rep.rows[i].inputs_on, "cuda");
		}
		printf("inputs born on the device %zu of %zu measured tasks (the others: the CPU "
		       "path)\n", on, known);
	}
	printf("median speedup            %.4f [%.4f, %.4f] over %zu admitted\n",
	       rep.stats.median_speedup.value, rep.stats.median_speedup.lo,
	       rep.stats.median_speedup.hi, rep.stats.nadmitted);
	atb_suite_report_release(&rep);
	return 0;
}
