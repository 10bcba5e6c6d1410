/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * bench-cuda-verdict: how long atb takes to reach a verdict on the GPU, for
 * a short (~20 us) and a long (~200 us) kernel.  The kernel is the cuda_relu
 * task's honest baseline (built with nvcc through the task module) at two
 * sizes: N = 8 Mi floats (64 MiB read and written, about 20 us at the H200's
 * 3.6 TB/s copy bandwidth) and N = 88 Mi (704 MiB, about 200 us).  One job
 * in a fresh atb-runner on the cuda backend times the baseline against a
 * candidate that is the same kernel, on up to --seeds-max paired seeds,
 * exactly as `atb measure`'s job 1 does (warm-up, interleaved pairs, L2
 * flush and spin, the protocol's per-seed stopping rule).
 *
 * After the job, the paired statistics are recomputed on the first k seeds,
 * k = 2, 3, ...: the verdict is reached at the first k >= the protocol's
 * stats.min_paired_seeds where the bootstrap CI of the geometric-mean ratio
 * has a relative half-width ((hi - lo) / 2 / ratio) within the protocol's
 * target (timing.stopping.target_rel_halfwidth, the one precision target the
 * protocol states).  Printed per size: the kernel's median, seeds and trials
 * (both arms) needed, wall seconds from the runner's start and from the
 * start of timing to the seed that reached it, the seconds per seed, and
 * the CV of per-seed medians of each arm over all seeds (the cross-run CV
 * the protocol caps).  Correctness runs on one small set only (N = 1000003),
 * so the wall is the timing's; `atb measure` adds correctness on the
 * bundled sets and the baseline-alone job (docs/gpu.md).
 *
 * --cpu runs the same on the CPU backend with the relu task (a check of
 * this program where there is no GPU; the sizes are then the caller's).
 *
 * It is a benchmark, not a test: nothing here judges the numbers.
 * Usage: bench-cuda-verdict [--cpu] [--seeds-max N] [--json FILE] [N_FLOATS...]
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "atb/atb.h"
#include "atb/protocol.h"
#include "atb/runner.h"
#include "atb/stats.h"
#include "atb/task.h"
#include "util.h"
#include "banned.h"

#define MAXS 64

struct arm {
	double *t[MAXS];
	size_t n[MAXS];
};

struct collect {
	struct arm arms[2];          /* 0 baseline, 1 candidate */
	uint64_t seeds[MAXS];
	int64_t seed_done_ns[MAXS];  /* when both arms' samples of the seed were in */
	size_t nseeds;
	int64_t t0_ns, timing_start_ns;
	int correctness_fails;
	char device[128];
	char timing[32];
};

static void die(const char *what, const struct atb_error *err)
{
	fprintf(stderr, "bench-cuda-verdict: %s: %s\n", what, err->msg);
	exit(1);
}

static enum atb_status on_event(const json_t *ev, void *vctx)
{
	struct collect *c = vctx;
	const char *kind = json_string_value(json_object_get(ev, "event"));
	const char *arm = json_string_value(json_object_get(ev, "arm"));
	int64_t now = atbi_monotonic_ns();

	if (!kind)
		return ATB_OK;
	if (!strcmp(kind, "env")) {
		const char *dev = json_string_value(json_object_get(json_object_get(ev, "device"),
								    "name"));

		snprintf(c->device, sizeof(c->device), "%s", dev ? dev : "cpu");
		c->timing_start_ns = now;
	} else if (!strcmp(kind, "correctness")) {
		c->timing_start_ns = now;
		c->correctness_fails += !json_is_true(json_object_get(ev, "pass"));
	} else if (!strcmp(kind, "samples") && arm) {
		int ai = !strcmp(arm, "candidate");
		uint64_t s = (uint64_t)json_integer_value(json_object_get(ev, "seed"));
		const json_t *t = json_object_get(ev, "times_ns");
		size_t i, k;

		for (i = 0; i < c->nseeds && c->seeds[i] != s; i++)
			;
		if (i == c->nseeds) {
			if (c->nseeds == MAXS)
				return ATB_OK;
			c->seeds[c->nseeds++] = s;
		}
		atb_free(c->arms[ai].t[i]);
		c->arms[ai].t[i] = atb_calloc(json_array_size(t) + 1, sizeof(double));
		if (!c->arms[ai].t[i])
			return ATB_ERR_NOMEM;
		c->arms[ai].n[i] = json_array_size(t);
		for (k = 0; k < c->arms[ai].n[i]; k++)
			c->arms[ai].t[i][k] = (double)json_integer_value(json_array_get(t, k));
		if (c->arms[0].n[i] && c->arms[1].n[i])
			c->seed_done_ns[i] = now;
	} else if (!strcmp(kind, "done")) {
		snprintf(c->timing, sizeof(c->timing), "%s",
			 json_string_value(json_object_get(ev, "timing")));
	}
	return ATB_OK;
}

/* Paired statistics over the first k seeds, as atb measure computes them. */
static int paired(const struct collect *c, size_t k, const struct atb_protocol *p,
		  struct atb_paired_result *r)
{
	struct atb_paired_seed ps[MAXS];
	struct atb_paired_input in;
	struct atb_error err;
	size_t s;

	for (s = 0; s < k; s++) {
		ps[s].seed = c->seeds[s];
		ps[s].baseline = c->arms[0].t[s];
		ps[s].nbaseline = c->arms[0].n[s];
		ps[s].candidate = c->arms[1].t[s];
		ps[s].ncandidate = c->arms[1].n[s];
	}
	memset(&in, 0, sizeof(in));
	in.seeds = ps;
	in.nseeds = k;
	in.ci_level = p->stats.ci_level;
	in.bootstrap_resamples = p->stats.bootstrap_resamples;
	in.significance_alpha = p->stats.significance_alpha;
	in.cv_cap = p->stats.cv_cap;
	in.bootstrap_seed = 1;
	in.cv_of_ratio = !strcmp(p->stats.cv_of, "per_seed_ratio");
	atb_error_clear(&err);
	if (atb_stats_paired(&in, r, &err)) {
		fprintf(stderr, "bench-cuda-verdict: stats on %zu seeds: %s\n", k, err.msg);
		return -1;
	}
	return 0;
}

/* A JSON number, or null for NaN (JSON has no NaN). */
static json_t *num(double x)
{
	return isnan(x) ? json_null() : json_real(x);
}

static json_t *relu_set(const char *name, long long n)
{
	return json_pack("{s:s, s:[I], s:[], s:[I, I]}", "name", name, "ints", (json_int_t)n,
			 "reals", "counts", (json_int_t)n, (json_int_t)n);
}

/* One job of up to nseeds paired seeds on N floats; prints one row. */
static int run_size(const char *runner, const char *backend, const char *so,
		    const struct atb_protocol *p, long long n, int nseeds, FILE *js)
{
	struct collect c;
	struct atb_runner_outcome out;
	struct atb_error err;
	json_t *job, *seeds = json_array();
	size_t k, s, need = 0, first_k = 0, trials = 0;
	double meds[MAXS], med = NAN, halfw = NAN, ratio = NAN, cvb = NAN, cvc = NAN;
	int rc = 0;

	memset(&c, 0, sizeof(c));
	for (k = 0; k < (size_t)nseeds; k++)
		json_array_append_new(seeds, json_integer((json_int_t)(k + 1)));
	job = json_pack("{s:s, s:s, s:i, s:[{s:s, s:s}, {s:s, s:s}], s:s,"
			" s:[{s:s, s:s, s:s, s:{s:s, s:s, s:f, s:f}}, {s:s, s:s, s:s}],"
			" s:[o], s:o, s:o}",
			"id", "bench-cuda-verdict", "backend", backend, "abi", 1,
			"arms", "name", "baseline", "so", so, "name", "candidate", "so", so,
			"reference", "baseline",
			"buffers", "name", "X", "dtype", "fp32", "role", "in", "dist", "name", "task",
			"kind", "uniform", "low", 0.0, "high", 1.0,
			"name", "Y", "dtype", "fp32", "role", "out",
			"sets", relu_set("check", 1000003), "timing_set", relu_set("timing", n),
			"seeds", seeds);
	atb_error_clear(&err);
	if (!job || atb_runner_job_set_protocol(job, p, 0, &err))
		die("job", &err);
	c.t0_ns = atbi_monotonic_ns();
	if (atb_runner_run(runner, job, p->timing.job_timeout_s, on_event, &c, &out, &err)) {
		printf("N=%lld: runner ended '%s': %s %s %s\n", n, atb_runner_end_name(out.end),
		       out.reason, out.detail, out.stderr_tail);
		rc = 1;
	}
	json_decref(job);
	for (k = 2; k <= c.nseeds; k++) {
		struct atb_paired_result r;

		if (paired(&c, k, p, &r))
			break;
		ratio = r.geomean_ratio;
		halfw = (r.ci_hi - r.ci_lo) / 2 / r.geomean_ratio;
		cvb = r.cv_baseline;
		cvc = r.cv_candidate;
		atb_stats_paired_release(&r);
		if (!first_k && halfw <= p->timing.target_rel_halfwidth)
			first_k = k;
		if (!need && k >= (size_t)p->stats.min_paired_seeds &&
		    halfw <= p->timing.target_rel_halfwidth) {
			need = k;
			break;
		}
	}
	for (s = 0; s < c.nseeds; s++)
		atb_stats_median(c.arms[0].t[s], c.arms[0].n[s], &meds[s], NULL);
	if (c.nseeds)
		atb_stats_median(meds, c.nseeds, &med, NULL);
	for (s = 0; s < (need ? need : c.nseeds); s++)
		trials += c.arms[0].n[s] + c.arms[1].n[s];
	if (need) {
		double wall = (double)(c.seed_done_ns[need - 1] - c.t0_ns) / 1e9;
		double timing = (double)(c.seed_done_ns[need - 1] - c.timing_start_ns) / 1e9;

		printf("N=%-10lld median %8.1f us  verdict after %zu seeds (CI within target from"
		       " %zu), %zu trials; wall %.2f s from runner start, %.2f s of timing"
		       " (%.3f s/seed); ratio %.4f, CI half-width %.3f%%; cv of per-seed medians"
		       " %.3f%% / %.3f%%\n",
		       n, med / 1e3, need, first_k, trials, wall, timing, timing / (double)need,
		       ratio, 100 * halfw, 100 * cvb, 100 * cvc);
	} else {
		printf("N=%-10lld median %8.1f us  NO verdict within %zu seeds (%zu trials); last"
		       " CI half-width %.3f%%; timing %s\n",
		       n, med / 1e3, c.nseeds, trials, 100 * halfw, c.timing);
		rc = 1;
	}
	if (c.correctness_fails)
		printf("  (%d correctness facts failed: the kernel is wrong?)\n", c.correctness_fails);
	if (js) {
		json_t *o = json_pack("{s:I, s:s, s:o, s:I, s:I, s:I, s:o, s:o, s:o, s:o, s:o, s:o,"
				      " s:f}",
				      "n", (json_int_t)n, "device", c.device, "median_ns", num(med),
				      "seeds_needed", (json_int_t)need, "seeds_ci_first",
				      (json_int_t)first_k, "trials", (json_int_t)trials,
				      "wall_s", num(need ? (double)(c.seed_done_ns[need - 1] - c.t0_ns) / 1e9 : NAN),
				      "timing_s", num(need ? (double)(c.seed_done_ns[need - 1] -
								      c.timing_start_ns) / 1e9 : NAN),
				      "ratio", num(ratio), "ci_rel_halfwidth", num(halfw),
				      "cv_baseline", num(cvb), "cv_candidate", num(cvc),
				      "target", p->timing.target_rel_halfwidth);

		if (o && !json_dumpf(o, js, JSON_SORT_KEYS | JSON_COMPACT))
			fputc('\n', js);
		json_decref(o);
	}
	for (s = 0; s < MAXS; s++) {
		atb_free(c.arms[0].t[s]);
		atb_free(c.arms[1].t[s]);
	}
	return rc;
}

int main(int argc, char **argv)
{
	static const long long defaults[] = {8LL << 20, 88LL << 20};
	const char *json_path = NULL;
	struct atb_protocol *proto = NULL;
	struct atb_task *t = NULL;
	struct atb_error err;
	char runner[4096], dir[] = "/tmp/atb-bench-verdict-XXXXXX", so[4200], *log = NULL;
	int nseeds = 24, i, status = 0, nsizes = 0, cpu = 0;
	long long sizes[8];
	FILE *js = NULL;

	atb_alloc_install_json();
	atb_error_clear(&err);
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--seeds-max") && i + 1 < argc)
			nseeds = (int)strtol(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--json") && i + 1 < argc)
			json_path = argv[++i];
		else if (!strcmp(argv[i], "--cpu"))
			cpu = 1;
		else if (argv[i][0] != '-' && nsizes < 8 && strtoll(argv[i], NULL, 10) > 0)
			sizes[nsizes++] = strtoll(argv[i], NULL, 10);
		else {
			fprintf(stderr, "usage: bench-cuda-verdict [--cpu] [--seeds-max N] [--json FILE]"
				" [N_FLOATS...]\n");
			return 2;
		}
	}
	if (nseeds < 2 || nseeds > MAXS) {
		fprintf(stderr, "bench-cuda-verdict: --seeds-max must be 2..%d\n", MAXS);
		return 2;
	}
	if (!nsizes) {
		sizes[nsizes++] = defaults[0];
		sizes[nsizes++] = defaults[1];
	}
	if (atb_protocol_load_current(NULL, &proto, &err))
		die("protocol", &err);
	if (atb_runner_find(runner, sizeof(runner), &err))
		die("runner", &err);
	if (atb_task_open(atb_home(), cpu ? "relu" : "cuda_relu", &t, &err))
		die("task", &err);
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(so, sizeof(so), "%s/baseline.so", dir);
	if (atb_task_build(t, t->baseline.path, NULL, proto, so, &log, &err)) {
		fprintf(stderr, "%s\n", log ? log : "");
		die("build", &err);
	}
	atb_free(log);
	if (json_path && !(js = fopen(json_path, "a")))
		fprintf(stderr, "bench-cuda-verdict: cannot open '%s'\n", json_path);
	printf("bench-cuda-verdict: %s baseline vs itself, target CI half-width %.2f%%,"
	       " at least %d seeds, at most %d\n", t->name,
	       100 * proto->timing.target_rel_halfwidth, proto->stats.min_paired_seeds, nseeds);
	for (i = 0; i < nsizes; i++) {
		status |= run_size(runner, cpu ? "cpu" : "cuda", so, proto, sizes[i], nseeds, js);
		fflush(stdout);
	}
	if (js)
		fclose(js);
	unlink(so);
	rmdir(dir);
	atb_task_free(t);
	atb_protocol_free(proto);
	return status;
}
