/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Reports built from run and iteration rows written through the store API
 * (no measurement): gate firings by gate, the usable rate, an incomplete
 * run's resume hint, RFC 4180 quoting in the CSV, JSON nulls for what was
 * not measured, and the list of runs.  The real run is
 * tests/cli/t8000-report-json-csv.sh.
 */
#define _GNU_SOURCE
#include <math.h>

#include "../fixtures/store/fixture.h"
#include "atb/report.h"
#include "banned.h"

static struct fx F;

static void setup(void)
{
	fx_setup(&F);
}

static void teardown(void)
{
	fx_teardown(&F);
}

TestSuite(report, .init = setup, .fini = teardown);

static void add_run(const char *id, int64_t planned)
{
	struct atb_run_row r;
	struct atb_error err;

	memset(&r, 0, sizeof(r));
	snprintf(r.id, sizeof(r.id), "%s", id);
	snprintf(r.task, sizeof(r.task), "relu");
	snprintf(r.proposer, sizeof(r.proposer), "random");
	r.seed = 3;
	r.iterations = planned;
	r.paired_seeds = 5;
	r.naive = 1;
	memcpy(r.protocol_digest, F.digest, 65);
	memcpy(r.box_fingerprint, F.box, 65);
	atb_error_clear(&err);
	cr_assert_eq(atb_store_add_run(F.s, &r, &err), ATB_OK, "%s", err.msg);
}

static void add_iter(const char *run, int64_t k, const char *outcome, const char *reason)
{
	struct atb_iteration_row it;
	struct atb_error err;

	memset(&it, 0, sizeof(it));
	snprintf(it.run, sizeof(it.run), "%s", run);
	it.k = k;
	it.knobs_json = "{\"UNROLL\":\"4\",\"cflags\":\"-O3\"}";
	snprintf(it.outcome, sizeof(it.outcome), "%s", outcome);
	it.reason = (char *)reason;
	it.wall_s = 1.5;
	atb_error_clear(&err);
	cr_assert_eq(atb_store_add_iteration(F.s, &it, &err), ATB_OK, "%s", err.msg);
}

Test(report, counts_gates_and_quotes_csv)
{
	struct atb_report *r = NULL;
	struct atb_error err;
	char *text = NULL, *csv = NULL;
	json_t *j = NULL;

	add_run("r1", 5);
	add_iter("r1", 0, "build", "cc said: \"error\", line 3");
	add_iter("r1", 1, "correctness", "wrong at Y[0]");
	add_iter("r1", 2, "build", "again");
	atb_error_clear(&err);
	cr_assert_eq(atb_report_build(F.s, "r1", NULL, &r, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(r->niters, 3);
	cr_assert_eq(r->usable, 0);
	cr_assert_eq(r->best, -1);
	cr_assert_eq(r->nfirings, 2);
	cr_assert_str_eq(r->firings[0].outcome, "build");
	cr_assert_eq(r->firings[0].count, 2);
	cr_assert_str_eq(r->firings[1].outcome, "correctness");
	cr_assert_eq(r->protocol_version, 1);
	cr_assert_str_eq(r->box_summary, "unknown box");   /* the fixture's box has no identity */

	cr_assert_eq(atb_report_text(r, &text, &err), ATB_OK);
	cr_assert(strstr(text, "gates     build 2, correctness 1"), "%s", text);
	cr_assert(strstr(text, "usable    0 of 3 iterations (0%)"), "%s", text);
	cr_assert(strstr(text, "best      none: no usable iteration"), "%s", text);
	cr_assert(strstr(text, "status    incomplete: continue with 'atb run --resume r1'"), "%s", text);
	cr_assert(strstr(text, "UNROLL=4 cflags=-O3"), "%s", text);

	cr_assert_eq(atb_report_csv(r, &csv, &err), ATB_OK);
	cr_assert(strstr(csv, "iteration,outcome,usable,honest_speedup,"), "%s", csv);
	cr_assert(strstr(csv, "0,build,0,,,,,,,\"{\"\"UNROLL\"\":\"\"4\"\",\"\"cflags\"\":\"\"-O3\"\"}\",,"
			      "1.500,\"cc said: \"\"error\"\", line 3\"\r\n"), "%s", csv);

	cr_assert_eq(atb_report_json(r, &j, &err), ATB_OK);
	cr_assert(json_is_null(json_object_get(j, "best")));
	cr_assert_eq(json_integer_value(json_object_get(json_object_get(j, "gate_firings"),
							"build")), 2);
	cr_assert(json_is_null(json_object_get(json_array_get(json_object_get(j, "trajectory"), 0),
					       "honest")));
	cr_assert(json_is_false(json_object_get(json_object_get(j, "run"), "complete")));
	json_decref(j);
	atb_free(text);
	atb_free(csv);
	atb_report_free(r);
}

Test(report, lists_runs_and_refuses_unknown)
{
	struct atb_report *r = NULL;
	struct atb_error err;
	char *text = NULL, want[400];
	json_t *a = NULL;

	add_run("r1", 2);
	add_run("r2", 1);
	add_iter("r2", 0, "noise", "cv 0.07 over the cap 0.05");
	atb_error_clear(&err);
	cr_assert_eq(atb_report_list_text(F.s, &text, &err), ATB_OK);
	cr_assert(strstr(text, "r1"), "%s", text);
	cr_assert(strstr(text, "    1/1 "), "%s", text);
	cr_assert_eq(atb_report_list_json(F.s, &a, &err), ATB_OK);
	cr_assert_eq(json_array_size(a), 2);
	cr_assert_eq(json_integer_value(json_object_get(json_array_get(a, 1), "done")), 1);
	json_decref(a);
	atb_free(text);
	cr_assert_eq(atb_report_build(F.s, "r9", NULL, &r, &err), ATB_ERR_NOT_FOUND);
	cr_assert_null(r);
	snprintf(want, sizeof(want), "no run 'r9' in store '%s'", F.path);
	cr_assert_str_eq(err.msg, want);
}
