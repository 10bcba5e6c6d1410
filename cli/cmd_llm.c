/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * atb llm: the model-call client from the command line (ping a server, make
 * recorded calls, replay a run's calls without a server, show a run's call
 * audit and alarms, check the stored calls against their audit entries).
 * A thin layer over atb/llm.h.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/random.h>

#include <jansson.h>

#include "atb/llm.h"
#include "atb/protocol.h"
#include "atb/store.h"
#include "cli.h"
#include "banned.h"

static const char llm_help[] =
	"usage: atb llm ping [OPTIONS]\n"
	"       atb llm call --prompt-file F [--system-file F] [--run RUN] [--repeat N]\n"
	"                    [--expect text|json|fenced] [--temperature T] [--seed S]\n"
	"                    [--replay RUN] [--no-record] [OPTIONS]\n"
	"       atb llm show RUN [--json]\n"
	"       atb llm check [--json]\n"
	"       atb llm apply --reply F --into DIR --file NAME [--file NAME...]\n"
	"                     [--format fenced|json] [--json]\n"
	"\n"
	"An OpenAI-compatible chat client (POST BASE/v1/chat/completions): llama.cpp's\n"
	"server, vLLM, SGLang and hosted APIs.  max_tokens is always the protocol's\n"
	"llm.max_output_tokens and the per-attempt timeout at most its\n"
	"llm.request_timeout_s.  Timeouts, connection failures, 429 and 5xx are\n"
	"retried with exponential backoff and jitter; a Retry-After is honoured.\n"
	"\n"
	"  ping    one call (\"Reply with: pong\"), not recorded; prints the model's\n"
	"          answer, finish_reason, tokens and latency\n"
	"  call    one call (or --repeat N) recorded in the store: a row of table\n"
	"          llm_call (request hash, prompt, response, model, parameters, tokens\n"
	"          in/out/reasoning, finish_reason, latency, cost, error) and an\n"
	"          llm.call audit entry holding the row's hash.  Prints the content\n"
	"          (--json: one object a call).  After each call the run's share of\n"
	"          truncated (finish_reason length), empty, unparsable and failed\n"
	"          calls is judged against the protocol (PROTO: llm.truncation_alarm_rate,\n"
	"          llm.alarms); over a threshold the run halts as an infrastructure\n"
	"          defect (exit 1, the evidence on stdout) and takes no more calls\n"
	"  show    a run's call counts, tokens, cost, and its halt with the evidence\n"
	"  check   every stored call's hash against its row and its audit entry\n"
	"  apply   write the files a reply proposes (F: the model's content) into the\n"
	"          existing candidate folder DIR, all or nothing; only the --file names\n"
	"          (the task's surface: plain names, no folder, no '..', no absolute\n"
	"          path), each at most 1 MiB; a symlink or folder in DIR under such a\n"
	"          name refuses the reply.  fenced: ```LANG NAME blocks (NAME may be\n"
	"          left out when there is one --file), or a ```diff block: a unified\n"
	"          diff applied strictly to DIR's file (exact context, no fuzz);\n"
	"          json: {\"files\": {NAME: TEXT}}\n"
	"\n"
	"options:\n"
	"  --base-url URL     the server (else $ATB_LLM_BASE_URL, the config's base_url)\n"
	"  --model M          the model (else $ATB_LLM_MODEL, the config's model)\n"
	"  --config F         JSON config (else $ATB_LLM_CONFIG): base_url, model,\n"
	"                     api_key (file must be chmod 600), price_table, timeout_s,\n"
	"                     max_attempts, backoff_base_ms, backoff_max_ms,\n"
	"                     retry_after_max_s\n"
	"  --timeout-s S      per-attempt timeout, at most the protocol's\n"
	"  --max-attempts N   attempts per call, first included (default 5)\n"
	"  --backoff-ms MS    first retry delay; doubles each retry (default 500)\n"
	"  --prices F         price table {\"models\": {M: {\"prompt_usd_per_mtok\": N,\n"
	"                     \"completion_usd_per_mtok\": N}}} (\"*\" for any model);\n"
	"                     else $ATB_LLM_PRICES\n"
	"  --run RUN          label of the recorded calls (1-64 of [0-9a-zA-Z-];\n"
	"                     default: a new random one, printed on stderr)\n"
	"  --replay RUN       answer every call from RUN's recorded calls, byte for\n"
	"                     byte, without any server (the k-th request with a hash\n"
	"                     gets the k-th recorded answer); a request RUN did not\n"
	"                     record is an error (exit 2).  With --run the replayed\n"
	"                     calls are recorded there (transport replay)\n"
	"  --no-record        do not store the calls (no alarms then)\n"
	"  --expect KIND      what the content must be for the call to count as\n"
	"                     parsable: text (default), json, fenced (a ``` block)\n"
	"  --json             machine-readable output\n"
	"  -h, --help         this text\n"
	"\n"
	"The API key comes from $ATB_LLM_API_KEY or the config's api_key only: it is\n"
	"sent in the Authorization header and never stored, printed or audited.\n"
	"The store is --db PATH, $ATB_DB or ./atb.db.  docs/llm.md explains more.\n"
	"\n"
	"exit codes: 0 ok (a truncated or empty call is still a call: see its\n"
	"outcome); 1 the run halted as an infrastructure defect; 2 bad usage or\n"
	"input, a replayed request that was not recorded, a halted run; 3 the call\n"
	"failed after every attempt, or a store failure\n";

struct llm_args {
	const char *sub, *prompt_file, *system_file, *run, *replay, *config, *base_url;
	const char *model, *prices, *expect, *show_run, *reply, *into, *format;
	const char *files[16];
	size_t nfiles;
	int json, no_record;
	int64_t repeat, max_attempts;
	double temperature, timeout_s, backoff_ms;
	int has_seed, has_backoff;
	int64_t seed;
};

static int parse_real(const char *opt, const char *v, double lo, double *out)
{
	char *end = NULL;
	double x;

	errno = 0;
	x = strtod(v, &end);
	if (!*v || *end || errno || !isfinite(x) || x < lo)
		return cli_usage_error("llm", "bad %s '%s': expected a number >= %g", opt, v, lo);
	*out = x;
	return 0;
}

static int parse_args(int argc, char **argv, struct llm_args *a)
{
	int i, rc;

	for (i = 2; i < argc; i++) {
		const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

#define VAL(name, dst) \
		if (!strcmp(o, name)) { \
			if (!v) \
				return cli_usage_error("llm", "%s needs a value", name); \
			dst = v; \
			i++; \
			continue; \
		}
		VAL("--prompt-file", a->prompt_file)
		VAL("--system-file", a->system_file)
		VAL("--run", a->run)
		VAL("--replay", a->replay)
		VAL("--config", a->config)
		VAL("--base-url", a->base_url)
		VAL("--model", a->model)
		VAL("--prices", a->prices)
		VAL("--expect", a->expect)
		VAL("--reply", a->reply)
		VAL("--into", a->into)
		VAL("--format", a->format)
#undef VAL
		if (!strcmp(o, "--file") && v) {
			if (a->nfiles == sizeof(a->files) / sizeof(a->files[0]))
				return cli_usage_error("llm", "at most 16 --file names");
			a->files[a->nfiles++] = v;
			i++;
			continue;
		}
		if (!strcmp(o, "--json")) {
			a->json = 1;
		} else if (!strcmp(o, "--no-record")) {
			a->no_record = 1;
		} else if (v && !strcmp(o, "--repeat")) {
			if ((rc = cli_parse_int("llm", o, v, 1, 100000, &a->repeat)))
				return rc;
			i++;
		} else if (v && !strcmp(o, "--max-attempts")) {
			if ((rc = cli_parse_int("llm", o, v, 1, 100, &a->max_attempts)))
				return rc;
			i++;
		} else if (v && !strcmp(o, "--seed")) {
			if ((rc = cli_parse_int("llm", o, v, INT64_MIN, INT64_MAX, &a->seed)))
				return rc;
			a->has_seed = 1;
			i++;
		} else if (v && !strcmp(o, "--temperature")) {
			if ((rc = parse_real(o, v, 0, &a->temperature)))
				return rc;
			i++;
		} else if (v && !strcmp(o, "--timeout-s")) {
			if ((rc = parse_real(o, v, 0.001, &a->timeout_s)))
				return rc;
			i++;
		} else if (v && !strcmp(o, "--backoff-ms")) {
			if ((rc = parse_real(o, v, 0, &a->backoff_ms)))
				return rc;
			a->has_backoff = 1;
			i++;
		} else if (o[0] == '-' && o[1]) {
			return cli_usage_error("llm", "unknown option '%s'%s", o,
					       v ? "" : " (or it needs a value)");
		} else if (!strcmp(a->sub, "show") && !a->show_run) {
			a->show_run = o;
		} else {
			return cli_usage_error("llm", "unexpected argument '%s'", o);
		}
	}
	return 0;
}

static json_t *result_json(const struct atb_llm_result *r, const char *run)
{
	json_t *o = json_pack("{s:s, s:s, s:s?, s:s?, s:i, s:i, s:f}",
			      "outcome", atb_llm_outcome_name(r->outcome),
			      "request_hash", r->request_hash,
			      "content", r->content,
			      "finish_reason", r->finish_reason[0] ? r->finish_reason : NULL,
			      "http_status", r->http_status, "attempts", r->attempts,
			      "latency_s", r->latency_s);

	if (!o)
		return NULL;
#define COUNT(k, v) json_object_set_new(o, k, (v) >= 0 ? json_integer((json_int_t)(v)) : json_null())
	COUNT("prompt_tokens", r->prompt_tokens);
	COUNT("completion_tokens", r->completion_tokens);
	COUNT("reasoning_tokens", r->reasoning_tokens);
#undef COUNT
	json_object_set_new(o, "cost_usd", r->cost_usd >= 0 ? json_real(r->cost_usd) : json_null());
	if (r->error[0])
		json_object_set_new(o, "error", json_string(r->error));
	if (run && r->call_id) {
		json_object_set_new(o, "run", json_string(run));
		json_object_set_new(o, "call_id", json_integer((json_int_t)r->call_id));
		json_object_set_new(o, "n", json_integer((json_int_t)r->n));
	}
	if (r->alarm)
		json_object_set_new(o, "infrastructure_defect", json_loads(r->alarm, 0, NULL));
	return o;
}

static int read_text(const char *path, char **out)
{
	FILE *f = fopen(path, "rb");
	size_t cap = 4096, n = 0, got;
	char *b = NULL, *nb;

	*out = NULL;
	if (!f) {
		fprintf(stderr, "atb llm: cannot read '%s': %s\n", path, strerror(errno));
		return CLI_USAGE;
	}
	for (;;) {
		nb = atb_realloc(b, cap + 1);
		if (!nb) {
			atb_free(b);
			fclose(f);
			fprintf(stderr, "atb llm: out of memory\n");
			return CLI_RUNTIME;
		}
		b = nb;
		got = fread(b + n, 1, cap - n, f);
		n += got;
		if (n < cap)
			break;
		if (cap > ((size_t)16 << 20)) {
			atb_free(b);
			fclose(f);
			fprintf(stderr, "atb llm: prompt '%s' is over 16 MiB\n", path);
			return CLI_USAGE;
		}
		cap *= 2;
	}
	fclose(f);
	b[n] = '\0';
	if (strlen(b) != n) {
		atb_free(b);
		fprintf(stderr, "atb llm: prompt '%s' holds a NUL byte\n", path);
		return CLI_USAGE;
	}
	*out = b;
	return CLI_OK;
}

static int do_show(struct cli_ctx *ctx, const struct llm_args *a)
{
	struct atb_llm_run_stats rs;
	struct atb_store *s = NULL;
	struct atb_error err;
	json_t *o;

	atb_error_clear(&err);
	if (!a->show_run)
		return cli_usage_error("llm", "show needs a RUN");
	if (atb_store_open(ctx->db_path, ATB_STORE_READ_ONLY, &s, &err) ||
	    atb_llm_run_stats(s, a->show_run, &rs, &err)) {
		atb_store_close(s);
		return cli_fail(&err);
	}
	atb_store_close(s);
	if (!rs.calls) {
		atb_error_set(&err, ATB_ERR_NOT_FOUND, "run '%s' has no recorded model calls",
			      a->show_run);
		return cli_fail(&err);
	}
	if (a->json || ctx->json) {
		o = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:b, s:s?}",
			      "run", a->show_run, "calls", (json_int_t)rs.calls, "ok",
			      (json_int_t)rs.ok, "truncated", (json_int_t)rs.truncated, "empty",
			      (json_int_t)rs.empty, "unparsable", (json_int_t)rs.unparsable,
			      "failed", (json_int_t)rs.failed, "prompt_tokens",
			      (json_int_t)rs.prompt_tokens, "completion_tokens",
			      (json_int_t)rs.completion_tokens, "reasoning_tokens",
			      (json_int_t)rs.reasoning_tokens, "cost_usd", rs.cost_usd,
			      "latency_s", rs.latency_s, "halted", rs.halted, "halt_reason",
			      rs.halted ? rs.halt_reason : NULL);
		return cli_print_json("llm", o);
	}
	printf("run %s: %" PRId64 " calls, %" PRId64 " ok, %" PRId64 " truncated, %" PRId64
	       " empty, %" PRId64 " unparsable, %" PRId64 " failed\n", a->show_run, rs.calls, rs.ok,
	       rs.truncated, rs.empty, rs.unparsable, rs.failed);
	printf("tokens: %" PRId64 " prompt, %" PRId64 " completion (%" PRId64 " reasoning);"
	       " cost $%.6f; model time %.3f s\n", rs.prompt_tokens, rs.completion_tokens,
	       rs.reasoning_tokens, rs.cost_usd, rs.latency_s);
	if (rs.halted)
		printf("halted: infrastructure_defect (%s)\n", rs.halt_reason);
	return CLI_OK;
}

static int do_check(struct cli_ctx *ctx, const struct llm_args *a)
{
	struct atb_store *s = NULL;
	struct atb_error err;
	char problem[1024];
	int64_t n = 0;
	enum atb_status st;

	atb_error_clear(&err);
	if (atb_store_open(ctx->db_path, ATB_STORE_READ_ONLY, &s, &err))
		return cli_fail(&err);
	st = atb_llm_check(s, &n, problem, sizeof(problem), &err);
	atb_store_close(s);
	if (st && st != ATB_ERR_CHECK)
		return cli_fail(&err);
	if (a->json || ctx->json)
		return cli_print_json("llm", json_pack("{s:b, s:I, s:s?}", "ok", !st, "calls",
						       (json_int_t)n, "problem", st ? problem : NULL)) ||
		       (st ? CLI_CHECK_FAILED : CLI_OK);
	if (st) {
		fprintf(stderr, "atb llm check: %s\n", problem);
		return CLI_CHECK_FAILED;
	}
	printf("%" PRId64 " model calls match their rows and audit entries\n", n);
	return CLI_OK;
}

static int do_apply(struct cli_ctx *ctx, const struct llm_args *a)
{
	struct atb_llm_reply r;
	struct atb_error err;
	enum atb_llm_reply_format fmt = ATB_LLM_REPLY_FENCED;
	char *text = NULL;
	size_t i;
	int rc;

	if (!a->reply || !a->into || !a->nfiles)
		return cli_usage_error("llm", "apply needs --reply F, --into DIR and --file NAME");
	if (a->format && !strcmp(a->format, "json"))
		fmt = ATB_LLM_REPLY_JSON;
	else if (a->format && strcmp(a->format, "fenced"))
		return cli_usage_error("llm", "bad --format '%s': fenced or json", a->format);
	if ((rc = read_text(a->reply, &text)))
		return rc;
	atb_error_clear(&err);
	if (atb_llm_reply_parse(text, fmt, a->files, a->nfiles, &r, &err) ||
	    atb_llm_reply_write(&r, a->into, &err)) {
		atb_free(text);
		atb_llm_reply_release(&r);
		return cli_fail(&err);
	}
	atb_free(text);
	/* the bytes written: a diff's are the patched file's, not the diff's */
	for (i = 0; i < r.nfiles; i++) {
		char path[4096];
		struct stat sb;

		snprintf(path, sizeof(path), "%s/%s", a->into, r.files[i].name);
		if (r.files[i].diff && !lstat(path, &sb))
			r.files[i].len = (size_t)sb.st_size;
	}
	if (a->json || ctx->json) {
		json_t *arr = json_array();

		for (i = 0; i < r.nfiles; i++)
			json_array_append_new(arr, json_pack("{s:s, s:I, s:b}", "name",
							     r.files[i].name, "bytes",
							     (json_int_t)r.files[i].len, "diff",
							     r.files[i].diff));
		atb_llm_reply_release(&r);
		return cli_print_json("llm", json_pack("{s:s, s:o}", "into", a->into, "files", arr));
	}
	for (i = 0; i < r.nfiles; i++)
		printf("wrote %s/%s (%zu bytes%s)\n", a->into, r.files[i].name, r.files[i].len,
		       r.files[i].diff ? ", from a diff" : "");
	atb_llm_reply_release(&r);
	return CLI_OK;
}

static int copy_opt(char *dst, size_t size, const char *v, const char *opt)
{
	if (strlen(v) >= size)
		return cli_usage_error("llm", "%s is longer than %zu characters", opt, size - 1);
	memcpy(dst, v, strlen(v) + 1);
	return 0;
}

int cmd_llm(int argc, char **argv, struct cli_ctx *ctx)
{
	struct llm_args a;
	struct atb_llm_config cfg;
	struct atb_llm_client_opts co;
	struct atb_llm_client *c = NULL;
	struct atb_protocol *p = NULL;
	struct atb_store *s = NULL;
	struct atb_llm_request rq;
	struct atb_error err;
	char *prompt = NULL, *sys = NULL, runbuf[40];
	enum atb_status st = ATB_OK;
	int rc = CLI_OK, ping;
	int64_t k;

	if (cli_wants_help(argc, argv) || argc < 2) {
		fputs(llm_help, argc < 2 ? stderr : stdout);
		return argc < 2 ? CLI_USAGE : CLI_OK;
	}
	memset(&a, 0, sizeof(a));
	a.sub = argv[1];
	a.repeat = 1;
	a.json = ctx->json;
	if (strcmp(a.sub, "ping") && strcmp(a.sub, "call") && strcmp(a.sub, "show") &&
	    strcmp(a.sub, "check") && strcmp(a.sub, "apply"))
		return cli_usage_error("llm", "unknown subcommand '%s'", a.sub);
	rc = parse_args(argc, argv, &a);
	if (rc)
		return rc;
	if (!strcmp(a.sub, "show"))
		return do_show(ctx, &a);
	if (!strcmp(a.sub, "check"))
		return do_check(ctx, &a);
	if (!strcmp(a.sub, "apply"))
		return do_apply(ctx, &a);
	ping = !strcmp(a.sub, "ping");
	if (!ping && !a.prompt_file)
		return cli_usage_error("llm", "call needs --prompt-file F");
	if (ping && (a.prompt_file || a.replay || a.run || a.repeat != 1))
		return cli_usage_error("llm", "ping takes no prompt, run, replay or repeat");
	if (a.no_record && (a.run || a.replay))
		return cli_usage_error("llm", "--no-record excludes --run and --replay");
	memset(&rq, 0, sizeof(rq));
	rq.temperature = a.temperature;
	rq.has_seed = a.has_seed;
	rq.seed = a.seed;
	if (a.expect) {
		if (!strcmp(a.expect, "json"))
			rq.expect = ATB_LLM_EXPECT_JSON;
		else if (!strcmp(a.expect, "fenced"))
			rq.expect = ATB_LLM_EXPECT_FENCED;
		else if (strcmp(a.expect, "text"))
			return cli_usage_error("llm", "bad --expect '%s': text, json or fenced", a.expect);
	}
	if (ping) {
		rq.prompt = "Reply with: pong";
	} else {
		if ((rc = read_text(a.prompt_file, &prompt)))
			return rc;
		if (a.system_file && (rc = read_text(a.system_file, &sys))) {
			atb_free(prompt);
			return rc;
		}
		rq.prompt = prompt;
		rq.system = sys;
	}

	atb_error_clear(&err);
	st = atb_llm_config_load(a.config, &cfg, &err);
	if (st) {
		rc = cli_fail(&err);
		goto out_text;
	}
	if ((a.base_url && (rc = copy_opt(cfg.base_url, sizeof(cfg.base_url), a.base_url, "--base-url"))) ||
	    (a.model && (rc = copy_opt(cfg.model, sizeof(cfg.model), a.model, "--model"))) ||
	    (a.prices && (rc = copy_opt(cfg.price_table, sizeof(cfg.price_table), a.prices, "--prices"))))
		goto out_cfg;
	if (a.timeout_s > 0)
		cfg.timeout_s = a.timeout_s;
	if (a.max_attempts)
		cfg.max_attempts = (int)a.max_attempts;
	if (a.has_backoff)
		cfg.backoff_base_ms = a.backoff_ms;

	st = atb_protocol_load_current(atb_home(), &p, &err);
	if (!st && !ping && !a.no_record)
		st = atb_store_open(ctx->db_path, ATB_STORE_CREATE, &s, &err);
	if (st) {
		rc = cli_fail(&err);
		goto out_cfg;
	}
	if (s && !a.run && !a.replay) {
		unsigned char b[6];
		size_t i;

		/* a fresh label; the caller sees it to show or replay the run later */
		if (getrandom(b, sizeof(b), 0) == (ssize_t)sizeof(b)) {
			snprintf(runbuf, sizeof(runbuf), "llm-");
			for (i = 0; i < sizeof(b); i++)
				snprintf(runbuf + 4 + 2 * i, 3, "%02x", b[i]);
			a.run = runbuf;
			fprintf(stderr, "atb llm: run %s\n", a.run);
		}
	}
	memset(&co, 0, sizeof(co));
	co.cfg = &cfg;
	co.protocol = p;
	co.store = s;
	co.run = a.run;         /* NULL with --replay alone: answered, recorded nowhere */
	co.replay_run = a.replay;
	st = atb_llm_client_new(&co, &c, &err);
	if (st) {
		rc = cli_fail(&err);
		goto out;
	}
	for (k = 0; k < a.repeat; k++) {
		struct atb_llm_result r;

		atb_error_clear(&err);
		st = atb_llm_call(c, &rq, &r, &err);
		if (a.json) {
			json_t *o = result_json(&r, a.run);

			if (o && ATB_PRIMARY(st) == ATB_ERR_NOT_FOUND)
				json_object_set_new(o, "error", json_string(err.msg));
			rc = cli_print_json("llm", o);
		} else if (r.content && st != ATB_ERR_INFRA_DEFECT) {
			fwrite(r.content, 1, strlen(r.content), stdout);
			if (!*r.content || r.content[strlen(r.content) - 1] != '\n')
				putchar('\n');
		}
		if (!a.json && !st)
			fprintf(stderr, "atb llm: %s, finish_reason %s, %" PRId64 " prompt + %" PRId64
				" completion tokens, %.3f s, %d attempt(s)\n",
				atb_llm_outcome_name(r.outcome),
				r.finish_reason[0] ? r.finish_reason : "-", r.prompt_tokens,
				r.completion_tokens, r.latency_s, r.attempts);
		if (!a.json && r.alarm)
			printf("%s\n", r.alarm);
		atb_llm_result_release(&r);
		if (st) {
			rc = cli_fail(&err);
			break;
		}
	}
out:
	atb_llm_client_free(c);
	atb_store_close(s);
	atb_protocol_free(p);
out_cfg:
	atb_llm_config_release(&cfg);
out_text:
	atb_free(prompt);
	atb_free(sys);
	return rc;
}
