// SPDX-License-Identifier: GPL-3.0-or-later
// cuda_reduce_sum tunable template: one block per row, warp-shuffle block
// reduction.  Knobs: BLOCK threads per row; UNROLL independent accumulators
// per thread (more loads in flight).
#include "atb/kernel.h"

#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef UNROLL
#define UNROLL 1
#endif

__global__ void __launch_bounds__(BLOCK) rowsum(const float *__restrict__ x,
						float *__restrict__ y, long long c)
{
	__shared__ float part[BLOCK / 32];
	const float *xr = x + (long long)blockIdx.x * c;
	float acc[UNROLL];
	long long k = threadIdx.x;
#pragma unroll
	for (int u = 0; u < UNROLL; u++)
		acc[u] = 0.f;
	for (; k + (UNROLL - 1) * BLOCK < c; k += UNROLL * BLOCK) {
#pragma unroll
		for (int u = 0; u < UNROLL; u++)
			acc[u] += xr[k + u * BLOCK];
	}
	for (; k < c; k += BLOCK)
		acc[0] += xr[k];
	float v = 0.f;
#pragma unroll
	for (int u = 0; u < UNROLL; u++)
		v += acc[u];
	for (int o = 16; o > 0; o /= 2)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	if (threadIdx.x % 32 == 0)
		part[threadIdx.x / 32] = v;
	__syncthreads();
	if (threadIdx.x == 0) {
		v = 0.f;
		for (int i = 0; i < BLOCK / 32; i++)
			v += part[i];
		y[blockIdx.x] = v;
	}
}

extern "C" int atb_kernel(const struct atb_kernel_args *a)
{
	if (a->nbuffers != 2 || a->nints != 2)
		return 2;
	long long r = a->ints[0], c = a->ints[1];
	if (r <= 0 || c <= 0)
		return 0;
	rowsum<<<(unsigned)r, BLOCK, 0, (cudaStream_t)a->stream>>>((const float *)a->buffers[0],
								   (float *)a->buffers[1], c);
	return cudaGetLastError() != cudaSuccess;
}
