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
#include <unistd.h>

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
	bench_server(seconds, conns);
	return 0;
}
