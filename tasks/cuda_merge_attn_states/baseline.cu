// SPDX-License-Identifier: GPL-3.0-or-later
// cuda_merge_attn_states honest baseline: one thread per output element of
// a flat grid (coalesced), fp32 math; element 0 of each (token, head)
// writes the merged log-sum-exp.
#include <cuda_bf16.h>

#include "atb/kernel.h"
#include "common.cuh"

#define BLOCK 256

__global__ void __launch_bounds__(BLOCK) merge_flat(
	const __nv_bfloat16 *__restrict__ p, const float *__restrict__ lp,
	const __nv_bfloat16 *__restrict__ s, const float *__restrict__ ls,
	__nv_bfloat16 *__restrict__ o, float *__restrict__ lo, long long t, long long h,
	long long dh)
{
	long long i = (long long)blockIdx.x * BLOCK + threadIdx.x;
	if (i >= t * h * dh)
		return;
	long long th = i / dh, tok = th / h, head = th % h;
	merge_w w = merge_weights(__ldg(lp + head * t + tok), __ldg(ls + head * t + tok));
	o[i] = __float2bfloat16(__bfloat162float(p[i]) * w.wp + __bfloat162float(s[i]) * w.ws);
	if (i % dh == 0)
		lo[head * t + tok] = w.lse;
}

extern "C" int atb_kernel(const struct atb_kernel_args *a)
{
	if (a->nbuffers != 6 || a->nints != 3)
		return 2;
	long long t = a->ints[0], h = a->ints[1], dh = a->ints[2], n = t * h * dh;
	if (n <= 0)
		return 0;
	merge_flat<<<(unsigned)((n + BLOCK - 1) / BLOCK), BLOCK, 0, (cudaStream_t)a->stream>>>(
		(const __nv_bfloat16 *)a->buffers[0], (const float *)a->buffers[1],
		(const __nv_bfloat16 *)a->buffers[2], (const float *)a->buffers[3],
		(__nv_bfloat16 *)a->buffers[4], (float *)a->buffers[5], t, h, dh);
	return cudaGetLastError() != cudaSuccess;
}
