/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Engine specs, tasks, configurations, rendering, proposals, the
 * output-equivalence comparison and the lifecycle.  The lifecycle tests
 * start the TEST DOUBLE engine (tests/fixtures/engine/double_engine.py, a
 * fake OpenAI-compatible server, not an engine) on loopback: ready, probes,
 * stop; exits at start on a bad flag; never ready; port already taken;
 * death detected; a task's cpus pins the engine (its /proc affinity) and a
 * CPU the box lacks is a start failure.  The whole A/B with its gates is
 * tests/cli/t3100*.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <jansson.h>

#include "atb/alloc.h"
#include "atb/engine.h"
#include "engine/engine_int.h"
#include "banned.h"

static char tmp[256];

static void setup(void)
{
	snprintf(tmp, sizeof(tmp), "%s/atb-uengine.XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	cr_assert_not_null(mkdtemp(tmp));
	setenv("ATB_SOURCE_DIR", ATB_SOURCE_DIR, 1);
}

static void teardown(void)
{
	char cmd[400];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	cr_assert_eq(system(cmd), 0);
}

TestSuite(engine, .init = setup, .fini = teardown);

static const char *write_file(const char *name, const char *text)
{
	static char path[400];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", tmp, name);
	f = fopen(path, "w");
	cr_assert_not_null(f);
	fputs(text, f);
	fclose(f);
	return path;
}

static struct atb_engine_spec *load_ok(const char *rel)
{
	struct atb_engine_spec *s = NULL;
	struct atb_error err;
	char path[400];

	snprintf(path, sizeof(path), "%s/%s", ATB_SOURCE_DIR, rel);
	atb_error_clear(&err);
	cr_assert_eq(atb_engine_spec_load(path, &s, &err), ATB_OK, "%s: %s", rel, err.msg);
	return s;
}

Test(engine, test_engine__bundled_specs_load)
{
	struct atb_engine_spec *v = load_ok("engines/vllm.yaml");
	struct atb_engine_spec *g = load_ok("engines/sglang.yaml");
	struct atb_engine_spec *d = load_ok("tests/fixtures/engine/double.yaml");

	cr_assert_str_eq(v->name, "vllm");
	cr_assert_not_null(atb_engine_spec_flag(v, "prompt_lookup_max"));
	cr_assert_eq(atb_engine_spec_flag(v, "enable_chunked_prefill")->render, ATB_RENDER_BOOL_PAIR);
	cr_assert_not_null(atb_engine_spec_flag(g, "speculative_ngram_max_match_window_size"));
	cr_assert_eq(v->run_here, 0);
	cr_assert_eq(g->run_here, 0);
	cr_assert_str_eq(d->name, "double");
	atb_engine_spec_free(v);
	atb_engine_spec_free(g);
	atb_engine_spec_free(d);
}

#define SPEC_HEAD "spec_version: 1\nname: x\nlaunch:\n  argv: [e, \"{port}\"]\nreadiness:\n" \
		  "  path: /health\n  timeout_s: 5\n"

static void spec_bad(const char *text, unsigned line, const char *field, const char *msg_part)
{
	struct atb_engine_spec *s = (void *)1;
	struct atb_error err;

	atb_error_clear(&err);
	cr_assert_eq(atb_engine_spec_load(write_file("bad.yaml", text), &s, &err), ATB_ERR_SCHEMA,
		     "%s", err.msg);
	cr_assert_null(s);
	cr_assert_eq(err.line, line, "line %u, want %u: %s", err.line, line, err.msg);
	cr_assert_str_eq(err.field, field);
	cr_assert(strstr(err.msg, msg_part), "message '%s' lacks '%s'", err.msg, msg_part);
	cr_assert(strstr(err.file, "bad.yaml"));
}

Test(engine, test_engine__spec_errors_name_line_field_and_value)
{
	spec_bad(SPEC_HEAD "colour: red\n", 8, "colour", "unknown key 'colour'");
	spec_bad(SPEC_HEAD "flags:\n  - {name: a, cli: --a, type: integer, render: value}\n", 9,
		 "flags[0].type", "unknown type 'integer'");
	spec_bad(SPEC_HEAD "flags:\n  - {name: a, cli: --a, type: int, render: value,\n"
		 "     domain: {min: 5, max: 1}}\n", 10, "flags[0].domain", "min 5 is above max 1");
	spec_bad(SPEC_HEAD "flags:\n  - {name: a, cli: --a, type: int, render: switch,\n"
		 "     domain: {min: 1, max: 2}}\n", 9, "flags[0].render", "for bool flags");
	spec_bad(SPEC_HEAD "flags:\n  - {name: a, type: int, domain: {min: 1, max: 2},\n"
		 "     render: {json: --cfg, key: k}}\n", 9, "flags[0]", "not listed in json_flags");
	spec_bad("spec_version: 1\nname: x\nlaunch:\n  argv: [e, \"{prot}\"]\nreadiness:\n"
		 "  path: /health\n  timeout_s: 5\n", 4, "launch.argv[1]", "unknown placeholder '{prot}'");
	spec_bad(SPEC_HEAD "flags:\n  - {name: a, cli: --a, type: enum, render: value,\n"
		 "     domain: {values: [x, y]}, default: z}\n", 10, "flags[0].default",
		 "not one of the values");
	spec_bad("spec_version: 1\nname: x\nreadiness:\n  path: /health\n  timeout_s: 5\n", 1,
		 "launch", "missing required key 'launch'");
}

static struct atb_engine_task *task_ok(const char *path)
{
	struct atb_engine_task *t = NULL;
	struct atb_error err;

	atb_error_clear(&err);
	cr_assert_eq(atb_engine_task_load(ATB_SOURCE_DIR, path, &t, &err), ATB_OK, "%s", err.msg);
	return t;
}

Test(engine, test_engine__task_loads_and_detects)
{
	struct atb_engine_task *t = task_ok(ATB_SOURCE_DIR "/tests/fixtures/engine/task.yaml");

	cr_assert(atb_engine_task_detect(ATB_SOURCE_DIR "/tests/fixtures/engine/task.yaml"));
	cr_assert_not(atb_engine_task_detect(ATB_SOURCE_DIR "/engines/vllm.yaml"));
	cr_assert_str_eq(t->spec->name, "double");
	cr_assert_eq(t->nprobes, 5);
	cr_assert_eq(t->workload.requests, 32);
	cr_assert_eq(t->workload.concurrency, 4);
	cr_assert_eq(t->nsearch, 1);
	atb_engine_task_free(t);
}

Test(engine, test_engine__task_errors)
{
	struct atb_engine_task *t = NULL;
	struct atb_error err;
	char text[1024];

	snprintf(text, sizeof(text),
		 "kind: engine\nname: t\nengine: %s/engines/vllm.yaml\nmodel: m\n"
		 "workload: {requests: 8, arrival: sometimes}\nprobes: {max_tokens: 8, prompts: [a]}\n",
		 ATB_SOURCE_DIR);
	atb_error_clear(&err);
	cr_assert_eq(atb_engine_task_load(ATB_SOURCE_DIR, write_file("t.yaml", text), &t, &err),
		     ATB_ERR_SCHEMA);
	cr_assert_str_eq(err.field, "workload.arrival");
	cr_assert_eq(err.line, 5);
	cr_assert(strstr(err.msg, "sometimes"), "%s", err.msg);
	snprintf(text, sizeof(text),
		 "kind: engine\nname: t\nengine: vllm\nmodel: m\nworkload: {requests: 8}\n"
		 "probes: {max_tokens: 8, prompts: [a]}\nsearch: {flags: [max_num_seqs, warp_speed]}\n");
	atb_error_clear(&err);
	cr_assert_eq(atb_engine_task_load(ATB_SOURCE_DIR, write_file("t.yaml", text), &t, &err),
		     ATB_ERR_SCHEMA);
	cr_assert_str_eq(err.field, "search.flags[1]");
	cr_assert(strstr(err.msg, "no flag 'warp_speed'"), "%s", err.msg);
	cr_assert_null(t);
}

static struct atb_engine_task *vllm_task(void)
{
	return task_ok(write_file("v.yaml", "kind: engine\nname: v\nengine: vllm\nmodel: org/m\n"
					    "workload: {requests: 8}\n"
					    "probes: {max_tokens: 8, prompts: [a]}\n"));
}

static void render_is(struct atb_engine_task *t, const char *settings, const char *want)
{
	struct atb_engine_config c;
	struct atb_error err;
	char **argv = NULL, got[2048] = "";
	size_t argc = 0, i, n = 0;

	atb_error_clear(&err);
	cr_assert_eq(atb_engine_config_parse(t->spec, settings, &c, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(atb_engine_render(t, &c, 8123, "/r", &argv, &argc, &err), ATB_OK, "%s",
		     err.msg);
	for (i = 0; i < argc; i++)
		n += (size_t)snprintf(got + n, sizeof(got) - n, "%s%s", i ? " " : "", argv[i]);
	cr_assert_str_eq(got, want);
	atb_engine_argv_free(argv, argc);
}

Test(engine, test_engine__render_every_kind)
{
	struct atb_engine_task *t = vllm_task();

	render_is(t, "", "vllm serve org/m --host 127.0.0.1 --port 8123");
	render_is(t, "max_num_seqs=64,enable_chunked_prefill=false,enforce_eager=true",
		  "vllm serve org/m --host 127.0.0.1 --port 8123 --max-num-seqs 64 "
		  "--no-enable-chunked-prefill --enforce-eager");
	render_is(t, "enforce_eager=false", "vllm serve org/m --host 127.0.0.1 --port 8123");
	/* JSON members: one argument, canonical, the fixed keys merged in. */
	render_is(t, "prompt_lookup_max=4,num_speculative_tokens=5",
		  "vllm serve org/m --host 127.0.0.1 --port 8123 --speculative-config "
		  "{\"method\":\"ngram\",\"num_speculative_tokens\":5,\"prompt_lookup_max\":4}");
	render_is(t, "cudagraph_capture_sizes=1 2 4 8",
		  "vllm serve org/m --host 127.0.0.1 --port 8123 --compilation-config "
		  "{\"cudagraph_capture_sizes\":[1,2,4,8]}");
	atb_engine_task_free(t);
}

Test(engine, test_engine__config_refuses_bad_settings)
{
	struct atb_engine_task *t = vllm_task();
	struct atb_engine_config c;
	struct atb_error err;

	cr_assert_eq(atb_engine_config_parse(t->spec, "warp=1", &c, &err), ATB_ERR_USAGE);
	cr_assert(strstr(err.msg, "no flag 'warp'"));
	cr_assert_eq(atb_engine_config_parse(t->spec, "max_num_seqs=7", &c, &err), ATB_ERR_USAGE);
	cr_assert(strstr(err.msg, "not one of its"));
	cr_assert_eq(atb_engine_config_parse(t->spec, "gpu_memory_utilization=0.99", &c, &err),
		     ATB_ERR_USAGE);
	cr_assert(strstr(err.msg, "outside its domain"));
	cr_assert_eq(atb_engine_config_parse(t->spec, "enforce_eager=maybe", &c, &err),
		     ATB_ERR_USAGE);
	cr_assert_eq(atb_engine_config_parse(t->spec, "max_num_seqs=64,max_num_seqs=32", &c, &err),
		     ATB_ERR_USAGE);
	cr_assert_eq(atb_engine_config_parse(t->spec, "max_num_seqs", &c, &err), ATB_ERR_USAGE);
	cr_assert_eq(atb_engine_config_parse(t->spec, "default", &c, &err), ATB_OK);
	cr_assert_eq(c.n, 0);
	atb_engine_task_free(t);
}

Test(engine, test_engine__proposals_are_seeded_and_in_domain)
{
	struct atb_engine_task *t = vllm_task();
	struct atb_engine_config a[20], b[20];
	struct atb_error err;
	size_t k, i;

	cr_assert_eq(atb_engine_proposals(t, 7, 20, a, &err), ATB_OK);
	cr_assert_eq(atb_engine_proposals(t, 7, 20, b, &err), ATB_OK);
	cr_assert_eq(a[0].n, 0, "proposal 0 is the default configuration");
	for (k = 1; k < 20; k++) {
		char text[4096] = "";
		size_t n = 0;
		struct atb_engine_config back;

		cr_assert(a[k].n > 0);
		cr_assert_eq(memcmp(&a[k], &b[k], sizeof(a[k])), 0);
		for (i = 0; i < a[k].n; i++)
			n += (size_t)snprintf(text + n, sizeof(text) - n, "%s%s=%s", i ? "," : "",
					      a[k].set[i].name, a[k].set[i].value);
		/* Every draw parses back: it is inside the spec's domains. */
		cr_assert_eq(atb_engine_config_parse(t->spec, text, &back, &err), ATB_OK, "%s: %s",
			     text, err.msg);
	}
	atb_engine_task_free(t);
}

/* A proposal from JSON text against the double's search task: the status, the message in err. */
static enum atb_status from_json(const struct atb_engine_task *t, const char *text,
				 struct atb_engine_config *c, struct atb_error *err)
{
	json_t *o = json_loads(text, 0, NULL);
	enum atb_status st;

	cr_assert(o, "%s", text);
	atb_error_clear(err);
	st = atb_engine_config_from_json(t, o, c, err);
	json_decref(o);
	return st;
}

Test(engine, test_engine__a_json_proposal_is_checked_against_the_search_space)
{
	struct atb_engine_task *t = task_ok(ATB_SOURCE_DIR "/tests/fixtures/engine/search.yaml");
	struct atb_engine_config c, a[20];
	struct atb_error err;
	char *j = NULL;
	size_t k;

	/* inside: a listed number in its listed spelling, a bool, null left out, spec order */
	cr_assert_eq(from_json(t, "{\"truncate\": 3, \"bad_flag\": false, \"speedup\": 2}", &c,
			       &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(atb_engine_config_json(&c, &j, &err), ATB_OK);
	cr_assert_str_eq(j, "{\"bad_flag\":\"false\",\"speedup\":\"2.0\",\"truncate\":\"3\"}");
	cr_assert_str_eq(c.set[0].name, "speedup", "spec order");
	atb_free(j);
	cr_assert_eq(from_json(t, "{\"speedup\": \"1.5\", \"truncate\": null}", &c, &err), ATB_OK);
	cr_assert_eq(c.n, 1);
	cr_assert_eq(from_json(t, "{}", &c, &err), ATB_OK);
	cr_assert_eq(c.n, 0, "{} is the engine's default");

	/* outside: each refused naming the flag and value */
	cr_assert_eq(from_json(t, "{\"truncate\": 9}", &c, &err), ATB_ERR_USAGE);
	cr_assert(strstr(err.msg, "flag 'truncate': 9 is outside its domain [0, 4]"), "%s", err.msg);
	cr_assert_eq(from_json(t, "{\"speedup\": 3.0}", &c, &err), ATB_ERR_USAGE);
	cr_assert(strstr(err.msg, "'3' is not one of its 3 values"), "%s", err.msg);
	cr_assert_eq(from_json(t, "{\"nope\": true}", &c, &err), ATB_ERR_USAGE);
	cr_assert(strstr(err.msg, "engine 'double' has no flag 'nope'"), "%s", err.msg);
	cr_assert_eq(from_json(t, "{\"pad\": 1}", &c, &err), ATB_ERR_USAGE);
	cr_assert(strstr(err.msg, "flag 'pad' is not among the search flags of task"), "%s", err.msg);
	cr_assert_eq(from_json(t, "{\"bad_flag\": \"maybe\"}", &c, &err), ATB_ERR_USAGE);
	cr_assert(strstr(err.msg, "flag 'bad_flag' is a bool: 'maybe'"), "%s", err.msg);
	cr_assert_eq(from_json(t, "{\"truncate\": 2.5}", &c, &err), ATB_ERR_USAGE);
	cr_assert(strstr(err.msg, "flag 'truncate' is an int: '2.5' is not one"), "%s", err.msg);
	cr_assert_eq(from_json(t, "{\"truncate\": [1]}", &c, &err), ATB_ERR_USAGE);
	cr_assert(strstr(err.msg, "not an array"), "%s", err.msg);
	cr_assert_eq(from_json(t, "[1]", &c, &err), ATB_ERR_USAGE);

	/* every random draw passes the same check unchanged */
	cr_assert_eq(atb_engine_proposals(t, 6, 20, a, &err), ATB_OK);
	for (k = 0; k < 20; k++) {
		char *before = NULL, *after = NULL;

		c = a[k];
		cr_assert_eq(atb_engine_config_check(t, &c, &err), ATB_OK, "%s", err.msg);
		cr_assert_eq(atb_engine_config_json(&a[k], &before, &err), ATB_OK);
		cr_assert_eq(atb_engine_config_json(&c, &after, &err), ATB_OK);
		cr_assert_str_eq(before, after);
		atb_free(before);
		atb_free(after);
	}
	atb_engine_task_free(t);
}

static void set_of(struct atb_engine_probe_set *s, struct atb_engine_probe_out *o, const char *text,
		   long toks, const char *finish)
{
	o->text = (char *)text;
	o->completion_tokens = toks;
	snprintf(o->finish_reason, sizeof(o->finish_reason), "%s", finish);
	o->http_status = 200;
	s->out = o;
	s->n = 1;
}

Test(engine, test_engine__equivalence_catches_early_stop_padding_and_altered_token)
{
	struct atb_engine_probe_out ob, oc;
	struct atb_engine_probe_set b, c;
	char why[512];

	set_of(&b, &ob, " a b c d", 4, "stop");
	set_of(&c, &oc, " a b c d", 4, "stop");
	cr_assert(atb_engine_equivalent(&b, &c, why, sizeof(why)));
	set_of(&c, &oc, " a b", 2, "stop");
	cr_assert_not(atb_engine_equivalent(&b, &c, why, sizeof(why)));
	cr_assert(strstr(why, "stops early"), "%s", why);
	set_of(&c, &oc, " a b c d pad", 5, "length");
	cr_assert_not(atb_engine_equivalent(&b, &c, why, sizeof(why)));
	cr_assert(strstr(why, "pads"), "%s", why);
	set_of(&c, &oc, " a b X d", 4, "stop");
	cr_assert_not(atb_engine_equivalent(&b, &c, why, sizeof(why)));
	cr_assert(strstr(why, "differs at byte 5"), "%s", why);
	set_of(&c, &oc, " a b c d", 5, "stop");
	cr_assert_not(atb_engine_equivalent(&b, &c, why, sizeof(why)));
	cr_assert(strstr(why, "completion tokens"), "%s", why);
	set_of(&c, &oc, " a b c d", 4, "length");
	cr_assert_not(atb_engine_equivalent(&b, &c, why, sizeof(why)));
	cr_assert(strstr(why, "finish_reason"), "%s", why);
}

Test(engine, test_engine__prometheus_counters)
{
	const char *t = "# HELP x\nvllm:a_total{model=\"m\"} 3\nvllm:a_total{model=\"n\"} 4\n"
			"vllm:ab 9\n";

	cr_assert_float_eq(atbi_prom_value(t, "vllm:a_total"), 7.0, 1e-9);
	cr_assert_float_eq(atbi_prom_value(t, "vllm:ab"), 9.0, 1e-9);
	cr_assert(isnan(atbi_prom_value(t, "vllm:a")));
}

/* ---- lifecycle, on the TEST DOUBLE engine ---- */

static struct atb_engine_task *double_task(void)
{
	return task_ok(ATB_SOURCE_DIR "/tests/fixtures/engine/task.yaml");
}

static enum atb_status start(struct atb_engine_task *t, const char *settings,
			     struct atb_engine_proc **p, struct atb_error *err)
{
	struct atb_engine_config c;

	atb_error_clear(err);
	cr_assert_eq(atb_engine_config_parse(t->spec, settings, &c, err), ATB_OK, "%s", err->msg);
	return atb_engine_start(t, &c, tmp, p, err);
}

Test(engine, test_engine__double_starts_answers_probes_and_stops)
{
	struct atb_engine_task *t = double_task();
	struct atb_engine_proc *p = NULL;
	struct atb_engine_probe_set s;
	struct atb_error err;
	pid_t pid;

	cr_assert_eq(start(t, "", &p, &err), ATB_OK, "%s", err.msg);
	cr_assert(atb_engine_alive(p, NULL, 0));
	cr_assert_eq(atb_engine_probe(p, t, &s, &err), ATB_OK);
	cr_assert_eq(s.n, 5);
	cr_assert_eq(s.out[0].http_status, 200);
	cr_assert(s.out[0].completion_tokens > 0);
	cr_assert(strlen(s.out[0].text) > 0);
	atb_engine_probe_release(&s);
	pid = atb_engine_pid(p);
	atb_engine_stop(p);
	cr_assert_eq(kill(pid, 0), -1, "the engine is gone after stop");
	atb_engine_task_free(t);
}

Test(engine, test_engine__bad_flag_exits_at_start_with_its_message)
{
	struct atb_engine_task *t = double_task();
	struct atb_engine_proc *p = (void *)1;
	struct atb_error err;

	cr_assert_eq(start(t, "bad_flag=true", &p, &err), ATB_ERR_CHECK);
	cr_assert_null(p);
	cr_assert(strstr(err.msg, "exited with status 2 at start"), "%s", err.msg);
	cr_assert(strstr(err.msg, "unrecognized arguments: --no-such-flag"), "%s", err.msg);
	atb_engine_task_free(t);
}

Test(engine, test_engine__never_ready_times_out)
{
	struct atb_engine_task *t = double_task();
	struct atb_engine_proc *p = (void *)1;
	struct atb_error err;

	cr_assert_eq(start(t, "never_ready=true", &p, &err), ATB_ERR_CHECK);
	cr_assert_null(p);
	cr_assert(strstr(err.msg, "not ready after 10 s"), "%s", err.msg);
	atb_engine_task_free(t);
}

Test(engine, test_engine__port_already_taken_is_named)
{
	struct atb_engine_task *t = double_task();
	struct atb_engine_proc *p = (void *)1;
	struct sockaddr_in a;
	socklen_t len = sizeof(a);
	struct atb_error err;
	char settings[64];
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(listen(fd, 1), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	snprintf(settings, sizeof(settings), "bind_port=%d", ntohs(a.sin_port));
	cr_assert_eq(start(t, settings, &p, &err), ATB_ERR_CHECK);
	cr_assert(strstr(err.msg, "already taken"), "%s", err.msg);
	close(fd);
	atb_engine_task_free(t);
}

Test(engine, test_engine__death_is_detected_with_the_log_tail)
{
	struct atb_engine_task *t = double_task();
	struct atb_engine_proc *p = NULL;
	struct atb_engine_probe_set s;
	struct atb_error err;
	char why[512];

	cr_assert_eq(start(t, "die_after=2", &p, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(atb_engine_probe(p, t, &s, &err), ATB_OK);
	cr_assert_str_eq(s.out[3].finish_reason, "error");
	atb_engine_probe_release(&s);
	usleep(100000);
	cr_assert_not(atb_engine_alive(p, why, sizeof(why)));
	cr_assert(strstr(why, "exited with status 3"), "%s", why);
	cr_assert(strstr(why, "simulated crash"), "%s", why);
	atb_engine_stop(p);
	atb_engine_task_free(t);
}

/* ---- gates that need a whole A/B: client lag and noise ---- */

#include "atb/protocol.h"
#include "atb/store.h"

struct abfx {
	struct atb_store *s;
	struct atb_protocol *p;
	struct atb_engine_task *t;
};

static void ab_setup(struct abfx *F)
{
	struct atb_frozen_protocol *list = NULL;
	struct atb_error err;
	char db[400];
	size_t n = 0;
	int cur = 0;

	snprintf(db, sizeof(db), "%s/atb.db", tmp);
	atb_error_clear(&err);
	cr_assert_eq(atb_store_open(db, ATB_STORE_CREATE, &F->s, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(atb_protocol_frozen_list(ATB_SOURCE_DIR, &list, &n, &cur, &err), ATB_OK);
	cr_assert_eq(atb_store_sync_protocols(F->s, list, n, NULL, &err), ATB_OK, "%s", err.msg);
	atb_protocol_frozen_free(list, n);
	cr_assert_eq(atb_protocol_load_current(ATB_SOURCE_DIR, &F->p, &err), ATB_OK);
	F->t = double_task();
	/* A small workload: these gates do not need a long one. */
	F->t->workload.requests = 8;
}

static void ab_run(struct abfx *F, const char *settings, struct atb_measure_outcome *out)
{
	struct atb_engine_ab_opts o;
	struct atb_engine_config c;
	struct atb_error err;

	atb_error_clear(&err);
	cr_assert_eq(atb_engine_config_parse(F->t->spec, settings, &c, &err), ATB_OK);
	memset(&o, 0, sizeof(o));
	o.work_dir = tmp;
	o.seed_base = 1;
	cr_assert_eq(atb_engine_ab(F->s, F->p, F->t, &c, &o, out, &err), ATB_OK, "%s", err.msg);
	atb_store_close(F->s);
	atb_protocol_free(F->p);
	atb_engine_task_free(F->t);
}

Test(engine, test_engine__client_lag_is_refused, .timeout = 120)
{
	struct abfx F;
	struct atb_measure_outcome out;

	ab_setup(&F);
	/* PROTO: engine.max_dispatch_lag_ms: a client that dispatches 30 ms late
	   (loadgen's test hook) measured itself, not the engine. */
	F.t->workload.test_dispatch_delay_ns = 30000000;
	ab_run(&F, "speedup=2.0", &out);
	cr_assert_eq(out.verdict, ATB_MEASURE_REJECTED);
	cr_assert_str_eq(out.gate, ATB_GATE_CLIENT_LAG);
	cr_assert(strstr(out.reason, "the client, not the engine, was measured"), "%s", out.reason);
	cr_assert(out.rejection_id > 0);
}

/*
 * PROTO: engine.client_lag (protocol version 6).  A slow open loop (6
 * requests at a constant 1/s, about 5.2 s a load) with a planted client lag
 * (the load generator's busy-wait before each dispatch, a fault injection):
 * lag = sent - eligible is at least the planted wait whatever the box's
 * load, and the box's own lag (3-25 ms seen beside two CPU hogs) is far
 * below the margins the assertions need (50 ms and more).
 */
static void lag_setup(struct abfx *F, int v6, double max_share, double max_arm_difference)
{
	ab_setup(F);
	F->t->workload.arrival = ATB_LOADGEN_ARRIVAL_CONSTANT;
	F->t->workload.rate_per_s = 1.0;
	F->t->workload.requests = 6;
	F->t->workload.warmup = 1;
	F->t->warmup_set = 1;
	/* the v6 rule in a v5 protocol struct: the rule reads these fields only */
	F->p->engine.has_client_lag = v6;
	F->p->engine.client_lag_max_share = max_share;
	F->p->engine.client_lag_max_arm_difference = max_arm_difference;
}

static void ab_run_lag(struct abfx *F, const char *settings, size_t nseeds,
		       int64_t lag_baseline_ns, int64_t lag_candidate_ns,
		       struct atb_measure_outcome *out)
{
	struct atb_engine_ab_opts o;
	struct atb_engine_config c;
	struct atb_error err;

	atb_error_clear(&err);
	cr_assert_eq(atb_engine_config_parse(F->t->spec, settings, &c, &err), ATB_OK);
	memset(&o, 0, sizeof(o));
	o.work_dir = tmp;
	o.seed_base = 1;
	o.nseeds = nseeds;   /* 0: the protocol's 8 */
	o.test_dispatch_delay_ns[0] = lag_baseline_ns;
	o.test_dispatch_delay_ns[1] = lag_candidate_ns;
	cr_assert_eq(atb_engine_ab(F->s, F->p, F->t, &c, &o, out, &err), ATB_OK, "%s", err.msg);
	atb_store_close(F->s);
	atb_protocol_free(F->p);
	atb_engine_task_free(F->t);
}

/* The same honest A/B, lag 15 ms common to both arms: v5 refused it. */
Test(engine, test_engine__common_client_lag_was_refused_by_v5, .timeout = 120)
{
	struct abfx F;
	struct atb_measure_outcome out;

	lag_setup(&F, 0, 0, 0);
	ab_run_lag(&F, "speedup=2.0", 2, 15000000, 15000000, &out);
	cr_assert_eq(out.verdict, ATB_MEASURE_REJECTED);
	cr_assert_str_eq(out.gate, ATB_GATE_CLIENT_LAG);
	cr_assert(strstr(out.reason, "over the protocol's 10.000 ms"), "%s", out.reason);
}

/*
 * v6: a lag both arms share (15 ms each dispatch, about 0.3% of a 5.2 s
 * load: under max_share 2%, and the arms' shares equal) is not refused.
 */
Test(engine, test_engine__client_lag_common_to_both_arms_passes_v6, .timeout = 400)
{
	struct abfx F;
	struct atb_measure_outcome out;

	lag_setup(&F, 1, 0.02, 0.01);
	/* 8 seeds (the protocol's minimum, to be admitted): about 2 min beside two CPU hogs */
	ab_run_lag(&F, "speedup=2.0", 0, 15000000, 15000000, &out);
	cr_assert_neq(out.verdict, ATB_MEASURE_REJECTED, "%s: %s", out.gate, out.reason);
	cr_assert(out.result_id > 0);
}

/*
 * v6, planted: the client lags 300 ms before every baseline dispatch only
 * (a share of about 6% of the load, the baseline's rate moved by up to
 * that): refused at max_share 2%, with the numbers.
 */
Test(engine, test_engine__client_lag_in_one_arm_is_refused_by_max_share, .timeout = 120)
{
	struct abfx F;
	struct atb_measure_outcome out;

	lag_setup(&F, 1, 0.02, 0.01);
	ab_run_lag(&F, "speedup=2.0", 2, 300000000, 0, &out);
	cr_assert_eq(out.verdict, ATB_MEASURE_REJECTED);
	cr_assert_str_eq(out.gate, ATB_GATE_CLIENT_LAG);
	cr_assert(strstr(out.reason, "baseline arm, seed 1: the client's lag could move "
			 "requests/s by "), "%s", out.reason);
	cr_assert(strstr(out.reason, "over the protocol's max_share 2.00%"), "%s", out.reason);
	cr_assert(out.rejection_id > 0);
}

/*
 * v6, planted: the client lags 300 ms before every candidate dispatch only,
 * with max_share at 10% so that the arms' difference is what is judged
 * (about 6% against max_arm_difference 1%): refused, both shares named.
 */
Test(engine, test_engine__client_lag_differing_between_arms_is_refused, .timeout = 300)
{
	struct abfx F;
	struct atb_measure_outcome out;

	lag_setup(&F, 1, 0.10, 0.01);
	/* 2 seeds: the arms' difference is judged before the statistics */
	ab_run_lag(&F, "speedup=2.0", 2, 0, 300000000, &out);
	cr_assert_eq(out.verdict, ATB_MEASURE_REJECTED);
	cr_assert_str_eq(out.gate, ATB_GATE_CLIENT_LAG);
	cr_assert(strstr(out.reason, "the arms' client lag differs"), "%s", out.reason);
	cr_assert(strstr(out.reason, "(mean over 2 seeds of the share"), "%s", out.reason);
	cr_assert(strstr(out.reason, "over the protocol's max_arm_difference 1.00%"), "%s",
		  out.reason);
	cr_assert(out.rejection_id > 0);
}

Test(engine, test_engine__noise_over_the_cv_cap_is_refused, .timeout = 300)
{
	struct abfx F;
	struct atb_measure_outcome out;

	ab_setup(&F);
	ab_run(&F, "noisy=true", &out);
	cr_assert_eq(out.verdict, ATB_MEASURE_REJECTED, "%s %g", out.gate, out.cv);
	cr_assert_str_eq(out.gate, ATB_GATE_NOISE);
	cr_assert(strstr(out.reason, "over the protocol's cap 0.0500"), "%s", out.reason);
	/* PROTO: stats.cv_cap: refused only after 2 re-runs of both arms */
	cr_assert_eq(out.attempts, 3, "%d", out.attempts);
	cr_assert(strstr(out.reason, "after 3 runs (2 re-runs of both arms on every seed; cv of "
			 "the per-seed ratios "), "%s", out.reason);
	cr_assert(strstr(out.reason, "per arm: baseline "), "%s", out.reason);
	cr_assert(out.rejection_id > 0);
}

/* The candidate's per-start counter file, for the double's per-start faults. */
static void counter_settings(char *buf, size_t size, const char *faults)
{
	snprintf(buf, size, "%s,counter=%s/starts", faults, tmp);
}

Test(engine, test_engine__noise_is_rerun_before_refusing, .timeout = 300)
{
	struct abfx F;
	struct atb_measure_outcome out;
	char settings[400], path[400], *text = NULL;
	struct atb_error err;
	size_t n = 0;

	/* Noisy on its 8 starts of the first run only: the re-run of both
	   arms (the candidate's starts 9-16) is steady and judged. */
	ab_setup(&F);
	counter_settings(settings, sizeof(settings), "speedup=2.0,noisy_first=8");
	ab_run(&F, settings, &out);
	/* 2 on a quiet box; a busy one may need the second re-run too */
	cr_assert(out.attempts >= 2, "%d: %s %s", out.attempts, out.gate, out.reason);
	if (out.verdict == ATB_MEASURE_REJECTED)
		cr_assert(out.attempts == 3 && !strcmp(out.gate, ATB_GATE_NOISE), "%s: %s",
			  out.gate, out.reason);
	else
		cr_assert(out.speedup > 1.3, "%g", out.speedup);
	snprintf(path, sizeof(path), "%s/starts", tmp);
	cr_assert_eq(atbi_read_file(path, &text, &n, &err), ATB_OK);
	cr_assert_geq(strtol(text, NULL, 10), 16, "%s", text);
	atb_free(text);
	/* both attempts' logs are kept, of both arms */
	snprintf(path, sizeof(path), "%s/seed-1-candidate-rerun1/engine.stderr", tmp);
	cr_assert_eq(access(path, R_OK), 0, "%s", path);
	snprintf(path, sizeof(path), "%s/seed-1-baseline-rerun1/engine.stderr", tmp);
	cr_assert_eq(access(path, R_OK), 0, "%s", path);
}

/* The stored result's stats column (caller owns). */
static json_t *result_stats(int64_t result_id)
{
	struct atb_store *s = NULL;
	struct atb_error err;
	json_t *j = NULL, *stats;
	char db[400];

	snprintf(db, sizeof(db), "%s/atb.db", tmp);
	atb_error_clear(&err);
	cr_assert_eq(atb_store_open(db, ATB_STORE_READ_ONLY, &s, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(atb_store_result_stats(s, result_id, &j, &err), ATB_OK, "%s", err.msg);
	atb_store_close(s);
	stats = json_incref(json_object_get(j, "stats"));
	json_decref(j);
	cr_assert_not_null(stats);
	return stats;
}

/* Each stored pair: one attempt, the two arms one after the other, in time too. */
static void assert_pairs_adjacent(json_t *per_seed, int attempt, size_t nseeds)
{
	json_t *a, *b;
	size_t i, j;

	cr_assert_eq(json_array_size(per_seed), 2 * nseeds, "attempt %d: %zu entries", attempt,
		     json_array_size(per_seed));
	json_array_foreach(per_seed, i, a) {
		cr_assert_eq(json_integer_value(json_object_get(a, "attempt")), attempt);
		json_array_foreach(per_seed, j, b) {
			json_int_t oa = json_integer_value(json_object_get(a, "order"));
			json_int_t ob = json_integer_value(json_object_get(b, "order"));

			if (i == j || json_integer_value(json_object_get(a, "seed")) !=
					      json_integer_value(json_object_get(b, "seed")))
				continue;
			cr_assert_str_neq(json_string_value(json_object_get(a, "arm")),
					  json_string_value(json_object_get(b, "arm")));
			cr_assert(oa - ob == 1 || ob - oa == 1, "orders %lld %lld", (long long)oa,
				  (long long)ob);
			if (oa < ob)
				cr_assert_leq(json_integer_value(json_object_get(a, "load_end_ns")),
					      json_integer_value(json_object_get(b, "load_start_ns")));
		}
	}
}

Test(engine, test_engine__rerun_pairs_stay_adjacent_under_drift, .timeout = 300)
{
	struct abfx F;
	struct atb_measure_outcome out;
	char settings[400], drift[400];
	json_t *st, *rr;

	/*
	 * PROTO: stats.cv_cap, engine.paired_order.  A planted drift of the box
	 * (the TEST DOUBLE's ATB_DOUBLE_DRIFT, every configuration): the first
	 * run's 16 starts decode 2x slower, later ones at full speed.  The
	 * candidate is the default configuration (no speedup), noisy on its 8
	 * first-run starts, so the cv forces a re-run.  Re-running only the
	 * noisier side would pair the candidate's quiet values with the
	 * baseline's slowed ones: a false 2x speedup.  Both arms re-run per
	 * seed keep each pair in one period: no speedup.
	 */
	snprintf(drift, sizeof(drift), "%s/drift:16:2", tmp);
	setenv("ATB_DOUBLE_DRIFT", drift, 1);
	ab_setup(&F);
	counter_settings(settings, sizeof(settings), "noisy_first=8");
	ab_run(&F, settings, &out);
	cr_assert(out.attempts >= 2, "%d: %s %s", out.attempts, out.gate, out.reason);
	if (out.verdict == ATB_MEASURE_REJECTED) {
		/* a busy box may need the second re-run and still be noisy */
		cr_assert(out.attempts == 3 && !strcmp(out.gate, ATB_GATE_NOISE), "%s: %s",
			  out.gate, out.reason);
		return;
	}
	cr_assert(out.speedup > 0.8 && out.speedup < 1.25, "a false speedup %g [%g, %g]",
		  out.speedup, out.ci_low, out.ci_high);
	cr_assert(out.ci_low < 1.2, "%g", out.ci_low);
	st = result_stats(out.result_id);
	assert_pairs_adjacent(json_object_get(st, "per_seed"), out.attempts, 8);
	cr_assert_str_eq(json_string_value(json_object_get(st, "rerun_arms")), "both");
	rr = json_array_get(json_object_get(st, "reruns"), 0);
	cr_assert_str_eq(json_string_value(json_object_get(rr, "side")), "both");
	/* the first run's pairs, replaced, were adjacent too */
	assert_pairs_adjacent(json_object_get(rr, "replaced"), 1, 8);
	json_decref(st);
}

Test(engine, test_engine__outputs_differing_on_a_later_start_are_refused, .timeout = 300)
{
	struct abfx F;
	struct atb_measure_outcome out;
	char settings[400];

	/* PROTO: engine.output_equivalence on every start: the candidate
	   matches on its first two starts and alters its answers on the third. */
	ab_setup(&F);
	counter_settings(settings, sizeof(settings), "alter_on_start=3");
	ab_run(&F, settings, &out);
	cr_assert_eq(out.verdict, ATB_MEASURE_REJECTED);
	cr_assert_str_eq(out.gate, ATB_GATE_OUTPUT_EQUIVALENCE);
	cr_assert(strstr(out.reason, "candidate start 3 (seed 3), after matching on its earlier "
			 "starts: outputs differ across restarts: probe 0 text differs at byte"),
		  "%s", out.reason);
	cr_assert(out.rejection_id > 0);
}

Test(engine, test_engine__allocation_failures_over_spec_task_and_render)
{
	struct atb_error err;
	long k;

	/* Fail allocation k for k = 1.. until a whole load and render succeed:
	   every failure must come back as ATB_ERR_NOMEM (or a clean error), never a crash. */
	for (k = 1; k < 5000; k++) {
		struct atb_engine_task *t = NULL;
		struct atb_engine_config c;
		char **argv = NULL;
		size_t argc = 0;
		enum atb_status st;

		atb_error_clear(&err);
		atb_alloc_fail_at(k);
		st = atb_engine_task_load(ATB_SOURCE_DIR, ATB_SOURCE_DIR "/tests/fixtures/engine/task.yaml",
					  &t, &err);
		if (!st)
			st = atb_engine_config_parse(t->spec, "speedup=2.0,alter=true", &c, &err);
		if (!st)
			st = atb_engine_render(t, &c, 8000, "/r", &argv, &argc, &err);
		atb_engine_argv_free(argv, argc);
		atb_engine_task_free(t);
		if (!atb_alloc_failed()) {
			atb_alloc_fail_at(0);
			cr_assert_eq(st, ATB_OK, "%s", err.msg);
			return;
		}
		atb_alloc_fail_at(0);
		cr_assert_neq(st, ATB_OK, "allocation %ld failed but the load succeeded", k);
	}
	cr_assert_fail("no run without a failed allocation in 5000 tries");
}

Test(engine, test_engine__bundled_engine_tasks_are_found_by_name)
{
	char path[512];

	cr_assert(atb_engine_task_find(ATB_SOURCE_DIR, "engine-llamacpp-repeat", path, sizeof(path)));
	cr_assert(strstr(path, "/tasks/engine-llamacpp-repeat/engine.yaml"), "%s", path);
	cr_assert(atb_engine_task_find(ATB_SOURCE_DIR, ATB_SOURCE_DIR "/tests/fixtures/engine/task.yaml",
				       path, sizeof(path)));
	cr_assert_not(atb_engine_task_find(ATB_SOURCE_DIR, "relu", path, sizeof(path)));
	cr_assert_not(atb_engine_task_find(ATB_SOURCE_DIR, "../etc", path, sizeof(path)));
}

/* ---- a task's cpus: pinning (the launcher's, the same for every engine) ---- */

/* The double's task with a cpus line (line 5). */
static enum atb_status cpus_task(const char *cpus_line, struct atb_engine_task **t,
				 struct atb_error *err)
{
	char text[1024];

	snprintf(text, sizeof(text),
		 "kind: engine\nname: engine-double-pinned\n"
		 "engine: %s/tests/fixtures/engine/double.yaml\nmodel: double-model\n%s\n"
		 "workload: {requests: 4}\nprobes: {max_tokens: 8, prompts: [a b c]}\n",
		 ATB_SOURCE_DIR, cpus_line);
	*t = NULL;
	atb_error_clear(err);
	return atb_engine_task_load(ATB_SOURCE_DIR, write_file("cpus.yaml", text), t, err);
}

static void cpus_bad(const char *cpus_line, const char *field, const char *msg_part)
{
	struct atb_engine_task *t;
	struct atb_error err;

	cr_assert_eq(cpus_task(cpus_line, &t, &err), ATB_ERR_SCHEMA, "%s: %s", cpus_line, err.msg);
	cr_assert_null(t);
	cr_assert_eq(err.line, 5, "%s: line %u: %s", cpus_line, err.line, err.msg);
	cr_assert_str_eq(err.field, field);
	cr_assert(strstr(err.msg, msg_part), "message '%s' lacks '%s'", err.msg, msg_part);
	cr_assert(strstr(err.file, "cpus.yaml"));
}

Test(engine, test_engine__cpus_bad_values_name_line_field_and_value)
{
	struct atb_engine_task *t;
	struct atb_error err;

	cpus_bad("cpus: [one]", "cpus[0]", "cpu 'one' is not an integer in [0, 1023]");
	cpus_bad("cpus: [0, -1]", "cpus[1]", "cpu '-1' is not an integer");
	cpus_bad("cpus: [1024]", "cpus[0]", "cpu '1024' is not an integer in [0, 1023]");
	cpus_bad("cpus: [1.5]", "cpus[0]", "cpu '1.5'");
	cpus_bad("cpus: [1, 1]", "cpus[1]", "cpu '1' is given twice");
	cpus_bad("cpus: []", "cpus", "must not be empty");
	cpus_bad("cpus: 1", "cpus", "expected a sequence");
	/* absent: not pinned */
	cr_assert_eq(cpus_task("", &t, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(t->ncpus, 0);
	cr_assert_null(t->cpus);
	atb_engine_task_free(t);
	cr_assert_eq(cpus_task("cpus: [0, 3]", &t, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(t->ncpus, 2);
	cr_assert_eq(t->cpus[0], 0);
	cr_assert_eq(t->cpus[1], 3);
	atb_engine_task_free(t);
}

/* Cpus_allowed_list of pid, from /proc. */
static void allowed_list(pid_t pid, char *buf, size_t size)
{
	char path[64], line[256];
	FILE *f;

	buf[0] = '\0';
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	cr_assert_not_null(f);
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "Cpus_allowed_list:", 18)) {
			snprintf(buf, size, "%s", line + 18 + strspn(line + 18, " \t"));
			buf[strcspn(buf, "\n")] = '\0';
		}
	fclose(f);
}

Test(engine, test_engine__cpus_pin_the_engine_only, .timeout = 60)
{
	struct atb_engine_task *t;
	struct atb_engine_proc *p = NULL;
	struct atb_error err;
	cpu_set_t mine, after;
	char got[64], want[16], line[32];
	int cpu = -1, i;

	/* the last CPU this test may use, so that the pin is not the default */
	cr_assert_eq(sched_getaffinity(0, sizeof(mine), &mine), 0);
	for (i = 0; i < CPU_SETSIZE; i++)
		if (CPU_ISSET(i, &mine))
			cpu = i;
	cr_assert_geq(cpu, 0);
	snprintf(line, sizeof(line), "cpus: [%d]", cpu);
	snprintf(want, sizeof(want), "%d", cpu);
	cr_assert_eq(cpus_task(line, &t, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(start(t, "", &p, &err), ATB_OK, "%s", err.msg);
	allowed_list(atb_engine_pid(p), got, sizeof(got));
	cr_assert_str_eq(got, want, "engine allowed on '%s', task says %d", got, cpu);
	/* atb itself is left where it was */
	cr_assert_eq(sched_getaffinity(0, sizeof(after), &after), 0);
	cr_assert(CPU_EQUAL(&mine, &after));
	atb_engine_stop(p);
	atb_engine_task_free(t);
}

Test(engine, test_engine__cpus_the_box_lacks_are_a_start_failure, .timeout = 60)
{
	struct atb_engine_task *t;
	struct atb_engine_proc *p = (void *)1;
	struct atb_error err;

	if (sysconf(_SC_NPROCESSORS_CONF) > 1023)
		cr_skip_test("this box has a CPU 1023");
	cr_assert_eq(cpus_task("cpus: [1023]", &t, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(start(t, "", &p, &err), ATB_ERR_CHECK);
	cr_assert_null(p);
	cr_assert(strstr(err.msg, "exited with status 126 at start"), "%s", err.msg);
	cr_assert(strstr(err.msg, "cannot pin engine to cpus [1023]"), "%s", err.msg);
	atb_engine_task_free(t);
}
