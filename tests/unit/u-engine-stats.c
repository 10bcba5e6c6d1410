/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * atb_store_result_stats on a real SQLite store: an engine result ingested
 * through the validator is read back with its row numbers and its stats
 * object (requests/s and latency ratios with their intervals, as
 * atb_engine_ab stores them), exactly as stored; a result that does not
 * exist, a bad id, a read-only store, and an allocation-failure walk.
 */
#define _GNU_SOURCE
#include <math.h>

#include "../fixtures/store/fixture.h"
#include "atb/alloc.h"
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

TestSuite(engine_stats, .init = setup, .fini = teardown);

/* What atb_engine_ab stores (include/atb/engine.h), with figures no note would round to. */
#define STATS \
	"{\"engine\":\"llamacpp\",\"requests_per_s\":{\"ratio\":1.2345678901,\"ci_low\":1.1234567," \
	"\"ci_high\":1.3456789,\"p_value\":0.0078125,\"baseline_median\":17.91,"                \
	"\"candidate_median\":22.11},\"latency\":{\"ttft_median_ms\":{\"ratio\":0.98765432,"   \
	"\"ci_low\":0.9512345,\"ci_high\":1.0234567,\"p_value\":0.5},\"e2e_p99_ms\":{"        \
	"\"ratio\":2.5,\"ci_low\":2.25,\"ci_high\":2.75,\"p_value\":0.0078125}}}"

/* An engine result with 8 paired seeds at speedup 1.2345678901; its result id. */
static int64_t ingest_engine(void)
{
	struct atb_ingest *in = fx_ingest(&F, 8, 1.2345678901);
	struct atb_ingest_outcome o;
	struct atb_error err;

	/* Rates: the candidate's are higher, ratio = candidate / baseline (the store re-derives it). */
	for (size_t k = 0; k < in->nsamples; k++)
		if (F.samples[k].arm == ATB_ARM_CANDIDATE)
			F.samples[k].value *= 1.2345678901 * 1.2345678901;
	for (size_t k = 0; k < in->nseeds; k++)
		F.seeds[k].candidate_median = 1501.0 * 1.2345678901;
	in->kind = "engine";
	in->task = "engine-llamacpp-repeat";
	in->unit = "req/s";
	in->metric = "requests_per_s/paired";
	in->ci_low = 1.1234567;
	in->ci_high = 1.3456789;
	in->stats_json = STATS;
	atb_error_clear(&err);
	cr_assert_eq(atb_store_ingest(F.s, in, &o, &err), ATB_OK, "%s", err.msg);
	cr_assert_gt(o.result_id, 0);
	return o.result_id;
}

static double num(json_t *o, const char *path1, const char *path2, const char *key)
{
	json_t *v = json_object_get(o, path1);

	if (path2)
		v = json_object_get(v, path2);
	v = json_object_get(v, key);
	cr_assert(json_is_number(v), "%s.%s.%s is not a number", path1, path2 ? path2 : "", key);
	return json_number_value(v);
}

Test(engine_stats, test_engine__result_stats_read_back_exactly)
{
	int64_t id = ingest_engine();
	json_t *o = NULL, *stats;
	struct atb_error err;

	atb_error_clear(&err);
	cr_assert_eq(atb_store_result_stats(F.s, id, &o, &err), ATB_OK, "%s", err.msg);
	cr_assert(json_is_object(o));
	cr_assert_eq(json_integer_value(json_object_get(o, "id")), id);
	cr_assert_str_eq(json_string_value(json_object_get(o, "kind")), "engine");
	cr_assert_str_eq(json_string_value(json_object_get(o, "metric")), "requests_per_s/paired");
	cr_assert_str_eq(json_string_value(json_object_get(o, "status")), "admitted");
	cr_assert_eq(json_integer_value(json_object_get(o, "n_seeds")), 8);
	cr_assert_eq(json_string_length(json_object_get(o, "job_uuid")) > 0, 1);
	/* the row's numbers, as stored (not rounded as the note's four digits) */
	cr_assert_eq(json_real_value(json_object_get(o, "speedup")), 1.2345678901);
	cr_assert_eq(json_real_value(json_object_get(o, "ci_low")), 1.1234567);
	cr_assert_eq(json_real_value(json_object_get(o, "ci_high")), 1.3456789);
	stats = json_object_get(o, "stats");
	cr_assert(json_is_object(stats));
	cr_assert_eq(num(stats, "requests_per_s", NULL, "ratio"), 1.2345678901);
	cr_assert_eq(num(stats, "requests_per_s", NULL, "candidate_median"), 22.11);
	cr_assert_eq(num(stats, "latency", "ttft_median_ms", "ratio"), 0.98765432);
	cr_assert_eq(num(stats, "latency", "ttft_median_ms", "ci_high"), 1.0234567);
	cr_assert_eq(num(stats, "latency", "e2e_p99_ms", "ci_low"), 2.25);
	cr_assert_null(json_object_get(json_object_get(stats, "latency"), "tpot_median_ms"));
	json_decref(o);
}

Test(engine_stats, test_engine__result_stats_of_a_kernel_result_are_its_own)
{
	struct atb_ingest_outcome io;
	struct atb_error err;
	json_t *o = NULL;

	atb_error_clear(&err);
	cr_assert_eq(atb_store_ingest(F.s, fx_ingest(&F, 5, 1.5), &io, &err), ATB_OK, "%s",
		     err.msg);
	cr_assert_eq(atb_store_result_stats(F.s, io.result_id, &o, &err), ATB_OK, "%s", err.msg);
	cr_assert_str_eq(json_string_value(json_object_get(o, "kind")), "kernel");
	cr_assert_eq(json_object_size(json_object_get(o, "stats")), 0);
	json_decref(o);
}

Test(engine_stats, test_engine__result_stats_missing_or_bad_id)
{
	struct atb_error err;
	json_t *o = (json_t *)&err; /* must be set to NULL */

	ingest_engine();
	atb_error_clear(&err);
	cr_assert_eq(atb_store_result_stats(F.s, 999, &o, &err), ATB_ERR_NOT_FOUND);
	cr_assert_null(o);
	cr_assert(strstr(err.msg, "no result 999 in store '"), "%s", err.msg);
	o = (json_t *)&err;
	atb_error_clear(&err);
	cr_assert_eq(atb_store_result_stats(F.s, 0, &o, &err), ATB_ERR_USAGE);
	cr_assert_null(o);
	cr_assert_str_eq(err.msg, "bad result id 0");
}

Test(engine_stats, test_engine__result_stats_on_a_read_only_store)
{
	int64_t id = ingest_engine();
	struct atb_store *ro = NULL;
	struct atb_error err;
	json_t *o = NULL;

	atb_error_clear(&err);
	cr_assert_eq(atb_store_open(F.path, ATB_STORE_READ_ONLY, &ro, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(atb_store_result_stats(ro, id, &o, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(num(json_object_get(o, "stats"), "latency", "e2e_p99_ms", "ratio"), 2.5);
	json_decref(o);
	atb_store_close(ro);
}

/*
 * Fail allocation k of the accessor: each gives ATB_ERR_NOMEM with *out
 * NULL, never a crash.  Failures inside json_loads after its lexer started
 * are not walked: jansson 2.14's lexer writes past a buffer it failed to
 * grow (valgrind: invalid write in json_loads; u-loadgen.c notes the same),
 * a bug inside jansson, not in atb.  So: k = 1 (the lexer cannot start),
 * then every allocation after the parse (the object that is returned).
 */
Test(engine_stats, test_engine__result_stats_allocation_failures)
{
	int64_t id = ingest_engine();
	struct atb_error err;
	json_t *o, *parsed;
	long k, nparse;

	atb_alloc_install_json();
	atb_alloc_fail_at(0);
	parsed = json_loads(STATS, 0, NULL);
	nparse = atb_alloc_count();
	json_decref(parsed);
	for (k = 1; k < 400; k++) {
		enum atb_status st;

		if (k > 1 && k <= nparse)
			continue;
		o = (json_t *)&err;
		atb_error_clear(&err);
		atb_alloc_fail_at(k);
		st = atb_store_result_stats(F.s, id, &o, &err);
		if (!atb_alloc_failed()) {
			atb_alloc_fail_at(0);
			cr_assert_eq(st, ATB_OK, "k=%ld: %s", k, err.msg);
			cr_assert_gt(k, nparse + 1, "nothing allocated after the parse");
			json_decref(o);
			return;
		}
		atb_alloc_fail_at(0);
		cr_assert_eq(st, ATB_ERR_NOMEM, "k=%ld: %s (%s)", k, atb_status_name(st), err.msg);
		cr_assert_null(o, "k=%ld", k);
	}
	cr_assert_fail("no run without a failed allocation in 400");
}
