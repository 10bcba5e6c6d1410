// SPDX-License-Identifier: GPL-3.0-or-later
// cuda_gemm tunable template: shared-memory tiling.  Knob: TILE (the square
// tile edge: TILE x TILE threads, each one output).
#include "atb/kernel.h"

#ifndef TILE
#define TILE 16
#endif

__global__ void __launch_bounds__(TILE *TILE) gemm_tiled(const float *__restrict__ A,
							 const float *__restrict__ B,
							 float *__restrict__ C, int m, int n, int k)
{
	__shared__ float As[TILE][TILE], Bs[TILE][TILE + 1];
	int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
	float acc = 0.f;

	for (int t = 0; t < k; t += TILE) {
		int ac = t + threadIdx.x, br = t + threadIdx.y;
		As[threadIdx.y][threadIdx.x] = row < m && ac < k ? A[(long long)row * k + ac] : 0.f;
		Bs[threadIdx.y][threadIdx.x] = br < k && col < n ? B[(long long)br * n + col] : 0.f;
		__syncthreads();
#pragma unroll
		for (int i = 0; i < TILE; i++)
			acc += As[threadIdx.y][i] * Bs[i][threadIdx.x];
		__syncthreads();
	}
	if (row < m && col < n)
		C[(long long)row * n + col] = acc;
}

extern "C" int atb_kernel(const struct atb_kernel_args *a)
{
	if (a->nbuffers != 3 || a->nints != 3)
		return 2;
	int m = (int)a->ints[0], n = (int)a->ints[1], k = (int)a->ints[2];
	if (m <= 0 || n <= 0)
		return 0;
	dim3 block(TILE, TILE), grid((n + TILE - 1) / TILE, (m + TILE - 1) / TILE);
	gemm_tiled<<<grid, block, 0, (cudaStream_t)a->stream>>>(
		(const float *)a->buffers[0], (const float *)a->buffers[1], (float *)a->buffers[2],
		m, n, k);
	return cudaGetLastError() != cudaSuccess;
}
