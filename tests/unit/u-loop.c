/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The tuning loop with a fake measurement: the same seed gives the same
 * proposals; every outcome is counted by its reason and only admitted
 * results are usable (PROTO: loop.usable_iteration); keep-best by the CI
 * lower bound; a stop leaves no row for the iteration in progress and
 * resume continues with the same proposals; the schema refuses iterations
 * out of order or "usable" without an admitted result; bad plans.  The real
 * process killed with SIGKILL is tests/cli/t1610-loop-resume.sh.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "atb/atb.h"
#include "atb/box.h"
#include "atb/loop.h"
#include "atb/store.h"
#include "util.h"
#include "banned.h"

static char dir[256], dbpath[300], runs[300];
static struct atb_store *S;

static void setup(void)
{
	struct atb_error err;

	snprintf(dir, sizeof(dir), "%s/atb-uloop.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	cr_assert_not_null(mkdtemp(dir));
	snprintf(dbpath, sizeof(dbpath), "%s/atb.db", dir);
	snprintf(runs, sizeof(runs), "%s/runs", dir);
	atb_error_clear(&err);
	cr_assert_eq(atb_store_open(dbpath, ATB_STORE_CREATE, &S, &err), ATB_OK, "%s", err.msg);
}

static void teardown(void)
{
	char cmd[400];

	atb_store_close(S);
	S = NULL;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		cr_log_warn("cannot remove %s", dir);
}

TestSuite(loop, .init = setup, .fini = teardown);

/* ---- the fake measurement ---- */

struct plan {
	enum atb_measure_verdict verdict;
	const char *gate;
	enum atb_status status;
	double speedup, ci_low, ci_high;
};

static const struct plan *fake_plan;
static size_t fake_nplan, fake_calls;
static struct atb_knob_assignment fake_seen[64];
static volatile sig_atomic_t fake_stop;
static long fake_stop_at = -1;   /* set *stop during this call */

static void ingest(struct atb_store *s, const struct atb_protocol *p, const struct plan *pl,
		   struct atb_measure_outcome *out)
{
	static struct atb_sample samples[64 * 6];
	static struct atb_seed_result seeds[64];
	struct atb_ingest in;
	struct atb_ingest_outcome io;
	struct atb_box *box = NULL;
	struct atb_error err;
	char fp[65];
	int i, t, n = 0, nseeds = p->stats.min_paired_seeds;
	double r = pl->speedup;

	atb_error_clear(&err);
	cr_assert_eq(atb_box_probe_with_compiler(&box, p->build.cpu_compiler, &err), ATB_OK);
	cr_assert_eq(atb_box_fingerprint(box, fp, &err), ATB_OK);
	atb_box_free(box);
	for (i = 0; i < nseeds; i++) {
		for (t = 0; t < 3; t++) {
			samples[n++] = (struct atb_sample){100 + i, t, ATB_ARM_BASELINE, 1500.0 + t};
			samples[n++] = (struct atb_sample){100 + i, t, ATB_ARM_CANDIDATE,
							   (1500.0 + t) / r};
		}
		seeds[i] = (struct atb_seed_result){100 + i, 1501.0, 1501.0 / r, r};
	}
	memset(&in, 0, sizeof(in));
	in.kind = "kernel";
	in.task = "relu";
	in.candidate = "fake";
	in.protocol_digest = p->digest;
	in.box_fingerprint = fp;
	in.unit = "ns";
	in.metric = "time_ns/median";
	in.samples = samples;
	in.nsamples = (size_t)n;
	in.seeds = seeds;
	in.nseeds = (size_t)nseeds;
	in.speedup = r;
	in.ci_low = pl->ci_low;
	in.ci_high = pl->ci_high;
	in.cv = 0.0;  /* all seeds alike: the cv that follows from them */
	cr_assert_eq(atb_store_ingest(s, &in, &io, &err), ATB_OK, "%s", err.msg);
	snprintf(out->job_uuid, sizeof(out->job_uuid), "%s", io.job_uuid);
	out->result_id = io.result_id;
	out->verdict = io.quarantined ? ATB_MEASURE_QUARANTINED : ATB_MEASURE_ADMITTED;
}

static enum atb_status fake_measure(struct atb_store *s, const struct atb_protocol *p,
				    const struct atb_task *task, const char *candidate_dir,
				    const struct atb_knob_assignment *knobs,
				    const struct atb_measure_opts *opts,
				    struct atb_measure_outcome *out, struct atb_error *err)
{
	const struct plan *pl = &fake_plan[fake_calls % fake_nplan];
	struct stat sb;
	char f[512];

	cr_assert_lt(fake_calls, 64);
	fake_seen[fake_calls] = *knobs;
	/* The candidate folder holds the surface; the work folder exists. */
	snprintf(f, sizeof(f), "%s/%s", candidate_dir, task->surface[0]);
	cr_assert_eq(stat(f, &sb), 0, "no %s", f);
	cr_assert_eq(stat(opts->work_dir, &sb), 0);
	if (opts->progress)
		opts->progress(opts->progress_ctx, "build");
	if ((long)fake_calls == fake_stop_at)
		fake_stop = 1;
	fake_calls++;
	memset(out, 0, sizeof(*out));
	if (pl->verdict == ATB_MEASURE_REJECTED) {
		char rule[64];

		out->verdict = ATB_MEASURE_REJECTED;
		snprintf(out->gate, sizeof(out->gate), "%s", pl->gate);
		out->status = pl->status;
		snprintf(out->reason, sizeof(out->reason), "fake %s", pl->gate[0] ? pl->gate : "store");
		snprintf(rule, sizeof(rule), "gate:%s", pl->gate[0] ? pl->gate : "store");
		cr_assert_eq(atb_store_reject(s, NULL, p->digest, rule, pl->status, out->reason, NULL,
					      &out->rejection_id, err), ATB_OK);
		return ATB_OK;
	}
	ingest(s, p, pl, out);
	out->speedup = pl->speedup;
	out->ci_low = pl->ci_low;
	out->ci_high = pl->ci_high;
	out->naive_speedup = pl->speedup * 5;
	out->naive_ci_low = pl->ci_low * 5;
	out->naive_ci_high = pl->ci_high * 5;
	return ATB_OK;
}

static void fake_reset(const struct plan *p, size_t n)
{
	fake_plan = p;
	fake_nplan = n;
	fake_calls = 0;
	fake_stop = 0;
	fake_stop_at = -1;
	memset(fake_seen, 0, sizeof(fake_seen));
}

static struct atb_loop_opts opts(int64_t iterations, int64_t seed)
{
	struct atb_loop_opts o;

	memset(&o, 0, sizeof(o));
	o.runs_dir = runs;
	o.iterations = iterations;
	o.seed = seed;
	o.naive = -1;
	o.measure = fake_measure;
	o.stop = &fake_stop;
	return o;
}

static int same_knobs(const struct atb_knob_assignment *a, const struct atb_knob_assignment *b)
{
	size_t i;

	if (a->n != b->n || strcmp(a->cflags, b->cflags))
		return 0;
	for (i = 0; i < a->n; i++)
		if (strcmp(a->knobs[i].name, b->knobs[i].name) ||
		    strcmp(a->knobs[i].value, b->knobs[i].value))
			return 0;
	return 1;
}

static struct atb_task *open_task(const char *name)
{
	struct atb_task *t = NULL;
	struct atb_error err;

	atb_error_clear(&err);
	cr_assert_eq(atb_task_open(atb_home(), name, &t, &err), ATB_OK, "%s", err.msg);
	return t;
}

/* ---- proposals ---- */

Test(loop, same_seed_same_proposals)
{
	struct atb_knob_assignment a[24], b[24], c[24], def;
	struct atb_task *t = open_task("sgemm");
	struct atb_error err;
	int differs = 0, varied = 0;
	size_t k;

	atb_error_clear(&err);
	cr_assert_eq(atb_loop_proposals(t, "random", 7, 24, a, &err), ATB_OK);
	cr_assert_eq(atb_loop_proposals(t, NULL, 7, 24, b, &err), ATB_OK);
	cr_assert_eq(atb_loop_proposals(t, "random", 8, 24, c, &err), ATB_OK);
	atb_task_default_knobs(t, &def);
	cr_assert(same_knobs(&a[0], &def), "iteration 0 is the default knobs");
	for (k = 0; k < 24; k++) {
		cr_assert(same_knobs(&a[k], &b[k]), "proposal %zu differs for the same seed", k);
		differs |= !same_knobs(&a[k], &c[k]);
		varied |= k > 0 && !same_knobs(&a[k], &a[1]);
	}
	cr_assert(differs, "seeds 7 and 8 gave the same 24 proposals");
	cr_assert(varied, "the proposer drew one point 23 times");
	cr_assert_eq(atb_loop_proposals(t, "llm", 7, 1, a, &err), ATB_ERR_USAGE);
	cr_assert_str_eq(err.msg, "unknown proposer 'llm'; the proposers are: random");
	atb_task_free(t);
}

/* ---- accounting ---- */

Test(loop, every_outcome_is_counted_and_only_admitted_is_usable)
{
	static const struct plan plan[] = {
		{ATB_MEASURE_ADMITTED, "", ATB_OK, 1.5, 1.2, 1.8},
		{ATB_MEASURE_REJECTED, "build", ATB_ERR_BUILD, 0, 0, 0},
		{ATB_MEASURE_REJECTED, "runner", ATB_ERR_SYSTEM, 0, 0, 0},
		{ATB_MEASURE_REJECTED, "correctness", ATB_ERR_CHECK, 0, 0, 0},
		{ATB_MEASURE_REJECTED, "input_mutation", ATB_ERR_CHECK, 0, 0, 0},
		{ATB_MEASURE_REJECTED, "result_reuse", ATB_ERR_CHECK, 0, 0, 0},
		{ATB_MEASURE_REJECTED, "physical_floor", ATB_ERR_CHECK, 0, 0, 0},
		{ATB_MEASURE_REJECTED, "baseline_drift", ATB_ERR_CHECK, 0, 0, 0},
		{ATB_MEASURE_REJECTED, "noise", ATB_ERR_CHECK, 0, 0, 0},
		{ATB_MEASURE_QUARANTINED, "", ATB_OK, 61000.0, 60000.0, 62000.0},
		{ATB_MEASURE_REJECTED, "surface", ATB_ERR_CHECK, 0, 0, 0},
		{ATB_MEASURE_REJECTED, "", ATB_REJECTED_CV_OVER_CAP, 0, 0, 0},
		{ATB_MEASURE_ADMITTED, "", ATB_OK, 1.4, 1.35, 1.45},
	};
	static const char *const want[] = {
		"usable", "build", "runner", "correctness", "input_mutation", "result_reuse",
		"physical_floor", "baseline_drift", "noise", "quarantined", "surface",
		"rejected:cv_over_cap", "usable",
	};
	struct atb_loop_opts o = opts(13, 42);
	struct atb_loop_summary sum;
	struct atb_iteration_row *rows = NULL;
	struct atb_run_row run;
	struct atb_error err;
	size_t n = 0, i;

	fake_reset(plan, 13);
	atb_error_clear(&err);
	cr_assert_eq(atb_loop_start(S, "relu", &o, &sum, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(sum.done, 13);
	cr_assert_eq(sum.usable, 2);
	cr_assert_eq(sum.interrupted, 0);
	/* Keep-best by the CI lower bound: 1.4 [1.35, 1.45] beats 1.5 [1.2, 1.8]. */
	cr_assert(sum.have_best);
	cr_assert_eq(sum.best_k, 12);
	cr_assert_float_eq(sum.best_speedup, 1.4, 1e-12);

	cr_assert_eq(atb_store_get_run(S, sum.run_id, &run, &err), ATB_OK, "%s", err.msg);
	cr_assert_str_eq(run.task, "relu");
	cr_assert_str_eq(run.proposer, "random");
	cr_assert_eq(run.seed, 42);
	cr_assert_eq(run.iterations, 13);
	cr_assert_eq(run.done, 13);
	cr_assert_eq(run.usable, 2);
	cr_assert_eq(run.naive, 1);
	cr_assert_eq(strlen(run.protocol_digest), 64);
	cr_assert_eq(strlen(run.box_fingerprint), 64);

	cr_assert_eq(atb_store_list_iterations(S, sum.run_id, &rows, &n, &err), ATB_OK);
	cr_assert_eq(n, 13);
	for (i = 0; i < n; i++) {
		cr_assert_eq(rows[i].k, (int64_t)i);
		cr_assert_str_eq(rows[i].outcome, want[i], "iteration %zu", i);
		cr_assert_eq(rows[i].usable, !strcmp(want[i], "usable"));
		if (plan[i].verdict == ATB_MEASURE_REJECTED) {
			cr_assert_gt(rows[i].rejection_id, 0);
			cr_assert_eq(rows[i].speedup, 0.0);
		} else {
			cr_assert_gt(rows[i].result_id, 0);
			cr_assert_float_eq(rows[i].speedup, plan[i].speedup, 1e-9);
			cr_assert_float_eq(rows[i].naive_speedup, plan[i].speedup * 5, 1e-9);
		}
		cr_assert_eq(rows[i].knobs_json[0], '{');
	}
	atb_store_iterations_free(rows, n);
}

Test(loop, classify_follows_the_protocol)
{
	struct atb_measure_outcome o;
	struct atb_protocol *p = NULL;
	struct atb_error err;
	char outcome[64];
	int usable = -1;

	atb_error_clear(&err);
	cr_assert_eq(atb_protocol_load_current(NULL, &p, &err), ATB_OK, "%s", err.msg);
	memset(&o, 0, sizeof(o));
	o.verdict = ATB_MEASURE_REJECTED;
	snprintf(o.gate, sizeof(o.gate), "noise");
	o.status = ATB_ERR_CHECK;
	cr_assert_eq(atb_loop_classify(p, &o, outcome, &usable, &err), ATB_OK);
	cr_assert_eq(usable, 0);
	cr_assert_str_eq(outcome, "noise");
	/* A protocol that asks only for built and correct counts it usable. */
	p->loop.nusable_iteration = 2;
	cr_assert_eq(atb_loop_classify(p, &o, outcome, &usable, &err), ATB_OK);
	cr_assert_eq(usable, 1);
	cr_assert_str_eq(outcome, "usable");
	snprintf(o.gate, sizeof(o.gate), "correctness");
	cr_assert_eq(atb_loop_classify(p, &o, outcome, &usable, &err), ATB_OK);
	cr_assert_eq(usable, 0);
	snprintf(p->loop.usable_iteration[1], sizeof(p->loop.usable_iteration[1]), "fast");
	cr_assert_eq(atb_loop_classify(p, &o, outcome, &usable, &err), ATB_ERR_PROTOCOL);
	cr_assert(strstr(err.msg, "step 'fast' is not one of built, correct, measured, admitted"),
		  "%s", err.msg);
	atb_protocol_free(p);
}

/* ---- stop and resume ---- */

Test(loop, stop_records_nothing_in_progress_and_resume_continues)
{
	static const struct plan plan[] = {
		{ATB_MEASURE_ADMITTED, "", ATB_OK, 1.3, 1.25, 1.35},
		{ATB_MEASURE_REJECTED, "build", ATB_ERR_BUILD, 0, 0, 0},
	};
	struct atb_knob_assignment want[6], seen[8];
	struct atb_loop_opts o = opts(6, 99);
	struct atb_loop_summary sum, sum2;
	struct atb_task *t = open_task("relu");
	struct atb_error err;
	char iterdir[600];
	size_t nseen, k;
	struct stat sb;

	fake_reset(plan, 2);
	fake_stop_at = 2;     /* Ctrl-C while iteration 2 is being measured */
	atb_error_clear(&err);
	cr_assert_eq(atb_loop_start(S, "relu", &o, &sum, &err), ATB_OK, "%s", err.msg);
	cr_assert(sum.interrupted);
	cr_assert_eq(sum.done, 2, "iteration 2 was interrupted and must leave no row");
	snprintf(iterdir, sizeof(iterdir), "%s/%s/iter-2/candidate", runs, sum.run_id);
	cr_assert_eq(stat(iterdir, &sb), 0, "the interrupted attempt's folder is there");
	memcpy(seen, fake_seen, 3 * sizeof(seen[0]));
	nseen = 3;

	fake_calls = 0;
	fake_stop = 0;
	fake_stop_at = -1;
	cr_assert_eq(atb_loop_resume(S, sum.run_id, &o, &sum2, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(sum2.interrupted, 0);
	cr_assert_eq(sum2.first_k, 2);
	cr_assert_eq(sum2.done, 6);
	cr_assert_eq(sum2.usable, 3);    /* 0, then 2 and 4 (the fake restarted its plan) */
	cr_assert_eq(fake_calls, 4);
	/* Iteration 2 redone with the same knobs, then 3..5. */
	memcpy(seen + 2, fake_seen, 4 * sizeof(seen[0]));
	nseen = 6;
	cr_assert_eq(atb_loop_proposals(t, "random", 99, 6, want, &err), ATB_OK);
	for (k = 0; k < nseen; k++)
		cr_assert(same_knobs(&seen[k], &want[k]), "proposal %zu differs after resume", k);

	/* A complete run resumes to nothing. */
	fake_calls = 0;
	cr_assert_eq(atb_loop_resume(S, sum.run_id, &o, &sum2, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(fake_calls, 0);
	cr_assert_eq(sum2.done, 6);
	atb_task_free(t);
}

Test(loop, resume_of_an_unknown_run_is_not_found)
{
	struct atb_loop_opts o = opts(1, 0);
	struct atb_loop_summary sum;
	struct atb_error err;
	char want[400];

	atb_error_clear(&err);
	cr_assert_eq(atb_loop_resume(S, "nope", &o, &sum, &err), ATB_ERR_NOT_FOUND);
	snprintf(want, sizeof(want), "no run 'nope' in store '%s'", dbpath);
	cr_assert_str_eq(err.msg, want);
}

/* ---- the schema's rules on iterations ---- */

Test(loop, iteration_out_of_order_or_usable_without_admitted_result_cannot_enter_db)
{
	static const struct plan plan[] = {{ATB_MEASURE_REJECTED, "build", ATB_ERR_BUILD, 0, 0, 0}};
	struct atb_loop_opts o = opts(3, 1);
	struct atb_loop_summary sum;
	struct atb_iteration_row it;
	struct atb_error err;

	fake_reset(plan, 1);
	fake_stop_at = 1;
	atb_error_clear(&err);
	cr_assert_eq(atb_loop_start(S, "relu", &o, &sum, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(sum.done, 1);

	memset(&it, 0, sizeof(it));
	snprintf(it.run, sizeof(it.run), "%s", sum.run_id);
	it.knobs_json = "{}";
	snprintf(it.outcome, sizeof(it.outcome), "build");
	it.k = 2;   /* skips 1 */
	cr_assert_eq(atb_store_add_iteration(S, &it, &err), ATB_REJECTED_MALFORMED);
	cr_assert(strstr(err.msg, "iterations are recorded in order"), "%s", err.msg);
	it.k = 0;   /* again */
	cr_assert_eq(atb_store_add_iteration(S, &it, &err), ATB_REJECTED_APPEND_ONLY);
	it.k = 3;   /* beyond the plan */
	cr_assert_eq(atb_store_add_iteration(S, &it, &err), ATB_REJECTED_MALFORMED);
	cr_assert(strstr(err.msg, "beyond its run's planned iterations"), "%s", err.msg);
	it.k = 1;
	snprintf(it.outcome, sizeof(it.outcome), "usable");
	it.usable = 1;
	cr_assert_eq(atb_store_add_iteration(S, &it, &err), ATB_REJECTED_MALFORMED);
	cr_assert(strstr(err.msg, "a usable iteration names an admitted result"), "%s", err.msg);
	it.usable = 0;
	cr_assert_eq(atb_store_add_iteration(S, &it, &err), ATB_REJECTED_MALFORMED);
	cr_assert(strstr(err.msg, "usable is 0 or 1, and 1 exactly when"), "%s", err.msg);
	snprintf(it.outcome, sizeof(it.outcome), "build");
	cr_assert_eq(atb_store_add_iteration(S, &it, &err), ATB_OK, "%s", err.msg);
}

/* ---- bad plans ---- */

Test(loop, bad_plans_are_refused_before_any_row)
{
	struct atb_loop_opts o = opts(0, 1);
	struct atb_loop_summary sum;
	struct atb_run_row *runs_ = NULL;
	struct atb_error err;
	size_t n = 9;

	fake_reset(NULL, 1);
	atb_error_clear(&err);
	cr_assert_eq(atb_loop_start(S, "relu", &o, &sum, &err), ATB_ERR_USAGE);
	cr_assert_str_eq(err.msg, "iterations must be 1 to 100000, not 0");
	o.iterations = 2;
	o.proposer = "grid";
	cr_assert_eq(atb_loop_start(S, "relu", &o, &sum, &err), ATB_ERR_USAGE);
	cr_assert_str_eq(err.msg, "unknown proposer 'grid'; the proposers are: random, llm, llm-code");
	o.proposer = "llm";   /* without a model */
	cr_assert_eq(atb_loop_start(S, "relu", &o, &sum, &err), ATB_ERR_USAGE);
	cr_assert_str_eq(err.msg, "proposer llm needs a model (atb/llm.h config)");
	o.proposer = "llm-code";
	cr_assert_eq(atb_loop_start(S, "relu", &o, &sum, &err), ATB_ERR_USAGE);
	cr_assert_str_eq(err.msg, "proposer llm-code needs a model (atb/llm.h config)");
	o.proposer = NULL;
	o.paired_seeds = 3;
	cr_assert_eq(atb_loop_start(S, "relu", &o, &sum, &err), ATB_ERR_USAGE);
	cr_assert_str_eq(err.msg, "3 paired seeds is below the protocol's stats.min_paired_seeds (8)");
	o.paired_seeds = 0;
	cr_assert_eq(atb_loop_start(S, "no-such-task", &o, &sum, &err), ATB_ERR_NOT_FOUND);
	{
		char want[600];

		snprintf(want, sizeof(want), "no task named 'no-such-task' in '%s/tasks' and no task "
			 "folder 'no-such-task' here (see 'atb task list')", atb_home());
		cr_assert_str_eq(err.msg, want);
	}
	cr_assert_eq(atb_store_list_runs(S, &runs_, &n, &err), ATB_OK);
	cr_assert_eq(n, 0);
	atb_free(runs_);
}
