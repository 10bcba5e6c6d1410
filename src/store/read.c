/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Reading the store for reports: results with their latest review,
 * rejections, and a summary (schema version, rows per table, protocols,
 * boxes).  Read-only; works on a store opened ATB_STORE_READ_ONLY.
 */
#include <stdio.h>
#include <string.h>

#include "atb/alloc.h"
#include "store/store_int.h"
#include "banned.h"

static void col_copy(char *dst, size_t size, sqlite3_stmt *q, int i)
{
	const unsigned char *t = sqlite3_column_text(q, i);

	snprintf(dst, size, "%s", t ? (const char *)t : "");
}

static char *col_dup(sqlite3_stmt *q, int i)
{
	const unsigned char *t = sqlite3_column_text(q, i);

	return atb_strdup(t ? (const char *)t : "");
}

void atb_store_results_free(struct atb_result_row *rows, size_t n)
{
	size_t i;

	if (!rows)
		return;
	for (i = 0; i < n; i++) {
		atb_free(rows[i].task);
		atb_free(rows[i].candidate);
	}
	atb_free(rows);
}

enum atb_status atb_store_list_results(struct atb_store *s, struct atb_result_row **rows,
				       size_t *n, struct atb_error *err)
{
	sqlite3_stmt *q = NULL;
	struct atb_result_row *v = NULL, *nv;
	size_t cnt = 0, cap = 0;
	int rc;

	*rows = NULL;
	*n = 0;
	rc = sqlite3_prepare_v2(s->db,
		"SELECT r.id, j.uuid, r.kind, j.task, j.candidate, r.metric, r.n_seeds, r.speedup,"
		" r.ci_low, r.ci_high, r.cv, r.status, (SELECT decision FROM review"
		" WHERE result = r.id ORDER BY id DESC LIMIT 1), r.protocol_digest,"
		" r.box_fingerprint, r.created FROM result r JOIN job j ON j.id = r.job"
		" ORDER BY r.id", -1, &q, NULL);
	if (rc != SQLITE_OK)
		return atbi_store_sqlerr(s, rc, "list results", err);
	while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
		struct atb_result_row *r;

		if (cnt == cap) {
			cap = cap ? cap * 2 : 32;
			nv = atb_realloc(v, cap * sizeof(*v));
			if (!nv)
				goto nomem;
			v = nv;
		}
		r = &v[cnt++];
		memset(r, 0, sizeof(*r));
		r->id = sqlite3_column_int64(q, 0);
		col_copy(r->job_uuid, sizeof(r->job_uuid), q, 1);
		col_copy(r->kind, sizeof(r->kind), q, 2);
		r->task = col_dup(q, 3);
		r->candidate = col_dup(q, 4);
		col_copy(r->metric, sizeof(r->metric), q, 5);
		r->n_seeds = sqlite3_column_int64(q, 6);
		r->speedup = sqlite3_column_double(q, 7);
		r->ci_low = sqlite3_column_double(q, 8);
		r->ci_high = sqlite3_column_double(q, 9);
		r->cv = sqlite3_column_double(q, 10);
		col_copy(r->status, sizeof(r->status), q, 11);
		col_copy(r->review, sizeof(r->review), q, 12);
		col_copy(r->protocol_digest, sizeof(r->protocol_digest), q, 13);
		col_copy(r->box_fingerprint, sizeof(r->box_fingerprint), q, 14);
		col_copy(r->created, sizeof(r->created), q, 15);
		if (!r->task || !r->candidate)
			goto nomem;
	}
	sqlite3_finalize(q);
	if (rc != SQLITE_DONE) {
		atb_store_results_free(v, cnt);
		return atbi_store_sqlerr(s, rc, "list results", err);
	}
	*rows = v;
	*n = cnt;
	return ATB_OK;
nomem:
	sqlite3_finalize(q);
	atb_store_results_free(v, cnt);
	return atb_error_set(err, ATB_ERR_NOMEM, "cannot list results: out of memory");
}

void atb_store_rejections_free(struct atb_rejection_row *rows, size_t n)
{
	size_t i;

	if (!rows)
		return;
	for (i = 0; i < n; i++)
		atb_free(rows[i].reason);
	atb_free(rows);
}

enum atb_status atb_store_list_rejections(struct atb_store *s, struct atb_rejection_row **rows,
					  size_t *n, struct atb_error *err)
{
	sqlite3_stmt *q = NULL;
	struct atb_rejection_row *v = NULL, *nv;
	size_t cnt = 0, cap = 0;
	int rc;

	*rows = NULL;
	*n = 0;
	rc = sqlite3_prepare_v2(s->db, "SELECT id, job_uuid, rule, status, reason, created"
				" FROM rejection ORDER BY id", -1, &q, NULL);
	if (rc != SQLITE_OK)
		return atbi_store_sqlerr(s, rc, "list rejections", err);
	while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
		struct atb_rejection_row *r;

		if (cnt == cap) {
			cap = cap ? cap * 2 : 32;
			nv = atb_realloc(v, cap * sizeof(*v));
			if (!nv)
				goto nomem;
			v = nv;
		}
		r = &v[cnt++];
		memset(r, 0, sizeof(*r));
		r->id = sqlite3_column_int64(q, 0);
		col_copy(r->job_uuid, sizeof(r->job_uuid), q, 1);
		col_copy(r->rule, sizeof(r->rule), q, 2);
		r->status = sqlite3_column_int(q, 3);
		r->reason = col_dup(q, 4);
		col_copy(r->created, sizeof(r->created), q, 5);
		if (!r->reason)
			goto nomem;
	}
	sqlite3_finalize(q);
	if (rc != SQLITE_DONE) {
		atb_store_rejections_free(v, cnt);
		return atbi_store_sqlerr(s, rc, "list rejections", err);
	}
	*rows = v;
	*n = cnt;
	return ATB_OK;
nomem:
	sqlite3_finalize(q);
	atb_store_rejections_free(v, cnt);
	return atb_error_set(err, ATB_ERR_NOMEM, "cannot list rejections: out of memory");
}

enum atb_status atb_store_info(struct atb_store *s, struct atb_store_info *info,
			       struct atb_error *err)
{
	sqlite3_stmt *q = NULL;
	char sql[128];
	int rc, i;

	memset(info, 0, sizeof(*info));
	rc = sqlite3_prepare_v2(s->db, "SELECT user_version FROM pragma_user_version", -1, &q, NULL);
	if (rc == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW)
		info->schema_version = sqlite3_column_int(q, 0);
	sqlite3_finalize(q);
	for (i = 0; i < ATB_STORE_NTABLES; i++) {
		info->tables[i] = atbi_store_tables[i];
		snprintf(sql, sizeof(sql), "SELECT count(*) FROM %s", atbi_store_tables[i]);
		rc = sqlite3_prepare_v2(s->db, sql, -1, &q, NULL);
		if (rc == SQLITE_OK && (rc = sqlite3_step(q)) == SQLITE_ROW)
			info->rows[i] = sqlite3_column_int64(q, 0);
		sqlite3_finalize(q);
		if (rc != SQLITE_ROW)
			return atbi_store_sqlerr(s, rc, "count rows", err);
	}
	rc = sqlite3_prepare_v2(s->db, "SELECT version, digest FROM frozen_protocol ORDER BY version",
				-1, &q, NULL);
	while (rc == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW && info->nprotocols < 16) {
		info->protocol_versions[info->nprotocols] = sqlite3_column_int(q, 0);
		col_copy(info->protocol_digests[info->nprotocols], 65, q, 1);
		info->nprotocols++;
	}
	sqlite3_finalize(q);
	rc = sqlite3_prepare_v2(s->db, "SELECT fingerprint FROM box ORDER BY created", -1, &q, NULL);
	while (rc == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW && info->nboxes < 16)
		col_copy(info->box_fingerprints[info->nboxes++], 65, q, 0);
	sqlite3_finalize(q);
	return ATB_OK;
}
