/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The store and its validator.  Each rule has a test named for what it
 * forbids; each attacks the database directly with SQL on a second
 * connection (as the sqlite3 shell would) and checks the exact rule id, and
 * most also go through atb_store_ingest and check the status and the stored
 * rejection.  Also: opening (not a store, newer schema, locked, nothing
 * written), quarantine and review, redaction, atb_store_check, and an
 * allocation-failure walk over ingest and audit append.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <math.h>
#include <sys/stat.h>

#include "atb/stats.h"
#include "../fixtures/store/fixture.h"
#include "banned.h"

static struct fx F;

static void setup(void)
{
	fx_setup(&F);
}

static void teardown(void)
{
	fx_teardown(&F);
}

TestSuite(store, .init = setup, .fini = teardown);

#define JOB(uuid, kind, digest, box) \
	"INSERT INTO job (uuid, kind, task, candidate, unit, protocol_digest, box_fingerprint," \
	" created) VALUES ('" uuid "', '" kind "', 't', 'c', 'ns', " digest ", " box ", 'now');"
#define JOBID(uuid) "(SELECT id FROM job WHERE uuid = '" uuid "')"
#define INSERT_RESULT \
	"INSERT INTO result (job, kind, metric, baseline_job, n_seeds, speedup, ci_low," \
	" ci_high, cv, status, stats, protocol_digest, box_fingerprint, created) VALUES ("
/* An admitted result of job uuid, its own baseline; FIGS is "speedup, ci_low, ci_high, cv";
 * the digest and box are the two %s. */
#define SELF_RESULT(uuid, kind, metric, nseeds, figs)                                   \
	INSERT_RESULT JOBID(uuid) ", '" kind "', '" metric "', " JOBID(uuid) ", " nseeds \
	", " figs ", 'admitted', '{}', '%s', '%s', 'now')"
#define SAMPLE(uuid, arm, seed, value) \
	"INSERT INTO sample VALUES (" JOBID(uuid) ", '" arm "', " seed ", 0, " value ");"
/* Seed %d of a job paired by hand: both arms' samples and the seed result. */
#define PAIRED(uuid, trial, base, cand) \
	"INSERT INTO sample VALUES (" JOBID(uuid) ", 'baseline', %d, " trial ", " base ");" \
	"INSERT INTO sample VALUES (" JOBID(uuid) ", 'candidate', %d, " trial ", " cand ");" \
	"INSERT INTO seed_result VALUES (" JOBID(uuid) ", %d, " base ", " cand ", " \
	base " / " cand ")"
/* A kernel job with seeds 1..n paired by hand (trial 0 each), no result. */
#define JOB_PAIRED_BY_HAND(uuid, base, cand, n)                                        \
	do {                                                                           \
		fx_accepted(&F, JOB(uuid, "kernel", "'%s'", "'%s'"), F.digest, F.box); \
		for (int i_ = 1; i_ <= (n); i_++)                                      \
			fx_accepted(&F, PAIRED(uuid, "0", base, cand), i_, i_, i_);    \
	} while (0)

/* The attack must fail because the sample table has no such column. */
#define fx_no_column(f, column, ...)                                                    \
	do {                                                                            \
		char *m_ = fx_attack(f, __VA_ARGS__);                                   \
		cr_assert_not_null(m_, "the attack was accepted");                      \
		cr_assert(strstr(m_, "has no column named " column), "got '%s'", m_);  \
		free(m_);                                                               \
	} while (0)

static void ingest_ok(struct atb_ingest_outcome *o)
{
	struct atb_error err;

	atb_error_clear(&err);
	cr_assert_eq(atb_store_ingest(F.s, &F.in, o, &err), ATB_OK, "%s", err.msg);
}

static char refused_msg[1024];  /* the last ingest_refused's message */

static void ingest_refused(enum atb_status want)
{
	struct atb_ingest_outcome o;
	struct atb_error err;
	enum atb_status st;
	char rule[80];

	long jobs = fx_count(&F, "SELECT count(*) FROM job");
	long results = fx_count(&F, "SELECT count(*) FROM result");

	atb_error_clear(&err);
	st = atb_store_ingest(F.s, &F.in, &o, &err);
	cr_assert_eq(st, want, "got %s (%s), want %s", atb_status_name(st), err.msg,
		     atb_status_name(want));
	snprintf(refused_msg, sizeof(refused_msg), "%s", err.msg);
	snprintf(rule, sizeof(rule), "atb-rule:%s:", atb_status_name(want) + 9);
	cr_assert(strstr(err.msg, rule), "'%s' lacks '%s'", err.msg, rule);
	cr_assert_gt(o.rejection_id, 0);
	cr_assert_eq(o.result_id, 0);
	/* Rolled back: no trace of the job but its rejection. */
	cr_assert_eq(fx_count(&F, "SELECT count(*) FROM result"), results);
	cr_assert_eq(fx_count(&F, "SELECT count(*) FROM job"), jobs);
	snprintf(rule, sizeof(rule), "store:%s", atb_status_name(want) + 9);
	{
		char q[200];

		snprintf(q, sizeof(q), "SELECT count(*) FROM rejection WHERE rule = '%s' AND status = %d",
			 rule, (int)want);
		cr_assert_eq(fx_count(&F, q), 1);
	}
}

/* ---- the paired-seed rule ---- */

Test(store, engine_result_without_paired_seeds_cannot_enter_db)
{
	int i;

	fx_accepted(&F, JOB("e1", "engine", "'%s'", "'%s'"), F.digest, F.box);
	/* A result with no seed results at all. */
	fx_refused(&F, "paired_seeds",
		   SELF_RESULT("e1", "engine", "rps", "5", "1.2, 1.1, 1.3, 0.01"), F.digest, F.box);
	/* Candidate-only samples: a seed result cannot pair them. */
	fx_accepted(&F, SAMPLE("e1", "candidate", "1", "10.0"));
	fx_refused(&F, "paired_seeds", "INSERT INTO seed_result VALUES (" JOBID("e1")
		   ", 1, 10.0, 12.0, 1.2)");
	/* n_seeds 0 is refused by the column rule. */
	fx_refused(&F, "paired_seeds",
		   SELF_RESULT("e1", "engine", "rps", "0", "1.2, 1.1, 1.3, 0.01"), F.digest, F.box);

	/* Through the C API: candidate samples without the baseline arm. */
	fx_teardown(&F);
	fx_setup(&F);
	fx_ingest(&F, 5, 1.2);
	F.in.kind = "engine";
	for (i = 0; i < (int)F.in.nsamples; i++)
		F.samples[i].arm = ATB_ARM_CANDIDATE;
	for (i = 0; i < (int)F.in.nsamples; i++)
		F.samples[i].trial = i;
	ingest_refused(ATB_REJECTED_PAIRED_SEEDS);
}

Test(store, kernel_result_without_paired_seeds_cannot_enter_db)
{
	int i;

	fx_accepted(&F, JOB("k1", "kernel", "'%s'", "'%s'"), F.digest, F.box);
	fx_accepted(&F, SAMPLE("k1", "baseline", "1", "10.0"));
	fx_refused(&F, "paired_seeds", "INSERT INTO seed_result VALUES (" JOBID("k1")
		   ", 1, 10.0, 8.0, 1.25)");
	/* Fewer paired seeds than the protocol's min_paired_seeds (5). */
	for (i = 1; i <= 3; i++) {
		fx_accepted(&F, PAIRED("k1", "1", "10.0", "8.0"), i, i, i);
	}
	fx_refused(&F, "paired_seeds",
		   SELF_RESULT("k1", "kernel", "ns", "3", "1.25, 1.2, 1.3, 0.01"), F.digest, F.box);
	/* n_seeds that is not the count of seed results. */
	fx_refused(&F, "paired_seeds",
		   SELF_RESULT("k1", "kernel", "ns", "7", "1.25, 1.2, 1.3, 0.01"), F.digest, F.box);

	fx_teardown(&F);
	fx_setup(&F);
	fx_ingest(&F, 3, 1.5);
	ingest_refused(ATB_REJECTED_PAIRED_SEEDS);
}

/* ---- provenance: frozen protocol and box ---- */

Test(store, row_with_unfrozen_protocol_digest_cannot_enter_db)
{
	char other[65];

	atbi_sha256_hex("not frozen", 10, other);
	fx_refused(&F, "unfrozen_protocol", JOB("u1", "kernel", "'%s'", "'%s'"), other, F.box);
	fx_refused(&F, "unfrozen_protocol", JOB("u2", "kernel", "NULL", "'%s'"), F.box);
	/* A sample cannot carry a digest of its own: its job's is its digest. */
	fx_accepted(&F, JOB("u3", "kernel", "'%s'", "'%s'"), F.digest, F.box);
	fx_no_column(&F, "protocol_digest", "INSERT INTO sample (job, arm, seed, trial, value,"
		     " protocol_digest) VALUES (" JOBID("u3") ", 'baseline', 1, 0, 1.0, '%s')", other);
	fx_ingest(&F, 5, 1.5);
	F.in.protocol_digest = other;
	fx_teardown(&F);
	fx_setup(&F);
	fx_ingest(&F, 5, 1.5);
	F.in.protocol_digest = other;
	ingest_refused(ATB_REJECTED_UNFROZEN_PROTOCOL);
}

Test(store, row_without_box_fingerprint_cannot_enter_db)
{
	char unknown[65];

	atbi_sha256_hex("unknown box", 11, unknown);
	fx_refused(&F, "no_box", JOB("b1", "kernel", "'%s'", "NULL"), F.digest);
	fx_refused(&F, "no_box", JOB("b2", "kernel", "'%s'", "'%s'"), F.digest, unknown);
	fx_refused(&F, "no_box", "INSERT INTO box VALUES ('not-hex', '{}', 'now')");
	fx_accepted(&F, JOB("b3", "kernel", "'%s'", "'%s'"), F.digest, F.box);
	fx_no_column(&F, "box_fingerprint", "INSERT INTO sample (job, arm, seed, trial, value,"
		     " box_fingerprint) VALUES (" JOBID("b3") ", 'baseline', 1, 0, 1.0, NULL)");
	fx_ingest(&F, 5, 1.5);
	F.in.box_fingerprint = unknown;
	ingest_refused(ATB_REJECTED_NO_BOX);
}

Test(store, sample_measured_on_another_box_cannot_enter_db)
{
	/* A sample has no box of its own (schema v2): its job's box is its box. */
	fx_accepted(&F, JOB("x1", "kernel", "'%s'", "'%s'"), F.digest, F.box);
	fx_no_column(&F, "box_fingerprint", "INSERT INTO sample (job, arm, seed, trial, value,"
		     " box_fingerprint) VALUES (" JOBID("x1") ", 'baseline', 1, 0, 1.0, '%s')",
		     F.box2);
	fx_accepted(&F, SAMPLE("x1", "baseline", "1", "1.0"));
	cr_assert_eq(fx_count(&F, "SELECT count(*) FROM sample s JOIN job j ON j.id = s.job"
			      " WHERE j.uuid = 'x1' AND j.box_fingerprint IS NOT NULL"), 1);
}

/* ---- samples: per-job rules (schema v2) ---- */

Test(store, sample_without_its_job_never_joins_a_job)
{
	struct atb_store_finding *f = NULL;
	size_t kept = 0, total = 0, i;
	struct atb_error err;
	int orphans = 0;

	/* Samples under a job id that does not exist yet are inert... */
	fx_accepted(&F, "INSERT INTO sample VALUES (1, 'baseline', 1, 0, 10.0);"
		    " INSERT INTO sample VALUES (1, 'candidate', 1, 0, 1.0)");
	fx_refused(&F, "malformed", "INSERT INTO seed_result VALUES (1, 1, 10.0, 1.0, 10.0)");
	fx_refused(&F, "malformed",
		   INSERT_RESULT
		   "1, 'kernel', 'ns', 1, 1, 1.25, 1.2, 1.3, 0.01, 'admitted', '{}', '%s', '%s', 'now')",
		   F.digest, F.box);
	/* ...and no job can be created over them, by explicit id or the next rowid. */
	fx_refused(&F, "malformed", "INSERT INTO job (id, uuid, kind, task, candidate, unit,"
		   " protocol_digest, box_fingerprint, created) VALUES (1, 'j1', 'kernel', 't', 'c',"
		   " 'ns', '%s', '%s', 'now')", F.digest, F.box);
	fx_refused(&F, "malformed", JOB("j2", "kernel", "'%s'", "'%s'"), F.digest, F.box);
	cr_assert_eq(fx_count(&F, "SELECT count(*) FROM job"), 0);
	cr_assert_eq(fx_count(&F, "SELECT count(*) FROM result"), 0);
	/* The C ingest is refused too (its job would adopt them), and check names them. */
	fx_ingest(&F, 5, 1.5);
	ingest_refused(ATB_REJECTED_MALFORMED);
	atb_error_clear(&err);
	cr_assert_eq(atb_store_check(F.s, &f, &kept, &total, &err), ATB_ERR_CHECK);
	for (i = 0; i < kept; i++)
		orphans += !strcmp(f[i].rule, "malformed") && !strcmp(f[i].table, "sample");
	cr_assert_eq(orphans, 2);
	atb_free(f);
}

Test(store, samples_without_a_result_leave_nothing_admitted)
{
	struct atb_ingest_outcome o;

	/* A job paired by hand and committed without its result admits nothing. */
	JOB_PAIRED_BY_HAND("n1", "10.0", "8.0", 5);
	cr_assert_eq(fx_count(&F, "SELECT count(*) FROM result"), 0);
	/* Once a job has its result, no sample joins it, new key or old. */
	fx_ingest(&F, 5, 1.5);
	ingest_ok(&o);
	fx_refused(&F, "append_only", "INSERT INTO sample VALUES (%lld, 'candidate', 100, 999, 1.0)",
		   (long long)o.job_id);
	fx_refused(&F, "append_only", "INSERT INTO sample VALUES (%lld, 'naive', 100, 0, 1.0)",
		   (long long)o.job_id);
	fx_refused(&F, "append_only", "INSERT OR IGNORE INTO sample VALUES (%lld, 'naive', 100, 0,"
		   " 1.0)", (long long)o.job_id);
	cr_assert_eq(fx_count(&F, "SELECT count(*) FROM sample WHERE trial = 999 OR arm = 'naive'"), 0);
}

/*
 * 2 x n_per_arm samples over seeds 100-104: in key order (arm, seed,
 * trial) when sorted is 1, interleaved by trial as a runner hands them in
 * when 0; when 2, interleaved, with naive rows too, all in reverse.
 */
/* The seed results that follow from many_samples' values (the store re-derives them). */
static void many_medians(void)
{
	size_t i;

	for (i = 0; i < F.in.nseeds; i++) {
		F.seeds[i].baseline_median = 10.0;
		F.seeds[i].candidate_median = 10.0 / 1.5;
	}
}

static struct atb_sample *many_samples(size_t n_per_arm, int sorted)
{
	struct atb_sample *x = atb_calloc(3 * n_per_arm, sizeof(*x));
	size_t i, per_seed = n_per_arm / 5, k = 0;

	cr_assert_not_null(x);
	cr_assert_eq(n_per_arm % 5, 0);
	for (i = 0; i < n_per_arm; i++) {
		int in_order = sorted == 1;
		int64_t seed = 100 + (int64_t)(in_order ? i / per_seed : i % 5);
		int32_t trial = (int32_t)(in_order ? i % per_seed : i / 5);

		x[in_order ? i : k++] = (struct atb_sample){seed, trial, ATB_ARM_BASELINE, 10.0};
		x[in_order ? n_per_arm + i : k++] =
			(struct atb_sample){seed, trial, ATB_ARM_CANDIDATE, 10.0 / 1.5};
		if (sorted == 2)
			x[k++] = (struct atb_sample){seed, trial, ATB_ARM_NAIVE, 30.0};
	}
	for (i = 0; sorted == 2 && i < k / 2; i++) {
		struct atb_sample t = x[i];

		x[i] = x[k - 1 - i];
		x[k - 1 - i] = t;
	}
	return x;
}

Test(store, result_with_baseline_from_another_job_cannot_enter_db)
{
	struct atb_ingest_outcome first;
	char uuid[65];

	fx_ingest(&F, 5, 1.5);
	ingest_ok(&first);
	memcpy(uuid, first.job_uuid, sizeof(uuid));
	/* SQL: a fully paired job whose result names the first job's baseline. */
	JOB_PAIRED_BY_HAND("o1", "10.0", "8.0", 5);
	fx_refused(&F, "baseline_elsewhere",
		   INSERT_RESULT
		   JOBID("o1") ", 'kernel', 'ns', (SELECT id FROM job WHERE uuid = '%s'), 5, 1.25,"
		   " 1.2, 1.3, 0.01, 'admitted', '{}', '%s', '%s', 'now')", uuid, F.digest, F.box);
	/* ...or another box than its job's. */
	fx_refused(&F, "baseline_elsewhere",
		   SELF_RESULT("o1", "kernel", "ns", "5", "1.25, 1.2, 1.3, 0.01"), F.digest, F.box2);
	fx_accepted(&F, SELF_RESULT("o1", "kernel", "ns", "5", "1.25, 1.2, 1.3, 0"), F.digest,
		    F.box);

	/* C API. */
	fx_teardown(&F);
	fx_setup(&F);
	fx_ingest(&F, 5, 1.5);
	ingest_ok(&first);
	fx_ingest(&F, 5, 1.5);
	F.in.baseline_job_uuid = first.job_uuid;
	{
		struct atb_ingest_outcome o;
		struct atb_error err;

		atb_error_clear(&err);
		cr_assert_eq(atb_store_ingest(F.s, &F.in, &o, &err), ATB_REJECTED_BASELINE_ELSEWHERE,
			     "%s", err.msg);
		cr_assert(strstr(err.msg, "atb-rule:baseline_elsewhere:"));
		cr_assert_eq(fx_count(&F, "SELECT count(*) FROM result"), 1);
	}
}

/* ---- statistics rules ---- */

Test(store, result_with_cv_over_cap_cannot_enter_db)
{
	fx_ingest(&F, 5, 1.5);
	F.in.cv = 0.08;
	ingest_refused(ATB_REJECTED_CV_OVER_CAP);
	fx_ingest(&F, 5, 1.5);
	fx_spread(&F, 0.031);  /* a cv just under the cap, following from the seeds */
	cr_assert(F.in.cv > 0.045 && F.in.cv <= 0.05, "cv %g", F.in.cv);
	ingest_ok(NULL);
}

/* ---- the store re-derives on insert (issue 12) ---- */

Test(store, speedup_that_is_not_the_geometric_mean_cannot_enter_db)
{
	fx_ingest(&F, 5, 1.5);
	F.in.speedup = 9.5;  /* per-seed ratios 1.5: the forged ingest of issue 12 */
	F.in.ci_low = 9.0;
	F.in.ci_high = 9.9;
	ingest_refused(ATB_REJECTED_NOT_DERIVED);
	cr_assert(strstr(refused_msg, "geometric mean"), "%s", refused_msg);
	cr_assert_eq(fx_count(&F, "SELECT count(*) FROM result"), 0);
	cr_assert_eq(fx_count(&F, "SELECT count(*) FROM sample"), 0);
}

Test(store, median_that_is_not_its_samples_cannot_enter_db)
{
	fx_ingest(&F, 5, 1.5);
	F.seeds[2].candidate_median /= 2;
	F.seeds[2].ratio *= 2;
	ingest_refused(ATB_REJECTED_NOT_DERIVED);
	cr_assert(strstr(refused_msg, "candidate median"), "%s", refused_msg);
}

Test(store, ratio_that_is_not_its_medians_cannot_enter_db)
{
	fx_ingest(&F, 5, 1.5);
	F.seeds[0].ratio = 1.6;
	ingest_refused(ATB_REJECTED_NOT_DERIVED);
	cr_assert(strstr(refused_msg, "per-seed ratio"), "%s", refused_msg);
}

Test(store, cv_that_does_not_follow_cannot_enter_db)
{
	fx_ingest(&F, 5, 1.5);
	F.in.cv = 0.01;  /* the seeds are alike: their cv is 0 */
	ingest_refused(ATB_REJECTED_NOT_DERIVED);
	cr_assert(strstr(refused_msg, "cv does not follow"), "%s", refused_msg);
	fx_ingest(&F, 5, 1.5);
	fx_spread(&F, 0.01);
	ingest_ok(NULL);
}

Test(store, derivation_rules_hold_against_sql)
{
	fx_ingest(&F, 5, 1.5);
	ingest_ok(NULL);
	/* A seed result whose median is not its samples', straight through SQL. */
	fx_refused(&F, "not_derived", "DROP TRIGGER result_insert; DROP TRIGGER seed_result_insert;"
		   " INSERT INTO job (uuid, kind, task, candidate, unit, protocol_digest,"
		   " box_fingerprint, created) SELECT 'j2', kind, task, candidate, unit,"
		   " protocol_digest, box_fingerprint, created FROM job WHERE id = 1;"
		   " INSERT INTO sample SELECT 2, arm, seed, trial, value FROM sample WHERE job = 1;"
		   " INSERT INTO seed_result SELECT 2, seed, baseline_median * 2, candidate_median * 2,"
		   " ratio FROM seed_result WHERE job = 1");
}

Test(store, admitted_anomaly_cannot_enter_db)
{
	struct atb_ingest_outcome o;

	JOB_PAIRED_BY_HAND("a1", "61000.0", "1.0", 5);
	fx_refused(&F, "anomaly_not_quarantined",
		   SELF_RESULT("a1", "kernel", "ns", "5", "61000.0, 60000.0, 62000.0, 0.01"), F.digest,
		   F.box);
	/* The C ingest quarantines it (exactly at the factor too). */
	fx_ingest(&F, 5, 10.0);
	ingest_ok(&o);
	cr_assert(o.quarantined);
	cr_assert_eq(fx_count(&F, "SELECT count(*) FROM result WHERE status = 'quarantined'"), 1);
	fx_ingest(&F, 5, 9.99);
	ingest_ok(&o);
	cr_assert_not(o.quarantined);
}

Test(store, duplicate_seed_cannot_enter_db)
{
	JOB_PAIRED_BY_HAND("d1", "10.0", "8.0", 1);
	fx_refused(&F, "duplicate_seed", "INSERT INTO seed_result VALUES (" JOBID("d1")
		   ", 1, 10.0, 8.0, 1.25)");
	fx_refused(&F, "duplicate_seed", "INSERT OR REPLACE INTO seed_result VALUES (" JOBID("d1")
		   ", 1, 10.0, 5.0, 2.0)");
	fx_ingest(&F, 5, 1.5);
	F.seeds[4].seed = F.seeds[3].seed;
	ingest_refused(ATB_REJECTED_DUPLICATE_SEED);
}

Test(store, nan_inf_zero_or_negative_value_cannot_enter_db)
{
	static const char *const bad[] = {"NULL", "0.0/0.0", "9e999", "-9e999", "0", "-1.5",
					  "'abc'"};
	size_t i;

	fx_accepted(&F, JOB("v1", "kernel", "'%s'", "'%s'"), F.digest, F.box);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		fx_refused(&F, "bad_time", "INSERT INTO sample VALUES (" JOBID("v1")
			   ", 'baseline', 1, %zu, %s)", i, bad[i]);
	fx_ingest(&F, 5, 1.5);
	F.samples[2].value = NAN;
	ingest_refused(ATB_REJECTED_BAD_TIME);
	fx_teardown(&F);
	fx_setup(&F);
	fx_ingest(&F, 5, 1.5);
	F.samples[2].value = INFINITY;
	ingest_refused(ATB_REJECTED_BAD_TIME);
	fx_teardown(&F);
	fx_setup(&F);
	fx_ingest(&F, 5, 1.5);
	F.seeds[1].ratio = -1.0;
	ingest_refused(ATB_REJECTED_BAD_TIME);
}

/* ---- append-only ---- */

Test(store, stored_row_cannot_be_updated_deleted_or_replaced)
{
	static const char *const tables[][2] = {
		{"frozen_protocol", "version"}, {"box", "fingerprint"}, {"job", "id"},
		{"sample", "trial"}, {"seed_result", "seed"}, {"result", "id"},
		{"rejection", "id"}, {"review", "id"}, {"audit", "seq"}};
	struct atb_ingest_outcome o;
	struct atb_error err;
	size_t i;

	fx_ingest(&F, 5, 20.0);
	ingest_ok(&o);
	atb_error_clear(&err);
	cr_assert_eq(atb_store_review(F.s, o.result_id, "reject", "ana", "identity kernel", NULL,
				      &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(atb_store_reject(F.s, NULL, F.digest, "gate:correctness", ATB_ERR_CHECK, "wrong output",
				      NULL, NULL, &err), ATB_OK, "%s", err.msg);
	for (i = 0; i < sizeof(tables) / sizeof(tables[0]); i++) {
		fx_refused(&F, "append_only", "UPDATE %s SET %s = %s", tables[i][0], tables[i][1],
			   tables[i][1]);
		fx_refused(&F, "append_only", "DELETE FROM %s", tables[i][0]);
	}
	/* UPDATE through a column write, and REPLACE on each keyed table. */
	fx_refused(&F, "append_only", "UPDATE result SET status = 'admitted'");
	fx_refused(&F, "append_only", "UPDATE sample SET value = 1.0");
	fx_refused(&F, "append_only", "INSERT OR REPLACE INTO box VALUES ('%s', '{}', 'now')", F.box);
	fx_refused(&F, "append_only", "INSERT OR REPLACE INTO sample SELECT job, arm, seed, trial,"
		   " 1.0 FROM sample LIMIT 1");
	fx_refused(&F, "append_only", "INSERT OR REPLACE INTO result SELECT * FROM result");
	fx_refused(&F, "append_only", "INSERT OR REPLACE INTO job SELECT * FROM job");
	fx_refused(&F, "append_only", "INSERT INTO result SELECT * FROM result WHERE true ON CONFLICT DO"
		   " UPDATE SET status = 'admitted'");
	cr_assert_eq(fx_count(&F, "SELECT count(*) FROM sample"), 30);
	cr_assert_eq(fx_count(&F, "SELECT count(*) FROM result WHERE status = 'quarantined'"), 1);
}

Test(store, audit_row_breaking_the_chain_cannot_enter_db)
{
	fx_refused(&F, "audit_chain", "INSERT INTO audit VALUES (99, '2026-01-01T00:00:00.000000000Z',"
		   " 'x', '{}', '%s', '%s')", ATBI_GENESIS, ATBI_GENESIS);
	fx_refused(&F, "audit_chain", "INSERT INTO audit SELECT max(seq) + 1,"
		   " '2026-01-01T00:00:00.000000000Z', 'x', '{}', '%s', '%s' FROM audit",
		   ATBI_GENESIS, ATBI_GENESIS);
	fx_refused(&F, "audit_chain", "INSERT INTO audit SELECT max(seq) + 1, 'yesterday', 'x', '{}',"
		   " (SELECT hash FROM audit ORDER BY seq DESC LIMIT 1), '%s' FROM audit", ATBI_GENESIS);
}

Test(store, review_of_a_result_not_quarantined_cannot_enter_db)
{
	struct atb_ingest_outcome o, q;
	struct atb_error err;
	int64_t id = 0;

	fx_ingest(&F, 5, 1.5);
	ingest_ok(&o);
	fx_refused(&F, "review", "INSERT INTO review (result, decision, reviewer, reason, created)"
		   " VALUES (%lld, 'admit', 'ana', 'ok', 'now')", (long long)o.result_id);
	fx_refused(&F, "review", "INSERT INTO review (result, decision, reviewer, reason, created)"
		   " VALUES (999, 'admit', 'ana', 'ok', 'now')");
	atb_error_clear(&err);
	cr_assert_eq(atb_store_review(F.s, o.result_id, "admit", "ana", "fine", &id, &err),
		     ATB_REJECTED_REVIEW, "%s", err.msg);
	fx_ingest(&F, 5, 12.0);
	ingest_ok(&q);
	cr_assert(q.quarantined);
	fx_refused(&F, "review", "INSERT INTO review (result, decision, reviewer, reason, created)"
		   " VALUES (%lld, 'maybe', 'ana', 'ok', 'now')", (long long)q.result_id);
	cr_assert_eq(atb_store_review(F.s, q.result_id, "admit", "ana", "re-measured", &id, &err),
		     ATB_OK, "%s", err.msg);
	cr_assert_gt(id, 0);
	cr_assert_eq(fx_count(&F, "SELECT count(*) FROM result WHERE status = 'quarantined'"), 1);
}

Test(store, batched_samples_are_all_stored_and_each_one_checked)
{
	static const size_t per_arm[] = {1000, 65, 70, 500};
	struct atb_ingest_outcome o;
	struct atb_sample *x;
	size_t i;
	long want = 0;

	for (i = 0; i < sizeof(per_arm) / sizeof(per_arm[0]); i++) {
		fx_ingest(&F, 5, 1.5);
		many_medians();
		x = many_samples(per_arm[i], i == 3 ? 2 : (int)(i & 1));
		F.in.samples = x;
		F.in.nsamples = (i == 3 ? 3 : 2) * per_arm[i];
		ingest_ok(&o);
		want += (long)F.in.nsamples;
		atb_free(x);
	}
	cr_assert_eq(fx_count(&F, "SELECT count(*) FROM sample"), want);
	/* A bad value deep inside a batch, and a duplicate key across batches. */
	fx_ingest(&F, 5, 1.5);
	many_medians();
	x = many_samples(1000, 0);
	x[777].value = -1.0;
	F.in.samples = x;
	F.in.nsamples = 2000;
	ingest_refused(ATB_REJECTED_BAD_TIME);
	x[777].value = 10.0;
	x[1999] = x[3];
	ingest_refused(ATB_REJECTED_MALFORMED);
	atb_free(x);
	cr_assert_eq(fx_count(&F, "SELECT count(*) FROM sample"), want);
}

/* ---- opening ---- */

static void file_bytes(const char *path, char **buf, size_t *len)
{
	struct atb_error err;

	cr_assert_eq(atbi_read_file(path, buf, len, &err), ATB_OK, "%s", err.msg);
}

Test(store, open_refuses_what_is_not_a_store_and_writes_nothing)
{
	struct atb_store *s = NULL;
	struct atb_error err;
	char p[400], *before, *after;
	size_t lb, la;
	sqlite3 *db;
	FILE *fp;

	snprintf(p, sizeof(p), "%s/text.db", F.dir);
	fp = fopen(p, "w");
	fputs("hello, not sqlite at all, just some text that is long enough\n", fp);
	fclose(fp);
	file_bytes(p, &before, &lb);
	cr_assert_eq(atb_store_open(p, ATB_STORE_CREATE, &s, &err), ATB_ERR_NOT_A_STORE, "%s", err.msg);
	cr_assert_null(s);
	cr_assert(strstr(err.msg, "is not an atb store"));
	file_bytes(p, &after, &la);
	cr_assert(lb == la && !memcmp(before, after, lb));
	atb_free(before);
	atb_free(after);

	/* Another application's SQLite file. */
	snprintf(p, sizeof(p), "%s/other.db", F.dir);
	cr_assert_eq(sqlite3_open(p, &db), SQLITE_OK);
	sqlite3_exec(db, "CREATE TABLE t(x); PRAGMA application_id = 42;", NULL, NULL, NULL);
	sqlite3_close(db);
	file_bytes(p, &before, &lb);
	cr_assert_eq(atb_store_open(p, ATB_STORE_READ_WRITE, &s, &err), ATB_ERR_NOT_A_STORE);
	file_bytes(p, &after, &la);
	cr_assert(lb == la && !memcmp(before, after, lb));
	atb_free(before);
	atb_free(after);

	/* A newer schema. */
	snprintf(p, sizeof(p), "%s/newer.db", F.dir);
	cr_assert_eq(sqlite3_open(p, &db), SQLITE_OK);
	sqlite3_exec(db, "CREATE TABLE t(x); PRAGMA application_id = 1635017265;"
		     " PRAGMA user_version = 5;", NULL, NULL, NULL);
	sqlite3_close(db);
	atb_error_clear(&err);
	cr_assert_eq(atb_store_open(p, ATB_STORE_READ_WRITE, &s, &err), ATB_ERR_STORE_NEWER);
	cr_assert(strstr(err.msg, "has schema 5, this atb reads up to 4; upgrade atb"), "%s", err.msg);

	/* An older schema (v1 samples repeated their job's digest and box): refused, untouched. */
	snprintf(p, sizeof(p), "%s/older.db", F.dir);
	cr_assert_eq(sqlite3_open(p, &db), SQLITE_OK);
	sqlite3_exec(db, "CREATE TABLE t(x); PRAGMA application_id = 1635017265;"
		     " PRAGMA user_version = 1;", NULL, NULL, NULL);
	sqlite3_close(db);
	file_bytes(p, &before, &lb);
	atb_error_clear(&err);
	cr_assert_eq(atb_store_open(p, ATB_STORE_READ_WRITE, &s, &err), ATB_ERR_NOT_A_STORE);
	cr_assert_null(s);
	cr_assert(strstr(err.msg, "has schema 1, which this atb no longer reads (it reads 2-4);"
			 " create a new store with 'atb db init'"), "%s", err.msg);
	file_bytes(p, &after, &la);
	cr_assert(lb == la && !memcmp(before, after, lb));
	atb_free(before);
	atb_free(after);

	/* Missing. */
	snprintf(p, sizeof(p), "%s/none.db", F.dir);
	cr_assert_eq(atb_store_open(p, ATB_STORE_READ_ONLY, &s, &err), ATB_ERR_NOT_FOUND);
	cr_assert_eq(access(p, F_OK), -1);
}

Test(store, open_and_write_report_a_locked_store)
{
	struct atb_error err;
	sqlite3 *db;

	cr_assert_eq(sqlite3_open(F.path, &db), SQLITE_OK);
	cr_assert_eq(sqlite3_exec(db, "BEGIN EXCLUSIVE", NULL, NULL, NULL), SQLITE_OK);
	fx_ingest(&F, 5, 1.5);
	atb_error_clear(&err);
	cr_assert_eq(atb_store_ingest(F.s, &F.in, NULL, &err), ATB_ERR_LOCKED, "%s", err.msg);
	sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
	sqlite3_close(db);
	ingest_ok(NULL);
}

Test(store, read_only_store_refuses_writes)
{
	struct atb_store *ro = NULL;
	struct atb_error err;
	struct atb_result_row *rows;
	size_t n;

	fx_ingest(&F, 5, 1.5);
	ingest_ok(NULL);
	cr_assert_eq(atb_store_open(F.path, ATB_STORE_READ_ONLY, &ro, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(atb_store_ingest(ro, fx_ingest(&F, 5, 1.5), NULL, &err), ATB_ERR_USAGE);
	cr_assert_eq(atb_store_list_results(ro, &rows, &n, &err), ATB_OK);
	cr_assert_eq(n, 1);
	cr_assert_str_eq(rows[0].status, "admitted");
	cr_assert_float_eq(rows[0].speedup, 1.5, 1e-12);
	atb_store_results_free(rows, n);
	atb_store_close(ro);
}

/* ---- the writers ---- */

Test(store, ingest_stores_everything_in_one_transaction_with_its_audit_entry)
{
	struct atb_ingest_outcome o;
	struct atb_audit_report rep;
	struct atb_store_info info;
	struct atb_error err;

	fx_ingest(&F, 6, 1.5);
	ingest_ok(&o);
	cr_assert_gt(o.job_id, 0);
	cr_assert_gt(o.result_id, 0);
	cr_assert_gt(o.audit_seq, 0);
	cr_assert_eq(strlen(o.job_uuid), 32);
	cr_assert_eq(atb_store_info(F.s, &info, &err), ATB_OK);
	cr_assert_eq(info.schema_version, 4);
	cr_assert_eq(info.rows[3], 36);   /* sample */
	cr_assert_eq(info.rows[4], 6);    /* seed_result */
	cr_assert_eq(info.nprotocols, 1);
	cr_assert_eq(info.nboxes, 2);
	cr_assert_eq(atb_audit_verify(F.s, &rep, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(rep.db_entries, 4);  /* protocol, 2 boxes, ingest */
	cr_assert_eq(rep.mirror_entries, 4);
	cr_assert_eq(fx_count(&F, "SELECT count(*) FROM audit WHERE kind = 'ingest' AND"
			     " json_extract(payload, '$.result') = 1"), 1);
}

Test(store, rejections_are_stored_with_their_reason)
{
	struct atb_rejection_row *rows;
	struct atb_error err;
	int64_t id = 0;
	size_t n;

	atb_error_clear(&err);
	cr_assert_eq(atb_store_reject(F.s, "job-7", F.digest, "gate:correctness", ATB_ERR_CHECK,
				      "output differs at element 3", "{\"max_err\":2.5}", &id, &err),
		     ATB_OK, "%s", err.msg);
	cr_assert_gt(id, 0);
	cr_assert_eq(atb_store_reject(F.s, NULL, F.digest, "", ATB_ERR_CHECK, "x", NULL, NULL, &err),
		     ATB_ERR_USAGE);
	cr_assert_eq(atb_store_list_rejections(F.s, &rows, &n, &err), ATB_OK);
	cr_assert_eq(n, 1);
	cr_assert_str_eq(rows[0].rule, "gate:correctness");
	cr_assert_str_eq(rows[0].reason, "output differs at element 3");
	cr_assert_str_eq(rows[0].job_uuid, "job-7");
	atb_store_rejections_free(rows, n);
}

Test(store, secrets_never_reach_the_store_or_the_audit_chain)
{
	const char *key = "sk-test-0123456789abcdefSECRETVALUE";
	char q[300], *mirror;
	struct atb_error err;
	size_t len;

	setenv("OPENAI_API_KEY", key, 1);
	fx_ingest(&F, 5, 1.5);
	F.in.candidate = "cand sk-test-0123456789abcdefSECRETVALUE";
	ingest_ok(NULL);
	atb_error_clear(&err);
	cr_assert_eq(atb_store_reject(F.s, NULL, F.digest, "gate:llm", ATB_ERR_CHECK,
				      "call failed with key sk-test-0123456789abcdefSECRETVALUE",
				      "{\"headers\":[\"Bearer sk-test-0123456789abcdefSECRETVALUE\"]}",
				      NULL, &err), ATB_OK, "%s", err.msg);
	fx_ingest(&F, 5, 1.5);
	F.in.cv = 0.5;
	F.in.task = "task sk-test-0123456789abcdefSECRETVALUE";
	cr_assert_eq(atb_store_ingest(F.s, &F.in, NULL, &err), ATB_REJECTED_CV_OVER_CAP);
	cr_assert_eq(atb_store_audit_event(F.s, "llm.call",
					   "{\"auth\":\"sk-test-0123456789abcdefSECRETVALUE\"}",
					   NULL, &err), ATB_OK, "%s", err.msg);
	snprintf(q, sizeof(q), "SELECT count(*) FROM audit WHERE instr(payload, '%s') > 0", key);
	cr_assert_eq(fx_count(&F, q), 0);
	snprintf(q, sizeof(q), "SELECT count(*) FROM rejection WHERE instr(reason, '%s') > 0"
		 " OR instr(detail, '%s') > 0", key, key);
	cr_assert_eq(fx_count(&F, q), 0);
	cr_assert_eq(fx_count(&F, "SELECT count(*) FROM audit WHERE instr(payload, '[redacted]') > 0"),
		     3);
	file_bytes(atb_store_mirror_path(F.s), &mirror, &len);
	cr_assert_null(strstr(mirror, key));
	cr_assert_not_null(strstr(mirror, "[redacted]"));
	atb_free(mirror);
	unsetenv("OPENAI_API_KEY");
}

Test(store, sync_protocols_refuses_a_conflicting_version)
{
	struct atb_frozen_protocol p = {0};
	struct atb_error err;
	size_t added = 9;
	const char *other = "{\"stats\":{\"cv_cap\":0.5},\"version\":1}";

	p.version = 1;
	p.canonical_json = (char *)FX_CANONICAL;
	memcpy(p.digest, F.digest, 65);
	cr_assert_eq(atb_store_sync_protocols(F.s, &p, 1, &added, &err), ATB_OK);
	cr_assert_eq(added, 0);
	p.canonical_json = (char *)other;
	atbi_sha256_hex(other, strlen(other), p.digest);
	cr_assert_eq(atb_store_sync_protocols(F.s, &p, 1, &added, &err), ATB_ERR_PROTOCOL);
	memcpy(p.digest, F.digest, 65);  /* a digest that is not the content's */
	p.version = 2;
	cr_assert_eq(atb_store_sync_protocols(F.s, &p, 1, &added, &err), ATB_ERR_PROTOCOL);
}

Test(store, sync_protocols_writes_nothing_when_a_later_one_conflicts)
{
	struct atb_frozen_protocol p[2];
	struct atb_audit_report rep;
	struct atb_error err;
	size_t added = 9;
	const char *v2 = "{\"stats\":{\"cv_cap\":0.5},\"version\":2}";
	const char *other1 = "{\"stats\":{\"cv_cap\":0.4},\"version\":1}";

	memset(p, 0, sizeof(p));
	p[0].version = 2;
	p[0].canonical_json = (char *)v2;
	atbi_sha256_hex(v2, strlen(v2), p[0].digest);
	p[1].version = 1;
	p[1].canonical_json = (char *)other1;
	atbi_sha256_hex(other1, strlen(other1), p[1].digest);
	/* Each protocol is its own transaction, but a conflict is found before any. */
	cr_assert_eq(atb_store_sync_protocols(F.s, p, 2, &added, &err), ATB_ERR_PROTOCOL);
	cr_assert_eq(added, 0);
	cr_assert_eq(fx_count(&F, "SELECT count(*) FROM frozen_protocol"), 1);
	cr_assert_eq(fx_count(&F, "SELECT count(*) FROM audit"), 3);
	cr_assert_eq(atb_store_sync_protocols(F.s, p, 1, &added, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(added, 1);
	cr_assert_eq(atb_audit_verify(F.s, &rep, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(rep.db_entries, 4);
	cr_assert_eq(rep.mirror_entries, 4);
}

Test(store, create_builds_beside_and_leaves_no_leftover)
{
	struct atb_store *s = NULL;
	struct atb_error err;
	char p[400], tmp[420];
	FILE *fp;

	/* An empty file is created over; the leftover of a killed creation is cleared. */
	snprintf(p, sizeof(p), "%s/empty.db", F.dir);
	snprintf(tmp, sizeof(tmp), "%s.creating", p);
	fp = fopen(p, "w");
	fclose(fp);
	fp = fopen(tmp, "w");
	fputs("half a store from a killed creation", fp);
	fclose(fp);
	atb_error_clear(&err);
	cr_assert_eq(atb_store_open(p, ATB_STORE_CREATE, &s, &err), ATB_OK, "%s", err.msg);
	atb_store_close(s);
	cr_assert_eq(access(tmp, F_OK), -1);
	cr_assert_eq(atb_store_open(p, ATB_STORE_READ_ONLY, &s, &err), ATB_OK, "%s", err.msg);
	atb_store_close(s);
}

/* ---- atb_store_check ---- */

Test(store, check_finds_rows_that_got_in_with_triggers_dropped)
{
	struct atb_store_finding *f = NULL;
	struct atb_error err;
	size_t kept, total, i;
	int cv = 0, schema = 0, audit = 0;

	fx_ingest(&F, 5, 1.5);
	ingest_ok(NULL);
	cr_assert_eq(atb_store_check(F.s, &f, &kept, &total, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(total, 0);
	atb_free(f);
	fx_accepted(&F, "DROP TRIGGER result_no_update; UPDATE result SET cv = 0.2");
	cr_assert_eq(atb_store_check(F.s, &f, &kept, &total, &err), ATB_ERR_CHECK);
	for (i = 0; i < kept; i++) {
		cv += !strcmp(f[i].rule, "cv_over_cap");
		schema += !strcmp(f[i].rule, "schema");
		audit += !strcmp(f[i].rule, "audit");
	}
	cr_assert_eq(cv, 1);
	cr_assert_eq(schema, 1);
	/* The chain was not touched, but the ingest entry's row hash no longer matches. */
	cr_assert_eq(audit, 1);
	for (i = 0; i < kept; i++)
		if (!strcmp(f[i].rule, "audit"))
			cr_assert(strstr(f[i].what, "job 1: its rows differ"), "%s", f[i].what);
	atb_free(f);
}

Test(store, check_finds_iterations_that_got_in_with_triggers_dropped)
{
	struct atb_store_finding *f = NULL;
	struct atb_error err;
	size_t kept, total, i;
	int unusable = 0, gap = 0;

	fx_accepted(&F, "INSERT INTO run (id, task, proposer, seed, iterations, paired_seeds, naive,"
		    " protocol_digest, box_fingerprint, created) VALUES ('r1', 'relu', 'random', 1, 4,"
		    " 8, 0, '%s', '%s', 'now')", F.digest, F.box);
	/* A run written by SQL has no audit entry (issue 12: runs are audited too). */
	cr_assert_eq(atb_store_check(F.s, &f, &kept, &total, &err), ATB_ERR_CHECK);
	cr_assert_eq(total, 1);
	cr_assert(strstr(f[0].what, "run 'r1' has no audit entry"), "%s", f[0].what);
	atb_free(f);
	/* A usable iteration with no admitted result, and a gap in the numbering. */
	fx_accepted(&F, "DROP TRIGGER iteration_insert; INSERT INTO iteration (run, k, knobs, outcome,"
		    " usable, reason, wall_s, created) VALUES ('r1', 2, '{}', 'usable', 1, '', 1.0, 'now')");
	cr_assert_eq(atb_store_check(F.s, &f, &kept, &total, &err), ATB_ERR_CHECK);
	for (i = 0; i < kept; i++) {
		unusable += strstr(f[i].what, "usable without an admitted result") != NULL;
		gap += strstr(f[i].what, "without gaps") != NULL;
	}
	cr_assert_eq(unusable, 1);
	cr_assert_eq(gap, 1);
	atb_free(f);
}

/* ---- allocation failure ---- */

Test(store, allocation_failure_anywhere_in_ingest_fails_cleanly)
{
	struct atb_audit_report rep;
	struct atb_error err;
	long k, ok = 0, n;
	enum atb_status st;

	for (k = 1; k < 400; k++) {
		fx_ingest(&F, 5, 1.5);
		atb_alloc_fail_at(k);
		atb_error_clear(&err);
		st = atb_store_ingest(F.s, &F.in, NULL, &err);
		atb_alloc_fail_at(0);
		if (st == ATB_OK && !atb_alloc_failed()) {
			ok = 1;
			break;
		}
		cr_assert(st == ATB_OK || ATB_PRIMARY(st) == ATB_ERR_NOMEM ||
			  ATB_PRIMARY(st) == ATB_ERR_REJECTED,
			  "k=%ld: %s (%s)", k, atb_status_name(st), err.msg);
		/* The store stays consistent after every failure. */
		cr_assert_eq(atb_audit_verify(F.s, &rep, &err), ATB_OK, "k=%ld: %s", k, err.msg);
	}
	cr_assert(ok, "ingest never completed");
	n = fx_count(&F, "SELECT count(*) FROM job");
	cr_assert_eq(fx_count(&F, "SELECT count(*) FROM result"), n);
	for (k = 1; k < 200; k++) {
		atb_alloc_fail_at(k);
		st = atb_store_audit_event(F.s, "gate.decision", "{\"gate\":\"floor\",\"ok\":true}",
					   NULL, &err);
		atb_alloc_fail_at(0);
		if (st == ATB_OK && !atb_alloc_failed())
			break;
		cr_assert(st == ATB_OK || st == ATB_ERR_NOMEM || st == ATB_ERR_PARSE,
			  "k=%ld: %s", k, atb_status_name(st));
		cr_assert_eq(atb_audit_verify(F.s, &rep, &err), ATB_OK, "k=%ld: %s", k, err.msg);
	}
	cr_assert_lt(k, 200);
}

/* ---- the single-row writers: reject, review, register_box, audit events ---- */

/* Rows of table (kind's rows) and audit entries of kind agree in number. */
static void rows_match_entries(const char *table, const char *kind)
{
	char q[200];
	long rows, entries;

	snprintf(q, sizeof(q), "SELECT count(*) FROM %s", table);
	rows = fx_count(&F, q);
	snprintf(q, sizeof(q), "SELECT count(*) FROM audit WHERE kind = '%s'", kind);
	entries = fx_count(&F, q);
	cr_assert_eq(rows, entries, "%ld %s rows but %ld '%s' entries", rows, table, entries, kind);
}

Test(store, reject_review_and_box_each_write_their_row_with_its_audit_entry)
{
	struct atb_ingest_outcome q;
	struct atb_error err;
	int64_t rej = 0, rev = 0;
	long entries;
	char box3[65], sql[300];

	fx_ingest(&F, 5, 12.0);
	ingest_ok(&q);
	cr_assert(q.quarantined);
	atb_error_clear(&err);
	cr_assert_eq(atb_store_reject(F.s, "job-9", F.digest, "gate:floor", ATB_ERR_CHECK, "too fast",
				      NULL, &rej, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(atb_store_review(F.s, q.result_id, "admit", "ana", "re-measured", &rev,
				      &err), ATB_OK, "%s", err.msg);
	atbi_sha256_hex("box three", 9, box3);
	cr_assert_eq(atb_store_register_box(F.s, box3, "{\"cpu\":\"third\"}", &err), ATB_OK,
		     "%s", err.msg);
	cr_assert_gt(rej, 0);
	cr_assert_gt(rev, 0);
	/* Each entry names its row: the id the writer handed back. */
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM audit WHERE kind = 'rejection' AND"
		 " json_extract(payload, '$.rejection') = %lld AND"
		 " json_extract(payload, '$.rule') = 'gate:floor'", (long long)rej);
	cr_assert_eq(fx_count(&F, sql), 1);
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM audit WHERE kind = 'review' AND"
		 " json_extract(payload, '$.review') = %lld AND json_extract(payload, '$.result') = %lld",
		 (long long)rev, (long long)q.result_id);
	cr_assert_eq(fx_count(&F, sql), 1);
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM audit WHERE kind = 'box.registered' AND"
		 " json_extract(payload, '$.fingerprint') = '%s' AND"
		 " json_extract(payload, '$.description.cpu') = 'third'", box3);
	cr_assert_eq(fx_count(&F, sql), 1);
	/* A box registered again writes nothing, not even an entry. */
	entries = fx_count(&F, "SELECT count(*) FROM audit");
	cr_assert_eq(atb_store_register_box(F.s, box3, "{\"cpu\":\"third\"}", &err), ATB_OK);
	cr_assert_eq(fx_count(&F, "SELECT count(*) FROM audit"), entries);
	/* A refused review writes neither its row nor an entry. */
	cr_assert_eq(atb_store_review(F.s, q.result_id, "maybe", "ana", "x", NULL, &err),
		     ATB_REJECTED_REVIEW, "%s", err.msg);
	cr_assert_eq(fx_count(&F, "SELECT count(*) FROM audit"), entries);
	rows_match_entries("rejection", "rejection");
	rows_match_entries("review", "review");
	rows_match_entries("box", "box.registered");
}

Test(store, allocation_failure_in_reject_review_or_box_leaves_no_row_without_its_entry)
{
	struct atb_ingest_outcome q;
	struct atb_audit_report rep;
	struct atb_error err;
	enum atb_status st;
	char box3[65];
	int w;
	long k;

	fx_ingest(&F, 5, 12.0);
	ingest_ok(&q);
	atbi_sha256_hex("box three", 9, box3);
	for (w = 0; w < 3; w++) {
		for (k = 1; k < 300; k++) {
			atb_alloc_fail_at(k);
			atb_error_clear(&err);
			if (w == 0)
				st = atb_store_reject(F.s, NULL, F.digest, "gate:floor", ATB_ERR_CHECK,
						      "too fast", "{\"n\":1}", NULL, &err);
			else if (w == 1)
				st = atb_store_review(F.s, q.result_id, "admit", "ana", "ok", NULL,
						      &err);
			else
				st = atb_store_register_box(F.s, box3, "{\"cpu\":\"x\"}", &err);
			atb_alloc_fail_at(0);
			/* jansson reports its own allocation failure as a parse error. */
			cr_assert(st == ATB_OK || ATB_PRIMARY(st) == ATB_ERR_NOMEM ||
				  st == ATB_ERR_PARSE,
				  "writer %d, k=%ld: %s (%s)", w, k, atb_status_name(st), err.msg);
			rows_match_entries("rejection", "rejection");
			rows_match_entries("review", "review");
			rows_match_entries("box", "box.registered");
			cr_assert_eq(atb_audit_verify(F.s, &rep, &err), ATB_OK, "k=%ld: %s", k,
				     err.msg);
			if (st == ATB_OK && !atb_alloc_failed())
				break;
		}
		cr_assert_lt(k, 300, "writer %d never completed", w);
	}
}

/* ---- issue 12: db check re-derives from the samples; rows are bound to the chain ---- */

/* An ingest whose numbers are stats/'s own, with the bootstrap seed in its stats. */
static void ingest_measured(struct atb_ingest_outcome *o)
{
	struct atb_paired_seed ps[8];
	double b[8][3], c[8][3];
	struct atb_paired_input in;
	struct atb_paired_result r;
	struct atb_error err;
	char stats[256];
	size_t i, k;

	fx_ingest(&F, 8, 1.5);
	fx_spread(&F, 0.02);
	for (k = 0; k < F.in.nsamples; k++) {
		const struct atb_sample *x = &F.samples[k];

		(x->arm == ATB_ARM_BASELINE ? b : c)[x->seed - 100][x->trial] =
			x->value * (x->arm == ATB_ARM_CANDIDATE ? 1 + 0.01 * x->trial : 1);
	}
	memset(ps, 0, sizeof(ps));
	for (i = 0; i < 8; i++)
		ps[i] = (struct atb_paired_seed){(uint64_t)(100 + i), b[i], 3, c[i], 3};
	memset(&in, 0, sizeof(in));
	in.seeds = ps;
	in.nseeds = 8;
	in.ci_level = 0.95;
	in.bootstrap_resamples = 200;
	in.significance_alpha = 0.05;
	in.cv_cap = 0.05;
	in.bootstrap_seed = 4242;
	atb_error_clear(&err);
	cr_assert_eq(atb_stats_paired(&in, &r, &err), ATB_OK, "%s", err.msg);
	for (k = 0; k < F.in.nsamples; k++) {
		struct atb_sample *x = &F.samples[k];

		x->value = (x->arm == ATB_ARM_BASELINE ? b : c)[x->seed - 100][x->trial];
	}
	for (i = 0; i < 8; i++)
		F.seeds[i] = (struct atb_seed_result){(int64_t)r.seeds[i].seed,
						      r.seeds[i].baseline_median,
						      r.seeds[i].candidate_median, r.seeds[i].ratio};
	F.in.speedup = r.geomean_ratio;
	F.in.ci_low = r.ci_lo;
	F.in.ci_high = r.ci_hi;
	F.in.cv = r.cv;
	snprintf(stats, sizeof(stats), "{\"bootstrap_seed\":4242,\"bootstrap_resamples\":200,"
		 "\"ci_level\":0.95,\"seeds\":[100,101,102,103,104,105,106,107]}");
	F.in.stats_json = stats;
	ingest_ok(o);
	atb_stats_paired_release(&r);
}

static size_t findings_with(const char *what, struct atb_store_finding *f, size_t kept)
{
	size_t i, n = 0;

	for (i = 0; i < kept; i++)
		n += strstr(f[i].what, what) != NULL;
	return n;
}

Test(store, check_rederives_the_bootstrap_interval_from_the_samples)
{
	struct atb_store_finding *f = NULL;
	struct atb_error err;
	size_t kept, total;

	ingest_measured(NULL);
	atb_error_clear(&err);
	cr_assert_eq(atb_store_check(F.s, &f, &kept, &total, &err), ATB_OK, "%s", err.msg);
	atb_free(f);
	fx_accepted(&F, "DROP TRIGGER result_no_update; UPDATE result SET ci_low = ci_low * 0.9");
	cr_assert_eq(atb_store_check(F.s, &f, &kept, &total, &err), ATB_ERR_CHECK);
	cr_assert_eq(findings_with("the bootstrap of its samples (seed 4242)", f, kept), 1);
	cr_assert_eq(findings_with("job 1: its rows differ", f, kept), 1);
	atb_free(f);
}

Test(store, check_rederives_medians_ratios_speedup_and_cv)
{
	struct atb_store_finding *f = NULL;
	struct atb_error err;
	size_t kept, total;

	ingest_measured(NULL);
	fx_accepted(&F, "DROP TRIGGER sample_no_update; DROP TRIGGER seed_result_no_update;"
		    " DROP TRIGGER result_no_update;"
		    " UPDATE sample SET value = value * 3 WHERE arm = 'baseline' AND seed = 103;"
		    " UPDATE seed_result SET ratio = ratio * 1.1 WHERE seed = 105;"
		    " UPDATE result SET speedup = speedup * 1.2, ci_high = ci_high * 1.3, cv = cv + 0.01");
	atb_error_clear(&err);
	cr_assert_eq(atb_store_check(F.s, &f, &kept, &total, &err), ATB_ERR_CHECK);
	cr_assert_eq(findings_with("seed 103: baseline median", f, kept), 1);
	cr_assert_eq(findings_with("seed 105: ratio", f, kept), 1);
	cr_assert_eq(findings_with("result 1: speedup", f, kept), 2);  /* and not the geomean */
	cr_assert_eq(findings_with("not_derived: result 1: cv", f, kept), 1);
	atb_free(f);
}

/* A run "id" on box one, planning two iterations, through the API (so audited). */
static void run_on_box_one(const char *id)
{
	struct atb_run_row run;
	struct atb_error err;

	memset(&run, 0, sizeof(run));
	snprintf(run.id, sizeof(run.id), "%s", id);
	snprintf(run.task, sizeof(run.task), "relu");
	snprintf(run.proposer, sizeof(run.proposer), "suite");
	run.iterations = 2;
	run.paired_seeds = 5;
	memcpy(run.protocol_digest, F.digest, 65);
	memcpy(run.box_fingerprint, F.box, 65);
	atb_error_clear(&err);
	cr_assert_eq(atb_store_add_run(F.s, &run, &err), ATB_OK, "%s", err.msg);
}

/* Iteration k of run with the result of o; its status, its message in *err. */
static enum atb_status iteration_of(const char *run, int64_t k, const struct atb_ingest_outcome *o,
				    struct atb_error *err)
{
	struct atb_iteration_row it;

	memset(&it, 0, sizeof(it));
	snprintf(it.run, sizeof(it.run), "%s", run);
	it.k = k;
	it.knobs_json = "{}";
	snprintf(it.outcome, sizeof(it.outcome), "usable");
	it.usable = 1;
	memcpy(it.job_uuid, o->job_uuid, sizeof(it.job_uuid));
	it.result_id = o->result_id;
	atb_error_clear(err);
	return atb_store_add_iteration(F.s, &it, err);
}

/* The entry 'atb suite --resume' / 'atb calibrate --resume' writes before it runs a task. */
static void resume_entry(const char *kind, const char *run, const char *box, int other)
{
	char payload[256];
	struct atb_error err;

	snprintf(payload, sizeof(payload), "{\"run\":\"%s\",\"k\":0,\"box\":\"%s\",\"other_box\":%s}",
		 run, box, other ? "true" : "false");
	atb_error_clear(&err);
	cr_assert_eq(atb_store_audit_event(F.s, kind, payload, NULL, &err), ATB_OK, "%s", err.msg);
}

#define OTHER_BOX_REFUSAL "atb-rule:malformed: the iteration's result is on a box its run was" \
	" neither started on nor resumed on with --allow-other-box"

Test(store, an_iteration_on_another_box_is_refused_unless_a_resume_allowed_that_box)
{
	struct atb_ingest_outcome o2, o3;
	struct atb_store_finding *f = NULL;
	struct atb_error err;
	char box3[65];
	size_t kept, total;

	/* Two results on box two; runs r1 and r2 on box one. */
	fx_ingest(&F, 5, 1.5);
	F.in.box_fingerprint = F.box2;
	ingest_ok(&o2);
	run_on_box_one("r1");
	run_on_box_one("r2");

	/* No entry at all, then entries that do not allow it: the other run's, a
	   resume on this box (other_box false), a kind that is no resume. */
	cr_assert_eq(iteration_of("r1", 0, &o2, &err), ATB_REJECTED_MALFORMED, "%s", err.msg);
	cr_assert(strstr(err.msg, OTHER_BOX_REFUSAL), "%s", err.msg);
	resume_entry("calibrate.resume", "r2", F.box2, 1);
	resume_entry("suite.resume", "r1", F.box2, 0);
	resume_entry("suite.plan", "r1", F.box2, 1);
	cr_assert_eq(iteration_of("r1", 0, &o2, &err), ATB_REJECTED_MALFORMED, "%s", err.msg);
	cr_assert(strstr(err.msg, OTHER_BOX_REFUSAL), "%s", err.msg);
	cr_assert_eq(fx_count(&F, "SELECT count(*) FROM iteration"), 0);

	/* Resumed on box two with --allow-other-box: recorded, by a suite's entry
	   and (r2, above) a calibration's. */
	resume_entry("suite.resume", "r1", F.box2, 1);
	cr_assert_eq(iteration_of("r1", 0, &o2, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(iteration_of("r2", 0, &o2, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(atb_store_check(F.s, &f, &kept, &total, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(total, 0);
	atb_free(f);

	/* A result on a third box, never allowed, forced in with the trigger
	   dropped and put back: db check names the box. */
	atbi_sha256_hex("box three", 9, box3);
	cr_assert_eq(atb_store_register_box(F.s, box3, "{\"cpu\":\"third\"}", &err), ATB_OK);
	fx_ingest(&F, 5, 1.5);
	F.in.box_fingerprint = box3;
	ingest_ok(&o3);
	cr_assert_eq(iteration_of("r1", 1, &o3, &err), ATB_REJECTED_MALFORMED, "%s", err.msg);
	cr_assert(strstr(err.msg, OTHER_BOX_REFUSAL), "%s", err.msg);
	{
		sqlite3 *db;
		char *trig = NULL, sql[512];
		sqlite3_stmt *q;

		cr_assert_eq(sqlite3_open(F.path, &db), SQLITE_OK);
		cr_assert_eq(sqlite3_prepare_v2(db, "SELECT sql FROM sqlite_schema WHERE name ="
						" 'iteration_insert'", -1, &q, NULL), SQLITE_OK);
		cr_assert_eq(sqlite3_step(q), SQLITE_ROW);
		trig = strdup((const char *)sqlite3_column_text(q, 0));
		sqlite3_finalize(q);
		snprintf(sql, sizeof(sql), "DROP TRIGGER iteration_insert; INSERT INTO iteration (run, k,"
			 " knobs, outcome, usable, job_uuid, result, speedup, ci_low, ci_high, reason,"
			 " wall_s, created) SELECT 'r1', 1, '{}', 'usable', 1, '%s', id, speedup, ci_low,"
			 " ci_high, '', 1.0, 'now' FROM result WHERE id = %" PRId64 ";", o3.job_uuid,
			 o3.result_id);
		cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
		cr_assert_eq(sqlite3_exec(db, trig, NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
		free(trig);
		sqlite3_close(db);
	}
	cr_assert_eq(atb_store_check(F.s, &f, &kept, &total, &err), ATB_ERR_CHECK);
	cr_assert_eq(findings_with("iteration 1 of run r1: its result is on box", f, kept), 1);
	cr_assert_eq(findings_with("which its run was neither started on nor resumed on", f, kept), 1);
	atb_free(f);
}

Test(store, a_schema_3_store_is_checked_as_it_is_and_migrated_to_4_on_a_write)
{
	struct atb_ingest_outcome o;
	struct atb_store_finding *f = NULL;
	struct atb_audit_report rep;
	struct atb_error err;
	size_t kept, total;
	char *v3_trigger, sql[8192];
	sqlite3 *db;
	sqlite3_stmt *q;

	/* What atb wrote at schema 3: this store with v3's iteration trigger. */
	fx_ingest(&F, 5, 1.5);
	F.in.box_fingerprint = F.box2;
	ingest_ok(&o);
	run_on_box_one("r1");
	resume_entry("suite.resume", "r1", F.box2, 1);
	atb_store_close(F.s);
	F.s = NULL;
	cr_assert_eq(sqlite3_open(":memory:", &db), SQLITE_OK);
	cr_assert_eq(sqlite3_exec(db, atbi_store_schema_sql, NULL, NULL, NULL), SQLITE_OK);
	cr_assert_eq(sqlite3_prepare_v2(db, "SELECT sql FROM sqlite_schema WHERE name ="
					" 'iteration_insert'", -1, &q, NULL), SQLITE_OK);
	cr_assert_eq(sqlite3_step(q), SQLITE_ROW);
	v3_trigger = strdup((const char *)sqlite3_column_text(q, 0));
	sqlite3_finalize(q);
	sqlite3_close(db);
	snprintf(sql, sizeof(sql), "DROP TRIGGER iteration_insert; %s; PRAGMA user_version = 3;",
		 v3_trigger);
	free(v3_trigger);
	cr_assert_eq(sqlite3_open(F.path, &db), SQLITE_OK);
	cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
	sqlite3_close(db);

	/* Read-only: checked against v3, every entry bound to its rows. */
	atb_error_clear(&err);
	cr_assert_eq(atb_store_open(F.path, ATB_STORE_READ_ONLY, &F.s, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(atb_store_check(F.s, &f, &kept, &total, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(total, 0);
	atb_free(f);
	atb_store_close(F.s);
	F.s = NULL;

	/* Read-write: migrated to 4 with an entry from 3, which is no row-hash
	   boundary (nothing becomes legacy); the other box's result records. */
	fx_open(&F);
	cr_assert_eq(fx_count(&F, "SELECT user_version FROM pragma_user_version"), 4);
	cr_assert_eq(fx_count(&F, "SELECT count(*) FROM audit WHERE kind = 'store.migrated' AND"
			     " json_extract(payload, '$.from') = 3 AND json_extract(payload, '$.to') = 4"
			     " AND seq = (SELECT max(seq) FROM audit)"), 1);
	cr_assert_eq(iteration_of("r1", 0, &o, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(atb_store_check(F.s, &f, &kept, &total, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(total, 0, "%s", total ? f[0].what : "");
	atb_free(f);
	cr_assert_eq(atb_audit_verify(F.s, &rep, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(rep.legacy_entries, 0);
	/* so an entry before the migration that lost its row hash is found */
	fx_accepted(&F, "DROP TRIGGER audit_no_update; UPDATE audit SET payload ="
		    " json_remove(payload, '$.rows') WHERE seq = (SELECT min(seq) FROM audit"
		    " WHERE kind = 'ingest')");
	atb_error_clear(&err);
	cr_assert_eq(atb_audit_verify(F.s, &rep, &err), ATB_ERR_AUDIT);
	cr_assert_eq(rep.legacy_entries, 0);
}

Test(store, a_deleted_result_with_its_iteration_and_tail_entry_is_found)
{
	struct atb_ingest_outcome o;
	struct atb_run_row run;
	struct atb_iteration_row it;
	struct atb_audit_report rep;
	struct atb_error err;

	fx_ingest(&F, 5, 1.5);
	ingest_ok(&o);
	memset(&run, 0, sizeof(run));
	snprintf(run.id, sizeof(run.id), "r1");
	snprintf(run.task, sizeof(run.task), "relu");
	snprintf(run.proposer, sizeof(run.proposer), "random");
	run.iterations = 2;
	run.paired_seeds = 5;
	memcpy(run.protocol_digest, F.digest, 65);
	memcpy(run.box_fingerprint, F.box, 65);
	atb_error_clear(&err);
	cr_assert_eq(atb_store_add_run(F.s, &run, &err), ATB_OK, "%s", err.msg);
	memset(&it, 0, sizeof(it));
	snprintf(it.run, sizeof(it.run), "r1");
	it.knobs_json = "{}";
	snprintf(it.outcome, sizeof(it.outcome), "usable");
	it.usable = 1;
	memcpy(it.job_uuid, o.job_uuid, sizeof(it.job_uuid));
	it.result_id = o.result_id;
	cr_assert_eq(atb_store_add_iteration(F.s, &it, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(atb_audit_verify(F.s, &rep, &err), ATB_OK, "%s", err.msg);
	/* The iteration is the tail entry: delete it, its row and the result, both copies. */
	fx_accepted(&F, "DROP TRIGGER result_no_delete; DROP TRIGGER iteration_no_delete;"
		    " DROP TRIGGER audit_no_delete; DELETE FROM iteration; DELETE FROM result;"
		    " DELETE FROM audit WHERE seq = (SELECT max(seq) FROM audit)");
	{
		char *buf;
		size_t len, end;
		FILE *m;

		cr_assert_eq(atbi_read_file(atb_store_mirror_path(F.s), &buf, &len, &err), ATB_OK);
		for (end = len - 1; end > 0 && buf[end - 1] != '\n'; end--)
			;
		m = fopen(atb_store_mirror_path(F.s), "w");
		cr_assert_not_null(m);
		cr_assert_eq(fwrite(buf, 1, end, m), end);
		fclose(m);
		atb_free(buf);
	}
	atb_error_clear(&err);
	cr_assert_eq(atb_audit_verify(F.s, &rep, &err), ATB_ERR_AUDIT);
	cr_assert(strstr(err.msg, "job 1: its rows differ from the hash this ingest entry recorded"),
		  "%s", err.msg);
}

Test(store, box_capability_rows_are_bound_to_the_chain)
{
	struct atb_audit_report rep;
	struct atb_error err;

	atb_error_clear(&err);
	cr_assert_eq(atb_store_capability_put(F.s, F.box, ATB_CAPABILITY_CPU_MEM_BW, 2e10, "stream",
					      &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(atb_audit_verify(F.s, &rep, &err), ATB_OK, "%s", err.msg);
	/* A faster box makes the physical floor lower: edit the value. */
	fx_accepted(&F, "DROP TRIGGER box_capability_no_update; UPDATE box_capability SET value = 2e12");
	cr_assert_eq(atb_audit_verify(F.s, &rep, &err), ATB_ERR_AUDIT);
	cr_assert(strstr(err.msg, "box capability 1: its rows differ"), "%s", err.msg);
}

Test(store, a_schema_2_store_is_read_as_legacy_and_migrated_on_a_write)
{
	char path[400], body_hex[65], now[40], *body = NULL, payload[200], sql[1200];
	struct atb_store *s = NULL;
	struct atb_store_finding *f = NULL;
	struct atb_audit_report rep;
	struct atb_error err;
	size_t kept, total, blen;
	sqlite3 *db;
	FILE *m;

	/* What atb wrote before schema 3: the v2 schema, a frozen protocol, its entry. */
	snprintf(path, sizeof(path), "%s/v2.db", F.dir);
	cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
	cr_assert_eq(sqlite3_exec(db, atbi_store_schema_sql, NULL, NULL, NULL), SQLITE_OK);
	snprintf(payload, sizeof(payload), "{\"digest\":\"%s\",\"version\":1}", F.digest);
	atbi_audit_time(now, sizeof(now));
	cr_assert_eq(atbi_audit_body(1, now, "protocol.frozen", payload, ATBI_GENESIS, &body, &blen),
		     ATB_OK);
	atbi_sha256_hex(body, blen, body_hex);
	snprintf(sql, sizeof(sql), "PRAGMA application_id = 1635017265; PRAGMA user_version = 2;"
		 " PRAGMA journal_mode = WAL; INSERT INTO frozen_protocol VALUES ('%s', 1, '%s', 'now');"
		 " INSERT INTO audit VALUES (1, '%s', 'protocol.frozen', '%s', '%s', '%s');",
		 F.digest, FX_CANONICAL, now, payload, ATBI_GENESIS, body_hex);
	cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
	sqlite3_close(db);
	snprintf(sql, sizeof(sql), "%s.audit.jsonl", path);
	m = fopen(sql, "w");
	cr_assert_not_null(m);
	fprintf(m, "{\"entry\":%s,\"hash\":\"%s\"}\n", body, body_hex);
	fclose(m);
	atb_free(body);

	/* Read-only: read as it is, checked against v2, its entry legacy. */
	atb_error_clear(&err);
	cr_assert_eq(atb_store_open(path, ATB_STORE_READ_ONLY, &s, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(atb_audit_verify(s, &rep, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(rep.legacy_entries, 1);
	cr_assert(strstr(rep.notes[0], "1 entry written before row hashes"), "%s", rep.notes[0]);
	cr_assert_eq(atb_store_check(s, &f, &kept, &total, &err), ATB_OK, "%s", err.msg);
	atb_free(f);
	atb_store_close(s);

	/* Read-write: migrated to 4 in one transaction, with an entry that says so. */
	cr_assert_eq(atb_store_open(path, ATB_STORE_READ_WRITE, &s, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(atb_store_register_box(s, F.box, "{\"cpu\":\"test\"}", &err), ATB_OK, "%s",
		     err.msg);
	cr_assert_eq(atb_audit_verify(s, &rep, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(rep.db_entries, 3);
	cr_assert_eq(rep.legacy_entries, 1);
	cr_assert_eq(rep.rows_checked, 1);
	cr_assert_eq(atb_store_check(s, &f, &kept, &total, &err), ATB_OK, "%s", err.msg);
	atb_free(f);
	cr_assert_eq(atb_store_reject(s, NULL, F.digest, "gate:x", ATB_ERR_CHECK, "x", NULL, NULL,
				      &err), ATB_OK, "%s", err.msg);
	atb_store_close(s);
	cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
	{
		sqlite3_stmt *q;

		cr_assert_eq(sqlite3_prepare_v2(db, "SELECT (SELECT user_version FROM pragma_user_version),"
						" (SELECT kind FROM audit WHERE seq = 2),"
						" (SELECT protocol_digest FROM rejection)", -1, &q, NULL),
			     SQLITE_OK);
		cr_assert_eq(sqlite3_step(q), SQLITE_ROW);
		cr_assert_eq(sqlite3_column_int(q, 0), 4);
		cr_assert_str_eq((const char *)sqlite3_column_text(q, 1), "store.migrated");
		cr_assert_str_eq((const char *)sqlite3_column_text(q, 2), F.digest);
		sqlite3_finalize(q);
	}
	sqlite3_close(db);
}

Test(store, an_entry_that_lost_its_row_hash_after_row_hashes_began_is_found)
{
	struct atb_audit_report rep;
	struct atb_error err;

	/* Rewritten without "rows" (and re-hashed, so the chain itself holds). */
	fx_accepted(&F, "DROP TRIGGER audit_no_update; UPDATE audit SET payload ="
		    " json_remove(payload, '$.rows') WHERE seq = 2");
	atb_error_clear(&err);
	cr_assert_eq(atb_audit_verify(F.s, &rep, &err), ATB_ERR_AUDIT);
	/* the edit breaks the entry's own hash first; either way it is found */
	cr_assert_eq(rep.bad_seq, 2);
}

Test(store, an_even_count_median_is_the_mean_of_the_two_middle_samples)
{
	int i, t, n = 0;

	fx_ingest(&F, 5, 1.5);
	for (i = 0; i < 5; i++) {
		for (t = 0; t < 4; t++) {
			F.samples[n++] = (struct atb_sample){100 + i, t, ATB_ARM_BASELINE, 1500.0 + t};
			F.samples[n++] = (struct atb_sample){100 + i, t, ATB_ARM_CANDIDATE,
							      (1500.0 + t) / 1.5};
		}
		F.seeds[i].baseline_median = 1501.5;
		F.seeds[i].candidate_median = 0.5 * (1501.0 / 1.5) + 0.5 * (1502.0 / 1.5);
		F.seeds[i].ratio = F.seeds[i].baseline_median / F.seeds[i].candidate_median;
	}
	F.in.nsamples = (size_t)n;
	/* A lower middle sample passes the counts; it is not the median. */
	F.seeds[0].baseline_median = 1501.0;
	F.seeds[0].ratio = 1501.0 / F.seeds[0].candidate_median;
	F.in.speedup = exp((log(F.seeds[0].ratio) + 4 * log(F.seeds[1].ratio)) / 5);
	ingest_refused(ATB_REJECTED_NOT_DERIVED);
	cr_assert(strstr(refused_msg, "baseline median"), "%s", refused_msg);
	/* The upper middle one neither. */
	F.seeds[0].baseline_median = 1502.0;
	F.seeds[0].ratio = 1502.0 / F.seeds[0].candidate_median;
	F.in.speedup = exp((log(F.seeds[0].ratio) + 4 * log(F.seeds[1].ratio)) / 5);
	{
		struct atb_error e;

		atb_error_clear(&e);
		cr_assert_eq(atb_store_ingest(F.s, &F.in, NULL, &e), ATB_REJECTED_NOT_DERIVED, "%s",
			     e.msg);
		cr_assert(strstr(e.msg, "baseline median"), "%s", e.msg);
	}
	F.seeds[0].baseline_median = 1501.5;
	F.seeds[0].ratio = F.seeds[1].ratio;
	F.in.speedup = F.seeds[1].ratio;
	F.in.ci_low = F.in.speedup * 0.95;
	F.in.ci_high = F.in.speedup * 1.05;
	ingest_ok(NULL);
}

/* A result's time per call for a proposer's history: the medians of its
   per-seed medians; no such result is not found. */
Test(store, result_medians_are_the_medians_of_its_seeds)
{
	struct atb_ingest_outcome o;
	struct atb_error err;
	double b = -1, c = -1;

	fx_ingest(&F, 8, 1.5);
	ingest_ok(&o);
	cr_assert(o.result_id > 0);
	cr_assert_eq(atb_store_result_medians(F.s, o.result_id, &b, &c, &err), ATB_OK, "%s",
		     err.msg);
	cr_assert(b > 0 && c > 0);
	cr_assert_float_eq(b / c, 1.5, 0.05, "%g / %g", b, c);
	cr_assert_eq(atb_store_result_medians(F.s, o.result_id + 100, &b, &c, &err),
		     ATB_ERR_NOT_FOUND);
	cr_assert(b == 0 && c == 0);
	cr_assert(strstr(err.msg, "no paired seeds for result"), "%s", err.msg);
}

/* PROTO: gates.physical_floor -- the floor a result was judged against, for a
   proposer's roofline line: its two times from the stored bytes, flops and
   rates; a result without one (stats with no floor, or floor_ns null) is not
   found. */
Test(store, result_floor_gives_both_times_from_the_stored_floor)
{
	struct atb_ingest_outcome o;
	struct atb_result_floor fl;
	struct atb_error err;
	int64_t with, without, null_floor;

	fx_ingest(&F, 8, 1.5)->stats_json =
		"{\"floor\":{\"bytes\":201326592,\"flops\":137438953472,\"floor_ns\":76334.0,"
		"\"mem_bw_bytes_per_s\":4.814304e12,\"peak_flops_per_s\":1.800494582649933e15}}";
	ingest_ok(&o);
	with = o.result_id;
	fx_ingest(&F, 8, 1.5);
	F.in.candidate = "cand-2";
	ingest_ok(&o);
	without = o.result_id;
	fx_ingest(&F, 8, 1.5)->stats_json = "{\"floor\":{\"floor_ns\":null,\"bytes\":10}}";
	F.in.candidate = "cand-3";
	ingest_ok(&o);
	null_floor = o.result_id;

	cr_assert_eq(atb_store_result_floor(F.s, with, &fl, &err), ATB_OK, "%s", err.msg);
	cr_expect_float_eq(fl.floor_ns, 76334.0, 1e-9);
	cr_expect_float_eq(fl.bytes, 201326592.0, 1e-9);
	cr_expect_float_eq(fl.memory_ns, 201326592.0 / 4.814304e12 * 1e9, 1e-6);
	cr_expect_float_eq(fl.compute_ns, 137438953472.0 / 1.800494582649933e15 * 1e9, 1e-6);
	cr_expect(fl.compute_ns > fl.memory_ns, "this GEMM is bound by compute");
	cr_expect_float_eq(fl.floor_ns, fl.compute_ns, 1.0);
	cr_assert_eq(atb_store_result_floor(F.s, without, &fl, &err), ATB_ERR_NOT_FOUND);
	cr_expect(fl.floor_ns == 0 && fl.memory_ns == 0);
	cr_assert(strstr(err.msg, "no floor for result"), "%s", err.msg);
	cr_assert_eq(atb_store_result_floor(F.s, null_floor, &fl, &err), ATB_ERR_NOT_FOUND);
	cr_assert_eq(atb_store_result_floor(F.s, with + 100, &fl, &err), ATB_ERR_NOT_FOUND);
}
