// SPDX-License-Identifier: GPL-3.0-or-later
// cuda_softmax honest baseline: one 256-thread block per row; max, sum of
// exponentials, then scale, each reduction by warp shuffles.
#include "atb/kernel.h"

#define BLOCK 256

__device__ float block_reduce(float v, bool is_max)
{
	__shared__ float part[BLOCK / 32];
	int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
	for (int o = 16; o > 0; o /= 2) {
		float w = __shfl_xor_sync(0xffffffffu, v, o);
		v = is_max ? fmaxf(v, w) : v + w;
	}
	__syncthreads();
	if (lane == 0)
		part[warp] = v;
	__syncthreads();
	v = part[0];
	for (int i = 1; i < BLOCK / 32; i++)
		v = is_max ? fmaxf(v, part[i]) : v + part[i];
	return v;
}

__global__ void __launch_bounds__(BLOCK) softmax_rows(const float *__restrict__ x,
						      float *__restrict__ y, long long cols)
{
	const float *xr = x + (long long)blockIdx.x * cols;
	float *yr = y + (long long)blockIdx.x * cols;
	float m = -INFINITY, s = 0.f;

	for (long long c = threadIdx.x; c < cols; c += BLOCK)
		m = fmaxf(m, xr[c]);
	m = block_reduce(m, true);
	for (long long c = threadIdx.x; c < cols; c += BLOCK)
		s += __expf(xr[c] - m);
	s = block_reduce(s, false);
	float inv = 1.f / s;
	for (long long c = threadIdx.x; c < cols; c += BLOCK)
		yr[c] = __expf(xr[c] - m) * inv;
}

extern "C" int atb_kernel(const struct atb_kernel_args *a)
{
	if (a->nbuffers != 2 || a->nints != 2)
		return 2;
	long long rows = a->ints[0], cols = a->ints[1];
	if (rows <= 0 || cols <= 0)
		return 0;
	softmax_rows<<<(unsigned)rows, BLOCK, 0, (cudaStream_t)a->stream>>>(
		(const float *)a->buffers[0], (float *)a->buffers[1], cols);
	return cudaGetLastError() != cudaSuccess;
}
