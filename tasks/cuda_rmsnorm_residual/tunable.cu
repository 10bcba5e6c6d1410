// SPDX-License-Identifier: GPL-3.0-or-later
// cuda_rmsnorm_residual tunable template.  Knobs: BLOCK threads per row;
// PAIRS 1 moves two bf16 per access (__nv_bfloat162) when the row starts on
// a 4-byte boundary (D even), with a scalar tail otherwise.
#include <cuda_bf16.h>

#include "atb/kernel.h"

#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef PAIRS
#define PAIRS 0
#endif

__device__ float block_sum(float v)
{
	__shared__ float part[BLOCK / 32];
	int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
	for (int o = 16; o > 0; o /= 2)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	__syncthreads();
	if (lane == 0)
		part[warp] = v;
	__syncthreads();
	v = 0.f;
	for (int i = 0; i < BLOCK / 32; i++)
		v += part[i];
	return v;
}

__device__ float add_one(const __nv_bfloat16 *x, __nv_bfloat16 *r, long long i)
{
	__nv_bfloat16 s = __float2bfloat16(__bfloat162float(x[i]) + __bfloat162float(r[i]));
	float v = __bfloat162float(s);
	r[i] = s;
	return v * v;
}

__global__ void __launch_bounds__(BLOCK) add_rmsnorm_rows(
	const __nv_bfloat16 *__restrict__ x, __nv_bfloat16 *__restrict__ r,
	const __nv_bfloat16 *__restrict__ w, __nv_bfloat16 *__restrict__ y, long long d, float eps)
{
	long long off = (long long)blockIdx.x * d, c = threadIdx.x;
	float q = 0.f;

#if PAIRS
	if (d % 2 == 0) {
		const __nv_bfloat162 *x2 = (const __nv_bfloat162 *)(x + off);
		__nv_bfloat162 *r2 = (__nv_bfloat162 *)(r + off);
		for (long long p = threadIdx.x; p < d / 2; p += BLOCK) {
			float2 a = __bfloat1622float2(x2[p]), b = __bfloat1622float2(r2[p]);
			__nv_bfloat162 s = __floats2bfloat162_rn(a.x + b.x, a.y + b.y);
			float2 v = __bfloat1622float2(s);
			r2[p] = s;
			q += v.x * v.x + v.y * v.y;
		}
		c = d;  /* nothing left */
	}
#endif
	for (; c < d; c += BLOCK)
		q += add_one(x + off, r + off, c);
	float inv = rsqrtf(block_sum(q) / (float)d + eps);
	for (c = threadIdx.x; c < d; c += BLOCK)
		y[off + c] = __float2bfloat16(__bfloat162float(r[off + c]) * inv *
					      __bfloat162float(w[c]));
}

extern "C" int atb_kernel(const struct atb_kernel_args *a)
{
	if (a->nbuffers != 4 || a->nints != 2 || a->nreals != 1)
		return 2;
	long long t = a->ints[0], d = a->ints[1];
	if (t <= 0 || d <= 0)
		return 0;
	add_rmsnorm_rows<<<(unsigned)t, BLOCK, 0, (cudaStream_t)a->stream>>>(
		(const __nv_bfloat16 *)a->buffers[0], (__nv_bfloat16 *)a->buffers[1],
		(const __nv_bfloat16 *)a->buffers[2], (__nv_bfloat16 *)a->buffers[3], d,
		(float)a->reals[0]);
	return cudaGetLastError() != cudaSuccess;
}
