// SPDX-License-Identifier: GPL-3.0-or-later
// cuda_relu honest baseline: grid-stride loop over float4, scalar tail.
// Launches on the runner's stream (args->stream); returns the launch status.
#include "atb/kernel.h"

__global__ void relu_f4(const float4 *__restrict__ x, float4 *__restrict__ y, long long n4)
{
	long long stride = (long long)gridDim.x * blockDim.x;
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
		float4 v = x[i];
		v.x = fmaxf(v.x, 0.f);
		v.y = fmaxf(v.y, 0.f);
		v.z = fmaxf(v.z, 0.f);
		v.w = fmaxf(v.w, 0.f);
		y[i] = v;
	}
}

__global__ void relu_tail(const float *__restrict__ x, float *__restrict__ y, long long from,
			  long long n)
{
	long long i = from + (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[i] = fmaxf(x[i], 0.f);
}

extern "C" int atb_kernel(const struct atb_kernel_args *a)
{
	if (a->nbuffers != 2 || a->nints != 1)
		return 2;
	long long n = a->ints[0], n4 = n / 4;
	const float *x = (const float *)a->buffers[0];
	float *y = (float *)a->buffers[1];
	cudaStream_t s = (cudaStream_t)a->stream;

	if (n4 > 0) {
		long long want = (n4 + 255) / 256;
		int blocks = (int)(want < 132 * 16 ? want : 132 * 16);
		relu_f4<<<blocks, 256, 0, s>>>((const float4 *)x, (float4 *)y, n4);
	}
	if (n - 4 * n4 > 0)
		relu_tail<<<1, 32, 0, s>>>(x, y, 4 * n4, n);
	return cudaGetLastError() != cudaSuccess;
}
