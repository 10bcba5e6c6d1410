/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The model-call client without a server: parsing a completion into its
 * outcome (truncated wins over empty, reasoning tokens counted), backoff
 * with jitter, Retry-After in both forms, cutting the key out of stored
 * text, the config file's rules, the protocol's llm.alarms key (required
 * from version 4), and replay at the client level: a replay client keyed by
 * request hash answers recorded requests byte for byte and refuses others.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "atb/alloc.h"
#include "atb/llm.h"
#include "atb/protocol.h"
#include "atb/store.h"
#include "llm/llm_int.h"
#include "banned.h"

static char dir[256];

static void setup(void)
{
	snprintf(dir, sizeof(dir), "%s/atb-ullm.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	cr_assert_not_null(mkdtemp(dir));
	unsetenv("ATB_LLM_BASE_URL");
	unsetenv("ATB_LLM_MODEL");
	unsetenv("ATB_LLM_API_KEY");
	unsetenv("ATB_LLM_CONFIG");
	unsetenv("ATB_LLM_PRICES");
}

static void teardown(void)
{
	char cmd[300];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	cr_assert_eq(system(cmd), 0);
}

TestSuite(llm, .init = setup, .fini = teardown);

static void parse(const char *body, enum atb_llm_expect e, struct atb_llm_result *r)
{
	memset(r, 0, sizeof(*r));
	r->prompt_tokens = r->completion_tokens = r->reasoning_tokens = -1;
	r->response = atb_strdup(body);
	atbi_llm_parse_response(r, e);
}

#define CHAT(content, finish, usage) \
	"{\"choices\":[{\"index\":0,\"finish_reason\":" finish ",\"message\":{\"role\":\"assistant\"," \
	"\"content\":" content "}}],\"usage\":" usage "}"

Test(llm, test_llm__parse_outcomes)
{
	struct atb_llm_result r;

	parse(CHAT("\"hi\"", "\"stop\"", "{\"prompt_tokens\":3,\"completion_tokens\":1}"),
	      ATB_LLM_EXPECT_TEXT, &r);
	cr_assert_eq(r.outcome, ATB_LLM_OK);
	cr_assert_str_eq(r.content, "hi");
	cr_assert_eq(r.prompt_tokens, 3);
	cr_assert_eq(r.reasoning_tokens, -1);
	atb_llm_result_release(&r);

	/* PROTO: llm.truncation_alarm_rate -- a reasoning model that spent every
	 * token thinking returns no content and "length": truncated, not empty */
	parse(CHAT("null", "\"length\"", "{\"prompt_tokens\":3,\"completion_tokens\":4096,"
		   "\"completion_tokens_details\":{\"reasoning_tokens\":4096}}"), ATB_LLM_EXPECT_TEXT, &r);
	cr_assert_eq(r.outcome, ATB_LLM_TRUNCATED);
	cr_assert_eq(r.reasoning_tokens, 4096);
	cr_assert_null(r.content);
	atb_llm_result_release(&r);

	parse(CHAT("\" \\n\"", "\"stop\"", "{}"), ATB_LLM_EXPECT_TEXT, &r);
	cr_assert_eq(r.outcome, ATB_LLM_EMPTY);
	atb_llm_result_release(&r);

	parse(CHAT("\"{\\\"a\\\": 1}\"", "\"stop\"", "{}"), ATB_LLM_EXPECT_JSON, &r);
	cr_assert_eq(r.outcome, ATB_LLM_OK);
	atb_llm_result_release(&r);
	parse(CHAT("\"{a: 1}\"", "\"stop\"", "{}"), ATB_LLM_EXPECT_JSON, &r);
	cr_assert_eq(r.outcome, ATB_LLM_UNPARSABLE);
	atb_llm_result_release(&r);
	parse(CHAT("\"only ``` one fence\"", "\"stop\"", "{}"), ATB_LLM_EXPECT_FENCED, &r);
	cr_assert_eq(r.outcome, ATB_LLM_UNPARSABLE);
	atb_llm_result_release(&r);
	/* a proposer of files reads JSON or fenced code: either is parsable, prose is not */
	parse(CHAT("\"{\\\"files\\\": {}}\"", "\"stop\"", "{}"), ATB_LLM_EXPECT_FILES, &r);
	cr_assert_eq(r.outcome, ATB_LLM_OK);
	atb_llm_result_release(&r);
	parse(CHAT("\"```c kernel.c\\nint x;\\n```\\n\"", "\"stop\"", "{}"), ATB_LLM_EXPECT_FILES, &r);
	cr_assert_eq(r.outcome, ATB_LLM_OK);
	atb_llm_result_release(&r);
	parse(CHAT("\"I would write a loop.\"", "\"stop\"", "{}"), ATB_LLM_EXPECT_FILES, &r);
	cr_assert_eq(r.outcome, ATB_LLM_UNPARSABLE);
	atb_llm_result_release(&r);

	parse("{\"error\":{\"message\":\"model not loaded\"}}", ATB_LLM_EXPECT_TEXT, &r);
	cr_assert_eq(r.outcome, ATB_LLM_FAILED);
	cr_assert(strstr(r.error, "model not loaded"), "%s", r.error);
	atb_llm_result_release(&r);
	parse("<html>", ATB_LLM_EXPECT_TEXT, &r);
	cr_assert_eq(r.outcome, ATB_LLM_FAILED);
	cr_assert(strstr(r.error, "not json"), "%s", r.error);
	atb_llm_result_release(&r);
}

Test(llm, test_llm__backoff_doubles_with_equal_jitter_and_a_cap)
{
	struct atb_llm_config c = {.backoff_base_ms = 100, .backoff_max_ms = 1000};

	cr_assert_float_eq(atbi_llm_backoff_ms(&c, 1, 0.0), 50, 1e-9);
	cr_assert_float_eq(atbi_llm_backoff_ms(&c, 1, 0.999999), 100, 1e-3);
	cr_assert_float_eq(atbi_llm_backoff_ms(&c, 3, 0.0), 200, 1e-9);
	cr_assert_float_eq(atbi_llm_backoff_ms(&c, 9, 0.5), 750, 1e-9);
	cr_assert_float_eq(atbi_llm_backoff_ms(&c, 1000, 1.0), 1000, 1e-9);
}

Test(llm, test_llm__retry_after_seconds_and_http_date)
{
	/* Wed, 21 Oct 2015 07:28:00 GMT = 1445412480 */
	cr_assert_float_eq(atbi_llm_retry_after_s(" 5\r\n", 0), 5, 1e-9);
	cr_assert_float_eq(atbi_llm_retry_after_s("2.5", 0), 2.5, 1e-9);
	cr_assert_float_eq(atbi_llm_retry_after_s(" Wed, 21 Oct 2015 07:28:00 GMT\r\n", 1445412470),
			   10, 1e-9);
	cr_assert_float_eq(atbi_llm_retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT", 1445412490), 0,
			   1e-9);
	cr_assert_lt(atbi_llm_retry_after_s("soon", 0), 0);
	cr_assert_lt(atbi_llm_retry_after_s("-3", 0), 0);
}

Test(llm, test_llm__redact_cuts_every_copy_of_the_key)
{
	char *r = atbi_llm_redact("a sk-12345678 b sk-12345678", "sk-12345678");

	cr_assert_str_eq(r, "a [redacted] b [redacted]");
	atb_free(r);
	r = atbi_llm_redact("short keys are not hunted: abc", "abc");
	cr_assert_str_eq(r, "short keys are not hunted: abc");
	atb_free(r);
}

static void write_file(const char *name, const char *text, mode_t mode, char *path, size_t size)
{
	FILE *f;

	snprintf(path, size, "%s/%s", dir, name);
	f = fopen(path, "w");
	cr_assert_not_null(f);
	fputs(text, f);
	fclose(f);
	cr_assert_eq(chmod(path, mode), 0);
}

Test(llm, test_llm__config_file_then_environment)
{
	struct atb_llm_config c;
	struct atb_error err;
	char path[400];

	write_file("c.json", "{\"base_url\": \"http://a:1\", \"model\": \"m1\", \"max_attempts\": 3,"
		   " \"api_key\": \"from-file-key\"}", 0600, path, sizeof(path));
	setenv("ATB_LLM_MODEL", "m2", 1);
	cr_assert_eq(atb_llm_config_load(path, &c, &err), ATB_OK, "%s", err.msg);
	cr_assert_str_eq(c.base_url, "http://a:1");
	cr_assert_str_eq(c.model, "m2");
	cr_assert_eq(c.max_attempts, 3);
	cr_assert_str_eq(c.api_key, "from-file-key");
	atb_llm_config_release(&c);
	cr_assert_eq(c.api_key[0], '\0');

	cr_assert_eq(chmod(path, 0640), 0);
	cr_assert_eq(atb_llm_config_load(path, &c, &err), ATB_ERR_SCHEMA);
	cr_assert(strstr(err.msg, "chmod 600"), "%s", err.msg);
	cr_assert_str_eq(err.field, "api_key");

	write_file("u.json", "{\"modle\": \"x\"}", 0644, path, sizeof(path));
	cr_assert_eq(atb_llm_config_load(path, &c, &err), ATB_ERR_SCHEMA);
	cr_assert(strstr(err.msg, "unknown key 'modle'"), "%s", err.msg);
	write_file("p.json", "{\"model\": \"x\",\n \"max_attempts\": }", 0644, path, sizeof(path));
	cr_assert_eq(atb_llm_config_load(path, &c, &err), ATB_ERR_PARSE);
	cr_assert_eq(err.line, 2);
	write_file("n.json", "{\"max_attempts\": 0}", 0644, path, sizeof(path));
	cr_assert_eq(atb_llm_config_load(path, &c, &err), ATB_ERR_SCHEMA);
	cr_assert_str_eq(err.field, "max_attempts");
}

/* text with add put right after the first needle (malloc'd; the test owns it). */
static char *insert_after(char *text, const char *needle, const char *add)
{
	char *at = strstr(text, needle), *out;
	size_t head, nadd = strlen(add), n = strlen(text);

	cr_assert_not_null(at, "no '%s'", needle);
	head = (size_t)(at - text) + strlen(needle);
	out = atb_malloc(n + nadd + 1);
	cr_assert_not_null(out);
	memcpy(out, text, head);
	memcpy(out + head, add, nadd);
	memcpy(out + head + nadd, text + head, n - head + 1);
	atb_free(text);
	return out;
}

Test(llm, test_llm__alarms_key_required_from_version_4)
{
	struct atb_protocol *p = NULL;
	struct atb_error err;
	char *text = NULL, *v, path[400];
	size_t len;
	FILE *f;

	cr_assert_eq(atb_protocol_load_file(ATB_SOURCE_DIR "/protocol/v3.yaml", &p, &err), ATB_OK,
		     "%s", err.msg);
	cr_assert_eq(p->llm.has_alarms, 0);
	atb_protocol_free(p);

	cr_assert_eq(atbi_read_file(ATB_SOURCE_DIR "/protocol/v3.yaml", &text, &len, &err), ATB_OK);
	v = strstr(text, "\nversion: 3");
	cr_assert_not_null(v);
	v[10] = '4';
	/* the other keys version 4 requires, so that llm.alarms is what is missing */
	text = insert_after(text, "interleave: randomized_pairs", "\n  placement: shuffled");
	text = insert_after(text, "\ngates:\n", "  clocks: {floor_ratio: 0.75, max_share_below: 0.1,"
			    " max_arm_rel_difference: 0.02}\n");
	text = insert_after(text, "    margin: 0.9", "\n    cache_allowance: 2");
	text = insert_after(text, "\ngates:\n", "  hang: {startup_s: 120, min_s: 20, factor: 10,"
			    " progress_ms: 250}\n  background: {max_cpu_share: 0.02, abs_slack_ms: 20}\n");
	snprintf(path, sizeof(path), "%s/v4.yaml", dir);
	f = fopen(path, "w");
	fputs(text, f);
	fclose(f);
	cr_assert_eq(atb_protocol_load_file(path, &p, &err), ATB_ERR_SCHEMA);
	cr_assert_str_eq(err.field, "llm.alarms");
	cr_assert(strstr(err.msg, "required from version 4"), "%s", err.msg);

	v = strstr(text, "  request_timeout_s: 600\n");
	cr_assert_not_null(v);
	f = fopen(path, "w");
	fwrite(text, 1, (size_t)(v - text), f);
	fputs("  request_timeout_s: 600\n  alarms:\n    min_calls: 8\n    empty_rate: 0.2\n"
	      "    unparsable_rate: 0.3\n    failed_rate: 0.4\n", f);
	fputs(v + strlen("  request_timeout_s: 600\n"), f);
	fclose(f);
	atb_free(text);
	cr_assert_eq(atb_protocol_load_file(path, &p, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(p->llm.has_alarms, 1);
	cr_assert_eq(p->llm.alarm_min_calls, 8);
	cr_assert_float_eq(p->llm.alarm_failed_rate, 0.4, 1e-12);
	atb_protocol_free(p);
}

/* Record one call of run under hash with this response body (as a server would give it). */
static void record(struct atb_store *s, const struct atb_protocol *p, const char *run,
		   const char *hash, const char *body)
{
	struct atb_llm_result r;
	struct atbi_llm_row row = {
		.run = run, .transport = "http", .request_hash = hash, .request = "{}",
		.prompt = "p", .model = "m", .params = "{}", .r = &r,
	};
	struct atb_error err;
	int64_t id, n;
	char *alarm = NULL;

	parse(body, ATB_LLM_EXPECT_TEXT, &r);
	r.attempts = 1;
	r.http_status = 200;
	r.cost_usd = -1;
	cr_assert_eq(atbi_llm_record(s, p, &row, NULL, &id, &n, &alarm, &err), ATB_OK, "%s", err.msg);
	cr_assert_null(alarm);
	atb_llm_result_release(&r);
}

Test(llm, test_llm__replay_by_request_hash_without_a_server)
{
	struct atb_protocol *p = NULL;
	struct atb_store *s = NULL;
	struct atb_llm_config cfg;
	struct atb_llm_client *c = NULL;
	struct atb_llm_client_opts o;
	struct atb_llm_request rq = {.prompt = "write a kernel"};
	struct atb_llm_result r, first;
	struct atb_error err;
	const char *b1 = CHAT("\"one \\u00e9\"", "\"stop\"", "{\"prompt_tokens\":5,\"completion_tokens\":2}");
	const char *b2 = CHAT("\"two\"", "\"length\"", "{\"prompt_tokens\":5,\"completion_tokens\":9}");
	char path[400];

	snprintf(path, sizeof(path), "%s/t.db", dir);
	cr_assert_eq(atb_protocol_load_file(ATB_SOURCE_DIR "/protocol/v3.yaml", &p, &err), ATB_OK);
	cr_assert_eq(atb_store_open(path, ATB_STORE_CREATE, &s, &err), ATB_OK, "%s", err.msg);
	memset(&cfg, 0, sizeof(cfg));
	snprintf(cfg.model, sizeof(cfg.model), "m");
	cfg.max_attempts = 1;
	memset(&o, 0, sizeof(o));
	o.cfg = &cfg;
	o.protocol = p;
	o.store = s;

	/* a replay needs a recorded run */
	o.replay_run = "rec";
	cr_assert_eq(atb_llm_client_new(&o, &c, &err), ATB_ERR_NOT_FOUND);
	cr_assert_null(c);

	/* learn the request's hash from a client that cannot reach any server */
	snprintf(cfg.base_url, sizeof(cfg.base_url), "http://127.0.0.1:1");
	o.replay_run = NULL;
	cr_assert_eq(atb_llm_client_new(&o, &c, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(atb_llm_call(c, &rq, &first, &err), ATB_ERR_LLM);
	cr_assert_eq(first.outcome, ATB_LLM_FAILED);
	cr_assert_eq(first.call_id, 0, "no run: nothing recorded");
	atb_llm_client_free(c);

	record(s, p, "rec", first.request_hash, b1);
	record(s, p, "rec", first.request_hash, b2);
	cfg.base_url[0] = '\0';  /* no server at all */
	o.replay_run = "rec";
	cr_assert_eq(atb_llm_client_new(&o, &c, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(atb_llm_call(c, &rq, &r, &err), ATB_OK, "%s", err.msg);
	cr_assert_str_eq(r.request_hash, first.request_hash);
	cr_assert_str_eq(r.response, b1, "the recorded bytes, unchanged");
	cr_assert_str_eq(r.content, "one \xc3\xa9");
	cr_assert_eq(r.attempts, 0);
	atb_llm_result_release(&r);
	/* the second request with that hash gets the second recording */
	cr_assert_eq(atb_llm_call(c, &rq, &r, &err), ATB_OK, "%s", err.msg);
	cr_assert_str_eq(r.response, b2);
	cr_assert_eq(r.outcome, ATB_LLM_TRUNCATED);
	cr_assert_eq(r.completion_tokens, 9);
	atb_llm_result_release(&r);
	cr_assert_eq(atb_llm_call(c, &rq, &r, &err), ATB_ERR_NOT_FOUND);
	cr_assert(strstr(err.msg, "every recording is used"), "%s", err.msg);
	atb_llm_result_release(&r);
	/* another prompt, another temperature: other bytes, another hash, refused */
	rq.prompt = "write another kernel";
	cr_assert_eq(atb_llm_call(c, &rq, &r, &err), ATB_ERR_NOT_FOUND);
	cr_assert(strstr(err.msg, "was not recorded in run 'rec'"), "%s", err.msg);
	atb_llm_result_release(&r);
	rq.prompt = "write a kernel";
	rq.temperature = 0.5;
	cr_assert_eq(atb_llm_call(c, &rq, &r, &err), ATB_ERR_NOT_FOUND);
	atb_llm_result_release(&r);
	/* a response_format is part of the request, so of its hash; a bad one is refused */
	rq.temperature = 0;
	rq.response_format = "{\"type\":\"json_object\"}";
	cr_assert_eq(atb_llm_call(c, &rq, &r, &err), ATB_ERR_NOT_FOUND);
	cr_assert(strstr(err.msg, "was not recorded"), "%s", err.msg);
	cr_assert_str_neq(r.request_hash, first.request_hash);
	atb_llm_result_release(&r);
	rq.response_format = "[1]";
	cr_assert_eq(atb_llm_call(c, &rq, &r, &err), ATB_ERR_USAGE);
	cr_assert(strstr(err.msg, "response_format is not a json object"), "%s", err.msg);
	atb_llm_result_release(&r);
	/* the model a replay asks: the recorded run's */
	{
		char model[64];

		cr_assert_eq(atb_llm_run_model(s, "rec", model, sizeof(model), &err), ATB_OK, "%s",
			     err.msg);
		cr_assert_str_eq(model, "m");
		cr_assert_eq(atb_llm_run_model(s, "nosuch", model, sizeof(model), &err),
			     ATB_ERR_NOT_FOUND);
		cr_assert(strstr(err.msg, "has no recorded model calls"), "%s", err.msg);
	}
	atb_llm_result_release(&first);
	atb_llm_client_free(c);
	atb_store_close(s);
	atb_protocol_free(p);
}

/* ---- unified diffs (src/llm/diff.c) ---- */

static char *applied(const char *base, const char *diff, struct atb_error *err)
{
	char *out = NULL;
	size_t n = 0;

	atb_error_clear(err);
	if (atbi_llm_diff_apply("k.c", base, strlen(base), diff, strlen(diff), &out, &n, err))
		return NULL;
	cr_assert_eq(strlen(out), n);
	return out;
}

Test(llm, test_llm__diff_two_hunks_in_order_and_at_the_end)
{
	struct atb_error err;
	char *o = applied("a\nb\nc\nd\ne\nf\n",
			  "@@ -1,2 +1,2 @@\n-a\n+A\n b\n@@ -5,2 +5,3 @@\n e\n f\n+g\n", &err);

	cr_assert(o, "%s", err.msg);
	cr_assert_str_eq(o, "A\nb\nc\nd\ne\nf\ng\n");
	atb_free(o);
}

Test(llm, test_llm__diff_no_newline_at_end_of_file_both_ways)
{
	struct atb_error err;
	char *o = applied("x\ny", "@@ -2 +2 @@\n-y\n\\ No newline at end of file\n+z\n", &err);

	cr_assert(o, "%s", err.msg);
	cr_assert_str_eq(o, "x\nz\n");
	atb_free(o);
	o = applied("x\ny\n", "@@ -2 +2 @@\n-y\n+z\n\\ No newline at end of file\n", &err);
	cr_assert(o, "%s", err.msg);
	cr_assert_str_eq(o, "x\nz");
	atb_free(o);
	/* no marker: the file's own ending is kept */
	o = applied("x\ny", "@@ -2 +2 @@\n-y\n+z\n", &err);
	cr_assert(o, "%s", err.msg);
	cr_assert_str_eq(o, "x\nz");
	atb_free(o);
}

Test(llm, test_llm__diff_takes_the_nearest_match_to_the_stated_line)
{
	struct atb_error err;
	/* "t" appears at lines 1, 4 and 7; the hunk says 5: the one at 4 is nearest */
	char *o = applied("t\n1\n2\nt\n3\n4\nt\n", "@@ -5,1 +5,1 @@\n-t\n+T\n", &err);

	cr_assert(o, "%s", err.msg);
	cr_assert_str_eq(o, "t\n1\n2\nT\n3\n4\nt\n");
	atb_free(o);
}

Test(llm, test_llm__diff_hunks_out_of_order_or_overlapping_are_refused)
{
	struct atb_error err;

	/* the second hunk's old line is before the first's end: not searched backwards */
	cr_assert_null(applied("a\nb\nc\n", "@@ -2 +2 @@\n-b\n+B\n@@ -1 +1 @@\n-a\n+A\n", &err));
	cr_assert(strstr(err.msg, "hunk 2"), "%s", err.msg);
	cr_assert_null(applied("a\nb\n", "@@ -1,2 +1,2 @@\n-a\n+A\n", &err));
	cr_assert(strstr(err.msg, "header counts 2 old and 2 new"), "%s", err.msg);
	cr_assert_null(applied("a\n", "garbage\n", &err));
	cr_assert(strstr(err.msg, "not a hunk header"), "%s", err.msg);
	cr_assert_null(applied("a\n", "\n\n", &err));
	cr_assert(strstr(err.msg, "has no hunk"), "%s", err.msg);
}

Test(llm, test_llm__diff_split_names_and_a_deletion)
{
	struct atbi_llm_diff_part p[4];
	struct atb_error err;
	size_t n;
	const char *d = "diff --git a/k.c b/k.c\nindex 1..2\n--- a/k.c\t2026-01-01\n+++ b/k.c\t2026-01-01\n"
			"@@ -1 +1 @@\n--- x\n+++ y\n--- /dev/null\n+++ b/n.c\n@@ -0,0 +1 @@\n+int n;\n";

	atb_error_clear(&err);
	cr_assert_eq(atbi_llm_diff_split(d, strlen(d), p, 4, &n, &err), ATB_OK, "%s", err.msg);
	/* "--- x" / "+++ y" inside the first hunk are its lines, not a new file */
	cr_assert_eq(n, 2);
	cr_assert_eq(p[0].nlen, 3);
	cr_assert(!memcmp(p[0].name, "k.c", 3));
	cr_assert(!p[0].create);
	cr_assert(!memcmp(p[0].body, "@@ -1 +1 @@\n--- x\n+++ y\n", p[0].blen));
	cr_assert_eq(p[1].nlen, 3);
	cr_assert(!memcmp(p[1].name, "n.c", 3));
	cr_assert(p[1].create);
	d = "--- a/k.c\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n";
	cr_assert_eq(atbi_llm_diff_split(d, strlen(d), p, 4, &n, &err), ATB_ERR_SCHEMA);
	cr_assert(strstr(err.msg, "deletes a file"), "%s", err.msg);
}
