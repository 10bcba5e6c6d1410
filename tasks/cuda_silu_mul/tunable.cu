// SPDX-License-Identifier: GPL-3.0-or-later
// cuda_silu_mul tunable template.  Knobs: BLOCK threads per token; PAIRS 1
// moves two bf16 per access (__nv_bfloat162) when D is even (both halves of
// the row then start on a 4-byte boundary), scalar otherwise.
#include <cuda_bf16.h>

#include "atb/kernel.h"

#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef PAIRS
#define PAIRS 0
#endif

__device__ float silu_mul(float g, float u)
{
	return g / (1.f + __expf(-g)) * u;
}

__global__ void __launch_bounds__(BLOCK) silu_mul_rows(const __nv_bfloat16 *__restrict__ x,
						       __nv_bfloat16 *__restrict__ y, long long d)
{
	const __nv_bfloat16 *xr = x + (long long)blockIdx.x * 2 * d;
	__nv_bfloat16 *yr = y + (long long)blockIdx.x * d;

#if PAIRS
	if (d % 2 == 0) {
		const __nv_bfloat162 *g2 = (const __nv_bfloat162 *)xr, *u2 = g2 + d / 2;
		__nv_bfloat162 *y2 = (__nv_bfloat162 *)yr;
		for (long long p = threadIdx.x; p < d / 2; p += BLOCK) {
			float2 g = __bfloat1622float2(g2[p]), u = __bfloat1622float2(u2[p]);
			y2[p] = __floats2bfloat162_rn(silu_mul(g.x, u.x), silu_mul(g.y, u.y));
		}
		return;
	}
#endif
	for (long long i = threadIdx.x; i < d; i += BLOCK)
		yr[i] = __float2bfloat16(silu_mul(__bfloat162float(xr[i]),
						  __bfloat162float(xr[d + i])));
}

extern "C" int atb_kernel(const struct atb_kernel_args *a)
{
	if (a->nbuffers != 2 || a->nints != 2)
		return 2;
	long long t = a->ints[0], d = a->ints[1];
	if (t <= 0 || d <= 0)
		return 0;
	silu_mul_rows<<<(unsigned)t, BLOCK, 0, (cudaStream_t)a->stream>>>(
		(const __nv_bfloat16 *)a->buffers[0], (__nv_bfloat16 *)a->buffers[1], d);
	return cudaGetLastError() != cudaSuccess;
}
