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
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "atb/alloc.h"
#include "atb/audit.h"
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
	{"paired_seeds", "result", "SELECT r.id, 'result ' || r.id || ': speedup ' || r.speedup ||"
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
	 " ': its result is not of its job, protocol and box, or has another speedup'"
	 " FROM iteration i JOIN run r ON r.id = i.run WHERE i.result IS NOT NULL AND NOT EXISTS"
	 " (SELECT 1 FROM result x JOIN job j ON j.id = x.job WHERE x.id = i.result"
	 " AND j.uuid IS i.job_uuid AND x.protocol_digest IS r.protocol_digest"
	 " AND x.box_fingerprint IS r.box_fingerprint AND x.speedup IS i.speedup"
	 " AND x.ci_low IS i.ci_low AND x.ci_high IS i.ci_high)"},
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

static enum atb_status check_schema(struct atb_store *s, struct findings *f,
				    struct atb_error *err)
{
	sqlite3 *ref = NULL;
	sqlite3_stmt *q = NULL, *mine = NULL;
	int rc;

	rc = sqlite3_open_v2(":memory:", &ref, SQLITE_OPEN_READWRITE, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(ref, atbi_store_schema_sql, NULL, NULL, NULL);
	/* A v2 store opened read-only is checked against v2 (it migrates on a write). */
	if (rc == SQLITE_OK && s->schema >= 3)
		rc = sqlite3_exec(ref, atbi_store_schema_v3_sql, NULL, NULL, NULL);
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
