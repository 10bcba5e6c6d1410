/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The GPU's physical floor (PROTO: gates.physical_floor): device memory
 * bandwidth from a large device-to-device copy and matrix peaks from large
 * GEMMs through cuBLAS, each timed with CUDA events on atb's own stream and
 * kept at its best repetition.  Like the CPU's, these must be upper bounds
 * of what a candidate can reach, or the gate would refuse honest kernels:
 * the bandwidth cap is the larger of the measured copy and the driver's
 * attribute figure (memory clock x bus width), and the flops cap is the
 * highest rate of any precision with headroom (atb_floor_gpu_caps).
 *
 * cuBLAS is loaded with dlopen at run time ($ATB_CUBLAS_LIBRARY, else
 * libcublas.so.13/.12/.11), so atb needs no CUDA toolkit to build; where it
 * cannot be loaded the GEMM rates stay 0 and the floor applies only its
 * bytes term (never a made-up number).  Its signatures are declared here
 * from NVIDIA's documented API; handles are opaque pointers, enums int.
 *
 * Does not: touch the store (measure.c caches the caps per box), decide a
 * verdict, or print.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "atb/cuda.h"
#include "atb/floor.h"
#include "util.h"
#include "banned.h"

/* ---- cuBLAS, through dlopen ---- */

enum {
	CUBLAS_OP_N = 0,
	CUDA_R_32F = 0,
	CUDA_R_16F = 2,
	CUDA_R_16BF = 14,
	CUBLAS_COMPUTE_32F = 68,
	CUBLAS_GEMM_DEFAULT = -1,
};

static struct {
	void *lib;
	int (*create)(void **);
	int (*destroy)(void *);
	int (*set_stream)(void *, void *);
	int (*sgemm)(void *, int, int, int, int, int, const float *, const void *, int,
		     const void *, int, const float *, void *, int);
	int (*gemm_ex)(void *, int, int, int, int, int, const void *, const void *, int, int,
		       const void *, int, int, const void *, void *, int, int, int, int);
	char why[160];
} cb;
static pthread_once_t cb_once = PTHREAD_ONCE_INIT;

static int cb_sym(void *dst, const char *name)
{
	void *s = dlsym(cb.lib, name);

	if (!s) {
		snprintf(cb.why, sizeof(cb.why), "no symbol '%s' in cublas", name);
		return -1;
	}
	/* dlsym returns void *; copying the bits avoids an object-to-function cast. */
	memcpy(dst, &s, sizeof(s));
	return 0;
}

static void cb_load(void)
{
	static const char *const names[] = {"libcublas.so.13", "libcublas.so.12",
					    "libcublas.so.11", "libcublas.so"};
	const char *env = getenv("ATB_CUBLAS_LIBRARY");
	size_t i;

	if (env && env[0])
		cb.lib = dlopen(env, RTLD_NOW | RTLD_LOCAL);
	for (i = 0; !cb.lib && !(env && env[0]) && i < sizeof(names) / sizeof(names[0]); i++)
		cb.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
	if (!cb.lib) {
		const char *e = dlerror();

		snprintf(cb.why, sizeof(cb.why), "cannot load cublas '%s': %.100s",
			 env && env[0] ? env : "libcublas.so", e ? e : "not found");
		return;
	}
	if (cb_sym(&cb.create, "cublasCreate_v2") || cb_sym(&cb.destroy, "cublasDestroy_v2") ||
	    cb_sym(&cb.set_stream, "cublasSetStream_v2") || cb_sym(&cb.sgemm, "cublasSgemm_v2") ||
	    cb_sym(&cb.gemm_ex, "cublasGemmEx")) {
		/* never dlclose cuBLAS: its own teardown runs at process exit */
		cb.create = NULL;
	}
}

/* ---- timing helpers ---- */

struct gemm_ctx {
	struct atb_cuda *c;
	void *h;
	int n;
	uint64_t a, b, cc;
	int which;   /* 0 fp32, 1 fp16, 2 bf16 */
};

static int gemm_call(struct gemm_ctx *g)
{
	const float one = 1.0f, zero = 0.0f;
	int t = g->which == 1 ? CUDA_R_16F : CUDA_R_16BF;

	if (g->which == 0)
		return cb.sgemm(g->h, CUBLAS_OP_N, CUBLAS_OP_N, g->n, g->n, g->n, &one,
				(const void *)(uintptr_t)g->a, g->n, (const void *)(uintptr_t)g->b,
				g->n, &zero, (void *)(uintptr_t)g->cc, g->n);
	return cb.gemm_ex(g->h, CUBLAS_OP_N, CUBLAS_OP_N, g->n, g->n, g->n, &one,
			  (const void *)(uintptr_t)g->a, t, g->n, (const void *)(uintptr_t)g->b, t,
			  g->n, &zero, (void *)(uintptr_t)g->cc, t, g->n, CUBLAS_COMPUTE_32F,
			  CUBLAS_GEMM_DEFAULT);
}

/* Best rate (flops per second) of reps GEMMs after one warm-up; 0 on a cuBLAS error. */
static enum atb_status best_gemm(struct gemm_ctx *g, struct atb_cuda_events *ev, int reps,
				 double *rate, char *why, size_t why_size, struct atb_error *err)
{
	double flops = 2.0 * (double)g->n * (double)g->n * (double)g->n;
	enum atb_status st;
	int64_t ns;
	int r, rc;

	*rate = 0;
	if ((rc = gemm_call(g))) {
		snprintf(why, why_size, "cublas gemm (%s) failed with status %d",
			 g->which == 0 ? "fp32" : g->which == 1 ? "fp16" : "bf16", rc);
		return atb_cuda_stream_sync(g->c, err);
	}
	for (r = 0; r < reps; r++) {
		if ((st = atb_cuda_events_record_start(ev, err)))
			return st;
		rc = gemm_call(g);
		if ((st = atb_cuda_events_record_stop(ev, err)) ||
		    (st = atb_cuda_events_elapsed_ns(ev, &ns, err)))
			return st;
		if (rc) {
			*rate = 0;
			snprintf(why, why_size, "cublas gemm failed with status %d", rc);
			return ATB_OK;
		}
		if (ns > 0 && flops / ((double)ns * 1e-9) > *rate)
			*rate = flops / ((double)ns * 1e-9);
	}
	return ATB_OK;
}

static enum atb_status measure_gemms(struct atb_cuda *c, struct atb_cuda_events *ev,
				     struct atb_floor_gpu *out, struct atb_error *err)
{
	const struct atb_cuda_device_info *d = atb_cuda_info(c);
	struct gemm_ctx g = {.c = c};
	size_t bytes;
	enum atb_status st = ATB_OK;
	int rc;

	pthread_once(&cb_once, cb_load);
	if (!cb.create) {
		snprintf(out->cublas_why, sizeof(out->cublas_why), "%s", cb.why);
		return ATB_OK;
	}
	/* 8192^3 keeps every SM busy for milliseconds; smaller where memory is short */
	g.n = d->total_mem_bytes >= (size_t)4 << 30 ? 8192 : 4096;
	bytes = (size_t)g.n * (size_t)g.n * 4;
	if ((rc = cb.create(&g.h))) {
		snprintf(out->cublas_why, sizeof(out->cublas_why), "cublasCreate failed with status %d",
			 rc);
		return ATB_OK;
	}
	cb.set_stream(g.h, atb_cuda_stream(c));
	if ((st = atb_cuda_alloc(c, bytes, &g.a, err)) || (st = atb_cuda_alloc(c, bytes, &g.b, err)) ||
	    (st = atb_cuda_alloc(c, bytes, &g.cc, err)))
		goto out;
	/* 0x3c bytes: ordinary finite values in every precision (1.06 in fp16,
	   0.0115 in fp32 and bf16), so no denormal or zero shortcut */
	if ((st = atb_cuda_memset8(c, g.a, 0x3c, bytes, err)) ||
	    (st = atb_cuda_memset8(c, g.b, 0x3c, bytes, err)))
		goto out;
	for (g.which = 0; g.which < 3; g.which++) {
		double *rate = g.which == 0 ? &out->gemm_flops_per_s_fp32
			: g.which == 1 ? &out->gemm_flops_per_s_fp16 : &out->gemm_flops_per_s_bf16;

		if ((st = best_gemm(&g, ev, 5, rate, out->cublas_why, sizeof(out->cublas_why), err)))
			goto out;
	}
out:
	atb_cuda_stream_sync(c, NULL);
	cb.destroy(g.h);
	atb_cuda_free(c, g.a);
	atb_cuda_free(c, g.b);
	atb_cuda_free(c, g.cc);
	return st;
}

enum atb_status atb_floor_measure_gpu(int ordinal, uint64_t copy_bytes, struct atb_floor_gpu *out,
				      struct atb_error *err)
{
	struct atb_cuda *c = NULL;
	struct atb_cuda_events *ev = NULL;
	const struct atb_cuda_device_info *d;
	uint64_t src = 0, dst = 0;
	enum atb_status st;
	int64_t ns;
	int r;

	memset(out, 0, sizeof(*out));
	out->ordinal = ordinal;
	if ((st = atb_cuda_open(ordinal, &c, err)))
		return st;
	d = atb_cuda_info(c);
	snprintf(out->device, sizeof(out->device), "%.100s", d->name);
	out->attr_bw_bytes_per_s = 2.0 * (double)d->mem_clock_khz * 1e3 *
				   (double)d->mem_bus_width_bits / 8.0;
	if (!copy_bytes) {
		copy_bytes = (uint64_t)1 << 30;
		if (d->total_mem_bytes / 8 < copy_bytes)
			copy_bytes = d->total_mem_bytes / 8;
	}
	copy_bytes &= ~(uint64_t)255;
	if ((st = atb_cuda_events_new(c, &ev, err)) ||
	    (st = atb_cuda_alloc(c, (size_t)copy_bytes, &src, err)) ||
	    (st = atb_cuda_alloc(c, (size_t)copy_bytes, &dst, err)) ||
	    (st = atb_cuda_memset8(c, src, 0x3c, (size_t)copy_bytes, err)) ||
	    (st = atb_cuda_memset8(c, dst, 0, (size_t)copy_bytes, err)) ||
	    (st = atb_cuda_d2d_async(c, dst, src, (size_t)copy_bytes, err)) ||
	    (st = atb_cuda_stream_sync(c, err)))
		goto out;
	for (r = 0; r < 10; r++) {
		if ((st = atb_cuda_events_record_start(ev, err)) ||
		    (st = atb_cuda_d2d_async(c, dst, src, (size_t)copy_bytes, err)) ||
		    (st = atb_cuda_events_record_stop(ev, err)) ||
		    (st = atb_cuda_events_elapsed_ns(ev, &ns, err)))
			goto out;
		/* a copy reads every byte and writes it once */
		if (ns > 0 && 2.0 * (double)copy_bytes / ((double)ns * 1e-9) > out->copy_bw_bytes_per_s)
			out->copy_bw_bytes_per_s = 2.0 * (double)copy_bytes / ((double)ns * 1e-9);
	}
	atb_cuda_free(c, src);
	atb_cuda_free(c, dst);
	src = dst = 0;
	if ((st = measure_gemms(c, ev, out, err)))
		goto out;
	snprintf(out->method, sizeof(out->method),
		 "%.100s: best of 10 cuMemcpyDtoDAsync of %llu MiB (read + write); cublas gemm "
		 "best of 5 (fp32 sgemm, fp16/bf16 gemmex fp32 compute)%s%.140s",
		 out->device, (unsigned long long)(copy_bytes >> 20),
		 out->cublas_why[0] ? ": " : "", out->cublas_why);
out:
	atb_cuda_free(c, src);
	atb_cuda_free(c, dst);
	atb_cuda_events_free(ev);
	atb_cuda_close(c);
	return st;
}

void atb_floor_gpu_caps(const struct atb_floor_gpu *g, struct atb_floor_caps *out)
{
	double peak = g->gemm_flops_per_s_fp32;

	memset(out, 0, sizeof(*out));
	if (g->gemm_flops_per_s_fp16 > peak)
		peak = g->gemm_flops_per_s_fp16;
	if (g->gemm_flops_per_s_bf16 > peak)
		peak = g->gemm_flops_per_s_bf16;
	out->mem_bw_bytes_per_s = g->copy_bw_bytes_per_s > g->attr_bw_bytes_per_s
					  ? g->copy_bw_bytes_per_s : g->attr_bw_bytes_per_s;
	out->peak_flops_per_s = peak * ATB_FLOOR_GPU_GEMM_HEADROOM;
	out->threads = 0;
	snprintf(out->isa, sizeof(out->isa), "cuda");
	snprintf(out->method, sizeof(out->method),
		 "gpu%d: bw max(copy %.3g, attributes %.3g) B/s; peak %.3g flop/s x %.1f headroom%s",
		 g->ordinal, g->copy_bw_bytes_per_s, g->attr_bw_bytes_per_s, peak,
		 ATB_FLOOR_GPU_GEMM_HEADROOM, peak > 0 ? "" : " (no cublas: flops term off)");
}
