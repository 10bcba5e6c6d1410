/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Audit verification throughput, against a reference measured in this run:
 *   1. the mirror alone (hash each line's stored body bytes, check seq and
 *      prev_hash by scanning from the end of the body) against plain
 *      SHA-256 of the same body bytes: the ratio is the cost of everything
 *      that is not hashing.  Target: >= 1,000,000 entries/s.
 *   2. atb_audit_verify on a store: both copies, entry by entry, plus the
 *      coverage queries, in entries/s.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "atb/alloc.h"
#include "atb/audit.h"
#include "atb/store.h"
#include "store/store_int.h"
#include "util.h"
#include "banned.h"

struct chain {
	char *buf;       /* the mirror */
	size_t len;
	size_t *boff;    /* body offset and length per entry */
	size_t *blen;
};

/* n entries of a realistic ingest payload. */
static int build(struct chain *c, size_t n, sqlite3 *db, FILE *mirror)
{
	char prev[65] = ATBI_GENESIS, hash[65], payload[256], t[40];
	size_t cap = n * 640 + 1, i;
	sqlite3_stmt *q = NULL;
	char *body;
	size_t bl;

	c->buf = malloc(cap);
	c->boff = malloc(n * sizeof(size_t));
	c->blen = malloc(n * sizeof(size_t));
	c->len = 0;
	if (!c->buf || !c->boff || !c->blen)
		return 1;
	if (db && sqlite3_prepare_v2(db, "INSERT INTO audit VALUES (?, ?, ?, ?, ?, ?)", -1, &q,
				     NULL) != SQLITE_OK)
		return 1;
	atbi_audit_time(t, sizeof(t));
	for (i = 0; i < n; i++) {
		snprintf(payload, sizeof(payload),
			 "{\"box\":\"%.64s\",\"job\":\"%032zx\",\"kind\":\"kernel\",\"n_seeds\":10,"
			 "\"result\":%zu,\"speedup\":1.2345678901234567,\"status\":\"admitted\"}",
			 prev, i * 2654435761u, i + 1);
		if (atbi_audit_body((int64_t)i + 1, t, "bench.event", payload, prev, &body, &bl))
			return 1;
		atbi_sha256_hex(body, bl, hash);
		c->boff[i] = c->len + 9;
		c->blen[i] = bl;
		c->len += (size_t)snprintf(c->buf + c->len, cap - c->len,
					   "{\"entry\":%s,\"hash\":\"%s\"}\n", body, hash);
		if (q) {
			sqlite3_bind_int64(q, 1, (sqlite3_int64)i + 1);
			sqlite3_bind_text(q, 2, t, -1, SQLITE_STATIC);
			sqlite3_bind_text(q, 3, "bench.event", -1, SQLITE_STATIC);
			sqlite3_bind_text(q, 4, payload, -1, SQLITE_STATIC);
			sqlite3_bind_text(q, 5, prev, -1, SQLITE_STATIC);
			sqlite3_bind_text(q, 6, hash, -1, SQLITE_STATIC);
			if (sqlite3_step(q) != SQLITE_DONE)
				return 1;
			sqlite3_reset(q);
		}
		memcpy(prev, hash, 65);
		atb_free(body);
	}
	sqlite3_finalize(q);
	if (mirror && fwrite(c->buf, 1, c->len, mirror) != c->len)
		return 1;
	return 0;
}

static void chain_free(struct chain *c)
{
	free(c->buf);
	free(c->boff);
	free(c->blen);
}

static unsigned char sink;

static double reference_sha(const struct chain *c, size_t n)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	/* The best use of libcrypto: one fetch, one reused context (as verify does). */
	EVP_MD *sha = EVP_MD_fetch(NULL, "SHA256", NULL);
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen;
	int64_t t0 = atbi_monotonic_ns();
	size_t i;

	for (i = 0; i < n; i++) {
		EVP_DigestInit_ex(ctx, sha, NULL);
		EVP_DigestUpdate(ctx, c->buf + c->boff[i], c->blen[i]);
		EVP_DigestFinal_ex(ctx, md, &mdlen);
		sink ^= md[0];
	}
	EVP_MD_CTX_free(ctx);
	EVP_MD_free(sha);
	return (double)n / ((double)(atbi_monotonic_ns() - t0) / 1e9);
}

static double verify_mirror(const struct chain *c, size_t n)
{
	int64_t got = 0, bad = 0, t0 = atbi_monotonic_ns();
	char problem[256];
	int partial;

	if (atbi_audit_verify_buffer(c->buf, c->len, &got, &partial, &bad, problem,
				     sizeof(problem)) || (size_t)got != n) {
		fprintf(stderr, "bench-audit-verify: entry %" PRId64 ": %s\n", bad, problem);
		return 0;
	}
	return (double)n / ((double)(atbi_monotonic_ns() - t0) / 1e9);
}

static double verify_store(size_t n)
{
	char dir[] = "/tmp/atb-bench-audit.XXXXXX", path[128], cmd[160];
	struct atb_store *s = NULL;
	struct atb_audit_report rep;
	struct atb_error err;
	struct chain c = {0};
	double rate = 0;
	int64_t t0;
	FILE *m;

	if (!mkdtemp(dir))
		return 0;
	snprintf(path, sizeof(path), "%s/a.db", dir);
	if (atb_store_open(path, ATB_STORE_CREATE, &s, &err))
		goto out;
	m = fopen(atb_store_mirror_path(s), "wb");
	if (!m)
		goto out;
	sqlite3_exec(s->db, "BEGIN", NULL, NULL, NULL);
	if (build(&c, n, s->db, m)) {
		fclose(m);
		goto out;
	}
	sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL);
	fclose(m);
	atb_store_close(s);
	s = NULL;
	if (atb_store_open(path, ATB_STORE_READ_ONLY, &s, &err))
		goto out;
	t0 = atbi_monotonic_ns();
	if (atb_audit_verify(s, &rep, &err)) {
		fprintf(stderr, "bench-audit-verify: %s\n", err.msg);
		goto out;
	}
	rate = (double)n / ((double)(atbi_monotonic_ns() - t0) / 1e9);
out:
	atb_store_close(s);
	chain_free(&c);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "bench-audit-verify: cannot remove %s\n", dir);
	return rate;
}

int main(int argc, char **argv)
{
	size_t n = argc > 1 ? (size_t)strtoul(argv[1], NULL, 10) : 1000000;
	size_t ns = argc > 2 ? (size_t)strtoul(argv[2], NULL, 10) : 200000;
	struct chain c = {0};
	double ref, mir, ref2, mir2, st, per;

	if (build(&c, n, NULL, NULL)) {
		fprintf(stderr, "bench-audit-verify: cannot build the chain\n");
		return 1;
	}
	ref = reference_sha(&c, n);
	mir = verify_mirror(&c, n);
	ref2 = reference_sha(&c, n);
	mir2 = verify_mirror(&c, n);
	ref = (ref + ref2) / 2;
	mir = (mir + mir2) / 2;
	per = (double)c.len / (double)n;
	chain_free(&c);
	if (mir <= 0)
		return 1;
	st = verify_store(ns);
	printf("audit verify: %zu entries, %.0f bytes per mirror line\n", n, per);
	printf("  mirror verify (hash + seq + links):      %12.0f entries/s\n", mir);
	printf("  reference: SHA-256 of the same bytes:    %12.0f entries/s\n", ref);
	printf("  ratio verify/reference:                  %12.2f\n", mir / ref);
	printf("  target >= 1000000 entries/s:             %12s\n", mir >= 1e6 ? "met" : "NOT MET");
	printf("  store + mirror (atb_audit_verify, %zu):  %12.0f entries/s\n", ns, st);
	return (int)(sink & 0);
}
