/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Unit tests of the suite module: the aggregate statistics against values
 * computed by hand (Wilson intervals from the closed form, fast_p counts
 * over all tasks, bootstrap intervals whose resample distribution can be
 * enumerated), which outcomes count as correct, discovery order, filter and
 * candidate lookup, and the static checker on the planted fixtures (with
 * the system's python3; no torch needed: it only uses the ast module).
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <jansson.h>

#include "atb/alloc.h"
#include "atb/measure.h"
#include "atb/protocol.h"
#include "atb/suite.h"
#include "banned.h"

static int close_to(double got, double want, double tol)
{
	return fabs(got - want) <= tol;
}

static struct atb_protocol *proto(void)
{
	struct atb_protocol *p = NULL;
	struct atb_error err;

	cr_assert_eq(atb_protocol_load_current(ATB_SOURCE_DIR, &p, &err), ATB_OK, "%s", err.msg);
	return p;
}

static void row(struct atb_suite_row *r, const char *task, const char *outcome, double speedup)
{
	memset(r, 0, sizeof(*r));
	snprintf(r->task, sizeof(r->task), "%s", task);
	snprintf(r->outcome, sizeof(r->outcome), "%s", outcome);
	r->correct = atb_suite_outcome_correct(outcome);
	r->admitted = !strcmp(outcome, "usable");
	r->speedup = r->admitted ? speedup : 0.0;
}

/* ---- Wilson score interval ---- */

Test(suite, wilson_matches_the_closed_form)
{
	double lo, hi;

	/* p = 0.5, n = 10, z = 1.959964: centre 0.5, half-width 0.263407 (by hand) */
	atb_suite_wilson(5, 10, 0.95, &lo, &hi);
	cr_assert(close_to(lo, 0.236593, 1e-6) && close_to(hi, 0.763407, 1e-6), "[%g, %g]", lo, hi);
	/* 0 of 1: [0, z^2 / (1 + z^2)] = [0, 0.793451] */
	atb_suite_wilson(0, 1, 0.95, &lo, &hi);
	cr_assert(close_to(lo, 0.0, 1e-12) && close_to(hi, 0.793451, 1e-6), "[%g, %g]", lo, hi);
	/* 4 of 5 */
	atb_suite_wilson(4, 5, 0.95, &lo, &hi);
	cr_assert(close_to(lo, 0.375535, 1e-6) && close_to(hi, 0.963776, 1e-6), "[%g, %g]", lo, hi);
	atb_suite_wilson(0, 0, 0.95, &lo, &hi);
	cr_assert(lo == 0.0 && hi == 1.0);
}

/* ---- which outcomes are correct ---- */

Test(suite, outcome_correct_only_past_every_correctness_gate)
{
	const char *yes[] = {"usable", "admitted", "quarantined", "noise", "baseline_drift",
			     "rejected:cv_over_cap"};
	const char *no[] = {"correctness", "build", "runner", "input_mutation", "result_reuse",
			    "side_stream", "physical_floor", "static", "no_candidate", "timeout",
			    "task_error", "surface"};
	size_t i;

	for (i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
		cr_assert(atb_suite_outcome_correct(yes[i]), "%s", yes[i]);
	for (i = 0; i < sizeof(no) / sizeof(no[0]); i++)
		cr_assert(!atb_suite_outcome_correct(no[i]), "%s", no[i]);
}

Test(suite, static_refusal_policy)
{
	cr_assert(atb_measure_finding_refuses("syntax_error"));
	cr_assert(atb_measure_finding_refuses("no_modelnew"));
	cr_assert(atb_measure_finding_refuses("fallback_to_reference"));
	cr_assert(atb_measure_finding_refuses("dynamic_code"));
	cr_assert(atb_measure_finding_refuses("reflection"));
	cr_assert(atb_measure_finding_refuses("unanalysable"));
	cr_assert(!atb_measure_finding_refuses("calls_replaced_op"));
	cr_assert(!atb_measure_finding_refuses("something_new"));
}

/* ---- aggregate ---- */

Test(suite, fast_p_counts_every_task_incorrect_ones_as_not_fast)
{
	struct atb_protocol *p = proto();
	struct atb_suite_row r[5];
	struct atb_suite_stats s;
	struct atb_error err;

	row(&r[0], "a", "usable", 1.5);
	row(&r[1], "b", "usable", 0.9);
	row(&r[2], "c", "usable", 2.5);
	row(&r[3], "d", "noise", 0.0);        /* correct, timing refused: not fast */
	row(&r[4], "e", "correctness", 0.0);  /* incorrect */
	cr_assert_eq(atb_suite_aggregate(r, 5, p, 7, &s, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(s.ntasks, 5);
	cr_assert_eq(s.ncorrect, 4);
	cr_assert_eq(s.nadmitted, 3);
	/* PROTO: kernelbench.fast_p = [0, 1, 1.2, 2] */
	cr_assert_eq(s.nfast_p, 4);
	cr_assert_eq(s.fast_p_count[0], 3);
	cr_assert_eq(s.fast_p_count[1], 2);
	cr_assert_eq(s.fast_p_count[2], 2);
	cr_assert_eq(s.fast_p_count[3], 1);
	cr_assert(close_to(s.fast_p[0].value, 0.6, 1e-12));
	cr_assert(close_to(s.fast_p[1].value, 0.4, 1e-12));
	cr_assert(close_to(s.fast_p[3].value, 0.2, 1e-12));
	/* correct rate 4/5 with its Wilson interval, against the 50% bar */
	cr_assert(close_to(s.correct_rate.value, 0.8, 1e-12));
	cr_assert(close_to(s.correct_rate.lo, 0.375535, 1e-6));
	cr_assert(close_to(s.correct_rate.bar, 0.5, 1e-12));
	cr_assert(s.correct_rate.meets);
	cr_assert_str_eq(s.correct_rate.ci_verdict, "undecided");
	/* median of the admitted {0.9, 1.5, 2.5} and their geometric mean */
	cr_assert(close_to(s.median_speedup.value, 1.5, 1e-12));
	cr_assert(close_to(s.geomean_speedup.value, cbrt(0.9 * 1.5 * 2.5), 1e-12));
	cr_assert(s.median_speedup.meets);   /* 1.5 >= 1.2 */
	atb_protocol_free(p);
}

/*
 * Two admitted speedups {1, 4}: a resample is {1,1}, {1,4} or {4,4} with
 * probabilities 1/4, 1/2, 1/4, so the median's bootstrap distribution is
 * {1, 2.5, 4} and the geometric mean's {1, 2, 4}: each 95% percentile
 * interval is [1, 4] (each end has mass 1/4 > 2.5%).
 */
Test(suite, bootstrap_interval_of_two_values_is_their_range)
{
	struct atb_protocol *p = proto();
	struct atb_suite_row r[2];
	struct atb_suite_stats s;
	struct atb_error err;

	row(&r[0], "a", "usable", 1.0);
	row(&r[1], "b", "usable", 4.0);
	cr_assert_eq(atb_suite_aggregate(r, 2, p, 1, &s, &err), ATB_OK, "%s", err.msg);
	cr_assert(close_to(s.median_speedup.value, 2.5, 1e-12));
	cr_assert(close_to(s.geomean_speedup.value, 2.0, 1e-12));
	cr_assert(close_to(s.median_speedup.lo, 1.0, 1e-12) &&
		  close_to(s.median_speedup.hi, 4.0, 1e-12),
		  "[%g, %g]", s.median_speedup.lo, s.median_speedup.hi);
	cr_assert(close_to(s.geomean_speedup.lo, 1.0, 1e-12) &&
		  close_to(s.geomean_speedup.hi, 4.0, 1e-12));
	cr_assert_str_eq(s.median_speedup.ci_verdict, "undecided");  /* 1 < 1.2 <= 4 */
	atb_protocol_free(p);
}

Test(suite, copies_at_one_read_below_the_median_bar)
{
	struct atb_protocol *p = proto();
	struct atb_suite_row r[4];
	struct atb_suite_stats s;
	struct atb_error err;
	size_t i;

	for (i = 0; i < 4; i++)
		row(&r[i], "t", "usable", 1.0);
	cr_assert_eq(atb_suite_aggregate(r, 4, p, 3, &s, &err), ATB_OK, "%s", err.msg);
	cr_assert(close_to(s.median_speedup.lo, 1.0, 1e-12) &&
		  close_to(s.median_speedup.hi, 1.0, 1e-12));
	cr_assert(!s.median_speedup.meets);
	cr_assert_str_eq(s.median_speedup.ci_verdict, "below");
	cr_assert_eq(s.fast_p_count[1], 0);   /* 1.0 is not > 1 */
	cr_assert_eq(s.fast_p_count[0], 4);
	for (i = 0; i < 4; i++)
		row(&r[i], "t", "usable", 2.0);
	cr_assert_eq(atb_suite_aggregate(r, 4, p, 3, &s, &err), ATB_OK);
	cr_assert_str_eq(s.median_speedup.ci_verdict, "above");
	atb_protocol_free(p);
}

Test(suite, bootstrap_is_reproducible_from_its_seed)
{
	struct atb_protocol *p = proto();
	struct atb_suite_row r[6];
	struct atb_suite_stats a, b;
	const double x[6] = {0.8, 1.1, 1.0, 1.3, 0.95, 2.0};
	size_t i;

	for (i = 0; i < 6; i++)
		row(&r[i], "t", "usable", x[i]);
	cr_assert_eq(atb_suite_aggregate(r, 6, p, 42, &a, NULL), ATB_OK);
	cr_assert_eq(atb_suite_aggregate(r, 6, p, 42, &b, NULL), ATB_OK);
	cr_assert(a.median_speedup.lo == b.median_speedup.lo &&
		  a.geomean_speedup.hi == b.geomean_speedup.hi);
	cr_assert(a.median_speedup.lo <= a.median_speedup.value &&
		  a.median_speedup.value <= a.median_speedup.hi);
	cr_assert(a.geomean_speedup.lo <= a.geomean_speedup.value &&
		  a.geomean_speedup.value <= a.geomean_speedup.hi);
	atb_protocol_free(p);
}

Test(suite, empty_and_unmeasured_suites_have_no_speedup)
{
	struct atb_protocol *p = proto();
	struct atb_suite_row r[1];
	struct atb_suite_stats s;

	cr_assert_eq(atb_suite_aggregate(r, 0, p, 0, &s, NULL), ATB_OK);
	cr_assert(!s.correct_rate.has && !s.median_speedup.has);
	row(&r[0], "a", "no_candidate", 0.0);
	cr_assert_eq(atb_suite_aggregate(r, 1, p, 0, &s, NULL), ATB_OK);
	cr_assert(s.correct_rate.has && s.correct_rate.value == 0.0);
	cr_assert_eq(s.nmissing, 1);
	cr_assert(!s.median_speedup.has && !s.geomean_speedup.has);
	atb_protocol_free(p);
}

Test(suite, admitted_speedup_must_be_finite_and_positive)
{
	struct atb_protocol *p = proto();
	struct atb_suite_row r[1];
	struct atb_suite_stats s;
	struct atb_error err;

	row(&r[0], "level1/x.py", "usable", 0.0);
	cr_assert_eq(atb_suite_aggregate(r, 1, p, 0, &s, &err), ATB_ERR_USAGE);
	cr_assert(strstr(err.msg, "level1/x.py"), "%s", err.msg);
	atb_protocol_free(p);
}

/* ---- discovery ---- */

Test(suite, discovers_bundled_tasks_in_order_with_copy_candidates)
{
	struct atb_suite_task *t = NULL;
	struct atb_error err;
	size_t n = 0, i;

	cr_assert_eq(atb_suite_discover(ATB_SOURCE_DIR "/tasks/kernelbench",
					ATB_SOURCE_DIR "/tasks/kernelbench/candidates/copy", NULL, &t,
					&n, &err),
		     ATB_OK, "%s", err.msg);
	cr_assert_geq(n, 10);
	cr_assert_str_eq(t[0].rel, "level1/01_Add_Scale.py");
	for (i = 0; i < n; i++) {
		cr_assert(!strstr(t[i].rel, "candidates"), "%s", t[i].rel);
		cr_assert(t[i].candidate, "no copy candidate for %s", t[i].rel);
	}
	atb_suite_tasks_free(t, n);

	cr_assert_eq(atb_suite_discover(ATB_SOURCE_DIR "/tasks/kernelbench",
					ATB_SOURCE_DIR "/tests/fixtures/suite/hang", "*ReLU*", &t, &n,
					&err),
		     ATB_OK, "%s", err.msg);
	cr_assert_eq(n, 1);
	cr_assert_str_eq(t[0].rel, "level1/02_ReLU.py");
	cr_assert(t[0].candidate && strstr(t[0].candidate, "hang/02_ReLU.py"));
	atb_suite_tasks_free(t, n);

	cr_assert_eq(atb_suite_discover(ATB_SOURCE_DIR "/tasks/kernelbench",
					ATB_SOURCE_DIR "/tests/fixtures/suite/hang", "level1/0[15]_*",
					&t, &n, &err),
		     ATB_OK);
	cr_assert_eq(n, 2);
	cr_assert(!t[0].candidate && !t[1].candidate);
	atb_suite_tasks_free(t, n);

	cr_assert_eq(atb_suite_discover(ATB_SOURCE_DIR "/tasks/kernelbench", NULL, "nothing*", &t,
					&n, &err),
		     ATB_ERR_USAGE);
	cr_assert(strstr(err.msg, "nothing*"), "%s", err.msg);
	cr_assert_eq(atb_suite_discover("/no/such/suite", NULL, NULL, &t, &n, &err),
		     ATB_ERR_NOT_FOUND);
}

static void touch(const char *dir, const char *name)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	cr_assert(f);
	fclose(f);
}

Test(suite, kernelbench_numbering_orders_2_before_10)
{
	char dir[] = "/tmp/u-suite-XXXXXX", sub[600];
	struct atb_suite_task *t = NULL;
	size_t n = 0;

	cr_assert(mkdtemp(dir));
	snprintf(sub, sizeof(sub), "%s/level2", dir);
	cr_assert_eq(mkdir(sub, 0700), 0);
	touch(sub, "10_b.py");
	touch(sub, "2_a.py");
	touch(sub, "1_c.py");
	touch(sub, "_helper.py");
	touch(sub, "notes.txt");
	touch(dir, "7_top.py");
	cr_assert_eq(atb_suite_discover(dir, sub, NULL, &t, &n, NULL), ATB_OK);
	cr_assert_eq(n, 4);
	cr_assert_str_eq(t[0].rel, "7_top.py");
	cr_assert_str_eq(t[1].rel, "level2/1_c.py");
	cr_assert_str_eq(t[2].rel, "level2/2_a.py");
	cr_assert_str_eq(t[3].rel, "level2/10_b.py");
	/* candidates dir = the task folder itself: found by file name */
	cr_assert(t[3].candidate && strstr(t[3].candidate, "10_b.py"));
	atb_suite_tasks_free(t, n);
}

/* ---- static checks on the planted fixtures ---- */

static int has_python3(void)
{
	return system("python3 -c 'import ast' >/dev/null 2>&1") == 0;
}

static void expect_static(const char *fixture, const char *kind, int refuses)
{
	char cand[1024];
	struct atb_measure_finding *f = NULL;
	struct atb_error err;
	size_t n = 0, i;
	int found = 0, any_refuses = 0;

	snprintf(cand, sizeof(cand), "%s/tests/fixtures/suite/%s/02_ReLU.py", ATB_SOURCE_DIR,
		 fixture);
	cr_assert_eq(atb_measure_static_check(ATB_SOURCE_DIR, "python3",
					    ATB_SOURCE_DIR "/tasks/kernelbench/level1/02_ReLU.py",
					    cand, 30, &f, &n, NULL, &err),
		     ATB_OK, "%s: %s", fixture, err.msg);
	for (i = 0; i < n; i++) {
		found |= kind && !strcmp(f[i].kind, kind);
		any_refuses |= f[i].refuses;
	}
	if (kind)
		cr_assert(found, "%s: no %s finding", fixture, kind);
	else
		cr_assert_eq(n, 0, "%s: %zu findings, first %s", fixture, n, n ? f[0].kind : "");
	cr_assert_eq(any_refuses, refuses, "%s", fixture);
	atb_free(f);
}

Test(suite, static_checker_finds_each_planted_candidate)
{
	if (!has_python3())
		cr_skip_test("no python3 on PATH");
	expect_static("fallback", "fallback_to_reference", 1);
	expect_static("subclass", "fallback_to_reference", 1);
	expect_static("no_modelnew", "no_modelnew", 1);
	expect_static("syntax_error", "syntax_error", 1);
	expect_static("calls_op", "calls_replaced_op", 0);
	expect_static("relu_identity", NULL, 0);
	expect_static("hang", NULL, 0);
}

Test(suite, static_checker_reports_a_broken_reference_as_a_task_problem)
{
	struct atb_measure_finding *f = NULL;
	struct atb_error err;
	size_t n = 0;

	if (!has_python3())
		cr_skip_test("no python3 on PATH");
	cr_assert_eq(atb_measure_static_check(ATB_SOURCE_DIR, "python3",
					    ATB_SOURCE_DIR "/tests/fixtures/suite/syntax_error/02_ReLU.py",
					    ATB_SOURCE_DIR "/tests/fixtures/suite/hang/02_ReLU.py", 30,
					    &f, &n, NULL, &err),
		     ATB_ERR_SCHEMA);
	cr_assert(strstr(err.msg, "reference"), "%s", err.msg);
	cr_assert_eq(atb_measure_static_check(ATB_SOURCE_DIR, "/no/such/python",
					    ATB_SOURCE_DIR "/tasks/kernelbench/level1/02_ReLU.py",
					    ATB_SOURCE_DIR "/tests/fixtures/suite/hang/02_ReLU.py", 30,
					    &f, &n, NULL, &err),
		     ATB_ERR_SYSTEM);
}

/*
 * The checker reads candidate input, so it runs sandboxed: a planted
 * checker (a home of its own) tries to write next to the candidate and in
 * /tmp, and looks for the caller's environment; none of it gets out.
 * With ATB_SANDBOX=off the same checker's write lands: the control.
 */
static json_t *planted_checker(const char *dir, const char *marker)
{
	char path[600], cand[600];
	struct atb_measure_finding *f = NULL;
	struct atb_error err;
	char *json = NULL;
	json_t *o;
	size_t n = 0;
	FILE *fp;

	snprintf(path, sizeof(path), "%s/python", dir);
	mkdir(path, 0700);
	snprintf(path, sizeof(path), "%s/python/atb_static.py", dir);
	fp = fopen(path, "w");
	cr_assert_not_null(fp);
	fprintf(fp,
		"import json, os, sys\n"
		"out = {'env_db': 'ATB_DB' in os.environ, 'cwd': os.getcwd()}\n"
		"for k, p in (('next', os.path.join(os.path.dirname(sys.argv[3]), 'escaped')),\n"
		"             ('tmp', '/tmp/%s')):\n"
		"    try:\n"
		"        open(p, 'w').write('x'); out[k] = 'written'\n"
		"    except OSError:\n"
		"        out[k] = 'refused'\n"
		"print(json.dumps({'version': 1, 'findings': [], 'probe': out}))\n",
		marker);
	fclose(fp);
	snprintf(cand, sizeof(cand), "%s/cand/02_ReLU.py", dir);
	snprintf(path, sizeof(path), "%s/cand", dir);
	mkdir(path, 0700);
	fp = fopen(cand, "w");
	cr_assert_not_null(fp);
	fputs("class ModelNew:\n    pass\n", fp);
	fclose(fp);
	atb_error_clear(&err);
	cr_assert_eq(atb_measure_static_check(dir, "python3",
					    ATB_SOURCE_DIR "/tasks/kernelbench/level1/02_ReLU.py",
					    cand, 30, &f, &n, &json, &err),
		     ATB_OK, "%s", err.msg);
	o = json_loads(json, 0, NULL);
	cr_assert_not_null(o, "%s", json);
	atb_free(json);
	atb_free(f);
	return o;
}

Test(suite, static_checker_runs_sandboxed)
{
	char dir[] = "/tmp/u-suite.XXXXXX", marker[64], path[600], cmd[700];
	const char *level;
	json_t *o, *probe;

	if (!has_python3())
		cr_skip_test("no python3 on PATH");
	cr_assert_not_null(mkdtemp(dir));
	snprintf(marker, sizeof(marker), "atb-u-suite-%d", (int)getpid());
	setenv("ATB_DB", "/nowhere/atb.db", 1);
	unsetenv("ATB_SANDBOX");
	o = planted_checker(dir, marker);
	probe = json_object_get(o, "probe");
	level = json_string_value(json_object_get(json_object_get(o, "sandbox"), "level"));
	cr_assert_not_null(level, "no sandbox facts in the checker's JSON");
	cr_expect_not(json_is_true(json_object_get(probe, "env_db")), "the caller's ATB_DB leaked");
	if (!strcmp(level, "full") || !strcmp(level, "no_userns")) {
		snprintf(path, sizeof(path), "%s/cand/escaped", dir);
		cr_expect_neq(access(path, F_OK), 0, "the checker wrote next to the candidate");
		snprintf(path, sizeof(path), "/tmp/%s", marker);
		cr_expect_neq(access(path, F_OK), 0, "the checker wrote to the caller's /tmp");
	}
	json_decref(o);

	/* the control: no sandbox, and the same write lands */
	setenv("ATB_SANDBOX", "off", 1);
	o = planted_checker(dir, marker);
	cr_expect_str_eq(json_string_value(json_object_get(json_object_get(o, "sandbox"), "level")),
			 "off");
	snprintf(path, sizeof(path), "%s/cand/escaped", dir);
	cr_expect_eq(access(path, F_OK), 0, "the control's write did not land");
	json_decref(o);
	snprintf(path, sizeof(path), "/tmp/%s", marker);
	unlink(path);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	cr_expect_eq(system(cmd), 0);
}
