/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Audit verification throughput, against a reference measured in this run:
 *   1. the mirror alone (hash each line's stored body bytes, check seq and
 *      prev_hash by scanning from the end of the body) against plain
 *      SHA-256 of the same body bytes: the ratio is the cost of everything
 *      that is not hashing.  Target: >= 1,000,000 entries/s.
 *   2. atb_audit_verify on a store: both copies, entry by entry, plus the
 *      coverage queries, in entries/s: --chain-only (what verify did before
 *      issue 12: the new code's cost on entries that record no rows is the
 *      difference), the default, and with a witness of every entry.
 *   3. a store of real ingests (10 seeds x 2 arms x TRIALS samples each):
 *      verify with every ingest's rows re-hashed against --chain-only, in
 *      entries/s and re-hashed sample rows/s.
 *
 * Usage: bench-audit-verify [MIRROR_ENTRIES [STORE_ENTRIES [INGESTS [TRIALS]]]]
 *        (defaults 1000000 200000 200 100)
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

static double timed_verify(struct atb_store *s, const struct atb_audit_verify_opts *o,
			   size_t n)
{
	struct atb_audit_report rep;
	struct atb_error err;
	int64_t t0 = atbi_monotonic_ns();

	atb_error_clear(&err);
	if (atb_audit_verify_with(s, o, &rep, &err)) {
		fprintf(stderr, "bench-audit-verify: %s\n", err.msg);
		return 0;
	}
	return (double)n / ((double)(atbi_monotonic_ns() - t0) / 1e9);
}

/* rates[0] chain-only, [1] default, [2] with a witness of every entry (best of 3). */
static int verify_store(size_t n, double rates[3])
{
	char dir[] = "/tmp/atb-bench-audit.XXXXXX", path[128], wpath[128], cmd[320];
	struct atb_audit_verify_opts o[3] = {{NULL, NULL, 1}, {NULL, NULL, 0}, {NULL, NULL, 0}};
	struct atb_store *s = NULL;
	struct atb_error err;
	struct chain c = {0};
	sqlite3_stmt *q = NULL;
	int rc = 1, r, k;
	FILE *m, *w;

	if (!mkdtemp(dir))
		return 1;
	snprintf(path, sizeof(path), "%s/a.db", dir);
	/* The witness is kept outside the store's folder. */
	snprintf(wpath, sizeof(wpath), "%s.witness", dir);
	o[2].witness = wpath;
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
	w = fopen(wpath, "w");
	if (!w || sqlite3_prepare_v2(s->db, "SELECT seq, hash FROM audit ORDER BY seq", -1, &q,
				     NULL) != SQLITE_OK) {
		if (w)
			fclose(w);
		goto out;
	}
	while (sqlite3_step(q) == SQLITE_ROW)
		fprintf(w, "%lld:%s\n", (long long)sqlite3_column_int64(q, 0),
			(const char *)sqlite3_column_text(q, 1));
	sqlite3_finalize(q);
	fclose(w);
	atb_store_close(s);
	s = NULL;
	if (atb_store_open(path, ATB_STORE_READ_ONLY, &s, &err))
		goto out;
	for (k = 0; k < 3; k++)
		rates[k] = 0;
	for (r = 0; r < 3; r++)
		for (k = 0; k < 3; k++) {
			double x = timed_verify(s, &o[k], n);

			if (x <= 0)
				goto out;
			if (x > rates[k])
				rates[k] = x;
		}
	rc = 0;
out:
	atb_store_close(s);
	chain_free(&c);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", dir, wpath);
	if (system(cmd) != 0)
		fprintf(stderr, "bench-audit-verify: cannot remove %s\n", dir);
	return rc;
}

#define CANONICAL \
	"{\"gates\":{\"anomaly_breaker\":{\"factor\":10.0}},\"stats\":{\"cv_cap\":0.05," \
	"\"min_paired_seeds\":5},\"version\":1}"

/* A store of `jobs` real ingests; rates[0] chain-only, [1] rows re-hashed (best of 3). */
static int verify_ingests(int jobs, int trials, double rates[2], size_t *entries)
{
	char dir[] = "/tmp/atb-bench-audit.XXXXXX", path[128], cmd[160], digest[65], box[65];
	struct atb_audit_verify_opts o[2] = {{NULL, NULL, 1}, {NULL, NULL, 0}};
	size_t n = 20 * (size_t)trials, k = 0;
	struct atb_sample *x = malloc(n * sizeof(*x));
	struct atb_seed_result r[10];
	struct atb_frozen_protocol p;
	struct atb_store *s = NULL;
	struct atb_audit_report rep;
	struct atb_ingest in;
	struct atb_error err;
	int i, t, rc = 1, round;

	if (!x || !mkdtemp(dir)) {
		free(x);
		return 1;
	}
	for (i = 0; i < 10; i++) {
		for (t = 0; t < trials; t++) {
			x[k++] = (struct atb_sample){i, t, ATB_ARM_BASELINE, 1000.0 + (t % 7)};
			x[k++] = (struct atb_sample){i, t, ATB_ARM_CANDIDATE, 800.0 + (t % 5)};
		}
		r[i] = (struct atb_seed_result){i, 1003.0, 802.0, 1003.0 / 802.0};
	}
	memset(&p, 0, sizeof(p));
	p.version = 1;
	p.canonical_json = (char *)CANONICAL;
	atbi_sha256_hex(CANONICAL, strlen(CANONICAL), p.digest);
	memcpy(digest, p.digest, 65);
	atbi_sha256_hex("bench box", 9, box);
	snprintf(path, sizeof(path), "%s/a.db", dir);
	atb_error_clear(&err);
	if (atb_store_open(path, ATB_STORE_CREATE, &s, &err) ||
	    atb_store_sync_protocols(s, &p, 1, NULL, &err) ||
	    atb_store_register_box(s, box, "{\"cpu\":\"bench\"}", &err))
		goto out;
	memset(&in, 0, sizeof(in));
	in.kind = "kernel";
	in.task = "bench";
	in.candidate = "c";
	in.protocol_digest = digest;
	in.box_fingerprint = box;
	in.unit = "ns";
	in.metric = "time_ns/median";
	in.samples = x;
	in.nsamples = n;
	in.seeds = r;
	in.nseeds = 10;
	in.speedup = 1003.0 / 802.0;
	in.ci_low = in.speedup * 0.99;
	in.ci_high = in.speedup * 1.01;
	for (i = 0; i < jobs; i++)
		if (atb_store_ingest(s, &in, NULL, &err))
			goto out;
	atb_store_close(s);
	s = NULL;
	if (atb_store_open(path, ATB_STORE_READ_ONLY, &s, &err) || atb_audit_verify(s, &rep, &err))
		goto out;
	*entries = (size_t)rep.db_entries;
	rates[0] = rates[1] = 0;
	for (round = 0; round < 3; round++)
		for (i = 0; i < 2; i++) {
			double v = timed_verify(s, &o[i], *entries);

			if (v <= 0)
				goto out;
			if (v > rates[i])
				rates[i] = v;
		}
	rc = 0;
out:
	if (rc && err.msg[0])
		fprintf(stderr, "bench-audit-verify: %s\n", err.msg);
	atb_store_close(s);
	free(x);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "bench-audit-verify: cannot remove %s\n", dir);
	return rc;
}

int main(int argc, char **argv)
{
	size_t n = argc > 1 ? (size_t)strtoul(argv[1], NULL, 10) : 1000000;
	size_t ns = argc > 2 ? (size_t)strtoul(argv[2], NULL, 10) : 200000;
	int jobs = argc > 3 ? (int)strtol(argv[3], NULL, 10) : 200;
	int trials = argc > 4 ? (int)strtol(argv[4], NULL, 10) : 100;
	struct chain c = {0};
	double ref, mir, ref2, mir2, st[3], ing[2], per;
	size_t ne = 0;

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
	if (jobs < 1 || trials < 1 || verify_store(ns, st) || verify_ingests(jobs, trials, ing, &ne))
		return 1;
	printf("audit verify: %zu entries, %.0f bytes per mirror line\n", n, per);
	printf("  mirror verify (hash + seq + links):      %12.0f entries/s\n", mir);
	printf("  reference: SHA-256 of the same bytes:    %12.0f entries/s\n", ref);
	printf("  ratio verify/reference:                  %12.2f\n", mir / ref);
	printf("  target >= 1000000 entries/s:             %12s\n", mir >= 1e6 ? "met" : "NOT MET");
	printf("store + mirror, %zu entries recording no rows (best of 3):\n", ns);
	printf("  --chain-only (the pre-issue-12 checks):  %12.0f entries/s\n", st[0]);
	printf("  default (rows of recording kinds):       %12.0f entries/s\n", st[1]);
	printf("  with a witness of every entry:           %12.0f entries/s\n", st[2]);
	printf("  ratio default/chain-only:                %12.2f\n", st[1] / st[0]);
	printf("store + mirror, %d ingests of %d sample rows (%zu entries, best of 3):\n", jobs,
	       20 * trials, ne);
	printf("  --chain-only:                            %12.0f entries/s\n", ing[0]);
	printf("  rows re-hashed:                          %12.0f entries/s (%.0f sample rows/s)\n",
	       ing[1], ing[1] * 20 * trials * (double)jobs / (double)ne);
	return (int)(sink & 0);
}
