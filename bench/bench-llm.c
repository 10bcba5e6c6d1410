/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * bench-llm: what atb's model-call client costs per call, as ratios
 * measured in one run against one server.
 *
 * The same chat completion (one short prompt) is asked N times each way,
 * the ways interleaved call by call so that drift hits all of them:
 *   curl    curl(1) in a fresh process, POSTing the exact body atb sends
 *   client  atb_llm_call in this process, nothing recorded
 *   record  atb_llm_call recording every call (llm_call row, audit entry,
 *           fsync'ed mirror line) in a temporary store
 * Prints the median wall time per call of each, and client/curl and
 * record/client.  Against a model the model's time dwarfs all of it; the
 * point is the client's own share.
 *
 * usage: bench-llm URL MODEL [N]   (default N 50; URL without /v1)
 * e.g. against the test double: python3 tests/cli/llm-double.py S LOG PORTFILE.
 * A server whose replies all truncate halts the recorded run after 4 calls
 * (the alarm, docs/llm.md): bench with one that answers.
 *
 * Measured 2026-12-01 on the 2-core dev box at load 15-16, against the test
 * double: curl(1) 27.7 ms a call, the client 3.18 ms (0.115 of curl), the
 * client recording every call 8.22 ms (+5.0 ms: the transaction, the audit
 * entry and its fsync).
 */
#define _GNU_SOURCE
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "atb/alloc.h"
#include "atb/llm.h"
#include "atb/protocol.h"
#include "atb/store.h"
#include "util.h"
#include "banned.h"

extern char **environ;

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_d);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double curl_once(const char *url, const char *body)
{
	char *argv[] = {"curl", "-s", "-o", "/dev/null", "-H", "Content-Type: application/json",
			"--data-binary", (char *)body, (char *)url, NULL};
	int64_t t0 = atbi_monotonic_ns();
	pid_t pid;
	int ws;

	if (posix_spawnp(&pid, "curl", NULL, NULL, argv, environ))
		return -1;
	if (waitpid(pid, &ws, 0) < 0 || !WIFEXITED(ws) || WEXITSTATUS(ws))
		return -1;
	return (double)(atbi_monotonic_ns() - t0) / 1e9;
}

static double call_once(struct atb_llm_client *c, const struct atb_llm_request *rq)
{
	struct atb_llm_result r;
	struct atb_error err;
	int64_t t0 = atbi_monotonic_ns();
	enum atb_status st = atb_llm_call(c, rq, &r, &err);
	double t = (double)(atbi_monotonic_ns() - t0) / 1e9;

	atb_llm_result_release(&r);
	if (st) {
		fprintf(stderr, "bench-llm: %s\n", err.msg);
		return -1;
	}
	return t;
}

int main(int argc, char **argv)
{
	struct atb_llm_config cfg;
	struct atb_llm_client_opts o;
	struct atb_llm_client *plain = NULL, *rec = NULL;
	struct atb_protocol *p = NULL;
	struct atb_store *s = NULL;
	struct atb_llm_request rq = {.prompt = "Reply with: pong"};
	struct atb_error err;
	char dir[] = "/tmp/atb-bench-llm.XXXXXX", db[128], url[600], body[1024], cmd[200];
	double *tc, *tp, *tr, mc, mp, mr;
	int n = argc > 3 ? (int)strtol(argv[3], NULL, 10) : 50, i;

	if (argc < 3 || n < 3) {
		fprintf(stderr, "usage: bench-llm URL MODEL [N]\n");
		return 2;
	}
	if (!mkdtemp(dir))
		return 3;
	snprintf(db, sizeof(db), "%s/b.db", dir);
	atb_error_clear(&err);
	if (atb_llm_config_load(NULL, &cfg, &err) || atb_protocol_load_current(NULL, &p, &err) ||
	    atb_store_open(db, ATB_STORE_CREATE, &s, &err)) {
		fprintf(stderr, "bench-llm: %s\n", err.msg);
		return 3;
	}
	snprintf(cfg.base_url, sizeof(cfg.base_url), "%s", argv[1]);
	snprintf(cfg.model, sizeof(cfg.model), "%s", argv[2]);
	cfg.max_attempts = 1;
	memset(&o, 0, sizeof(o));
	o.cfg = &cfg;
	o.protocol = p;
	if (atb_llm_client_new(&o, &plain, &err))
		goto fail;
	o.store = s;
	o.run = "bench";
	if (atb_llm_client_new(&o, &rec, &err))
		goto fail;
	/* the exact bytes atb sends: canonical, as the request hash is taken */
	snprintf(body, sizeof(body), "{\"max_tokens\":%d,\"messages\":[{\"content\":\"%s\","
		 "\"role\":\"user\"}],\"model\":\"%s\",\"temperature\":0.0}",
		 p->llm.max_output_tokens, rq.prompt, cfg.model);
	snprintf(url, sizeof(url), "%s/v1/chat/completions", argv[1]);
	tc = calloc((size_t)n, sizeof(double));
	tp = calloc((size_t)n, sizeof(double));
	tr = calloc((size_t)n, sizeof(double));
	for (i = 0; i < n; i++) {
		tc[i] = curl_once(url, body);
		tp[i] = call_once(plain, &rq);
		tr[i] = call_once(rec, &rq);
		if (tc[i] < 0 || tp[i] < 0 || tr[i] < 0) {
			fprintf(stderr, "bench-llm: call %d failed\n", i);
			return 3;
		}
	}
	mc = median(tc, n);
	mp = median(tp, n);
	mr = median(tr, n);
	printf("calls per way: %d (interleaved)\n", n);
	printf("curl(1), a process a call:  %8.3f ms\n", mc * 1e3);
	printf("atb client, not recorded:   %8.3f ms   client/curl %.3f\n", mp * 1e3, mp / mc);
	printf("atb client, recorded:       %8.3f ms   record/client %.3f (+%.3f ms a call)\n",
	       mr * 1e3, mr / mp, (mr - mp) * 1e3);
	atb_llm_client_free(plain);
	atb_llm_client_free(rec);
	atb_store_close(s);
	atb_protocol_free(p);
	atb_llm_config_release(&cfg);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) ? 3 : 0;
fail:
	fprintf(stderr, "bench-llm: %s\n", err.msg);
	return 3;
}
