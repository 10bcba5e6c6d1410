/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Internals of the store, shared with src/audit (which appends to and
 * verifies the chain kept in the store's audit table and its mirror).
 */
#ifndef ATB_STORE_INT_H
#define ATB_STORE_INT_H

#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>
#include <sqlite3.h>

#include "atb/store.h"
#include "util.h"

#define ATBI_GENESIS "0000000000000000000000000000000000000000000000000000000000000000"

struct atb_store {
	sqlite3 *db;
	char *path;
	char *mirror_path;
	int read_only;
	int schema;             /* user_version of the open store (2 until migrated) */
	int mirror_fd;          /* -1 until the first append (read-write only) */
	off_t mirror_pending;   /* mirror size before an uncommitted append, -1 none */
	char *witness_path;     /* $ATB_AUDIT_WITNESS (read-write only), NULL: none */
	int witness_fd;         /* -1 until the first append */
	off_t witness_pending;  /* witness size before an uncommitted append, -1 none */
	int in_txn;
	/* Prepared statements reused across ingests (the hot path). */
	sqlite3_stmt *st_job, *st_sample, *st_sample1, *st_seed, *st_result, *st_audit;
	/* The samples digest of the ingest being appended (src/audit/rows.c). */
	unsigned char samples_md[32];
	int samples_md_set;
	/* The anomaly factor of the last protocol digest looked up. */
	char factor_digest[65];
	double factor;
};

ATBI_FUNC extern const char atbi_store_schema_sql[];     /* v2 */
ATBI_FUNC extern const char atbi_store_schema_v3_sql[];  /* run after v2: v3 */
ATBI_FUNC extern const char atbi_store_schema_v4_sql[];  /* run after v3: v4 */

/*
 * SQL: "the run named by the expression run was resumed with
 * --allow-other-box on the box named by box": the audit entry that
 * 'atb suite --resume' ('suite.resume', src/suite/suite.c) or 'atb
 * calibrate --resume' ('calibrate.resume', src/calibrate/calibrate.c)
 * writes before it runs a task there.  Used by the v4 iteration trigger
 * and by atb_store_check, so both read the same rule.
 */
#define ATBI_ALLOWED_BOX(run, box)                                                   \
	"EXISTS (SELECT 1 FROM audit a WHERE a.kind IN ('suite.resume', 'calibrate.resume')" \
	" AND json_extract(a.payload, '$.run') IS " run                                 \
	" AND json_extract(a.payload, '$.box') IS " box                                 \
	" AND json_extract(a.payload, '$.other_box') IS 1)"
ATBI_FUNC extern const char *const atbi_store_tables[ATB_STORE_NTABLES];

/* Map a SQLite failure on s->db to a status and message ("atb-rule:" aware). */
ATBI_FUNC enum atb_status atbi_store_sqlerr(struct atb_store *s, int rc, const char *what,
					    struct atb_error *err);
/* Status for a rule id ("paired_seeds" -> ATB_REJECTED_PAIRED_SEEDS). */
ATBI_FUNC enum atb_status atbi_store_rule_status(const char *rule, size_t len);

/* BEGIN IMMEDIATE / COMMIT / ROLLBACK; COMMIT undoes a pending mirror append on failure. */
ATBI_FUNC enum atb_status atbi_store_begin(struct atb_store *s, struct atb_error *err);
ATBI_FUNC enum atb_status atbi_store_commit(struct atb_store *s, struct atb_error *err);
ATBI_FUNC void atbi_store_rollback(struct atb_store *s);

/* Now as RFC 3339 UTC with nanoseconds (buf >= 40 bytes). */
ATBI_FUNC void atbi_audit_time(char *buf, size_t size);

/*
 * Append one entry inside the open transaction: redact payload (modified in
 * place), insert the row, write and fsync the mirror line.  The caller
 * commits with atbi_store_commit.
 */
ATBI_FUNC enum atb_status atbi_audit_append(struct atb_store *s, const char *kind,
					    json_t *payload, int64_t *seq,
					    struct atb_error *err);

/* The audit kind that marks a v2 -> v3 migration: row hashes start after it. */
#define ATBI_AUDIT_MIGRATED "store.migrated"

/*
 * Whether entries of this audit kind record rows (and so carry "rows").
 */
ATBI_FUNC int atbi_rows_bound_kind(const char *kind);

/*
 * The SHA-256 (hex) of the canonical content of the rows an entry of this
 * kind with this payload records (src/audit/rows.c); subject names them
 * ("job 3").  ATB_ERR_NOT_FOUND (err untouched) when the kind records none.
 */
ATBI_FUNC enum atb_status atbi_rows_hash(struct atb_store *s, const char *kind, json_t *payload,
					 char out[65], char *subject, size_t subject_size,
					 struct atb_error *err);

/* Hashing an ingest's sample rows as they are bound, in key order. */
struct atbi_rows_samples {
	void *ctx;               /* EVP_MD_CTX */
	size_t used;
	unsigned char buf[4096];
};
ATBI_FUNC int atbi_rows_samples_begin(struct atbi_rows_samples *h);
ATBI_FUNC int atbi_rows_samples_add(struct atbi_rows_samples *h, int64_t job, const char *arm,
				    int64_t seed, int32_t trial, double value);
ATBI_FUNC int atbi_rows_samples_end(struct atbi_rows_samples *h, unsigned char md[32]);
ATBI_FUNC void atbi_rows_samples_abort(struct atbi_rows_samples *h);

/*
 * The witness file: set s->witness_path from $ATB_AUDIT_WITNESS, refusing
 * one inside the store's folder (ATB_ERR_USAGE).  A NULL or empty value: none.
 */
ATBI_FUNC enum atb_status atbi_audit_witness_setup(struct atb_store *s, const char *path,
						   struct atb_error *err);

/* After a crash: drop a trailing mirror entry/partial line the store lacks. */
ATBI_FUNC enum atb_status atbi_audit_recover(struct atb_store *s, struct atb_error *err);

/* Redact secrets from every string in v, in place; ATB_ERR_NOMEM possible. */
ATBI_FUNC enum atb_status atbi_redact_json(json_t *v);
/* A copy of s with secrets redacted; NULL on allocation failure. */
ATBI_FUNC char *atbi_redact_string(const char *s);

/*
 * The entry body bytes (canonical JSON) of one entry; caller owns *out.
 */
ATBI_FUNC enum atb_status atbi_audit_body(int64_t seq, const char *time, const char *kind,
					  const char *payload, const char *prev_hash,
					  char **out, size_t *len);

/*
 * Verify a mirror's bytes alone (hashes, seq from 1, links).  Returns the
 * number of complete, valid entries in *n; on the first bad line fills
 * problem (seq and what) and returns ATB_ERR_AUDIT.  A trailing partial
 * line is not counted and sets *partial.
 */
ATBI_FUNC enum atb_status atbi_audit_verify_buffer(const char *buf, size_t len, int64_t *n,
						   int *partial, int64_t *bad_seq,
						   char *problem, size_t problem_size);

#endif
