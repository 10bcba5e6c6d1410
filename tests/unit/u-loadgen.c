/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The load generator: distributions and names parse or are refused; the
 * same seed gives a byte-identical workload and the rate does not move the
 * prompts; arrival schedules have the rate they claim (Poisson, gamma,
 * constant); prompt kinds; JSONL datasets and their bad lines with
 * file:line; the SSE splitter on events cut anywhere; and, over real HTTP
 * on loopback against tests/fixtures/loadgen/fake_openai.py (a TEST DOUBLE
 * of an OpenAI-compatible server), token timestamps and counts, chat and
 * non-streaming, closed-loop concurrency, the open-loop cap, warm-up
 * exclusion, every planted fault classified with the run going on, and the
 * client_limited flag (PROTO: engine.max_dispatch_lag_ms) through the
 * dispatch-delay test hook.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <jansson.h>

#include "atb/alloc.h"
#include "atb/loadgen.h"
#include "loadgen/loadgen_int.h"
#include "banned.h"

#define FIX ATB_SOURCE_DIR "/tests/fixtures/loadgen"

/* ---- the test-double server ---- */

static pid_t server_pid;
static char server_url[64];

static void stop_server(void)
{
	if (server_pid > 0) {
		kill(server_pid, SIGKILL);
		waitpid(server_pid, NULL, 0);
		server_pid = 0;
	}
}

/* Start fake_openai.py with the given flags (NULL-terminated); sets server_url. */
static void start_server(const char *flag, ...)
{
	const char *argv[32];
	int n = 0, fd[2], port = 0;
	va_list ap;
	FILE *f;

	argv[n++] = "python3";
	argv[n++] = FIX "/fake_openai.py";
	argv[n++] = "--port";
	argv[n++] = "0";
	va_start(ap, flag);
	for (; flag && n < 31; flag = va_arg(ap, const char *))
		argv[n++] = flag;
	va_end(ap);
	argv[n] = NULL;
	cr_assert_eq(pipe(fd), 0);
	server_pid = fork();
	cr_assert_geq(server_pid, 0);
	if (!server_pid) {
		dup2(fd[1], 1);
		close(fd[0]);
		close(fd[1]);
		execvp("python3", (char **)argv);
		_exit(127);
	}
	close(fd[1]);
	f = fdopen(fd[0], "r");
	cr_assert_not_null(f);
	cr_assert_eq(fscanf(f, "%d", &port), 1, "the test double printed no port");
	fclose(f);
	snprintf(server_url, sizeof(server_url), "http://127.0.0.1:%d", port);
}

static void fini(void)
{
	stop_server();
}

TestSuite(loadgen, .fini = fini, .timeout = 120);

static struct atb_loadgen_result *run_ok(const struct atb_loadgen_config *cfg)
{
	struct atb_loadgen_result *res = NULL;
	struct atb_error err;

	cr_assert_eq(atb_loadgen_run(cfg, &res, &err), ATB_OK, "%s", err.msg);
	cr_assert_not_null(res);
	return res;
}

static void base_config(struct atb_loadgen_config *cfg, size_t requests, long out_len)
{
	atb_loadgen_config_init(cfg);
	cfg->url = server_url;
	cfg->seed = 7;
	cfg->requests = requests;
	cfg->input_len.a = 16;
	cfg->output_len.a = (double)out_len;
	cfg->timeout_s = 30;
}

/* ---- parsing ---- */

Test(loadgen, dist_parse_accepts_every_kind)
{
	struct atb_loadgen_dist d;
	struct atb_error err;

	cr_assert_eq(atb_loadgen_dist_parse("64", &d, &err), ATB_OK);
	cr_assert(d.kind == ATB_LOADGEN_DIST_FIXED && d.a == 64);
	cr_assert_eq(atb_loadgen_dist_parse("uniform:8:32", &d, &err), ATB_OK);
	cr_assert(d.kind == ATB_LOADGEN_DIST_UNIFORM && d.a == 8 && d.b == 32);
	cr_assert_eq(atb_loadgen_dist_parse("normal:100:20:50:150", &d, &err), ATB_OK);
	cr_assert(d.kind == ATB_LOADGEN_DIST_NORMAL && d.min == 50 && d.max == 150);
	cr_assert_eq(atb_loadgen_dist_parse("lognormal:200:0.5", &d, &err), ATB_OK);
	cr_assert(d.kind == ATB_LOADGEN_DIST_LOGNORMAL && d.b == 0.5);
}

Test(loadgen, dist_parse_refuses_bad_text_quoting_it)
{
	static const char *const bad[] = {
		"", "0", "-4", "1.5", "abc", "poisson:3", "uniform:9:3", "uniform:3",
		"normal:0:1", "normal:10:-1", "normal:10:1:5", "normal:10:1:9:3", "fixed:8:9",
		"lognormal:10:1:0:5", "uniform:1:x",
	};
	struct atb_loadgen_dist d;
	struct atb_error err;
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cr_assert_eq(atb_loadgen_dist_parse(bad[i], &d, &err), ATB_ERR_USAGE, "'%s'", bad[i]);
		if (*bad[i])
			cr_assert(strstr(err.msg, bad[i]), "'%s' not quoted in: %s", bad[i], err.msg);
	}
}

Test(loadgen, names_parse_and_unknown_ones_are_refused)
{
	enum atb_loadgen_arrival a;
	enum atb_loadgen_endpoint e;
	enum atb_loadgen_prompts p;
	struct atb_error err;

	cr_assert_eq(atb_loadgen_arrival_parse("gamma", &a, &err), ATB_OK);
	cr_assert_eq(a, ATB_LOADGEN_ARRIVAL_GAMMA);
	cr_assert_eq(atb_loadgen_endpoint_parse("chat", &e, &err), ATB_OK);
	cr_assert_eq(e, ATB_LOADGEN_CHAT);
	cr_assert_eq(atb_loadgen_prompts_parse("repetitive", &p, &err), ATB_OK);
	cr_assert_eq(p, ATB_LOADGEN_PROMPTS_REPETITIVE);
	cr_assert_eq(atb_loadgen_arrival_parse("weibull", &a, &err), ATB_ERR_USAGE);
	cr_assert(strstr(err.msg, "'weibull'"));
	cr_assert_eq(atb_loadgen_endpoint_parse("embeddings", &e, &err), ATB_ERR_USAGE);
	cr_assert_eq(atb_loadgen_prompts_parse("x.jsonl", &p, &err), ATB_ERR_USAGE);
	cr_assert_str_eq(atb_loadgen_failure_name(ATB_LOADGEN_FAIL_MALFORMED), "malformed_event");
}

/* ---- workloads ---- */

static struct atb_loadgen_workload *workload(const struct atb_loadgen_config *cfg)
{
	struct atb_loadgen_workload *wl = NULL;
	struct atb_error err;

	cr_assert_eq(atb_loadgen_workload_new(cfg, &wl, &err), ATB_OK, "%s", err.msg);
	return wl;
}

static char *wl_json(const struct atb_loadgen_workload *wl)
{
	char *s = NULL;
	struct atb_error err;

	cr_assert_eq(atb_loadgen_workload_json(wl, &s, &err), ATB_OK);
	return s;
}

Test(loadgen, same_seed_gives_a_byte_identical_workload)
{
	struct atb_loadgen_config cfg;
	struct atb_loadgen_workload *a, *b, *c;
	char *ja, *jb, *jc, da[65], db[65];
	struct atb_error err;

	atb_loadgen_config_init(&cfg);
	cfg.seed = 42;
	cfg.requests = 50;
	cfg.warmup = 4;
	cfg.arrival = ATB_LOADGEN_ARRIVAL_GAMMA;
	cfg.rate_per_s = 20;
	cfg.burstiness = 0.5;
	cr_assert_eq(atb_loadgen_dist_parse("lognormal:64:0.6", &cfg.input_len, &err), ATB_OK);
	cr_assert_eq(atb_loadgen_dist_parse("uniform:4:40", &cfg.output_len, &err), ATB_OK);
	a = workload(&cfg);
	b = workload(&cfg);
	ja = wl_json(a);
	jb = wl_json(b);
	cr_assert_str_eq(ja, jb);
	cr_assert_eq(atb_loadgen_workload_digest(a, da, &err), ATB_OK);
	cr_assert_eq(atb_loadgen_workload_digest(b, db, &err), ATB_OK);
	cr_assert_str_eq(da, db);
	cr_assert_eq(atb_loadgen_workload_count(a), 54);
	cr_assert(atb_loadgen_workload_get(a, 3)->warmup && !atb_loadgen_workload_get(a, 4)->warmup);
	cr_assert_eq(atb_loadgen_workload_get(a, 4)->intended_ns, 0);
	cfg.seed = 43;
	c = workload(&cfg);
	jc = wl_json(c);
	cr_assert_str_neq(ja, jc);
	atb_free(ja);
	atb_free(jb);
	atb_free(jc);
	atb_loadgen_workload_free(a);
	atb_loadgen_workload_free(b);
	atb_loadgen_workload_free(c);
}

Test(loadgen, the_arrival_process_does_not_move_the_prompts)
{
	struct atb_loadgen_config cfg;
	struct atb_loadgen_workload *a, *b;
	size_t i;

	atb_loadgen_config_init(&cfg);
	cfg.seed = 5;
	cfg.requests = 30;
	cfg.arrival = ATB_LOADGEN_ARRIVAL_POISSON;
	cfg.rate_per_s = 10;
	a = workload(&cfg);
	cfg.rate_per_s = 40;
	cfg.arrival = ATB_LOADGEN_ARRIVAL_CONSTANT;
	b = workload(&cfg);
	for (i = 0; i < 30; i++) {
		cr_assert_str_eq(atb_loadgen_workload_get(a, i)->prompt,
				 atb_loadgen_workload_get(b, i)->prompt);
		cr_assert_eq(atb_loadgen_workload_get(b, i)->intended_ns, (int64_t)i * 25000000);
	}
	atb_loadgen_workload_free(a);
	atb_loadgen_workload_free(b);
}

/* Mean and squared CV of the gaps of a schedule of n requests. */
static void gap_stats(const struct atb_loadgen_config *cfg, double *mean_s, double *cv2)
{
	struct atb_loadgen_workload *wl = workload(cfg);
	size_t i, n = atb_loadgen_workload_count(wl);
	double s = 0, ss = 0, m;

	for (i = 1; i < n; i++) {
		double g = (double)(atb_loadgen_workload_get(wl, i)->intended_ns -
				    atb_loadgen_workload_get(wl, i - 1)->intended_ns) / 1e9;

		cr_assert_geq(g, 0);
		s += g;
		ss += g * g;
	}
	m = s / (double)(n - 1);
	*mean_s = m;
	*cv2 = (ss / (double)(n - 1) - m * m) / (m * m);
	atb_loadgen_workload_free(wl);
}

Test(loadgen, poisson_and_gamma_schedules_have_the_rate_they_claim)
{
	struct atb_loadgen_config cfg;
	double mean, cv2;

	atb_loadgen_config_init(&cfg);
	cfg.requests = 4001;
	cfg.input_len.a = 1;
	cfg.rate_per_s = 100;
	cfg.arrival = ATB_LOADGEN_ARRIVAL_POISSON;
	cfg.seed = 1;
	/* 4000 exponential gaps: the mean's standard error is 1.6%; 6% is > 3.5 sigma */
	gap_stats(&cfg, &mean, &cv2);
	cr_assert(fabs(mean - 0.01) < 0.0006, "poisson mean gap %g s", mean);
	cr_assert(fabs(cv2 - 1.0) < 0.15, "poisson cv^2 %g", cv2);
	cfg.arrival = ATB_LOADGEN_ARRIVAL_GAMMA;
	cfg.burstiness = 0.25; /* cv^2 = 1/shape = 4 */
	gap_stats(&cfg, &mean, &cv2);
	cr_assert(fabs(mean - 0.01) < 0.0015, "gamma mean gap %g s", mean);
	cr_assert(cv2 > 3.0 && cv2 < 5.0, "gamma cv^2 %g", cv2);
	cfg.arrival = ATB_LOADGEN_ARRIVAL_CONSTANT;
	gap_stats(&cfg, &mean, &cv2);
	cr_assert(fabs(mean - 0.01) < 1e-9 && cv2 < 1e-9);
}

Test(loadgen, lengths_follow_their_distributions_within_clip_bounds)
{
	struct atb_loadgen_config cfg;
	struct atb_loadgen_workload *wl;
	struct atb_error err;
	size_t i;
	double s = 0;

	atb_loadgen_config_init(&cfg);
	cfg.requests = 2000;
	cr_assert_eq(atb_loadgen_dist_parse("normal:50:30:20:70", &cfg.input_len, &err), ATB_OK);
	cr_assert_eq(atb_loadgen_dist_parse("uniform:3:9", &cfg.output_len, &err), ATB_OK);
	wl = workload(&cfg);
	for (i = 0; i < 2000; i++) {
		const struct atb_loadgen_request *q = atb_loadgen_workload_get(wl, i);

		cr_assert(q->input_len >= 20 && q->input_len <= 70, "%ld", q->input_len);
		cr_assert(q->max_tokens >= 3 && q->max_tokens <= 9, "%ld", q->max_tokens);
		/* synthetic prompts: one word per target token */
		cr_assert_eq(atbi_loadgen_count_words(q->prompt), q->input_len);
		s += (double)q->max_tokens;
	}
	cr_assert(fabs(s / 2000 - 6.0) < 0.2, "uniform mean %g", s / 2000);
	atb_loadgen_workload_free(wl);
}

/* Count distinct 4-grams of words among the first n of a prompt. */
static double repeated_4gram_share(const char *prompt)
{
	char *copy = atb_strdup(prompt), *save = NULL, *w;
	char *words[4096];
	size_t n = 0, i, j, rep = 0;

	for (w = strtok_r(copy, " ", &save); w && n < 4096; w = strtok_r(NULL, " ", &save))
		words[n++] = w;
	for (i = 4; i + 4 <= n; i++)
		for (j = 0; j < i; j++)
			if (!strcmp(words[i], words[j]) && !strcmp(words[i + 1], words[j + 1]) &&
			    !strcmp(words[i + 2], words[j + 2]) && !strcmp(words[i + 3], words[j + 3])) {
				rep++;
				break;
			}
	atb_free(copy);
	return n > 8 ? (double)rep / (double)(n - 7) : 0;
}

Test(loadgen, repetitive_prompts_repeat_and_random_ones_do_not)
{
	struct atb_loadgen_config cfg;
	struct atb_loadgen_workload *rep, *rnd;

	atb_loadgen_config_init(&cfg);
	cfg.requests = 3;
	cfg.input_len.a = 400;
	cfg.prompts = ATB_LOADGEN_PROMPTS_REPETITIVE;
	rep = workload(&cfg);
	cfg.prompts = ATB_LOADGEN_PROMPTS_RANDOM;
	rnd = workload(&cfg);
	cr_assert_gt(repeated_4gram_share(atb_loadgen_workload_get(rep, 0)->prompt), 0.9);
	cr_assert_lt(repeated_4gram_share(atb_loadgen_workload_get(rnd, 0)->prompt), 0.01);
	cr_assert_str_neq(atb_loadgen_workload_get(rep, 0)->prompt,
			  atb_loadgen_workload_get(rep, 1)->prompt);
	atb_loadgen_workload_free(rep);
	atb_loadgen_workload_free(rnd);
}

Test(loadgen, dataset_lines_are_sampled_by_the_seed)
{
	struct atb_loadgen_config cfg;
	struct atb_loadgen_workload *wl;
	size_t i;
	int seen_poem = 0, seen_rivers = 0;

	atb_loadgen_config_init(&cfg);
	cfg.requests = 10;
	cfg.prompts = ATB_LOADGEN_PROMPTS_DATASET;
	cfg.dataset_path = FIX "/sharegpt.jsonl";
	cfg.output_len.a = 33;
	wl = workload(&cfg);
	for (i = 0; i < 10; i++) {
		const struct atb_loadgen_request *q = atb_loadgen_workload_get(wl, i);

		if (!strcmp(q->prompt, "write a short poem about winter")) {
			cr_assert_eq(q->max_tokens, 12);
			seen_poem++;
		} else if (!strcmp(q->prompt, "tell me about rivers and the sea")) {
			cr_assert_eq(q->max_tokens, 8); /* the reply's words */
			cr_assert_eq(q->input_len, 7);
			seen_rivers++;
		} else if (!strcmp(q->prompt, "what is a bridge") ||
			   !strcmp(q->prompt, "count to five")) {
			cr_assert_eq(q->max_tokens, 33); /* drawn */
		}
	}
	/* five entries, reshuffled each pass: each appears exactly twice in ten */
	cr_assert_eq(seen_poem, 2);
	cr_assert_eq(seen_rivers, 2);
	atb_loadgen_workload_free(wl);
}

static void expect_bad_dataset(const char *path, enum atb_status want, unsigned line,
			       const char *field)
{
	struct atb_loadgen_config cfg;
	struct atb_loadgen_workload *wl = (void *)1;
	struct atb_error err;

	atb_loadgen_config_init(&cfg);
	cfg.prompts = ATB_LOADGEN_PROMPTS_DATASET;
	cfg.dataset_path = path;
	cr_assert_eq(atb_loadgen_workload_new(&cfg, &wl, &err), want, "%s: %s", path, err.msg);
	cr_assert_null(wl);
	cr_assert_str_eq(err.file, path);
	cr_assert_eq(err.line, line, "%s: line %u: %s", path, err.line, err.msg);
	cr_assert_str_eq(err.field, field);
}

Test(loadgen, a_bad_dataset_line_names_file_and_line)
{
	expect_bad_dataset(FIX "/bad-json.jsonl", ATB_ERR_PARSE, 3, "");
	expect_bad_dataset(FIX "/bad-no-human.jsonl", ATB_ERR_SCHEMA, 2, "conversations");
	expect_bad_dataset(FIX "/bad-output-len.jsonl", ATB_ERR_SCHEMA, 4, "output_len");
}

Test(loadgen, bad_configurations_are_refused)
{
	struct atb_loadgen_config cfg;
	struct atb_loadgen_workload *wl;
	struct atb_error err;

	atb_loadgen_config_init(&cfg);
	cfg.arrival = ATB_LOADGEN_ARRIVAL_POISSON;
	cr_assert_eq(atb_loadgen_workload_new(&cfg, &wl, &err), ATB_ERR_USAGE);
	cr_assert_str_eq(err.field, "rate_per_s");
	atb_loadgen_config_init(&cfg);
	cfg.requests = 0;
	cr_assert_eq(atb_loadgen_workload_new(&cfg, &wl, &err), ATB_ERR_USAGE);
	atb_loadgen_config_init(&cfg);
	cfg.prompts = ATB_LOADGEN_PROMPTS_DATASET;
	cfg.dataset_path = FIX "/no-such.jsonl";
	cr_assert_neq(atb_loadgen_workload_new(&cfg, &wl, &err), ATB_OK);
	cr_assert(strstr(err.msg, "no-such.jsonl"), "%s", err.msg);
}

/* ---- server-sent events ---- */

struct events {
	char got[16][128];
	int n;
};

static int collect(void *ctx, const char *data, size_t len)
{
	struct events *e = ctx;

	cr_assert_lt(e->n, 16);
	cr_assert_eq(strlen(data), len);
	snprintf(e->got[e->n++], sizeof(e->got[0]), "%s", data);
	return 0;
}

Test(loadgen, sse_events_split_anywhere_parse_the_same)
{
	static const char stream[] =
		": a comment\r\n"
		"event: message\r\n"
		"data: {\"a\":1}\r\n"
		"\r\n"
		"data: line one\n"
		"data: line two\n"
		"\n"
		"id: 7\rdata:{\"b\":2}\r\r"
		"data: [DONE]\n\n"
		"data: tail without blank line";
	size_t len = strlen(stream), cut;

	for (cut = 1; cut <= len; cut++) {
		struct atbi_sse p;
		struct events e = {0};
		size_t i;

		atbi_sse_init(&p, 1 << 20);
		for (i = 0; i < len; i += cut)
			cr_assert_eq(atbi_sse_feed(&p, stream + i, len - i < cut ? len - i : cut,
						   collect, &e), 0);
		cr_assert_eq(atbi_sse_finish(&p, collect, &e), 0);
		atbi_sse_release(&p);
		cr_assert_eq(e.n, 5, "cut %zu: %d events", cut, e.n);
		cr_assert_str_eq(e.got[0], "{\"a\":1}");
		cr_assert_str_eq(e.got[1], "line one\nline two");
		cr_assert_str_eq(e.got[2], "{\"b\":2}");
		cr_assert_str_eq(e.got[3], "[DONE]");
		cr_assert_str_eq(e.got[4], "tail without blank line");
	}
}

Test(loadgen, sse_buffer_has_a_hard_maximum)
{
	struct atbi_sse p;
	struct events e = {0};
	char big[4096];

	memset(big, 'x', sizeof(big));
	memcpy(big, "data: ", 6);
	atbi_sse_init(&p, 1024);
	cr_assert_eq(atbi_sse_feed(&p, big, sizeof(big), collect, &e), -1);
	atbi_sse_release(&p);
}

/* ---- real HTTP on loopback against the test double ---- */

static void check_text(const struct atb_loadgen_record *r, long n)
{
	char want[1024] = "";
	size_t len = 0;
	long i;

	for (i = 0; i < n; i++)
		len += (size_t)snprintf(want + len, sizeof(want) - len, " w%ld", i);
	cr_assert_str_eq(r->text, want);
}

Test(loadgen, token_timestamps_and_counts_are_right)
{
	struct atb_loadgen_config cfg;
	struct atb_loadgen_result *res;
	const struct atb_loadgen_summary *s;
	size_t i, j;

	start_server("--ttft-ms", "60", "--token-ms", "25", NULL);
	base_config(&cfg, 3, 6);
	res = run_ok(&cfg);
	s = atb_loadgen_result_summary(res);
	cr_assert_eq(s->completed, 3);
	for (i = 0; i < 3; i++) {
		const struct atb_loadgen_record *r = atb_loadgen_result_record(res, i);

		cr_assert_eq(r->failure, ATB_LOADGEN_OK, "%s", r->error);
		cr_assert_eq(r->http_status, 200);
		cr_assert_eq(r->ntoken_ns, 6);
		cr_assert_eq(r->tokens_out, 6);
		cr_assert_eq(r->tokens_in, 16);
		cr_assert(r->usage_from_server);
		cr_assert_str_eq(r->finish_reason, "length");
		check_text(r, 6);
		cr_assert_geq(r->first_token_ns - r->sent_ns, 55000000);
		cr_assert_eq(r->first_token_ns, r->token_ns[0]);
		/* Token j leaves the server 60 + 25 j ms after the request: it
		 * cannot be seen earlier (a timestamp taken too early fails),
		 * while a busy box can only see it later.  Gaps between
		 * consecutive tokens are not asserted: a late read of token j
		 * shortens the next gap (14 ms seen under ASan at load 6). */
		for (j = 1; j < 6; j++) {
			cr_assert_geq(r->token_ns[j], r->token_ns[j - 1]);
			cr_assert_geq(r->token_ns[j] - r->sent_ns, (int64_t)(55 + 25 * j) * 1000000,
				      "token %zu at %lld ns", j,
				      (long long)(r->token_ns[j] - r->sent_ns));
		}
		cr_assert_geq(r->end_ns, r->token_ns[5]);
	}
	cr_assert_geq(s->ttft_ms.median, 55.0);
	cr_assert_eq(s->itl_ms.n, 15);
	cr_assert_eq(s->tokens_out, 18);
	atb_loadgen_result_free(res);
}

Test(loadgen, chunks_are_counted_when_the_server_sends_no_usage_and_events_split)
{
	struct atb_loadgen_config cfg;
	struct atb_loadgen_result *res;
	const struct atb_loadgen_record *r;

	start_server("--no-usage", "--split-events", "--token-ms", "5", NULL);
	base_config(&cfg, 2, 7);
	res = run_ok(&cfg);
	r = atb_loadgen_result_record(res, 1);
	cr_assert_eq(r->failure, ATB_LOADGEN_OK, "%s", r->error);
	cr_assert(!r->usage_from_server);
	cr_assert_eq(r->tokens_out, 7);
	cr_assert_eq(r->ntoken_ns, 7);
	cr_assert_eq(r->tokens_in, 16); /* the workload's target */
	check_text(r, 7);
	atb_loadgen_result_free(res);
}

Test(loadgen, chat_and_non_streaming_requests)
{
	struct atb_loadgen_config cfg;
	struct atb_loadgen_result *res;
	const struct atb_loadgen_record *r;

	start_server("--tokens", "4", "--ttft-ms", "30", NULL);
	base_config(&cfg, 2, 9);
	cfg.endpoint = ATB_LOADGEN_CHAT;
	res = run_ok(&cfg);
	r = atb_loadgen_result_record(res, 0);
	cr_assert_eq(r->failure, ATB_LOADGEN_OK, "%s", r->error);
	cr_assert_eq(r->ntoken_ns, 4); /* the role-only first delta is no token */
	cr_assert_str_eq(r->finish_reason, "stop");
	check_text(r, 4);
	atb_loadgen_result_free(res);
	cfg.stream = 0;
	res = run_ok(&cfg);
	r = atb_loadgen_result_record(res, 1);
	cr_assert_eq(r->failure, ATB_LOADGEN_OK, "%s", r->error);
	cr_assert_eq(r->ntoken_ns, 0);
	cr_assert_eq(r->tokens_out, 4);
	cr_assert_eq(r->first_token_ns, r->end_ns);
	cr_assert_geq(r->end_ns - r->sent_ns, 25000000);
	check_text(r, 4);
	cr_assert_eq(atb_loadgen_result_summary(res)->tpot_ms.n, 0);
	atb_loadgen_result_free(res);
	cfg.endpoint = ATB_LOADGEN_COMPLETIONS;
	res = run_ok(&cfg);
	check_text(atb_loadgen_result_record(res, 0), 4);
	atb_loadgen_result_free(res);
}

/* GET /stats of the test double: the most requests it held at once. */
static long server_max_in_flight(void)
{
	char cmd[256];
	FILE *p;
	long n = -1;

	snprintf(cmd, sizeof(cmd), "python3 -c \"import urllib.request,json;"
		 "print(json.load(urllib.request.urlopen('%s/stats'))['max_in_flight'])\"",
		 server_url);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	cr_assert_eq(fscanf(p, "%ld", &n), 1);
	pclose(p);
	return n;
}

Test(loadgen, closed_loop_never_exceeds_its_concurrency_and_warmup_is_excluded)
{
	struct atb_loadgen_config cfg;
	struct atb_loadgen_result *res;
	const struct atb_loadgen_summary *s;
	size_t i;

	start_server("--token-ms", "3", NULL);
	base_config(&cfg, 24, 5);
	cfg.concurrency = 3;
	cfg.warmup = 2;
	res = run_ok(&cfg);
	s = atb_loadgen_result_summary(res);
	cr_assert_eq(atb_loadgen_result_count(res), 26);
	cr_assert_eq(s->requests, 24);
	cr_assert_eq(s->completed, 24);
	cr_assert_eq(s->peak_in_flight, 3);
	cr_assert_leq(server_max_in_flight(), 3);
	for (i = 0; i < 26; i++) {
		const struct atb_loadgen_record *r = atb_loadgen_result_record(res, i);

		cr_assert_eq(r->warmup, i < 2);
		cr_assert_geq(r->sent_ns, r->intended_ns);
	}
	/* the warm-up ends before the measured phase starts */
	cr_assert_leq(atb_loadgen_result_record(res, 1)->end_ns,
		      atb_loadgen_result_record(res, 2)->sent_ns);
	cr_assert_gt(s->requests_per_s, 0);
	cr_assert_eq(s->tokens_out, 24 * 5);
	atb_loadgen_result_free(res);
}

/* The abort hook: stop once the deadline (CLOCK_MONOTONIC ns) has passed. */
static int abort_after(void *ctx)
{
	return atbi_monotonic_ns() >= *(int64_t *)ctx;
}

Test(loadgen, should_abort_stops_a_long_schedule_at_once)
{
	struct atb_loadgen_config cfg;
	struct atb_loadgen_result *res;
	const struct atb_loadgen_summary *s;
	int64_t t0, deadline, took_ns;
	size_t i, aborted = 0, ok = 0;

	start_server("--token-ms", "2", NULL);
	base_config(&cfg, 50, 4);
	cfg.arrival = ATB_LOADGEN_ARRIVAL_CONSTANT;
	cfg.rate_per_s = 10;    /* a 4.9 s schedule */
	t0 = atbi_monotonic_ns();
	deadline = t0 + 450000000;
	cfg.should_abort = abort_after;
	cfg.abort_ctx = &deadline;
	res = run_ok(&cfg);
	took_ns = atbi_monotonic_ns() - t0;
	s = atb_loadgen_result_summary(res);
	cr_assert(s->aborted);
	/* seen within a loop turn (<= 50 ms), not at the schedule's end */
	cr_assert_lt(took_ns, 1000000000, "%lld ns", (long long)took_ns);
	for (i = 0; i < atb_loadgen_result_count(res); i++) {
		const struct atb_loadgen_record *r = atb_loadgen_result_record(res, i);

		ok += r->failure == ATB_LOADGEN_OK;
		if (r->failure == ATB_LOADGEN_FAIL_ABORTED) {
			aborted++;
			cr_assert(strstr(r->error, "run aborted"), "%s", r->error);
		}
	}
	cr_assert_geq(ok, 3, "%zu", ok);
	cr_assert_eq(ok + aborted, 50);
	cr_assert_eq(s->failures[ATB_LOADGEN_FAIL_ABORTED], aborted);
	cr_assert_str_eq(atb_loadgen_failure_name(ATB_LOADGEN_FAIL_ABORTED), "aborted");
	atb_loadgen_result_free(res);
}

Test(loadgen, open_loop_cap_queues_requests_without_dispatch_lag)
{
	struct atb_loadgen_config cfg;
	struct atb_loadgen_result *res;
	const struct atb_loadgen_summary *s;

	start_server("--ttft-ms", "40", NULL);
	base_config(&cfg, 12, 2);
	cfg.arrival = ATB_LOADGEN_ARRIVAL_CONSTANT;
	cfg.rate_per_s = 500;
	cfg.max_concurrency = 2;
	res = run_ok(&cfg);
	s = atb_loadgen_result_summary(res);
	cr_assert_eq(s->completed, 12);
	cr_assert_eq(s->peak_in_flight, 2);
	cr_assert_leq(server_max_in_flight(), 2);
	/* requests waited for a slot: queueing, not the client's lag */
	cr_assert_gt(s->queue_ms.max, 30.0);
	cr_assert_lt(s->dispatch_lag_ms.median, s->queue_ms.median);
	atb_loadgen_result_free(res);
}

/* Run 6 requests one at a time against a server planting `fault` on every 2nd. */
static void expect_fault(const char *fault, enum atb_loadgen_failure want, long status)
{
	struct atb_loadgen_config cfg;
	struct atb_loadgen_result *res;
	const struct atb_loadgen_summary *s;
	size_t i;

	start_server("--fault", fault, "--fault-every", "2", "--token-ms", "2", NULL);
	base_config(&cfg, 6, 6);
	cfg.timeout_s = 2;
	res = run_ok(&cfg);
	s = atb_loadgen_result_summary(res);
	for (i = 0; i < 6; i++) {
		const struct atb_loadgen_record *r = atb_loadgen_result_record(res, i);

		if (i % 2 == 0) {
			cr_assert_eq(r->failure, ATB_LOADGEN_OK, "%s: request %zu: %s", fault, i,
				     r->error);
			check_text(r, 6);
			continue;
		}
		cr_assert_eq(r->failure, want, "%s: request %zu: %s (%s)", fault, i,
			     atb_loadgen_failure_name(r->failure), r->error);
		cr_assert_neq(r->error[0], '\0');
		if (status >= 0)
			cr_assert_eq(r->http_status, status);
	}
	cr_assert_eq(s->completed, 3, "%s", fault);
	cr_assert_eq(s->failed, 3);
	cr_assert_eq(s->failures[want], 3);
	stop_server();
	atb_loadgen_result_free(res);
}

Test(loadgen, http_500_and_400_are_classified_and_the_run_goes_on)
{
	expect_fault("http500", ATB_LOADGEN_FAIL_HTTP_5XX, 500);
	expect_fault("http400", ATB_LOADGEN_FAIL_HTTP_4XX, 400);
}

Test(loadgen, a_malformed_event_is_classified_and_the_run_goes_on)
{
	expect_fault("malformed", ATB_LOADGEN_FAIL_MALFORMED, 200);
}

Test(loadgen, a_reset_mid_stream_is_classified_and_the_run_goes_on)
{
	expect_fault("reset", ATB_LOADGEN_FAIL_RESET, 200);
}

Test(loadgen, a_server_that_never_answers_times_out_and_the_run_goes_on)
{
	expect_fault("hang", ATB_LOADGEN_FAIL_TIMEOUT, 0);
}

Test(loadgen, a_malformed_non_streamed_body_is_classified)
{
	struct atb_loadgen_config cfg;
	struct atb_loadgen_result *res;

	start_server("--fault", "malformed", NULL);
	base_config(&cfg, 2, 3);
	cfg.stream = 0;
	res = run_ok(&cfg);
	cr_assert_eq(atb_loadgen_result_summary(res)->failures[ATB_LOADGEN_FAIL_MALFORMED], 2);
	atb_loadgen_result_free(res);
}

Test(loadgen, slow_accept_is_slower_not_a_failure)
{
	struct atb_loadgen_config cfg;
	struct atb_loadgen_result *res;
	const struct atb_loadgen_record *r;

	start_server("--fault", "slow-accept", "--accept-ms", "300", NULL);
	base_config(&cfg, 2, 3);
	res = run_ok(&cfg);
	r = atb_loadgen_result_record(res, 0);
	cr_assert_eq(atb_loadgen_result_summary(res)->completed, 2);
	cr_assert_geq(r->first_token_ns - r->sent_ns, 250000000);
	atb_loadgen_result_free(res);
}

Test(loadgen, an_unreachable_server_is_a_connect_failure_for_every_request)
{
	struct atb_loadgen_config cfg;
	struct atb_loadgen_result *res;
	struct sockaddr_in a = {0};
	socklen_t alen = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	/* a port that was free a moment ago, now closed */
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
	close(fd);
	snprintf(server_url, sizeof(server_url), "http://127.0.0.1:%d", ntohs(a.sin_port));
	base_config(&cfg, 4, 3);
	res = run_ok(&cfg);
	cr_assert_eq(atb_loadgen_result_summary(res)->failures[ATB_LOADGEN_FAIL_CONNECT], 4);
	cr_assert_str_eq(atb_loadgen_result_record(res, 0)->text, "");
	atb_loadgen_result_free(res);
}

Test(loadgen, a_starved_client_is_flagged_client_limited)
{
	struct atb_loadgen_config cfg;
	struct atb_loadgen_result *res;
	const struct atb_loadgen_summary *s;

	start_server(NULL);
	base_config(&cfg, 10, 2);
	cfg.arrival = ATB_LOADGEN_ARRIVAL_CONSTANT;
	cfg.rate_per_s = 200; /* one every 5 ms ... */
	cfg.test_dispatch_delay_ns = 20000000; /* ... and 20 ms of client work before each */
	cfg.max_dispatch_lag_ms = 10; /* PROTO: engine.max_dispatch_lag_ms */
	res = run_ok(&cfg);
	s = atb_loadgen_result_summary(res);
	cr_assert(s->client_limited, "p99 lag %g ms", s->dispatch_lag_ms.p99);
	cr_assert_gt(s->dispatch_lag_ms.p99, 10.0);
	cr_assert_eq(s->max_dispatch_lag_ms, 10.0);
	/* PROTO: engine.client_lag: open loop, the run's end moved by the largest lag */
	cr_assert_eq(s->client_lag_ms, s->dispatch_lag_ms.max);
	cr_assert_float_eq(s->client_lag_share, s->client_lag_ms / (s->duration_s * 1000.0), 1e-12);
	/* 10 sends 20 ms apart in all where the schedule wanted 5: the lag piles up */
	cr_assert_gt(s->client_lag_ms, 100.0, "%g", s->client_lag_ms);
	atb_loadgen_result_free(res);
	/* closed loop: the summed lag over the concurrency */
	cfg.arrival = ATB_LOADGEN_ARRIVAL_CLOSED;
	cfg.concurrency = 2;
	res = run_ok(&cfg);
	s = atb_loadgen_result_summary(res);
	cr_assert_float_eq(s->client_lag_ms,
			   s->dispatch_lag_ms.mean * (double)s->dispatch_lag_ms.n / 2.0, 1e-9);
	cr_assert_gt(s->client_lag_ms, 10 * 20.0 / 2 - 1e-6, "%g", s->client_lag_ms);
	cr_assert_float_eq(s->client_lag_share, s->client_lag_ms / (s->duration_s * 1000.0), 1e-12);
	atb_loadgen_result_free(res);
	cfg.arrival = ATB_LOADGEN_ARRIVAL_CONSTANT;
	/* the same server and rate with a client that keeps up: not flagged */
	cfg.test_dispatch_delay_ns = 0;
	cfg.rate_per_s = 20;
	cfg.max_dispatch_lag_ms = 1000;
	res = run_ok(&cfg);
	s = atb_loadgen_result_summary(res);
	cr_assert(!s->client_limited);
	/* the timerfd wakes the loop on time, not on poll's millisecond grid */
	cr_assert_lt(s->dispatch_lag_ms.median, 5.0, "median lag %g ms", s->dispatch_lag_ms.median);
	atb_loadgen_result_free(res);
}

Test(loadgen, same_workload_digest_and_records_round_trip_as_json)
{
	struct atb_loadgen_config cfg;
	struct atb_loadgen_result *res;
	struct atb_loadgen_workload *wl;
	struct atb_error err;
	char digest[65], *text, path[] = "/tmp/atb-u-loadgen-XXXXXX";
	json_t *o;
	json_error_t je;
	int fd;
	size_t lines = 0;
	FILE *f;
	char line[8192];

	start_server(NULL);
	base_config(&cfg, 3, 2);
	res = run_ok(&cfg);
	wl = workload(&cfg);
	cr_assert_eq(atb_loadgen_workload_digest(wl, digest, &err), ATB_OK);
	cr_assert_str_eq(atb_loadgen_result_workload_digest(res), digest);
	cr_assert_eq(atb_loadgen_result_json(res, 1, &text, &err), ATB_OK);
	o = json_loads(text, 0, &je);
	cr_assert_not_null(o, "%s", je.text);
	cr_assert_eq(json_array_size(json_object_get(o, "records")), 3);
	cr_assert_eq(json_integer_value(json_object_get(json_object_get(o, "summary"),
							  "completed")), 3);
	json_decref(o);
	atb_free(text);
	fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	close(fd);
	cr_assert_eq(atb_loadgen_result_write_records(res, path, &err), ATB_OK, "%s", err.msg);
	f = fopen(path, "r");
	while (fgets(line, sizeof(line), f)) {
		o = json_loads(line, 0, &je);
		cr_assert_not_null(o, "%s", je.text);
		cr_assert_eq(json_array_size(json_object_get(o, "token_ns")), 2);
		json_decref(o);
		lines++;
	}
	fclose(f);
	unlink(path);
	cr_assert_eq(lines, 3);
	cr_assert_eq(atb_loadgen_result_write_records(res, "/no/such/dir/r.jsonl", &err),
		     ATB_ERR_IO);
	cr_assert(strstr(err.msg, "/no/such/dir/r.jsonl"));
	atb_loadgen_workload_free(wl);
	atb_loadgen_result_free(res);
}

Test(loadgen, long_prompts_and_responses_grow_the_buffers_and_the_cap_holds)
{
	struct atb_loadgen_config cfg;
	struct atb_loadgen_result *res;
	const struct atb_loadgen_record *r;

	start_server(NULL);
	base_config(&cfg, 1, 3000);
	cfg.input_len.a = 100000; /* a prompt of about 600 KB */
	res = run_ok(&cfg);
	r = atb_loadgen_result_record(res, 0);
	cr_assert_eq(r->failure, ATB_LOADGEN_OK, "%s", r->error);
	cr_assert_eq(r->tokens_in, 100000);
	cr_assert_eq(r->ntoken_ns, 3000);
	cr_assert(!strncmp(r->text + strlen(r->text) - 6, " w2999", 6));
	atb_loadgen_result_free(res);
	cfg.stream = 0;
	res = run_ok(&cfg);
	r = atb_loadgen_result_record(res, 0);
	cr_assert_eq(r->failure, ATB_LOADGEN_OK, "%s", r->error);
	cr_assert_eq(r->tokens_out, 3000);
	atb_loadgen_result_free(res);
	/* the hard maximum of a read buffer: too_large, and the run goes on */
	cfg.input_len.a = 4;
	cfg.max_response_bytes = 4096;
	cfg.requests = 2;
	res = run_ok(&cfg);
	cr_assert_eq(atb_loadgen_result_summary(res)->failures[ATB_LOADGEN_FAIL_TOO_LARGE], 2);
	atb_loadgen_result_free(res);
	cfg.stream = 1;
	res = run_ok(&cfg);
	cr_assert_eq(atb_loadgen_result_summary(res)->failures[ATB_LOADGEN_FAIL_TOO_LARGE], 2);
	atb_loadgen_result_free(res);
}

/*
 * Fail allocation k for every k of workload building (synthetic prompts,
 * canonical JSON, digest) and of the result's JSON and records: each gives
 * ATB_OK or ATB_ERR_NOMEM, never a crash or a leak (ASan).  The receive path
 * and dataset reading are not walked: jansson's lexer drops a byte when an
 * allocation fails and then asserts (load.c lex_scan_string), so an injected
 * failure inside json_loadb aborts inside jansson, not in atb.
 */
Test(loadgen, every_allocation_failure_is_survived)
{
	struct atb_loadgen_config cfg;
	struct atb_loadgen_result *res;
	struct atb_loadgen_workload *wl;
	struct atb_error err;
	char path[] = "/tmp/atb-u-loadgen-XXXXXX", *text;
	long k, n;
	int fd;

	start_server("--tokens", "3", NULL);
	base_config(&cfg, 3, 3);
	cfg.warmup = 1;
	cfg.arrival = ATB_LOADGEN_ARRIVAL_GAMMA;
	cfg.rate_per_s = 50;
	cfg.burstiness = 2;
	atb_alloc_install_json();
	fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	close(fd);
	atb_alloc_fail_at(0);
	cr_assert_eq(atb_loadgen_workload_new(&cfg, &wl, &err), ATB_OK, "%s", err.msg);
	atb_loadgen_workload_free(wl);
	n = atb_alloc_count();
	cr_assert_gt(n, 10);
	for (k = 1; k <= n + 2; k++) {
		atb_alloc_fail_at(k);
		if (atb_loadgen_workload_new(&cfg, &wl, &err) == ATB_OK)
			atb_loadgen_workload_free(wl);
		else
			cr_assert_eq(err.status, ATB_ERR_NOMEM, "k=%ld: %s", k, err.msg);
	}
	atb_alloc_fail_at(0);
	res = run_ok(&cfg);
	atb_alloc_fail_at(0);
	cr_assert_eq(atb_loadgen_result_json(res, 1, &text, &err), ATB_OK);
	atb_free(text);
	cr_assert_eq(atb_loadgen_result_write_records(res, path, &err), ATB_OK);
	n = atb_alloc_count();
	for (k = 1; k <= n + 2; k++) {
		enum atb_status s;

		atb_alloc_fail_at(k);
		s = atb_loadgen_result_json(res, 1, &text, &err);
		cr_assert(s == ATB_OK || s == ATB_ERR_NOMEM, "k=%ld: %s", k, err.msg);
		if (!s)
			atb_free(text);
		atb_alloc_fail_at(k);
		s = atb_loadgen_result_write_records(res, path, &err);
		cr_assert(s == ATB_OK || s == ATB_ERR_NOMEM, "k=%ld: %s", k, err.msg);
	}
	atb_alloc_fail_at(0);
	unlink(path);
	atb_loadgen_result_free(res);
}

struct progress_log {
	int calls;
	size_t last_done, last_total;
};

static void on_progress(void *ctx, size_t done, size_t total, double elapsed_s)
{
	struct progress_log *p = ctx;

	cr_assert_geq(done, p->last_done);
	cr_assert_geq(elapsed_s, 0);
	p->calls++;
	p->last_done = done;
	p->last_total = total;
}

Test(loadgen, progress_is_reported_about_once_a_second_and_at_the_end)
{
	struct atb_loadgen_config cfg;
	struct atb_loadgen_result *res;
	struct progress_log log = {0};

	start_server("--ttft-ms", "300", NULL);
	base_config(&cfg, 8, 2);
	cfg.warmup = 1;
	cfg.progress = on_progress;
	cfg.progress_ctx = &log;
	res = run_ok(&cfg); /* about 2.7 s */
	cr_assert(log.calls >= 2 && log.calls <= 5, "%d calls", log.calls);
	cr_assert_eq(log.last_done, 9);
	cr_assert_eq(log.last_total, 9);
	atb_loadgen_result_free(res);
}
