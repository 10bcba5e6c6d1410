/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * bench-cuda-tasks: measure bundled CUDA tasks end to end through the real
 * path (task build with nvcc -> job -> a fresh atb-runner on the cuda
 * backend -> raw events -> src/stats), and print, per task: the honest
 * baseline's per-trial CV (median over seeds) and cross-seed CV of per-seed
 * medians, and the paired speedup of the honest baseline over the naive
 * kernel and over the template's default knobs, each with its bootstrap CI.
 * With --candidate FILE.cu the candidate arm is that source instead of the
 * template (the GPU tests plant cheats this way) and the correctness and
 * side-stream facts of each arm are printed.
 *
 * It is a driver for the GPU machine, not a verdict: the gates and
 * `atb measure` judge; this prints what the runner saw.
 * --time-if-incorrect times the arms even when a correctness fact failed
 * (the printed facts say which).
 * Usage: bench-cuda-tasks [--seeds N] [--max-seed-s S] [--candidate FILE.cu]
 *                         [--time-if-incorrect] [--json FILE] TASK...
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
#include "banned.h"

#define MAXS 64

struct arm_samples {
	double *t[MAXS];
	size_t n[MAXS];
	size_t cap[MAXS];
	int fails, events, escaped;
	char fail_inputs[256];
	char gates[256];
};

struct collect {
	const char *names[4];
	size_t narms;
	uint64_t seeds[MAXS];
	size_t nseeds;
	struct arm_samples arms[4];
	int throttled_seeds;
	char env_device[128];
	long long flush_bytes;
	int done;
	char timing[32];
};

static int arm_index(struct collect *c, const char *name)
{
	size_t i;

	for (i = 0; i < c->narms; i++)
		if (!strcmp(c->names[i], name))
			return (int)i;
	return -1;
}

static int seed_index(struct collect *c, uint64_t s)
{
	size_t i;

	for (i = 0; i < c->nseeds; i++)
		if (c->seeds[i] == s)
			return (int)i;
	return -1;
}

static void add_word(char *buf, size_t size, const char *w)
{
	size_t n = strlen(buf);

	if (!w || strstr(buf, w))
		return;
	snprintf(buf + n, size - n, "%s%s", n ? "," : "", w);
}

static enum atb_status on_event(const json_t *ev, void *vctx)
{
	struct collect *c = vctx;
	const char *kind = json_string_value(json_object_get(ev, "event"));
	const char *arm = json_string_value(json_object_get(ev, "arm"));
	int ai = arm ? arm_index(c, arm) : -1;

	if (!strcmp(kind, "env")) {
		snprintf(c->env_device, sizeof(c->env_device), "%s",
			 json_string_value(json_object_get(json_object_get(ev, "device"), "name")));
		c->flush_bytes = json_integer_value(json_object_get(ev, "flush_bytes"));
	} else if (!strcmp(kind, "correctness") && ai >= 0) {
		const json_t *g = json_object_get(ev, "gates");
		c->arms[ai].events++;
		if (!json_is_true(json_object_get(ev, "pass"))) {
			c->arms[ai].fails++;
			add_word(c->arms[ai].fail_inputs, sizeof(c->arms[ai].fail_inputs),
				 json_string_value(json_object_get(ev, "input")));
		}
		if (json_array_size(json_object_get(json_object_get(g, "input_mutation"), "mutated")))
			add_word(c->arms[ai].gates, sizeof(c->arms[ai].gates), "input_mutation");
		if (json_is_false(json_object_get(json_object_get(g, "result_reuse"),
						  "follows_inputs")))
			add_word(c->arms[ai].gates, sizeof(c->arms[ai].gates), "result_reuse");
		if (json_array_size(json_object_get(json_object_get(g, "output_aliasing"),
						    "overlaps")))
			add_word(c->arms[ai].gates, sizeof(c->arms[ai].gates), "output_aliasing");
	} else if (!strcmp(kind, "side_stream") && ai >= 0) {
		if (json_is_true(json_object_get(ev, "escaped")))
			c->arms[ai].escaped++;
	} else if (!strcmp(kind, "samples") && ai >= 0) {
		uint64_t s = (uint64_t)json_integer_value(json_object_get(ev, "seed"));
		const json_t *t = json_object_get(ev, "times_ns");
		int si = seed_index(c, s);
		size_t k;

		if (json_is_true(json_object_get(ev, "throttled")))
			c->throttled_seeds++;
		if (si < 0 && c->nseeds < MAXS) {
			si = (int)c->nseeds;
			c->seeds[c->nseeds++] = s;
		}
		if (si < 0)
			return ATB_OK;
		c->arms[ai].t[si] = atb_realloc(c->arms[ai].t[si],
						json_array_size(t) * sizeof(double) + 8);
		c->arms[ai].n[si] = json_array_size(t);
		for (k = 0; k < json_array_size(t); k++)
			c->arms[ai].t[si][k] = (double)json_integer_value(json_array_get(t, k));
	} else if (!strcmp(kind, "done")) {
		c->done = 1;
		snprintf(c->timing, sizeof(c->timing), "%s",
			 json_string_value(json_object_get(ev, "timing")));
	}
	return ATB_OK;
}

static double median_of(double *x, size_t n)
{
	double m = NAN;

	if (n)
		atb_stats_median(x, n, &m, NULL);
	return m;
}

/* Per-trial CV within each seed (sd/mean), median over seeds. */
static double trial_cv(const struct arm_samples *a, size_t nseeds)
{
	double cvs[MAXS];
	size_t s, k, m = 0;

	for (s = 0; s < nseeds; s++) {
		double mean = 0, var = 0;

		if (a->n[s] < 2)
			continue;
		for (k = 0; k < a->n[s]; k++)
			mean += a->t[s][k];
		mean /= (double)a->n[s];
		for (k = 0; k < a->n[s]; k++)
			var += (a->t[s][k] - mean) * (a->t[s][k] - mean);
		cvs[m++] = sqrt(var / (double)(a->n[s] - 1)) / mean;
	}
	return median_of(cvs, m);
}

/*
 * The job's buffers; a buffer the task marks as a reduction carries
 * {"operands": [...], "accumulate": ...} (accumulate left out when the task
 * gives none), as atb measure sends it (PROTO: correctness.reduction_tolerance).
 */
static json_t *buffers_json(const struct atb_task *t, const struct atb_task_instance *in)
{
	json_t *a = json_array();
	size_t i, k;

	for (i = 0; i < in->nbuffers; i++) {
		const struct atb_task_buffer_instance *b = &in->buffers[i];
		const struct atb_task_buffer *tb = &t->buffers[i];
		json_t *o = json_pack("{s:s, s:s, s:s}", "name", b->name, "dtype", b->dtype,
				      "role", atb_task_role_name(b->role));

		if (tb->reduction.has) {
			json_t *r = json_pack("{s:[]}", "operands");

			for (k = 0; k < tb->reduction.noperands; k++)
				json_array_append_new(json_object_get(r, "operands"),
						      json_string(tb->reduction.operands[k]));
			if (tb->reduction.accumulate[0])
				json_object_set_new(r, "accumulate",
						    json_string(tb->reduction.accumulate));
			json_object_set_new(o, "reduction", r);
		}

		if (b->has_generator) {
			const struct atb_distribution *d = &b->generator;

			json_object_set_new(o, "dist", !strcmp(d->kind, "normal")
				? json_pack("{s:s, s:s, s:f, s:f}", "name", "task", "kind", "normal",
					    "mean", d->mean, "stddev", d->stddev)
				: json_pack("{s:s, s:s, s:f, s:f}", "name", "task", "kind", "uniform",
					    "low", d->low, "high", d->high));
		}
		json_array_append_new(a, o);
	}
	return a;
}

static json_t *set_json(const struct atb_task_instance *in, const char *name)
{
	json_t *ints = json_array(), *reals = json_array(), *counts = json_array();
	size_t i;

	for (i = 0; i < in->nints; i++)
		json_array_append_new(ints, json_integer(in->ints[i]));
	for (i = 0; i < in->nreals; i++)
		json_array_append_new(reals, json_real(in->reals[i]));
	for (i = 0; i < in->nbuffers; i++)
		json_array_append_new(counts, json_integer(in->buffers[i].count));
	return json_pack("{s:s, s:o, s:o, s:o}", "name", name, "ints", ints, "reals", reals,
			 "counts", counts);
}

static void die(const char *what, const struct atb_error *err)
{
	fprintf(stderr, "bench-cuda-tasks: %s: %s\n", what, err->msg);
	exit(1);
}

static void print_ratio(FILE *js, const char *task, const char *what,
			struct collect *c, int base, int other, const struct atb_protocol *p)
{
	struct atb_paired_seed ps[MAXS];
	struct atb_paired_input in;
	struct atb_paired_result r;
	struct atb_error err;
	size_t s;

	if (base < 0 || other < 0)
		return;
	for (s = 0; s < c->nseeds; s++) {
		ps[s].seed = c->seeds[s];
		/* ratio = baseline / candidate: here "candidate" is the honest one, so the
		 * ratio reads "how many times faster the honest baseline is". */
		ps[s].baseline = c->arms[other].t[s];
		ps[s].nbaseline = c->arms[other].n[s];
		ps[s].candidate = c->arms[base].t[s];
		ps[s].ncandidate = c->arms[base].n[s];
	}
	memset(&in, 0, sizeof(in));
	in.seeds = ps;
	in.nseeds = c->nseeds;
	in.ci_level = p->stats.ci_level;
	in.bootstrap_resamples = p->stats.bootstrap_resamples;
	in.significance_alpha = p->stats.significance_alpha;
	in.cv_cap = p->stats.cv_cap;
	in.bootstrap_seed = 1;
	atb_error_clear(&err);
	if (atb_stats_paired(&in, &r, &err)) {
		printf("  %-28s stats failed: %s\n", what, err.msg);
		return;
	}
	printf("  %-28s %8.3fx  CI [%.3f, %.3f]  %s  (seeds %zu, cv of per-seed medians %.2f%% / %.2f%%)\n",
	       what, r.geomean_ratio, r.ci_lo, r.ci_hi, atb_stats_verdict_name(r.verdict),
	       r.nseeds, 100 * r.cv_candidate, 100 * r.cv_baseline);
	if (js)
		fprintf(js, "{\"task\":\"%s\",\"what\":\"%s\",\"ratio\":%.6f,\"ci_lo\":%.6f,"
			"\"ci_hi\":%.6f,\"verdict\":\"%s\",\"seeds\":%zu}\n",
			task, what, r.geomean_ratio, r.ci_lo, r.ci_hi,
			atb_stats_verdict_name(r.verdict), r.nseeds);
	atb_stats_paired_release(&r);
}

int main(int argc, char **argv)
{
	const char *cand_src = NULL, *json_path = NULL;
	struct atb_protocol *proto = NULL;
	struct atb_error err;
	char runner[4096];
	int nseeds = 8, i, status = 0, time_anyway = 0;
	double max_seed_s = 0;
	FILE *js = NULL;

	atb_alloc_install_json();
	atb_error_clear(&err);
	for (i = 1; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "--seeds") && i + 1 < argc)
			nseeds = (int)strtol(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--max-seed-s") && i + 1 < argc)
			max_seed_s = strtod(argv[++i], NULL);
		else if (!strcmp(argv[i], "--candidate") && i + 1 < argc)
			cand_src = argv[++i];
		else if (!strcmp(argv[i], "--time-if-incorrect"))
			time_anyway = 1;
		else if (!strcmp(argv[i], "--json") && i + 1 < argc)
			json_path = argv[++i];
		else {
			fprintf(stderr, "usage: bench-cuda-tasks [--seeds N] [--max-seed-s S] "
				"[--candidate FILE.cu] [--time-if-incorrect] [--json FILE] TASK...\n");
			return 2;
		}
	}
	if (nseeds < 2 || nseeds > MAXS || i >= argc) {
		fprintf(stderr, "bench-cuda-tasks: need 2..%d seeds and a task\n", MAXS);
		return 2;
	}
	if (atb_protocol_load_current(NULL, &proto, &err))
		die("protocol", &err);
	if (atb_runner_find(runner, sizeof(runner), &err))
		die("runner", &err);
	if (json_path && !(js = fopen(json_path, "a")))
		fprintf(stderr, "bench-cuda-tasks: cannot open '%s'\n", json_path);
	for (; i < argc; i++) {
		struct atb_task *t = NULL;
		struct atb_task_instance inst;
		struct atb_knob_assignment knobs;
		struct atb_runner_outcome out;
		struct collect c;
		char dir[] = "/tmp/atb-bench-cuda-XXXXXX", so[3][4200], *log = NULL;
		const char *srcs[3];
		json_t *job, *sets, *arms, *seeds;
		size_t s, k;

		memset(&c, 0, sizeof(c));
		if (atb_task_open(atb_home(), argv[i], &t, &err))
			die(argv[i], &err);
		if (!mkdtemp(dir)) {
			perror("mkdtemp");
			return 1;
		}
		srcs[0] = t->baseline.path;
		srcs[1] = t->has_naive ? t->naive.path : NULL;
		srcs[2] = cand_src ? cand_src : t->candidate.path;
		atb_task_default_knobs(t, &knobs);
		c.names[0] = "baseline";
		c.names[1] = "naive";
		c.names[2] = "candidate";
		c.narms = 3;
		arms = json_array();
		for (k = 0; k < 3; k++) {
			if (!srcs[k])
				continue;
			snprintf(so[k], sizeof(so[k]), "%s/%s.so", dir, c.names[k]);
			if (atb_task_build(t, srcs[k], k == 2 && !cand_src ? &knobs : NULL, proto,
					   so[k], &log, &err)) {
				fprintf(stderr, "%s\n", log ? log : "");
				die(srcs[k], &err);
			}
			atb_free(log);
			log = NULL;
			json_array_append_new(arms, json_pack("{s:s, s:s}", "name", c.names[k],
							      "so", so[k]));
		}
		sets = json_array();
		for (k = 1; k < atb_task_nsets(t); k++) {
			char nm[32];

			if (atb_task_instantiate(t, k, &inst, &err))
				die("instantiate", &err);
			snprintf(nm, sizeof(nm), "set%zu", k);
			json_array_append_new(sets, set_json(&inst, nm));
		}
		if (atb_task_instantiate(t, 0, &inst, &err))
			die("instantiate", &err);
		seeds = json_array();
		for (s = 0; s < (size_t)nseeds; s++)
			json_array_append_new(seeds, json_integer((json_int_t)(s + 1)));
		job = json_pack("{s:s, s:s, s:i, s:o, s:s, s:o, s:o, s:o, s:o, s:I}",
				"id", t->name, "backend", "cuda", "abi", 1, "arms", arms,
				"reference", "baseline", "buffers", buffers_json(t, &inst), "sets", sets,
				"timing_set", set_json(&inst, "timing"), "seeds", seeds,
				"cache_bytes", (json_int_t)0);
		if (atb_runner_job_set_protocol(job, proto, 0, &err))
			die("job", &err);
		if (max_seed_s > 0)
			json_object_set_new(json_object_get(job, "timing"), "max_time_per_seed_s",
					    json_real(max_seed_s));
		if (cand_src || time_anyway)
			json_object_set_new(job, "options",
					    json_pack("{s:b}", "time_if_incorrect", 1));
		if (atb_runner_run(runner, job, proto->timing.job_timeout_s, on_event, &c, &out,
				   &err)) {
			printf("%s: runner ended '%s': %s %s %s\n", t->name,
			       atb_runner_end_name(out.end), out.reason, out.detail,
			       out.stderr_tail);
			status = 1;
		}
		printf("%s on %s (flush %lld bytes, %.1f s):\n", t->name, c.env_device,
		       c.flush_bytes, (double)out.wall_ns / 1e9);
		for (k = 0; k < c.narms; k++) {
			double meds[MAXS];

			for (s = 0; s < c.nseeds; s++)
				meds[s] = median_of(c.arms[k].t[s], c.arms[k].n[s]);
			printf("  %-9s median %10.1f us  per-trial cv %.2f%%  correctness %d/%d failed%s%s%s%s  side-stream escapes %d\n",
			       c.names[k], median_of(meds, c.nseeds) / 1e3,
			       100 * trial_cv(&c.arms[k], c.nseeds), c.arms[k].fails,
			       c.arms[k].events, c.arms[k].fail_inputs[0] ? " on " : "",
			       c.arms[k].fail_inputs, c.arms[k].gates[0] ? " gates: " : "",
			       c.arms[k].gates, c.arms[k].escaped);
			if (js)
				fprintf(js, "{\"task\":\"%s\",\"arm\":\"%s\",\"median_ns\":%.1f,"
					"\"trial_cv\":%.6f,\"fails\":%d,\"events\":%d,"
					"\"fail_inputs\":\"%s\",\"gates\":\"%s\",\"escapes\":%d}\n",
					t->name, c.names[k], median_of(meds, c.nseeds),
					trial_cv(&c.arms[k], c.nseeds), c.arms[k].fails,
					c.arms[k].events, c.arms[k].fail_inputs, c.arms[k].gates,
					c.arms[k].escaped);
		}
		printf("  timing %s, throttled sample sets %d\n", c.timing, c.throttled_seeds);
		if (c.nseeds >= 2) {
			print_ratio(js, t->name, "honest over naive", &c, 0, 1, proto);
			print_ratio(js, t->name, "honest over candidate", &c, 0, 2, proto);
		}
		json_decref(job);
		for (k = 0; k < c.narms; k++)
			for (s = 0; s < MAXS; s++)
				atb_free(c.arms[k].t[s]);
		atb_task_free(t);
		fflush(stdout);
	}
	if (js)
		fclose(js);
	atb_protocol_free(proto);
	return status;
}
