/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * bench-sandbox: what the runner's sandbox (PROTO: sandbox; bwrap +
 * seccomp, src/proc) costs, against the same job unsandboxed, in one run.
 *
 * One job is the relu fixture job (tests/fixtures/runner/relu-job.json:
 * 4096 floats, two arms, every correctness set, three seeds of paired
 * timing) with the fixture's reference kernel in both arms.  Four setups
 * take turns, the order rotating each round so drift of the box hits all:
 * ATB_SANDBOX=off, auto, auto with each arm in a worker process
 * (options.isolation process: protocol version 11's timing.isolation,
 * runner/worker.c), and that with the round trip timed and taken out
 * (options.round_trip, every round: version 12's timing.round_trip).
 * Printed, each over off:
 *   wall per job     spawn, namespaces, mounts, the filter, the workers, the
 *                    job, the teardown and the scratch folder's removal
 *   median trial     the timed kernel's median over every sample: the
 *                    filter's cost inside the timed region (should be 1)
 *                    and a worker's round trip per call (a kernel of a few
 *                    microseconds here: the worst case), and what of it is
 *                    left once the empty calls' 0.1-quantile is taken out
 * Usage: bench-sandbox [pairs]   (default 20; needs cc and bwrap; run from
 * the source tree or with ATB_SOURCE_DIR set, atb-runner beside it)
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "atb/alloc.h"
#include "atb/proc.h"
#include "atb/runner.h"
#include "banned.h"

struct acc {
	double *v;
	size_t n, cap;
};

static void push(struct acc *a, double x)
{
	if (a->n == a->cap) {
		double *nv;

		a->cap = a->cap ? 2 * a->cap : 4096;
		nv = realloc(a->v, a->cap * sizeof(*nv));
		if (!nv)
			exit(3);
		a->v = nv;
	}
	a->v[a->n++] = x;
}

static enum atb_status on_event(const json_t *ev, void *ctx)
{
	struct acc *a = ctx;
	const json_t *t;
	size_t i;

	if (strcmp(json_string_value(json_object_get(ev, "event")), "samples"))
		return ATB_OK;
	json_array_foreach(json_object_get(ev, "times_ns"), i, t)
		push(a, json_number_value(t));
	return ATB_OK;
}

static int cmp_d(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;

	return a < b ? -1 : a > b;
}

static double median(struct acc *a)
{
	if (!a->n)
		return 0;
	qsort(a->v, a->n, sizeof(*a->v), cmp_d);
	return a->n % 2 ? a->v[a->n / 2] : (a->v[a->n / 2 - 1] + a->v[a->n / 2]) / 2;
}

int main(int argc, char **argv)
{
	const char *srcdir = getenv("ATB_SOURCE_DIR") ? getenv("ATB_SOURCE_DIR") : ".";
	long pairs = argc > 1 ? strtol(argv[1], NULL, 10) : 20;
	char tmp[] = "/tmp/bench-sandbox.XXXXXX", so[600], cmd[2048], fix[1200];
	char runner[4096];
#define NSETUPS 4
	static const char *const names[NSETUPS] = {"off", "auto", "workers", "work+rt"};
	struct acc wall[NSETUPS] = {{0}}, trial[NSETUPS] = {{0}};
	struct atb_runner_outcome out;
	struct atb_error err;
	json_error_t je;
	json_t *job;
	long p;
	int k;

	if (pairs < 1)
		pairs = 20;
	atb_alloc_install_json();
	if (!mkdtemp(tmp))
		return 3;
	snprintf(so, sizeof(so), "%s/relu_ref.so", tmp);
	snprintf(cmd, sizeof(cmd), "cc -shared -fPIC -O2 -I'%s/include' -o '%s' '%s/tests/fixtures/runner/relu_ref.c'",
		 srcdir, so, srcdir);
	if (system(cmd)) {
		fprintf(stderr, "bench-sandbox: cannot build the fixture (run from the source tree or set ATB_SOURCE_DIR)\n");
		return 3;
	}
	snprintf(fix, sizeof(fix), "%s/tests/fixtures/runner/relu-job.json", srcdir);
	job = json_load_file(fix, 0, &je);
	if (!job || atb_runner_find(runner, sizeof(runner), &err)) {
		fprintf(stderr, "bench-sandbox: %s\n", job ? err.msg : je.text);
		return 3;
	}
	json_object_set_new(json_array_get(json_object_get(job, "arms"), 0), "so", json_string(so));
	json_object_set_new(json_array_get(json_object_get(job, "arms"), 1), "so", json_string(so));
	for (p = 0; p < pairs; p++)
		for (k = 0; k < NSETUPS; k++) {
			int m = (int)((p + k) % NSETUPS);   /* each setup first, second, ... in turn */
			json_t *opt = json_object_get(job, "options");

			setenv("ATB_SANDBOX", m ? "auto" : "off", 1);
			if (!opt) {
				opt = json_object();
				json_object_set_new(job, "options", opt);
			}
			json_object_set_new(opt, "isolation", json_string(m >= 2 ? "process" : "none"));
			if (m == 3)
				json_object_set_new(opt, "round_trip",
						    json_pack("{s:i, s:b, s:f}", "every_rounds", 1,
							      "subtract", 1, "quantile", 0.1));
			else
				json_object_del(opt, "round_trip");
			atb_error_clear(&err);
			if (atb_runner_run(runner, job, 120, on_event, &trial[m], &out, &err)) {
				fprintf(stderr, "bench-sandbox: job failed (%s): %s\n", names[m],
					err.msg);
				return 3;
			}
			if (m == 1 && p == 0)
				printf("sandbox level        %s\n", out.sandbox_level);
			push(&wall[m], (double)out.wall_ns);
		}
	printf("jobs                 %ld of each setup, in turn\n", pairs);
	{
		double w0 = median(&wall[0]), t0 = median(&trial[0]);

		printf("wall per job         off %.1f ms\n", w0 / 1e6);
		for (k = 1; k < NSETUPS; k++) {
			double w = median(&wall[k]);

			printf("                     %-7s %.1f ms   %s/off %.3f   (%+.1f ms)\n",
			       names[k], w / 1e6, names[k], w / w0, (w - w0) / 1e6);
		}
		printf("median trial         off %.0f ns   (%zu samples)\n", t0, trial[0].n);
		for (k = 1; k < NSETUPS; k++) {
			double t = median(&trial[k]);

			printf("                     %-7s %.0f ns   %s/off %.4f   (%+.0f ns a call, %zu samples)\n",
			       names[k], t, names[k], t / t0, t - t0, trial[k].n);
		}
	}
	json_decref(job);
	atb_proc_remove_tree(tmp);
	return 0;
}
