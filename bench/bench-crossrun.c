/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * bench-crossrun: cross-run stability of the measurement on each bundled CPU
 * task.  Honest against honest: the candidate is the task's own baseline
 * source, so every ratio should read 1.  Each run is a full
 * atb_measure_candidate (builds, one fresh runner per seed for the paired
 * arms and for the baseline alone, statistics, gates) on a temporary store;
 * the per-seed medians are read back from the stored result or refusal.
 *
 * Per task it prints, across the runs:
 *   cv medians  for each seed, the cv of its baseline median across runs;
 *               the median over seeds (target: at most 1% on this machine)
 *   cv ratios   the same for the per-seed ratios baseline / candidate
 *   drift       each run's drift ratio (baseline beside / alone, the
 *               baseline_drift gate's figure) and verdicts
 * The reference is the runs themselves: no figure is compared with a number
 * from another run of the program.
 * Usage: bench-crossrun [runs [task...]]   (default 3 runs; sgemm softmax
 * layernorm stencil2d prefix_sum relu; ATB_HOME selects the tree)
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>
#include <sqlite3.h>

#include "atb/alloc.h"
#include "atb/atb.h"
#include "atb/box.h"
#include "atb/measure.h"
#include "atb/protocol.h"
#include "atb/store.h"
#include "atb/task.h"
#include "util.h"
#include "banned.h"

#define MAX_RUNS 16
#define MAX_SEEDS 64

static const char *const default_tasks[] = {"sgemm", "softmax", "layernorm",
					    "stencil2d", "prefix_sum", "relu"};

struct run_rec {
	double base[MAX_SEEDS], cand[MAX_SEEDS];
	size_t nseeds;
	double drift, speedup, wall_s;
	char verdict[40];
};

/* cv (sample sd / mean) of n values; NAN for n < 2. */
static double cv_of(const double *v, size_t n)
{
	double mean = 0, ss = 0;
	size_t i;

	if (n < 2)
		return NAN;
	for (i = 0; i < n; i++)
		mean += v[i];
	mean /= (double)n;
	for (i = 0; i < n; i++)
		ss += (v[i] - mean) * (v[i] - mean);
	return sqrt(ss / (double)(n - 1)) / mean;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median_inplace(double *v, size_t n)
{
	if (!n)
		return NAN;
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The stored per-seed medians of job uuid (result stats or refusal detail). */
static int read_medians(const char *db, const char *uuid, struct run_rec *r)
{
	static const char *const q =
		"SELECT r.stats FROM result r JOIN job j ON r.job = j.id WHERE j.uuid = ?1 "
		"UNION ALL SELECT detail FROM rejection WHERE job_uuid = ?1";
	sqlite3 *h = NULL;
	sqlite3_stmt *st = NULL;
	json_t *o = NULL, *b, *c;
	int rc = 1;
	size_t k;

	if (sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(h, q, -1, &st, NULL) != SQLITE_OK ||
	    sqlite3_bind_text(st, 1, uuid, -1, SQLITE_STATIC) != SQLITE_OK)
		goto out;
	if (sqlite3_step(st) != SQLITE_ROW)
		goto out;
	o = json_loads((const char *)sqlite3_column_text(st, 0), 0, NULL);
	b = json_object_get(json_object_get(o, "per_seed_medians_ns"), "baseline");
	c = json_object_get(json_object_get(o, "per_seed_medians_ns"), "candidate");
	if (!json_is_array(b) || !json_is_array(c) || json_array_size(b) != json_array_size(c) ||
	    json_array_size(b) > MAX_SEEDS)
		goto out;
	r->nseeds = json_array_size(b);
	for (k = 0; k < r->nseeds; k++) {
		r->base[k] = json_number_value(json_array_get(b, k));
		r->cand[k] = json_number_value(json_array_get(c, k));
	}
	rc = 0;
out:
	json_decref(o);
	sqlite3_finalize(st);
	sqlite3_close(h);
	return rc;
}

/* A candidate folder whose surface file is the task's baseline source. */
static int honest_candidate(const struct atb_task *t, const char *dir)
{
	char path[4200];
	char *data = NULL;
	size_t len = 0;
	struct atb_error err;
	FILE *f;
	int n;

	atb_error_clear(&err);
	if (mkdir(dir, 0700) != 0 || atbi_read_file(t->baseline.path, &data, &len, &err))
		return 1;
	n = snprintf(path, sizeof(path), "%s/%s", dir, t->surface[0]);
	f = n > 0 && (size_t)n < sizeof(path) ? fopen(path, "wb") : NULL;
	n = !f || fwrite(data, 1, len, f) != len;
	if (f && fclose(f) != 0)
		n = 1;
	atb_free(data);
	return n;
}

static int bench_task(const char *name, long runs, const char *tmp, struct atb_protocol *p,
		      struct atb_box *box, struct atb_store *s, const char *db)
{
	struct run_rec rec[MAX_RUNS];
	struct atb_task *t = NULL;
	struct atb_error err;
	char cand[256], work[256];
	double cvm[MAX_SEEDS], cvr[MAX_SEEDS], col[MAX_RUNS];
	size_t nseeds = 0, k;
	long i, ok = 0;

	atb_error_clear(&err);
	if (atb_task_open(atb_home(), name, &t, &err)) {
		fprintf(stderr, "bench-crossrun: %s\n", err.msg);
		return 1;
	}
	snprintf(cand, sizeof(cand), "%s/%s-candidate", tmp, name);
	snprintf(work, sizeof(work), "%s/%s-work", tmp, name);
	if (honest_candidate(t, cand) || mkdir(work, 0700) != 0) {
		fprintf(stderr, "bench-crossrun: cannot prepare %s\n", cand);
		atb_task_free(t);
		return 1;
	}
	for (i = 0; i < runs; i++) {
		struct atb_measure_opts o;
		struct atb_measure_outcome out;
		int64_t t0 = atbi_monotonic_ns();

		memset(&o, 0, sizeof(o));
		memset(&rec[i], 0, sizeof(rec[i]));
		o.work_dir = work;
		o.seed_base = 1;
		o.box = box;
		o.candidate_label = "honest vs honest";
		if (atb_measure_candidate(s, p, t, cand, NULL, &o, &out, &err)) {
			fprintf(stderr, "bench-crossrun: %s: %s\n", name, err.msg);
			atb_task_free(t);
			return 1;
		}
		rec[i].wall_s = (double)(atbi_monotonic_ns() - t0) / 1e9;
		rec[i].drift = out.drift_ratio;
		rec[i].speedup = out.speedup;
		snprintf(rec[i].verdict, sizeof(rec[i].verdict), "%s",
			 out.verdict == ATB_MEASURE_REJECTED ? out.gate
							     : atb_measure_verdict_name(out.verdict));
		if (read_medians(db, out.job_uuid, &rec[i]) || !rec[i].nseeds)
			continue;
		if (nseeds && rec[i].nseeds != nseeds)
			continue;
		nseeds = rec[i].nseeds;
		ok++;
	}
	printf("%-11s", name);
	for (i = 0; i < runs; i++)
		printf(" %s/%.1fs/drift %.3f", rec[i].verdict, rec[i].wall_s, rec[i].drift);
	printf("\n");
	for (k = 0; k < nseeds && ok > 1; k++) {
		size_t n = 0;

		for (i = 0; i < runs; i++)
			if (rec[i].nseeds == nseeds && rec[i].base[k] > 0)
				col[n++] = rec[i].base[k];
		cvm[k] = cv_of(col, n);
		n = 0;
		for (i = 0; i < runs; i++)
			if (rec[i].nseeds == nseeds && rec[i].base[k] > 0 && rec[i].cand[k] > 0)
				col[n++] = rec[i].base[k] / rec[i].cand[k];
		cvr[k] = cv_of(col, n);
	}
	if (ok > 1) {
		double med_m = median_inplace(cvm, nseeds), med_r = median_inplace(cvr, nseeds);

		printf("%-11s cv of per-seed medians across %ld runs: median %.2f%%, max %.2f%%;"
		       " cv of per-seed ratios: median %.2f%%, max %.2f%% (target <= 1%%)\n",
		       "", ok, 100 * med_m, 100 * cvm[nseeds - 1], 100 * med_r,
		       100 * cvr[nseeds - 1]);
	} else {
		printf("%-11s fewer than 2 runs with per-seed medians: cv not measured\n", "");
	}
	atb_task_free(t);
	return 0;
}

int main(int argc, char **argv)
{
	struct atb_frozen_protocol *list = NULL;
	struct atb_protocol *p = NULL;
	struct atb_store *s = NULL;
	struct atb_box *box = NULL;
	struct atb_error err;
	char tmp[] = "/tmp/atb-bench-crossrun.XXXXXX", db[64], cmd[128];
	long runs = argc > 1 ? strtol(argv[1], NULL, 10) : 3;
	size_t nlist = 0, i;
	int cur = 0, rc = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);  /* a line per task as it ends */
	if (runs < 2 || runs > MAX_RUNS) {
		fprintf(stderr, "bench-crossrun: runs is 2 to %d\n", MAX_RUNS);
		return 2;
	}
	if (!mkdtemp(tmp)) {
		perror("bench-crossrun: mkdtemp");
		return 1;
	}
	atb_error_clear(&err);
	snprintf(db, sizeof(db), "%s/atb.db", tmp);
	if (atb_protocol_frozen_list(atb_home(), &list, &nlist, &cur, &err) ||
	    atb_protocol_load_current(atb_home(), &p, &err) ||
	    atb_store_open(db, ATB_STORE_CREATE, &s, &err) ||
	    atb_store_sync_protocols(s, list, nlist, NULL, &err) ||
	    atb_box_probe_with_compiler(&box, p->build.cpu_compiler, &err)) {
		fprintf(stderr, "bench-crossrun: %s\n", err.msg);
		rc = 1;
		goto out;
	}
	printf("bench-crossrun: honest vs honest, %ld runs per task, %lld paired seeds, "
	       "naive off; per run: verdict/wall/drift ratio\n",
	       runs, (long long)p->stats.min_paired_seeds);
	if (argc > 2)
		for (i = 2; i < (size_t)argc; i++)
			rc |= bench_task(argv[i], runs, tmp, p, box, s, db);
	else
		for (i = 0; i < sizeof(default_tasks) / sizeof(default_tasks[0]); i++)
			rc |= bench_task(default_tasks[i], runs, tmp, p, box, s, db);
out:
	atb_box_free(box);
	atb_store_close(s);
	atb_protocol_free(p);
	atb_protocol_frozen_free(list, nlist);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	if (system(cmd) != 0)
		fprintf(stderr, "bench-crossrun: cannot remove %s\n", tmp);
	return rc;
}
