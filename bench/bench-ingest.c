/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Validated ingest throughput: raw per-trial sample rows through
 * atb_store_ingest into a SQLite WAL store whose triggers and CHECK
 * constraints validate every row, against, measured in this run:
 *   - the schema-2 path (issue 12's "current figures"): the same store with
 *     the v3 re-deriving triggers (seed_result_derive, result_derive)
 *     dropped and no row hash in the audit entry, which is what atb did
 *     before schema 3;
 *   - the same schema with every trigger dropped (CHECK constraints stay);
 *   - the schema-3 store fed through the judge (atb_judge_conclude: the
 *     statistics computed from the samples with stats/, 10000 bootstrap
 *     resamples as protocol v4, then the same ingest), which is the path
 *     atb measure, the engine A/B and ingest-json take.
 * Each round times the three stores, alternating, so machine load hits all;
 * prints the median and the best round of each and the ratios of the
 * medians, for large jobs (10 seeds x 2 arms x TRIALS) and for jobs of the
 * size atb measure stores (10 seeds x 2 arms x 100 trials).
 * Target: >= 100,000 validated rows/s on large jobs.
 *
 * Usage: bench-ingest [JOBS [TRIALS [ROUNDS]]]   (defaults 5 10000 5)
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "atb/alloc.h"
#include "atb/judge.h"
#include "atb/protocol.h"
#include "atb/store.h"
#include "store/store_int.h"
#include "util.h"
#include "banned.h"

#define CANONICAL \
	"{\"gates\":{\"anomaly_breaker\":{\"factor\":10.0}},\"stats\":{\"cv_cap\":0.05," \
	"\"min_paired_seeds\":5},\"version\":1}"

static int make_store(const char *path, struct atb_store **s, char digest[65], char box[65])
{
	struct atb_frozen_protocol p;
	struct atb_error err;

	memset(&p, 0, sizeof(p));
	p.version = 1;
	p.canonical_json = (char *)CANONICAL;
	atbi_sha256_hex(CANONICAL, strlen(CANONICAL), p.digest);
	memcpy(digest, p.digest, 65);
	atbi_sha256_hex("bench box", 9, box);
	atb_error_clear(&err);
	if (atb_store_open(path, ATB_STORE_CREATE, s, &err) ||
	    atb_store_sync_protocols(*s, &p, 1, NULL, &err) ||
	    atb_store_register_box(*s, box, "{\"cpu\":\"bench\"}", &err)) {
		fprintf(stderr, "bench-ingest: %s\n", err.msg);
		return 1;
	}
	return 0;
}

/* Ingest `jobs` jobs of nseeds x 2 arms x trials rows; returns rows/s. */
static double run(struct atb_store *s, const char *digest, const char *box, int jobs,
		  int nseeds, int trials)
{
	size_t n = (size_t)nseeds * 2 * (size_t)trials, k = 0;
	struct atb_sample *x = malloc(n * sizeof(*x));
	struct atb_seed_result *r = malloc((size_t)nseeds * sizeof(*r));
	struct atb_ingest in;
	struct atb_error err;
	int64_t t0, total = 0;
	int i, t, j;

	if (!x || !r)
		return 0;
	for (i = 0; i < nseeds; i++) {
		for (t = 0; t < trials; t++) {
			x[k++] = (struct atb_sample){i, t, ATB_ARM_BASELINE, 1000.0 + (t % 7)};
			x[k++] = (struct atb_sample){i, t, ATB_ARM_CANDIDATE, 800.0 + (t % 5)};
		}
		r[i] = (struct atb_seed_result){i, 1003.0, 802.0, 1003.0 / 802.0};
	}
	memset(&in, 0, sizeof(in));
	in.kind = "kernel";
	in.task = "bench";
	in.candidate = "c";
	in.protocol_digest = digest;
	in.box_fingerprint = box;
	in.unit = "ns";
	in.metric = "time_ns/median";
	in.samples = x;
	in.nsamples = n;
	in.seeds = r;
	in.nseeds = (size_t)nseeds;
	in.speedup = 1003.0 / 802.0;
	in.ci_low = in.speedup * 0.99;
	in.ci_high = in.speedup * 1.01;
	in.cv = 0.0;  /* every seed alike: the cv that follows (the store re-derives it) */
	for (j = 0; j < jobs; j++) {
		t0 = atbi_monotonic_ns();
		atb_error_clear(&err);
		if (atb_store_ingest(s, &in, NULL, &err)) {
			fprintf(stderr, "bench-ingest: %s\n", err.msg);
			free(x);
			free(r);
			return 0;
		}
		total += atbi_monotonic_ns() - t0;
	}
	free(x);
	free(r);
	return (double)n * jobs / ((double)total / 1e9);
}

/* The same jobs through the judge: statistics from the samples, then the ingest. */
static double run_judge(struct atb_store *s, const char *digest, const char *box, int jobs,
			int nseeds, int trials)
{
	struct atb_protocol *p = calloc(1, sizeof(*p));
	struct atb_judge_seed *js = calloc((size_t)nseeds, sizeof(*js));
	double *v = malloc((size_t)nseeds * 2 * (size_t)trials * sizeof(*v));
	struct atb_measure_outcome out;
	struct atb_judge_facts f;
	struct atb_judge j;
	struct atb_error err;
	int64_t t0, total = 0;
	double rate = 0;
	int i, t, k;

	if (!p || !js || !v)
		goto out;
	memcpy(p->digest, digest, 65);
	p->stats.cv_cap = 0.05;
	p->stats.ci_level = 0.95;
	p->stats.bootstrap_resamples = 10000;
	p->stats.significance_alpha = 0.05;
	p->gates.anomaly_factor = 10.0;
	for (i = 0; i < nseeds; i++) {
		double *b = v + (size_t)i * 2 * (size_t)trials, *c = b + trials;

		for (t = 0; t < trials; t++) {
			b[t] = 1000.0 + (t % 7);
			c[t] = 800.0 + (t % 5);
		}
		js[i].seed = (uint64_t)i;
		js[i].v[ATB_ARM_BASELINE] = b;
		js[i].n[ATB_ARM_BASELINE] = (size_t)trials;
		js[i].v[ATB_ARM_CANDIDATE] = c;
		js[i].n[ATB_ARM_CANDIDATE] = (size_t)trials;
	}
	memset(&f, 0, sizeof(f));
	f.seeds = js;
	f.nseeds = (size_t)nseeds;
	f.bootstrap_seed = atb_judge_bootstrap_seed(0, (size_t)nseeds);
	for (k = 0; k < jobs; k++) {
		json_t *stats = json_object();
		enum atb_status st;

		memset(&out, 0, sizeof(out));
		memset(&j, 0, sizeof(j));
		j.store = s;
		j.p = p;
		j.out = &out;
		j.producer = ATB_JUDGE_KERNEL;
		j.kind = "kernel";
		j.task = "bench";
		j.candidate = "c";
		j.unit = "ns";
		j.metric = "time_ns/median";
		atb_error_clear(&err);
		t0 = atbi_monotonic_ns();
		st = atb_judge_init(&j, &err);
		if (!st)
			st = atb_judge_register_box(&j, NULL, box, &err);
		if (!st)
			st = atb_judge_conclude(&j, &f, stats, NULL, NULL, NULL, &err);
		total += atbi_monotonic_ns() - t0;
		atb_judge_release(&j);
		json_decref(stats);
		if (st || out.result_id <= 0) {
			fprintf(stderr, "bench-ingest: judge: %s %s\n", err.msg, out.reason);
			goto out;
		}
	}
	rate = (double)nseeds * 2 * trials * jobs / ((double)total / 1e9);
out:
	free(p);
	free(js);
	free(v);
	return rate;
}

/* The schema-2 ingest path: no re-deriving triggers, no row hash in the entry. */
static int schema2_path(struct atb_store *s)
{
	s->schema = 2;
	return sqlite3_exec(s->db, "DROP TRIGGER seed_result_derive; DROP TRIGGER result_derive;",
			    NULL, NULL, NULL) != SQLITE_OK;
}

static int drop_triggers(struct atb_store *s)
{
	sqlite3_stmt *q;
	char *sql = NULL;
	int rc;

	/* The DROP statements are built by SQL (names quoted by quote()) and run at once. */
	if (sqlite3_prepare_v2(s->db, "SELECT group_concat('DROP TRIGGER ' || quote(name), ';')"
			       " FROM sqlite_schema WHERE type = 'trigger'", -1, &q, NULL) != SQLITE_OK)
		return 1;
	if (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_text(q, 0))
		sql = strdup((const char *)sqlite3_column_text(q, 0));
	sqlite3_finalize(q);
	rc = !sql || sqlite3_exec(s->db, sql, NULL, NULL, NULL) != SQLITE_OK;
	free(sql);
	return rc;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Median and best of n rates (sorted in place). */
static void summary(double *v, int n, double *median, double *best)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	*median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
	*best = v[n - 1];
}

#define MAX_ROUNDS 64

/* ROUNDS alternating rounds of `jobs` jobs each on the three stores; 0 on success. */
static int compare(struct atb_store *sa, struct atb_store *s2, struct atb_store *sb,
		   struct atb_store *sj, const char *digest, const char *box, int jobs, int trials,
		   int rounds, const char *label, double *median)
{
	double v[MAX_ROUNDS], o[MAX_ROUNDS], p[MAX_ROUNDS], q[MAX_ROUNDS], vm, vb, om, ob, pm, pb;
	double qm, qb;
	int r;

	for (r = 0; r < rounds; r++) {
		v[r] = run(sa, digest, box, jobs, 10, trials);
		o[r] = run(s2, digest, box, jobs, 10, trials);
		p[r] = run(sb, digest, box, jobs, 10, trials);
		q[r] = run_judge(sj, digest, box, jobs, 10, trials);
		if (v[r] <= 0 || o[r] <= 0 || p[r] <= 0 || q[r] <= 0)
			return 1;
	}
	summary(v, rounds, &vm, &vb);
	summary(o, rounds, &om, &ob);
	summary(p, rounds, &pm, &pb);
	summary(q, rounds, &qm, &qb);
	printf("%s: %d rounds of %d jobs x %d rows, one transaction per job\n", label, rounds,
	       jobs, 10 * 2 * trials);
	printf("  schema 3 (re-derived + rows hashed):    median %10.0f  best %10.0f rows/s\n",
	       vm, vb);
	printf("  schema-2 path (before issue 12):        median %10.0f  best %10.0f rows/s\n",
	       om, ob);
	printf("  same schema, triggers dropped:          median %10.0f  best %10.0f rows/s\n",
	       pm, pb);
	printf("  schema 3 through the judge (stats/):    median %10.0f  best %10.0f rows/s\n",
	       qm, qb);
	printf("  ratio of medians schema 3/schema-2:     %.2f\n", vm / om);
	printf("  ratio of medians judge/schema 3:        %.2f\n", qm / vm);
	printf("  ratio of medians schema 3/dropped:      %.2f\n", vm / pm);
	*median = vm;
	return 0;
}

int main(int argc, char **argv)
{
	char dir[] = "/tmp/atb-bench-ingest.XXXXXX", a[128], b[128], c[128], d[128], cmd[160];
	char digest[65], box[65];
	struct atb_store *sa = NULL, *sb = NULL, *s2 = NULL, *sj = NULL;
	double large, small;
	int jobs = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 5;
	int trials = argc > 2 ? (int)strtol(argv[2], NULL, 10) : 10000;
	int rounds = argc > 3 ? (int)strtol(argv[3], NULL, 10) : 5;
	int rc = 1;

	if (jobs < 1 || trials < 1 || rounds < 1 || rounds > MAX_ROUNDS) {
		fprintf(stderr, "usage: bench-ingest [JOBS [TRIALS [ROUNDS (1-%d)]]]\n", MAX_ROUNDS);
		return 2;
	}
	if (!mkdtemp(dir))
		return 1;
	snprintf(a, sizeof(a), "%s/validated.db", dir);
	snprintf(b, sizeof(b), "%s/no-triggers.db", dir);
	snprintf(c, sizeof(c), "%s/schema2-path.db", dir);
	snprintf(d, sizeof(d), "%s/judge.db", dir);
	if (make_store(a, &sa, digest, box) || make_store(b, &sb, digest, box) ||
	    make_store(c, &s2, digest, box) || make_store(d, &sj, digest, box) ||
	    drop_triggers(sb) || schema2_path(s2))
		goto out;
	/* Warm each once. */
	run(sa, digest, box, 1, 10, 100);
	run(s2, digest, box, 1, 10, 100);
	run(sb, digest, box, 1, 10, 100);
	run_judge(sj, digest, box, 1, 10, 100);
	printf("SQLite WAL, synchronous=NORMAL; rows/s of wall time; the machine may be shared\n");
	if (compare(sa, s2, sb, sj, digest, box, jobs, trials, rounds, "large jobs", &large))
		goto out;
	/* atb measure's size: 10 seeds x 2 arms x 100 trials, per-job costs weigh more. */
	if (compare(sa, s2, sb, sj, digest, box, 100, 100, rounds, "measure-sized jobs", &small))
		goto out;
	printf("target >= 100000 validated rows/s (median, large jobs): %s\n",
	       large >= 100000 ? "met" : "NOT MET");
	rc = 0;
out:
	atb_store_close(sa);
	atb_store_close(s2);
	atb_store_close(sb);
	atb_store_close(sj);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "bench-ingest: cannot remove %s\n", dir);
	return rc;
}
