/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * atb_cuda_compare: the comparison kernel of compare.cu (as PTX, from
 * compare_ptx.inc) launched on the runner's stream, its five results read
 * back, and the failing element's two values fetched and widened on the
 * host (runner_elem's conversions, so they read as runner_compare's).  Does
 * not: judge, or fall back to the host (the caller does, on an error).
 */
#include <string.h>

#include "atb/cuda_compare.h"
#include "cuda_int.h"
/* the kernel as PTX text (scripts/gen-cuda-ptx), before banned.h as every header */
#include "compare_ptx.inc"
#include "banned.h"

static const char *const entry[] = {
	[ATB_DTYPE_FP32] = "atb_dcmp_fp32", [ATB_DTYPE_FP64] = "atb_dcmp_fp64",
	[ATB_DTYPE_INT32] = "atb_dcmp_int32", [ATB_DTYPE_INT64] = "atb_dcmp_int64",
	[ATB_DTYPE_FP16] = "atb_dcmp_fp16", [ATB_DTYPE_BF16] = "atb_dcmp_bf16",
};

#define NENTRY (sizeof(entry) / sizeof(entry[0]))

/* Threads a block; blocks at most (the grid strides over the rest): a few
   per SM of any GPU, enough to keep its memory busy. */
#define CMP_THREADS 256u
#define CMP_MAX_BLOCKS 4096u

enum atb_status atb_cuda_compare_load(struct atb_cuda *c, struct atb_error *err)
{
	size_t i;

	if (c->cmp_mod)
		return ATB_OK;
	ATB_CU(cuModuleLoadData(&c->cmp_mod, compare_ptx), err);
	for (i = 0; i < NENTRY; i++) {
		enum atb_status st = ATB_CU_CALL(cuModuleGetFunction(&c->cmp_fn[i], c->cmp_mod,
								     entry[i]), err);

		if (st) {
			atbi_cu.cuModuleUnload(c->cmp_mod);
			c->cmp_mod = NULL;
			return st;
		}
	}
	if (!c->cmp_out) {
		enum atb_status st = ATB_CU_CALL(cuMemAlloc(&c->cmp_out, 5 * sizeof(uint64_t)), err);

		if (st) {
			atbi_cu.cuModuleUnload(c->cmp_mod);
			c->cmp_mod = NULL;
			return st;
		}
	}
	return ATB_OK;
}

/* One element at device address p + k (dtype d) as a double, widened as
   runner_elem (runner/check.c) widens it. */
static enum atb_status fetch(struct atb_cuda *c, uint64_t p, enum atb_dtype d, size_t k,
			     double *v, struct atb_error *err)
{
	union { float f; double x; int32_t i; int64_t l; uint16_t h; } u = {0};
	size_t es = atb_dtype_size(d);
	enum atb_status st;

	if ((st = atb_cuda_d2h(c, &u, p + (uint64_t)k * es, es, err)))
		return st;
	switch (d) {
	case ATB_DTYPE_FP32: *v = u.f; break;
	case ATB_DTYPE_FP64: *v = u.x; break;
	case ATB_DTYPE_INT32: *v = u.i; break;
	case ATB_DTYPE_INT64: *v = (double)u.l; break;
	case ATB_DTYPE_FP16: *v = atb_fp16_to_float(u.h); break;
	case ATB_DTYPE_BF16: *v = atb_bf16_to_float(u.h); break;
	}
	return ATB_OK;
}

enum atb_status atb_cuda_compare(struct atb_cuda *c, uint64_t ref, uint64_t got,
				 enum atb_dtype d, size_t n, double atol, double rtol,
				 struct atb_cuda_cmp *out, struct atb_error *err)
{
	/* max_abs, max_rel (double bits, 0.0), first_bad (none), nbad, nnan */
	uint64_t res[5] = {0, 0, UINT64_MAX, 0, 0};
	unsigned long long nn = n;
	unsigned blocks;
	void *params[6];
	enum atb_status st;
	double a = atol, r = rtol;

	memset(out, 0, sizeof(*out));
	out->first_bad = -1;
	if ((size_t)d >= NENTRY)
		return atb_error_set(err, ATB_ERR_USAGE, "compare on the gpu: unknown dtype %d",
				     (int)d);
	if ((st = atb_cuda_compare_load(c, err)))
		return st;
	if (!n)
		return ATB_OK;
	if ((st = atb_cuda_h2d(c, c->cmp_out, res, sizeof(res), err)))
		return st;
	blocks = n / CMP_THREADS >= CMP_MAX_BLOCKS ? CMP_MAX_BLOCKS
						    : (unsigned)((n + CMP_THREADS - 1) / CMP_THREADS);
	params[0] = &ref;
	params[1] = &got;
	params[2] = &nn;
	params[3] = &a;
	params[4] = &r;
	params[5] = &c->cmp_out;
	ATB_CU(cuLaunchKernel(c->cmp_fn[d], blocks, 1, 1, CMP_THREADS, 1, 1, 0, c->stream, params,
			      NULL), err);
	if ((st = atb_cuda_d2h(c, res, c->cmp_out, sizeof(res), err)))
		return st;
	memcpy(&out->max_abs, &res[0], sizeof(double));
	memcpy(&out->max_rel, &res[1], sizeof(double));
	out->nbad = (size_t)res[3];
	out->nnan = (size_t)res[4];
	if (res[2] != UINT64_MAX) {
		out->first_bad = (long long)res[2];
		if ((st = fetch(c, ref, d, (size_t)res[2], &out->bad_ref, err)) ||
		    (st = fetch(c, got, d, (size_t)res[2], &out->bad_got, err)))
			return st;
	}
	return ATB_OK;
}
