// SPDX-License-Identifier: GPL-3.0-or-later
// cuda_rmsnorm_residual honest baseline: one 512-thread block per row; add
// the residual, store it, accumulate the sum of squares (one pass), reduce
// by warp shuffles, then scale the stored residual by W.
#include <cuda_bf16.h>

#include "atb/kernel.h"

#define BLOCK 512

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

__global__ void __launch_bounds__(BLOCK) add_rmsnorm_rows(
	const __nv_bfloat16 *__restrict__ x, __nv_bfloat16 *__restrict__ r,
	const __nv_bfloat16 *__restrict__ w, __nv_bfloat16 *__restrict__ y, long long d, float eps)
{
	long long off = (long long)blockIdx.x * d;
	float q = 0.f;

	for (long long c = threadIdx.x; c < d; c += BLOCK) {
		__nv_bfloat16 s = __float2bfloat16(__bfloat162float(x[off + c]) +
						   __bfloat162float(r[off + c]));
		float v = __bfloat162float(s);
		r[off + c] = s;
		q += v * v;
	}
	float inv = rsqrtf(block_sum(q) / (float)d + eps);
	for (long long c = threadIdx.x; c < d; c += BLOCK)
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
