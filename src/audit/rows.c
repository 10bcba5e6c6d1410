/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Rows bound to the chain: the SHA-256 of the canonical content of the rows
 * an audit entry records, put into its payload as "rows" when it is
 * appended, and recomputed from the store when the chain is verified.  So
 * an edit of a recorded row (a trigger dropped, the row changed, the
 * trigger recreated from its own SQL) breaks the entry that recorded it,
 * and rewriting the entry to match breaks the chain after it.
 *
 * Which rows an entry records follows from its kind and its payload's ids
 * (the table below); the same code hashes them at append and at verify, so
 * the two cannot drift apart.  Canonical content of one query's rows: for
 * each row 'R', then for each column in the table's own order a type byte
 * and its value: 'n' (NULL); 'i' and 8 bytes big endian (integer); 'r' and
 * the 8 bytes of the IEEE double, big endian (real); 't' or 'b', an 8-byte
 * big-endian length and the bytes (text, blob).  Rows come in primary-key
 * order; a deleted row hashes as absent.  "rows" is the SHA-256 of the
 * concatenated 32-byte SHA-256 digests of each query's content, so that the
 * ingest can hash its samples as it binds them (atbi_rows_samples_*) instead
 * of reading them back.
 *
 * Does not: decide what is audited (the store's writers do), or read any
 * payload key other than the ids below.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>

#include "atb/alloc.h"
#include "store/store_int.h"
#include "banned.h"

#define MAX_QUERIES 4

/* An audit kind and the rows its entries record. */
static const struct bound_kind {
	const char *kind;
	const char *key, *key2;    /* payload ids bound to ?1 and ?2 */
	const char *subject;       /* "job %s" */
	const char *sql[MAX_QUERIES];
} kinds[] = {
	{"ingest", "job_id", NULL, "job %s",
	 {"SELECT * FROM job WHERE id = ?1",
	  "SELECT * FROM sample WHERE job = ?1 ORDER BY arm, seed, trial",
	  "SELECT * FROM seed_result WHERE job = ?1 ORDER BY seed",
	  "SELECT * FROM result WHERE job = ?1 ORDER BY id"}},
	{"rejection", "rejection", NULL, "rejection %s",
	 {"SELECT * FROM rejection WHERE id = ?1"}},
	{"review", "review", NULL, "review %s", {"SELECT * FROM review WHERE id = ?1"}},
	{"box.registered", "fingerprint", NULL, "box %.12s",
	 {"SELECT * FROM box WHERE fingerprint = ?1"}},
	{"box.capability", "capability", NULL, "box capability %s",
	 {"SELECT * FROM box_capability WHERE id = ?1"}},
	{"protocol.frozen", "digest", NULL, "frozen protocol %.12s",
	 {"SELECT * FROM frozen_protocol WHERE digest = ?1"}},
	{"run", "run", NULL, "run %s", {"SELECT * FROM run WHERE id = ?1"}},
	{"iteration", "run", "k", "iteration %2$s of run %1$s",
	 {"SELECT * FROM iteration WHERE run = ?1 AND k = ?2"}},
};

static const struct bound_kind *find_kind(const char *kind)
{
	size_t i;

	for (i = 0; kind && i < sizeof(kinds) / sizeof(kinds[0]); i++)
		if (!strcmp(kinds[i].kind, kind))
			return &kinds[i];
	return NULL;
}

int atbi_rows_bound_kind(const char *kind)
{
	return find_kind(kind) != NULL;
}

static void put_u64(unsigned char *b, uint64_t v)
{
	int i;

	for (i = 7; i >= 0; i--) {
		b[i] = (unsigned char)(v & 0xff);
		v >>= 8;
	}
}

static int hash_column(EVP_MD_CTX *ctx, sqlite3_stmt *q, int c)
{
	unsigned char h[9];
	const void *p;
	double d;
	uint64_t u;
	int n;

	switch (sqlite3_column_type(q, c)) {
	case SQLITE_INTEGER:
		h[0] = 'i';
		put_u64(h + 1, (uint64_t)sqlite3_column_int64(q, c));
		return EVP_DigestUpdate(ctx, h, 9);
	case SQLITE_FLOAT:
		d = sqlite3_column_double(q, c);
		memcpy(&u, &d, sizeof(u));
		h[0] = 'r';
		put_u64(h + 1, u);
		return EVP_DigestUpdate(ctx, h, 9);
	case SQLITE_TEXT:
	case SQLITE_BLOB:
		h[0] = sqlite3_column_type(q, c) == SQLITE_TEXT ? 't' : 'b';
		p = h[0] == 't' ? (const void *)sqlite3_column_text(q, c) : sqlite3_column_blob(q, c);
		n = sqlite3_column_bytes(q, c);
		put_u64(h + 1, (uint64_t)n);
		return EVP_DigestUpdate(ctx, h, 9) && (!n || EVP_DigestUpdate(ctx, p, (size_t)n));
	default:
		return EVP_DigestUpdate(ctx, "n", 1);
	}
}

/* Bind payload[key] (a string or an integer) to parameter i; 0 if missing. */
static int bind_key(sqlite3_stmt *q, int i, json_t *payload, const char *key, char *txt,
		    size_t size)
{
	json_t *v = key ? json_object_get(payload, key) : NULL;

	if (json_is_string(v)) {
		sqlite3_bind_text(q, i, json_string_value(v), -1, SQLITE_TRANSIENT);
		snprintf(txt, size, "%s", json_string_value(v));
		return 1;
	}
	if (json_is_integer(v)) {
		sqlite3_bind_int64(q, i, json_integer_value(v));
		snprintf(txt, size, "%" PRId64, (int64_t)json_integer_value(v));
		return 1;
	}
	return 0;
}

/* ---- the ingest's samples, hashed as they are bound ---- */

int atbi_rows_samples_begin(struct atbi_rows_samples *h)
{
	h->ctx = EVP_MD_CTX_new();
	h->used = 0;
	return h->ctx && EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL) ? 0 : -1;
}

/* One sample row, the way hash_column encodes (job, arm, seed, trial, value). */
int atbi_rows_samples_add(struct atbi_rows_samples *h, int64_t job, const char *arm,
			  int64_t seed, int32_t trial, double value)
{
	size_t alen = strlen(arm);
	unsigned char *b;
	uint64_t u;

	if (h->used + 1 + 9 + 9 + alen + 9 + 9 + 9 > sizeof(h->buf)) {
		if (!EVP_DigestUpdate(h->ctx, h->buf, h->used))
			return -1;
		h->used = 0;
	}
	b = h->buf + h->used;
	*b++ = 'R';
	*b++ = 'i';
	put_u64(b, (uint64_t)job);
	b += 8;
	*b++ = 't';
	put_u64(b, (uint64_t)alen);
	b += 8;
	memcpy(b, arm, alen);
	b += alen;
	*b++ = 'i';
	put_u64(b, (uint64_t)seed);
	b += 8;
	*b++ = 'i';
	put_u64(b, (uint64_t)(int64_t)trial);
	b += 8;
	memcpy(&u, &value, sizeof(u));
	*b++ = 'r';
	put_u64(b, u);
	b += 8;
	h->used = (size_t)(b - h->buf);
	return 0;
}

int atbi_rows_samples_end(struct atbi_rows_samples *h, unsigned char md[32])
{
	unsigned int n = 0;
	int ok = h->ctx && (!h->used || EVP_DigestUpdate(h->ctx, h->buf, h->used)) &&
		 EVP_DigestFinal_ex(h->ctx, md, &n) && n == 32;

	EVP_MD_CTX_free(h->ctx);
	h->ctx = NULL;
	return ok ? 0 : -1;
}

void atbi_rows_samples_abort(struct atbi_rows_samples *h)
{
	EVP_MD_CTX_free(h->ctx);
	h->ctx = NULL;
}

enum atb_status atbi_rows_hash(struct atb_store *s, const char *kind, json_t *payload,
			       char out[65], char *subject, size_t subject_size,
			       struct atb_error *err)
{
	const struct bound_kind *k = find_kind(kind);
	EVP_MD_CTX *ctx = NULL, *qctx = NULL;
	sqlite3_stmt *q = NULL;
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	char id1[80] = "", id2[80] = "";
	enum atb_status st = ATB_OK;
	int i, rc, ncol, c, ok = 1;

	out[0] = '\0';
	if (subject && subject_size)
		subject[0] = '\0';
	if (!k)
		return ATB_ERR_NOT_FOUND;
	ctx = EVP_MD_CTX_new();
	qctx = EVP_MD_CTX_new();
	if (!ctx || !qctx || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL)) {
		EVP_MD_CTX_free(ctx);
		EVP_MD_CTX_free(qctx);
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot hash rows: out of memory");
	}
	for (i = 0; i < MAX_QUERIES && k->sql[i] && ok; i++) {
		/* The ingest being appended hashed its samples as it bound them. */
		if (i == 1 && !strcmp(kind, "ingest") && s->samples_md_set) {
			ok = EVP_DigestUpdate(ctx, s->samples_md, 32);
			continue;
		}
		rc = sqlite3_prepare_v3(s->db, k->sql[i], -1, SQLITE_PREPARE_PERSISTENT, &q, NULL);
		if (rc != SQLITE_OK) {
			st = atbi_store_sqlerr(s, rc, "read the rows an audit entry records", err);
			goto out;
		}
		/* An entry without its ids records no row: it hashes as nothing found. */
		if (!bind_key(q, 1, payload, k->key, id1, sizeof(id1)) ||
		    (k->key2 && !bind_key(q, 2, payload, k->key2, id2, sizeof(id2))))
			sqlite3_bind_null(q, 1);
		ok = EVP_DigestInit_ex(qctx, EVP_sha256(), NULL);
		ncol = sqlite3_column_count(q);
		while (ok && (rc = sqlite3_step(q)) == SQLITE_ROW) {
			ok = EVP_DigestUpdate(qctx, "R", 1);
			for (c = 0; ok && c < ncol; c++)
				ok = hash_column(qctx, q, c);
		}
		if (ok && rc != SQLITE_DONE) {
			st = atbi_store_sqlerr(s, rc, "read the rows an audit entry records", err);
			goto out;
		}
		ok = ok && EVP_DigestFinal_ex(qctx, md, &mdlen) && mdlen == 32 &&
		     EVP_DigestUpdate(ctx, md, 32);
		sqlite3_finalize(q);
		q = NULL;
	}
	if (!ok || !EVP_DigestFinal_ex(ctx, md, &mdlen) || mdlen != 32) {
		st = atb_error_set(err, ATB_ERR_INTERNAL, "cannot hash the rows of a '%s' entry", kind);
		goto out;
	}
	atbi_hex(md, 32, out);
	if (subject && subject_size) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
		snprintf(subject, subject_size, k->subject, id1, id2);
#pragma GCC diagnostic pop
	}
out:
	sqlite3_finalize(q);
	EVP_MD_CTX_free(ctx);
	EVP_MD_CTX_free(qctx);
	return st;
}
