/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * atb loadgen: drive an OpenAI-compatible server with a seeded workload and
 * report serving metrics.  The workload, the client and the metrics are
 * the library's (atb/loadgen.h); this file parses options, reads the
 * protocol's dispatch-lag limit, and prints.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "atb/alloc.h"
#include "atb/loadgen.h"
#include "atb/protocol.h"
#include "cli.h"
#include "banned.h"

static const char loadgen_help[] =
	"usage: atb loadgen --url URL --seed S --requests N [options]\n"
	"\n"
	"Send a seeded workload to an OpenAI-compatible server (vLLM, SGLang,\n"
	"llama.cpp's server, ...) and report requests/s, tokens/s, TTFT, TPOT,\n"
	"ITL, end-to-end latency, goodput, failures by category, client-side\n"
	"queueing and dispatch lag.  One thread on libcurl's multi interface;\n"
	"keep-alive connections are reused.  The same options and seed give a\n"
	"byte-identical workload (prompts, output lengths, send times) on any\n"
	"box; its SHA-256 is printed as \"workload\".\n"
	"\n"
	"target:\n"
	"  --url URL              server base URL, e.g. http://127.0.0.1:8000 (required)\n"
	"  --endpoint E           completions (POST /v1/completions, default) or\n"
	"                         chat (POST /v1/chat/completions)\n"
	"  --model M              the request's \"model\" (default: default)\n"
	"  --keepalive, --no-keepalive  reuse connections (default) or open a\n"
	"                         fresh one per request (some servers drop reused\n"
	"                         ones: failures counted as 'reset')\n"
	"  --stream, --no-stream  server-sent events with per-token times (default)\n"
	"                         or one JSON body (TTFT = end-to-end then)\n"
	"  --timeout-s T          per-request limit, whole transfer (default 600)\n"
	"\n"
	"workload:\n"
	"  --seed S               workload seed, an unsigned integer (required)\n"
	"  --requests N           measured requests (required, >= 1)\n"
	"  --warmup N             warm-up requests sent first, waited for, and\n"
	"                         excluded from every metric (default 0)\n"
	"  --prompts P            synthetic (words from a seeded word list, about\n"
	"                         one token a word; default), repetitive (a seeded\n"
	"                         8-16 word phrase repeated), random (4-letter random\n"
	"                         strings, no n-gram recurs), or a JSONL dataset path:\n"
	"                         ShareGPT lines {\"conversations\":[{\"from\":\"human\",\n"
	"                         \"value\":...},{\"from\":\"gpt\",\"value\":...}]} or\n"
	"                         {\"prompt\":..., \"output_len\":N}, sampled by the seed\n"
	"                         (reshuffled on every pass); the output length is\n"
	"                         the reply's word count or output_len, else drawn\n"
	"  --input-len DIST       prompt length in tokens (default 128)\n"
	"  --output-len DIST      max_tokens of each request (default 128)\n"
	"                         DIST: N | fixed:N | uniform:LO:HI |\n"
	"                         normal:MEAN:SD[:MIN:MAX] | lognormal:MEDIAN:SIGMA[:MIN:MAX]\n"
	"                         (rounded, clipped to [MIN, MAX], default [1, 1048576])\n"
	"  --ignore-eos           send \"ignore_eos\": true (generate max_tokens)\n"
	"  --temperature T        sampling temperature (default 0: greedy)\n"
	"\n"
	"arrivals (precomputed from the seed):\n"
	"  --rate R               open loop at R requests/s ...\n"
	"  --arrival A            ... poisson (default), gamma, or constant\n"
	"  --burstiness B         gamma shape (default 1; < 1 burstier, > 1 smoother)\n"
	"  --concurrency C        closed loop: C requests always in flight (the\n"
	"                         default, C = 1, when --rate is not given)\n"
	"  --max-concurrency C    cap on requests in flight in an open loop; a\n"
	"                         request waiting for a slot counts as queueing\n"
	"\n"
	"metrics:\n"
	"  --slo-ttft-ms X        goodput counts requests with TTFT <= X ...\n"
	"  --slo-tpot-ms X        ... and TPOT <= X ...\n"
	"  --slo-e2e-ms X         ... and end-to-end latency <= X\n"
	"  --max-dispatch-lag-ms X  the limit on the p99 dispatch lag (default: the\n"
	"                         protocol's engine.max_dispatch_lag_ms); above it\n"
	"                         the run is flagged client_limited\n"
	"\n"
	"output:\n"
	"  --json                 the result as JSON: summary and workload digest\n"
	"  --records FILE         every request's record as JSONL (index, warmup,\n"
	"                         intended/eligible/sent/first-token/end ns, every\n"
	"                         token chunk's ns, tokens in/out, finish reason,\n"
	"                         http status, failure, error, text)\n"
	"  --dry-run              build the workload and print its digest (or its\n"
	"                         canonical JSON with --json); send nothing\n"
	"  -h, --help             this text\n"
	"\n"
	"Metrics cover the measured requests only.  TTFT = first token - sent;\n"
	"TPOT = (end - first token) / (tokens out - 1); ITL = every gap between\n"
	"token chunks; queueing = sent - intended; dispatch lag = sent - eligible\n"
	"(eligible: the intended time, or later when the cap was full), the\n"
	"client's own lateness; client lag = the largest dispatch lag (open\n"
	"loop) or the summed lag over the concurrency (closed loop): how far the\n"
	"lag can have moved the run's end, and so requests/s (latencies are\n"
	"timed from the send and hold none of it).  Tokens come from the\n"
	"server's usage (requested with stream_options.include_usage) or else\n"
	"are counted chunks.\n"
	"Failure categories: connect, http_4xx, http_5xx, timeout, reset,\n"
	"malformed_event, too_large, http_other, other; a failed request is\n"
	"recorded and the run goes on.  On a terminal, a progress line with an\n"
	"ETA goes to stderr.  See docs/loadgen.md.\n"
	"\n"
	"exit codes: 0 ok (failed requests are reported, not fatal), 1 the run is\n"
	"client_limited (the client, not the server, was measured), 2 bad options\n"
	"or dataset, 3 the server was unreachable for every request, or a\n"
	"runtime failure\n";

static int parse_double(const char *s, double *out)
{
	char *end;

	errno = 0;
	*out = strtod(s, &end);
	return errno || end == s || *end || !isfinite(*out) ? -1 : 0;
}

static int parse_size(const char *s, size_t *out)
{
	char *end;
	unsigned long long v;

	if (*s == '-')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *end || v > SIZE_MAX)
		return -1;
	*out = (size_t)v;
	return 0;
}

static void print_latency(const char *name, const struct atb_loadgen_latency *l)
{
	if (!l->n) {
		printf("  %-13s %9s\n", name, "-");
		return;
	}
	printf("  %-13s %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %7zu\n", name, l->mean, l->median,
	       l->p90, l->p95, l->p99, l->max, l->n);
}

static void print_text(const struct atb_loadgen_config *cfg,
		       const struct atb_loadgen_result *res)
{
	const struct atb_loadgen_summary *s = atb_loadgen_result_summary(res);
	size_t i, nwarm = atb_loadgen_result_count(res) - s->requests;

	printf("target       %s %s, %s\n", cfg->url,
	       cfg->endpoint == ATB_LOADGEN_CHAT ? "chat" : "completions",
	       cfg->stream ? "streaming" : "not streaming");
	printf("workload     %s (seed %llu)\n", atb_loadgen_result_workload_digest(res),
	       (unsigned long long)cfg->seed);
	printf("requests     %zu measured (+%zu warm-up): %zu ok, %zu failed", s->requests,
	       nwarm, s->completed, s->failed);
	for (i = 1; i < ATB_LOADGEN_FAIL_COUNT; i++)
		if (s->failures[i])
			printf(", %s %zu", atb_loadgen_failure_name(i), s->failures[i]);
	printf("\n");
	printf("duration     %.3f s, peak in flight %zu\n", s->duration_s, s->peak_in_flight);
	printf("throughput   %.3f req/s, %.1f output tok/s, %.1f total tok/s\n",
	       s->requests_per_s, s->output_tokens_per_s, s->total_tokens_per_s);
	printf("tokens       %ld in, %ld out\n", s->tokens_in, s->tokens_out);
	if (cfg->slo_ttft_ms > 0 || cfg->slo_tpot_ms > 0 || cfg->slo_e2e_ms > 0)
		printf("goodput      %.3f req/s (%zu of %zu within the SLOs)\n", s->goodput_per_s,
		       s->good, s->requests);
	printf("\n  %-13s %9s %9s %9s %9s %9s %9s %7s\n", "ms", "mean", "median", "p90", "p95",
	       "p99", "max", "n");
	print_latency("ttft", &s->ttft_ms);
	print_latency("tpot", &s->tpot_ms);
	print_latency("itl", &s->itl_ms);
	print_latency("e2e", &s->e2e_ms);
	print_latency("queueing", &s->queue_ms);
	print_latency("dispatch lag", &s->dispatch_lag_ms);
	printf("\n");
	if (s->client_limited)
		printf("client       CLIENT LIMITED: p99 dispatch lag %.3f ms > %.3f ms "
		       "(engine.max_dispatch_lag_ms); the client was measured, refuse this run\n",
		       s->dispatch_lag_ms.p99, s->max_dispatch_lag_ms);
	else if (s->max_dispatch_lag_ms > 0)
		printf("client       ok: p99 dispatch lag %.3f ms <= %.3f ms\n",
		       s->dispatch_lag_ms.p99, s->max_dispatch_lag_ms);
	/* PROTO: engine.client_lag: what atb engine judges from protocol version 6 */
	printf("client lag   %.3f ms, %.3f%% of the %.3f s run: requests/s moved by at most that\n",
	       s->client_lag_ms, 100.0 * s->client_lag_share, s->duration_s);
}

/* Options that take a value, declared as a table (git's parse-options, much smaller). */
enum opt_kind { OPT_STR, OPT_DOUBLE, OPT_SIZE };

struct opt {
	const char *name;
	enum opt_kind kind;
	void *dst;
	int *seen;
};

static int dry_run(const struct atb_loadgen_config *cfg, int json)
{
	struct atb_error err;
	struct atb_loadgen_workload *wl;
	char *text = NULL, digest[65];

	atb_error_clear(&err);
	if (atb_loadgen_workload_new(cfg, &wl, &err))
		return cli_fail(&err);
	if (json ? atb_loadgen_workload_json(wl, &text, &err) :
		   atb_loadgen_workload_digest(wl, digest, &err)) {
		atb_loadgen_workload_free(wl);
		return cli_fail(&err);
	}
	if (json)
		printf("%s\n", text);
	else
		printf("workload %s: %zu requests (%zu warm-up)\n", digest,
		       atb_loadgen_workload_count(wl), cfg->warmup);
	atb_free(text);
	atb_loadgen_workload_free(wl);
	return CLI_OK;
}

/* The progress line on a terminal: requests done, elapsed, ETA. */
static void show_progress(void *ctx, size_t done, size_t total, double elapsed_s)
{
	(void)ctx;
	if (done && done < total)
		fprintf(stderr, "\ratb loadgen: %zu/%zu requests, %.0f s, ETA %.0f s   ", done,
			total, elapsed_s, elapsed_s * (double)(total - done) / (double)done);
	else
		fprintf(stderr, "\ratb loadgen: %zu/%zu requests, %.0f s%s", done, total,
			elapsed_s, done == total ? "               \n" : "   ");
	fflush(stderr);
}

static int all_unreachable(const struct atb_loadgen_result *res)
{
	size_t i, n = atb_loadgen_result_count(res);

	for (i = 0; i < n; i++)
		if (atb_loadgen_result_record(res, i)->failure != ATB_LOADGEN_FAIL_CONNECT)
			return 0;
	return n > 0;
}

int cmd_loadgen(int argc, char **argv, struct cli_ctx *ctx)
{
	struct atb_loadgen_config cfg;
	struct atb_loadgen_result *res = NULL;
	struct atb_error err;
	const char *url = NULL, *endpoint = NULL, *model = NULL, *prompts = NULL;
	const char *arrival = NULL, *input_len = NULL, *output_len = NULL, *records = NULL;
	int json = ctx->json, dry = 0, seen_seed = 0, seen_requests = 0, seen_rate = 0;
	int seen_conc = 0, seen_lag = 0, seen_burst = 0, rc = CLI_OK;
	double lag_ms = 0;
	size_t seed_sz = 0;
	int i;
	const struct opt opts[] = {
		{"--url", OPT_STR, &url, NULL},
		{"--endpoint", OPT_STR, &endpoint, NULL},
		{"--model", OPT_STR, &model, NULL},
		{"--prompts", OPT_STR, &prompts, NULL},
		{"--arrival", OPT_STR, &arrival, NULL},
		{"--input-len", OPT_STR, &input_len, NULL},
		{"--output-len", OPT_STR, &output_len, NULL},
		{"--records", OPT_STR, &records, NULL},
		{"--seed", OPT_SIZE, &seed_sz, &seen_seed},
		{"--requests", OPT_SIZE, &cfg.requests, &seen_requests},
		{"--warmup", OPT_SIZE, &cfg.warmup, NULL},
		{"--concurrency", OPT_SIZE, &cfg.concurrency, &seen_conc},
		{"--max-concurrency", OPT_SIZE, &cfg.max_concurrency, NULL},
		{"--rate", OPT_DOUBLE, &cfg.rate_per_s, &seen_rate},
		{"--burstiness", OPT_DOUBLE, &cfg.burstiness, &seen_burst},
		{"--temperature", OPT_DOUBLE, &cfg.temperature, NULL},
		{"--timeout-s", OPT_DOUBLE, &cfg.timeout_s, NULL},
		{"--slo-ttft-ms", OPT_DOUBLE, &cfg.slo_ttft_ms, NULL},
		{"--slo-tpot-ms", OPT_DOUBLE, &cfg.slo_tpot_ms, NULL},
		{"--slo-e2e-ms", OPT_DOUBLE, &cfg.slo_e2e_ms, NULL},
		{"--max-dispatch-lag-ms", OPT_DOUBLE, &lag_ms, &seen_lag},
	};

	if (cli_wants_help(argc, argv)) {
		fputs(loadgen_help, stdout);
		return CLI_OK;
	}
	atb_loadgen_config_init(&cfg);
	atb_error_clear(&err);
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];
		size_t k, nopts = sizeof(opts) / sizeof(opts[0]);

		if (!strcmp(a, "--json")) {
			json = 1;
			continue;
		} else if (!strcmp(a, "--stream") || !strcmp(a, "--no-stream")) {
			cfg.stream = !strcmp(a, "--stream");
			continue;
		} else if (!strcmp(a, "--keepalive") || !strcmp(a, "--no-keepalive")) {
			cfg.reuse_connections = !strcmp(a, "--keepalive");
			continue;
		} else if (!strcmp(a, "--ignore-eos")) {
			cfg.ignore_eos = 1;
			continue;
		} else if (!strcmp(a, "--dry-run")) {
			dry = 1;
			continue;
		}
		for (k = 0; k < nopts; k++)
			if (!strcmp(a, opts[k].name))
				break;
		if (k == nopts)
			return cli_usage_error("loadgen", "unknown option '%s'", a);
		if (i + 1 >= argc)
			return cli_usage_error("loadgen", "option '%s' needs a value", a);
		a = argv[++i];
		if (opts[k].kind == OPT_STR)
			*(const char **)opts[k].dst = a;
		else if (opts[k].kind == OPT_DOUBLE ? parse_double(a, opts[k].dst) :
			 parse_size(a, opts[k].dst))
			return cli_usage_error("loadgen", "bad value '%s' for %s: need %s", a,
					       opts[k].name, opts[k].kind == OPT_DOUBLE ?
					       "a number" : "a non-negative integer");
		if (opts[k].seen)
			*opts[k].seen = 1;
	}
	cfg.seed = (uint64_t)seed_sz;
	if (!seen_seed)
		return cli_usage_error("loadgen", "--seed is required (the workload's seed)");
	if (!seen_requests || !cfg.requests)
		return cli_usage_error("loadgen", "--requests N (N >= 1) is required");
	if (seen_rate && seen_conc)
		return cli_usage_error("loadgen", "--rate (open loop) and --concurrency (closed "
				       "loop) exclude each other");
	if (arrival && !seen_rate)
		return cli_usage_error("loadgen", "--arrival needs --rate");
	if (seen_burst && !(arrival && !strcmp(arrival, "gamma")))
		return cli_usage_error("loadgen", "--burstiness needs --arrival gamma");
	if (seen_rate && !(cfg.rate_per_s > 0))
		return cli_usage_error("loadgen", "bad value '%g' for --rate: need > 0",
				       cfg.rate_per_s);
	if (seen_conc && !cfg.concurrency)
		return cli_usage_error("loadgen", "bad value '0' for --concurrency: need >= 1");
	if (!(cfg.timeout_s > 0))
		return cli_usage_error("loadgen", "bad value '%g' for --timeout-s: need > 0",
				       cfg.timeout_s);
	if (seen_rate) {
		cfg.arrival = ATB_LOADGEN_ARRIVAL_POISSON;
		if (arrival && (atb_loadgen_arrival_parse(arrival, &cfg.arrival, &err) ||
				cfg.arrival == ATB_LOADGEN_ARRIVAL_CLOSED))
			return cli_usage_error("loadgen", "bad value '%s' for --arrival: use "
					       "poisson, gamma or constant", arrival);
	}
	if (endpoint && atb_loadgen_endpoint_parse(endpoint, &cfg.endpoint, &err))
		return cli_usage_error("loadgen", "%s", err.msg);
	if (input_len && atb_loadgen_dist_parse(input_len, &cfg.input_len, &err))
		return cli_usage_error("loadgen", "--input-len: %s", err.msg);
	if (output_len && atb_loadgen_dist_parse(output_len, &cfg.output_len, &err))
		return cli_usage_error("loadgen", "--output-len: %s", err.msg);
	if (prompts && atb_loadgen_prompts_parse(prompts, &cfg.prompts, &err)) {
		cfg.prompts = ATB_LOADGEN_PROMPTS_DATASET;
		cfg.dataset_path = prompts;
	}
	atb_error_clear(&err);
	if (model)
		cfg.model = model;
	if (dry)
		return dry_run(&cfg, json);
	if (!url)
		return cli_usage_error("loadgen", "--url is required");
	cfg.url = url;
	if (seen_lag) {
		if (lag_ms < 0)
			return cli_usage_error("loadgen", "bad value '%g' for --max-dispatch-lag-ms: "
					       "need >= 0", lag_ms);
		cfg.max_dispatch_lag_ms = lag_ms;
	} else {
		struct atb_protocol *p;

		if (atb_protocol_load_current(NULL, &p, &err))
			return cli_fail(&err);
		/* PROTO: engine.max_dispatch_lag_ms */
		cfg.max_dispatch_lag_ms = p->engine.max_dispatch_lag_ms;
		atb_protocol_free(p);
	}
	if (isatty(STDERR_FILENO))
		cfg.progress = show_progress;
	if (atb_loadgen_run(&cfg, &res, &err))
		return cli_fail(&err);
	if (records && atb_loadgen_result_write_records(res, records, &err)) {
		atb_loadgen_result_free(res);
		return cli_fail(&err);
	}
	if (json) {
		char *text;

		if (atb_loadgen_result_json(res, 0, &text, &err)) {
			atb_loadgen_result_free(res);
			return cli_fail(&err);
		}
		printf("%s\n", text);
		atb_free(text);
	} else {
		print_text(&cfg, res);
	}
	if (all_unreachable(res)) {
		fprintf(stderr, "atb: server '%s' unreachable for every request: %s\n", url,
			atb_loadgen_result_record(res, 0)->error);
		rc = CLI_RUNTIME;
	} else if (atb_loadgen_result_summary(res)->client_limited) {
		fprintf(stderr, "atb: client_limited: p99 dispatch lag %.3f ms over the %.3f ms "
			"limit; the client, not the server, was measured\n",
			atb_loadgen_result_summary(res)->dispatch_lag_ms.p99, cfg.max_dispatch_lag_ms);
		rc = CLI_CHECK_FAILED;
	}
	atb_loadgen_result_free(res);
	return rc;
}
