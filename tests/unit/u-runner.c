/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Unit tests of the job parser and of the harness side of atb-runner
 * (src/runner) with real processes: the real atb-runner on fixture kernels
 * built here with cc (an honest one, a SIGSEGV, an infinite loop), and small
 * shell scripts standing in for a broken runner (garbage lines, an error
 * event, an exit without done, a hang with its channel closed, an abort).
 * And the runner's host-side checking layer (runner/check.c), compiled into
 * this test: pinned seeded inputs, poison, the tolerance rule, the result-
 * reuse steps and the shapes of the correctness and samples events.
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
/* atb-runner is an executable, not a library: its checking layer comes in
 * as source, with the event channel stubbed below. */
#include "../../runner/check.c"
#include "../../runner/timed.c"
#include "../../runner/watch.c"
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

Test(runner, job_backend_is_cpu_unless_cuda)
{
	struct atb_runner_job *j;
	struct atb_error e;
	json_t *o = relu_job("/x/base.so", "/x/cand.so");
	char *text = json_dumps(o, JSON_COMPACT);

	cr_assert_eq(parse_text(text, &j, &e), ATB_OK, "%s", e.msg);
	cr_expect_eq(j->backend, ATB_RUNNER_BACKEND_CPU);
	atb_runner_job_free(j);
	atb_free(text);
	json_object_set_new(o, "backend", json_string("cuda"));
	text = json_dumps(o, JSON_COMPACT);
	cr_assert_eq(parse_text(text, &j, &e), ATB_OK, "%s", e.msg);
	cr_expect_eq(j->backend, ATB_RUNNER_BACKEND_CUDA);
	cr_expect_str_eq(atb_runner_backend_name(j->backend), "cuda");
	atb_runner_job_free(j);
	atb_free(text);
	json_decref(o);
	cr_expect_str_eq(atb_runner_backend_name(ATB_RUNNER_BACKEND_CPU), "cpu");
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
	expect_refused("backend", json_string("tpu"), ATB_ERR_SCHEMA, "backend");
	expect_refused("backend", json_string(""), ATB_ERR_SCHEMA, "backend");
	expect_refused("backend", json_integer(1), ATB_ERR_SCHEMA, "backend");
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
	expect_refused("timing.placement", json_string("random"), ATB_ERR_SCHEMA,
		       "timing.placement");
	/* PROTO: correctness.reference_precision -- a factor > 0, finite */
	expect_refused("correctness.reference_precision",
		       json_pack("{s:f, s:f}", "factor", 0.0, "max_relative", 0.01),
		       ATB_ERR_SCHEMA, "correctness.reference_precision.factor");
	expect_refused("correctness.reference_precision",
		       json_pack("{s:s, s:f}", "factor", "4", "max_relative", 0.01),
		       ATB_ERR_SCHEMA, "correctness.reference_precision.factor");
	expect_refused("correctness.reference_precision", json_pack("{s:f}", "factor", 4.0),
		       ATB_ERR_SCHEMA, "correctness.reference_precision.max_relative");
	expect_refused("correctness.reference_precision",
		       json_pack("{s:f, s:f}", "factor", 4.0, "max_relative", 2.0),
		       ATB_ERR_SCHEMA, "correctness.reference_precision.max_relative");
	expect_refused("correctness.reference_precision", json_integer(4), ATB_ERR_SCHEMA,
		       "correctness.reference_precision");
	expect_refused("timing.placement_key", json_string("00112233"), ATB_ERR_SCHEMA,
		       "timing.placement_key");
	expect_refused("timing.placement_key", json_string("00112233445566778899aabbccddeefg"),
		       ATB_ERR_SCHEMA, "timing.placement_key");
	expect_refused("timing.placement_key", json_integer(7), ATB_ERR_SCHEMA,
		       "timing.placement_key");
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
	p.timing.has_cache_flush_cpu_max = 1;
	p.timing.cache_flush_cpu_max_bytes = 4 << 20;
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
	p.correctness.input_sets_per_seed = 3;
	p.correctness.reference_precision.has = 1;
	p.correctness.reference_precision.factor = 4;
	p.correctness.reference_precision.max_relative = 0.0078125;

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
	/* PROTO: timing.cache_flush.cpu_max_bytes (version 6 on) */
	cr_assert_eq(j->cache_flush_cpu_max_bytes, 4u << 20);
	cr_assert_eq(j->ntolerances, 1);
	cr_assert_float_eq(j->tolerances[0].atol, 1e-3, 1e-15);
	cr_assert_eq(j->ndists, 2);
	cr_assert_eq(j->dists[1].normal, 1);
	cr_assert_float_eq(j->dists[1].stddev, 2.0, 1e-12);
	/* PROTO: correctness.input_sets_per_seed */
	cr_assert_eq(j->input_sets_per_seed, 3);
	/* PROTO: correctness.reference_precision (version 14 on) */
	cr_assert_float_eq(j->ref_precision_factor, 4.0, 1e-15);
	cr_assert_float_eq(j->ref_precision_max_rel, 0.0078125, 1e-15);
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

	cr_assert_eq(run_fake("echo '{\"event\":\"hello\"}'; echo 'Segmentation fault? no: text'; head -n 1 >/dev/null",
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

	cr_assert_eq(run_fake("head -n 1 >/dev/null; echo '{\"event\":\"error\",\"reason\":\"dlopen\",\"message\":\"no such file\"}'; exit 3",
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

/* PROTO: gates.hang -- the watchdog, on runners that go silent */
static enum atb_status run_watched(const char *body, const struct atb_runner_watch *w,
				   struct atb_runner_outcome *out, struct atb_error *e)
{
	json_t *job = json_pack("{s:i}", "abi", 1);
	enum atb_status st;

	atb_error_clear(e);
	st = atb_runner_run_watched(fake_runner(body), job, 60, w, NULL, NULL, out, e);
	json_decref(job);
	return st;
}

Test(runner, a_silent_runner_is_killed_by_the_watchdog_long_before_the_timeout,
     .init = make_tmp, .fini = cleanup_tmp)
{
	/* events every 0.1 s for a second, then silence: the limit is min_s */
	static const char body[] =
		"head -n 1 >/dev/null; echo '{\"event\":\"hello\"}'; echo '{\"event\":\"env\"}'; "
		"for i in 1 2 3 4 5 6 7 8 9 10; do echo '{\"event\":\"progress\"}'; sleep 0.1; done; "
		"echo '{\"event\":\"timed_begin\",\"seed\":7}'; sleep 30";
	struct atb_runner_watch w = {.startup_s = 10, .min_s = 1.5, .factor = 2, .progress_ms = 100};
	struct atb_runner_outcome out;
	struct atb_error e;

	cr_assert_eq(run_watched(body, &w, &out, &e), ATB_ERR_SYSTEM);
	cr_assert_eq(out.end, ATB_RUNNER_HANG, "%s", atb_runner_end_name(out.end));
	cr_assert_str_eq(atb_runner_end_name(out.end), "hang");
	cr_assert(out.wall_ns < 15000000000LL, "%lld ns", (long long)out.wall_ns);
	cr_assert(out.stall_s >= out.stall_limit_s, "%g < %g", out.stall_s, out.stall_limit_s);
	cr_assert(out.stall_limit_s >= 1.5, "%g", out.stall_limit_s);
	cr_assert_eq(out.stall_in_startup, 0);
	cr_assert_str_eq(out.stalled_after, "timed_begin seed 7");
	cr_assert_geq(out.nprogress, 5, "%zu", out.nprogress);
	cr_assert_eq(out.nevents, 3, "progress events are the watchdog's: %zu", out.nevents);
	cr_assert(strstr(e.msg, "made no progress"), "%s", e.msg);
	cr_assert_eq(kill(out.pid, 0), -1, "the runner is gone");
}

Test(runner, the_watchdog_gives_startup_its_own_budget, .init = make_tmp, .fini = cleanup_tmp)
{
	struct atb_runner_watch w = {.startup_s = 1, .min_s = 30, .factor = 10, .progress_ms = 100};
	struct atb_runner_outcome out;
	struct atb_error e;

	cr_assert_eq(run_watched("head -n 1 >/dev/null; echo '{\"event\":\"hello\"}'; sleep 30", &w,
				 &out, &e), ATB_ERR_SYSTEM);
	cr_assert_eq(out.end, ATB_RUNNER_HANG);
	cr_assert_eq(out.stall_in_startup, 1);
	cr_assert(out.wall_ns < 10000000000LL, "%lld ns", (long long)out.wall_ns);
	/* a slow first candidate call (a compile) is startup too, however quick the rest */
	w.startup_s = 4;
	w.min_s = 0.5;
	cr_assert_eq(run_watched("head -n 1 >/dev/null; echo '{\"event\":\"env\"}'; "
				 "echo '{\"event\":\"correctness\",\"arm\":\"baseline\"}'; "
				 "sleep 2; echo '{\"event\":\"correctness\",\"arm\":\"candidate\"}'; "
				 "echo '{\"event\":\"done\"}'", &w, &out, &e), ATB_OK, "%s", e.msg);
	cr_assert(out.longest_gap_s >= 1.9, "%g", out.longest_gap_s);
}

Test(runner, the_watchdog_limit_grows_with_the_slowest_silence, .init = make_tmp,
     .fini = cleanup_tmp)
{
	/* a 1 s silence after startup, then 2 s ones: 2 s < factor 3 x 1 s */
	static const char body[] =
		"head -n 1 >/dev/null; echo '{\"event\":\"env\"}'; echo '{\"event\":\"timed_begin\"}'; "
		"sleep 1; echo '{\"event\":\"progress\"}'; sleep 2; echo '{\"event\":\"progress\"}'; "
		"sleep 2; echo '{\"event\":\"done\"}'";
	struct atb_runner_watch w = {.startup_s = 5, .min_s = 1.5, .factor = 3, .progress_ms = 100};
	struct atb_runner_outcome out;
	struct atb_error e;

	cr_assert_eq(run_watched(body, &w, &out, &e), ATB_OK, "%s", e.msg);
	cr_assert_eq(out.end, ATB_RUNNER_DONE);
	cr_assert(out.longest_gap_s >= 1.9, "%g", out.longest_gap_s);
}

Test(runner, the_job_gets_the_progress_interval, .init = make_tmp, .fini = cleanup_tmp)
{
	struct atb_runner_watch w = {.startup_s = 5, .min_s = 5, .factor = 3, .progress_ms = 123};
	struct atb_runner_outcome out;
	struct atb_error e;

	/* the fake runner answers with the job's progress_ms as an error reason */
	cr_assert_eq(run_watched("j=$(head -n 1); case $j in *'\"progress_ms\":123'*) r=yes;; *) r=no;; "
				 "esac; echo \"{\\\"event\\\":\\\"error\\\",\\\"reason\\\":\\\"$r\\\",\\\"message\\\":\\\"x\\\"}\"",
				 &w, &out, &e), ATB_ERR_CHECK);
	cr_assert_str_eq(out.reason, "yes");
}

/* PROTO: gates.background -- the harness reads the job tree's CPU time itself */
static enum atb_status keep_hb(const json_t *ev, void *ctx)
{
	json_t **hb = ctx;
	const json_t *o = json_object_get(ev, "harness_background");

	if (o && !*hb)
		*hb = json_deep_copy(o);
	return ATB_OK;
}

static json_t *harness_background_of(const char *work)
{
	char body[1024];
	json_t *job = json_pack("{s:i}", "abi", 1), *hb = NULL;
	struct atb_runner_outcome out;
	struct atb_error e;

	/* the hello's pid is the runner's own (in its namespace when sandboxed);
	   it lives on after the samples, as the real one does (a runner gone
	   before the harness reads it leaves the group without the fact) */
	snprintf(body, sizeof(body),
		 "head -n 1 >/dev/null; echo \"{\\\"event\\\":\\\"hello\\\",\\\"pid\\\":$$}\"; "
		 "echo '{\"event\":\"env\"}'; echo '{\"event\":\"timed_begin\",\"seed\":1}'; "
		 "%s; echo '{\"event\":\"samples\",\"seed\":1,\"group\":\"paired\"}'; "
		 "sleep 0.5; echo '{\"event\":\"done\"}'", work);
	atb_error_clear(&e);
	cr_assert_eq(atb_runner_run(fake_runner(body), job, 60, keep_hb, &hb, &out, &e), ATB_OK,
		     "%s", e.msg);
	json_decref(job);
	cr_assert_not_null(hb, "no harness_background on the samples event");
	return hb;
}

Test(runner, the_harness_sees_cpu_burned_beside_a_timed_group, .init = make_tmp,
     .fini = cleanup_tmp)
{
	/* a child that burns 40 ticks (400 ms) of CPU by its own clock in
	   /proc/self/stat, reaped in the group, which lasts at least 1.2 s: a
	   fixed amount of CPU, however loaded the box (a loop killed after 1.2 s
	   of wall time got what the box's load left it, under 200 ms at load 10
	   and more) */
	json_t *hb = harness_background_of(
		"(while read -r p c s a4 a5 a6 a7 a8 a9 a10 a11 a12 a13 ut st r </proc/self/stat && "
		"[ $((ut + st)) -lt 40 ]; do :; done) & b=$!; sleep 1.2; wait $b");
	json_int_t other = json_integer_value(json_object_get(hb, "other_cpu_ns"));
	json_int_t wall = json_integer_value(json_object_get(hb, "wall_ns"));

	cr_assert(wall >= 1100000000LL, "wall %lld", (long long)wall);
	/* its 400 ms less a tick of rounding on either side */
	cr_assert(other >= 380000000LL, "other %lld of wall %lld", (long long)other,
		  (long long)wall);
	json_decref(hb);
	/* and an idle one, nothing */
	hb = harness_background_of("sleep 1");
	other = json_integer_value(json_object_get(hb, "other_cpu_ns"));
	cr_assert(other <= 30000000LL, "other %lld", (long long)other);
	json_decref(hb);
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

/* ---- the checking layer (runner/check.c) ---------------------------------- */

/* The event channel, stubbed: events and errors are kept for the test. */
static json_t *emitted;

int runner_emit(json_t *ev)
{
	if (!ev)
		return -1;
	if (!emitted)
		emitted = json_array();
	return json_array_append_new(emitted, ev) ? -1 : 0;
}

void runner_emit_error(const char *reason, const char *msg)
{
	runner_emit(json_pack("{s:s, s:s, s:s}", "event", "error", "reason", reason,
			      "message", msg));
}

/* Every dtype, both kinds of distribution, an inout and an adversarial int. */
static const char check_job[] =
	"{\"abi\":1,\"arms\":[{\"name\":\"baseline\",\"so\":\"x\"},"
	"{\"name\":\"candidate\",\"so\":\"y\"},{\"name\":\"baseline_alone\",\"so\":\"x\"}],"
	"\"buffers\":["
	"{\"name\":\"a\",\"dtype\":\"fp32\",\"role\":\"in\","
	"\"dist\":{\"name\":\"t\",\"kind\":\"uniform\",\"low\":0,\"high\":1}},"
	"{\"name\":\"b\",\"dtype\":\"fp64\",\"role\":\"inout\","
	"\"dist\":{\"name\":\"t\",\"kind\":\"normal\",\"mean\":2,\"stddev\":3}},"
	"{\"name\":\"c\",\"dtype\":\"int32\",\"role\":\"in\","
	"\"dist\":{\"name\":\"t\",\"kind\":\"uniform\",\"low\":-50,\"high\":50}},"
	"{\"name\":\"d\",\"dtype\":\"int64\",\"role\":\"in\",\"adversarial\":true,"
	"\"dist\":{\"name\":\"t\",\"kind\":\"uniform\",\"low\":0,\"high\":1e12}},"
	"{\"name\":\"y\",\"dtype\":\"fp32\",\"role\":\"out\"}],"
	"\"sets\":[{\"name\":\"s0\",\"counts\":[5,5,5,5,5]},"
	"{\"name\":\"s1\",\"counts\":[1000,333,77,64,9]}],"
	"\"timing_set\":{\"name\":\"t\",\"counts\":[16,16,16,16,16]},\"seeds\":[42],"
	"\"correctness\":{\"tolerances\":{\"fp32\":{\"atol\":0.001,\"rtol\":0.01}},"
	"\"distributions\":[{\"name\":\"su\",\"kind\":\"uniform\",\"low\":-1,\"high\":1},"
	"{\"name\":\"n\",\"kind\":\"normal\",\"mean\":0,\"stddev\":1}]}}";

static struct atb_runner_job *check_job_parse(void)
{
	struct atb_runner_job *job;
	struct atb_error e;

	cr_assert_eq(parse_text(check_job, &job, &e), ATB_OK, "%s", e.msg);
	return job;
}

/*
 * The inputs a seed gives are part of every stored result: these values
 * were drawn by the cpu backend before the checking layer was shared (and
 * checked bit for bit against it over 108 (seed, set, input, stream)
 * combinations).  If this test fails, the generator changed: that needs a
 * protocol version, not a new expectation.
 */
Test(runner, check_inputs_are_pinned)
{
	struct atb_runner_job *job = check_job_parse();
	struct runner_bufs x;

	cr_assert_eq(runner_input_seed(42, 0, -1, RUNNER_STREAM_CHECK, 0),
		     0xc16129ecd0dc5b93ULL);
	cr_assert_eq(runner_bufs_alloc(&x, job, &job->sets[0]), 0);
	/* the task's own generator */
	cr_assert_eq(runner_gen_inputs(&x, job, &job->sets[0], 42, 0, -1, RUNNER_STREAM_CHECK), 0);
	cr_expect_eq(((float *)x.p[0])[0], 0x1.47e774p-1f);
	cr_expect_eq(((float *)x.p[0])[4], 0x1.f834b4p-4f);
	cr_expect_eq(((double *)x.p[1])[0], 0x1.2e59d883439fbp+1);
	cr_expect_eq(((double *)x.p[1])[4], 0x1.1a49751dccefcp+3);
	cr_expect_eq(((int32_t *)x.p[2])[0], 13);
	cr_expect_eq(((int32_t *)x.p[2])[4], -2);
	cr_expect_eq(((int64_t *)x.p[3])[0], 899879074888LL);
	cr_expect_eq(((int64_t *)x.p[3])[4], 280301691032LL);
	/* the protocol's first distribution: reals and the adversarial int64 */
	cr_assert_eq(runner_gen_inputs(&x, job, &job->sets[0], 42, 0, 0, RUNNER_STREAM_CHECK), 0);
	cr_expect_eq(((float *)x.p[0])[0], 0x1.0f91ecp-1f);
	cr_expect_eq(((float *)x.p[0])[4], 0x1.838204p-4f);
	cr_expect_eq(((double *)x.p[1])[0], 0x1.a49c0108p-2);
	cr_expect_eq(((double *)x.p[1])[4], 0x1.1f760148p-2);
	cr_expect_eq(((int32_t *)x.p[2])[0], 9);   /* not adversarial: the task's */
	cr_expect_eq(((int32_t *)x.p[2])[4], 20);
	cr_expect_eq(((int64_t *)x.p[3])[0], 0);
	cr_expect_eq(((int64_t *)x.p[3])[4], -1);
	runner_bufs_free(&x);
	atb_runner_job_free(job);
}

Test(runner, check_inputs_depend_on_every_coordinate)
{
	struct atb_runner_job *job = check_job_parse();
	struct runner_bufs x, y;
	size_t n = 5 * sizeof(float);

	cr_assert_eq(runner_bufs_alloc(&x, job, &job->sets[0]), 0);
	cr_assert_eq(runner_bufs_alloc(&y, job, &job->sets[0]), 0);
	runner_gen_inputs(&x, job, &job->sets[0], 42, 0, -1, RUNNER_STREAM_CHECK);
	runner_gen_inputs(&y, job, &job->sets[0], 42, 0, -1, RUNNER_STREAM_CHECK);
	cr_expect_eq(memcmp(x.p[0], y.p[0], n), 0, "same coordinates, same inputs");
	runner_gen_inputs(&y, job, &job->sets[0], 43, 0, -1, RUNNER_STREAM_CHECK);
	cr_expect_neq(memcmp(x.p[0], y.p[0], n), 0, "seed");
	runner_gen_inputs(&y, job, &job->sets[0], 42, 1, -1, RUNNER_STREAM_CHECK);
	cr_expect_neq(memcmp(x.p[0], y.p[0], n), 0, "set index");
	runner_gen_inputs(&y, job, &job->sets[0], 42, 0, -1, RUNNER_STREAM_REUSE);
	cr_expect_neq(memcmp(x.p[0], y.p[0], n), 0, "stream");
	cr_expect_neq(runner_input_seed(42, 0, -1, 0, 0), runner_input_seed(42, 0, -1, 0, 1),
		      "buffer");
	runner_bufs_free(&x);
	runner_bufs_free(&y);
	atb_runner_job_free(job);
}

/*
 * Kept host blocks (the correctness phase's): a freed block of 1 MiB or more
 * comes back for a buffer of its exact size, never for another size, a
 * small one is never kept, and turning keeping off frees them all and
 * stops keeping (timing allocates as before).
 */
Test(runner, kept_blocks_come_back_only_for_their_size)
{
	struct atb_runner_job *job;
	struct atb_error e;
	struct runner_bufs x, y, z;
	char *text = NULL;
	const char *at = strstr(check_job, "[1000,333,77,64,9]");
	size_t i, j, n;

	cr_assert_not_null(at);
	/* 1.2, 2.4, 1.2, 2.4 and 1.2 MB; the set s0 stays 5 elements each */
	cr_assert_gt(asprintf(&text, "%.*s[300000,300000,300000,300000,300000]%s",
			      (int)(at - check_job), check_job, at + strlen("[1000,333,77,64,9]")), 0);
	cr_assert_eq(parse_text(text, &job, &e), ATB_OK, "%s", e.msg);
	free(text);

	runner_keep_buffers(1);
	cr_assert_eq(runner_bufs_alloc(&x, job, &job->sets[1]), 0);
	void *before[ATB_RUNNER_MAX_BUFFERS];
	memcpy(before, x.p, sizeof(before));
	for (i = 0; i < x.n; i++)
		memset(x.p[i], 0x5a, x.bytes[i]);   /* every page touched */
	runner_bufs_free(&x);
	cr_expect_eq(runner_kept_blocks(), 5);
	/* the small set takes none of them */
	cr_assert_eq(runner_bufs_alloc(&z, job, &job->sets[0]), 0);
	cr_expect_eq(runner_kept_blocks(), 5);
	runner_bufs_free(&z);
	cr_expect_eq(runner_kept_blocks(), 5, "a small block is not kept");
	cr_assert_eq(runner_bufs_alloc(&y, job, &job->sets[1]), 0);
	cr_expect_eq(runner_kept_blocks(), 0);
	for (i = 0; i < y.n; i++) {
		for (j = 0, n = 0; j < job->nbuffers; j++)
			n += y.p[i] == before[j];
		cr_expect_eq(n, 1, "buffer %zu is a kept block", i);
		for (j = 0; j < job->nbuffers; j++)
			if (y.p[i] == before[j])
				cr_expect_eq(y.bytes[i], job->sets[1].counts[j] *
						 atb_dtype_size(job->buffers[j].dtype),
					     "buffer %zu got the block of buffer %zu of another size", i, j);
	}
	runner_bufs_free(&y);
	cr_expect_eq(runner_kept_blocks(), 5);
	runner_keep_buffers(0);
	cr_expect_eq(runner_kept_blocks(), 0, "off frees every kept block");
	cr_assert_eq(runner_bufs_alloc(&y, job, &job->sets[1]), 0);
	runner_bufs_free(&y);
	cr_expect_eq(runner_kept_blocks(), 0, "off: nothing is kept");
	atb_runner_job_free(job);
}

/*
 * PROTO: timing.placement (keyed, version 9) -- the job carries the
 * harness's key; the draws are HMAC-SHA256 under it, checked against
 * Python's hmac module (the values below), in range, every pad drawn,
 * and another key draws otherwise.
 */
/*
 * PROTO: timing.placement (keyed, cpu) -- the arms' allocation order turns
 * by one arm each seed from a start drawn under the key: with the key
 * bytes 0..15 the draw for (0, 0, 0xffff) is 121801 (Python:
 * hmac.new(bytes(range(16)), b"atb-placement" + struct.pack("<QQQ", 0, 0,
 * 0xffff), "sha256"), (m[0] & 15) << 13 | (m[1] | m[2] << 8) & 8191), so
 * with two arms seed s puts arm (121801 + s) % 2 first; with the last key
 * byte XOR 3 the draw is even and the other arm starts.  Over any run of
 * consecutive seeds each arm is first equally often (one more at most);
 * the identity under the other placements.
 */
static struct atb_runner_job *keyed_job(json_t *o, const char *key)
{
	struct atb_runner_job *j;
	struct atb_error e;
	char *text;

	json_object_set_new(json_object_get(o, "timing"), "placement", json_string("keyed"));
	json_object_set_new(json_object_get(o, "timing"), "placement_key", json_string(key));
	text = json_dumps(o, JSON_COMPACT);
	cr_assert_eq(parse_text(text, &j, &e), ATB_OK, "%s", e.msg);
	atb_free(text);
	return j;
}

Test(runner, keyed_arm_order_turns_each_seed_from_a_drawn_start)
{
	json_t *o = relu_job("/a.so", "/b.so");
	struct atb_runner_job *j = keyed_job(o, "000102030405060708090a0b0c0d0e0f"), *j2;
	struct atb_error e;
	size_t order[ATB_RUNNER_MAX_ARMS], s, lo, first[2];
	char *text;

	cr_assert_eq(j->narms, 2);
	for (s = 0; s <= 9; s++) {
		cr_assert_eq(runner_arm_order(j, s, order), 0);
		cr_expect_eq(order[0], (121801 + s) % 2, "seed %zu: arm %zu first", s, order[0]);
		cr_expect_eq(order[0] + order[1], 1);
	}
	/* balanced over every run of consecutive seeds: what the mean needs */
	for (lo = 0; lo < 12; lo++) {
		first[0] = first[1] = 0;
		for (s = lo; s < lo + 7; s++) {
			cr_assert_eq(runner_arm_order(j, s, order), 0);
			first[order[0]]++;
		}
		cr_expect(first[0] >= 3 && first[1] >= 3, "seeds %zu..%zu: %zu and %zu", lo, lo + 6,
			  first[0], first[1]);
	}
	/* another key, another start: the same seed puts the other arm first */
	j2 = keyed_job(o, "000102030405060708090a0b0c0d0e0c");
	for (s = 0; s <= 3; s++) {
		size_t o2[ATB_RUNNER_MAX_ARMS];

		cr_assert_eq(runner_arm_order(j, s, order), 0);
		cr_assert_eq(runner_arm_order(j2, s, o2), 0);
		cr_expect_neq(order[0], o2[0], "seed %zu", s);
	}
	atb_runner_job_free(j2);
	atb_runner_job_free(j);

	json_object_set_new(json_object_get(o, "timing"), "placement", json_string("shuffled"));
	text = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	cr_assert_eq(parse_text(text, &j, &e), ATB_OK, "%s", e.msg);
	atb_free(text);
	for (s = 1; s <= 8; s++) {
		cr_assert_eq(runner_arm_order(j, s, order), 0);
		cr_expect(order[0] == 0 && order[1] == 1);
	}
	atb_runner_job_free(j);
}

/*
 * PROTO: timing.round_trip.position (keyed, version 13 on) -- the empty
 * call's place in each round, drawn under the job's key: the values of
 * hmac.new(bytes(range(16)), b"atb-placement" + struct.pack("<QQQ", seed,
 * round, 0x10000), "sha256") mod 3 (Python), every place taken over a
 * seed's rounds, and another key's draws differ.
 */
Test(runner, the_round_trips_place_is_drawn_under_the_job_key)
{
	static const int want1[12] = {2, 1, 1, 1, 2, 2, 2, 0, 0, 2, 2, 0};
	static const int want2[12] = {1, 1, 2, 0, 1, 0, 1, 0, 1, 0, 1, 0};
	json_t *o = relu_job("/a.so", "/b.so");
	struct atb_runner_job *j = keyed_job(o, "000102030405060708090a0b0c0d0e0f"), *j2;
	size_t count[3] = {0}, differ = 0;
	int r;

	for (r = 0; r < 12; r++) {
		cr_expect_eq(runner_round_trip_slot(j, 1, r, 2), (size_t)want1[r], "seed 1 round %d", r);
		cr_expect_eq(runner_round_trip_slot(j, 2, r, 2), (size_t)want2[r], "seed 2 round %d", r);
	}
	for (r = 0; r < 300; r++)
		count[runner_round_trip_slot(j, 7, r, 2)]++;
	cr_expect(count[0] > 60 && count[1] > 60 && count[2] > 60, "%zu %zu %zu", count[0],
		  count[1], count[2]);
	j2 = keyed_job(o, "000102030405060708090a0b0c0d0e0c");
	for (r = 0; r < 30; r++)
		differ += runner_round_trip_slot(j, 7, r, 2) != runner_round_trip_slot(j2, 7, r, 2);
	cr_expect(differ >= 10, "another key: %zu of 30 places differ", differ);
	atb_runner_job_free(j2);
	atb_runner_job_free(j);
	json_decref(o);
}

Test(runner, keyed_placement_is_hmac_under_the_job_key)
{
	static const unsigned char k[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
	unsigned char k2[16];
	json_t *o = relu_job("/a.so", "/b.so");
	struct atb_runner_job *j;
	struct atb_error e;
	unsigned pad, off, pad2, off2, count[16] = {0};
	size_t i, differ = 0;
	char *text;

	/* hmac.new(bytes(range(16)), b"atb-placement" + struct.pack("<QQQ", s, a, b), "sha256") */
	cr_assert_eq(runner_placement_keyed(k, 1, 0, 0, &pad, &off), 0);
	cr_expect(pad == 9 && off == 1948, "%u %u", pad, off);
	cr_assert_eq(runner_placement_keyed(k, 3, 1, 2, &pad, &off), 0);
	cr_expect(pad == 6 && off == 6049, "%u %u", pad, off);
	cr_assert_eq(runner_placement_keyed(k, 5, 1, 0, &pad, &off), 0);
	cr_expect(pad == 6 && off == 2572, "%u %u", pad, off);

	memcpy(k2, k, sizeof(k2));
	k2[15] ^= 1;
	for (i = 1; i <= 4096; i++) {
		cr_assert_eq(runner_placement_keyed(k, i, i & 1, i % 5, &pad, &off), 0);
		cr_assert(pad < 16 && off < 8192);
		count[pad]++;
		cr_assert_eq(runner_placement_keyed(k2, i, i & 1, i % 5, &pad2, &off2), 0);
		differ += pad != pad2 || off != off2;
	}
	for (i = 0; i < 16; i++)   /* 256 expected, a standard deviation of 15.5 */
		cr_expect(count[i] > 128 && count[i] < 384, "pad %zu drawn %u times", i, count[i]);
	cr_expect_gt(differ, 4000, "another key drew the same place %zu times", 4096 - differ);

	json_object_set_new(json_object_get(o, "timing"), "placement", json_string("keyed"));
	json_object_set_new(json_object_get(o, "timing"), "placement_key",
			    json_string("000102030405060708090A0b0c0d0e0f"));
	text = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	cr_assert_eq(parse_text(text, &j, &e), ATB_OK, "%s", e.msg);
	cr_expect_eq(j->placement, ATB_PLACEMENT_KEYED);
	cr_expect(j->has_placement_key);
	cr_expect_eq(memcmp(j->placement_key, k, 16), 0);
	atb_runner_job_free(j);
	atb_free(text);

	/* the refusals' exact words */
	o = relu_job("/a.so", "/b.so");
	json_object_set_new(json_object_get(o, "timing"), "placement_key", json_string("0011"));
	text = json_dumps(o, JSON_COMPACT);
	cr_assert_eq(parse_text(text, &j, &e), ATB_ERR_SCHEMA);
	cr_expect_str_eq(e.msg, "expected 32 hexadecimal digits for 'timing.placement_key'");
	atb_free(text);
	json_object_set_new(json_object_get(o, "timing"), "placement", json_string("random"));
	text = json_dumps(o, JSON_COMPACT);
	cr_assert_eq(parse_text(text, &j, &e), ATB_ERR_SCHEMA);
	cr_expect_str_eq(e.msg, "'timing.placement' must be fixed, alternate, shuffled or keyed");
	atb_free(text);
	json_decref(o);
}

/* check_job with chunked inputs (protocol v8) and buffers around one chunk. */
static struct atb_runner_job *chunk_job_parse(int chunked)
{
	struct atb_runner_job *job;
	struct atb_error e;
	char *text = NULL;
	const char *at = strstr(check_job, "\"sets\":[");
	const char *c = strstr(check_job, "\"correctness\":{");
	int n;

	cr_assert(at && c);
	/* set 0: a of three chunks and 5 elements, b one element over a chunk, c
	 * exactly one chunk, d 9000; the correctness key with or without chunks */
	n = asprintf(&text, "%.*s\"sets\":[{\"name\":\"big\",\"counts\":[12293,4097,4096,9000,7]}],"
		     "\"timing_set\":{\"name\":\"t\",\"counts\":[16,16,16,16,16]},\"seeds\":[42],"
		     "\"correctness\":{%s%s",
		     (int)(at - check_job), check_job,
		     chunked ? "\"input_chunk_elements\":4096," : "", c + strlen("\"correctness\":{"));
	cr_assert(n > 0);
	cr_assert_eq(parse_text(text, &job, &e), ATB_OK, "%s", e.msg);
	free(text);
	cr_assert_eq(job->input_chunk_elements, chunked ? 4096u : 0u);
	return job;
}

/*
 * PROTO: correctness.input_chunk_elements -- chunk 0 keeps the one-stream
 * values, so a buffer of at most one chunk is as before and a longer one
 * begins as before; the rest comes from the chunks' own streams, pinned here
 * like runner_input_seed (a change needs a protocol version).
 */
Test(runner, check_inputs_in_chunks_begin_with_the_one_stream_values)
{
	struct atb_runner_job *one = chunk_job_parse(0), *ch = chunk_job_parse(1);
	struct runner_bufs x, y;
	size_t i;

	cr_assert_eq(runner_chunk_seed(0xc16129ecd0dc5b93ULL, 0), 0xc16129ecd0dc5b93ULL);
	cr_assert_eq(runner_chunk_seed(0xc16129ecd0dc5b93ULL, 1), 0x50e5fb0b842e5d40ULL);
	cr_assert_eq(runner_bufs_alloc(&x, one, &one->sets[0]), 0);
	cr_assert_eq(runner_bufs_alloc(&y, ch, &ch->sets[0]), 0);
	for (i = 0; i < 3; i++) {
		int dist = (int)i - 1;

		cr_assert_eq(runner_gen_inputs(&x, one, &one->sets[0], 42, 0, dist,
					       RUNNER_STREAM_TIMING), 0);
		cr_assert_eq(runner_gen_inputs(&y, ch, &ch->sets[0], 42, 0, dist,
					       RUNNER_STREAM_TIMING), 0);
		/* c: one chunk exactly, the one-stream path */
		cr_expect_eq(memcmp(x.p[2], y.p[2], x.bytes[2]), 0, "dist %d", dist);
		/* a, b, d: the first chunk as before, the rest not */
		cr_expect_eq(memcmp(x.p[0], y.p[0], 4096 * sizeof(float)), 0);
		cr_expect_neq(memcmp((float *)x.p[0] + 4096, (float *)y.p[0] + 4096,
				     4096 * sizeof(float)), 0);
		cr_expect_eq(memcmp(x.p[1], y.p[1], 4096 * sizeof(double)), 0);
		cr_expect_neq(((double *)x.p[1])[4096], ((double *)y.p[1])[4096]);
		cr_expect_eq(memcmp(x.p[3], y.p[3], 4096 * sizeof(int64_t)), 0);
		cr_expect_neq(memcmp((int64_t *)x.p[3] + 4096, (int64_t *)y.p[3] + 4096,
				     4904 * sizeof(int64_t)), 0);
	}
	cr_expect_eq(((float *)y.p[0])[4096], -0x1.0d83b2p+0f, "%a", ((float *)y.p[0])[4096]);
	runner_bufs_free(&x);
	runner_bufs_free(&y);
	atb_runner_job_free(one);
	atb_runner_job_free(ch);
}

/*
 * The chunks drawn by several threads hold what one plain mt19937 per chunk
 * draws (an oracle here, without the runner's threads), whatever CPUs the
 * process may use: the paired runner and the baseline-alone runner must see
 * the same inputs on any box.
 */
Test(runner, check_inputs_in_chunks_do_not_depend_on_the_threads)
{
	struct atb_runner_job *ch = chunk_job_parse(1);
	struct runner_bufs x;
	cpu_set_t all, one;
	gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
	float *want = calloc(12293, sizeof(float));
	int pass;
	size_t k;

	cr_assert(r && want);
	for (k = 0; k < 12293; k++) {
		if (k % 4096 == 0)
			gsl_rng_set(r, (unsigned long)runner_chunk_seed(
					       runner_input_seed(7, 0, -1, RUNNER_STREAM_CHECK, 0),
					       k / 4096));
		want[k] = (float)(0 + (1 - 0) * gsl_rng_uniform(r));
	}
	cr_assert_eq(sched_getaffinity(0, sizeof(all), &all), 0);
	cr_assert_eq(runner_bufs_alloc(&x, ch, &ch->sets[0]), 0);
	for (pass = 0; pass < 2; pass++) {
		if (pass == 1) {
			/* one CPU: the caller draws every chunk alone */
			CPU_ZERO(&one);
			for (k = 0; k < CPU_SETSIZE; k++)
				if (CPU_ISSET(k, &all)) {
					CPU_SET(k, &one);
					break;
				}
			cr_assert_eq(sched_setaffinity(0, sizeof(one), &one), 0);
			cr_assert_eq(runner_threads(100), 1);
		}
		memset(x.p[0], 0, x.bytes[0]);
		cr_assert_eq(runner_gen_inputs(&x, ch, &ch->sets[0], 7, 0, -1,
					       RUNNER_STREAM_CHECK), 0);
		cr_expect_eq(memcmp(x.p[0], want, 12293 * sizeof(float)), 0, "pass %d", pass);
	}
	cr_assert_eq(sched_setaffinity(0, sizeof(all), &all), 0);
	free(want);
	gsl_rng_free(r);
	runner_bufs_free(&x);
	atb_runner_job_free(ch);
}

/* PROTO: correctness.input_chunk_elements -- the job's value in range, or refused. */
Test(runner, job_refuses_a_chunk_out_of_range)
{
	static const char *const bad_values[] = {"0", "4095", "1073741825", "\"x\"", "1.5"};
	struct atb_runner_job *job;
	struct atb_error e;
	const char *c = strstr(check_job, "\"correctness\":{");
	size_t i;

	for (i = 0; i < sizeof(bad_values) / sizeof(*bad_values); i++) {
		char *text = NULL;

		cr_assert(asprintf(&text, "%.*s\"correctness\":{\"input_chunk_elements\":%s,%s",
				   (int)(c - check_job), check_job, bad_values[i],
				   c + strlen("\"correctness\":{")) > 0);
		cr_expect_eq(parse_text(text, &job, &e), ATB_ERR_SCHEMA, "%s", bad_values[i]);
		cr_expect_str_eq(e.field, "correctness.input_chunk_elements", "%s", bad_values[i]);
		cr_expect_str_eq(e.msg, "bad 'correctness.input_chunk_elements': expected an "
			"integer from 4096 to 1073741824", "%s", bad_values[i]);
		free(text);
	}
}

Test(runner, check_poison_touches_only_outputs)
{
	struct atb_runner_job *job = check_job_parse();
	struct runner_bufs x, y;
	size_t i;

	cr_assert_eq(runner_gen_input_pair(job, 1, 7, -1, &x, &y), 0);
	memcpy(x.p[4], x.p[0], x.bytes[4]);  /* something that is not NaN */
	runner_copy_inputs(&y, &x, job);
	runner_poison_outputs(&x, job, &job->sets[1]);
	for (i = 0; i < 9; i++)
		cr_assert(isnan(((float *)x.p[4])[i]));
	for (i = 0; i < 4; i++)
		cr_expect_eq(memcmp(x.p[i], y.p[i], x.bytes[i]), 0, "input %zu touched", i);
	runner_bufs_free(&x);
	runner_bufs_free(&y);
	atb_runner_job_free(job);
}

Test(runner, check_compare_follows_the_tolerance_rule)
{
	float ref[6] = {1.0f, 100.0f, 0.0f, INFINITY, 5.0f, NAN};
	float got[6] = {1.0005f, 100.9f, 0.002f, INFINITY, NAN, NAN};
	int64_t big_ref[2] = {(1LL << 52) + 1, (1LL << 60) + 1}, big_got[2] = {1LL << 52, 0};
	struct runner_cmp c;

	/* |got - ref| <= 0.001 + 0.01 |ref| */
	runner_compare(ref, got, ATB_DTYPE_FP32, 6, 0.001, 0.01, &c);
	cr_expect_eq(c.nbad, 2);         /* 0.002 off a zero, and the unwritten NaN */
	cr_expect_eq(c.first_bad, 2);
	cr_expect_eq(c.bad_ref, 0.0);
	cr_expect_eq(c.nnan, 1);
	cr_expect(isinf(c.max_rel));
	/* int64: equal is equal exactly; an off-by-one is seen up to 2^53 */
	runner_compare(big_ref, big_got, ATB_DTYPE_INT64, 2, 0, 0, &c);
	cr_expect_eq(c.nbad, 2);
	cr_expect_eq(c.first_bad, 0);
	runner_compare(big_ref, big_ref, ATB_DTYPE_INT64, 2, 0, 0, &c);
	cr_expect_eq(c.nbad, 0);
	cr_expect_eq(c.first_bad, -1);
}

/* A fake arm that caches: right the first time, then replays slot 0's result. */
struct fake_arm {
	const struct atb_runner_job *job;
	struct runner_bufs slot[2];
	int calls, stale_on_slot0, fail_on;
};

static void fake_compute(const struct atb_runner_job *job, struct runner_bufs *b)
{
	size_t k;

	for (k = 0; k < job->sets[1].counts[4]; k++)
		((float *)b->p[4])[k] = 2 * ((const float *)b->p[0])[k];
}

static int fake_run(void *ctx, int slot, const struct runner_bufs *in,
		    const struct runner_bufs **got, int *kernel_status)
{
	struct fake_arm *f = ctx;
	struct runner_bufs *b = &f->slot[slot];

	f->calls++;
	runner_copy_inputs(b, in, f->job);
	if (!(f->stale_on_slot0 && f->calls > 1 && slot == 0)) {
		runner_poison_outputs(b, f->job, &f->job->sets[1]);
		fake_compute(f->job, b);
	}
	*kernel_status = f->calls == f->fail_on ? 5 : 0;
	*got = b;
	return 0;
}

static void reuse_case(int stale, int fail_on, int follows, const char *step)
{
	struct atb_runner_job *job = check_job_parse();
	struct runner_bufs in_a, in_b, ref_a, ref_b;
	struct fake_arm f = {.job = job, .stale_on_slot0 = stale, .fail_on = fail_on};
	struct runner_reuse r;

	cr_assert_eq(runner_gen_input_pair(job, 1, 3, -1, &in_a, &in_b), 0);
	cr_assert_eq(runner_bufs_alloc(&ref_a, job, &job->sets[1]), 0);
	cr_assert_eq(runner_bufs_alloc(&ref_b, job, &job->sets[1]), 0);
	cr_assert_eq(runner_bufs_alloc(&f.slot[0], job, &job->sets[1]), 0);
	cr_assert_eq(runner_bufs_alloc(&f.slot[1], job, &job->sets[1]), 0);
	runner_copy_inputs(&ref_a, &in_a, job);
	fake_compute(job, &ref_a);
	runner_copy_inputs(&ref_b, &in_b, job);
	fake_compute(job, &ref_b);
	cr_assert_eq(runner_check_reuse(job, &job->sets[1], &in_a, &ref_a, &in_b, &ref_b,
					fake_run, &f, &r), 0);
	cr_expect_eq(r.follows, follows);
	if (step)
		cr_expect_str_eq(r.failed_step, step);
	else
		cr_expect_null(r.failed_step);
	runner_bufs_free(&in_a);
	runner_bufs_free(&in_b);
	runner_bufs_free(&ref_a);
	runner_bufs_free(&ref_b);
	runner_bufs_free(&f.slot[0]);
	runner_bufs_free(&f.slot[1]);
	atb_runner_job_free(job);
}

Test(runner, check_result_reuse_steps)
{
	reuse_case(0, 0, 1, NULL);
	reuse_case(1, 0, 0, "same_buffers_new_inputs");
	reuse_case(0, 2, 0, "kernel_failed");
}

Test(runner, check_correctness_event_shape)
{
	struct atb_runner_job *job = check_job_parse();
	struct runner_facts f = {.seed = 42, .arm = "candidate", .set_index = 1, .dist = 1,
				 .pass = 0, .kernel_status = 0, .reuse = {.follows = 1}};
	const char *keys[] = {"event", "seed", "arm", "set", "set_index", "input",
			      "input_index", "pass", "kernel_status", "max_abs_err",
			      "max_rel_err", "first_bad", "bad_count", "nan_count", "buffers",
			      "gates"};
	const char *key;
	json_t *ev, *v;
	size_t i = 0;

	f.worst.first_bad = 7;
	f.worst.bad_ref = 1.5;
	f.worst.bad_got = NAN;
	f.worst.nbad = f.worst.nnan = 2;
	f.worst.max_rel = INFINITY;
	f.worst_name = "y";
	f.buffers = json_array();
	f.mutated = json_pack("[s]", "a");
	f.aliasing = json_pack("{s:b, s:[[s,s]]}", "checked", 1, "overlaps", "y", "a");
	cr_expect(runner_facts_failed(&f));
	f.pass = 1;
	cr_expect(runner_facts_failed(&f), "a mutated input and an overlap still fail");
	f.pass = 0;
	ev = runner_correctness_event(job, &f);
	cr_assert_not_null(ev);
	cr_expect_null(f.buffers);
	json_object_foreach(ev, key, v) {
		cr_assert_lt(i, sizeof(keys) / sizeof(keys[0]));
		cr_expect_str_eq(key, keys[i], "key %zu", i);
		i++;
	}
	cr_expect_str_eq(json_string_value(json_object_get(ev, "set")), "s1");
	cr_expect_str_eq(json_string_value(json_object_get(ev, "input")), "n");
	cr_expect_eq(json_integer_value(json_object_get(ev, "input_index")), 2);
	cr_expect(json_is_null(json_object_get(ev, "max_rel_err")));
	v = json_object_get(ev, "first_bad");
	cr_expect_str_eq(json_string_value(json_object_get(v, "buffer")), "y");
	cr_expect(json_is_null(json_object_get(v, "got")));
	v = json_object_get(ev, "gates");
	cr_expect(json_is_false(json_object_get(json_object_get(v, "result_reuse"), "checked")));
	cr_expect_eq(json_array_size(json_object_get(json_object_get(v, "output_aliasing"),
						     "overlaps")), 1);
	json_decref(ev);
	atb_runner_job_free(job);
}

Test(runner, check_samples_event_has_throttled_only_when_given)
{
	int64_t times[2] = {100, 110};
	int round[2] = {0, 1}, pos[2] = {1, 0};
	struct atb_timing_arm arms[2] = {
		{.times_ns = times, .round = round, .position = pos, .ntrials = 2,
		 .median_ns = 105, .ci_rel_halfwidth = INFINITY},
		{.times_ns = times, .round = round, .position = pos, .ntrials = 2,
		 .median_ns = 105, .ci_rel_halfwidth = 0.01},
	};
	struct atb_timing_seed s = {.seed = 9, .narms = 2, .arms = arms, .rounds = 2};
	const char *names[2] = {"baseline", "candidate"};
	json_t *ev;

	cr_assert_eq(runner_emit_samples(&s, "paired", names, 2, -1), 0);
	cr_assert_eq(runner_emit_samples(&s, "paired", names, 2, 1), 0);
	cr_assert_eq(json_array_size(emitted), 4);
	ev = json_array_get(emitted, 0);
	cr_expect_null(json_object_get(ev, "throttled"));
	cr_expect_str_eq(json_string_value(json_array_get(json_object_get(ev, "paired_with"), 0)),
			 "candidate");
	cr_expect(json_is_null(json_object_get(ev, "ci_rel_halfwidth")));
	cr_expect_eq(json_array_size(json_object_get(ev, "times_ns")), 2);
	ev = json_array_get(emitted, 3);
	cr_expect(json_is_true(json_object_get(ev, "throttled")));
	cr_expect_str_eq(json_string_value(json_array_get(json_object_get(ev, "paired_with"), 0)),
			 "baseline");
	cr_expect_eq(json_object_size(ev), json_object_size(json_array_get(emitted, 0)) + 1);
}

/* ---- fp16 and bf16 ------------------------------------------------------- */

Test(runner, fp16_conversion_is_exact_on_known_values)
{
	cr_expect_eq(atb_fp16_from_float(1.0f), 0x3c00);
	cr_expect_eq(atb_fp16_from_float(-2.5f), 0xc100);
	cr_expect_eq(atb_fp16_from_float(65504.0f), 0x7bff);   /* largest finite */
	cr_expect_eq(atb_fp16_from_float(65519.99f), 0x7bff);
	cr_expect_eq(atb_fp16_from_float(65520.0f), 0x7c00);   /* the tie goes to even: inf */
	cr_expect_eq(atb_fp16_from_float(-INFINITY), 0xfc00);
	cr_expect_eq(atb_fp16_from_float(0x1p-14f), 0x0400);   /* smallest normal */
	cr_expect_eq(atb_fp16_from_float(0x1p-24f), 0x0001);   /* smallest subnormal */
	cr_expect_eq(atb_fp16_from_float(1023 * 0x1p-24f), 0x03ff);
	cr_expect_eq(atb_fp16_from_float(0x1p-25f), 0x0000);   /* tie: to even 0 */
	cr_expect_eq(atb_fp16_from_float(-0x1p-25f), 0x8000);
	cr_expect_eq(atb_fp16_from_float(0x1.8p-25f), 0x0001);
	cr_expect_eq(atb_fp16_from_float(3 * 0x1p-25f), 0x0002);   /* tie 1.5 ulp: to 2 */
	cr_expect_eq(atb_fp16_from_float(1023.5f * 0x1p-24f), 0x0400); /* rounds up to normal */
	cr_expect_eq(atb_fp16_from_float(1.0f + 0x1p-11f), 0x3c00);     /* tie: to even */
	cr_expect_eq(atb_fp16_from_float(1.0f + 3 * 0x1p-11f), 0x3c02); /* tie: to even */
	cr_expect_eq(atb_fp16_from_float(1.0f + 0x1p-11f + 0x1p-23f), 0x3c01);
	cr_expect_eq(atb_fp16_from_float(2047.5f), 0x6800);   /* 2048: carry into the exponent */
	cr_expect_eq(atb_fp16_from_float(NAN), ATB_FP16_QNAN);
	cr_expect_eq(atb_fp16_to_float(0x3c00), 1.0f);
	cr_expect_eq(atb_fp16_to_float(0xc100), -2.5f);
	cr_expect_eq(atb_fp16_to_float(0x7bff), 65504.0f);
	cr_expect_eq(atb_fp16_to_float(0x0001), 0x1p-24f);
	cr_expect_eq(atb_fp16_to_float(0x83ff), -1023 * 0x1p-24f);
	cr_expect(isinf(atb_fp16_to_float(0x7c00)));
	cr_expect(isnan(atb_fp16_to_float(ATB_FP16_QNAN)));
}

Test(runner, bf16_conversion_is_exact_on_known_values)
{
	cr_expect_eq(atb_bf16_from_float(1.0f), 0x3f80);
	cr_expect_eq(atb_bf16_from_float(-2.5f), 0xc020);
	cr_expect_eq(atb_bf16_from_float(65504.0f), 0x4780);   /* 65536: 8 bits of significand */
	cr_expect_eq(atb_bf16_from_float(1.0f + 0x1p-8f), 0x3f80);      /* tie: to even */
	cr_expect_eq(atb_bf16_from_float(1.0f + 3 * 0x1p-8f), 0x3f82);  /* tie: to even */
	cr_expect_eq(atb_bf16_from_float(1.0f + 0x1p-8f + 0x1p-23f), 0x3f81);
	cr_expect_eq(atb_bf16_from_float(0x1.fffffep127f), 0x7f80);     /* rounds to inf */
	cr_expect_eq(atb_bf16_from_float(0x1p-130f), 0x0008);           /* a subnormal */
	cr_expect_eq(atb_bf16_from_float(NAN), ATB_BF16_QNAN);
	cr_expect_eq(atb_bf16_to_float(0x3f80), 1.0f);
	cr_expect_eq(atb_bf16_to_float(0xc020), -2.5f);
	cr_expect(isnan(atb_bf16_to_float(ATB_BF16_QNAN)));
}

Test(runner, half_types_round_trip_every_pattern)
{
	unsigned h;

	for (h = 0; h < 0x10000u; h++) {
		float f = atb_fp16_to_float((uint16_t)h), g = atb_bf16_to_float((uint16_t)h);

		if (isnan(f))
			cr_assert(isnan(atb_fp16_to_float(atb_fp16_from_float(f))));
		else
			cr_assert_eq(atb_fp16_from_float(f), h, "fp16 %#x", h);
		if (isnan(g))
			cr_assert(isnan(atb_bf16_to_float(atb_bf16_from_float(g))));
		else
			cr_assert_eq(atb_bf16_from_float(g), h, "bf16 %#x", h);
	}
	cr_expect_eq(atb_dtype_size(ATB_DTYPE_FP16), 2);
	cr_expect_eq(atb_dtype_size(ATB_DTYPE_BF16), 2);
	cr_expect_eq(atb_dtype_unit_roundoff(ATB_DTYPE_FP16), 0x1p-11);
	cr_expect_eq(atb_dtype_unit_roundoff(ATB_DTYPE_BF16), 0x1p-8);
}

/* check_job with a -> fp16, b -> bf16 and y -> fp16: same seeds per buffer index. */
static struct atb_runner_job *half_job_parse(void)
{
	struct atb_runner_job *job;
	struct atb_error e;
	char text[sizeof(check_job) + 8], *p;

	memcpy(text, check_job, sizeof(check_job));
	p = strstr(text, "\"fp32\",\"role\":\"in\"");
	memcpy(p, "\"fp16\"", 6);
	p = strstr(text, "\"fp64\",\"role\":\"inout\"");
	memcpy(p, "\"bf16\"", 6);
	p = strstr(text, "\"fp32\",\"role\":\"out\"");
	memcpy(p, "\"fp16\"", 6);
	cr_assert_eq(parse_text(text, &job, &e), ATB_OK, "%s", e.msg);
	cr_assert_eq(job->buffers[0].dtype, ATB_DTYPE_FP16);
	cr_assert_eq(job->buffers[1].dtype, ATB_DTYPE_BF16);
	cr_assert(job->buffers[0].adversarial, "half types are reals: adversarial by default");
	return job;
}

/*
 * fp16 and bf16 inputs are the fp32 draws of the same coordinates rounded
 * to nearest even (the fp32 values pinned in check_inputs_are_pinned,
 * rounded by numpy's float16 and by hand): pinned like them.
 */
Test(runner, half_inputs_are_pinned)
{
	struct atb_runner_job *job = half_job_parse();
	struct runner_bufs x;

	cr_assert_eq(runner_bufs_alloc(&x, job, &job->sets[0]), 0);
	cr_expect_eq(x.bytes[0], 5 * 2);
	cr_assert_eq(runner_gen_inputs(&x, job, &job->sets[0], 42, 0, -1, RUNNER_STREAM_CHECK), 0);
	cr_expect_eq(((uint16_t *)x.p[0])[0], 0x3920);   /* 0x1.47e774p-1 */
	cr_expect_eq(((uint16_t *)x.p[0])[4], 0x2fe1);   /* 0x1.f834b4p-4 */
	cr_expect_eq(((uint16_t *)x.p[1])[0], 0x4017);   /* 0x1.2e59d883439fbp+1 */
	cr_expect_eq(((uint16_t *)x.p[1])[4], 0x410d);   /* 0x1.1a49751dccefcp+3 */
	cr_expect_eq(((int32_t *)x.p[2])[0], 13);
	cr_assert_eq(runner_gen_inputs(&x, job, &job->sets[0], 42, 0, 0, RUNNER_STREAM_CHECK), 0);
	cr_expect_eq(((uint16_t *)x.p[0])[0], 0x383e);   /* 0x1.0f91ecp-1 */
	cr_expect_eq(((uint16_t *)x.p[0])[4], 0x2e0e);   /* 0x1.838204p-4 */
	cr_expect_eq(((uint16_t *)x.p[1])[0], 0x3ed2);   /* 0x1.a49c0108p-2 */
	cr_expect_eq(((uint16_t *)x.p[1])[4], 0x3e90);   /* 0x1.1f760148p-2 */
	runner_bufs_free(&x);
	atb_runner_job_free(job);
}

Test(runner, half_poison_is_the_quiet_nan_and_fails_the_compare)
{
	struct atb_runner_job *job = half_job_parse();
	struct runner_bufs x, ref;
	uint16_t r[3] = {0x3c00, 0x3c00, 0x3c00}, g[3] = {0x3c01, 0x3e00, ATB_FP16_QNAN};
	uint16_t br[2] = {0x3f80, 0x3f80}, bg[2] = {0x3f81, ATB_BF16_QNAN};
	struct runner_cmp c;
	size_t i;

	cr_assert_eq(runner_bufs_alloc(&x, job, &job->sets[1]), 0);
	cr_assert_eq(runner_bufs_alloc(&ref, job, &job->sets[1]), 0);
	runner_poison_outputs(&x, job, &job->sets[1]);
	for (i = 0; i < 9; i++) {
		cr_assert_eq(((uint16_t *)x.p[4])[i], ATB_FP16_QNAN);
		cr_assert(isnan(runner_elem(x.p[4], ATB_DTYPE_FP16, i)));
		((uint16_t *)ref.p[4])[i] = 0x3c00;
	}
	runner_compare(ref.p[4], x.p[4], ATB_DTYPE_FP16, 9, 1e-2, 1e-2, &c);
	cr_expect_eq(c.nbad, 9);
	cr_expect_eq(c.nnan, 9);
	/* 1 + 2^-10 is within 0.01 + 0.01 of 1; 1.5 is not; NaN is not */
	runner_compare(r, g, ATB_DTYPE_FP16, 3, 1e-2, 1e-2, &c);
	cr_expect_eq(c.nbad, 2);
	cr_expect_eq(c.first_bad, 1);
	cr_expect_eq(c.bad_got, 1.5);
	cr_expect_eq(c.nnan, 1);
	runner_compare(br, bg, ATB_DTYPE_BF16, 2, 2e-2, 2e-2, &c);
	cr_expect_eq(c.nbad, 1);
	cr_expect_eq(c.first_bad, 1);
	cr_expect_eq(runner_poison_word32(ATB_DTYPE_FP16), 0x7e007e00u);
	cr_expect_eq(runner_poison_word32(ATB_DTYPE_BF16), 0x7fc07fc0u);
	cr_expect_eq(runner_poison_word32(ATB_DTYPE_FP32), 0x7fc00000u);
	runner_bufs_free(&x);
	runner_bufs_free(&ref);
	atb_runner_job_free(job);
}

/* ---- PROTO: correctness.reduction_tolerance ------------------------------- */

static const char red_job[] =
	"{\"abi\":1,\"arms\":[{\"name\":\"baseline\",\"so\":\"x\"},{\"name\":\"candidate\",\"so\":\"y\"}],"
	"\"buffers\":["
	"{\"name\":\"A\",\"dtype\":\"fp32\",\"role\":\"in\","
	"\"dist\":{\"name\":\"t\",\"kind\":\"uniform\",\"low\":-1000,\"high\":1000}},"
	"{\"name\":\"B\",\"dtype\":\"fp32\",\"role\":\"in\","
	"\"dist\":{\"name\":\"t\",\"kind\":\"uniform\",\"low\":-1000,\"high\":1000}},"
	"{\"name\":\"C\",\"dtype\":\"fp32\",\"role\":\"out\",\"reduction\":{\"operands\":[\"A\",\"B\"]}}],"
	"\"sets\":[{\"name\":\"k4096\",\"counts\":[131072,131072,1024]}],"
	"\"timing_set\":{\"name\":\"t\",\"counts\":[131072,131072,1024]},\"seeds\":[1],"
	"\"correctness\":{\"tolerances\":{\"fp32\":{\"atol\":0.0001,\"rtol\":0.0001}},"
	"\"reduction_tolerance\":{\"factor\":1.0,\"growth\":\"sqrt_length\"}}}";

/*
 * M = N = 32, K = 4096, inputs +/-1000: an honest fp32 kernel (one
 * accumulator, sequential order) against the exact product rounded to fp32
 * fails the element-wise rule by summation order alone, and passes with the
 * reduction bound; the same product on fp16-rounded inputs (a precision
 * downgrade, even with exact accumulation) still fails.
 */
Test(runner, reduction_bound_passes_order_and_fails_downgrade)
{
	struct atb_runner_job *job;
	struct atb_error e;
	struct runner_bufs in, honest, down;
	const size_t m = 32, n = 32, k = 4096;
	struct runner_cmp c;
	size_t klen = 0, i, j, x;
	double *bound;

	cr_assert_eq(parse_text(red_job, &job, &e), ATB_OK, "%s", e.msg);
	cr_assert_eq(atb_runner_reduction_length(job, 2, &job->sets[0]), k);
	cr_assert_eq(runner_bufs_alloc(&in, job, &job->sets[0]), 0);
	cr_assert_eq(runner_bufs_alloc(&honest, job, &job->sets[0]), 0);
	cr_assert_eq(runner_bufs_alloc(&down, job, &job->sets[0]), 0);
	cr_assert_eq(runner_gen_inputs(&in, job, &job->sets[0], 1, 0, -1, RUNNER_STREAM_CHECK), 0);
	for (i = 0; i < m; i++)
		for (j = 0; j < n; j++) {
			const float *a = in.p[0], *b = in.p[1];
			double exact = 0, d16 = 0;
			float acc = 0;

			for (x = 0; x < k; x++) {
				exact += (double)a[i * k + x] * b[x * n + j];
				acc += a[i * k + x] * b[x * n + j];
				d16 += (double)atb_fp16_to_float(atb_fp16_from_float(a[i * k + x] / 1000)) *
				       atb_fp16_to_float(atb_fp16_from_float(b[x * n + j] / 1000)) * 1e6;
			}
			((float *)in.p[2])[i * n + j] = (float)exact;
			((float *)honest.p[2])[i * n + j] = acc;
			((float *)down.p[2])[i * n + j] = (float)d16;
		}
	bound = runner_reduction_bound(job, &job->sets[0], &in, 2, &klen);
	cr_assert_not_null(bound);
	cr_expect_eq(klen, k);
	runner_compare(in.p[2], honest.p[2], ATB_DTYPE_FP32, m * n, 1e-4, 1e-4, &c);
	cr_expect_gt(c.nbad, 0, "the element-wise rule alone refuses an honest order");
	runner_compare_bounded(in.p[2], honest.p[2], ATB_DTYPE_FP32, m * n, 1e-4, 1e-4, bound, &c);
	cr_expect_eq(c.nbad, 0, "summation order is inside the bound");
	runner_compare_bounded(in.p[2], down.p[2], ATB_DTYPE_FP32, m * n, 1e-4, 1e-4, bound, &c);
	cr_expect_gt(c.nbad, m * n / 10, "fp16 inputs are outside it (%zu bad)", c.nbad);
	/* and through runner_outputs_match, which reads the operands from ref */
	runner_copy_inputs(&honest, &in, job);
	cr_expect(runner_outputs_match(job, &job->sets[0], &in, &honest, NULL, NULL, NULL));
	job->reduction_factor = 0;   /* protocol v1: no reduction rule */
	cr_expect_not(runner_outputs_match(job, &job->sets[0], &in, &honest, NULL, NULL, NULL));
	atb_free(bound);
	runner_bufs_free(&in);
	runner_bufs_free(&honest);
	runner_bufs_free(&down);
	atb_runner_job_free(job);
}

Test(runner, reduction_counts_that_do_not_fit_are_refused)
{
	struct atb_runner_job *job;
	struct atb_error e;
	char text[sizeof(red_job) + 8], *p;

	memcpy(text, red_job, sizeof(red_job));
	p = strstr(text, "[131072,131072,1024]");
	memcpy(p, "[131072,131072,1000]", 20);
	cr_expect_eq(parse_text(text, &job, &e), ATB_ERR_SCHEMA);
	cr_expect_str_eq(e.field, "buffers[2].reduction");
	memcpy(text, red_job, sizeof(red_job));
	p = strstr(text, "[\"A\",\"B\"]");
	memcpy(p, "[\"A\",\"Z\"]", 9);
	cr_expect_eq(parse_text(text, &job, &e), ATB_ERR_SCHEMA);
	cr_expect_str_eq(e.field, "buffers[2].reduction");
}

/* ---- input sets per seed (PROTO: correctness.input_sets_per_seed) -------- */

/* The relu job with four distributions, n input sets per seed (0: no key) and nseeds seeds. */
static struct atb_runner_job *inputs_job(int n, size_t nseeds, const char *dtype)
{
	json_t *o = relu_job("/a.so", "/b.so"), *c, *seeds = json_array();
	struct atb_runner_job *j = NULL;
	struct atb_error e;
	char *text;
	size_t i;

	c = json_object_get(o, "correctness");
	json_array_append_new(json_object_get(c, "distributions"),
			      json_pack("{s:s, s:s, s:f, s:f}", "name", "tiny_magnitude", "kind",
					"uniform", "low", -1e-3, "high", 1e-3));
	if (n)
		json_object_set_new(c, "input_sets_per_seed", json_integer(n));
	for (i = 0; i < nseeds; i++)
		json_array_append_new(seeds, json_integer((json_int_t)(100 + i)));
	json_object_set_new(o, "seeds", seeds);
	json_object_set_new(json_array_get(json_object_get(o, "buffers"), 0), "dtype",
			    json_string(dtype));
	text = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	cr_assert_eq(parse_text(text, &j, &e), ATB_OK, "%s", e.msg);
	atb_free(text);
	return j;
}

Test(runner, input_sets_rotate_over_the_seeds)
{
	struct atb_runner_job *j = inputs_job(3, 2, "fp32");
	int in[ATB_RUNNER_MAX_DISTS + 1];

	cr_assert(runner_rotates(j));
	cr_assert_eq(runner_seed_inputs(j, 0, in), 3);
	cr_assert(in[0] == -1 && in[1] == 0 && in[2] == 1);
	cr_assert_eq(runner_seed_inputs(j, 1, in), 3);
	cr_assert(in[0] == -1 && in[1] == 2 && in[2] == 3);
	cr_assert_eq(runner_seed_inputs(j, 2, in), 3);   /* wraps around */
	cr_assert(in[1] == 0 && in[2] == 1);
	atb_runner_job_free(j);
}

Test(runner, input_sets_use_every_distribution_across_seeds)
{
	size_t n, s, k, x;

	for (n = 2; n <= 4; n++)
		for (s = 1; s <= 6; s++) {
			struct atb_runner_job *j = inputs_job((int)n, s, "fp32");
			int in[ATB_RUNNER_MAX_DISTS + 1], used[ATB_RUNNER_MAX_DISTS] = {0};
			size_t c;

			for (k = 0; k < s; k++) {
				c = runner_seed_inputs(j, k, in);
				cr_assert_eq(in[0], -1);
				cr_assert(c == n || (!runner_rotates(j) && c == 5),
					  "n %zu seeds %zu: %zu sets", n, s, c);
				for (x = 1; x < c; x++)
					used[in[x]]++;
			}
			for (x = 0; x < 4; x++)
				cr_assert(used[x] > 0, "n %zu seeds %zu: distribution %zu unused",
					  n, s, x);
			/* Rotation only when the seeds can cover all four. */
			cr_assert_eq(runner_rotates(j), s * (n - 1) >= 4 && n - 1 < 4);
			atb_runner_job_free(j);
		}
}

Test(runner, input_sets_fall_back_to_every_distribution)
{
	struct atb_runner_job *j;
	int in[ATB_RUNNER_MAX_DISTS + 1];

	j = inputs_job(0, 3, "fp32");   /* no key: a job from before it */
	cr_assert_not(runner_rotates(j));
	cr_assert_eq(runner_seed_inputs(j, 1, in), 5);
	atb_runner_job_free(j);
	j = inputs_job(1, 8, "fp32");   /* the task's inputs only would drop them all */
	cr_assert_not(runner_rotates(j));
	cr_assert_eq(runner_seed_inputs(j, 0, in), 5);
	atb_runner_job_free(j);
	j = inputs_job(3, 8, "int32");  /* no adversarial input: the task's only */
	cr_assert_eq(runner_seed_inputs(j, 3, in), 1);
	cr_assert_eq(in[0], -1);
	atb_runner_job_free(j);
}

/* ---- timed checks (runner/timed.c; PROTO: gates.timed_correctness) -------- */

/* The relu job with a timed_checks object (key as 16 hex digits). */
static struct atb_runner_job *timed_job(const char *key, const char *extra)
{
	struct atb_runner_job *j = NULL;
	struct atb_error e;
	json_t *o = relu_job("/x/base.so", "/x/cand.so");
	char *text, buf[256];
	json_error_t je;

	snprintf(buf, sizeof(buf), "{\"key\": \"%s\"%s}", key, extra ? extra : "");
	json_object_set_new(o, "timed_checks", json_loads(buf, 0, &je));
	text = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	cr_assert_eq(parse_text(text, &j, &e), ATB_OK, "%s", e.msg);
	atb_free(text);
	return j;
}

/* Which of rounds 0..n-1 the plan checks, as a bit string. */
static void checked_rounds(const struct runner_timed_plan *pl, int n, char *out)
{
	int r;

	for (r = 0; r < n; r++)
		out[r] = runner_timed_plan_is_check(pl, r) ? '1' : '0';
	out[n] = '\0';
}

Test(runner, timed_checks_parse_and_refuse_bad_keys)
{
	struct atb_runner_job *j = timed_job("00000000deadbeef", NULL);
	struct atb_error e;
	json_t *o;
	char *text;
	const char *bad[] = {"{\"key\": \"xyz\"}", "{\"key\": \"00000000deadbeef\", "
			     "\"check_share\": 0}", "{\"key\": \"00000000deadbeef\", "
			     "\"perturb_elements\": 65}", "{\"check_share\": 0.5}", "[]"};
	size_t k;

	cr_assert(j->timed.on);
	cr_assert_eq(j->timed.key, 0xdeadbeefULL);
	cr_assert_float_eq(j->timed.check_share, 0.125, 1e-12);   /* defaults */
	cr_assert_eq(j->timed.min_checks_per_seed, 2);
	cr_assert_eq(j->timed.perturb_elements, 4);
	atb_runner_job_free(j);
	for (k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		json_error_t je;

		o = relu_job("/x/base.so", "/x/cand.so");
		json_object_set_new(o, "timed_checks", json_loads(bad[k], JSON_DECODE_ANY, &je));
		text = json_dumps(o, JSON_COMPACT);
		json_decref(o);
		cr_assert_eq(parse_text(text, &j, &e), ATB_ERR_SCHEMA, "accepted %s", bad[k]);
		cr_assert(strstr(e.field, "timed_checks"), "%s: field %s", bad[k], e.field);
		atb_free(text);
	}
	/* no object: no checks (jobs from before the gate) */
	o = relu_job("/x/base.so", "/x/cand.so");
	text = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	cr_assert_eq(parse_text(text, &j, &e), ATB_OK);
	cr_assert_not(j->timed.on);
	atb_free(text);
	atb_runner_job_free(j);
}

Test(runner, timed_plan_is_deterministic_per_key_and_differs_across_keys)
{
	struct atb_runner_job *a = timed_job("0123456789abcdef", NULL);
	struct atb_runner_job *b = timed_job("fedcba9876543210", NULL);
	struct runner_timed_plan p1, p2, q, g;
	char s1[201], s2[201], sq[201], sg[201], sr[201];
	int r, n = 0;

	runner_timed_plan_init(&p1, &a->timed, 10, 7, 0);
	runner_timed_plan_init(&p2, &a->timed, 10, 7, 0);
	runner_timed_plan_init(&q, &b->timed, 10, 7, 0);
	runner_timed_plan_init(&g, &a->timed, 10, 7, 1);
	checked_rounds(&p1, 200, s1);
	checked_rounds(&p2, 200, s2);
	checked_rounds(&q, 200, sq);
	checked_rounds(&g, 200, sg);
	cr_assert_str_eq(s1, s2, "the same key gave other rounds");
	cr_assert_str_neq(s1, sq, "two keys gave the same rounds");
	cr_assert_str_neq(s1, sg, "the two groups share their rounds");
	/* another seed, same key: other rounds too */
	runner_timed_plan_init(&p2, &a->timed, 10, 8, 0);
	checked_rounds(&p2, 200, sr);
	cr_assert_str_neq(s1, sr);
	/* PROTO: gates.timed_correctness.min_checks_per_seed -- at least 2 in the
	 * first trials.min rounds, whatever the draw; about 1/8 of the rest */
	cr_assert_eq(p1.nforced, 2);
	cr_assert_neq(p1.forced[0], p1.forced[1]);
	for (r = 0; r < 10; r++)
		n += s1[r] == '1';
	cr_assert_geq(n, 2);
	for (r = 10, n = 0; r < 200; r++)
		n += s1[r] == '1';
	cr_assert(n >= 8 && n <= 45, "%d of 190 rounds checked at share 1/8", n);
	atb_runner_job_free(a);
	atb_runner_job_free(b);
}

Test(runner, timed_forced_checks_fit_a_short_seed)
{
	struct atb_runner_job *a = timed_job("0123456789abcdef", ", \"min_checks_per_seed\": 5");
	struct runner_timed_plan p;
	char s[4];

	runner_timed_plan_init(&p, &a->timed, 3, 1, 0);   /* trials.min 3: all three */
	cr_assert_eq(p.nforced, 3);
	checked_rounds(&p, 3, s);
	cr_assert_str_eq(s, "111");
	atb_runner_job_free(a);
}

Test(runner, timed_perturbation_is_deterministic_and_the_same_for_every_arm)
{
	struct atb_runner_job *j = timed_job("0123456789abcdef", NULL);
	const struct atb_runner_set *set = &j->timing_set;
	struct runner_bufs in = {0}, m1 = {0}, m2 = {0}, arm = {0};
	struct runner_perturb w1, w2;
	struct runner_timed_plan p;
	size_t k, changed = 0, n = set->counts[0];

	runner_timed_plan_init(&p, &j->timed, j->timing.trials_min, 3, 0);
	cr_assert_eq(runner_bufs_alloc(&in, j, set), 0);
	cr_assert_eq(runner_gen_inputs(&in, j, set, 3, 0, -1, RUNNER_STREAM_TIMING), 0);
	cr_assert_eq(runner_bufs_alloc(&m1, j, set), 0);
	cr_assert_eq(runner_bufs_alloc(&m2, j, set), 0);
	cr_assert_eq(runner_bufs_alloc(&arm, j, set), 0);
	runner_copy_inputs(&m1, &in, j);
	runner_copy_inputs(&m2, &in, j);
	runner_copy_inputs(&arm, &in, j);
	cr_assert_eq(runner_timed_perturb(&m1, j, set, &p, 4, &w1), 0);
	cr_assert_eq(runner_timed_perturb(&m2, j, set, &p, 4, &w2), 0);
	cr_assert_eq(memcmp(m1.p[0], m2.p[0], m1.bytes[0]), 0, "not deterministic");
	cr_assert_eq(w1.n[0], 4);
	cr_assert_eq(w1.n[1], 0, "an output was perturbed");
	for (k = 0; k < n; k++)
		changed += ((float *)m1.p[0])[k] != ((float *)in.p[0])[k];
	cr_assert(changed >= 1 && changed <= 4, "%zu elements changed", changed);
	/* the task's generator: uniform [0, 1) */
	for (k = 0; k < w1.n[0]; k++) {
		float v = ((float *)m1.p[0])[w1.pos[0][k]];

		cr_assert(v >= 0.0f && v < 1.0f, "%g", (double)v);
	}
	/* an arm's copy gets the same elements and poisoned outputs */
	((float *)arm.p[1])[0] = 1.0f;
	runner_timed_apply_host(&arm, &m1, j, set, &w1);
	cr_assert_eq(memcmp(arm.p[0], m1.p[0], m1.bytes[0]), 0);
	for (k = 0; k < set->counts[1]; k++)
		cr_assert(isnan(((float *)arm.p[1])[k]), "output %zu not poisoned", k);
	/* another round changes other elements */
	cr_assert_eq(runner_timed_perturb(&m2, j, set, &p, 5, &w2), 0);
	cr_assert_neq(memcmp(m1.p[0], m2.p[0], m1.bytes[0]), 0);
	runner_bufs_free(&in);
	runner_bufs_free(&m1);
	runner_bufs_free(&m2);
	runner_bufs_free(&arm);
	atb_runner_job_free(j);
}

/* Two host arms for the hooks: arm 1 computes relu, or skips when lazy;
 * stale: it computes on its first call only and from then on hands back
 * that output, also written over arm 0's (the reference's) outputs. */
struct hook_arms {
	const struct atb_runner_job *job;
	struct runner_bufs b[2];
	int lazy, stale, calls;
	float kept[8192];
};

static int ha_prepare(void *ctx, size_t arm, const struct runner_bufs *master,
		      const struct runner_perturb *where)
{
	struct hook_arms *h = ctx;

	runner_timed_apply_host(&h->b[arm], master, h->job, &h->job->timing_set, where);
	return 0;
}

static int ha_outputs(void *ctx, size_t arm, const struct runner_bufs **got)
{
	*got = &((struct hook_arms *)ctx)->b[arm];
	return 0;
}

static void ha_call(struct hook_arms *h, size_t arm)
{
	size_t k, n = h->job->timing_set.counts[0];

	if (arm == 1 && h->stale && h->calls++ > 0) {
		cr_assert_leq(h->b[1].bytes[1], sizeof(h->kept));
		memcpy(h->b[1].p[1], h->kept, h->b[1].bytes[1]);
		memcpy(h->b[0].p[1], h->kept, h->b[1].bytes[1]);
		return;
	}
	if (arm == 1 && h->lazy)
		return;
	for (k = 0; k < n; k++) {
		float x = ((float *)h->b[arm].p[0])[k];

		((float *)h->b[arm].p[1])[k] = x > 0 ? x : 0;
	}
	if (arm == 1 && h->stale)
		memcpy(h->kept, h->b[1].p[1], h->b[1].bytes[1]);
}

static const struct runner_timed_ops ha_ops = {ha_prepare, ha_outputs};

static void run_hooked_rounds(struct hook_arms *h, struct runner_timed *t, int rounds)
{
	struct runner_bufs in = {0};
	int r;

	cr_assert_eq(runner_bufs_alloc(&in, h->job, &h->job->timing_set), 0);
	cr_assert_eq(runner_gen_inputs(&in, h->job, &h->job->timing_set, 3, 0, -1,
				       RUNNER_STREAM_TIMING), 0);
	for (r = 0; r < 2; r++) {
		cr_assert_eq(runner_bufs_alloc(&h->b[r], h->job, &h->job->timing_set), 0);
		runner_copy_inputs(&h->b[r], &in, h->job);
	}
	cr_assert_eq(runner_timed_init(t, h->job, &h->job->timing_set, &in, 3, 0, 2, 0, &ha_ops,
				       h), 0);
	/* the copy holds the outputs only: no memory for an input buffer */
	for (r = 0; r < (int)h->job->nbuffers; r++)
		if (h->job->buffers[r].role == ATB_BUFFER_IN)
			cr_assert(!t->refcopy.p[r] && !t->refcopy.bytes[r], "input %d", r);
		else
			cr_assert(t->refcopy.p[r] && t->refcopy.bytes[r], "output %d", r);
	for (r = 0; r < rounds; r++) {
		cr_assert_eq(runner_timed_before(t, r), 0);
		ha_call(h, 0);
		cr_assert_eq(runner_timed_call(t, 0, (size_t)r), 0);
		ha_call(h, 1);
		cr_assert_eq(runner_timed_call(t, 1, (size_t)r), 0);
		cr_assert_eq(runner_timed_after(t, r), 0);
	}
	runner_bufs_free(&in);
}

/* PROTO: gates.timed_correctness -- the reference's outputs of a checked
 * round are copied right after its call: an arm that runs after it, hands
 * back a stale output and writes that over the reference's outputs is
 * still caught (a compare with the reference's buffers after the round
 * passed it), and a check with no copy of the round is an error, not a
 * pass. */
Test(runner, timed_hooks_compare_with_the_copy_taken_after_the_reference)
{
	struct atb_runner_job *j = timed_job("0123456789abcdef", NULL);
	struct hook_arms h = {.job = j, .stale = 1};
	struct runner_timed t;
	int r, miss = -1;

	run_hooked_rounds(&h, &t, 40);
	cr_assert_geq(t.st[1].failed, 2);
	cr_assert_eq(t.st[1].failed, t.st[1].rounds_checked);
	runner_timed_release(&t);
	runner_bufs_free(&h.b[0]);
	runner_bufs_free(&h.b[1]);

	/* a checked round whose reference call had no hook after it */
	h.stale = 0;
	run_hooked_rounds(&h, &t, 1);
	for (r = 1; r < 40 && miss < 0; r++) {
		cr_assert_eq(runner_timed_before(&t, r), 0);
		ha_call(&h, 0);
		ha_call(&h, 1);
		if (runner_timed_after(&t, r))
			miss = r;
	}
	cr_assert_geq(miss, 1);
	cr_assert(strstr(t.msg, "no copy of the reference's outputs"), "%s", t.msg);
	runner_timed_release(&t);
	runner_bufs_free(&h.b[0]);
	runner_bufs_free(&h.b[1]);
	atb_runner_job_free(j);
}

Test(runner, timed_hooks_pass_an_honest_arm_and_catch_a_lazy_one)
{
	struct atb_runner_job *j = timed_job("0123456789abcdef", NULL);
	struct hook_arms h = {.job = j};
	struct runner_timed t;
	json_t *o;

	run_hooked_rounds(&h, &t, 40);
	cr_assert_geq(t.st[1].rounds_checked, 2);
	cr_assert_eq(t.st[1].rounds_checked, t.st[0].rounds_checked);
	cr_assert_eq(t.st[1].failed, 0);
	o = runner_timed_json(&t, 0);
	cr_assert(json_is_true(json_object_get(o, "reference")));
	json_decref(o);
	runner_timed_release(&t);
	runner_bufs_free(&h.b[0]);
	runner_bufs_free(&h.b[1]);

	/* lazy: arm 1 leaves the poison of every round in place */
	h.lazy = 1;
	run_hooked_rounds(&h, &t, 40);
	cr_assert_eq(t.st[1].failed, t.st[1].rounds_checked);
	cr_assert_geq(t.st[1].failed, 2);
	cr_assert_eq(t.st[1].nan_count, t.st[1].bad_count);
	cr_assert_geq(t.st[1].first_failed_round, 0);
	o = runner_timed_json(&t, 1);
	cr_assert_eq(json_integer_value(json_object_get(o, "failed")), t.st[1].failed);
	cr_assert_str_eq(json_string_value(json_object_get(json_object_get(o, "first_bad"),
							   "buffer")), "y");
	json_decref(o);
	runner_timed_release(&t);
	runner_bufs_free(&h.b[0]);
	runner_bufs_free(&h.b[1]);
	atb_runner_job_free(j);
}

/*
 * PROTO: gates.side_stream.timed -- the timed wait's event per arm beside
 * the reference: medians of the arm's trials and waits and the reference's
 * wait; nothing for the reference itself, nor when the timer kept no waits.
 */
Test(runner, timed_side_stream_events_carry_the_medians_beside_the_reference)
{
	int64_t t0[] = {100, 300, 200}, x0[] = {5, 9, 7};     /* reference */
	int64_t t1[] = {50, 40, 60}, x1[] = {900, 1000, 1100}; /* left work running */
	struct atb_timing_arm arms[2] = {
		{.times_ns = t0, .device_extra_ns = x0, .ntrials = 3},
		{.times_ns = t1, .device_extra_ns = x1, .ntrials = 3},
	};
	struct atb_timing_seed s = {.seed = 11, .narms = 2, .arms = arms};
	const char *names[] = {"baseline", "candidate"};
	const json_t *ev;

	atb_alloc_install_json();
	json_decref(emitted);
	emitted = NULL;
	cr_assert_eq(runner_emit_timed_side_stream(&s, names, 0), 0);
	cr_assert_eq(json_array_size(emitted), 1);
	ev = json_array_get(emitted, 0);
	cr_assert_str_eq(json_string_value(json_object_get(ev, "phase")), "timed");
	cr_assert_str_eq(json_string_value(json_object_get(ev, "arm")), "candidate");
	cr_assert_str_eq(json_string_value(json_object_get(ev, "reference")), "baseline");
	cr_assert_eq(json_integer_value(json_object_get(ev, "seed")), 11);
	cr_assert_eq(json_integer_value(json_object_get(ev, "event_ns")), 50);
	cr_assert_eq(json_integer_value(json_object_get(ev, "device_extra_ns")), 1000);
	cr_assert_eq(json_integer_value(json_object_get(ev, "reference_extra_ns")), 7);
	/* no reference in the group, or a timer without waits: nothing */
	json_decref(emitted);
	emitted = NULL;
	cr_assert_eq(runner_emit_timed_side_stream(&s, names, 2), 0);
	arms[0].device_extra_ns = NULL;
	cr_assert_eq(runner_emit_timed_side_stream(&s, names, 0), 0);
	cr_assert_null(emitted);
}

/* ---- the correctness phase's host work on several threads ------------------- */

static int count_item(void *ctx, size_t i)
{
	int *seen = ctx;

	__atomic_fetch_add(&seen[i], 1, __ATOMIC_RELAXED);
	return i == 777;
}

/* On one CPU (sched_setaffinity) for pass 1, every CPU this process may use otherwise. */
static void one_cpu(cpu_set_t *all)
{
	cpu_set_t one;
	int k;

	CPU_ZERO(&one);
	for (k = 0; k < CPU_SETSIZE; k++)
		if (CPU_ISSET(k, all)) {
			CPU_SET(k, &one);
			break;
		}
	cr_assert_eq(sched_setaffinity(0, sizeof(one), &one), 0);
}

/* Every item runs exactly once, on one CPU or all, and a failed item is said. */
Test(runner, parallel_runs_every_item_once)
{
	static int seen[1000];
	cpu_set_t all;
	int pass;
	size_t i;

	cr_assert_eq(sched_getaffinity(0, sizeof(all), &all), 0);
	for (pass = 0; pass < 2; pass++) {
		if (pass)
			one_cpu(&all);
		memset(seen, 0, sizeof(seen));
		cr_expect_eq(runner_parallel(1000, count_item, seen), -1, "item 777 failed");
		for (i = 0; i < 1000; i++)
			cr_expect_eq(seen[i], 1, "pass %d item %zu ran %d times", pass, i, seen[i]);
		memset(seen, 0, sizeof(seen));
		cr_expect_eq(runner_parallel(700, count_item, seen), 0);
		cr_expect_eq(seen[699], 1);
		cr_expect_eq(seen[700], 0);
		cr_expect_eq(runner_parallel(0, count_item, seen), 0);
	}
	cr_expect_eq(runner_threads(1), 1);
	cr_expect_eq(runner_threads(0), 1);
	cr_assert_eq(sched_setaffinity(0, sizeof(all), &all), 0);
}

static void expect_same_cmp(const struct runner_cmp *a, const struct runner_cmp *b, const char *what)
{
	cr_expect_eq(memcmp(&a->max_abs, &b->max_abs, sizeof(double)), 0, "%s: max_abs %a %a", what,
		     a->max_abs, b->max_abs);
	cr_expect_eq(memcmp(&a->max_rel, &b->max_rel, sizeof(double)), 0, "%s: max_rel %a %a", what,
		     a->max_rel, b->max_rel);
	cr_expect_eq(a->first_bad, b->first_bad, "%s: first_bad %lld %lld", what, a->first_bad,
		     b->first_bad);
	cr_expect_eq(memcmp(&a->bad_ref, &b->bad_ref, sizeof(double)), 0, "%s: bad_ref", what);
	cr_expect_eq(memcmp(&a->bad_got, &b->bad_got, sizeof(double)), 0, "%s: bad_got", what);
	cr_expect_eq(a->nbad, b->nbad, "%s: nbad %zu %zu", what, a->nbad, b->nbad);
	cr_expect_eq(a->nnan, b->nnan, "%s: nnan %zu %zu", what, a->nnan, b->nnan);
}

/*
 * Three pieces and a part: the parallel comparison finds what one pass
 * finds, bit for bit, with and without per-element extras: the bad
 * elements planted in the second and third pieces (the first bad one at its
 * whole index), a NaN, an infinity, the largest error in the last piece.
 */
Test(runner, parallel_compare_is_one_pass_bit_for_bit)
{
	const size_t n = 3 * RUNNER_CMP_PIECE + 1001;
	float *ref = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
	double *extra = malloc(n * sizeof(double));
	struct runner_cmp one, par;
	size_t k;

	cr_assert(ref && got && extra);
	for (k = 0; k < n; k++) {
		ref[k] = (float)((double)(k % 1000) / 7.0 - 60);
		got[k] = ref[k] + (float)((k % 13) * 1e-7);
		extra[k] = (k % 5) * 1e-7;
	}
	got[RUNNER_CMP_PIECE + 17] += 1;          /* the first bad one, in piece 1 */
	got[2 * RUNNER_CMP_PIECE + 5] = NAN;      /* piece 2 */
	got[2 * RUNNER_CMP_PIECE + 6] = INFINITY;
	got[n - 3] += 100;                        /* the largest error, in the part */
	runner_compare_bounded(ref, got, ATB_DTYPE_FP32, n, 1e-5, 1e-5, NULL, &one);
	runner_compare_parallel(ref, got, ATB_DTYPE_FP32, n, 1e-5, 1e-5, NULL, &par);
	expect_same_cmp(&one, &par, "plain");
	cr_expect_eq(par.first_bad, (long long)RUNNER_CMP_PIECE + 17);
	cr_expect_eq(par.nbad, 4);
	cr_expect_eq(par.nnan, 1);
	runner_compare_bounded(ref, got, ATB_DTYPE_FP32, n, 1e-5, 1e-5, extra, &one);
	runner_compare_parallel(ref, got, ATB_DTYPE_FP32, n, 1e-5, 1e-5, extra, &par);
	expect_same_cmp(&one, &par, "extra");
	/* all equal: nothing bad, and the equal spans still pass */
	runner_compare_parallel(ref, ref, ATB_DTYPE_FP32, n, 0, 0, NULL, &par);
	cr_expect_eq(par.nbad, 0);
	cr_expect_eq(par.first_bad, -1);
	free(ref);
	free(got);
	free(extra);
}

/*
 * Reduction bounds split over items (rows of A, columns of B) hold exactly
 * what the plain loops compute, one operand and two: each sum is one
 * item's, in the plain loop's order.
 */
Test(runner, parallel_reduction_bound_is_the_plain_one)
{
	const size_t m = ((size_t)1 << 20) + 5, k = 8, nn = 3;
	char *text = NULL;
	struct atb_runner_job *job;
	struct atb_error e;
	struct runner_bufs in;
	size_t klen, a, b, x, bad = 0;
	double *bound, scale;

	/* one operand: Y[a] = sum_x X[a, x], three items of rows */
	cr_assert(asprintf(&text,
		"{\"abi\":1,\"arms\":[{\"name\":\"baseline\",\"so\":\"x\"}],\"buffers\":["
		"{\"name\":\"X\",\"dtype\":\"fp32\",\"role\":\"in\","
		"\"dist\":{\"name\":\"t\",\"kind\":\"uniform\",\"low\":-3,\"high\":3}},"
		"{\"name\":\"Y\",\"dtype\":\"fp32\",\"role\":\"out\",\"reduction\":{\"operands\":[\"X\"]}}],"
		"\"sets\":[{\"name\":\"s\",\"counts\":[%zu,%zu]}],"
		"\"timing_set\":{\"name\":\"t\",\"counts\":[%zu,%zu]},\"seeds\":[1],"
		"\"correctness\":{\"tolerances\":{\"fp32\":{\"atol\":0.0001,\"rtol\":0.0001}},"
		"\"reduction_tolerance\":{\"factor\":1.0,\"growth\":\"sqrt_length\"}}}",
		m * k, m, m * k, m) > 0);
	cr_assert_eq(parse_text(text, &job, &e), ATB_OK, "%s", e.msg);
	free(text);
	cr_assert_eq(runner_bufs_alloc(&in, job, &job->sets[0]), 0);
	cr_assert_eq(runner_gen_inputs(&in, job, &job->sets[0], 3, 0, -1, RUNNER_STREAM_CHECK), 0);
	bound = runner_reduction_bound(job, &job->sets[0], &in, 1, &klen);
	cr_assert_not_null(bound);
	cr_expect_eq(klen, k);
	scale = sqrt((double)k) * atb_dtype_unit_roundoff(job->buffers[1].reduction.accumulate);
	for (a = 0; a < m; a++) {
		double s = 0;

		for (x = 0; x < k; x++)
			s += fabs(((const float *)in.p[0])[a * k + x]);
		bad += bound[a] != scale * s;
	}
	cr_expect_eq(bad, 0, "%zu rows differ", bad);
	atb_free(bound);
	runner_bufs_free(&in);
	atb_runner_job_free(job);

	/* two operands: C [m, nn] = A [m, k] B [k, nn] */
	text = NULL;
	cr_assert(asprintf(&text,
		"{\"abi\":1,\"arms\":[{\"name\":\"baseline\",\"so\":\"x\"}],\"buffers\":["
		"{\"name\":\"A\",\"dtype\":\"fp32\",\"role\":\"in\","
		"\"dist\":{\"name\":\"t\",\"kind\":\"uniform\",\"low\":-3,\"high\":3}},"
		"{\"name\":\"B\",\"dtype\":\"fp32\",\"role\":\"in\","
		"\"dist\":{\"name\":\"t\",\"kind\":\"uniform\",\"low\":-3,\"high\":3}},"
		"{\"name\":\"C\",\"dtype\":\"fp32\",\"role\":\"out\",\"reduction\":{\"operands\":[\"A\",\"B\"]}}],"
		"\"sets\":[{\"name\":\"s\",\"counts\":[%zu,%zu,%zu]}],"
		"\"timing_set\":{\"name\":\"t\",\"counts\":[%zu,%zu,%zu]},\"seeds\":[1],"
		"\"correctness\":{\"tolerances\":{\"fp32\":{\"atol\":0.0001,\"rtol\":0.0001}},"
		"\"reduction_tolerance\":{\"factor\":1.0,\"growth\":\"sqrt_length\"}}}",
		m * k, k * nn, m * nn, m * k, k * nn, m * nn) > 0);
	cr_assert_eq(parse_text(text, &job, &e), ATB_OK, "%s", e.msg);
	free(text);
	cr_assert_eq(runner_bufs_alloc(&in, job, &job->sets[0]), 0);
	cr_assert_eq(runner_gen_inputs(&in, job, &job->sets[0], 3, 0, -1, RUNNER_STREAM_CHECK), 0);
	bound = runner_reduction_bound(job, &job->sets[0], &in, 2, &klen);
	cr_assert_not_null(bound);
	cr_expect_eq(klen, k);
	{
		const float *A = in.p[0], *B = in.p[1];
		double cb[3] = {0};

		for (x = 0; x < k; x++)
			for (b = 0; b < nn; b++)
				cb[b] += (double)B[x * nn + b] * B[x * nn + b];
		for (a = 0, bad = 0; a < m; a++) {
			double ra = 0;

			for (x = 0; x < k; x++)
				ra += (double)A[a * k + x] * A[a * k + x];
			for (b = 0; b < nn; b++)
				bad += bound[a * nn + b] != scale * sqrt(ra) * sqrt(cb[b]);
		}
	}
	cr_expect_eq(bad, 0, "%zu elements differ", bad);
	atb_free(bound);
	runner_bufs_free(&in);
	atb_runner_job_free(job);
}

/*
 * PROTO: gates input_mutation -- a buffer of several hash pieces: one byte
 * changed deep in its last piece, or in its first, changes its digest; put
 * back, the digest is the same again; one CPU or all gives the same digest;
 * a buffer of one piece keeps its plain SHA-256.
 */
Test(runner, input_digest_over_pieces_sees_one_byte)
{
	struct atb_runner_job *job;
	struct atb_error e;
	struct runner_bufs in;
	char d0[ATB_RUNNER_MAX_BUFFERS][ATB_SHA256_HEX_LEN + 1];
	char d1[ATB_RUNNER_MAX_BUFFERS][ATB_SHA256_HEX_LEN + 1];
	char plain[ATB_SHA256_HEX_LEN + 1];
	char *text = NULL;
	const size_t big = (2 * RUNNER_HASH_PIECE + 4096) / 4;
	cpu_set_t all;
	unsigned char *p;

	cr_assert(asprintf(&text,
		"{\"abi\":1,\"arms\":[{\"name\":\"baseline\",\"so\":\"x\"}],\"buffers\":["
		"{\"name\":\"X\",\"dtype\":\"fp32\",\"role\":\"in\","
		"\"dist\":{\"name\":\"t\",\"kind\":\"uniform\",\"low\":-3,\"high\":3}},"
		"{\"name\":\"S\",\"dtype\":\"fp32\",\"role\":\"in\","
		"\"dist\":{\"name\":\"t\",\"kind\":\"uniform\",\"low\":-3,\"high\":3}},"
		"{\"name\":\"Y\",\"dtype\":\"fp32\",\"role\":\"out\"}],"
		"\"sets\":[{\"name\":\"s\",\"counts\":[%zu,1000,1000]}],"
		"\"timing_set\":{\"name\":\"t\",\"counts\":[%zu,1000,1000]},\"seeds\":[1],"
		"\"correctness\":{\"tolerances\":{\"fp32\":{\"atol\":0.0001,\"rtol\":0.0001}}}}",
		big, big) > 0);
	cr_assert_eq(parse_text(text, &job, &e), ATB_OK, "%s", e.msg);
	free(text);
	cr_assert_eq(runner_bufs_alloc(&in, job, &job->sets[0]), 0);
	memset(in.p[0], 0x5a, in.bytes[0]);
	memset(in.p[1], 0x11, in.bytes[1]);
	memset(d0, 0, sizeof(d0));
	memset(d1, 0, sizeof(d1));
	cr_assert_eq(runner_hash_inputs(job, &in, d0), 0);
	cr_assert_eq(atbi_sha256_hex(in.p[1], in.bytes[1], plain), ATB_OK);
	cr_expect_str_eq(d0[1], plain, "one piece: the plain SHA-256");
	cr_expect_str_eq(d0[2], "", "outputs are not hashed");
	p = in.p[0];
	p[in.bytes[0] - 3] ^= 1;                  /* the last piece */
	cr_assert_eq(runner_hash_inputs(job, &in, d1), 0);
	cr_expect_str_neq(d0[0], d1[0]);
	p[in.bytes[0] - 3] ^= 1;
	p[RUNNER_HASH_PIECE - 1] ^= 0x80;         /* the first piece's last byte */
	cr_assert_eq(runner_hash_inputs(job, &in, d1), 0);
	cr_expect_str_neq(d0[0], d1[0]);
	p[RUNNER_HASH_PIECE - 1] ^= 0x80;
	cr_assert_eq(sched_getaffinity(0, sizeof(all), &all), 0);
	one_cpu(&all);
	cr_assert_eq(runner_hash_inputs(job, &in, d1), 0);
	cr_assert_eq(sched_setaffinity(0, sizeof(all), &all), 0);
	cr_expect_str_eq(d0[0], d1[0], "put back, on one CPU: the same digest");
	cr_expect_str_eq(d0[1], d1[1]);
	runner_bufs_free(&in);
	atb_runner_job_free(job);
}
