// SPDX-License-Identifier: GPL-3.0-or-later
// cuda_relu naive starting point: one thread per element, a branch, scalar loads.
#include "atb/kernel.h"

__global__ void relu_naive(const float *x, float *y, long long n)
{
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) {
		if (x[i] > 0)
			y[i] = x[i];
		else
			y[i] = 0;
	}
}

extern "C" int atb_kernel(const struct atb_kernel_args *a)
{
	if (a->nbuffers != 2 || a->nints != 1)
		return 2;
	long long n = a->ints[0];
	if (n <= 0)
		return 0;
	relu_naive<<<(unsigned)((n + 63) / 64), 64, 0, (cudaStream_t)a->stream>>>(
		(const float *)a->buffers[0], (float *)a->buffers[1], n);
	return cudaGetLastError() != cudaSuccess;
}
