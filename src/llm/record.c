/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The model-call audit in the store: the llm_call table (one row per call,
 * append-only, numbered in order within its run), the llm_halt table (a
 * run halted as an infrastructure defect, after which the schema refuses
 * its calls), the "llm.call" audit entry that carries each row's SHA-256,
 * the alarms over a run's calls, and reading a run back for replay.
 *
 * The tables live beside the store's own (src/store/schema.c) and are
 * created with IF NOT EXISTS when a store is made and before every write,
 * so a store made before them gains them on its first call.
 *
 * Does not: talk HTTP or parse replies (client.c).
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "atb/alloc.h"
#include "llm/llm_int.h"
#include "store/store_int.h"
#include "banned.h"

#define HEX64(c) "(length(" c ") = 64 AND " c " NOT GLOB '*[^0-9a-f]*')"
#define COUNT(c) "(" c " IS NULL OR (typeof(" c ") = 'integer' AND " c " >= 0))"

#define APPEND_ONLY(t)                                                              \
	"CREATE TRIGGER IF NOT EXISTS " t "_no_update BEFORE UPDATE ON " t " BEGIN " \
	"SELECT RAISE(ABORT, 'atb-rule:append_only: " t " rows are never updated'); " \
	"END;\n"                                                                    \
	"CREATE TRIGGER IF NOT EXISTS " t "_no_delete BEFORE DELETE ON " t " BEGIN " \
	"SELECT RAISE(ABORT, 'atb-rule:append_only: " t " rows are never deleted'); " \
	"END;\n"

const char atbi_llm_schema_sql[] =
	/* ---- model calls: PROTO: llm (every call stored and audited) ---- */
	"CREATE TABLE IF NOT EXISTS llm_call (\n"
	"  id INTEGER PRIMARY KEY,\n"
	"  run TEXT NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: a call's run is 1-64 of [0-9a-zA-Z-]\"\n"
	"    CHECK (length(run) BETWEEN 1 AND 64 AND run NOT GLOB '*[^0-9a-zA-Z-]*'),\n"
	"  n INTEGER NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: a call number is a non-negative integer\"\n"
	"    CHECK (typeof(n) = 'integer' AND n >= 0),\n"
	"  transport TEXT NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: a call's transport is http or replay\"\n"
	"    CHECK (transport IN ('http', 'replay')),\n"
	"  request_hash TEXT NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: a request hash is 64 lowercase hex\"\n"
	"    CHECK " HEX64("request_hash") ",\n"
	"  request TEXT NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: a request is a json object\"\n"
	"    CHECK (json_valid(request) AND json_type(request) = 'object'),\n"
	"  prompt TEXT NOT NULL,\n"
	"  model TEXT NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: a call names its model\"\n"
	"    CHECK (length(model) BETWEEN 1 AND 255),\n"
	"  params TEXT NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: call parameters are a json object\"\n"
	"    CHECK (json_valid(params) AND json_type(params) = 'object'),\n"
	"  http_status INTEGER,\n"
	"  response TEXT,\n"
	"  content TEXT,\n"
	"  finish_reason TEXT,\n"
	"  prompt_tokens INTEGER\n"
	"    CONSTRAINT \"atb-rule:malformed: a token count is a non-negative integer\"\n"
	"    CHECK " COUNT("prompt_tokens") ",\n"
	"  completion_tokens INTEGER\n"
	"    CONSTRAINT \"atb-rule:malformed: a token count is a non-negative integer\"\n"
	"    CHECK " COUNT("completion_tokens") ",\n"
	"  reasoning_tokens INTEGER\n"
	"    CONSTRAINT \"atb-rule:malformed: a token count is a non-negative integer\"\n"
	"    CHECK " COUNT("reasoning_tokens") ",\n"
	"  outcome TEXT NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: an outcome is ok, truncated, empty, unparsable or failed\"\n"
	"    CHECK (outcome IN ('ok', 'truncated', 'empty', 'unparsable', 'failed')),\n"
	"  attempts INTEGER NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: attempts is a non-negative integer\"\n"
	"    CHECK (typeof(attempts) = 'integer' AND attempts >= 0),\n"
	"  latency_s REAL NOT NULL\n"
	"    CONSTRAINT \"atb-rule:bad_time: a call's latency is finite and not negative\"\n"
	"    CHECK (typeof(latency_s) IN ('real', 'integer') AND latency_s >= 0\n"
	"           AND latency_s <= 1.7976931348623157e308),\n"
	"  cost_usd REAL\n"
	"    CONSTRAINT \"atb-rule:malformed: a cost is finite and not negative when known\"\n"
	"    CHECK (cost_usd IS NULL OR (typeof(cost_usd) IN ('real', 'integer') AND cost_usd >= 0\n"
	"           AND cost_usd <= 1.7976931348623157e308)),\n"
	"  error TEXT,\n"
	"  row_hash TEXT NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: a row hash is 64 lowercase hex\"\n"
	"    CHECK " HEX64("row_hash") ",\n"
	"  created TEXT NOT NULL,\n"
	/* PROTO: llm.truncation_alarm_rate -- a truncated call cannot pass for a good one */
	"  CONSTRAINT \"atb-rule:malformed: a call is truncated exactly when its finish_reason is length\"\n"
	"    CHECK ((outcome = 'truncated') = (finish_reason IS 'length')),\n"
	"  CONSTRAINT \"atb-rule:malformed: a call failed exactly when it has an error\"\n"
	"    CHECK ((outcome = 'failed') = (error IS NOT NULL)),\n"
	"  CONSTRAINT \"atb-rule:malformed: an ok or unparsable call has content\"\n"
	"    CHECK (outcome NOT IN ('ok', 'unparsable') OR length(content) >= 1),\n"
	"  CONSTRAINT \"atb-rule:malformed: an empty call has no content\"\n"
	"    CHECK (outcome IS NOT 'empty' OR content IS NULL OR trim(content, ' ' || char(9, 10, 13)) = '')\n"
	");\n"
	"CREATE TABLE IF NOT EXISTS llm_halt (\n"
	"  run TEXT PRIMARY KEY,\n"
	"  reason TEXT NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: a halt reason is truncation, empty, unparsable or failed\"\n"
	"    CHECK (reason IN ('truncation', 'empty', 'unparsable', 'failed')),\n"
	"  calls INTEGER NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: a halt counts the run's calls\"\n"
	"    CHECK (typeof(calls) = 'integer' AND calls >= 1),\n"
	"  evidence TEXT NOT NULL\n"
	"    CONSTRAINT \"atb-rule:malformed: halt evidence is a json object\"\n"
	"    CHECK (json_valid(evidence) AND json_type(evidence) = 'object'),\n"
	"  created TEXT NOT NULL\n"
	");\n"
	"CREATE TRIGGER IF NOT EXISTS llm_call_insert BEFORE INSERT ON llm_call BEGIN\n"
	"  SELECT CASE\n"
	"    WHEN EXISTS (SELECT 1 FROM llm_call WHERE id = NEW.id)\n"
	"      THEN RAISE(ABORT, 'atb-rule:append_only: a call is never replaced')\n"
	"    WHEN NEW.n IS NOT (SELECT count(*) FROM llm_call WHERE run = NEW.run)\n"
	"      THEN RAISE(ABORT, 'atb-rule:malformed: a run''s calls are recorded in order, each once')\n"
	"    WHEN EXISTS (SELECT 1 FROM llm_halt WHERE run = NEW.run)\n"
	"      THEN RAISE(ABORT, 'atb-rule:infrastructure_defect: the run halted as an infrastructure defect; it takes no more calls')\n"
	"  END;\n"
	"END;\n"
	"CREATE TRIGGER IF NOT EXISTS llm_halt_insert BEFORE INSERT ON llm_halt BEGIN\n"
	"  SELECT CASE\n"
	"    WHEN EXISTS (SELECT 1 FROM llm_halt WHERE run = NEW.run)\n"
	"      THEN RAISE(ABORT, 'atb-rule:append_only: a halt is never replaced')\n"
	"    WHEN NEW.calls IS NOT (SELECT count(*) FROM llm_call WHERE run = NEW.run)\n"
	"      THEN RAISE(ABORT, 'atb-rule:malformed: a halt counts exactly the run''s calls')\n"
	"  END;\n"
	"END;\n"
	APPEND_ONLY("llm_call")
	APPEND_ONLY("llm_halt")
	"CREATE INDEX IF NOT EXISTS llm_call_run ON llm_call(run, n);\n"
	"CREATE INDEX IF NOT EXISTS llm_call_hash ON llm_call(request_hash);\n";

int atbi_llm_valid_run(const char *run)
{
	size_t n;

	if (!run)
		return 0;
	for (n = 0; run[n]; n++)
		if (!((run[n] >= '0' && run[n] <= '9') || (run[n] >= 'a' && run[n] <= 'z') ||
		      (run[n] >= 'A' && run[n] <= 'Z') || run[n] == '-'))
			return 0;
	return n >= 1 && n <= 64;
}

char *atbi_llm_redact(const char *s, const char *secret)
{
	static const char mark[] = "[redacted]";
	size_t sl, count = 0, n;
	const char *p, *hit;
	char *out, *w;

	if (!s)
		return NULL;
	if (!secret || (sl = strlen(secret)) < 8)
		return atb_strdup(s);
	for (p = strstr(s, secret); p; p = strstr(p + sl, secret))
		count++;
	n = strlen(s) - count * sl + count * (sizeof(mark) - 1);
	out = atb_malloc(n + 1);
	if (!out)
		return NULL;
	w = out;
	for (p = s; (hit = strstr(p, secret)); p = hit + sl) {
		memcpy(w, p, (size_t)(hit - p));
		w += hit - p;
		memcpy(w, mark, sizeof(mark) - 1);
		w += sizeof(mark) - 1;
	}
	memcpy(w, p, strlen(p) + 1);
	return out;
}

static enum atb_status ensure_schema(struct atb_store *s, struct atb_error *err)
{
	int rc = sqlite3_exec(s->db, atbi_llm_schema_sql, NULL, NULL, NULL);

	return rc == SQLITE_OK ? ATB_OK : atbi_store_sqlerr(s, rc, "create the llm tables", err);
}

/* ---- the row's hash: canonical JSON of every column but id and row_hash ---- */

static json_t *jstr(const char *v)
{
	return v ? json_string(v) : json_null();
}

static json_t *jcount(int64_t v)
{
	return v >= 0 ? json_integer((json_int_t)v) : json_null();
}

/* Columns as the statement below lists them. */
#define ROW_COLUMNS                                                                    \
	"run, n, transport, request_hash, request, prompt, model, params, http_status,"  \
	" response, content, finish_reason, prompt_tokens, completion_tokens,"           \
	" reasoning_tokens, outcome, attempts, latency_s, cost_usd, error, created"
#define NCOLS 21

static const char *const col_names[NCOLS] = {
	"run", "n", "transport", "request_hash", "request", "prompt", "model", "params",
	"http_status", "response", "content", "finish_reason", "prompt_tokens",
	"completion_tokens", "reasoning_tokens", "outcome", "attempts", "latency_s",
	"cost_usd", "error", "created",
};

/* Hash a row given as JSON values in column order (taken). */
static enum atb_status hash_row(json_t *vals[NCOLS], char out[65], struct atb_error *err)
{
	json_t *o = json_object();
	char *canon = NULL;
	enum atb_status st = ATB_OK;
	size_t i;

	for (i = 0; i < NCOLS; i++) {
		if (!o || !vals[i] || json_object_set_new(o, col_names[i], vals[i])) {
			if (!o || !vals[i])
				for (; i < NCOLS; i++)
					json_decref(vals[i]);
			json_decref(o);
			return atb_error_set(err, ATB_ERR_NOMEM, "cannot hash a call: out of memory");
		}
	}
	st = atbi_json_canonical(o, &canon, err);
	json_decref(o);
	if (st)
		return st;
	st = atbi_sha256_hex(canon, strlen(canon), out);
	atb_free(canon);
	return st ? atb_error_set(err, st, "cannot hash a call") : ATB_OK;
}

/* Hash a stored row from a statement selecting ROW_COLUMNS from column 0. */
static enum atb_status hash_stored(sqlite3_stmt *q, int first, char out[65],
				   struct atb_error *err)
{
	json_t *vals[NCOLS];
	int i;

	for (i = 0; i < NCOLS; i++) {
		int c = first + i;

		switch (sqlite3_column_type(q, c)) {
		case SQLITE_NULL:
			vals[i] = json_null();
			break;
		case SQLITE_INTEGER:
			vals[i] = json_integer((json_int_t)sqlite3_column_int64(q, c));
			break;
		case SQLITE_FLOAT:
			vals[i] = json_real(sqlite3_column_double(q, c));
			break;
		default:
			vals[i] = json_stringn((const char *)sqlite3_column_text(q, c),
					       (size_t)sqlite3_column_bytes(q, c));
			break;
		}
	}
	return hash_row(vals, out, err);
}

/* ---- alarms: PROTO: llm.truncation_alarm_rate, llm.alarms ---- */

struct thresholds {
	int min_calls;
	double truncation, empty, unparsable, failed;
};

static void thresholds_of(const struct atb_protocol *p, struct thresholds *t)
{
	t->truncation = p->llm.truncation_alarm_rate;
	if (p->llm.has_alarms) {
		t->min_calls = p->llm.alarm_min_calls;
		t->empty = p->llm.alarm_empty_rate;
		t->unparsable = p->llm.alarm_unparsable_rate;
		t->failed = p->llm.alarm_failed_rate;
	} else {
		/* versions 1-3: the documented defaults (docs/llm.md) */
		t->min_calls = 4;
		t->empty = 0.05;
		t->unparsable = 0.10;
		t->failed = 0.10;
	}
}

static enum atb_status run_stats(struct atb_store *s, const char *run,
				 struct atb_llm_run_stats *o, struct atb_error *err)
{
	sqlite3_stmt *q = NULL;
	int rc;

	memset(o, 0, sizeof(*o));
	rc = sqlite3_prepare_v2(s->db,
				"SELECT count(*), total(outcome = 'ok'), total(outcome = 'truncated'),"
				" total(outcome = 'empty'), total(outcome = 'unparsable'),"
				" total(outcome = 'failed'), total(prompt_tokens), total(completion_tokens),"
				" total(reasoning_tokens), total(cost_usd), total(latency_s),"
				" (SELECT reason FROM llm_halt WHERE run = ?1)"
				" FROM llm_call WHERE run = ?1", -1, &q, NULL);
	if (rc != SQLITE_OK)
		return atbi_store_sqlerr(s, rc, "read a run's calls", err);
	sqlite3_bind_text(q, 1, run, -1, SQLITE_STATIC);
	rc = sqlite3_step(q);
	if (rc == SQLITE_ROW) {
		o->calls = sqlite3_column_int64(q, 0);
		o->ok = (int64_t)sqlite3_column_double(q, 1);
		o->truncated = (int64_t)sqlite3_column_double(q, 2);
		o->empty = (int64_t)sqlite3_column_double(q, 3);
		o->unparsable = (int64_t)sqlite3_column_double(q, 4);
		o->failed = (int64_t)sqlite3_column_double(q, 5);
		o->prompt_tokens = (int64_t)sqlite3_column_double(q, 6);
		o->completion_tokens = (int64_t)sqlite3_column_double(q, 7);
		o->reasoning_tokens = (int64_t)sqlite3_column_double(q, 8);
		o->cost_usd = sqlite3_column_double(q, 9);
		o->latency_s = sqlite3_column_double(q, 10);
		if (sqlite3_column_type(q, 11) != SQLITE_NULL) {
			o->halted = 1;
			snprintf(o->halt_reason, sizeof(o->halt_reason), "%s",
				 (const char *)sqlite3_column_text(q, 11));
		}
		rc = SQLITE_OK;
	}
	sqlite3_finalize(q);
	return rc == SQLITE_OK ? ATB_OK : atbi_store_sqlerr(s, rc, "read a run's calls", err);
}

enum atb_status atb_llm_run_stats(struct atb_store *s, const char *run,
				  struct atb_llm_run_stats *out, struct atb_error *err)
{
	sqlite3_stmt *q = NULL;
	int have;

	memset(out, 0, sizeof(*out));
	if (!s || !atbi_llm_valid_run(run))
		return atb_error_set(err, ATB_ERR_USAGE, "run '%s' is not 1-64 of [0-9a-zA-Z-]",
				     run ? run : "");
	have = sqlite3_prepare_v2(s->db, "SELECT 1 FROM sqlite_schema WHERE name = 'llm_call'",
				  -1, &q, NULL) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW;
	sqlite3_finalize(q);
	if (!have)
		return ATB_OK;  /* a store that never saw a call */
	return run_stats(s, run, out, err);
}

enum atb_status atb_llm_run_model(struct atb_store *s, const char *run, char *model,
				  size_t size, struct atb_error *err)
{
	sqlite3_stmt *q = NULL;
	int rc, have;

	if (size)
		model[0] = '\0';
	if (!s || !atbi_llm_valid_run(run))
		return atb_error_set(err, ATB_ERR_USAGE, "run '%s' is not 1-64 of [0-9a-zA-Z-]",
				     run ? run : "");
	have = sqlite3_prepare_v2(s->db, "SELECT 1 FROM sqlite_schema WHERE name = 'llm_call'",
				  -1, &q, NULL) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW;
	sqlite3_finalize(q);
	q = NULL;
	if (!have)
		return atb_error_set(err, ATB_ERR_NOT_FOUND,
				     "run '%s' has no recorded model calls in store '%s'", run,
				     atb_store_path(s));
	rc = sqlite3_prepare_v2(s->db, "SELECT model FROM llm_call WHERE run = ? ORDER BY n LIMIT 1",
				-1, &q, NULL);
	if (rc != SQLITE_OK)
		return atbi_store_sqlerr(s, rc, "read a run's calls", err);
	sqlite3_bind_text(q, 1, run, -1, SQLITE_STATIC);
	rc = sqlite3_step(q);
	if (rc == SQLITE_ROW && (size_t)snprintf(model, size, "%s",
						 (const char *)sqlite3_column_text(q, 0)) >= size) {
		sqlite3_finalize(q);
		return atb_error_set(err, ATB_ERR_USAGE, "run '%s': its model name is too long", run);
	}
	sqlite3_finalize(q);
	if (rc == SQLITE_ROW)
		return ATB_OK;
	if (rc != SQLITE_DONE)
		return atbi_store_sqlerr(s, rc, "read a run's calls", err);
	return atb_error_set(err, ATB_ERR_NOT_FOUND,
			     "run '%s' has no recorded model calls in store '%s'", run,
			     atb_store_path(s));
}

/*
 * Which alarm, if any, the run's calls raise: the first of truncation,
 * empty, unparsable, failed whose share is over its rate, once the run has
 * min_calls calls.
 */
static const char *judge(const struct atb_llm_run_stats *st, const struct thresholds *t,
			 double *rate, double *limit)
{
	const struct {
		const char *name;
		int64_t count;
		double limit;
	} a[] = {
		{"truncation", st->truncated, t->truncation},
		{"empty", st->empty, t->empty},
		{"unparsable", st->unparsable, t->unparsable},
		{"failed", st->failed, t->failed},
	};
	size_t i;

	if (st->calls < t->min_calls || st->calls < 1)
		return NULL;
	for (i = 0; i < sizeof(a) / sizeof(a[0]); i++) {
		double r = (double)a[i].count / (double)st->calls;

		if (r > a[i].limit) {
			*rate = r;
			*limit = a[i].limit;
			return a[i].name;
		}
	}
	return NULL;
}

/* The evidence of an alarm: counts, rates, thresholds, and what the cut calls looked like. */
static json_t *evidence(struct atb_store *s, const char *run, const char *reason,
			const struct atb_llm_run_stats *st, const struct thresholds *t,
			const struct atb_protocol *p, double rate, double limit)
{
	sqlite3_stmt *q = NULL;
	json_t *e, *ids = json_array();
	int64_t cmin = -1, cmax = -1;
	const char *outcome = !strcmp(reason, "truncation") ? "truncated" : reason;
	char why[512];

	if (sqlite3_prepare_v2(s->db, "SELECT id, completion_tokens FROM llm_call"
			       " WHERE run = ? AND outcome = ? ORDER BY n", -1, &q, NULL) == SQLITE_OK) {
		sqlite3_bind_text(q, 1, run, -1, SQLITE_STATIC);
		sqlite3_bind_text(q, 2, outcome, -1, SQLITE_STATIC);
		while (sqlite3_step(q) == SQLITE_ROW) {
			if (json_array_size(ids) < 64)
				json_array_append_new(ids, json_integer(sqlite3_column_int64(q, 0)));
			if (sqlite3_column_type(q, 1) == SQLITE_INTEGER) {
				int64_t c = sqlite3_column_int64(q, 1);

				cmin = cmin < 0 || c < cmin ? c : cmin;
				cmax = c > cmax ? c : cmax;
			}
		}
	}
	sqlite3_finalize(q);
	if (!strcmp(reason, "truncation") && cmax >= 0 && cmax < p->llm.max_output_tokens)
		snprintf(why, sizeof(why),
			 "%lld of %lld calls ended on the length limit with at most %lld completion"
			 " tokens although max_tokens was %d: an output cap below the protocol's"
			 " (the server's or a proxy's) cut them, not the model",
			 (long long)st->truncated, (long long)st->calls, (long long)cmax,
			 p->llm.max_output_tokens);
	else
		snprintf(why, sizeof(why), "%lld of %lld calls were %s (%.1f%%, over the protocol's"
			 " %.1f%%): the run measures the infrastructure, not the model",
			 (long long)(rate * (double)st->calls + 0.5), (long long)st->calls, outcome,
			 100 * rate, 100 * limit);
	e = json_pack("{s:s, s:s, s:s, s:I, s:f, s:f, s:{s:I, s:I, s:I, s:I, s:I},"
		      " s:{s:f, s:f, s:f, s:f, s:i}, s:i, s:o, s:I, s:I, s:I, s:s, s:s}",
		      "run", run, "halt", "infrastructure_defect", "reason", reason,
		      "calls", (json_int_t)st->calls, "rate", rate, "threshold", limit,
		      "counts", "truncated", (json_int_t)st->truncated, "empty",
		      (json_int_t)st->empty, "unparsable", (json_int_t)st->unparsable, "failed",
		      (json_int_t)st->failed, "ok", (json_int_t)st->ok,
		      "thresholds", "truncation", t->truncation, "empty", t->empty, "unparsable",
		      t->unparsable, "failed", t->failed, "min_calls", t->min_calls,
		      "max_tokens", p->llm.max_output_tokens, "call_ids", ids,
		      "completion_tokens_min", (json_int_t)cmin,
		      "completion_tokens_max", (json_int_t)cmax,
		      "reasoning_tokens", (json_int_t)st->reasoning_tokens,
		      "protocol_digest", p->digest, "explanation", why);
	return e;
}

static enum atb_status insert_halt(struct atb_store *s, const char *run, const char *reason,
				   int64_t calls, json_t *ev, struct atb_error *err)
{
	sqlite3_stmt *q = NULL;
	char *text = NULL, when[40];
	enum atb_status st;
	int rc;

	st = atbi_json_canonical(ev, &text, err);
	if (st)
		return st;
	atbi_audit_time(when, sizeof(when));
	rc = sqlite3_prepare_v2(s->db, "INSERT INTO llm_halt (run, reason, calls, evidence, created)"
				" VALUES (?, ?, ?, ?, ?)", -1, &q, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_text(q, 1, run, -1, SQLITE_STATIC);
		sqlite3_bind_text(q, 2, reason, -1, SQLITE_STATIC);
		sqlite3_bind_int64(q, 3, calls);
		sqlite3_bind_text(q, 4, text, -1, SQLITE_STATIC);
		sqlite3_bind_text(q, 5, when, -1, SQLITE_STATIC);
		rc = sqlite3_step(q) == SQLITE_DONE ? SQLITE_OK : sqlite3_errcode(s->db);
	}
	sqlite3_finalize(q);
	atb_free(text);
	if (rc != SQLITE_OK)
		return atbi_store_sqlerr(s, rc, "store the run's halt", err);
	return atbi_audit_append(s, "llm.infrastructure_defect", ev, NULL, err);
}

/* ---- recording a call ---- */

enum atb_status atbi_llm_record(struct atb_store *s, const struct atb_protocol *p,
				const struct atbi_llm_row *row, const char *secret,
				int64_t *id, int64_t *n_out, char **alarm,
				struct atb_error *err)
{
	const struct atb_llm_result *r = row->r;
	char *text[6] = {NULL};
	const char *src[6];
	char when[40], rhash[65];
	sqlite3_stmt *q = NULL;
	json_t *vals[NCOLS], *payload = NULL, *ev = NULL;
	struct atb_llm_run_stats rs;
	struct thresholds t;
	enum atb_status st;
	int64_t n = 0;
	int rc, i;
	const char *reason;
	double rate = 0, limit = 0;

	*id = 0;
	*n_out = 0;
	*alarm = NULL;
	/* PROTO: audit.secrets -- the key is cut out of everything stored */
	src[0] = row->request;
	src[1] = row->prompt;
	src[2] = r->response;
	src[3] = r->content;
	src[4] = r->error[0] || r->outcome == ATB_LLM_FAILED ? r->error : NULL;
	src[5] = row->params;
	for (i = 0; i < 6; i++) {
		if (!src[i])
			continue;
		text[i] = atbi_llm_redact(src[i], secret);
		if (text[i]) {
			char *env = atbi_redact_string(text[i]);

			atb_free(text[i]);
			text[i] = env;
		}
		if (!text[i]) {
			st = atb_error_set(err, ATB_ERR_NOMEM, "cannot record a call: out of memory");
			goto out;
		}
	}
	st = atbi_store_begin(s, err);
	if (st)
		goto out;
	st = ensure_schema(s, err);
	if (st)
		goto fail;
	rc = sqlite3_prepare_v2(s->db, "SELECT count(*) FROM llm_call WHERE run = ?", -1, &q, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_text(q, 1, row->run, -1, SQLITE_STATIC);
		if (sqlite3_step(q) == SQLITE_ROW)
			n = sqlite3_column_int64(q, 0);
	}
	sqlite3_finalize(q);
	q = NULL;
	atbi_audit_time(when, sizeof(when));

	vals[0] = json_string(row->run);
	vals[1] = json_integer((json_int_t)n);
	vals[2] = json_string(row->transport);
	vals[3] = json_string(row->request_hash);
	vals[4] = json_string(text[0]);
	vals[5] = json_string(text[1]);
	vals[6] = json_string(row->model);
	vals[7] = json_string(text[5]);
	vals[8] = r->http_status ? json_integer(r->http_status) : json_null();
	vals[9] = jstr(text[2]);
	vals[10] = jstr(text[3]);
	vals[11] = r->finish_reason[0] ? json_string(r->finish_reason) : json_null();
	vals[12] = jcount(r->prompt_tokens);
	vals[13] = jcount(r->completion_tokens);
	vals[14] = jcount(r->reasoning_tokens);
	vals[15] = json_string(atb_llm_outcome_name(r->outcome));
	vals[16] = json_integer(r->attempts);
	vals[17] = json_real(r->latency_s);
	vals[18] = r->cost_usd >= 0 ? json_real(r->cost_usd) : json_null();
	vals[19] = jstr(text[4]);
	vals[20] = json_string(when);
	st = hash_row(vals, rhash, err);
	if (st)
		goto fail;

	rc = sqlite3_prepare_v2(s->db, "INSERT INTO llm_call (" ROW_COLUMNS ", row_hash) VALUES"
				" (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", -1, &q, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_text(q, 1, row->run, -1, SQLITE_STATIC);
		sqlite3_bind_int64(q, 2, n);
		sqlite3_bind_text(q, 3, row->transport, -1, SQLITE_STATIC);
		sqlite3_bind_text(q, 4, row->request_hash, -1, SQLITE_STATIC);
		sqlite3_bind_text(q, 5, text[0], -1, SQLITE_STATIC);
		sqlite3_bind_text(q, 6, text[1], -1, SQLITE_STATIC);
		sqlite3_bind_text(q, 7, row->model, -1, SQLITE_STATIC);
		sqlite3_bind_text(q, 8, text[5], -1, SQLITE_STATIC);
		if (r->http_status)
			sqlite3_bind_int(q, 9, r->http_status);
		sqlite3_bind_text(q, 10, text[2], -1, SQLITE_STATIC);
		sqlite3_bind_text(q, 11, text[3], -1, SQLITE_STATIC);
		if (r->finish_reason[0])
			sqlite3_bind_text(q, 12, r->finish_reason, -1, SQLITE_STATIC);
		if (r->prompt_tokens >= 0)
			sqlite3_bind_int64(q, 13, r->prompt_tokens);
		if (r->completion_tokens >= 0)
			sqlite3_bind_int64(q, 14, r->completion_tokens);
		if (r->reasoning_tokens >= 0)
			sqlite3_bind_int64(q, 15, r->reasoning_tokens);
		sqlite3_bind_text(q, 16, atb_llm_outcome_name(r->outcome), -1, SQLITE_STATIC);
		sqlite3_bind_int(q, 17, r->attempts);
		sqlite3_bind_double(q, 18, r->latency_s);
		if (r->cost_usd >= 0)
			sqlite3_bind_double(q, 19, r->cost_usd);
		sqlite3_bind_text(q, 20, text[4], -1, SQLITE_STATIC);
		sqlite3_bind_text(q, 21, when, -1, SQLITE_STATIC);
		sqlite3_bind_text(q, 22, rhash, -1, SQLITE_STATIC);
		rc = sqlite3_step(q) == SQLITE_DONE ? SQLITE_OK : sqlite3_errcode(s->db);
	}
	sqlite3_finalize(q);
	q = NULL;
	if (rc != SQLITE_OK) {
		st = atbi_store_sqlerr(s, rc, "record a model call", err);
		goto fail;
	}
	*id = sqlite3_last_insert_rowid(s->db);
	*n_out = n;
	/* The audit entry hashes the row; no prompt or response text in the chain. */
	payload = json_pack("{s:I, s:s, s:I, s:s, s:s, s:s, s:s, s:s}", "call", (json_int_t)*id,
			    "run", row->run, "n", (json_int_t)n, "transport", row->transport,
			    "request_hash", row->request_hash, "row_sha256", rhash, "outcome",
			    atb_llm_outcome_name(r->outcome), "model", row->model);
	if (!payload) {
		st = atb_error_set(err, ATB_ERR_NOMEM, "cannot record a call: out of memory");
		goto fail;
	}
	st = atbi_audit_append(s, "llm.call", payload, NULL, err);
	if (st)
		goto fail;

	thresholds_of(p, &t);
	st = run_stats(s, row->run, &rs, err);
	if (st)
		goto fail;
	reason = judge(&rs, &t, &rate, &limit);
	if (reason) {
		ev = evidence(s, row->run, reason, &rs, &t, p, rate, limit);
		if (!ev) {
			st = atb_error_set(err, ATB_ERR_NOMEM, "cannot record the halt: out of memory");
			goto fail;
		}
		st = insert_halt(s, row->run, reason, rs.calls, ev, err);
		if (st)
			goto fail;
		*alarm = json_dumps(ev, JSON_SORT_KEYS | JSON_COMPACT);
	}
	st = atbi_store_commit(s, err);
	if (st) {
		atb_free(*alarm);
		*alarm = NULL;
		*id = 0;
		goto out;
	}
	if (reason)
		st = atb_error_set(err, ATB_ERR_INFRA_DEFECT,
				   "run '%s' halted as an infrastructure defect: %s rate %.3f over %.3f"
				   " after %lld calls", row->run, reason, rate, limit,
				   (long long)rs.calls);
	goto out;
fail:
	atbi_store_rollback(s);
	*id = 0;
out:
	json_decref(payload);
	json_decref(ev);
	for (i = 0; i < 6; i++)
		atb_free(text[i]);
	return st;
}

/* ---- replay: a run's calls in order ---- */

void atbi_llm_recorded_free(struct atbi_llm_recorded *v, size_t n)
{
	size_t i;

	for (i = 0; v && i < n; i++) {
		atb_free(v[i].response);
		atb_free(v[i].error);
	}
	atb_free(v);
}

enum atb_status atbi_llm_load_run(struct atb_store *s, const char *run,
				  struct atbi_llm_recorded **out, size_t *n,
				  struct atb_error *err)
{
	struct atbi_llm_recorded *v = NULL, *nv;
	sqlite3_stmt *q = NULL;
	size_t cap = 0, k = 0;
	int rc;

	*out = NULL;
	*n = 0;
	rc = sqlite3_prepare_v2(s->db, "SELECT request_hash, response, error, http_status,"
				" latency_s FROM llm_call WHERE run = ? ORDER BY n", -1, &q, NULL);
	if (rc != SQLITE_OK) {
		if (strstr(sqlite3_errmsg(s->db), "no such table"))
			return atb_error_set(err, ATB_ERR_NOT_FOUND,
					     "run '%s' has no recorded model calls in store '%s'",
					     run, atb_store_path(s));
		return atbi_store_sqlerr(s, rc, "read a run's calls", err);
	}
	sqlite3_bind_text(q, 1, run, -1, SQLITE_STATIC);
	while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
		const char *resp = (const char *)sqlite3_column_text(q, 1);
		const char *e = (const char *)sqlite3_column_text(q, 2);

		if (k == cap) {
			cap = cap ? 2 * cap : 16;
			nv = atb_realloc(v, cap * sizeof(*v));
			if (!nv)
				goto nomem;
			v = nv;
		}
		memset(&v[k], 0, sizeof(v[k]));
		snprintf(v[k].request_hash, sizeof(v[k].request_hash), "%s",
			 (const char *)sqlite3_column_text(q, 0));
		v[k].http_status = sqlite3_column_int(q, 3);
		v[k].latency_s = sqlite3_column_double(q, 4);
		k++;
		if ((resp && !(v[k - 1].response = atb_strdup(resp))) ||
		    (e && !(v[k - 1].error = atb_strdup(e))))
			goto nomem;
	}
	sqlite3_finalize(q);
	if (rc != SQLITE_DONE) {
		atbi_llm_recorded_free(v, k);
		return atbi_store_sqlerr(s, rc, "read a run's calls", err);
	}
	if (!k) {
		atb_free(v);
		return atb_error_set(err, ATB_ERR_NOT_FOUND,
				     "run '%s' has no recorded model calls in store '%s'", run,
				     atb_store_path(s));
	}
	*out = v;
	*n = k;
	return ATB_OK;
nomem:
	sqlite3_finalize(q);
	atbi_llm_recorded_free(v, k);
	return atb_error_set(err, ATB_ERR_NOMEM, "cannot read a run's calls: out of memory");
}

/* ---- atb llm check ---- */

enum atb_status atb_llm_check(struct atb_store *s, int64_t *ncalls, char *problem,
			      size_t size, struct atb_error *err)
{
	sqlite3_stmt *q = NULL;
	enum atb_status st = ATB_OK;
	int64_t k = 0;
	int rc;

	if (ncalls)
		*ncalls = 0;
	if (problem && size)
		problem[0] = '\0';
	rc = sqlite3_prepare_v2(s->db, "SELECT " ROW_COLUMNS ", c.id, c.row_hash,"
				" (SELECT json_extract(a.payload, '$.row_sha256') FROM audit a"
				"  WHERE a.kind = 'llm.call' AND json_extract(a.payload, '$.call') = c.id)"
				" FROM llm_call c ORDER BY c.id", -1, &q, NULL);
	if (rc != SQLITE_OK) {
		if (strstr(sqlite3_errmsg(s->db), "no such table"))
			return ATB_OK;
		return atbi_store_sqlerr(s, rc, "read the model calls", err);
	}
	while (st == ATB_OK && (rc = sqlite3_step(q)) == SQLITE_ROW) {
		char h[65];
		const char *stored = (const char *)sqlite3_column_text(q, NCOLS + 1);
		const char *audited = (const char *)sqlite3_column_text(q, NCOLS + 2);
		long long id = sqlite3_column_int64(q, NCOLS);

		st = hash_stored(q, 0, h, err);
		if (st)
			break;
		k++;
		if (!audited)
			st = atb_error_set(err, ATB_ERR_CHECK, "model call %lld has no llm.call audit entry",
					   id);
		else if (!stored || strcmp(h, stored))
			st = atb_error_set(err, ATB_ERR_CHECK,
					   "model call %lld was changed: its columns hash to %.16s..., its"
					   " row_hash is %.16s...", id, h, stored ? stored : "");
		else if (strcmp(h, audited))
			st = atb_error_set(err, ATB_ERR_CHECK,
					   "model call %lld does not match its audit entry: columns hash to"
					   " %.16s..., the entry holds %.16s...", id, h, audited);
		if (st && problem && size)
			snprintf(problem, size, "%s", err ? err->msg : "model call changed");
	}
	sqlite3_finalize(q);
	if (ncalls)
		*ncalls = k;
	if (st == ATB_OK && rc != SQLITE_DONE)
		return atbi_store_sqlerr(s, rc, "read the model calls", err);
	return st;
}
