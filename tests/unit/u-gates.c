/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The judge (src/gates/): its table, the re-run bound, refusals at known
 * gates only, the noise gate's re-runs then refusal, an honest conclude
 * whose stored numbers db check re-derives (the interval included), and
 * ingest-json's path: samples alone admitted with derived numbers, a
 * forged interval refused at ingest (gate derived).
 */
#define _GNU_SOURCE
#include <math.h>

#include "atb/judge.h"
#include "atb/protocol.h"
#include "../fixtures/store/fixture.h"
#include "banned.h"

static struct fx F;
static struct atb_protocol P;
static struct atb_measure_outcome O;
static struct atb_judge J;

static void setup(void)
{
	struct atb_error err;

	fx_setup(&F);
	memset(&P, 0, sizeof(P));
	P.version = 1;
	memcpy(P.digest, F.digest, sizeof(P.digest));
	/* the fixture's frozen protocol: cv_cap 0.05, v1's cv of per-arm medians */
	P.stats.cv_cap = 0.05;
	P.stats.ci_level = 0.95;
	P.stats.bootstrap_resamples = 500;
	P.stats.significance_alpha = 0.05;
	P.gates.anomaly_factor = 10.0;
	memset(&O, 0, sizeof(O));
	snprintf(O.job_uuid, sizeof(O.job_uuid), "0123456789abcdef0123456789abcdef");
	memset(&J, 0, sizeof(J));
	J.store = F.s;
	J.p = &P;
	J.out = &O;
	J.producer = ATB_JUDGE_KERNEL;
	J.kind = "kernel";
	J.task = "relu";
	J.candidate = "cand-1";
	J.unit = "ns";
	J.metric = "time_ns/median";
	atb_error_clear(&err);
	cr_assert_eq(atb_judge_init(&J, &err), ATB_OK);
	cr_assert_eq(atb_judge_register_box(&J, NULL, F.box, &err), ATB_OK);
}

static void teardown(void)
{
	atb_judge_release(&J);
	fx_teardown(&F);
}

TestSuite(gates, .init = setup, .fini = teardown);

static int64_t count(const char *sql)
{
	sqlite3_stmt *q = NULL;
	int64_t n = -1;

	cr_assert_eq(sqlite3_prepare_v2(F.s->db, sql, -1, &q, NULL), SQLITE_OK);
	if (sqlite3_step(q) == SQLITE_ROW)
		n = sqlite3_column_int64(q, 0);
	sqlite3_finalize(q);
	return n;
}

Test(gates, table_has_every_gate_once_with_a_protocol_key)
{
	size_t n, i, k;
	const struct atb_judge_gate *g = atb_judge_gates(&n);

	cr_assert_gt(n, 20);
	for (i = 0; i < n; i++) {
		cr_assert(g[i].protocol_key && g[i].protocol_key[0], "%s", g[i].id);
		cr_assert(g[i].test && g[i].test[0], "%s", g[i].id);
		for (k = i + 1; k < n; k++)
			cr_assert_str_neq(g[i].id, g[k].id);
	}
	cr_assert_not_null(atb_judge_gate("noise"));
	cr_assert_not_null(atb_judge_gate("engine_died"));
	cr_assert_null(atb_judge_gate("made_up"));
}

/* PROTO: gates.rerun.max_runs -- absent before version 5: 3 runs; the protocol's from 5 */
Test(gates, rerun_bound_defaults_to_three_runs_and_follows_the_protocol)
{
	cr_assert_eq(atb_judge_max_runs(&P), 3);
	J.attempts = 2;
	cr_assert(atb_judge_rerun(&J));
	J.attempts = 3;
	cr_assert_not(atb_judge_rerun(&J));
	/* version 5 on: the protocol's bound */
	P.gates.has_rerun = 1;
	P.gates.rerun_max_runs = 5;
	cr_assert_eq(atb_judge_max_runs(&P), 5);
	J.attempts = 4;
	cr_assert(atb_judge_rerun(&J));
	J.attempts = 5;
	cr_assert_not(atb_judge_rerun(&J));
	P.gates.rerun_max_runs = 1;
	J.attempts = 1;
	cr_assert_not(atb_judge_rerun(&J));
}

Test(gates, refusal_at_an_unknown_gate_is_not_stored)
{
	struct atb_error err;

	atb_error_clear(&err);
	cr_assert_eq(atb_judge_refuse(&J, "made_up", ATB_ERR_CHECK, "x", NULL, &err), ATB_ERR_USAGE);
	cr_assert_eq(count("SELECT count(*) FROM rejection"), 0);
	cr_assert_eq(atb_judge_refuse(&J, ATB_GATE_CORRECTNESS, ATB_ERR_CHECK, "wrong output",
				      json_pack("{s:i}", "seed", 3), &err),
		     ATB_OK, "%s", err.msg);
	cr_assert_eq(count("SELECT count(*) FROM rejection WHERE rule = 'gate:correctness'"
			   " AND json_extract(detail, '$.seed') = 3"),
		     1);
	cr_assert_eq(O.verdict, ATB_MEASURE_REJECTED);
	cr_assert_str_eq(O.gate, "correctness");
}

/* Seeds 100.., 3 trials an arm; each seed's candidate scaled by 1 + spread * i. */
static double V[2][8][3];
static struct atb_judge_seed S[8];

static void facts(struct atb_judge_facts *f, size_t n, double ratio, double spread)
{
	size_t i, t;

	for (i = 0; i < n; i++) {
		memset(&S[i], 0, sizeof(S[i]));
		S[i].seed = 100 + i;
		for (t = 0; t < 3; t++) {
			V[0][i][t] = 1500.0 + (double)t;
			V[1][i][t] = (1500.0 + (double)t) / ratio * (1 + spread * (double)i);
		}
		S[i].v[ATB_ARM_BASELINE] = V[0][i];
		S[i].n[ATB_ARM_BASELINE] = 3;
		S[i].v[ATB_ARM_CANDIDATE] = V[1][i];
		S[i].n[ATB_ARM_CANDIDATE] = 3;
	}
	memset(f, 0, sizeof(*f));
	f->seeds = S;
	f->nseeds = n;
	f->bootstrap_seed = atb_judge_bootstrap_seed(100, n);
}

static void words(void *ctx, const struct atb_paired_result *r, char *reason, size_t size,
		  json_t **detail)
{
	(void)ctx;
	snprintf(reason, size, "cv %.4f over the cap %.3g", r->cv, r->cv_cap);
	*detail = json_pack("{s:f}", "cv", r->cv);
}

/* PROTO: stats.cv_cap, gates.rerun.max_runs */
Test(gates, noise_is_rerun_twice_then_refused)
{
	struct atb_judge_facts f;
	struct atb_judge_noise noise = {words, NULL};
	struct atb_error err;
	json_t *stats = json_object();
	int rerun = 0;

	facts(&f, 6, 1.5, 0.2);
	atb_error_clear(&err);
	for (J.attempts = 1; J.attempts <= 2; J.attempts++) {
		cr_assert_eq(atb_judge_conclude(&J, &f, stats, &noise, &rerun, NULL, &err), ATB_OK,
			     "%s", err.msg);
		cr_assert_eq(rerun, 1, "attempt %d", J.attempts);
		cr_assert_eq(count("SELECT count(*) FROM rejection") +
				     count("SELECT count(*) FROM result"),
			     0);
	}
	cr_assert_eq(atb_judge_conclude(&J, &f, stats, &noise, &rerun, NULL, &err), ATB_OK);
	cr_assert_eq(rerun, 0);
	cr_assert_eq(O.verdict, ATB_MEASURE_REJECTED);
	cr_assert_str_eq(O.gate, "noise");
	cr_assert(strstr(O.reason, "over the cap 0.05"), "%s", O.reason);
	cr_assert_eq(count("SELECT count(*) FROM rejection WHERE rule = 'gate:noise'"), 1);
	json_decref(stats);
}

Test(gates, honest_conclude_is_admitted_and_rederived_by_db_check)
{
	struct atb_judge_facts f;
	struct atb_judge_noise noise = {words, NULL};
	struct atb_store_finding *found = NULL;
	struct atb_error err;
	size_t kept = 0, nfound = 0;
	json_t *stats = json_pack("{s:s}", "method", "unit test");
	int rerun = 0;

	facts(&f, 6, 1.5, 0.0);
	atb_error_clear(&err);
	cr_assert_eq(atb_judge_conclude(&J, &f, stats, &noise, &rerun, NULL, &err), ATB_OK,
		     "%s", err.msg);
	cr_assert_eq(O.verdict, ATB_MEASURE_ADMITTED, "%s", O.reason);
	cr_assert_gt(O.result_id, 0);
	cr_assert_float_eq(O.speedup, 1.5, 1e-9);
	cr_assert_eq(count("SELECT json_extract(stats, '$.bootstrap_seed') IS NOT NULL FROM result"),
		     1);
	cr_assert_eq(atb_store_check(F.s, &found, &kept, &nfound, &err), ATB_OK, "%zu: %s", nfound,
		     nfound ? found[0].what : err.msg);
	atb_free(found);
	json_decref(stats);
}

Test(gates, ingest_json_samples_alone_are_derived_and_a_forged_interval_refused)
{
	struct atb_ingest *in = fx_ingest(&F, 6, 1.5);
	struct atb_ingest_outcome io;
	struct atb_store_finding *found = NULL;
	struct atb_error err;
	enum atb_status st;
	size_t kept = 0, nfound = 0;

	/* the claimed interval (speedup x 0.95 .. 1.05) is no bootstrap of the samples */
	atb_error_clear(&err);
	st = atb_judge_ingest_samples(F.s, &P, in, ATB_JUDGE_CLAIM_SEEDS | ATB_JUDGE_CLAIM_SPEEDUP |
					       ATB_JUDGE_CLAIM_CV | ATB_JUDGE_CLAIM_INTERVAL,
				      &io, &err);
	cr_assert_eq(st, ATB_REJECTED_NOT_DERIVED, "%s: %s", atb_status_name(st), err.msg);
	cr_assert(strstr(err.msg, "atb-rule:not_derived: the interval"), "%s", err.msg);
	cr_assert_gt(io.rejection_id, 0);
	cr_assert_eq(count("SELECT count(*) FROM job"), 0);
	cr_assert_eq(count("SELECT count(*) FROM rejection WHERE rule = 'gate:derived'"), 1);

	/* the same samples with no claimed numbers: admitted with the judge's */
	in = fx_ingest(&F, 6, 1.5);
	in->seeds = NULL;
	in->nseeds = 0;
	in->speedup = in->ci_low = in->ci_high = in->cv = 0;
	atb_error_clear(&err);
	cr_assert_eq(atb_judge_ingest_samples(F.s, &P, in, 0, &io, &err), ATB_OK, "%s", err.msg);
	cr_assert_gt(io.result_id, 0);
	cr_assert_float_eq(in->speedup, 1.5, 1e-9);
	cr_assert(in->ci_low <= 1.5 && in->ci_high >= 1.5);
	cr_assert_eq(in->nseeds, 6);
	cr_assert_eq(atb_store_check(F.s, &found, &kept, &nfound, &err), ATB_OK, "%zu: %s", nfound,
		     nfound ? found[0].what : err.msg);
	atb_free(found);
}
