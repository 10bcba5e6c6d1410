// SPDX-License-Identifier: GPL-3.0-or-later
// cuda_silu_mul honest baseline: one 1024-thread block per token, threads
// striding over the row (coalesced), fp32 math; vLLM's act_and_mul design.
#include <cuda_bf16.h>

#include "atb/kernel.h"

#define BLOCK 1024

__global__ void __launch_bounds__(BLOCK) silu_mul_rows(const __nv_bfloat16 *__restrict__ x,
						       __nv_bfloat16 *__restrict__ y, long long d)
{
	const __nv_bfloat16 *xr = x + (long long)blockIdx.x * 2 * d;
	__nv_bfloat16 *yr = y + (long long)blockIdx.x * d;

	for (long long i = threadIdx.x; i < d; i += blockDim.x) {
		float g = __bfloat162float(__ldg(xr + i)), u = __bfloat162float(__ldg(xr + d + i));
		yr[i] = __float2bfloat16(g / (1.f + __expf(-g)) * u);
	}
}

extern "C" int atb_kernel(const struct atb_kernel_args *a)
{
	if (a->nbuffers != 2 || a->nints != 2)
		return 2;
	long long t = a->ints[0], d = a->ints[1];
	if (t <= 0 || d <= 0)
		return 0;
	silu_mul_rows<<<(unsigned)t, (unsigned)(d < BLOCK ? (d + 31) / 32 * 32 : BLOCK), 0,
			(cudaStream_t)a->stream>>>((const __nv_bfloat16 *)a->buffers[0],
						   (__nv_bfloat16 *)a->buffers[1], d);
	return cudaGetLastError() != cudaSuccess;
}
