/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * atb_store_check: re-verify a whole store after the fact.
 *
 * The triggers refuse bad rows at insert time, but someone with the file can
 * drop a trigger, insert, and put it back.  So every rule is also a query
 * over every row here, the schema objects are compared with the ones the
 * current schema creates, frozen protocol digests are recomputed, and the
 * audit chain of both copies is verified.
 *
 * Does not: repair anything.
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "atb/alloc.h"
#include "atb/audit.h"
#include "atb/stats.h"
#include "llm/llm_int.h"
#include "store/store_int.h"
#include "banned.h"

#define MAX_KEPT 1000

struct findings {
	struct atb_store_finding *v;
	size_t kept, total;
	int nomem;
};

static void add(struct findings *f, const char *rule, const char *table, int64_t row,
		const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void add(struct findings *f, const char *rule, const char *table, int64_t row,
		const char *fmt, ...)
{
	struct atb_store_finding *x;
	va_list ap;

	f->total++;
	if (f->kept >= MAX_KEPT || f->nomem)
		return;
	if (!f->v) {
		f->v = atb_calloc(MAX_KEPT, sizeof(*f->v));
		if (!f->v) {
			f->nomem = 1;
			return;
		}
	}
	x = &f->v[f->kept++];
	snprintf(x->rule, sizeof(x->rule), "%s", rule);
	snprintf(x->table, sizeof(x->table), "%s", table);
	x->row = row;
	va_start(ap, fmt);
	vsnprintf(x->what, sizeof(x->what), fmt, ap);
	va_end(ap);
}

/* Each query returns (row, what) for every row that breaks the rule. */
static const struct {
	const char *rule, *table, *sql;
} queries[] = {
	{"unfrozen_protocol", "job", "SELECT id, 'job ' || uuid || ': protocol digest is not frozen'"
	 " FROM job WHERE protocol_digest IS NULL OR protocol_digest NOT IN"
	 " (SELECT digest FROM frozen_protocol)"},
	{"no_box", "job", "SELECT id, 'job ' || uuid || ': no registered box' FROM job"
	 " WHERE box_fingerprint IS NULL OR box_fingerprint NOT IN (SELECT fingerprint FROM box)"},
	{"malformed", "sample", "SELECT s.job, 'sample of missing job ' || s.job FROM sample s"
	 " WHERE NOT EXISTS (SELECT 1 FROM job WHERE id = s.job)"},
	{"malformed", "sample", "SELECT job, 'sample of job ' || job || ' seed ' || seed ||"
	 " ' trial ' || trial || ': arm ' || quote(arm) || ' or trial is malformed' FROM sample"
	 " WHERE arm IS NULL OR arm NOT IN ('baseline', 'candidate', 'naive', 'baseline_alone')"
	 " OR typeof(trial) IS NOT 'integer' OR trial < 0"},
	{"bad_time", "sample", "SELECT job, 'sample of job ' || job || ' seed ' || seed ||"
	 " ' trial ' || trial || ': value ' || quote(value) || ' is not finite and positive'"
	 " FROM sample WHERE NOT (value IS NOT NULL AND typeof(value) IN ('real','integer')"
	 " AND value > 0 AND value <= 1.7976931348623157e308)"},
	{"bad_time", "seed_result", "SELECT job, 'seed ' || seed || ' of job ' || job ||"
	 "': a median or ratio is not finite and positive' FROM seed_result WHERE NOT ("
	 " baseline_median > 0 AND baseline_median <= 1.7976931348623157e308 AND"
	 " candidate_median > 0 AND candidate_median <= 1.7976931348623157e308 AND"
	 " ratio > 0 AND ratio <= 1.7976931348623157e308)"},
	{"duplicate_seed", "seed_result", "SELECT job, 'seed ' || seed || ' of job ' || job ||"
	 " ' has ' || count(*) || ' results' FROM seed_result GROUP BY job, seed HAVING count(*) > 1"},
	{"paired_seeds", "seed_result", "SELECT r.job, 'seed ' || r.seed || ' of job ' || r.job ||"
	 " ' lacks baseline or candidate samples' FROM seed_result r WHERE"
	 " NOT EXISTS (SELECT 1 FROM sample WHERE job = r.job AND arm = 'baseline' AND seed = r.seed)"
	 " OR NOT EXISTS (SELECT 1 FROM sample WHERE job = r.job AND arm = 'candidate' AND seed = r.seed)"},
	{"malformed", "result", "SELECT r.id, 'result ' || r.id || ': its job is missing or of"
	 " another kind' FROM result r LEFT JOIN job j ON j.id = r.job WHERE j.id IS NULL"
	 " OR j.kind IS NOT r.kind"},
	{"unfrozen_protocol", "result", "SELECT r.id, 'result ' || r.id || ': protocol digest is"
	 " not frozen or not its job''s' FROM result r LEFT JOIN job j ON j.id = r.job WHERE"
	 " r.protocol_digest IS NOT j.protocol_digest OR r.protocol_digest NOT IN"
	 " (SELECT digest FROM frozen_protocol) OR r.protocol_digest IS NULL"},
	{"no_box", "result", "SELECT id, 'result ' || id || ': no registered box' FROM result"
	 " WHERE box_fingerprint IS NULL OR box_fingerprint NOT IN (SELECT fingerprint FROM box)"},
	{"baseline_elsewhere", "result", "SELECT r.id, 'result ' || r.id || ': baseline from job '"
	 " || quote(r.baseline_job) || ' or box not its own job''s' FROM result r LEFT JOIN job j"
	 " ON j.id = r.job WHERE r.baseline_job IS NOT r.job OR r.box_fingerprint IS NOT"
	 " j.box_fingerprint"},
	{"paired_seeds", "result", "SELECT r.id, 'result ' || r.id || ': n_seeds ' || r.n_seeds ||"
	 " ' but ' || (SELECT count(*) FROM seed_result WHERE job = r.job) || ' paired seeds'"
	 " FROM result r WHERE r.n_seeds IS NOT (SELECT count(*) FROM seed_result WHERE job = r.job)"},
	{"paired_seeds", "result", "SELECT r.id, 'result ' || r.id || ': ' || r.n_seeds ||"
	 " ' paired seeds, fewer than the protocol''s ' || json_extract(p.canonical,"
	 " '$.stats.min_paired_seeds') FROM result r JOIN frozen_protocol p ON p.digest ="
	 " r.protocol_digest WHERE r.n_seeds < json_extract(p.canonical, '$.stats.min_paired_seeds')"},
	{"not_derived", "result", "SELECT r.id, 'result ' || r.id || ': speedup ' || r.speedup ||"
	 " ' is not the geometric mean of its per-seed ratios' FROM result r WHERE"
	 " abs(ln(r.speedup) - (SELECT avg(ln(ratio)) FROM seed_result WHERE job = r.job)) > 1e-9"},
	{"cv_over_cap", "result", "SELECT r.id, 'result ' || r.id || ': cv ' || r.cv ||"
	 " ' over the protocol''s cap ' || json_extract(p.canonical, '$.stats.cv_cap')"
	 " FROM result r JOIN frozen_protocol p ON p.digest = r.protocol_digest"
	 " WHERE r.cv > json_extract(p.canonical, '$.stats.cv_cap')"},
	{"anomaly_not_quarantined", "result", "SELECT r.id, 'result ' || r.id || ': speedup ' ||"
	 " r.speedup || ' at or over the anomaly factor is ' || r.status FROM result r"
	 " JOIN frozen_protocol p ON p.digest = r.protocol_digest WHERE r.speedup >="
	 " json_extract(p.canonical, '$.gates.anomaly_breaker.factor') AND r.status IS NOT"
	 " 'quarantined'"},
	{"bad_time", "result", "SELECT id, 'result ' || id || ': speedup, interval or cv is not"
	 " finite and positive' FROM result WHERE NOT (speedup > 0 AND speedup <="
	 " 1.7976931348623157e308 AND ci_low > 0 AND ci_high <= 1.7976931348623157e308 AND"
	 " cv >= 0 AND cv <= 1.7976931348623157e308)"},
	{"malformed", "result", "SELECT id, 'result ' || id || ': status ' || quote(status)"
	 " FROM result WHERE status IS NULL OR status NOT IN ('admitted', 'quarantined')"},
	{"review", "review", "SELECT v.id, 'review ' || v.id || ' of result ' || v.result ||"
	 " ': the result is missing or not quarantined' FROM review v LEFT JOIN result r"
	 " ON r.id = v.result WHERE r.status IS NOT 'quarantined'"},
	{"unfrozen_protocol", "run", "SELECT 0, 'run ' || id || ': protocol digest is not frozen'"
	 " FROM run WHERE protocol_digest NOT IN (SELECT digest FROM frozen_protocol)"},
	{"no_box", "run", "SELECT 0, 'run ' || id || ': no registered box' FROM run"
	 " WHERE box_fingerprint IS NULL OR box_fingerprint NOT IN (SELECT fingerprint FROM box)"},
	{"malformed", "iteration", "SELECT i.k, 'iteration ' || i.k || ' of run ' || i.run ||"
	 " ': its run is missing' FROM iteration i LEFT JOIN run r ON r.id = i.run"
	 " WHERE r.id IS NULL"},
	{"malformed", "iteration", "SELECT i.k, 'iteration ' || i.k || ' of run ' || i.run ||"
	 " ': beyond the run''s ' || r.iterations || ' planned iterations' FROM iteration i"
	 " JOIN run r ON r.id = i.run WHERE i.k >= r.iterations"},
	{"malformed", "iteration", "SELECT i.k, 'iteration ' || i.k || ' of run ' || i.run ||"
	 " ': iterations are not numbered 0, 1, ... without gaps' FROM iteration i"
	 " WHERE i.k >= (SELECT count(*) FROM iteration j WHERE j.run = i.run)"},
	{"malformed", "iteration", "SELECT i.k, 'iteration ' || i.k || ' of run ' || i.run ||"
	 " ': its result is not of its job and protocol, or has another speedup'"
	 " FROM iteration i JOIN run r ON r.id = i.run WHERE i.result IS NOT NULL AND NOT EXISTS"
	 " (SELECT 1 FROM result x JOIN job j ON j.id = x.job WHERE x.id = i.result"
	 " AND j.uuid IS i.job_uuid AND x.protocol_digest IS r.protocol_digest"
	 " AND x.speedup IS i.speedup AND x.ci_low IS i.ci_low AND x.ci_high IS i.ci_high)"},
	/* The box: the run's own, or (from schema v4) one a resume allowed. */
	{"malformed", "iteration", "SELECT i.k, 'iteration ' || i.k || ' of run ' || i.run ||"
	 " ': its result is on box ' || substr(x.box_fingerprint, 1, 12) || ', which its run was"
	 " neither started on nor resumed on with --allow-other-box' FROM iteration i"
	 " JOIN run r ON r.id = i.run JOIN result x ON x.id = i.result"
	 " WHERE x.box_fingerprint IS NOT r.box_fingerprint"
	 " AND ((SELECT user_version FROM pragma_user_version) < 4"
	 " OR NOT " ATBI_ALLOWED_BOX("i.run", "x.box_fingerprint") ")"},
	/* PROTO: loop.usable_iteration */
	{"malformed", "iteration", "SELECT i.k, 'iteration ' || i.k || ' of run ' || i.run ||"
	 " ': counted usable without an admitted result' FROM iteration i"
	 " WHERE i.usable = 1 AND NOT EXISTS (SELECT 1 FROM result x WHERE x.id = i.result"
	 " AND x.status = 'admitted')"},
	{"no_box", "box_capability", "SELECT id, 'capability ' || kind || ': no registered box'"
	 " FROM box_capability WHERE fingerprint NOT IN (SELECT fingerprint FROM box)"},
	{"audit_chain", "audit", "SELECT a.seq, 'audit entry ' || a.seq || ': prev_hash does not"
	 " link to entry ' || (a.seq - 1) FROM audit a LEFT JOIN audit b ON b.seq = a.seq - 1"
	 " WHERE a.prev_hash IS NOT coalesce(b.hash, '" ATBI_GENESIS "')"},
};

static int has_table(struct atb_store *s, const char *name)
{
	sqlite3_stmt *q = NULL;
	int yes = 0;

	if (sqlite3_prepare_v2(s->db, "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?",
			       -1, &q, NULL) == SQLITE_OK) {
		sqlite3_bind_text(q, 1, name, -1, SQLITE_STATIC);
		yes = sqlite3_step(q) == SQLITE_ROW;
	}
	sqlite3_finalize(q);
	return yes;
}

static enum atb_status check_schema(struct atb_store *s, struct findings *f,
				    struct atb_error *err)
{
	sqlite3 *ref = NULL;
	sqlite3_stmt *q = NULL, *mine = NULL;
	int rc;

	rc = sqlite3_open_v2(":memory:", &ref, SQLITE_OPEN_READWRITE, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(ref, atbi_store_schema_sql, NULL, NULL, NULL);
	/* A v2 or v3 store opened read-only is checked against its own schema (it
	   migrates on a write). */
	if (rc == SQLITE_OK && s->schema >= 3)
		rc = sqlite3_exec(ref, atbi_store_schema_v3_sql, NULL, NULL, NULL);
	if (rc == SQLITE_OK && s->schema >= 4)
		rc = sqlite3_exec(ref, atbi_store_schema_v4_sql, NULL, NULL, NULL);
	/* The model-call audit's tables (src/llm/record.c) are created on a
	   store's first model call: with them, the reference has them too, so a
	   dropped or altered llm trigger is found as the store's own are. */
	if (rc == SQLITE_OK && has_table(s, "llm_call"))
		rc = sqlite3_exec(ref, atbi_llm_schema_sql, NULL, NULL, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(ref, "SELECT type, name, sql FROM sqlite_schema"
					" WHERE sql IS NOT NULL ORDER BY name", -1, &q, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(s->db, "SELECT sql FROM sqlite_schema WHERE type = ?"
					" AND name = ?", -1, &mine, NULL);
	if (rc != SQLITE_OK) {
		sqlite3_finalize(q);
		sqlite3_close(ref);
		return atb_error_set(err, ATB_ERR_STORE, "cannot build the reference schema");
	}
	while (sqlite3_step(q) == SQLITE_ROW) {
		const char *type = (const char *)sqlite3_column_text(q, 0);
		const char *name = (const char *)sqlite3_column_text(q, 1);
		const char *sql = (const char *)sqlite3_column_text(q, 2);

		sqlite3_reset(mine);
		sqlite3_bind_text(mine, 1, type, -1, SQLITE_TRANSIENT);
		sqlite3_bind_text(mine, 2, name, -1, SQLITE_TRANSIENT);
		if (sqlite3_step(mine) != SQLITE_ROW)
			add(f, "schema", "", 0, "%s '%s' is missing (dropped)", type, name);
		else if (strcmp((const char *)sqlite3_column_text(mine, 0), sql))
			add(f, "schema", "", 0, "%s '%s' differs from schema v%d (altered)",
			    type, name, s->schema);
	}
	sqlite3_finalize(q);
	sqlite3_finalize(mine);
	/* Objects the schema does not have (a trigger that rewrites rows, say). */
	q = NULL;
	rc = sqlite3_prepare_v2(s->db, "SELECT type, name FROM sqlite_schema WHERE sql IS NOT NULL"
				" ORDER BY name", -1, &q, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(ref, "SELECT 1 FROM sqlite_schema WHERE type = ? AND name = ?",
					-1, &mine, NULL);
	while (rc == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW) {
		sqlite3_reset(mine);
		sqlite3_bind_text(mine, 1, (const char *)sqlite3_column_text(q, 0), -1, SQLITE_TRANSIENT);
		sqlite3_bind_text(mine, 2, (const char *)sqlite3_column_text(q, 1), -1, SQLITE_TRANSIENT);
		if (sqlite3_step(mine) != SQLITE_ROW)
			add(f, "schema", "", 0, "%s '%s' is not part of schema v%d (added)",
			    (const char *)sqlite3_column_text(q, 0),
			    (const char *)sqlite3_column_text(q, 1), s->schema);
	}
	sqlite3_finalize(q);
	sqlite3_finalize(mine);
	sqlite3_close(ref);
	return ATB_OK;
}

/* ---- re-deriving every result from its samples (issue 12) ---- */

static int differs(double a, double b)
{
	return !(fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b)));
}

/* One arm's samples of one job, in key order (seed, trial). */
struct arm_rows {
	double *v;
	int64_t *seed;
	size_t n;
};

static enum atb_status load_arm(struct atb_store *s, int64_t job, const char *arm,
				struct arm_rows *a, struct atb_error *err)
{
	sqlite3_stmt *q = NULL;
	size_t cap = 0;
	int rc;

	memset(a, 0, sizeof(*a));
	rc = sqlite3_prepare_v2(s->db, "SELECT seed, value FROM sample WHERE job = ? AND arm = ?"
				" ORDER BY seed, trial", -1, &q, NULL);
	if (rc != SQLITE_OK)
		return atbi_store_sqlerr(s, rc, "read samples", err);
	sqlite3_bind_int64(q, 1, job);
	sqlite3_bind_text(q, 2, arm, -1, SQLITE_STATIC);
	while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
		if (a->n == cap) {
			size_t nc = cap ? cap * 2 : 256;
			double *nv = atb_realloc(a->v, nc * sizeof(*nv));
			int64_t *ns;

			if (nv)
				a->v = nv;
			ns = nv ? atb_realloc(a->seed, nc * sizeof(*ns)) : NULL;
			if (!ns) {
				sqlite3_finalize(q);
				return atb_error_set(err, ATB_ERR_NOMEM, "cannot check: out of memory");
			}
			a->seed = ns;
			cap = nc;
		}
		a->seed[a->n] = sqlite3_column_int64(q, 0);
		a->v[a->n++] = sqlite3_column_double(q, 1);
	}
	sqlite3_finalize(q);
	if (rc != SQLITE_DONE)
		return atbi_store_sqlerr(s, rc, "read samples", err);
	return ATB_OK;
}

/* The rows of arm a that belong to seed (a is sorted by seed). */
static void seed_span(const struct arm_rows *a, int64_t seed, const double **v, size_t *n)
{
	size_t i = 0, j;

	while (i < a->n && a->seed[i] < seed)
		i++;
	for (j = i; j < a->n && a->seed[j] == seed; j++)
		;
	*v = a->v + i;
	*n = j - i;
}

struct result_facts {
	int64_t id, job;
	int engine;
	double speedup, ci_low, ci_high, cv;
	json_t *stats;         /* the row's stats object */
	json_t *proto_stats;   /* the protocol's stats section */
};

/*
 * Recompute one result with stats/ from its job's baseline and candidate
 * samples and compare every stored number: per-seed medians and ratios,
 * the speedup, the cv, and the bootstrap interval when the stats name its
 * seed (the measurement's seed order, from stats.seeds, is the resampling
 * order; without stats.bootstrap_seed the interval is not re-derivable).
 */
static enum atb_status rederive(struct atb_store *s, const struct result_facts *r,
				struct findings *f, struct atb_error *err)
{
	struct arm_rows base, cand;
	struct atb_paired_seed *ps = NULL;
	struct atb_paired_input in;
	struct atb_paired_result out;
	struct atb_error serr;
	sqlite3_stmt *q = NULL;
	json_t *order = json_object_get(r->stats, "seeds");
	json_t *bseed = json_object_get(r->stats, "bootstrap_seed");
	int64_t *seeds = NULL;
	size_t n = 0, cap = 0, i, k;
	enum atb_status st;
	int rc, with_ci = json_is_integer(bseed);

	memset(&out, 0, sizeof(out));
	st = load_arm(s, r->job, "baseline", &base, err);
	if (st == ATB_OK)
		st = load_arm(s, r->job, "candidate", &cand, err);
	if (st)
		goto out;
	rc = sqlite3_prepare_v2(s->db, "SELECT seed FROM seed_result WHERE job = ? ORDER BY seed",
				-1, &q, NULL);
	if (rc != SQLITE_OK) {
		st = atbi_store_sqlerr(s, rc, "read seed results", err);
		goto out;
	}
	sqlite3_bind_int64(q, 1, r->job);
	while (sqlite3_step(q) == SQLITE_ROW) {
		if (n == cap) {
			int64_t *ns = atb_realloc(seeds, (cap ? cap * 2 : 16) * sizeof(*seeds));

			if (!ns) {
				st = atb_error_set(err, ATB_ERR_NOMEM, "cannot check: out of memory");
				goto out;
			}
			seeds = ns;
			cap = cap ? cap * 2 : 16;
		}
		seeds[n++] = sqlite3_column_int64(q, 0);
	}
	sqlite3_finalize(q);
	q = NULL;
	if (n < 2)
		goto out;  /* paired_seeds reports it; stats/ needs two seeds */
	/* The measurement's seed order when the stats give it and it is these seeds. */
	if (json_is_array(order) && json_array_size(order) == n) {
		int64_t *o = atb_malloc(n * sizeof(*o));

		if (!o) {
			st = atb_error_set(err, ATB_ERR_NOMEM, "cannot check: out of memory");
			goto out;
		}
		for (i = 0; i < n; i++) {
			o[i] = json_integer_value(json_array_get(order, i));
			for (k = 0; k < n && seeds[k] != o[i]; k++)
				;
			if (k == n)
				break;
		}
		if (i == n)
			memcpy(seeds, o, n * sizeof(*o));
		atb_free(o);
	}
	ps = atb_calloc(n, sizeof(*ps));
	if (!ps) {
		st = atb_error_set(err, ATB_ERR_NOMEM, "cannot check: out of memory");
		goto out;
	}
	for (i = 0; i < n; i++) {
		ps[i].seed = (uint64_t)seeds[i];
		seed_span(&base, seeds[i], &ps[i].baseline, &ps[i].nbaseline);
		seed_span(&cand, seeds[i], &ps[i].candidate, &ps[i].ncandidate);
	}
	memset(&in, 0, sizeof(in));
	in.seeds = ps;
	in.nseeds = n;
	in.ci_level = json_number_value(json_object_get(r->stats, "ci_level"));
	if (!(in.ci_level > 0 && in.ci_level < 1))
		in.ci_level = json_number_value(json_object_get(r->proto_stats, "ci_level"));
	if (!(in.ci_level > 0 && in.ci_level < 1))
		in.ci_level = 0.95;
	in.bootstrap_resamples = with_ci ? (int)json_integer_value(json_object_get(r->stats,
									   "bootstrap_resamples"))
					 : 1;
	if (in.bootstrap_resamples < 1)
		in.bootstrap_resamples = (int)json_integer_value(json_object_get(r->proto_stats,
									 "bootstrap_resamples"));
	if (in.bootstrap_resamples < 1)
		in.bootstrap_resamples = 1;
	in.significance_alpha = 0.05;  /* the verdict is not stored as a column */
	in.cv_cap = 1;
	in.bootstrap_seed = with_ci ? (uint64_t)json_integer_value(bseed) : 0;
	in.higher_is_better = r->engine;
	/*
	 * PROTO: stats.resolution_rel: the protocol's, never the row's claim (a
	 * result that says 0 under version 10 claims a narrower interval than
	 * its protocol gives; absent before version 10).
	 */
	in.resolution_rel = json_number_value(json_object_get(r->proto_stats, "resolution_rel"));
	if (!(in.resolution_rel >= 0 && in.resolution_rel < 1))
		in.resolution_rel = 0;
	in.cv_of_ratio = json_is_string(json_object_get(r->proto_stats, "cv_of")) &&
			 !strcmp(json_string_value(json_object_get(r->proto_stats, "cv_of")),
				 "per_seed_ratio");
	atb_error_clear(&serr);
	st = atb_stats_paired(&in, &out, &serr);
	if (st == ATB_ERR_NOMEM) {
		if (err)
			*err = serr;
		goto out;
	}
	if (st) {
		add(f, "not_derived", "result", r->id, "atb-rule:not_derived: result %" PRId64
		    ": its samples cannot be re-derived: %s", r->id, serr.msg);
		st = ATB_OK;
		goto out;
	}
	{
		/* Each stored seed result against the one derived for its seed. */
		rc = sqlite3_prepare_v2(s->db, "SELECT seed, baseline_median, candidate_median,"
					" ratio FROM seed_result WHERE job = ?", -1, &q, NULL);
		if (rc != SQLITE_OK) {
			st = atbi_store_sqlerr(s, rc, "read seed results", err);
			goto out;
		}
		sqlite3_bind_int64(q, 1, r->job);
		while (sqlite3_step(q) == SQLITE_ROW) {
			int64_t sd = sqlite3_column_int64(q, 0);
			double b = sqlite3_column_double(q, 1), c = sqlite3_column_double(q, 2);
			double x = sqlite3_column_double(q, 3);

			for (k = 0; k < n && (int64_t)out.seeds[k].seed != sd; k++)
				;
			if (k == n)
				continue;
			if (differs(b, out.seeds[k].baseline_median))
				add(f, "not_derived", "result", r->id, "atb-rule:not_derived: result %"
				    PRId64 " seed %" PRId64 ": baseline median %.17g is not %.17g, the"
				    " median of its samples", r->id, sd, b, out.seeds[k].baseline_median);
			if (differs(c, out.seeds[k].candidate_median))
				add(f, "not_derived", "result", r->id, "atb-rule:not_derived: result %"
				    PRId64 " seed %" PRId64 ": candidate median %.17g is not %.17g, the"
				    " median of its samples", r->id, sd, c, out.seeds[k].candidate_median);
			if (differs(x, out.seeds[k].ratio))
				add(f, "not_derived", "result", r->id, "atb-rule:not_derived: result %"
				    PRId64 " seed %" PRId64 ": ratio %.17g is not %.17g, derived from its"
				    " samples", r->id, sd, x, out.seeds[k].ratio);
		}
		sqlite3_finalize(q);
		q = NULL;
	}
	if (differs(r->speedup, out.geomean_ratio))
		add(f, "not_derived", "result", r->id, "atb-rule:not_derived: result %" PRId64
		    ": speedup %.17g is not %.17g, derived from its samples", r->id, r->speedup,
		    out.geomean_ratio);
	if (!(fabs(r->cv - out.cv) <= 1e-9))
		add(f, "not_derived", "result", r->id, "atb-rule:not_derived: result %" PRId64
		    ": cv %.17g is not %.17g, derived from its samples", r->id, r->cv, out.cv);
	if (with_ci && (differs(r->ci_low, out.ci_lo) || differs(r->ci_high, out.ci_hi)))
		add(f, "not_derived", "result", r->id, "atb-rule:not_derived: result %" PRId64
		    ": interval [%.17g, %.17g] is not [%.17g, %.17g], the bootstrap of its samples"
		    " (seed %" PRIu64 ")", r->id, r->ci_low, r->ci_high, out.ci_lo, out.ci_hi,
		    in.bootstrap_seed);
out:
	sqlite3_finalize(q);
	atb_stats_paired_release(&out);
	atb_free(base.v);
	atb_free(base.seed);
	atb_free(cand.v);
	atb_free(cand.seed);
	atb_free(ps);
	atb_free(seeds);
	return st;
}

static enum atb_status rederive_all(struct atb_store *s, struct findings *f,
				    struct atb_error *err)
{
	sqlite3_stmt *q = NULL;
	enum atb_status st = ATB_OK;
	int rc;

	atb_alloc_install_json();
	rc = sqlite3_prepare_v2(s->db, "SELECT r.id, r.job, r.kind, r.speedup, r.ci_low, r.ci_high,"
				" r.cv, r.stats, json_extract(p.canonical, '$.stats') FROM result r"
				" LEFT JOIN frozen_protocol p ON p.digest = r.protocol_digest"
				" ORDER BY r.id", -1, &q, NULL);
	if (rc != SQLITE_OK)
		return atbi_store_sqlerr(s, rc, "read results", err);
	while (st == ATB_OK && (rc = sqlite3_step(q)) == SQLITE_ROW) {
		struct result_facts r;
		const char *stats = (const char *)sqlite3_column_text(q, 7);
		const char *ps = (const char *)sqlite3_column_text(q, 8);

		memset(&r, 0, sizeof(r));
		r.id = sqlite3_column_int64(q, 0);
		r.job = sqlite3_column_int64(q, 1);
		r.engine = sqlite3_column_text(q, 2) &&
			   !strcmp((const char *)sqlite3_column_text(q, 2), "engine");
		r.speedup = sqlite3_column_double(q, 3);
		r.ci_low = sqlite3_column_double(q, 4);
		r.ci_high = sqlite3_column_double(q, 5);
		r.cv = sqlite3_column_double(q, 6);
		r.stats = stats ? json_loads(stats, 0, NULL) : NULL;
		r.proto_stats = ps ? json_loads(ps, 0, NULL) : NULL;
		st = rederive(s, &r, f, err);
		json_decref(r.stats);
		json_decref(r.proto_stats);
	}
	sqlite3_finalize(q);
	if (st == ATB_OK && rc != SQLITE_DONE && rc != SQLITE_ROW)
		st = atbi_store_sqlerr(s, rc, "read results", err);
	return st;
}

enum atb_status atb_store_check(struct atb_store *s, struct atb_store_finding **found,
				size_t *nkept, size_t *nfound, struct atb_error *err)
{
	struct findings f = {0};
	struct atb_audit_report rep;
	struct atb_error aerr;
	sqlite3_stmt *q = NULL;
	enum atb_status st;
	size_t i;
	int rc;

	*found = NULL;
	*nkept = *nfound = 0;
	rc = sqlite3_prepare_v2(s->db, "PRAGMA integrity_check", -1, &q, NULL);
	if (rc != SQLITE_OK)
		return atbi_store_sqlerr(s, rc, "check integrity", err);
	while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
		const char *t = (const char *)sqlite3_column_text(q, 0);

		if (t && strcmp(t, "ok"))
			add(&f, "integrity", "", 0, "%s", t);
	}
	sqlite3_finalize(q);
	if (rc != SQLITE_DONE) {
		st = atbi_store_sqlerr(s, rc, "check integrity", err);
		goto fail;
	}
	st = check_schema(s, &f, err);
	if (st)
		goto fail;

	/* Frozen protocol digests are the SHA-256 of their canonical form. */
	rc = sqlite3_prepare_v2(s->db, "SELECT version, digest, canonical FROM frozen_protocol",
				-1, &q, NULL);
	while (rc == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW) {
		const char *d = (const char *)sqlite3_column_text(q, 1);
		const char *c = (const char *)sqlite3_column_text(q, 2);
		char hex[65];

		if (!d || !c || atbi_sha256_hex(c, strlen(c), hex) || strcmp(hex, d))
			add(&f, "unfrozen_protocol", "frozen_protocol", sqlite3_column_int(q, 0),
			    "protocol version %d: digest is not the sha-256 of its canonical form",
			    sqlite3_column_int(q, 0));
	}
	sqlite3_finalize(q);

	for (i = 0; i < sizeof(queries) / sizeof(queries[0]); i++) {
		rc = sqlite3_prepare_v2(s->db, queries[i].sql, -1, &q, NULL);
		if (rc != SQLITE_OK) {
			st = atbi_store_sqlerr(s, rc, "check rules", err);
			goto fail;
		}
		while ((rc = sqlite3_step(q)) == SQLITE_ROW)
			add(&f, queries[i].rule, queries[i].table, sqlite3_column_int64(q, 0),
			    "atb-rule:%s: %s", queries[i].rule, (const char *)sqlite3_column_text(q, 1));
		sqlite3_finalize(q);
		if (rc != SQLITE_DONE) {
			st = atbi_store_sqlerr(s, rc, "check rules", err);
			goto fail;
		}
	}

	st = rederive_all(s, &f, err);
	if (st)
		goto fail;

	atb_error_clear(&aerr);
	st = atb_audit_verify(s, &rep, &aerr);
	if (st == ATB_ERR_AUDIT)
		add(&f, "audit", "audit", rep.bad_seq, "%s", aerr.msg);
	else if (st) {
		if (err)
			*err = aerr;
		goto fail;
	}
	if (f.nomem) {
		st = atb_error_set(err, ATB_ERR_NOMEM, "cannot check the store: out of memory");
		goto fail;
	}
	*found = f.v;
	*nkept = f.kept;
	*nfound = f.total;
	if (f.total)
		return atb_error_set(err, ATB_ERR_CHECK, "store '%s': %zu finding%s", s->path,
				     f.total, f.total == 1 ? "" : "s");
	return ATB_OK;
fail:
	atb_free(f.v);
	return st;
}
