/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Unit tests of the job parser and of the harness side of atb-runner
 * (src/runner) with real processes: the real atb-runner on fixture kernels
 * built here with cc (an honest one, a SIGSEGV, an infinite loop), and small
 * shell scripts standing in for a broken runner (garbage lines, an error
 * event, an exit without done, a hang with its channel closed, an abort).
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "atb/alloc.h"
#include "atb/protocol.h"
#include "atb/runner.h"
#include "banned.h"

#define FIX ATB_SOURCE_DIR "/tests/fixtures/runner"
#define RUNNER ATB_BUILD_DIR "/atb-runner"

static char tmpdir[256];

static void make_tmp(void)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/u-runner.XXXXXX");
	cr_assert_not_null(mkdtemp(tmpdir));
}

static void cleanup_tmp(void)
{
	char cmd[400];

	if (tmpdir[0]) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
		if (system(cmd))
			fprintf(stderr, "cannot remove %s\n", tmpdir);
	}
}

/* Build fixture name.c into tmpdir/name.so; returns the path (static buffer per slot). */
static const char *build_so(const char *name, int slot)
{
	static char paths[4][512];
	char cmd[2048];

	snprintf(paths[slot], sizeof(paths[slot]), "%s/%s.so", tmpdir, name);
	snprintf(cmd, sizeof(cmd), "cc -shared -fPIC -O2 -I'%s/include' -o '%s' '%s/%s.c'",
		 ATB_SOURCE_DIR, paths[slot], FIX, name);
	cr_assert_eq(system(cmd), 0, "cannot build %s", name);
	return paths[slot];
}

static json_t *relu_job(const char *base, const char *cand)
{
	json_error_t je;
	json_t *job;

	atb_alloc_install_json();
	job = json_load_file(FIX "/relu-job.json", 0, &je);
	cr_assert_not_null(job, "%s", je.text);
	json_object_set_new(json_array_get(json_object_get(job, "arms"), 0), "so", json_string(base));
	json_object_set_new(json_array_get(json_object_get(job, "arms"), 1), "so", json_string(cand));
	return job;
}

/* A fake runner: a shell script with the given body. */
static const char *fake_runner(const char *body)
{
	static char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/fake-runner.sh", tmpdir);
	f = fopen(path, "w");
	cr_assert_not_null(f);
	fprintf(f, "#!/bin/sh\n%s\n", body);
	fclose(f);
	chmod(path, 0755);
	return path;
}

struct counts {
	int hello, env, correctness, samples, done, total;
	int stop_after;   /* abort on this event number; 0: never */
};

static enum atb_status count_event(const json_t *ev, void *ctx)
{
	struct counts *c = ctx;
	const char *k = json_string_value(json_object_get(ev, "event"));

	c->total++;
	c->hello += !strcmp(k, "hello");
	c->env += !strcmp(k, "env");
	c->correctness += !strcmp(k, "correctness");
	c->samples += !strcmp(k, "samples");
	c->done += !strcmp(k, "done");
	if (c->stop_after && c->total == c->stop_after)
		return ATB_ERR_CHECK;
	return ATB_OK;
}

/* ---- the job parser ------------------------------------------------------ */

static enum atb_status parse_text(const char *text, struct atb_runner_job **job,
				  struct atb_error *e)
{
	atb_error_clear(e);
	return atb_runner_job_parse(text, strlen(text), job, e);
}

Test(runner, job_fixture_parses)
{
	char *text = NULL;
	struct atb_runner_job *j;
	struct atb_error e;
	json_t *o = relu_job("/x/base.so", "/x/cand.so");

	text = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	cr_assert_eq(parse_text(text, &j, &e), ATB_OK, "%s", e.msg);
	atb_free(text);
	cr_assert_eq(j->narms, 2);
	cr_assert_str_eq(j->arms[1].so, "/x/cand.so");
	cr_assert_eq(j->reference, 0);
	cr_assert_eq(j->nbuffers, 2);
	cr_assert_eq(j->buffers[0].role, ATB_BUFFER_IN);
	cr_assert_eq(j->buffers[0].adversarial, 1);
	cr_assert_eq(j->nsets, 2);
	cr_assert_eq(j->sets[1].counts[0], 1001);
	cr_assert_eq(j->sets[1].ints[0], 1001);
	cr_assert_eq(j->nseeds, 3);
	cr_assert_eq(j->timing.trials_max, 40);
	cr_assert_eq(j->timing.warmup_min_time_ns, 1000000);
	cr_assert_eq(j->cache_flush_min_bytes, 262144u);
	cr_assert_eq(j->ndists, 3);
	cr_assert_eq(j->ntolerances, 2);
	cr_assert_eq(atb_runner_job_arm(j, "candidate"), 1);
	cr_assert_eq(atb_runner_job_arm(j, "naive"), -1);
	atb_runner_job_free(j);
}

/* Apply a change to the fixture job, parse, expect status and field. */
static void expect_refused(const char *key_path, json_t *value, enum atb_status want,
			   const char *field)
{
	json_t *o = relu_job("/a.so", "/b.so"), *at = o;
	char buf[256], *save = NULL, *tok, *text;
	struct atb_runner_job *j;
	struct atb_error e;
	const char *last = NULL;
	json_t *parent = NULL;

	snprintf(buf, sizeof(buf), "%s", key_path);
	for (tok = strtok_r(buf, ".", &save); tok; tok = strtok_r(NULL, ".", &save)) {
		parent = at;
		last = tok;
		if (json_is_array(at))
			at = json_array_get(at, strtoul(tok, NULL, 10));
		else
			at = json_object_get(at, tok);
	}
	if (json_is_array(parent))
		json_array_set_new(parent, strtoul(last, NULL, 10), value);
	else if (value)
		json_object_set_new(parent, last, value);
	else
		json_object_del(parent, last);
	text = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	cr_assert_eq(parse_text(text, &j, &e), want, "%s: %s", key_path, e.msg);
	cr_assert_null(j);
	cr_assert_str_eq(e.field, field, "%s: field '%s' (%s)", key_path, e.field, e.msg);
	atb_free(text);
}

Test(runner, job_refusals_name_the_field)
{
	expect_refused("abi", json_integer(2), ATB_ERR_SCHEMA, "abi");
	expect_refused("abi", NULL, ATB_ERR_SCHEMA, "abi");
	expect_refused("arms.0.name", json_string("fastest"), ATB_ERR_SCHEMA, "arms[0]");
	expect_refused("arms.1.name", json_string("baseline"), ATB_ERR_SCHEMA, "arms[1]");
	expect_refused("arms.1.so", NULL, ATB_ERR_SCHEMA, "arms[1].so");
	expect_refused("reference", json_string("naive"), ATB_ERR_SCHEMA, "reference");
	expect_refused("buffers.0.dtype", json_string("fp8"), ATB_ERR_SCHEMA, "buffers[0].dtype");
	expect_refused("buffers.0.role", json_string("scratch"), ATB_ERR_SCHEMA, "buffers[0]");
	expect_refused("buffers.0.dist", NULL, ATB_ERR_SCHEMA, "buffers[0].dist");
	expect_refused("buffers.0.dist.kind", json_string("cauchy"), ATB_ERR_SCHEMA, "buffers[0].dist");
	expect_refused("sets.1.counts", json_pack("[i]", 3), ATB_ERR_SCHEMA, "sets[1].counts");
	expect_refused("sets.0.counts.0", json_integer(0), ATB_ERR_SCHEMA, "sets[0].counts[0]");
	expect_refused("timing_set", NULL, ATB_ERR_SCHEMA, "timing_set");
	expect_refused("seeds", json_array(), ATB_ERR_SCHEMA, "seeds");
	expect_refused("seeds.1", json_integer(-4), ATB_ERR_SCHEMA, "seeds[1]");
	expect_refused("timing.trials_min", json_integer(0), ATB_ERR_SCHEMA, "timing.trials_min");
	expect_refused("timing.trials_max", json_integer(2), ATB_ERR_SCHEMA, "timing.trials_max");
	expect_refused("timing.interleave", json_string("ABBA"), ATB_ERR_SCHEMA, "timing.interleave");
	expect_refused("timing.cache_flush", json_string("yes"), ATB_ERR_SCHEMA, "timing.cache_flush");
	expect_refused("timing.ci_level", json_real(1.5), ATB_ERR_SCHEMA, "timing.ci_level");
	expect_refused("correctness.poison", json_string("zero"), ATB_ERR_SCHEMA, "correctness.poison");
	expect_refused("correctness.tolerances.fp32.atol", json_real(-1), ATB_ERR_SCHEMA,
		       "correctness.tolerances.fp32");
	expect_refused("correctness.distributions.1.stddev", json_real(0), ATB_ERR_SCHEMA,
		       "correctness.distributions[1]");
}

Test(runner, malformed_job_json_has_a_position)
{
	struct atb_runner_job *j;
	struct atb_error e;

	cr_assert_eq(parse_text("{\"abi\": 1,\n \"arms\": [}", &j, &e), ATB_ERR_PARSE);
	cr_assert_eq(e.line, 2);
	cr_assert(e.column > 0);
	cr_assert_null(j);
	cr_assert_eq(parse_text("[1, 2]", &j, &e), ATB_ERR_SCHEMA);
}

Test(runner, job_parse_allocation_failures_are_clean)
{
	json_t *o = relu_job("/a.so", "/b.so");
	char *text = json_dumps(o, JSON_COMPACT);
	struct atb_runner_job *j;
	struct atb_error e;
	enum atb_status st;
	long k, nomem = 0;

	json_decref(o);
	for (k = 1; k < 5000; k++) {
		atb_alloc_fail_at(k);
		st = parse_text(text, &j, &e);
		if (!atb_alloc_failed()) {
			cr_assert_eq(st, ATB_OK, "k=%ld: %s", k, e.msg);
			atb_runner_job_free(j);
			break;
		}
		if (st == ATB_OK) {  /* jansson survives a few failed allocations */
			atb_runner_job_free(j);
			continue;
		}
		/*
		 * jansson's lexer reports some failed allocations as syntax
		 * errors, so inside json_loadb a failure may read as PARSE.
		 */
		cr_assert(st == ATB_ERR_NOMEM || st == ATB_ERR_PARSE, "k=%ld: status %d: %s",
			  k, st, e.msg);
		nomem += st == ATB_ERR_NOMEM;
		cr_assert_null(j);
	}
	atb_alloc_fail_at(0);
	cr_assert(k > 10 && k < 5000, "k=%ld", k);
	cr_assert(nomem > k / 2, "most failures read as out of memory (%ld of %ld)", nomem, k);
	atb_free(text);
}

Test(runner, job_sections_from_a_protocol)
{
	struct atb_protocol p;
	struct atb_runner_job *j;
	struct atb_error e;
	json_t *o = relu_job("/a.so", "/b.so");
	char *text;

	memset(&p, 0, sizeof(p));
	p.stats.ci_level = 0.9;
	p.timing.warmup_min_iterations = 4;
	p.timing.warmup_min_time_ms = 2.5;
	p.timing.trials_min = 11;
	p.timing.trials_max = 99;
	p.timing.target_rel_halfwidth = 0.02;
	p.timing.max_time_per_seed_s = 1.5;
	p.timing.cache_flush = 1;
	p.timing.cache_flush_factor = 3;
	p.timing.cache_flush_min_bytes = 1 << 20;
	snprintf(p.timing.interleave, sizeof(p.timing.interleave), "randomized_pairs");
	snprintf(p.correctness.poison, sizeof(p.correctness.poison), "nan");
	p.correctness.ntolerances = 1;
	snprintf(p.correctness.tolerances[0].dtype, 16, "fp32");
	p.correctness.tolerances[0].atol = 1e-3;
	p.correctness.tolerances[0].rtol = 1e-5;
	p.correctness.ndistributions = 2;
	snprintf(p.correctness.distributions[0].name, 48, "signed_uniform");
	snprintf(p.correctness.distributions[0].kind, 16, "uniform");
	p.correctness.distributions[0].low = -1;
	p.correctness.distributions[0].high = 1;
	snprintf(p.correctness.distributions[1].name, 48, "normal");
	snprintf(p.correctness.distributions[1].kind, 16, "normal");
	p.correctness.distributions[1].stddev = 2;

	cr_assert_eq(atb_runner_job_set_protocol(o, &p, 8u << 20, &e), ATB_OK);
	text = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	cr_assert_eq(parse_text(text, &j, &e), ATB_OK, "%s", e.msg);
	atb_free(text);
	cr_assert_eq(j->timing.trials_min, 11);
	cr_assert_eq(j->timing.trials_max, 99);
	cr_assert_eq(j->timing.warmup_min_time_ns, 2500000);
	cr_assert_eq(j->timing.max_time_per_seed_ns, 1500000000);
	cr_assert_float_eq(j->timing.ci_level, 0.9, 1e-12);
	cr_assert_eq(j->cache_bytes, 8u << 20);
	cr_assert_eq(j->cache_flush_min_bytes, 1u << 20);
	cr_assert_eq(j->ntolerances, 1);
	cr_assert_float_eq(j->tolerances[0].atol, 1e-3, 1e-15);
	cr_assert_eq(j->ndists, 2);
	cr_assert_eq(j->dists[1].normal, 1);
	cr_assert_float_eq(j->dists[1].stddev, 2.0, 1e-12);
	atb_runner_job_free(j);
}

/* ---- the harness, with the real runner ----------------------------------- */

Test(runner, honest_job_runs_to_done, .init = make_tmp, .fini = cleanup_tmp)
{
	json_t *job = relu_job(build_so("relu_ref", 0), build_so("relu_good", 1));
	struct atb_runner_outcome out;
	struct counts c = {0};
	struct atb_error e;

	cr_assert_eq(atb_runner_run(RUNNER, job, 60, count_event, &c, &out, &e), ATB_OK, "%s", e.msg);
	json_decref(job);
	cr_assert_eq(out.end, ATB_RUNNER_DONE);
	cr_assert_eq(out.exit_code, 0);
	cr_assert_eq(c.hello, 1);
	cr_assert_eq(c.env, 1);
	cr_assert_eq(c.correctness, 24);
	cr_assert_eq(c.samples, 6);
	cr_assert_eq(c.done, 1);
	cr_assert_eq(out.nevents, (size_t)c.total);
	cr_assert_str_eq(atb_runner_end_name(out.end), "done");
}

Test(runner, crashing_kernel_is_reported_with_its_signal, .init = make_tmp, .fini = cleanup_tmp)
{
	json_t *job = relu_job(build_so("relu_ref", 0), build_so("crash", 1));
	struct atb_runner_outcome out;
	struct counts c = {0};
	struct atb_error e;

	/* In a sanitizer build, let the SIGSEGV kill the runner as it would in a release. */
	setenv("ASAN_OPTIONS", "handle_segv=0:detect_leaks=0", 1);

	cr_assert_eq(atb_runner_run(RUNNER, job, 60, count_event, &c, &out, &e), ATB_ERR_SYSTEM);
	json_decref(job);
	cr_assert_eq(out.end, ATB_RUNNER_SIGNALED);
	cr_assert_eq(out.signal, SIGSEGV);
	cr_assert_str_eq(out.signal_name, "SIGSEGV");
	cr_assert(strstr(e.msg, "SIGSEGV"), "%s", e.msg);
	cr_assert_eq(c.env, 1);
	cr_assert_eq(c.done, 0);
}

Test(runner, infinite_loop_is_killed_at_the_timeout, .init = make_tmp, .fini = cleanup_tmp)
{
	json_t *job = relu_job(build_so("relu_ref", 0), build_so("loop", 1));
	struct atb_runner_outcome out;
	struct atb_error e;

	cr_assert_eq(atb_runner_run(RUNNER, job, 1.0, NULL, NULL, &out, &e), ATB_ERR_SYSTEM);
	json_decref(job);
	cr_assert_eq(out.end, ATB_RUNNER_TIMEOUT);
	cr_assert_str_eq(out.signal_name, "SIGKILL");
	cr_assert(out.wall_ns >= 1000000000LL && out.wall_ns < 10000000000LL, "%lld",
		  (long long)out.wall_ns);
	cr_assert(strstr(e.msg, "timed out"), "%s", e.msg);
	cr_assert_eq(kill(out.pid, 0), -1, "the runner is gone");
}

Test(runner, callback_can_stop_the_run, .init = make_tmp, .fini = cleanup_tmp)
{
	json_t *job = relu_job(build_so("relu_ref", 0), build_so("relu_good", 1));
	struct atb_runner_outcome out;
	struct counts c = {.stop_after = 3};
	struct atb_error e;

	cr_assert_eq(atb_runner_run(RUNNER, job, 60, count_event, &c, &out, &e), ATB_ERR_CHECK);
	json_decref(job);
	cr_assert_eq(out.end, ATB_RUNNER_ABORTED);
	cr_assert_eq(c.total, 3);
}

/* ---- the harness, with broken runners ------------------------------------ */

static enum atb_status run_fake(const char *body, double timeout_s,
				struct atb_runner_outcome *out, struct atb_error *e)
{
	json_t *job = json_pack("{s:i}", "abi", 1);
	enum atb_status st;

	atb_error_clear(e);
	st = atb_runner_run(fake_runner(body), job, timeout_s, NULL, NULL, out, e);
	json_decref(job);
	return st;
}

Test(runner, malformed_event_line_is_an_error, .init = make_tmp, .fini = cleanup_tmp)
{
	struct atb_runner_outcome out;
	struct atb_error e;

	cr_assert_eq(run_fake("echo '{\"event\":\"hello\"}'; echo 'Segmentation fault? no: text'; cat >/dev/null",
			      10, &out, &e), ATB_ERR_PARSE);
	cr_assert_eq(out.end, ATB_RUNNER_MALFORMED);
	cr_assert_eq(out.nevents, 1);
	cr_assert(strstr(out.detail, "no: text"), "%s", out.detail);
	cr_assert_eq(run_fake("echo '[1,2]'", 10, &out, &e), ATB_ERR_PARSE);
	cr_assert_eq(run_fake("printf '{\"event\":\"done\"}'", 10, &out, &e), ATB_ERR_PARSE,
		     "an unterminated last line");
}

Test(runner, error_event_gives_its_reason, .init = make_tmp, .fini = cleanup_tmp)
{
	struct atb_runner_outcome out;
	struct atb_error e;

	cr_assert_eq(run_fake("cat >/dev/null; echo '{\"event\":\"error\",\"reason\":\"dlopen\",\"message\":\"no such file\"}'; exit 3",
			      10, &out, &e), ATB_ERR_CHECK);
	cr_assert_eq(out.end, ATB_RUNNER_ERROR);
	cr_assert_str_eq(out.reason, "dlopen");
	cr_assert_str_eq(out.detail, "no such file");
	cr_assert_eq(out.exit_code, 3);
}

Test(runner, exit_without_done_and_stderr_tail, .init = make_tmp, .fini = cleanup_tmp)
{
	struct atb_runner_outcome out;
	struct atb_error e;

	cr_assert_eq(run_fake("echo '{\"event\":\"hello\"}'; echo oops >&2; exit 0", 10, &out, &e),
		     ATB_ERR_SYSTEM);
	cr_assert_eq(out.end, ATB_RUNNER_EXIT);
	cr_assert(strstr(out.stderr_tail, "oops"));
	cr_assert_eq(run_fake("echo '{\"event\":\"done\"}'; exit 5", 10, &out, &e), ATB_ERR_SYSTEM);
	cr_assert_eq(out.exit_code, 5);
}

Test(runner, hang_with_closed_channels_still_times_out, .init = make_tmp, .fini = cleanup_tmp)
{
	struct atb_runner_outcome out;
	struct atb_error e;

	cr_assert_eq(run_fake("exec >&- 2>&- <&-; sleep 30", 0.5, &out, &e), ATB_ERR_SYSTEM);
	cr_assert_eq(out.end, ATB_RUNNER_TIMEOUT);
	cr_assert(out.wall_ns < 5000000000LL);
}

Test(runner, abort_is_named, .init = make_tmp, .fini = cleanup_tmp)
{
	struct atb_runner_outcome out;
	struct atb_error e;

	cr_assert_eq(run_fake("kill -ABRT $$", 10, &out, &e), ATB_ERR_SYSTEM);
	cr_assert_eq(out.end, ATB_RUNNER_SIGNALED);
	cr_assert_str_eq(out.signal_name, "SIGABRT");
	cr_assert_eq(run_fake("kill -FPE $$", 10, &out, &e), ATB_ERR_SYSTEM);
	cr_assert_str_eq(out.signal_name, "SIGFPE");
}

Test(runner, missing_runner_cannot_execute)
{
	struct atb_runner_outcome out;
	struct atb_error e;
	json_t *job = json_pack("{s:i}", "abi", 1);

	cr_assert_eq(atb_runner_run("/nonexistent/atb-runner", job, 5, NULL, NULL, &out, &e),
		     ATB_ERR_SYSTEM);
	json_decref(job);
	cr_assert(strstr(e.msg, "cannot execute"), "%s", e.msg);
}

Test(runner, find_uses_the_environment)
{
	char buf[512];
	struct atb_error e;

	setenv("ATB_RUNNER", RUNNER, 1);
	cr_assert_eq(atb_runner_find(buf, sizeof(buf), &e), ATB_OK, "%s", e.msg);
	cr_assert_str_eq(buf, RUNNER);
	setenv("ATB_RUNNER", "/nonexistent/atb-runner", 1);
	cr_assert_eq(atb_runner_find(buf, sizeof(buf), &e), ATB_ERR_NOT_FOUND);
	unsetenv("ATB_RUNNER");
	/* Next to this test binary there is no atb-runner unless the build put it there. */
	cr_assert(atb_runner_find(buf, sizeof(buf), &e) == ATB_OK ||
		  e.status == ATB_ERR_NOT_FOUND);
}
