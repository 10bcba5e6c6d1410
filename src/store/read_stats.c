/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Reading one stored result with its statistics: the result row's numbers
 * (kind, metric, speedup and interval, cv, status) and its stats column
 * parsed as JSON, so that reports read a result's secondary figures (an
 * engine result's latency ratios and their intervals) from the record, not
 * from a line of text written beside it.  Read-only; works on a store
 * opened ATB_STORE_READ_ONLY.
 *
 * Does not: interpret the stats (their keys belong to the module that
 * wrote them, e.g. atb/engine.h), or write anything.
 */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "atb/alloc.h"
#include "store/store_int.h"
#include "banned.h"

enum atb_status atb_store_result_stats(struct atb_store *s, int64_t result_id, json_t **out,
				       struct atb_error *err)
{
	sqlite3_stmt *q = NULL;
	json_t *stats = NULL, *o = NULL;
	json_error_t je;
	enum atb_status st = ATB_OK;
	int rc;

	*out = NULL;
	if (result_id <= 0)
		return atb_error_set(err, ATB_ERR_USAGE, "bad result id %lld",
				     (long long)result_id);
	atb_alloc_install_json();
	rc = sqlite3_prepare_v2(s->db,
		"SELECT r.kind, r.metric, r.n_seeds, r.speedup, r.ci_low, r.ci_high, r.cv,"
		" r.status, r.stats, j.uuid FROM result r JOIN job j ON j.id = r.job"
		" WHERE r.id = ?", -1, &q, NULL);
	if (rc != SQLITE_OK)
		return atbi_store_sqlerr(s, rc, "read result stats", err);
	sqlite3_bind_int64(q, 1, result_id);
	rc = sqlite3_step(q);
	if (rc == SQLITE_DONE) {
		st = atb_error_set(err, ATB_ERR_NOT_FOUND, "no result %lld in store '%s'",
				   (long long)result_id, s->path);
		goto out;
	}
	if (rc != SQLITE_ROW) {
		st = atbi_store_sqlerr(s, rc, "read result stats", err);
		goto out;
	}
	memset(&je, 0, sizeof(je));
	stats = json_loads((const char *)sqlite3_column_text(q, 8), 0, &je);
	/* jansson says "out of memory" with a code, or with no text when its lexer cannot start */
	if (!stats && (json_error_code(&je) == json_error_out_of_memory || !je.text[0])) {
		st = atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
		goto out;
	}
	if (!json_is_object(stats)) {
		/* The schema's CHECK makes this unreachable unless the file was edited. */
		st = atb_error_set(err, ATB_ERR_STORE, "stats of result %lld in store '%s' are "
				   "not a json object: %s", (long long)result_id, s->path,
				   stats ? "wrong type" : je.text);
		goto out;
	}
	o = json_pack("{s:I, s:s, s:s, s:s, s:I, s:f, s:f, s:f, s:f, s:s, s:O}",
		      "id", (json_int_t)result_id,
		      "job_uuid", (const char *)sqlite3_column_text(q, 9),
		      "kind", (const char *)sqlite3_column_text(q, 0),
		      "metric", (const char *)sqlite3_column_text(q, 1),
		      "n_seeds", (json_int_t)sqlite3_column_int64(q, 2),
		      "speedup", sqlite3_column_double(q, 3),
		      "ci_low", sqlite3_column_double(q, 4),
		      "ci_high", sqlite3_column_double(q, 5),
		      "cv", sqlite3_column_double(q, 6),
		      "status", (const char *)sqlite3_column_text(q, 7),
		      "stats", stats);
	if (!o)
		st = atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	else
		*out = o;
out:
	json_decref(stats);
	sqlite3_finalize(q);
	return st;
}
