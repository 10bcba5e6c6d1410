/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Unit tests of the measurement gates as pure judgements (src/measure/
 * gates.c): the surface folder check, hashes of what a candidate must not
 * touch, the physical floor and baseline drift decisions, and the ranking of
 * correctness facts.  The whole pipeline on real processes is in
 * tests/cli/t6000-gates-cheats.sh and t6100-measure-honest.sh.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "atb/alloc.h"
#include "atb/task.h"
#include "measure/measure_int.h"
#include "banned.h"

static struct atb_task *relu(void)
{
	struct atb_task *t = NULL;
	struct atb_error err;

	cr_assert_eq(atb_task_load(ATB_SOURCE_DIR "/tasks/relu", &t, &err), ATB_OK, "%s", err.msg);
	return t;
}

static void put(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	cr_assert_not_null(f);
	fputs(text, f);
	fclose(f);
}

Test(measure, surface_folder_accepts_only_surface_files)
{
	struct atb_task *t = relu();
	char dir[] = "/tmp/u-measure.XXXXXX", p[256], why[512];

	cr_assert_not_null(mkdtemp(dir));
	cr_assert_eq(atbi_gate_surface_folder(t, dir, why, sizeof(why)), ATB_ERR_CHECK);
	cr_assert(strstr(why, "lacks 'kernel.c'"), "%s", why);
	snprintf(p, sizeof(p), "%s/kernel.c", dir);
	put(p, "int x;\n");
	cr_assert_eq(atbi_gate_surface_folder(t, dir, why, sizeof(why)), ATB_OK, "%s", why);
	snprintf(p, sizeof(p), "%s/other.c", dir);
	put(p, "int y;\n");
	cr_assert_eq(atbi_gate_surface_folder(t, dir, why, sizeof(why)), ATB_ERR_CHECK);
	cr_assert(strstr(why, "'other.c' is not in the task's surface"), "%s", why);
	unlink(p);
	snprintf(p, sizeof(p), "%s/kernel.c", dir);
	unlink(p);
	cr_assert_eq(symlink("/etc/hostname", p), 0);
	cr_assert_eq(atbi_gate_surface_folder(t, dir, why, sizeof(why)), ATB_ERR_CHECK);
	cr_assert(strstr(why, "symlink"), "%s", why);
	unlink(p);
	rmdir(dir);
	atb_task_free(t);
}

Test(measure, hash_diff_names_changed_added_removed)
{
	struct atbi_hash_set a = {0}, b = {0};
	struct atb_error err;
	char dir[] = "/tmp/u-measure.XXXXXX", p[256], q[256], what[512];

	cr_assert_not_null(mkdtemp(dir));
	snprintf(p, sizeof(p), "%s/task.yaml", dir);
	put(p, "name: x\n");
	cr_assert_eq(atbi_hash_add(&a, dir, &err), ATB_OK);
	atbi_hash_sort(&a);
	put(p, "name: x\n# the candidate was here\n");
	cr_assert_eq(atbi_hash_add(&b, dir, &err), ATB_OK);
	atbi_hash_sort(&b);
	cr_assert_eq(atbi_hash_diff(&a, &b, what, sizeof(what)), 1);
	cr_assert(strstr(what, "changed") && strstr(what, "task.yaml"), "%s", what);
	atbi_hash_release(&b);
	put(p, "name: x\n");
	snprintf(q, sizeof(q), "%s/new.c", dir);
	put(q, "\n");
	cr_assert_eq(atbi_hash_add(&b, dir, &err), ATB_OK);
	atbi_hash_sort(&b);
	cr_assert_eq(atbi_hash_diff(&a, &b, what, sizeof(what)), 1);
	cr_assert(strstr(what, "added"), "%s", what);
	cr_assert_eq(atbi_hash_diff(&b, &a, what, sizeof(what)), 1);
	cr_assert(strstr(what, "removed"), "%s", what);
	cr_assert_eq(atbi_hash_diff(&a, &a, what, sizeof(what)), 0);
	atbi_hash_release(&a);
	atbi_hash_release(&b);
	unlink(p);
	unlink(q);
	rmdir(dir);
}

/* PROTO: gates.physical_floor.margin */
Test(measure, floor_refuses_a_median_below_margin_times_floor)
{
	double m[3] = {1000, 950, 899};

	cr_assert_eq(atbi_gate_floor(m, 2, 1000, 0.9), -1);
	cr_assert_eq(atbi_gate_floor(m, 3, 1000, 0.9), 2);
	cr_assert_eq(atbi_gate_floor(m, 3, 0, 0.9), -1);  /* unknown floor: no refusal */
}

/* PROTO: gates.baseline_drift.tolerance */
Test(measure, drift_band_is_symmetric_in_ratio)
{
	double beside[3] = {105, 104, 106}, alone[3] = {100, 100, 100}, r;

	cr_assert_eq(atbi_gate_drift(beside, 3, alone, 3, 0.05, &r), 1);
	cr_assert_float_eq(r, 1.05, 1e-12);
	beside[0] = beside[1] = beside[2] = 106;
	cr_assert_eq(atbi_gate_drift(beside, 3, alone, 3, 0.05, &r), 0);
	beside[0] = beside[1] = beside[2] = 100 / 1.06;
	cr_assert_eq(atbi_gate_drift(beside, 3, alone, 3, 0.05, &r), 0);
}

/* PROTO: gates.baseline_drift.tolerance -- the per-seed rule measure applies */
Test(measure, drift_paired_inside_the_band_passes)
{
	double beside[4] = {103, 98, 200, 101}, alone[4] = {100, 100, 200, 100};
	double r, spread;
	int consistent;

	cr_assert_eq(atbi_gate_drift_paired(beside, alone, 4, 0.05, &r, &spread, &consistent), 1);
	cr_assert_float_eq(r, 1.005, 1e-12);  /* median of 1.03, 0.98, 1.00, 1.01 */
	cr_assert(spread > 0 && spread < 0.03);
	cr_assert_eq(consistent, 0);
	/* one seed far out does not move the median out of the band */
	beside[2] = 600;
	cr_assert_eq(atbi_gate_drift_paired(beside, alone, 4, 0.05, &r, &spread, &consistent), 1);
	/* the band is [1/1.05, 1.05] */
	beside[0] = beside[1] = beside[3] = 104.99;
	beside[2] = 209.98;
	cr_assert_eq(atbi_gate_drift_paired(beside, alone, 4, 0.05, &r, &spread, &consistent), 1);
	cr_assert_float_eq(spread, 0, 1e-12);
	beside[0] = beside[1] = beside[3] = 100 / 1.05 * (1 + 1e-9);
	beside[2] = 200 / 1.05 * (1 + 1e-9);
	cr_assert_eq(atbi_gate_drift_paired(beside, alone, 4, 0.05, &r, &spread, &consistent), 1);
	/* one seed: spread 0 */
	cr_assert_eq(atbi_gate_drift_paired(beside, alone, 1, 0.05, &r, &spread, &consistent), 1);
	cr_assert_float_eq(spread, 0, 1e-12);
}

/* atbi_gate_drift_paired at tolerance 0.05 must return pass, with *ratio
   ratio and *consistent consistent. */
static void expect_drift(const double *beside, const double *alone, size_t n, int pass,
			 double ratio, int consistent)
{
	double r, spread;
	int c;

	cr_assert_eq(atbi_gate_drift_paired(beside, alone, n, 0.05, &r, &spread, &c), pass);
	cr_assert_float_eq(r, ratio, 1e-12);
	cr_assert_eq(c, consistent);
	cr_assert(n < 2 || spread > 0);
}

Test(measure, drift_paired_outside_on_every_seed_is_drift)
{
	/* a candidate that slows its baseline: every seed beside > alone */
	double beside[3] = {230, 450, 118}, alone[3] = {100, 200, 100};
	/* and below the band on every seed: drift too (the baseline sped up) */
	double faster[3] = {80, 150, 90};

	expect_drift(beside, alone, 3, 0, 2.25, 1);
	expect_drift(faster, alone, 3, 0, 0.8, 1);
}

Test(measure, drift_paired_seeds_that_disagree_are_noise)
{
	/* median outside, but one seed inside the band */
	double beside[3] = {130, 101, 140}, alone[3] = {100, 100, 100};
	/* median outside above, one seed outside below */
	double split[3] = {130, 50, 140};

	expect_drift(beside, alone, 3, 0, 1.3, 0);
	expect_drift(split, alone, 3, 0, 1.3, 0);
}

/* Whose drift: the box's load, read by the harness, or the candidate's. */
Test(measure, drift_explained_by_the_box_load_is_the_boxs)
{
	/* the paired runner's thread off the CPU 20% of its groups, the alone
	   runner's 2%: the load moves the ratio to 0.98/0.8 = 1.225 */
	cr_assert_eq(atbi_drift_is_load(1.25, 0.20, 0.02), 1);
	cr_assert_eq(atbi_drift_is_load(1.40, 0.20, 0.02), 1);   /* 0.203 of log 0.336: over half */
	/* the same load, a drift four times larger: the candidate's */
	cr_assert_eq(atbi_drift_is_load(2.25, 0.20, 0.02), 0);
	/* the alone runner was the busier one: a slower baseline beside the
	   candidate is not explained, a faster one is */
	cr_assert_eq(atbi_drift_is_load(1.25, 0.02, 0.20), 0);
	cr_assert_eq(atbi_drift_is_load(0.80, 0.02, 0.20), 1);
	/* a quiet box both times: a drift of 1.10 is the candidate's */
	cr_assert_eq(atbi_drift_is_load(1.10, 0.001, 0.001), 0);
	cr_assert_eq(atbi_drift_is_load(1.10, 0.011, 0.010), 0);
	/* a share not read, or out of range: never the box's */
	cr_assert_eq(atbi_drift_is_load(1.25, -1, 0.02), 0);
	cr_assert_eq(atbi_drift_is_load(1.25, 0.20, -1), 0);
	cr_assert_eq(atbi_drift_is_load(1.25, 1.0, 0.02), 0);
	cr_assert_eq(atbi_drift_is_load(1.25, NAN, 0.02), 0);
	cr_assert_eq(atbi_drift_is_load(1.0, 0.20, 0.02), 0);
}

Test(measure, drift_paired_refuses_non_positive_medians)
{
	double beside[2] = {100, 100}, alone[2] = {100, 100};
	double bad[4] = {0, -5, NAN, INFINITY};
	double r, spread;
	int consistent, i;

	for (i = 0; i < 4; i++) {
		beside[1] = bad[i];
		cr_assert_eq(atbi_gate_drift_paired(beside, alone, 2, 0.05, &r, &spread, &consistent),
			     0, "beside %g", bad[i]);
		cr_assert_eq(r, 0);
		cr_assert(isinf(spread));
		cr_assert_eq(consistent, 0);
		beside[1] = 100;
		alone[0] = bad[i];
		cr_assert_eq(atbi_gate_drift_paired(beside, alone, 2, 0.05, &r, &spread, &consistent),
			     0, "alone %g", bad[i]);
		cr_assert_eq(r, 0);
		cr_assert_eq(consistent, 0);
		alone[0] = 100;
	}
	cr_assert_eq(atbi_gate_drift_paired(beside, alone, 0, 0.05, &r, &spread, &consistent), 0);
}

/* The runner processes of one attempt: per seed on the cpu, per side on cuda and torch. */
Test(measure, layout_cpu_is_per_seed_alternated)
{
	struct atbi_run_slot s[8];
	size_t n, k;

	cr_assert_eq(atbi_measure_seeds_per_runner(NULL, 4), 1);
	cr_assert_eq(atbi_measure_seeds_per_runner("cpu", 4), 1);
	n = atbi_measure_layout(4, atbi_measure_seeds_per_runner("cpu", 4), s);
	cr_assert_eq(n, 8);
	for (k = 0; k < n; k++) {
		/* P A, A P, P A, A P */
		int want_paired = (k % 2 == 0) == (k / 2 % 2 == 0);

		cr_assert_eq(s[k].paired, want_paired, "slot %zu", k);
		cr_assert_eq(s[k].lo, k / 2);
		cr_assert_eq(s[k].hi, k / 2 + 1);
	}
}

Test(measure, layout_cuda_is_one_runner_per_side)
{
	struct atbi_run_slot s[16];
	size_t n;

	cr_assert_eq(atbi_measure_seeds_per_runner("cuda", 8), 8);
	cr_assert_eq(atbi_measure_seeds_per_runner("torch", 8), 8);
	n = atbi_measure_layout(8, atbi_measure_seeds_per_runner("cuda", 8), s);
	cr_assert_eq(n, 2);
	cr_assert(s[0].paired && s[0].lo == 0 && s[0].hi == 8);
	cr_assert(!s[1].paired && s[1].lo == 0 && s[1].hi == 8);
	/* more than one runner per side: the groups alternate, the last one short */
	n = atbi_measure_layout(5, 2, s);
	cr_assert_eq(n, 6);
	cr_assert(s[0].paired && !s[1].paired && s[0].hi == 2);
	cr_assert(!s[2].paired && s[3].paired && s[2].lo == 2 && s[3].hi == 4);
	cr_assert(s[4].paired && !s[5].paired && s[4].lo == 4 && s[5].hi == 5);
}

Test(measure, correctness_ranking_and_naive_task_bug)
{
	struct atbi_correctness_state st;
	const char *reason;
	const json_t *ev;
	json_t *wrong, *naive;

	atb_alloc_install_json();
	memset(&st, 0, sizeof(st));
	naive = json_loads("{\"event\":\"correctness\",\"arm\":\"naive\",\"seed\":1,\"set\":\"s\","
			   "\"input\":\"task\",\"pass\":false,\"first_bad\":{\"buffer\":\"Y\","
			   "\"index\":3,\"ref\":1.0,\"got\":null}}", 0, NULL);
	wrong = json_loads("{\"event\":\"correctness\",\"arm\":\"candidate\",\"seed\":2,\"set\":\"s\","
			   "\"input\":\"signed_uniform\",\"pass\":false,\"first_bad\":{\"buffer\":\"Y\","
			   "\"index\":0,\"ref\":0.0,\"got\":-0.5},\"gates\":{\"input_mutation\":"
			   "{\"mutated\":[\"X\"]}}}", 0, NULL);
	atbi_gate_correctness_event(&st, naive);
	cr_assert(st.naive_wrong);
	cr_assert_null(atbi_gate_correctness_verdict(&st, &reason, &ev));
	atbi_gate_correctness_event(&st, wrong);
	cr_assert_str_eq(atbi_gate_correctness_verdict(&st, &reason, &ev), "input_mutation");
	st.mutation = 0;
	cr_assert_str_eq(atbi_gate_correctness_verdict(&st, &reason, &ev), "correctness");
	cr_assert(strstr(reason, "seed 2") && strstr(reason, "signed_uniform") &&
		  strstr(reason, "'Y'[0]"), "%s", reason);
	atbi_correctness_release(&st);
	json_decref(naive);
	json_decref(wrong);
}

/* PROTO: gates side_stream */
Test(measure, side_stream_escape_of_the_candidate_only)
{
	char why[512];
	json_t *c, *b, *ok;

	atb_alloc_install_json();
	c = json_loads("{\"event\":\"side_stream\",\"seed\":3,\"arm\":\"candidate\",\"event_ns\":4000,"
		       "\"device_extra_ns\":520000,\"escaped\":true}", 0, NULL);
	b = json_loads("{\"event\":\"side_stream\",\"seed\":3,\"arm\":\"baseline\",\"event_ns\":4000,"
		       "\"device_extra_ns\":520000,\"escaped\":true}", 0, NULL);
	ok = json_loads("{\"event\":\"side_stream\",\"seed\":3,\"arm\":\"candidate\",\"event_ns\":130000,"
			"\"device_extra_ns\":3000,\"escaped\":false}", 0, NULL);
	cr_assert_eq(atbi_gate_side_stream(c, NULL, why, sizeof(why)), 1);
	cr_assert(strstr(why, "seed 3") && strstr(why, "520000"), "%s", why);
	cr_assert_eq(atbi_gate_side_stream(b, NULL, why, sizeof(why)), 0);
	cr_assert_eq(atbi_gate_side_stream(ok, NULL, why, sizeof(why)), 0);
	json_decref(c);
	json_decref(b);
	json_decref(ok);
}

/*
 * PROTO: gates.side_stream (version 7 on) -- the timed trials' device wait:
 * the candidate's median over the reference's, beyond both bounds; the
 * planted cheat (cuda_relu/sidestream-late) leaves a tenth of its work on
 * its own stream after each timed trial's stop event.
 */
Test(measure, side_stream_timed_wait_over_the_reference)
{
	struct atb_protocol p;
	char why[512];
	json_t *late, *honest, *small, *base, *old;

	atb_alloc_install_json();
	memset(&p, 0, sizeof(p));
	p.gates.has_side_stream = 1;
	p.gates.side_stream_rel_tolerance = 0.01;
	p.gates.side_stream_abs_slack_us = 2;
	late = json_loads("{\"event\":\"side_stream\",\"phase\":\"timed\",\"seed\":5,"
			  "\"arm\":\"candidate\",\"reference\":\"baseline\",\"trials\":40,"
			  "\"event_ns\":28000,\"device_extra_ns\":7500,"
			  "\"reference_extra_ns\":2500}", 0, NULL);
	/* the same wait as the reference's, a little over: noise */
	honest = json_loads("{\"event\":\"side_stream\",\"phase\":\"timed\",\"seed\":5,"
			    "\"arm\":\"candidate\",\"event_ns\":28000,"
			    "\"device_extra_ns\":2900,\"reference_extra_ns\":2500}", 0, NULL);
	/* over the absolute slack but not 1% of a long trial */
	small = json_loads("{\"event\":\"side_stream\",\"phase\":\"timed\",\"seed\":5,"
			   "\"arm\":\"candidate\",\"event_ns\":9000000,"
			   "\"device_extra_ns\":60000,\"reference_extra_ns\":2500}", 0, NULL);
	base = json_loads("{\"event\":\"side_stream\",\"phase\":\"timed\",\"seed\":5,"
			  "\"arm\":\"naive\",\"event_ns\":28000,"
			  "\"device_extra_ns\":900000,\"reference_extra_ns\":2500}", 0, NULL);
	cr_assert_eq(atbi_gate_side_stream(late, &p, why, sizeof(why)), 1);
	cr_assert(strstr(why, "seed 5") && strstr(why, "7500") && strstr(why, "2500"), "%s", why);
	cr_assert_eq(atbi_gate_side_stream(honest, &p, why, sizeof(why)), 0);
	cr_assert_eq(atbi_gate_side_stream(small, &p, why, sizeof(why)), 0);
	cr_assert_eq(atbi_gate_side_stream(base, &p, why, sizeof(why)), 0);
	/* versions 1 to 6: recorded, not judged */
	p.gates.has_side_stream = 0;
	cr_assert_eq(atbi_gate_side_stream(late, &p, why, sizeof(why)), 0);
	cr_assert_eq(atbi_gate_side_stream(late, NULL, why, sizeof(why)), 0);
	/* a timed event is judged by its numbers, never by an "escaped" it carries */
	old = json_deep_copy(honest);
	json_object_set_new(old, "escaped", json_true());
	p.gates.has_side_stream = 1;
	cr_assert_eq(atbi_gate_side_stream(old, &p, why, sizeof(why)), 0);
	json_decref(late);
	json_decref(honest);
	json_decref(small);
	json_decref(base);
	json_decref(old);
}

/* PROTO: gates tamper */
Test(measure, tamper_event_names_where_and_what)
{
	char why[512];
	json_t *one, *many, *none, *other;

	atb_alloc_install_json();
	one = json_loads("{\"event\":\"tamper\",\"where\":\"timing seed 1\",\"changes\":"
			 "[{\"where\":\"a timed trial of seed 1\",\"what\":\"torch.relu "
			 "replaced\"}]}", 0, NULL);
	many = json_loads("{\"event\":\"tamper\",\"changes\":[{\"where\":\"w\",\"what\":\"a\"},"
			  "{\"what\":\"b\"},{\"what\":\"c\"},{\"what\":\"d\"},{\"what\":\"e\"},"
			  "{\"what\":\"f\"},{\"what\":\"g\"}]}", 0, NULL);
	none = json_loads("{\"event\":\"tamper\",\"changes\":[]}", 0, NULL);
	other = json_loads("{\"event\":\"side_stream\",\"changes\":[{\"what\":\"x\"}]}", 0, NULL);
	cr_assert_eq(atbi_gate_tamper(one, why, sizeof(why)), 1);
	cr_assert(strstr(why, "a timed trial of seed 1") && strstr(why, "torch.relu replaced"),
		  "%s", why);
	cr_assert_eq(atbi_gate_tamper(many, why, sizeof(why)), 1);
	cr_assert(strstr(why, "a; b; c; d; and 3 more"), "%s", why);
	cr_assert_eq(atbi_gate_tamper(none, why, sizeof(why)), 0);
	cr_assert_eq(atbi_gate_tamper(other, why, sizeof(why)), 0);
	json_decref(one);
	json_decref(many);
	json_decref(none);
	json_decref(other);
}

Test(measure, throttle_share_over_the_constant_is_noise)
{
	double share;

	cr_assert_eq(atbi_gate_throttle(0, 0, ATBI_THROTTLE_MAX_SHARE, &share), 0);
	cr_assert_float_eq(share, 0.0, 0);
	cr_assert_eq(atbi_gate_throttle(10, 100, ATBI_THROTTLE_MAX_SHARE, &share), 0);
	cr_assert_eq(atbi_gate_throttle(11, 100, ATBI_THROTTLE_MAX_SHARE, &share), 1);
	cr_assert_float_eq(share, 0.11, 1e-12);
}

/* ---- gates.clocks ---- */

static void clocks_add(struct atbi_clocks_state *s, int arm, unsigned mhz, int n)
{
	json_t *ev = json_pack("{s:s, s:[]}", "event", "samples", "sm_mhz");
	int i;

	for (i = 0; i < n; i++)
		json_array_append_new(json_object_get(ev, "sm_mhz"), json_integer(mhz));
	cr_assert_eq(atbi_clocks_add(s, ev, arm), 0);
	json_decref(ev);
}

Test(measure, clocks_a_power_cap_on_both_arms_is_not_noise)
{
	struct atbi_clocks_state s = {0};
	struct atbi_clocks_facts f;
	json_t *gs = json_pack("{s:s, s:{s:i}, s:{s:i}}", "event", "gpu_state", "before",
			       "sm_clock_max_mhz", 1980, "after", "sm_clock_max_mhz", 1980);

	/* no readings (no NVML): nothing to judge */
	cr_assert_eq(atbi_gate_clocks(&s, 0.75, 0.10, 0.02, &f), -1);
	atbi_clocks_gpu_state(&s, gs);
	/* both arms capped alike at 1600 MHz, above 75% of 1980 (1485) */
	clocks_add(&s, 0, 1600, 100);
	clocks_add(&s, 1, 1605, 100);
	cr_assert_eq(atbi_gate_clocks(&s, 0.75, 0.10, 0.02, &f), 0);
	cr_assert_eq(f.max_mhz, 1980);
	cr_assert_eq(f.floor_mhz, 1485);
	cr_assert_eq(f.total, 200);
	cr_assert_eq(f.below, 0);
	cr_assert_float_eq(f.mean_base_mhz, 1600.0, 1e-9);
	/* failed reads (0) are not counted */
	clocks_add(&s, 1, 0, 50);
	cr_assert_eq(atbi_gate_clocks(&s, 0.75, 0.10, 0.02, &f), 0);
	cr_assert_eq(f.total, 200);
	atbi_clocks_release(&s);
	json_decref(gs);
}

Test(measure, clocks_below_the_floor_too_often_or_arms_apart_are_noise)
{
	struct atbi_clocks_state s = {0};
	struct atbi_clocks_facts f;

	s.max_mhz = 1980;
	clocks_add(&s, 0, 1980, 90);
	clocks_add(&s, 1, 1980, 90);
	clocks_add(&s, 0, 1000, 10);   /* 10 of 200 below 1485: 5% */
	clocks_add(&s, 1, 1000, 10);
	cr_assert_eq(atbi_gate_clocks(&s, 0.75, 0.10, 0.10, &f), 0);
	cr_assert_float_eq(f.share_below, 0.10, 1e-12);
	clocks_add(&s, -1, 900, 10);   /* another arm's (job 2) readings count for the floor */
	cr_assert_eq(atbi_gate_clocks(&s, 0.75, 0.10, 0.10, &f), 1);
	cr_assert_eq(f.below, 30);
	atbi_clocks_release(&s);

	/* the baseline held at a lower clock than the candidate: the comparison is unfair */
	s.max_mhz = 1980;
	clocks_add(&s, 0, 1700, 100);
	clocks_add(&s, 1, 1980, 100);
	cr_assert_eq(atbi_gate_clocks(&s, 0.75, 0.10, 0.02, &f), 2);
	cr_assert_gt(f.rel_difference, 0.13);
	/* without NVML's maximum the highest clock seen stands for it */
	s.max_mhz = 0;
	cr_assert_eq(atbi_gate_clocks(&s, 0.75, 0.10, 0.02, &f), 2);
	cr_assert_eq(f.max_mhz, 1980);
	atbi_clocks_release(&s);
}

static json_t *cand_event(int pass, const char *reuse_step, const char *overlap)
{
	char text[1024];

	snprintf(text, sizeof(text),
		 "{\"event\":\"correctness\",\"arm\":\"candidate\",\"seed\":1,\"set\":\"s\","
		 "\"input\":\"task\",\"pass\":%s,\"first_bad\":%s,\"gates\":{\"input_mutation\":"
		 "{\"mutated\":[]},\"result_reuse\":{\"checked\":%s,\"follows_inputs\":%s,"
		 "\"failed_step\":%s%s%s},\"output_aliasing\":{\"checked\":true,\"overlaps\":[%s]}}}",
		 pass ? "true" : "false",
		 pass ? "null" : "{\"buffer\":\"Y\",\"index\":0,\"ref\":1.0,\"got\":null}",
		 pass ? "true" : "false", reuse_step ? "false" : "true", reuse_step ? "\"" : "",
		 reuse_step ? reuse_step : "null", reuse_step ? "\"" : "", overlap ? overlap : "");
	return json_loads(text, 0, NULL);
}

/* A stale result read from a recycled allocation: right, then the poison. */
Test(measure, reuse_before_any_wrong_output_is_result_reuse)
{
	struct atbi_correctness_state st;
	const char *reason;
	const json_t *ev;
	json_t *first = NULL, *later = NULL;

	atb_alloc_install_json();
	memset(&st, 0, sizeof(st));
	first = cand_event(1, "fresh_inputs_a", NULL);
	later = cand_event(0, NULL, NULL);
	cr_assert_not_null(first);
	atbi_gate_correctness_event(&st, first);
	atbi_gate_correctness_event(&st, later);
	cr_assert_str_eq(atbi_gate_correctness_verdict(&st, &reason, &ev), "result_reuse");
	atbi_correctness_release(&st);
	/* wrong first, a reuse fact later: a wrong kernel */
	memset(&st, 0, sizeof(st));
	atbi_gate_correctness_event(&st, later);
	atbi_gate_correctness_event(&st, first);
	cr_assert_str_eq(atbi_gate_correctness_verdict(&st, &reason, &ev), "correctness");
	atbi_correctness_release(&st);
	json_decref(first);
	json_decref(later);
}

Test(measure, output_aliasing_is_its_own_gate)
{
	struct atbi_correctness_state st;
	const char *reason;
	const json_t *ev;
	json_t *a;

	atb_alloc_install_json();
	memset(&st, 0, sizeof(st));
	a = cand_event(1, NULL, "[\"Y\",\"X\"]");
	cr_assert_not_null(a);
	atbi_gate_correctness_event(&st, a);
	cr_assert_str_eq(atbi_gate_correctness_verdict(&st, &reason, &ev), "output_aliasing");
	cr_assert(strstr(reason, "'Y' overlaps buffer 'X'"), "%s", reason);
	atbi_correctness_release(&st);
	json_decref(a);
}

/* ---- gate clock (PROTO: gates.clock) ---- */

Test(measure, clock_spans_within_tolerance_pass_and_outside_refuse)
{
	char why[512];
	const int64_t ms = 1000000;

	/* 5% of the larger plus 25 ms: 200 vs 230 is 30 <= 10 + 25 */
	cr_expect_eq(atbi_gate_clock(200 * ms, 230 * ms, 50 * ms, 0.05, 25 * ms, why,
				     sizeof(why)), 0);
	cr_expect_eq(atbi_gate_clock(230 * ms, 200 * ms, 50 * ms, 0.05, 25 * ms, why,
				     sizeof(why)), 0);
	/* a clock that lost 60 ms of 300 */
	cr_expect_eq(atbi_gate_clock(240 * ms, 300 * ms, 50 * ms, 0.05, 25 * ms, why,
				     sizeof(why)), 1);
	cr_expect(strstr(why, "240.000 ms by the runner's clock and 300.000 ms by the harness's"),
		  "%s", why);
	/* trials cannot add up to more than the span that holds them */
	cr_expect_eq(atbi_gate_clock(100 * ms, 100 * ms, 101 * ms, 0.05, 25 * ms, why,
				     sizeof(why)), 1);
	cr_expect(strstr(why, "more than its whole span"), "%s", why);
	cr_expect_eq(atbi_gate_clock(-1, 100 * ms, 0, 0.05, 25 * ms, why, sizeof(why)), 1);
}

static json_t *ev_of(const char *text)
{
	json_t *v = json_loads(text, 0, NULL);

	cr_assert(v, "%s", text);
	return v;
}

Test(measure, clock_state_pairs_markers_with_samples_and_sums_groups)
{
	struct atbi_clock_state s;
	const int64_t ms = 1000000, slack = 25 * ms;
	json_t *mark = ev_of("{\"event\":\"timed_begin\",\"seed\":1,\"arms\":2}");
	json_t *a = ev_of("{\"event\":\"samples\",\"seed\":1,\"arm\":\"baseline\","
			  "\"times_ns\":[1000000,1000000],\"span_ns\":130000000}");
	json_t *b = ev_of("{\"event\":\"samples\",\"seed\":1,\"arm\":\"candidate\","
			  "\"times_ns\":[500000,500000],\"span_ns\":130000000}");
	json_t *lone = ev_of("{\"event\":\"samples\",\"seed\":2,\"arm\":\"baseline\","
			     "\"times_ns\":[1],\"span_ns\":5}");
	int k;

	/* each group 20 ms short of the harness's 150: inside one group's
	   slack, but four of them sum to 80 ms against 30 + 25 */
	memset(&s, 0, sizeof(s));
	for (k = 0; k < 4; k++) {
		atbi_clock_mark(&s, mark, 1000 * ms * k, 0.05, slack);
		atbi_clock_samples(&s, a, 1000 * ms * k + 150 * ms, 0.05, slack);
		atbi_clock_samples(&s, b, 1000 * ms * k + 151 * ms, 0.05, slack);
		if (k == 0)
			cr_expect_eq(atbi_clock_finish(&s, 0.05, slack), 0);
	}
	cr_expect_eq(atbi_clock_finish(&s, 0.05, slack), 1);
	cr_expect_eq(s.ngroups, 4);
	cr_expect_eq(s.total_runner_ns, 520 * ms);
	cr_expect_eq(s.total_harness_ns, 600 * ms);
	cr_expect(strstr(s.why, "over 4 groups"), "%s", s.why);

	/* the group's arms sum their trials; samples without a marker refuse */
	memset(&s, 0, sizeof(s));
	atbi_clock_mark(&s, mark, 0, 0.05, slack);
	atbi_clock_samples(&s, a, 130 * ms, 0.05, slack);
	atbi_clock_samples(&s, b, 130 * ms, 0.05, slack);
	cr_expect_eq(s.cur.trials_ns, 3 * ms);
	cr_expect_eq(atbi_clock_finish(&s, 0.05, slack), 0);
	atbi_clock_samples(&s, lone, 200 * ms, 0.05, slack);
	cr_expect_eq(atbi_clock_finish(&s, 0.05, slack), 1);
	cr_expect(strstr(s.why, "without a timed_begin marker"), "%s", s.why);
	json_decref(mark);
	json_decref(a);
	json_decref(b);
	json_decref(lone);
}

/*
 * PROTO: timing.preemption -- the waits a runner takes out of its trials
 * are bounded by the time the harness saw its timing thread off the CPU:
 * a forged schedstat reading (claims where the thread computed) refuses.
 */
Test(measure, clock_bounds_the_waits_taken_out_by_what_the_harness_saw)
{
	struct atbi_clock_state s;
	const int64_t ms = 1000000, slack = 50 * ms;
	char why[512];
	json_t *mark = ev_of("{\"event\":\"timed_begin\",\"seed\":1,\"arms\":2}");
	/* honest: 60 ms taken out of the trials, the thread 80 ms off the CPU */
	json_t *a = ev_of("{\"event\":\"samples\",\"seed\":1,\"arm\":\"baseline\","
			  "\"times_ns\":[1000000],\"span_ns\":150000000,\"preempted_ns\":30000000,"
			  "\"harness_background\":{\"wall_ns\":150000000,"
			  "\"timing_thread_cpu_ns\":70000000,\"runner_gone\":false}}");
	json_t *b = ev_of("{\"event\":\"samples\",\"seed\":1,\"arm\":\"candidate\","
			  "\"times_ns\":[1000000],\"span_ns\":150000000,\"preempted_ns\":30000000}");
	/* forged: 200 ms claimed, the thread on the CPU all but 5 ms */
	json_t *c = ev_of("{\"event\":\"samples\",\"seed\":1,\"arm\":\"baseline\","
			  "\"times_ns\":[1000000],\"span_ns\":300000000,"
			  "\"harness_background\":{\"wall_ns\":300000000,"
			  "\"timing_thread_cpu_ns\":295000000,\"runner_gone\":false}}");
	json_t *d = ev_of("{\"event\":\"samples\",\"seed\":1,\"arm\":\"candidate\","
			  "\"times_ns\":[1000000],\"span_ns\":300000000,\"preempted_ns\":200000000}");

	cr_expect_eq(atbi_gate_preemption(0, -1, slack, why, sizeof(why)), 0);
	cr_expect_eq(atbi_gate_preemption(100 * ms, 60 * ms, slack, why, sizeof(why)), 0);
	cr_expect_eq(atbi_gate_preemption(120 * ms, 60 * ms, slack, why, sizeof(why)), 1);
	cr_expect(strstr(why, "off the CPU for only 60.000 ms"), "%s", why);
	cr_expect_eq(atbi_gate_preemption(1, -1, slack, why, sizeof(why)), 1);
	cr_expect(strstr(why, "could not check"), "%s", why);

	memset(&s, 0, sizeof(s));
	atbi_clock_mark(&s, mark, 0, 0.05, slack);
	atbi_clock_samples(&s, a, 150 * ms, 0.05, slack);
	atbi_clock_samples(&s, b, 150 * ms, 0.05, slack);
	cr_expect_eq(s.cur.preempted_ns, 60 * ms);
	cr_expect_eq(s.cur.offcpu_ns, 80 * ms);
	cr_expect_eq(atbi_clock_finish(&s, 0.05, slack), 0);

	memset(&s, 0, sizeof(s));
	atbi_clock_mark(&s, mark, 0, 0.05, slack);
	atbi_clock_samples(&s, c, 300 * ms, 0.05, slack);
	atbi_clock_samples(&s, d, 300 * ms, 0.05, slack);
	cr_expect_eq(atbi_clock_finish(&s, 0.05, slack), 1);
	cr_expect(strstr(s.why, "took 200.000 ms out of its trials"), "%s", s.why);
	json_decref(mark);
	json_decref(a);
	json_decref(b);
	json_decref(c);
	json_decref(d);
}

/* PROTO: gates.background -- the judgement on one group's facts */
Test(measure, background_refuses_cpu_beside_the_group_and_names_it)
{
	struct atb_protocol p;
	struct atbi_background_limits l;
	char why[1024];
	json_t *ok = json_pack("{s:s, s:I, s:s, s:I, s:I, s:I, s:i, s:i, s:i, s:i}", "event",
			       "background", "seed", (json_int_t)7, "group", "paired", "wall_ns",
			       (json_int_t)1000000000, "other_threads_cpu_ns", (json_int_t)15000000,
			       "other_processes_cpu_ns", (json_int_t)24000000, "threads_at_start", 1,
			       "threads_group_start", 1, "threads_group_end", 1,
			       "processes_group_end", 8);
	json_t *bad = json_deep_copy(ok);

	memset(&p, 0, sizeof(p));
	atbi_background_limits(&p, &l);  /* no gates.background: the defaults */
	cr_assert_float_eq(l.max_cpu_share, 0.02, 1e-15);
	cr_assert_eq(l.slack_ns, 20000000);
	/* 39 ms in 1 s: under 2% + 20 ms; 8 idle processes are not refused */
	cr_assert_not(atbi_gate_background(ok, &l, why, sizeof(why)));
	json_object_set_new(bad, "other_processes_cpu_ns", json_integer(26000000));
	cr_assert(atbi_gate_background(bad, &l, why, sizeof(why)));
	cr_assert(strstr(why, "seed 7 (group paired)"), "%s", why);
	cr_assert(strstr(why, "other threads used 15.0 ms and other processes 26.0 ms of CPU "
			      "in 1000.0 ms"), "%s", why);
	cr_assert(strstr(why, "8 processes beside the runner"), "%s", why);
	/* the protocol's values when it has them; other events never refuse */
	p.gates.has_background = 1;
	p.gates.background_max_cpu_share = 0.5;
	p.gates.background_abs_slack_ms = 0;
	atbi_background_limits(&p, &l);
	cr_assert_not(atbi_gate_background(bad, &l, why, sizeof(why)));
	json_object_set_new(bad, "event", json_string("samples"));
	p.gates.background_max_cpu_share = 0;
	atbi_background_limits(&p, &l);
	cr_assert_not(atbi_gate_background(bad, &l, why, sizeof(why)));
	json_decref(ok);
	json_decref(bad);
}

/*
 * PROTO: gates.background (torch) -- a torch event judges the threads
 * PyTorch's pools did not have before any candidate code, not all others
 */
Test(measure, background_on_torch_reads_the_untrusted_threads)
{
	struct atb_protocol p;
	struct atbi_background_limits l;
	char why[1024];
	/* the intra-op pool worked 700 ms beside 6 s of calls: its own */
	json_t *ev = json_pack("{s:s, s:I, s:s, s:I, s:I, s:I, s:I, s:i}", "event", "background",
			       "seed", (json_int_t)1, "group", "paired", "wall_ns",
			       (json_int_t)6000000000, "other_threads_cpu_ns",
			       (json_int_t)700000000, "untrusted_threads_cpu_ns", (json_int_t)0,
			       "other_processes_cpu_ns", (json_int_t)0, "trusted_threads", 3);

	memset(&p, 0, sizeof(p));
	atbi_background_limits(&p, &l);
	cr_assert_not(atbi_gate_background(ev, &l, why, sizeof(why)));
	/* a burner of the candidate's: 150 ms in 6 s, over 2% + 20 ms */
	json_object_set_new(ev, "untrusted_threads_cpu_ns", json_integer(150000000));
	cr_assert(atbi_gate_background(ev, &l, why, sizeof(why)));
	cr_assert(strstr(why, "other threads (not PyTorch's pools) used 150.0 ms"), "%s", why);
	/* without the field (the cpu backend), all other threads count */
	json_object_del(ev, "untrusted_threads_cpu_ns");
	cr_assert(atbi_gate_background(ev, &l, why, sizeof(why)));
	cr_assert(strstr(why, "other threads used 700.0 ms"), "%s", why);
	json_decref(ev);
}

/* PROTO: gates.hang -- the watchdog's values: the protocol's, else the defaults */
Test(measure, hang_watch_takes_the_protocol_or_the_defaults)
{
	struct atb_protocol p;
	struct atb_runner_watch w;

	memset(&p, 0, sizeof(p));
	atbi_hang_watch(&p, &w);
	cr_assert_float_eq(w.startup_s, 120, 1e-12);
	cr_assert_float_eq(w.min_s, 20, 1e-12);
	cr_assert_float_eq(w.factor, 10, 1e-12);
	cr_assert_eq(w.progress_ms, 250);
	p.gates.has_hang = 1;
	p.gates.hang_startup_s = 5;
	p.gates.hang_min_s = 2;
	p.gates.hang_factor = 3;
	p.gates.hang_progress_ms = 50;
	atbi_hang_watch(&p, &w);
	cr_assert_float_eq(w.startup_s, 5, 1e-12);
	cr_assert_float_eq(w.min_s, 2, 1e-12);
	cr_assert_float_eq(w.factor, 3, 1e-12);
	cr_assert_eq(w.progress_ms, 50);
}
