/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The audit chain: entry bodies, appending (store row + fsync'ed mirror
 * line before the COMMIT), crash recovery of the mirror, secret redaction,
 * listing and verification of both copies.
 *
 * The hashed preimage is the body's exact bytes, and the mirror line wraps
 * those bytes unchanged ({"entry":<body>,"hash":"<hex>"}), so verification
 * hashes stored bytes and finds seq and prev_hash with fixed-offset scans
 * from the end of the body (time has a fixed width and seq, prev_hash and
 * time follow the payload in sorted-key order) instead of re-parsing JSON.
 *
 * Does not: decide what is audited, or open transactions of its own (the
 * store's writers do).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "atb/alloc.h"
#include "atb/audit.h"
#include "proc/proc_int.h"
#include "store/store_int.h"
#include "util.h"
#include "banned.h"

extern char **environ;

#define TIME_LEN 30  /* 2026-11-29T07:10:15.123456789Z */
#define LINE_HEAD "{\"entry\":"
#define LINE_HEAD_LEN 9
#define LINE_TAIL_LEN 75 /* ,"hash":"<64>"} */

void atbi_audit_time(char *buf, size_t size)
{
	int64_t ns = atbi_realtime_ns();
	time_t secs = (time_t)(ns / 1000000000);
	struct tm tm;
	char tmp[32], out[64];
	size_t len;

	gmtime_r(&secs, &tm);
	strftime(tmp, sizeof(tmp), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out, sizeof(out), "%s.%09ldZ", tmp, (long)(ns % 1000000000));
	len = strlen(out);
	if (len >= size)
		len = size ? size - 1 : 0;
	if (size) {
		memcpy(buf, out, len);
		buf[len] = '\0';
	}
}

enum atb_status atbi_audit_body(int64_t seq, const char *time, const char *kind,
				const char *payload, const char *prev_hash,
				char **out, size_t *len)
{
	size_t cap = strlen(kind) + strlen(payload) + strlen(time) + strlen(prev_hash) + 96;
	char *b = atb_malloc(cap);
	int n;

	*out = NULL;
	if (!b)
		return ATB_ERR_NOMEM;
	n = snprintf(b, cap, "{\"kind\":\"%s\",\"payload\":%s,\"prev_hash\":\"%s\",\"seq\":%" PRId64
			     ",\"time\":\"%s\"}", kind, payload, prev_hash, seq, time);
	if (n < 0 || (size_t)n >= cap) {
		atb_free(b);
		return ATB_ERR_INTERNAL;
	}
	*out = b;
	if (len)
		*len = (size_t)n;
	return ATB_OK;
}

/* ---- hashing with one reused context (libcrypto) ---- */

struct hasher {
	EVP_MD_CTX *ctx;
	EVP_MD *md;  /* fetched once: an implicit fetch per entry takes locks */
};

static int hash_hex(struct hasher *h, const void *data, size_t len, char out[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	if (!h->ctx) {
		h->ctx = EVP_MD_CTX_new();
		if (!h->ctx)
			return -1;
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
		h->md = EVP_MD_fetch(NULL, "SHA256", NULL);
#endif
	}
	if (!EVP_DigestInit_ex(h->ctx, h->md ? h->md : EVP_sha256(), NULL) ||
	    !EVP_DigestUpdate(h->ctx, data, len) ||
	    !EVP_DigestFinal_ex(h->ctx, md, &mdlen) || mdlen != 32)
		return -1;
	atbi_hex(md, 32, out);
	return 0;
}

static void hasher_free(struct hasher *h)
{
	EVP_MD_CTX_free(h->ctx);
	h->ctx = NULL;
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
	EVP_MD_free(h->md);
#endif
	h->md = NULL;
}

/* ---- secrets ---- */

static int secret_name(const char *name, size_t len)
{
	static const char *const words[] = {"KEY", "TOKEN", "SECRET", "PASSWORD"};
	size_t w, i, wl;

	for (w = 0; w < 4; w++) {
		wl = strlen(words[w]);
		for (i = 0; i + wl <= len; i++)
			if (!strncasecmp(name + i, words[w], wl))
				return 1;
	}
	return 0;
}

#define MAX_SECRETS 64

static size_t collect_secrets(const char *secrets[MAX_SECRETS])
{
	size_t n = 0;
	char **e;

	for (e = environ; e && *e && n < MAX_SECRETS; e++) {
		const char *eq = strchr(*e, '=');

		if (!eq || strlen(eq + 1) < 8)
			continue;
		if (secret_name(*e, (size_t)(eq - *e)))
			secrets[n++] = eq + 1;
	}
	return n;
}

static char *redact_with(const char *s, const char *const *secrets, size_t nsecrets, int *changed)
{
	static const char mark[] = "[redacted]";
	char *cur = atb_strdup(s);
	size_t i;

	*changed = 0;
	for (i = 0; cur && i < nsecrets; i++) {
		size_t sl = strlen(secrets[i]), count = 0, n;
		const char *p;
		char *next, *w;

		for (p = strstr(cur, secrets[i]); p; p = strstr(p + sl, secrets[i]))
			count++;
		if (!count)
			continue;
		*changed = 1;
		n = strlen(cur) - count * sl + count * (sizeof(mark) - 1);
		next = atb_malloc(n + 1);
		if (!next) {
			atb_free(cur);
			return NULL;
		}
		w = next;
		p = cur;
		for (;;) {
			const char *hit = strstr(p, secrets[i]);

			if (!hit) {
				memcpy(w, p, strlen(p) + 1);
				break;
			}
			memcpy(w, p, (size_t)(hit - p));
			w += hit - p;
			memcpy(w, mark, sizeof(mark) - 1);
			w += sizeof(mark) - 1;
			p = hit + sl;
		}
		atb_free(cur);
		cur = next;
	}
	return cur;
}

char *atbi_redact_string(const char *s)
{
	const char *secrets[MAX_SECRETS];
	int changed;

	return redact_with(s ? s : "", secrets, collect_secrets(secrets), &changed);
}

static enum atb_status redact_tree(json_t *v, const char *const *secrets, size_t n)
{
	const char *key;
	json_t *x;
	size_t i;

	if (json_is_object(v)) {
		json_object_foreach(v, key, x) {
			if (json_is_string(x)) {
				int changed;
				char *r = redact_with(json_string_value(x), secrets, n, &changed);

				if (!r)
					return ATB_ERR_NOMEM;
				if (changed && json_object_set_new(v, key, json_string(r))) {
					atb_free(r);
					return ATB_ERR_NOMEM;
				}
				atb_free(r);
			} else if (redact_tree(x, secrets, n)) {
				return ATB_ERR_NOMEM;
			}
		}
	} else if (json_is_array(v)) {
		json_array_foreach(v, i, x) {
			if (json_is_string(x)) {
				int changed;
				char *r = redact_with(json_string_value(x), secrets, n, &changed);

				if (!r)
					return ATB_ERR_NOMEM;
				if (changed && json_array_set_new(v, i, json_string(r))) {
					atb_free(r);
					return ATB_ERR_NOMEM;
				}
				atb_free(r);
			} else if (redact_tree(x, secrets, n)) {
				return ATB_ERR_NOMEM;
			}
		}
	}
	return ATB_OK;
}

enum atb_status atbi_redact_json(json_t *v)
{
	const char *secrets[MAX_SECRETS];
	size_t n = collect_secrets(secrets);

	return n ? redact_tree(v, secrets, n) : ATB_OK;
}

/* ---- append ---- */

static enum atb_status open_mirror(struct atb_store *s, struct atb_error *err)
{
	if (s->mirror_fd >= 0)
		return ATB_OK;
	s->mirror_fd = open(s->mirror_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (s->mirror_fd < 0)
		return atb_error_set(err, ATB_ERR_IO, "cannot open audit mirror '%s': %s",
				     s->mirror_path, strerror(errno));
	return ATB_OK;
}

enum atb_status atbi_audit_append(struct atb_store *s, const char *kind,
				  json_t *payload, int64_t *seq_out,
				  struct atb_error *err)
{
	sqlite3_stmt *q = NULL;
	char prev[65] = ATBI_GENESIS, now[40], hash[65];
	char *canon = NULL, *body = NULL, *line = NULL;
	size_t blen, llen;
	int64_t seq = 1;
	struct stat sb;
	struct hasher h = {0};
	enum atb_status st;
	int rc;

	if (seq_out)
		*seq_out = 0;
	if (!s->in_txn)
		return atb_error_set(err, ATB_ERR_INTERNAL, "audit append outside a transaction");
	/* PROTO: audit.secrets: no secret is ever written to either copy */
	st = atbi_redact_json(payload);
	if (st)
		return atb_error_set(err, st, "cannot redact the audit payload: out of memory");
	if (s->schema >= 3 && atbi_rows_bound_kind(kind)) {
		/* Bind the rows this entry records to it (src/audit/rows.c). */
		char rows[65];

		st = atbi_rows_hash(s, kind, payload, rows, NULL, 0, err);
		if (st)
			return st;
		if (json_object_set_new(payload, "rows", json_string(rows)))
			return atb_error_set(err, ATB_ERR_NOMEM, "cannot audit: out of memory");
	}
	st = atbi_json_canonical(payload, &canon, err);
	if (st)
		return st;

	rc = sqlite3_prepare_v2(s->db, "SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1",
				-1, &q, NULL);
	if (rc != SQLITE_OK) {
		st = atbi_store_sqlerr(s, rc, "read the audit chain", err);
		goto out;
	}
	if (sqlite3_step(q) == SQLITE_ROW) {
		seq = sqlite3_column_int64(q, 0) + 1;
		snprintf(prev, sizeof(prev), "%s", (const char *)sqlite3_column_text(q, 1));
	}
	sqlite3_finalize(q);
	q = NULL;

	atbi_audit_time(now, sizeof(now));
	st = atbi_audit_body(seq, now, kind, canon, prev, &body, &blen);
	if (st) {
		atb_error_set(err, st, "cannot build the audit entry: out of memory");
		goto out;
	}
	if (hash_hex(&h, body, blen, hash)) {
		st = atb_error_set(err, ATB_ERR_INTERNAL, "cannot hash the audit entry");
		goto out;
	}
	rc = sqlite3_prepare_v3(s->db, "INSERT INTO audit (seq, time, kind, payload, prev_hash,"
				" hash) VALUES (?, ?, ?, ?, ?, ?)", -1, SQLITE_PREPARE_PERSISTENT,
				&q, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_int64(q, 1, seq);
		sqlite3_bind_text(q, 2, now, -1, SQLITE_STATIC);
		sqlite3_bind_text(q, 3, kind, -1, SQLITE_STATIC);
		sqlite3_bind_text(q, 4, canon, -1, SQLITE_STATIC);
		sqlite3_bind_text(q, 5, prev, -1, SQLITE_STATIC);
		sqlite3_bind_text(q, 6, hash, -1, SQLITE_STATIC);
		rc = sqlite3_step(q) == SQLITE_DONE ? SQLITE_OK : sqlite3_errcode(s->db);
	}
	if (rc != SQLITE_OK) {
		st = atbi_store_sqlerr(s, rc, "audit entry", err);
		goto out;
	}

	/* The mirror line goes to disk before the COMMIT (see atb/audit.h). */
	llen = LINE_HEAD_LEN + blen + LINE_TAIL_LEN + 1;
	line = atb_malloc(llen + 1);
	if (!line) {
		st = atb_error_set(err, ATB_ERR_NOMEM, "cannot build the audit line: out of memory");
		goto out;
	}
	snprintf(line, llen + 1, LINE_HEAD "%s,\"hash\":\"%s\"}\n", body, hash);
	st = open_mirror(s, err);
	if (st)
		goto out;
	if (fstat(s->mirror_fd, &sb)) {
		st = atb_error_set(err, ATB_ERR_IO, "cannot stat audit mirror '%s': %s",
				   s->mirror_path, strerror(errno));
		goto out;
	}
	s->mirror_pending = sb.st_size;
	if (atbi_write_all(s->mirror_fd, line, llen) || fdatasync(s->mirror_fd)) {
		st = atb_error_set(err, ATB_ERR_IO, "cannot write audit mirror '%s': %s",
				   s->mirror_path, strerror(errno));
		goto out;
	}
	if (s->witness_path) {
		/* The anchor outside the store's folder: seq:hash, fsync'ed like the mirror. */
		char wl[96];
		int wn = snprintf(wl, sizeof(wl), "%" PRId64 ":%s\n", seq, hash);

		if (s->witness_fd < 0)
			s->witness_fd = open(s->witness_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC,
					     0644);
		if (s->witness_fd < 0 || fstat(s->witness_fd, &sb)) {
			st = atb_error_set(err, ATB_ERR_IO, "cannot open audit witness '%s': %s",
					   s->witness_path, strerror(errno));
			goto out;
		}
		s->witness_pending = sb.st_size;
		if (atbi_write_all(s->witness_fd, wl, (size_t)wn) || fdatasync(s->witness_fd)) {
			st = atb_error_set(err, ATB_ERR_IO, "cannot write audit witness '%s': %s",
					   s->witness_path, strerror(errno));
			goto out;
		}
	}
	if (seq_out)
		*seq_out = seq;
out:
	sqlite3_finalize(q);
	hasher_free(&h);
	atb_free(canon);
	atb_free(body);
	atb_free(line);
	return st;
}

/* ---- parsing a mirror line without a JSON parser ---- */

struct mline {
	const char *body;
	size_t blen;
	const char *hash;      /* 64 hex, not NUL-terminated */
	const char *prev;      /* 64 hex */
	int64_t seq;
};

/* 0 ok, else a static description of what is wrong. */
static const char *parse_line(const char *l, size_t len, struct mline *m)
{
	const char *b, *p, *d;
	size_t blen;
	int64_t seq = 0, mul = 1;

	/*
	 * The hash and prev_hash are not checked for hex here: each is compared
	 * byte for byte with a computed or previous hex digest, which fails
	 * for anything that is not one.
	 */
	if (len < LINE_HEAD_LEN + LINE_TAIL_LEN + 40 || memcmp(l, LINE_HEAD, LINE_HEAD_LEN) ||
	    memcmp(l + len - LINE_TAIL_LEN, ",\"hash\":\"", 9) || memcmp(l + len - 2, "\"}", 2))
		return "line is not {\"entry\":...,\"hash\":...}";
	b = l + LINE_HEAD_LEN;
	blen = len - LINE_HEAD_LEN - LINE_TAIL_LEN;
	m->body = b;
	m->blen = blen;
	m->hash = l + len - 66;
	/* ...,"prev_hash":"<64>","seq":N,"time":"<30>"} */
	if (blen < 14 + 64 + 8 + 9 + TIME_LEN + 2)
		return "entry is too short";
	p = b + blen - (9 + TIME_LEN + 2);
	if (memcmp(p, ",\"time\":\"", 9) || memcmp(b + blen - 2, "\"}", 2))
		return "entry's time is not where it belongs";
	d = p - 1;
	while (d > b && *d >= '0' && *d <= '9') {
		if (mul > INT64_MAX / 100)
			return "entry's seq is out of range";
		seq += (*d - '0') * mul;
		mul *= 10;
		d--;
	}
	if (d == p - 1 || d - b < 7 + 65 + 14 || memcmp(d - 6, ",\"seq\":", 7))
		return "entry's seq is not where it belongs";
	d -= 6;  /* at the ',' before "seq" */
	if (d[-1] != '"' || memcmp(d - 65 - 14, ",\"prev_hash\":\"", 14))
		return "entry's prev_hash is not where it belongs";
	m->prev = d - 65;
	m->seq = seq;
	if (memcmp(b, "{\"kind\":\"", 9))
		return "entry does not start with its kind";
	return NULL;
}

enum atb_status atbi_audit_verify_buffer(const char *buf, size_t len, int64_t *n,
					 int *partial, int64_t *bad_seq,
					 char *problem, size_t problem_size)
{
	const char *p = buf, *end = buf + len, *nl;
	char prev[64], hex[65];
	struct hasher h = {0};
	struct mline m;
	int64_t k = 0;
	const char *why;

	*n = 0;
	*partial = 0;
	*bad_seq = 0;
	memcpy(prev, ATBI_GENESIS, 64);
	while (p < end) {
		nl = memchr(p, '\n', (size_t)(end - p));
		if (!nl) {
			*partial = 1;
			break;
		}
		k++;
		why = parse_line(p, (size_t)(nl - p), &m);
		if (!why && m.seq != k)
			why = "seq is not the previous entry's plus one (entry missing, inserted or reordered)";
		if (!why && memcmp(m.prev, prev, 64))
			why = "prev_hash does not link to the previous entry";
		if (!why && hash_hex(&h, m.body, m.blen, hex))
			why = "cannot hash";
		if (!why && memcmp(hex, m.hash, 64))
			why = "hash does not match the entry's bytes (edited)";
		if (why) {
			*bad_seq = k;
			snprintf(problem, problem_size, "%s", why);
			hasher_free(&h);
			return ATB_ERR_AUDIT;
		}
		memcpy(prev, m.hash, 64);
		*n = k;
		p = nl + 1;
	}
	hasher_free(&h);
	return ATB_OK;
}

/* ---- crash recovery ---- */

static int subject_in_store(struct atb_store *s, const struct mline *m);

/*
 * The witness's last line is "seq:hash" of the entry the mirror dropped (a
 * crash after both were written, before the COMMIT): drop it too, with a
 * partial last line, so the witness never names an entry that was not.
 */
static enum atb_status recover_witness(struct atb_store *s, int64_t seq, const char *hash,
				       struct atb_error *err)
{
	char *buf = NULL, want[96];
	size_t len = 0, keep, wl;
	struct atb_error ferr;
	enum atb_status st;
	int fd;

	if (!s->witness_path)
		return ATB_OK;
	atb_error_clear(&ferr);
	st = atbi_read_file(s->witness_path, &buf, &len, &ferr);
	if (st == ATB_ERR_NOT_FOUND)
		return ATB_OK;
	if (st) {
		if (err)
			*err = ferr;
		return st;
	}
	keep = len;
	while (keep && buf[keep - 1] != '\n')
		keep--;  /* a partial last line */
	wl = (size_t)snprintf(want, sizeof(want), "%" PRId64 ":%.64s\n", seq, hash ? hash : "");
	if (hash && keep >= wl && !memcmp(buf + keep - wl, want, wl) &&
	    (keep == wl || buf[keep - wl - 1] == '\n'))
		keep -= wl;
	atb_free(buf);
	if (keep == len)
		return ATB_OK;
	fd = open(s->witness_path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)keep) || fdatasync(fd))
		st = atb_error_set(err, ATB_ERR_IO, "cannot repair audit witness '%s': %s",
				   s->witness_path, strerror(errno));
	if (fd >= 0)
		close(fd);
	return st;
}

enum atb_status atbi_audit_recover(struct atb_store *s, struct atb_error *err)
{
	sqlite3_stmt *q = NULL;
	char *buf = NULL;
	size_t len = 0, nlines = 0, keep = 0, lastlen = 0;
	const char *p, *nl, *last = NULL;
	int64_t dbmax = 0;
	char dbhash[65] = ATBI_GENESIS;
	enum atb_status st;
	struct atb_error ferr;
	int fd, rc;

	st = atbi_store_begin(s, err);  /* hold the write lock while we look */
	if (st)
		return st;
	rc = sqlite3_prepare_v2(s->db, "SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1",
				-1, &q, NULL);
	if (rc != SQLITE_OK) {
		st = atbi_store_sqlerr(s, rc, "read the audit chain", err);
		goto out;
	}
	if (sqlite3_step(q) == SQLITE_ROW) {
		dbmax = sqlite3_column_int64(q, 0);
		snprintf(dbhash, sizeof(dbhash), "%s", (const char *)sqlite3_column_text(q, 1));
	}
	sqlite3_finalize(q);
	atb_error_clear(&ferr);
	st = atbi_read_file(s->mirror_path, &buf, &len, &ferr);
	if (st == ATB_ERR_NOT_FOUND) {
		st = ATB_OK;
		goto out;
	}
	if (st) {
		if (err)
			*err = ferr;
		goto out;
	}
	for (p = buf; p < buf + len; p = nl + 1) {
		nl = memchr(p, '\n', len - (size_t)(p - buf));
		if (!nl)
			break;
		nlines++;
		if ((int64_t)nlines == dbmax)
			keep = (size_t)(nl + 1 - buf);
		last = p;
		lastlen = (size_t)(nl - p);
	}
	if (dbmax == 0)
		keep = 0;
	/*
	 * Only the two shapes a crash can leave are repaired: a partial last
	 * line, and one complete entry dbmax+1 linking to the store's last
	 * entry.  Anything else is left for `atb audit verify` to report.
	 */
	if ((int64_t)nlines == dbmax + 1) {
		struct mline m;
		char h[65];

		/*
		 * An entry whose subject is in the store was deleted from it,
		 * not lost in a crash: left for verify to report.
		 */
		if (parse_line(last, lastlen, &m) || m.seq != dbmax + 1 ||
		    memcmp(m.prev, dbhash, 64) || subject_in_store(s, &m))
			goto out;
		memcpy(h, m.hash, 64);
		h[64] = '\0';
		st = recover_witness(s, dbmax + 1, h, err);
		if (st)
			goto out;
	} else if ((int64_t)nlines != dbmax) {
		goto out;
	} else {
		st = recover_witness(s, dbmax + 1, NULL, err);  /* a partial line only */
		if (st)
			goto out;
	}
	if (keep == len)
		goto out;
	fd = open(s->mirror_path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)keep) || fdatasync(fd)) {
		st = atb_error_set(err, ATB_ERR_IO, "cannot repair audit mirror '%s': %s",
				   s->mirror_path, strerror(errno));
	}
	if (fd >= 0)
		close(fd);
out:
	atb_free(buf);
	atbi_store_rollback(s);
	return st;
}

/* ---- listing ---- */

void atb_audit_entries_free(struct atb_audit_entry *e, size_t n)
{
	size_t i;

	if (!e)
		return;
	for (i = 0; i < n; i++)
		atb_free(e[i].payload);
	atb_free(e);
}

enum atb_status atb_audit_list(struct atb_store *s, int64_t since_seq,
			       struct atb_audit_entry **out, size_t *n,
			       struct atb_error *err)
{
	sqlite3_stmt *q = NULL;
	struct atb_audit_entry *v = NULL, *nv;
	size_t cnt = 0, cap = 0;
	int rc;

	*out = NULL;
	*n = 0;
	rc = sqlite3_prepare_v2(s->db, "SELECT seq, time, kind, payload, prev_hash, hash FROM audit"
				" WHERE seq > ? ORDER BY seq", -1, &q, NULL);
	if (rc != SQLITE_OK)
		return atbi_store_sqlerr(s, rc, "read the audit chain", err);
	sqlite3_bind_int64(q, 1, since_seq);
	while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
		struct atb_audit_entry *e;

		if (cnt == cap) {
			cap = cap ? cap * 2 : 64;
			nv = atb_realloc(v, cap * sizeof(*v));
			if (!nv)
				goto nomem;
			v = nv;
		}
		e = &v[cnt];
		memset(e, 0, sizeof(*e));
		e->seq = sqlite3_column_int64(q, 0);
		snprintf(e->time, sizeof(e->time), "%s", (const char *)sqlite3_column_text(q, 1));
		snprintf(e->kind, sizeof(e->kind), "%s", (const char *)sqlite3_column_text(q, 2));
		e->payload = atb_strdup((const char *)sqlite3_column_text(q, 3));
		snprintf(e->prev_hash, sizeof(e->prev_hash), "%s", (const char *)sqlite3_column_text(q, 4));
		snprintf(e->hash, sizeof(e->hash), "%s", (const char *)sqlite3_column_text(q, 5));
		cnt++;
		if (!e->payload)
			goto nomem;
	}
	sqlite3_finalize(q);
	if (rc != SQLITE_DONE) {
		atb_audit_entries_free(v, cnt);
		return atbi_store_sqlerr(s, rc, "read the audit chain", err);
	}
	*out = v;
	*n = cnt;
	return ATB_OK;
nomem:
	sqlite3_finalize(q);
	atb_audit_entries_free(v, cnt);
	return atb_error_set(err, ATB_ERR_NOMEM, "cannot list the audit chain: out of memory");
}

/* ---- verification ---- */

static void problem(struct atb_audit_report *rep, int64_t seq, const char *copy,
		    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void problem(struct atb_audit_report *rep, int64_t seq, const char *copy,
		    const char *fmt, ...)
{
	va_list ap;

	if (!rep->ok)
		return;  /* keep the first */
	rep->ok = 0;
	rep->bad_seq = seq;
	snprintf(rep->bad_copy, sizeof(rep->bad_copy), "%s", copy);
	va_start(ap, fmt);
	vsnprintf(rep->problem, sizeof(rep->problem), fmt, ap);
	va_end(ap);
}

static void note(struct atb_audit_report *rep, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void note(struct atb_audit_report *rep, const char *fmt, ...)
{
	va_list ap;

	if (rep->nnotes >= ATB_AUDIT_MAX_NOTES)
		return;
	va_start(ap, fmt);
	vsnprintf(rep->notes[rep->nnotes++], sizeof(rep->notes[0]), fmt, ap);
	va_end(ap);
}

/* Is the subject of a mirror-only entry (job, rejection, review...) in the store? */
static int subject_in_store(struct atb_store *s, const struct mline *m)
{
	static const struct {
		const char *kind, *key, *sql;
	} subj[] = {
		{"ingest", "job", "SELECT 1 FROM job WHERE uuid = ?"},
		{"rejection", "rejection", "SELECT 1 FROM rejection WHERE id = ?"},
		{"review", "review", "SELECT 1 FROM review WHERE id = ?"},
		{"box.registered", "fingerprint", "SELECT 1 FROM box WHERE fingerprint = ?"},
		{"protocol.frozen", "digest", "SELECT 1 FROM frozen_protocol WHERE digest = ?"},
	};
	json_t *body, *payload, *kind, *v;
	sqlite3_stmt *q = NULL;
	size_t i;
	int found = 0;

	atb_alloc_install_json();
	body = json_loadb(m->body, m->blen, 0, NULL);
	if (!body)
		return 0;
	kind = json_object_get(body, "kind");
	payload = json_object_get(body, "payload");
	for (i = 0; i < sizeof(subj) / sizeof(subj[0]); i++) {
		if (!json_is_string(kind) || strcmp(json_string_value(kind), subj[i].kind))
			continue;
		v = json_object_get(payload, subj[i].key);
		if (!v || sqlite3_prepare_v2(s->db, subj[i].sql, -1, &q, NULL) != SQLITE_OK)
			break;
		if (json_is_string(v))
			sqlite3_bind_text(q, 1, json_string_value(v), -1, SQLITE_TRANSIENT);
		else
			sqlite3_bind_int64(q, 1, json_integer_value(v));
		found = sqlite3_step(q) == SQLITE_ROW;
		sqlite3_finalize(q);
		break;
	}
	json_decref(body);
	return found;
}

/* Every subject row has its audit entry. */
static enum atb_status check_coverage(struct atb_store *s, struct atb_audit_report *rep,
				      struct atb_error *err)
{
	static const struct {
		const char *what, *sql;
	} cov[] = {
		{"job", "SELECT uuid FROM job WHERE uuid NOT IN (SELECT json_extract(payload,"
			" '$.job') FROM audit WHERE kind = 'ingest') ORDER BY id LIMIT 1"},
		{"rejection", "SELECT id FROM rejection WHERE id NOT IN (SELECT json_extract("
			"payload, '$.rejection') FROM audit WHERE kind = 'rejection') ORDER BY id LIMIT 1"},
		{"review", "SELECT id FROM review WHERE id NOT IN (SELECT json_extract(payload,"
			" '$.review') FROM audit WHERE kind = 'review') ORDER BY id LIMIT 1"},
		{"box", "SELECT fingerprint FROM box WHERE fingerprint NOT IN (SELECT"
			" json_extract(payload, '$.fingerprint') FROM audit WHERE kind ="
			" 'box.registered') LIMIT 1"},
		{"frozen protocol", "SELECT digest FROM frozen_protocol WHERE digest NOT IN"
			" (SELECT json_extract(payload, '$.digest') FROM audit WHERE kind ="
			" 'protocol.frozen') LIMIT 1"},
		/* By count: entries written before schema 3 do not name the row's id. */
		{"box capability", "SELECT max(id) FROM box_capability HAVING count(*) > (SELECT"
			" count(*) FROM audit WHERE kind = 'box.capability')"},
		{"run", "SELECT id FROM run WHERE id NOT IN (SELECT json_extract(payload, '$.run')"
			" FROM audit WHERE kind = 'run') LIMIT 1"},
		{"iteration", "SELECT run || ' ' || k FROM iteration WHERE run || ' ' || k NOT IN"
			" (SELECT json_extract(payload, '$.run') || ' ' || json_extract(payload, '$.k')"
			" FROM audit WHERE kind = 'iteration') LIMIT 1"},
	};
	sqlite3_stmt *q = NULL;
	size_t i;
	int rc;

	for (i = 0; i < sizeof(cov) / sizeof(cov[0]) && rep->ok; i++) {
		rc = sqlite3_prepare_v2(s->db, cov[i].sql, -1, &q, NULL);
		if (rc != SQLITE_OK)
			return atbi_store_sqlerr(s, rc, "check audit coverage", err);
		if ((rc = sqlite3_step(q)) == SQLITE_ROW)
			problem(rep, 0, "store", "%s '%s' has no audit entry", cov[i].what,
				(const char *)sqlite3_column_text(q, 0));
		sqlite3_finalize(q);
		if (rc != SQLITE_ROW && rc != SQLITE_DONE)
			return atbi_store_sqlerr(s, rc, "check audit coverage", err);
	}
	return ATB_OK;
}

/* ---- anchors: the head and the witness ---- */

/* The folder a path is in, resolved (the file itself need not exist). */
static int real_dir(const char *path, char *out, size_t size)
{
	char dir[4096], *slash, *r;

	snprintf(dir, sizeof(dir), "%s", path);
	slash = strrchr(dir, '/');
	if (slash)
		*slash = '\0';
	r = realpath(slash ? (dir[0] ? dir : "/") : ".", NULL);
	if (!r)
		return -1;
	snprintf(out, size, "%s", r);
	free(r);  /* realpath's malloc, not atb_malloc */
	return 0;
}

static enum atb_status witness_outside(const struct atb_store *s, const char *path,
				       struct atb_error *err)
{
	char wd[4096], sd[4096];

	if (real_dir(path, wd, sizeof(wd)))
		return atb_error_set(err, ATB_ERR_IO, "cannot open audit witness '%s': %s", path,
				     strerror(errno));
	if (real_dir(s->path, sd, sizeof(sd)))
		return atb_error_set(err, ATB_ERR_IO, "cannot resolve the folder of store '%s': %s",
				     s->path, strerror(errno));
	if (!strcmp(wd, sd))
		return atb_error_set(err, ATB_ERR_USAGE,
				     "audit witness '%s' is in the store's folder '%s': keep it elsewhere"
				     " (whoever can rewrite the store can rewrite it there too)",
				     path, sd);
	return ATB_OK;
}

enum atb_status atbi_audit_witness_setup(struct atb_store *s, const char *path,
					 struct atb_error *err)
{
	enum atb_status st;
	char wd[4096];

	if (!path || !*path)
		return ATB_OK;
	st = witness_outside(s, path, err);
	if (st)
		return st;
	s->witness_path = atb_strdup(path);
	if (!s->witness_path)
		return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	/* PROTO: sandbox -- no job may see the witness either */
	if (real_dir(path, wd, sizeof(wd)) == 0)
		atbi_sandbox_forbid(wd);
	return ATB_OK;
}

/* "SEQ:HASH" into seq and hash; 0 when well-formed. */
static int parse_anchor(const char *p, size_t len, int64_t *seq, char hash[65])
{
	size_t i = 0;
	int64_t v = 0;

	while (i < len && p[i] >= '0' && p[i] <= '9' && i < 18)
		v = v * 10 + (p[i++] - '0');
	if (i == 0 || i >= len || p[i] != ':' || len - i - 1 != 64 || v < 1)
		return -1;
	memcpy(hash, p + i + 1, 64);
	hash[64] = '\0';
	if (!atbi_is_sha256_hex(hash))
		return -1;
	*seq = v;
	return 0;
}

enum atb_status atb_audit_head(struct atb_store *s, int64_t *seq, char hash[65],
			       struct atb_error *err)
{
	sqlite3_stmt *q = NULL;
	int rc;

	*seq = 0;
	memcpy(hash, ATBI_GENESIS, 65);
	rc = sqlite3_prepare_v2(s->db, "SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1",
				-1, &q, NULL);
	if (rc == SQLITE_OK && (rc = sqlite3_step(q)) == SQLITE_ROW) {
		*seq = sqlite3_column_int64(q, 0);
		snprintf(hash, 65, "%s", (const char *)sqlite3_column_text(q, 1));
		rc = SQLITE_DONE;
	}
	sqlite3_finalize(q);
	if (rc != SQLITE_DONE)
		return atbi_store_sqlerr(s, rc, "read the audit chain", err);
	return ATB_OK;
}

/* The witness's lines, walked beside the store's entries. */
struct witness {
	char *buf;
	size_t len, at;     /* at: start of the next unread line */
	int64_t seq;        /* the current line's seq, 0 when none is left */
	char hash[65];
	int64_t lines;
	int bad;            /* a malformed line was met (its number in lines) */
};

static void witness_next(struct witness *w)
{
	const char *p, *nl;

	w->seq = 0;
	if (!w->buf || w->at >= w->len)
		return;
	p = w->buf + w->at;
	nl = memchr(p, '\n', w->len - w->at);
	if (!nl) {
		/* a partial last line: a crash while appending it */
		w->at = w->len;
		return;
	}
	w->at = (size_t)(nl + 1 - w->buf);
	w->lines++;
	if (parse_anchor(p, (size_t)(nl - p), &w->seq, w->hash))
		w->bad = 1;
}

static enum atb_status rows_of_entry(struct atb_store *s, int64_t seq, const char *kind,
				     const char *payload, int64_t migrated_seq,
				     struct atb_audit_report *rep, struct atb_error *err)
{
	char now[65], subject[160];
	json_t *pj, *rows;
	enum atb_status st;

	if (!atbi_rows_bound_kind(kind))
		return ATB_OK;
	atb_alloc_install_json();
	pj = json_loads(payload, 0, NULL);
	if (!pj)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot verify: out of memory");
	rows = json_object_get(pj, "rows");
	if (!json_is_string(rows)) {
		if (s->schema < 3 || (migrated_seq && seq < migrated_seq))
			rep->legacy_entries++;
		else
			problem(rep, seq, "db", "the %s entry has no hash of the rows it records"
				" (written after row hashes began: the entry was rewritten)", kind);
		json_decref(pj);
		return ATB_OK;
	}
	st = atbi_rows_hash(s, kind, pj, now, subject, sizeof(subject), err);
	if (st == ATB_OK) {
		rep->rows_checked++;
		if (strcmp(now, json_string_value(rows)))
			problem(rep, seq, "store", "%s: its rows differ from the hash this %s entry"
				" recorded (a row was edited, added or deleted)", subject, kind);
	}
	json_decref(pj);
	return st;
}

enum atb_status atb_audit_verify(struct atb_store *s, struct atb_audit_report *rep,
				 struct atb_error *err)
{
	struct atb_audit_verify_opts o = {NULL, getenv("ATB_AUDIT_WITNESS"), 0};

	if (o.witness && !*o.witness)
		o.witness = NULL;
	return atb_audit_verify_with(s, &o, rep, err);
}

enum atb_status atb_audit_verify_with(struct atb_store *s, const struct atb_audit_verify_opts *opts,
				      struct atb_audit_report *rep, struct atb_error *err)
{
	sqlite3_stmt *q = NULL;
	char *mbuf = NULL, *body = NULL, dbprev[65] = ATBI_GENESIS, mprev[65] = ATBI_GENESIS;
	char hex[65];
	size_t mlen = 0, blen;
	const char *mp, *mend, *why;
	struct hasher h = {0};
	struct atb_error ferr;
	enum atb_status st;
	int64_t k = 0;
	int rc, mirror_missing = 0;

	struct witness w;
	int witness_missing = 0;
	int64_t head_seq = 0, migrated_seq = 0;
	char head_hash[65] = "";

	memset(rep, 0, sizeof(*rep));
	memset(&w, 0, sizeof(w));
	rep->ok = 1;
	if (!opts)
		return atb_audit_verify(s, rep, err);
	if (opts->head && parse_anchor(opts->head, strlen(opts->head), &head_seq, head_hash))
		return atb_error_set(err, ATB_ERR_USAGE,
				     "head '%s' is not SEQ:HASH (a seq from 1, 64 lowercase hex)",
				     opts->head);
	if (opts->witness) {
		st = witness_outside(s, opts->witness, err);
		if (st)
			return st;
		atb_error_clear(&ferr);
		st = atbi_read_file(opts->witness, &w.buf, &w.len, &ferr);
		if (st == ATB_ERR_NOT_FOUND) {
			witness_missing = 1;
			st = ATB_OK;
		} else if (st) {
			if (err)
				*err = ferr;
			return st;
		}
		witness_next(&w);
	}
	/* Row hashes began at the migration from v2 (a later one, v3 -> v4, is no boundary). */
	rc = sqlite3_prepare_v2(s->db, "SELECT coalesce(min(seq), 0) FROM audit WHERE kind = '"
				ATBI_AUDIT_MIGRATED "' AND json_extract(payload, '$.from') < 3", -1,
				&q, NULL);
	if (rc == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW)
		migrated_seq = sqlite3_column_int64(q, 0);
	sqlite3_finalize(q);
	q = NULL;
	atb_error_clear(&ferr);
	st = atbi_read_file(s->mirror_path, &mbuf, &mlen, &ferr);
	if (st == ATB_ERR_NOT_FOUND) {
		mirror_missing = 1;
		st = ATB_OK;
	} else if (st) {
		if (err)
			*err = ferr;
		return st;
	}
	mp = mbuf ? mbuf : "";
	mend = mp + mlen;

	rc = sqlite3_prepare_v2(s->db, "SELECT seq, time, kind, payload, prev_hash, hash FROM audit"
				" ORDER BY seq", -1, &q, NULL);
	if (rc != SQLITE_OK) {
		st = atbi_store_sqlerr(s, rc, "read the audit chain", err);
		goto out;
	}
	while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
		int64_t seq = sqlite3_column_int64(q, 0);
		const char *t = (const char *)sqlite3_column_text(q, 1);
		const char *kind = (const char *)sqlite3_column_text(q, 2);
		const char *payload = (const char *)sqlite3_column_text(q, 3);
		const char *prev = (const char *)sqlite3_column_text(q, 4);
		const char *hash = (const char *)sqlite3_column_text(q, 5);
		const char *nl;
		struct mline m;

		k++;
		rep->db_entries = k;
		if (!rep->ok)
			continue;  /* count only */
		if (seq != k) {
			problem(rep, k, "db", "entry %" PRId64 " found where %" PRId64
				" belongs: an entry was deleted, inserted or reordered", seq, k);
			continue;
		}
		if (!t || !kind || !payload || !prev || !hash) {
			problem(rep, k, "db", "entry has a null column");
			continue;
		}
		atb_free(body);
		body = NULL;
		if (atbi_audit_body(seq, t, kind, payload, prev, &body, &blen) ||
		    hash_hex(&h, body, blen, hex)) {
			st = atb_error_set(err, ATB_ERR_NOMEM, "cannot verify: out of memory");
			goto out;
		}
		if (strcmp(prev, dbprev)) {
			problem(rep, k, "db", "prev_hash does not link to entry %" PRId64, k - 1);
			continue;
		}
		if (strcmp(hex, hash)) {
			problem(rep, k, "db", "hash does not match the entry's content (edited)");
			continue;
		}
		snprintf(dbprev, sizeof(dbprev), "%s", hash);

		/* The anchors kept outside the files. */
		if (head_seq == k && strcmp(head_hash, hash)) {
			problem(rep, k, "db", "hash %.12s... is not the published head %" PRId64
				":%.12s... (the chain was rewritten up to it)", hash, head_seq,
				head_hash);
			continue;
		}
		while (w.seq && w.seq < k && !w.bad)
			witness_next(&w);  /* lines out of order are caught below */
		if (w.bad) {
			problem(rep, k, "witness", "witness line %" PRId64 " is not SEQ:HASH",
				w.lines);
			continue;
		}
		if (w.seq == k) {
			if (strcmp(w.hash, hash)) {
				problem(rep, k, "witness", "hash %.12s... is not the witness's %.12s..."
					" (the chain was rewritten)", hash, w.hash);
				continue;
			}
			witness_next(&w);
		}
		if (!opts->chain_only) {
			st = rows_of_entry(s, k, kind, payload, migrated_seq, rep, err);
			if (st)
				goto out;
			if (!rep->ok)
				continue;
		}

		/* The mirror's entry k. */
		nl = mp < mend ? memchr(mp, '\n', (size_t)(mend - mp)) : NULL;
		if (!nl) {
			if (mirror_missing)
				problem(rep, k, "mirror", "mirror '%s' is missing", s->mirror_path);
			else
				problem(rep, k, "mirror", "mirror ends before this entry"
					" (truncated or deleted)");
			continue;
		}
		why = parse_line(mp, (size_t)(nl - mp), &m);
		if (!why && hash_hex(&h, m.body, m.blen, hex))
			why = "cannot hash";
		if (!why && memcmp(hex, m.hash, 64))
			why = "hash does not match the entry's bytes (edited)";
		if (!why && m.seq != k)
			why = "seq out of place: an entry was deleted, inserted or reordered";
		if (!why && memcmp(m.prev, mprev, 64))
			why = "prev_hash does not link to the previous entry";
		if (why) {
			problem(rep, k, "mirror", "%s", why);
			continue;
		}
		memcpy(mprev, m.hash, 64);
		if (m.blen != blen || memcmp(m.body, body, blen) || memcmp(m.hash, hash, 64)) {
			problem(rep, k, "both", "the mirror's entry differs from the store's");
			continue;
		}
		rep->mirror_entries = k;
		mp = nl + 1;
	}
	if (rc != SQLITE_DONE) {
		st = atbi_store_sqlerr(s, rc, "read the audit chain", err);
		goto out;
	}
	if (rep->ok && mp < mend) {
		/* The mirror goes on past the store. */
		const char *nl = memchr(mp, '\n', (size_t)(mend - mp));
		struct mline m;

		if (!nl) {
			note(rep, "the mirror ends with a partial line (a crash while appending);"
				  " the next read-write open drops it");
		} else {
			why = parse_line(mp, (size_t)(nl - mp), &m);
			if (!why && (hash_hex(&h, m.body, m.blen, hex) || memcmp(hex, m.hash, 64)))
				why = "hash does not match the entry's bytes";
			if (!why && (m.seq != k + 1 || memcmp(m.prev, mprev, 64)))
				why = "it does not continue the chain";
			if (why) {
				problem(rep, k + 1, "mirror", "entry the store lacks: %s", why);
			} else if (subject_in_store(s, &m)) {
				problem(rep, k + 1, "db", "entry missing from the store though its"
					" subject is there (deleted)");
			} else if (memchr(nl + 1, '\n', (size_t)(mend - nl - 1))) {
				problem(rep, k + 2, "mirror", "entries the store never had (inserted)");
			} else {
				rep->mirror_entries = k + 1;
				note(rep, "mirror entry %" PRId64 " was never committed to the store"
					  " (a crash before COMMIT); the next read-write open drops it",
				     k + 1);
				if (nl + 1 < mend)
					note(rep, "the mirror ends with a partial line (a crash while"
						  " appending)");
			}
		}
	}
	if (rep->ok && head_seq > k)
		problem(rep, head_seq, "db", "the chain ends at entry %" PRId64 ", before the"
			" published head %" PRId64 " (truncated)", k, head_seq);
	if (rep->ok && w.bad)
		problem(rep, k + 1, "witness", "witness line %" PRId64 " is not SEQ:HASH", w.lines);
	if (rep->ok && witness_missing && k > 0)
		problem(rep, 0, "witness", "witness '%s' does not exist (deleted, or no entry was"
			" appended while it was set)", opts->witness);
	if (rep->ok && w.seq) {
		int64_t last = w.seq;

		while (w.seq && !w.bad) {
			last = w.seq;
			witness_next(&w);
		}
		if (last == k + 1 && w.lines && rep->mirror_entries == k + 1)
			note(rep, "witness entry %" PRId64 " was never committed to the store (a crash"
				  " before COMMIT)", last);
		else
			problem(rep, k + 1, "witness", "the chain ends at entry %" PRId64 " but the"
				" witness saw entry %" PRId64 " (truncated)", k, last);
	}
	rep->head_seq = head_seq;
	rep->witness_lines = w.lines;
	if (rep->ok) {
		st = check_coverage(s, rep, err);
		if (st)
			goto out;
	}
	if (rep->ok && rep->legacy_entries)
		note(rep, "%" PRId64 " entr%s written before row hashes (schema 2) %s not bound to"
			  " the rows %s record%s", rep->legacy_entries,
		     rep->legacy_entries == 1 ? "y" : "ies", rep->legacy_entries == 1 ? "is" : "are",
		     rep->legacy_entries == 1 ? "it" : "they", rep->legacy_entries == 1 ? "s" : "");
	if (!rep->ok) {
		if (rep->bad_seq)
			st = atb_error_set(err, ATB_ERR_AUDIT, "audit entry %" PRId64 " (%s): %s",
					   rep->bad_seq, rep->bad_copy, rep->problem);
		else
			st = atb_error_set(err, ATB_ERR_AUDIT, "audit chain (%s): %s",
					   rep->bad_copy, rep->problem);
	}
out:
	sqlite3_finalize(q);
	hasher_free(&h);
	atb_free(body);
	atb_free(mbuf);
	atb_free(w.buf);
	return st;
}
