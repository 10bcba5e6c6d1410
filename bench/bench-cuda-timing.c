/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * bench-cuda-timing: the per-trial overhead of the runner's CUDA timing
 * (the timing core with the CUDA-events timer) against a bare
 * cuEventRecord loop around the same kernel, in the same run.  The kernel
 * is the cuda_relu task's honest baseline, built with nvcc through the task
 * module, on its timing shape (N = 64 Mi floats, about 130 us on an H200).
 *
 * Blocks alternate (bare, core, core-cold, bare, ...) so drift hits all:
 *   bare       event, call, event, wait; no flush, no spin
 *   core       the timing core with the timer's flush and spin turned off
 *   core-cold  the runner's configuration: L2 flush (>= 2x L2) and spin
 * Printed: wall time per trial and the measured median of each, and their
 * ratios to bare.  core/bare is the core's own overhead; core-cold/bare
 * shows what the cold measurement costs per trial and how the kernel's time
 * changes with a cold L2.
 * Usage: bench-cuda-timing [trials-per-block [blocks]]
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "atb/atb.h"
#include "atb/cuda.h"
#include "atb/kernel.h"
#include "atb/protocol.h"
#include "atb/stats.h"
#include "atb/task.h"
#include "atb/timing.h"
#include "util.h"
#include "banned.h"

struct kctx {
	atb_kernel_fn fn;
	struct atb_kernel_args args;
};

static int call(void *ctx, size_t arm)
{
	struct kctx *k = ctx;

	(void)arm;
	return k->fn(&k->args);
}

static void die(const char *what, const struct atb_error *err)
{
	fprintf(stderr, "bench-cuda-timing: %s: %s\n", what, err->msg);
	exit(1);
}

static double med(double *x, size_t n)
{
	double m = 0;

	atb_stats_median(x, n, &m, NULL);
	return m;
}

int main(int argc, char **argv)
{
	int trials = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 200;
	int blocks = argc > 2 ? (int)strtol(argv[2], NULL, 10) : 5;
	struct atb_protocol *proto = NULL;
	struct atb_task *t = NULL;
	struct atb_task_instance inst;
	struct atb_cuda *c = NULL;
	struct atb_cuda_events *ev = NULL;
	struct atb_timer *warm = NULL, *cold = NULL;
	struct atb_error err;
	char dir[] = "/tmp/atb-bench-cuda-timing-XXXXXX", so[4200];
	void *dl, *sym, *bufs[2];
	uint64_t x = 0, y = 0;
	size_t n, l2;
	struct kctx k;
	double *bare_t, *bare_w, *core_t, *core_w, *cold_t, *cold_w;
	int b, i, nb = 0;

	atb_alloc_install_json();
	atb_error_clear(&err);
	if (trials < 10 || blocks < 1) {
		fprintf(stderr, "usage: bench-cuda-timing [trials-per-block >= 10 [blocks]]\n");
		return 2;
	}
	if (atb_cuda_open(0, &c, &err)) {
		if (err.status == ATB_ERR_NOT_FOUND) {
			printf("bench-cuda-timing: skipped: %s\n", err.msg);
			return 0;
		}
		die("cuda", &err);
	}
	if (atb_protocol_load_current(NULL, &proto, &err) ||
	    atb_task_open(atb_home(), "cuda_relu", &t, &err) ||
	    atb_task_instantiate(t, 0, &inst, &err))
		die("task", &err);
	if (!mkdtemp(dir))
		return 1;
	snprintf(so, sizeof(so), "%s/baseline.so", dir);
	if (atb_task_build(t, t->baseline.path, NULL, proto, so, NULL, &err))
		die("build", &err);
	dl = dlopen(so, RTLD_NOW | RTLD_LOCAL);
	if (!dl || !(sym = dlsym(dl, ATB_KERNEL_SYMBOL))) {
		fprintf(stderr, "bench-cuda-timing: cannot load '%s'\n", so);
		return 1;
	}
	memcpy(&k.fn, &sym, sizeof(sym));
	n = (size_t)inst.ints[0];
	if (atb_cuda_alloc(c, n * 4, &x, &err) || atb_cuda_alloc(c, n * 4, &y, &err) ||
	    atb_cuda_memset32(c, x, 0x3f000000u, n, &err))  /* 0.5f */
		die("alloc", &err);
	bufs[0] = (void *)(uintptr_t)x;
	bufs[1] = (void *)(uintptr_t)y;
	memset(&k.args, 0, sizeof(k.args));
	k.args.buffers = bufs;
	k.args.nbuffers = 2;
	k.args.ints = inst.ints;
	k.args.nints = 1;
	k.args.stream = atb_cuda_stream(c);
	l2 = atb_cuda_info(c)->l2_bytes;
	if (atb_cuda_events_new(c, &ev, &err) ||
	    atb_cuda_timer_new(c, 0, 0, &warm, &err) ||
	    atb_cuda_timer_new(c, atb_timing_flush_bytes(l2, proto->timing.cache_flush_factor,
							 (size_t)proto->timing.cache_flush_min_bytes, 0),
			       ATB_CUDA_SPIN_NS, &cold, &err))
		die("timer", &err);
	bare_t = atb_calloc((size_t)blocks, sizeof(double));
	bare_w = atb_calloc((size_t)blocks, sizeof(double));
	core_t = atb_calloc((size_t)blocks, sizeof(double));
	core_w = atb_calloc((size_t)blocks, sizeof(double));
	cold_t = atb_calloc((size_t)blocks, sizeof(double));
	cold_w = atb_calloc((size_t)blocks, sizeof(double));
	for (i = 0; i < 20; i++)
		call(&k, 0);
	atb_cuda_ctx_sync(c, NULL);
	for (b = 0; b < blocks; b++) {
		struct atb_timing_config cfg;
		struct atb_timing_seed s;
		double *tt = atb_calloc((size_t)trials, sizeof(double));
		int64_t w0, ns;

		w0 = atbi_monotonic_ns();
		for (i = 0; i < trials; i++) {
			atb_cuda_events_record_start(ev, NULL);
			call(&k, 0);
			atb_cuda_events_record_stop(ev, NULL);
			if (atb_cuda_events_elapsed_ns(ev, &ns, &err))
				die("events", &err);
			tt[i] = (double)ns;
		}
		bare_w[b] = (double)(atbi_monotonic_ns() - w0) / trials;
		bare_t[b] = med(tt, (size_t)trials);
		atb_free(tt);

		atb_timing_config_default(&cfg);
		cfg.warmup_min_iterations = 1;
		cfg.warmup_min_time_ns = 0;
		cfg.trials_min = cfg.trials_max = trials;
		cfg.target_rel_halfwidth = 0;
		cfg.max_time_per_seed_ns = 0;
		cfg.flush = 0;
		w0 = atbi_monotonic_ns();
		if (atb_timing_run_seed(&cfg, warm, (uint64_t)b + 1, 1, call, &k, &s, &err))
			die("core", &err);
		core_w[b] = (double)(s.elapsed_ns - s.arms[0].warmup_ns) / (double)s.arms[0].ntrials;
		core_t[b] = s.arms[0].median_ns;
		atb_timing_seed_release(&s);

		cfg.flush = 1;
		if (atb_timing_run_seed(&cfg, cold, (uint64_t)b + 1, 1, call, &k, &s, &err))
			die("core-cold", &err);
		cold_w[b] = (double)(s.elapsed_ns - s.arms[0].warmup_ns) / (double)s.arms[0].ntrials;
		cold_t[b] = s.arms[0].median_ns;
		atb_timing_seed_release(&s);
		(void)w0;
		nb++;
	}
	printf("bench-cuda-timing on %s: cuda_relu baseline, N=%zu, %d trials x %d blocks\n",
	       atb_cuda_info(c)->name, n, trials, nb);
	printf("  %-10s %14s %14s\n", "loop", "wall/trial us", "median us");
	printf("  %-10s %14.2f %14.2f\n", "bare", med(bare_w, (size_t)nb) / 1e3,
	       med(bare_t, (size_t)nb) / 1e3);
	printf("  %-10s %14.2f %14.2f\n", "core", med(core_w, (size_t)nb) / 1e3,
	       med(core_t, (size_t)nb) / 1e3);
	printf("  %-10s %14.2f %14.2f\n", "core-cold", med(cold_w, (size_t)nb) / 1e3,
	       med(cold_t, (size_t)nb) / 1e3);
	printf("  core/bare: wall per trial %.3f, median %.4f\n",
	       med(core_w, (size_t)nb) / med(bare_w, (size_t)nb),
	       med(core_t, (size_t)nb) / med(bare_t, (size_t)nb));
	printf("  core-cold/bare: wall per trial %.3f, median %.4f (flush %zu bytes, spin %d ns)\n",
	       med(cold_w, (size_t)nb) / med(bare_w, (size_t)nb),
	       med(cold_t, (size_t)nb) / med(bare_t, (size_t)nb), cold->flush_bytes,
	       ATB_CUDA_SPIN_NS);
	atb_timer_free(warm);
	atb_timer_free(cold);
	atb_cuda_events_free(ev);
	atb_cuda_free(c, x);
	atb_cuda_free(c, y);
	atb_cuda_close(c);
	return 0;
}
