/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * bench-loadgen: the load generator's own ceiling, as ratios measured in
 * one run.
 *
 * 1. Sustained requests/s of atb's client (closed loop, non-streaming)
 *    against a trivially fast local server, nginx on loopback answering
 *    every POST with a fixed completion JSON (`return 200 '...'`), started
 *    here in a temporary folder on a free port; and, in the same run
 *    against the same server, wrk (-t1 -cC -dDs, a POST script).  Prints
 *    both and atb/wrk.  Both use one thread.
 * 2. Per-token receive cost: the client's receive path (timestamp, SSE
 *    split, jansson parse, text append, token time) over a canned stream
 *    of completion chunks, per event, against the reference of jansson
 *    parsing the same events alone.  Prints ns/event and the ratio.
 * 3. Per-token timestamp overhead over loopback: a server started here
 *    sends one canned stream of 20000 completion events; atb's streaming
 *    client (a time per token, SSE split, JSON per event, text) reads it,
 *    and, interleaved in the same run, libcurl reads the same bytes and
 *    throws them away (no per-token work).  Prints both medians, the
 *    difference per token and the ratio.
 *
 * usage: bench-loadgen [SECONDS [CONNECTIONS]]   (default 5 16)
 * Needs nginx and wrk (scripts/install-bench-deps.sh); part 1 is skipped,
 * with the reason printed, without them.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "atb/alloc.h"
#include "atb/loadgen.h"
#include "loadgen/loadgen_int.h"
#include "banned.h"

static const char completion_json[] =
	"{\"id\":\"x\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,"
	"\"text\":\" ok\",\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":8,"
	"\"completion_tokens\":1,\"total_tokens\":9}}";

static int free_port(void)
{
	struct sockaddr_in a = {0};
	socklen_t alen = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;

	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) ||
	    getsockname(fd, (struct sockaddr *)&a, &alen))
		return -1;
	port = ntohs(a.sin_port);
	close(fd);
	return port;
}

static int port_open(int port)
{
	struct sockaddr_in a = {0};
	int fd = socket(AF_INET, SOCK_STREAM, 0), ok;

	a.sin_family = AF_INET;
	a.sin_port = htons((unsigned short)port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ok = fd >= 0 && !connect(fd, (struct sockaddr *)&a, sizeof(a));
	if (fd >= 0)
		close(fd);
	return ok;
}

static int write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return -1;
	fputs(text, f);
	return fclose(f);
}

static pid_t start_nginx(const char *dir, int port)
{
	char conf[8192], path[512];
	pid_t pid;
	int i;

	snprintf(conf, sizeof(conf),
		 "worker_processes 1;\n"
		 "daemon off;\n"
		 "master_process off;\n"
		 "pid %s/nginx.pid;\n"
		 "error_log %s/error.log;\n"
		 "events { worker_connections 4096; }\n"
		 "http {\n"
		 "  access_log off;\n"
		 "  client_body_temp_path %s/body;\n"
		 "  proxy_temp_path %s/proxy;\n"
		 "  fastcgi_temp_path %s/fastcgi;\n"
		 "  uwsgi_temp_path %s/uwsgi;\n"
		 "  scgi_temp_path %s/scgi;\n"
		 "  keepalive_requests 100000000;\n"
		 "  server {\n"
		 "    listen 127.0.0.1:%d;\n"
		 "    location / { default_type application/json; return 200 '%s'; }\n"
		 "  }\n"
		 "}\n",
		 dir, dir, dir, dir, dir, dir, dir, port, completion_json);
	snprintf(path, sizeof(path), "%s/nginx.conf", dir);
	if (write_file(path, conf))
		return -1;
	pid = fork();
	if (pid == 0) {
		execl("/usr/sbin/nginx", "nginx", "-p", dir, "-c", path, (char *)NULL);
		_exit(127);
	}
	for (i = 0; pid > 0 && i < 100; i++) {
		if (port_open(port))
			return pid;
		usleep(50000);
	}
	if (pid > 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	return -1;
}

static double run_wrk(const char *dir, int port, int seconds, int conns)
{
	char lua[1024], path[512], cmd[1024], line[512];
	double rps = -1;
	FILE *p;

	snprintf(lua, sizeof(lua),
		 "wrk.method = \"POST\"\n"
		 "wrk.headers[\"Content-Type\"] = \"application/json\"\n"
		 "wrk.body = '{\"model\":\"default\",\"prompt\":\"the of and to in\","
		 "\"max_tokens\":1,\"temperature\":0,\"stream\":false}'\n");
	snprintf(path, sizeof(path), "%s/post.lua", dir);
	if (write_file(path, lua))
		return -1;
	snprintf(cmd, sizeof(cmd),
		 "wrk -t1 -c%d -d%ds -s %s http://127.0.0.1:%d/v1/completions 2>&1", conns,
		 seconds, path, port);
	p = popen(cmd, "r");
	if (!p)
		return -1;
	while (fgets(line, sizeof(line), p))
		if (!strncmp(line, "Requests/sec:", 13))
			rps = strtod(line + 13, NULL);
	pclose(p);
	return rps;
}

static double run_atb(int port, double seconds, int conns, size_t *failed)
{
	struct atb_loadgen_config cfg;
	struct atb_loadgen_result *res;
	struct atb_error err;
	char url[64];
	double rps;
	const struct atb_loadgen_summary *s;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
	atb_loadgen_config_init(&cfg);
	cfg.url = url;
	cfg.stream = 0;
	cfg.concurrency = (size_t)conns;
	cfg.input_len.a = 5;
	cfg.output_len.a = 1;
	cfg.timeout_s = 10;
	/* calibrate: a short run, then one of about `seconds` */
	cfg.requests = 2000;
	if (atb_loadgen_run(&cfg, &res, &err)) {
		fprintf(stderr, "bench-loadgen: %s\n", err.msg);
		return -1;
	}
	rps = atb_loadgen_result_summary(res)->requests_per_s;
	atb_loadgen_result_free(res);
	cfg.requests = (size_t)(rps * seconds) + 1;
	cfg.seed = 1;
	if (atb_loadgen_run(&cfg, &res, &err)) {
		fprintf(stderr, "bench-loadgen: %s\n", err.msg);
		return -1;
	}
	s = atb_loadgen_result_summary(res);
	rps = s->requests_per_s;
	*failed = s->failed;
	atb_loadgen_result_free(res);
	return rps;
}

static void bench_server(int seconds, int conns)
{
	char dir[] = "/tmp/atb-bench-loadgen-XXXXXX", cmd[600];
	int port;
	pid_t nginx;
	double atb_rps, wrk_rps;
	size_t failed = 0;

	if (access("/usr/sbin/nginx", X_OK) || system("command -v wrk >/dev/null 2>&1")) {
		printf("server ceiling: skipped: nginx or wrk missing "
		       "(scripts/install-bench-deps.sh)\n");
		return;
	}
	if (!mkdtemp(dir) || (port = free_port()) < 0 || (nginx = start_nginx(dir, port)) < 0) {
		printf("server ceiling: skipped: cannot start nginx (%s)\n", strerror(errno));
		return;
	}
	/* interleaved: wrk, atb, wrk, atb; the best of each (drift hits both) */
	wrk_rps = run_wrk(dir, port, seconds, conns);
	atb_rps = run_atb(port, seconds, conns, &failed);
	{
		double w2 = run_wrk(dir, port, seconds, conns);
		size_t f2 = 0;
		double a2 = run_atb(port, seconds, conns, &f2);

		printf("server ceiling runs: wrk %.0f, %.0f req/s; atb %.0f, %.0f req/s\n",
		       wrk_rps, w2, atb_rps, a2);
		wrk_rps = w2 > wrk_rps ? w2 : wrk_rps;
		atb_rps = a2 > atb_rps ? a2 : atb_rps;
		failed += f2;
	}
	printf("server ceiling: nginx on loopback, closed loop, %d connections, %d s, one thread "
	       "each\n", conns, seconds);
	printf("  wrk  %10.0f req/s\n", wrk_rps);
	printf("  atb  %10.0f req/s  (failed requests: %zu)\n", atb_rps, failed);
	if (wrk_rps > 0 && atb_rps > 0)
		printf("  atb/wrk  %.3f\n", atb_rps / wrk_rps);
	kill(nginx, SIGTERM);
	waitpid(nginx, NULL, 0);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd))
		fprintf(stderr, "bench-loadgen: cannot remove %s\n", dir);
}

/* A canned stream of n completion chunks, usage and [DONE]. */
static char *canned_stream(size_t n, size_t *len)
{
	size_t cap = n * 200 + 512, off = 0, i;
	char *s = atb_malloc(cap);

	for (i = 0; s && i < n; i++)
		off += (size_t)snprintf(s + off, cap - off,
					"data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\","
					"\"created\":1700000000,\"model\":\"m\",\"choices\":[{\"index\":0,"
					"\"text\":\" w%zu\",\"logprobs\":null,\"finish_reason\":%s}]}\n\n",
					i, i + 1 == n ? "\"length\"" : "null");
	if (s)
		off += (size_t)snprintf(s + off, cap - off,
					"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":8,"
					"\"completion_tokens\":%zu}}\n\ndata: [DONE]\n\n", n);
	*len = off;
	return s;
}

static int parse_only(void *ctx, const char *data, size_t len)
{
	json_t *o = json_loadb(data, len, 0, NULL);

	*(size_t *)ctx += o != NULL;
	json_decref(o);
	return 0;
}

static void bench_events(void)
{
	enum { N = 20000, REPS = 5 };
	struct atb_loadgen_config cfg;
	struct atb_loadgen_record rec;
	struct atb_error err;
	size_t len, events = 0, r;
	char *s = canned_stream(N, &len);
	int64_t best_full = INT64_MAX, best_ref = INT64_MAX;

	if (!s)
		return;
	atb_loadgen_config_init(&cfg);
	atb_alloc_install_json();
	for (r = 0; r < REPS; r++) {
		int64_t t0 = atbi_monotonic_ns(), t1;
		size_t i = 0, p = 0;

		if (atbi_loadgen_replay_stream(&cfg, s, len, 16384, &rec, &err) ||
		    rec.ntoken_ns != N || rec.failure) {
			printf("per-token cost: replay failed: %s %s\n", err.msg, rec.error);
			atbi_loadgen_record_release(&rec);
			break;
		}
		t1 = atbi_monotonic_ns();
		atbi_loadgen_record_release(&rec);
		if (t1 - t0 < best_full)
			best_full = t1 - t0;
		/* reference: jansson parse of each event, events already split */
		t0 = atbi_monotonic_ns();
		while (i < len) {
			const char *e = strstr(s + i, "\n\n");

			parse_only(&events, s + i + 6, (size_t)(e - s - i - 6));
			i = (size_t)(e - s) + 2;
			p++;
		}
		t1 = atbi_monotonic_ns();
		if (t1 - t0 < best_ref)
			best_ref = t1 - t0;
		(void)p;
	}
	atb_free(s);
	if (best_full == INT64_MAX)
		return;
	printf("per-token cost: %d events of a canned completions stream, 16 KiB pieces, "
	       "best of %d\n", N, REPS);
	printf("  atb receive path  %8.0f ns/event (timestamp, SSE, JSON, text, token time)\n",
	       (double)best_full / (N + 2));
	printf("  jansson parse     %8.0f ns/event (reference)\n", (double)best_ref / (N + 2));
	printf("  receive/parse     %.3f\n", (double)best_full / (double)best_ref);
}

/* ---- 3. per-token overhead over loopback: the same stream, read two ways ---- */

/*
 * A one-purpose HTTP server in a child process: every request on 127.0.0.1
 * gets the canned stream as one text/event-stream body, then the
 * connection is closed.  Both readers below get the same bytes from it.
 */
static pid_t start_stream_server(const char *body, size_t len, int *port)
{
	struct sockaddr_in a = {0};
	socklen_t alen = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	pid_t pid;

	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 64) ||
	    getsockname(fd, (struct sockaddr *)&a, &alen)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	*port = ntohs(a.sin_port);
	pid = fork();
	if (pid != 0) {
		close(fd);
		return pid;
	}
	for (;;) {
		char req[65536], head[256];
		size_t got = 0, off;
		ssize_t n;
		int c = accept(fd, NULL, NULL);
		const char *end = NULL;

		if (c < 0)
			continue;
		/* headers, then Content-Length bytes of body */
		while (got < sizeof(req) - 1 && (n = read(c, req + got, sizeof(req) - 1 - got)) > 0) {
			const char *cl;

			got += (size_t)n;
			req[got] = '\0';
			end = strstr(req, "\r\n\r\n");
			cl = strcasestr(req, "content-length:");
			if (end && (!cl || got >= (size_t)(end - req) + 4 +
					    strtoul(cl + 15, NULL, 10)))
				break;
		}
		n = snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Type: "
			     "text/event-stream\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
			     len);
		if (write(c, head, (size_t)n) == n)
			for (off = 0; off < len && (n = write(c, body + off, len - off)) > 0;)
				off += (size_t)n;
		close(c);
	}
}

/*
 * This process's CPU time, ns: the per-token cost without the time other
 * work on a shared box takes from it (the wall times beside it include
 * that).  Not a timing of the measured system: bench-only.
 */
static int64_t cpu_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static size_t discard(char *p, size_t size, size_t n, void *ctx)
{
	(void)p;
	*(size_t *)ctx += size * n;
	return size * n;
}

/* Reference: one POST with libcurl, the body read and thrown away; ms, or -1; *cpu_ms. */
static double read_plain_ms(const char *url, size_t want, double *cpu_ms)
{
	CURL *h = curl_easy_init();
	size_t got = 0;
	int64_t t0, c0;
	double ms;
	CURLcode rc;

	if (!h)
		return -1;
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_POSTFIELDS,
			 "{\"model\":\"default\",\"prompt\":\"x\",\"stream\":true}");
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &got);
	curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 16384L);
	c0 = cpu_ns();
	t0 = atbi_monotonic_ns();
	rc = curl_easy_perform(h);
	ms = (double)(atbi_monotonic_ns() - t0) / 1e6;
	*cpu_ms = (double)(cpu_ns() - c0) / 1e6;
	curl_easy_cleanup(h);
	return rc == CURLE_OK && got == want ? ms : -1;
}

/*
 * atb's streaming client on the same stream: e2e median of n requests, ms,
 * or -1; *cpu_ms: the run's CPU time per request (set-up included).
 */
static double read_atb_ms(const char *base, size_t tokens, size_t n, double *cpu_ms)
{
	struct atb_loadgen_config cfg;
	struct atb_loadgen_result *res;
	const struct atb_loadgen_summary *s;
	struct atb_error err;
	double ms = -1;
	int64_t c0 = cpu_ns();

	atb_loadgen_config_init(&cfg);
	cfg.url = base;
	cfg.stream = 1;
	cfg.reuse_connections = 0;
	cfg.requests = n;
	cfg.input_len.a = 1;
	cfg.output_len.a = (double)tokens;
	cfg.timeout_s = 60;
	if (atb_loadgen_run(&cfg, &res, &err)) {
		fprintf(stderr, "bench-loadgen: %s\n", err.msg);
		return -1;
	}
	*cpu_ms = (double)(cpu_ns() - c0) / 1e6 / (double)n;
	s = atb_loadgen_result_summary(res);
	if (s->completed == n && s->tokens_out == (long)(tokens * n))
		ms = s->e2e_ms.median;
	else
		fprintf(stderr, "bench-loadgen: stream: %zu of %zu completed, %ld tokens\n",
			s->completed, n, s->tokens_out);
	atb_loadgen_result_free(res);
	return ms;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/*
 * Per-token timestamp overhead: the cost of atb's per-token work (an
 * arrival time per token, SSE split, JSON parse of each event, text
 * append) over loopback, against the same stream read by libcurl with no
 * per-token work, in the same run, interleaved round by round.
 */
static double median_sorted(double *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void bench_stream_overhead(void)
{
	enum { N = 20000, ROUNDS = 7, PER = 3 };
	double plain[ROUNDS * PER], plain_cpu[ROUNDS * PER], full[ROUNDS], full_cpu[ROUNDS];
	double p, f, pc, fc;
	char base[64], url[96];
	size_t len, np = 0, nf = 0, r, k;
	char *body = canned_stream(N, &len);
	int port = 0;
	pid_t srv;

	if (!body)
		return;
	srv = start_stream_server(body, len, &port);
	if (srv < 0) {
		printf("per-token overhead over loopback: not measured: cannot start the server (%s)\n",
		       strerror(errno));
		atb_free(body);
		return;
	}
	snprintf(base, sizeof(base), "http://127.0.0.1:%d", port);
	snprintf(url, sizeof(url), "%s/v1/completions", base);
	for (r = 0; r < ROUNDS; r++) {
		for (k = 0; k < PER; k++) {
			double c, x = read_plain_ms(url, len, &c);

			if (x > 0) {
				plain_cpu[np] = c;
				plain[np++] = x;
			}
		}
		f = read_atb_ms(base, N, PER, &fc);
		if (f > 0) {
			full_cpu[nf] = fc;
			full[nf++] = f;
		}
	}
	kill(srv, SIGKILL);
	waitpid(srv, NULL, 0);
	atb_free(body);
	if (!np || !nf) {
		printf("per-token overhead over loopback: not measured: a reader failed\n");
		return;
	}
	p = median_sorted(plain, np);
	pc = median_sorted(plain_cpu, np);
	f = median_sorted(full, nf);
	fc = median_sorted(full_cpu, nf);
	printf("per-token overhead over loopback: one stream of %d completion events (%zu bytes),\n"
	       "  %zu plain reads and %zu atb requests (medians of %d), interleaved in %d rounds;\n"
	       "  wall: end-to-end per request; cpu: this process's CPU time per request\n",
	       N, len, np, nf * PER, PER, ROUNDS);
	printf("  %-34s %10s %10s\n", "", "wall ms", "cpu ms");
	printf("  %-34s %10.2f %10.2f\n", "libcurl, bytes discarded (ref.)", p, pc);
	printf("  %-34s %10.2f %10.2f\n", "atb client (token times, SSE, JSON)", f, fc);
	printf("  per-token overhead  wall %.0f ns/token, cpu %.0f ns/token\n", (f - p) * 1e6 / N,
	       (fc - pc) * 1e6 / N);
	printf("  atb/plain           wall %.3f, cpu %.3f\n", f / p, pc > 0 ? fc / pc : 0);
}

int main(int argc, char **argv)
{
	int seconds = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 5;
	int conns = argc > 2 ? (int)strtol(argv[2], NULL, 10) : 16;

	if (seconds < 1 || conns < 1) {
		fprintf(stderr, "usage: bench-loadgen [SECONDS [CONNECTIONS]]\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	bench_events();
	bench_stream_overhead();
	bench_server(seconds, conns);
	return 0;
}
