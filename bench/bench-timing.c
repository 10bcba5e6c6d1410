/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * bench-timing: the timing core's per-trial overhead against a bare
 * CLOCK_MONOTONIC loop around the same ~100 us kernel, in the same run.
 *
 * Blocks alternate (bare, core, bare, core, ...) so drift hits both.  Two
 * ratios are printed, core over bare:
 *   wall per trial   everything the core does per trial (order draw,
 *                    bookkeeping, the stopping rule) plus the kernel
 *   measured median  what each loop reports for the kernel itself (the bias
 *                    the core adds inside the timed region)
 * Target: both within 5% (ratio <= 1.05).  No cache flush in either loop;
 * the core evaluates its stopping rule after every round (never met).
 * Usage: bench-timing [trials-per-block [blocks]]
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "atb/alloc.h"
#include "atb/stats.h"
#include "atb/timing.h"
#include "banned.h"

static volatile double sink;
static long kernel_iters = 1000;

/* A compute-bound kernel; its length is set by calibrate(). */
static void kernel(void)
{
	static unsigned spin;
	double a = 1.0, b = 1.000001;
	long i, n = kernel_iters;

	/* The "empty" kernel still varies a little, so the stopping rule never sees
	 * a zero-width interval and runs every round. */
	if (!n)
		n = (long)(spin++ * 2654435761u >> 26);
	for (i = 0; i < n; i++)
		a = a * b + 1e-9;
	sink = a;
}

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void calibrate(double target_ns)
{
	int64_t t0, dt;
	int k;

	kernel_iters = 1000;
	for (k = 0; k < 20; k++) {
		t0 = now_ns();
		kernel();
		dt = now_ns() - t0;
		if (dt <= 0)
			dt = 1;
		kernel_iters = (long)((double)kernel_iters * target_ns / (double)dt);
		if (kernel_iters < 1)
			kernel_iters = 1;
	}
}

static int call(void *ctx, size_t arm)
{
	(void)ctx;
	(void)arm;
	kernel();
	return 0;
}

static double median(double *x, size_t n)
{
	double m = 0;
	struct atb_error e;

	atb_stats_median(x, n, &m, &e);
	return m;
}

static double minimum(const double *x, size_t n)
{
	double m = x[0];
	size_t i;

	for (i = 1; i < n; i++)
		if (x[i] < m)
			m = x[i];
	return m;
}

int main(int argc, char **argv)
{
	int trials = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 200;
	int blocks = argc > 2 ? (int)strtol(argv[2], NULL, 10) : 10;
	double *bare_wall, *core_wall, *bare_med, *core_med, *tmp;
	struct atb_timing_config cfg;
	struct atb_timer *timer;
	struct atb_error err;
	double empty_bare = 0, empty_core = 0;
	int b, i;

	if (trials < 10 || blocks < 1) {
		fprintf(stderr, "usage: bench-timing [trials>=10 [blocks>=1]]\n");
		return 2;
	}
	bare_wall = atb_calloc((size_t)blocks, sizeof(double));
	core_wall = atb_calloc((size_t)blocks, sizeof(double));
	bare_med = atb_calloc((size_t)blocks, sizeof(double));
	core_med = atb_calloc((size_t)blocks, sizeof(double));
	tmp = atb_calloc((size_t)trials, sizeof(double));
	if (!bare_wall || !core_wall || !bare_med || !core_med || !tmp ||
	    atb_timer_cpu_new(0, &timer, &err)) {
		fprintf(stderr, "bench-timing: out of memory\n");
		return 3;
	}
	kernel_iters = 0;

	atb_timing_config_default(&cfg);
	cfg.warmup_min_iterations = 3;
	cfg.warmup_min_time_ns = 0;
	/*
	 * The worst case for the core: the stopping rule is evaluated after
	 * every round from trial 10 on and never met, so all trials run.
	 */
	cfg.trials_min = 10;
	cfg.trials_max = trials;
	cfg.target_rel_halfwidth = 1e-12;
	cfg.max_time_per_seed_ns = 0;
	cfg.flush = 0;

again:
	for (b = 0; b < blocks; b++) {
		struct atb_timing_seed r;
		int64_t t0;

		/* bare: the same warm-up, then clock, call, clock */
		for (i = 0; i < 3; i++)
			kernel();
		t0 = now_ns();
		for (i = 0; i < trials; i++) {
			int64_t a = now_ns();

			kernel();
			tmp[i] = (double)(now_ns() - a);
		}
		bare_wall[b] = (double)(now_ns() - t0) / trials;
		bare_med[b] = median(tmp, (size_t)trials);

		/* the core: one arm, fixed trial count, stopping rule evaluated every round */
		t0 = now_ns();
		if (atb_timing_run_seed(&cfg, timer, (uint64_t)b, 1, call, NULL, &r, &err)) {
			fprintf(stderr, "bench-timing: %s\n", err.msg);
			return 3;
		}
		core_wall[b] = (double)(now_ns() - t0 - r.arms[0].warmup_ns) / r.rounds;
		if (r.rounds != trials)
			fprintf(stderr, "bench-timing: block %d stopped after %d rounds (%s)\n", b,
				r.rounds, atb_timing_stop_name(r.stop));
		for (i = 0; i < (int)r.arms[0].ntrials; i++)
			tmp[i] = (double)r.arms[0].times_ns[i];
		core_med[b] = median(tmp, r.arms[0].ntrials);
		atb_timing_seed_release(&r);
	}
	if (kernel_iters == 0) {
		/* Empty kernel: what is left is the per-trial cost of each loop. */
		empty_bare = median(bare_wall, (size_t)blocks);
		empty_core = median(core_wall, (size_t)blocks);
		calibrate(100000.0);
		goto again;
	}
	{
		double bw = median(bare_wall, (size_t)blocks), cw = median(core_wall, (size_t)blocks);
		double bm = median(bare_med, (size_t)blocks), cm = median(core_med, (size_t)blocks);
		double extra = empty_core - empty_bare;

		printf("empty kernel:     bare %.1f ns/trial, core %.1f ns/trial: core adds %.1f ns/trial\n",
		       empty_bare, empty_core, extra);
		printf("  as a ratio on the %.1f us kernel: (kernel + added) / kernel = %.4f\n",
		       bm / 1000.0, (bm + extra) / bm);
		printf("kernel: %.1f us (calibrated, %ld iterations); %d trials x %d blocks\n",
		       bm / 1000.0, kernel_iters, trials, blocks);
		printf("wall per trial:   bare %.1f ns, core %.1f ns, overhead %.1f ns, ratio %.4f"
		       " (medians of block means)\n", bw, cw, cw - bw, cw / bw);
		printf("wall per trial:   bare %.1f ns, core %.1f ns, ratio %.4f (least-disturbed block)\n",
		       minimum(bare_wall, (size_t)blocks), minimum(core_wall, (size_t)blocks),
		       minimum(core_wall, (size_t)blocks) / minimum(bare_wall, (size_t)blocks));
		printf("measured median:  bare %.1f ns, core %.1f ns, ratio %.4f\n", bm, cm, cm / bm);
		printf("target (added per-trial cost and measured-median ratio <= 1.05): %s\n",
		       (bm + extra) / bm <= 1.05 && cm / bm <= 1.05 ? "met" : "NOT met");
	}
	atb_timer_free(timer);
	atb_free(bare_wall);
	atb_free(core_wall);
	atb_free(bare_med);
	atb_free(core_med);
	atb_free(tmp);
	return 0;
}
