// SPDX-License-Identifier: GPL-3.0-or-later
// cuda_merge_attn_states tunable template.  Knobs: BLOCK threads per block;
// PER_THREAD consecutive elements of one (token, head) per thread (the
// weights computed once for them).
#include <cuda_bf16.h>

#include "atb/kernel.h"

#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef PER_THREAD
#define PER_THREAD 1
#endif

__device__ __forceinline__ void weights(float lp, float ls, float &wp, float &ws, float &lse)
{
	float m = fmaxf(lp, ls), a = __expf(lp - m), b = __expf(ls - m), s = a + b;
	wp = a / s;
	ws = b / s;
	lse = m + __logf(s);
}

__global__ void __launch_bounds__(BLOCK) merge_chunks(
	const __nv_bfloat16 *__restrict__ p, const float *__restrict__ lp,
	const __nv_bfloat16 *__restrict__ s, const float *__restrict__ ls,
	__nv_bfloat16 *__restrict__ o, float *__restrict__ lo, long long t, long long h,
	long long dh)
{
	long long chunks = (dh + PER_THREAD - 1) / PER_THREAD;
	long long k = (long long)blockIdx.x * BLOCK + threadIdx.x;
	if (k >= t * h * chunks)
		return;
	long long th = k / chunks, d0 = (k % chunks) * PER_THREAD, tok = th / h, head = th % h;
	float wp, ws, lse;
	weights(lp[head * t + tok], ls[head * t + tok], wp, ws, lse);
#pragma unroll
	for (int j = 0; j < PER_THREAD; j++) {
		long long d = d0 + j;
		if (d < dh)
			o[th * dh + d] = __float2bfloat16(__bfloat162float(p[th * dh + d]) * wp +
							  __bfloat162float(s[th * dh + d]) * ws);
	}
	if (d0 == 0)
		lo[head * t + tok] = lse;
}

extern "C" int atb_kernel(const struct atb_kernel_args *a)
{
	if (a->nbuffers != 6 || a->nints != 3)
		return 2;
	long long t = a->ints[0], h = a->ints[1], dh = a->ints[2];
	long long n = t * h * ((dh + PER_THREAD - 1) / PER_THREAD);
	if (t * h * dh <= 0)
		return 0;
	merge_chunks<<<(unsigned)((n + BLOCK - 1) / BLOCK), BLOCK, 0, (cudaStream_t)a->stream>>>(
		(const __nv_bfloat16 *)a->buffers[0], (const float *)a->buffers[1],
		(const __nv_bfloat16 *)a->buffers[2], (const float *)a->buffers[3],
		(__nv_bfloat16 *)a->buffers[4], (float *)a->buffers[5], t, h, dh);
	return cudaGetLastError() != cudaSuccess;
}
