/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Box capabilities: what a box can do at best (memory bandwidth, peak
 * floating-point rate), measured once and cached per box fingerprint for the
 * physical-floor gate (PROTO: gates.physical_floor).  Append-only like every
 * table: a re-measurement adds a row and the latest row per (fingerprint,
 * kind) is in force; each put is audited.
 *
 * Does not: measure anything (src/floor does) or judge times (gates do).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "atb/alloc.h"
#include "store/store_int.h"
#include "banned.h"

static int valid_capability_kind(const char *k)
{
	size_t n;

	if (!k)
		return 0;
	for (n = 0; k[n]; n++)
		if (!((k[n] >= 'a' && k[n] <= 'z') || (k[n] >= '0' && k[n] <= '9') || k[n] == '_'))
			return 0;
	return n >= 1 && n <= 63;
}

enum atb_status atb_store_capability_put(struct atb_store *s, const char *fingerprint,
					 const char *kind, double value, const char *method,
					 struct atb_error *err)
{
	sqlite3_stmt *q = NULL;
	char when[40];
	json_t *payload;
	enum atb_status st;
	int rc;

	if (!s || !fingerprint || !valid_capability_kind(kind))
		return atb_error_set(err, ATB_ERR_USAGE, "capability kind '%s' is not 1-63 of [a-z0-9_]",
				     kind ? kind : "");
	if (!isfinite(value) || value <= 0)
		return atb_error_set(err, ATB_ERR_USAGE,
				     "capability '%s' must be finite and positive, not %g", kind, value);
	if (!method)
		method = "";
	atb_alloc_install_json();
	atbi_audit_time(when, sizeof(when));
	payload = json_pack("{s:s, s:s, s:f, s:s}", "fingerprint", fingerprint, "kind", kind,
			    "value", value, "method", method);
	if (!payload)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot record capability: out of memory");
	st = atbi_store_begin(s, err);
	if (st) {
		json_decref(payload);
		return st;
	}
	rc = sqlite3_prepare_v2(s->db,
				"INSERT INTO box_capability (fingerprint, kind, value, method, measured_at)"
				" VALUES (?, ?, ?, ?, ?)", -1, &q, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_text(q, 1, fingerprint, -1, SQLITE_STATIC);
		sqlite3_bind_text(q, 2, kind, -1, SQLITE_STATIC);
		sqlite3_bind_double(q, 3, value);
		sqlite3_bind_text(q, 4, method, -1, SQLITE_STATIC);
		sqlite3_bind_text(q, 5, when, -1, SQLITE_STATIC);
		rc = sqlite3_step(q);
		rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
	}
	if (rc != SQLITE_OK)
		st = atbi_store_sqlerr(s, rc, "store a box capability", err);
	sqlite3_finalize(q);
	if (st == ATB_OK &&
	    json_object_set_new(payload, "capability", json_integer(sqlite3_last_insert_rowid(s->db))))
		st = atb_error_set(err, ATB_ERR_NOMEM, "cannot record capability: out of memory");
	if (st == ATB_OK)
		st = atbi_audit_append(s, "box.capability", payload, NULL, err);
	if (st == ATB_OK)
		st = atbi_store_commit(s, err);
	else
		atbi_store_rollback(s);
	json_decref(payload);
	return st;
}

enum atb_status atb_store_capability_get(struct atb_store *s, const char *fingerprint,
					 const char *kind, double *value, char *method,
					 size_t method_size, struct atb_error *err)
{
	sqlite3_stmt *q = NULL;
	enum atb_status st = ATB_OK;
	int rc;

	*value = 0;
	if (method && method_size)
		method[0] = '\0';
	if (!s || !fingerprint || !kind)
		return atb_error_set(err, ATB_ERR_USAGE, "capability lookup needs a box and a kind");
	rc = sqlite3_prepare_v2(s->db,
				"SELECT value, method FROM box_capability WHERE fingerprint = ?"
				" AND kind = ? ORDER BY id DESC LIMIT 1", -1, &q, NULL);
	if (rc != SQLITE_OK)
		return atbi_store_sqlerr(s, rc, "read box capabilities", err);
	sqlite3_bind_text(q, 1, fingerprint, -1, SQLITE_STATIC);
	sqlite3_bind_text(q, 2, kind, -1, SQLITE_STATIC);
	rc = sqlite3_step(q);
	if (rc == SQLITE_ROW) {
		const unsigned char *m = sqlite3_column_text(q, 1);

		*value = sqlite3_column_double(q, 0);
		if (method && method_size)
			snprintf(method, method_size, "%s", m ? (const char *)m : "");
	} else if (rc == SQLITE_DONE) {
		st = atb_error_set(err, ATB_ERR_NOT_FOUND, "no capability '%s' for box '%.12s'",
				   kind, fingerprint);
	} else {
		st = atbi_store_sqlerr(s, rc, "read box capabilities", err);
	}
	sqlite3_finalize(q);
	return st;
}
