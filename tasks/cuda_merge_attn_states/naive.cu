// SPDX-License-Identifier: GPL-3.0-or-later
// cuda_merge_attn_states naive starting point: one thread per (token, head)
// looping over the head dimension (uncoalesced: neighbouring threads read
// Dh elements apart).
#include <cuda_bf16.h>

#include "atb/kernel.h"
#include "common.cuh"

__global__ void merge_naive(const __nv_bfloat16 *p, const float *lp, const __nv_bfloat16 *s,
			    const float *ls, __nv_bfloat16 *o, float *lo, long long t, long long h,
			    long long dh)
{
	long long th = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (th >= t * h)
		return;
	long long tok = th / h, head = th % h;
	merge_w w = merge_weights(lp[head * t + tok], ls[head * t + tok]);
	for (long long d = 0; d < dh; d++)
		o[th * dh + d] = __float2bfloat16(__bfloat162float(p[th * dh + d]) * w.wp +
						  __bfloat162float(s[th * dh + d]) * w.ws);
	lo[head * t + tok] = w.lse;
}

extern "C" int atb_kernel(const struct atb_kernel_args *a)
{
	if (a->nbuffers != 6 || a->nints != 3)
		return 2;
	long long t = a->ints[0], h = a->ints[1], dh = a->ints[2];
	if (t * h * dh <= 0)
		return 0;
	merge_naive<<<(unsigned)((t * h + 127) / 128), 128, 0, (cudaStream_t)a->stream>>>(
		(const __nv_bfloat16 *)a->buffers[0], (const float *)a->buffers[1],
		(const __nv_bfloat16 *)a->buffers[2], (const float *)a->buffers[3],
		(__nv_bfloat16 *)a->buffers[4], (float *)a->buffers[5], t, h, dh);
	return cudaGetLastError() != cudaSuccess;
}
