// SPDX-License-Identifier: GPL-3.0-or-later
// cuda_relu tunable template.  Knobs (build-time macros): BLOCK threads per
// block, VEC elements per load (1, 2 or 4), BLOCKS_PER_SM grid size per SM.
#include "atb/kernel.h"

#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef VEC
#define VEC 4
#endif
#ifndef BLOCKS_PER_SM
#define BLOCKS_PER_SM 8
#endif

#if VEC == 4
typedef float4 vec_t;
#elif VEC == 2
typedef float2 vec_t;
#else
typedef float vec_t;
#endif

__device__ __forceinline__ float relu1(float v) { return fmaxf(v, 0.f); }
__device__ __forceinline__ float2 relu1(float2 v) { return make_float2(relu1(v.x), relu1(v.y)); }
__device__ __forceinline__ float4 relu1(float4 v)
{
	return make_float4(relu1(v.x), relu1(v.y), relu1(v.z), relu1(v.w));
}

__global__ void __launch_bounds__(BLOCK) relu_vec(const vec_t *__restrict__ x,
						  vec_t *__restrict__ y, long long nv)
{
	long long stride = (long long)gridDim.x * BLOCK;
	for (long long i = (long long)blockIdx.x * BLOCK + threadIdx.x; i < nv; i += stride)
		y[i] = relu1(x[i]);
}

__global__ void relu_tail(const float *__restrict__ x, float *__restrict__ y, long long from,
			  long long n)
{
	long long i = from + threadIdx.x;
	if (i < n)
		y[i] = fmaxf(x[i], 0.f);
}

extern "C" int atb_kernel(const struct atb_kernel_args *a)
{
	if (a->nbuffers != 2 || a->nints != 1)
		return 2;
	long long n = a->ints[0], nv = n / VEC;
	const float *x = (const float *)a->buffers[0];
	float *y = (float *)a->buffers[1];
	cudaStream_t s = (cudaStream_t)a->stream;
	int dev = 0, sms = 132;

	cudaGetDevice(&dev);
	cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
	if (nv > 0) {
		long long want = (nv + BLOCK - 1) / BLOCK, cap = (long long)sms * BLOCKS_PER_SM;
		relu_vec<<<(unsigned)(want < cap ? want : cap), BLOCK, 0, s>>>(
			(const vec_t *)x, (vec_t *)y, nv);
	}
	if (n - VEC * nv > 0)
		relu_tail<<<1, 32, 0, s>>>(x, y, VEC * nv, n);
	return cudaGetLastError() != cudaSuccess;
}
