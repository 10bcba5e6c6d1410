// SPDX-License-Identifier: GPL-3.0-or-later
// cuda_gemm naive starting point: the textbook kernel, one thread per output
// element, every operand read from global memory.
#include "atb/kernel.h"

__global__ void gemm_naive(const float *A, const float *B, float *C, int m, int n, int k)
{
	int row = blockIdx.y * blockDim.y + threadIdx.y;
	int col = blockIdx.x * blockDim.x + threadIdx.x;
	if (row < m && col < n) {
		float acc = 0.f;
		for (int i = 0; i < k; i++)
			acc += A[(long long)row * k + i] * B[(long long)i * n + col];
		C[(long long)row * n + col] = acc;
	}
}

extern "C" int atb_kernel(const struct atb_kernel_args *a)
{
	if (a->nbuffers != 3 || a->nints != 3)
		return 2;
	int m = (int)a->ints[0], n = (int)a->ints[1], k = (int)a->ints[2];
	if (m <= 0 || n <= 0)
		return 0;
	dim3 block(16, 16), grid((n + 15) / 16, (m + 15) / 16);
	gemm_naive<<<grid, block, 0, (cudaStream_t)a->stream>>>(
		(const float *)a->buffers[0], (const float *)a->buffers[1], (float *)a->buffers[2],
		m, n, k);
	return cudaGetLastError() != cudaSuccess;
}
