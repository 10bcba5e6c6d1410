// SPDX-License-Identifier: GPL-3.0-or-later
// cuda_rmsnorm_residual naive starting point: one thread per row, serial
// passes (uncoalesced: neighbouring threads touch rows D elements apart).
#include <cuda_bf16.h>

#include "atb/kernel.h"

__global__ void add_rmsnorm_naive(const __nv_bfloat16 *x, __nv_bfloat16 *r,
				  const __nv_bfloat16 *w, __nv_bfloat16 *y, long long t,
				  long long d, float eps)
{
	long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (row >= t)
		return;
	long long off = row * d;
	float q = 0.f;
	for (long long c = 0; c < d; c++) {
		r[off + c] = __float2bfloat16(__bfloat162float(x[off + c]) +
					      __bfloat162float(r[off + c]));
		float v = __bfloat162float(r[off + c]);
		q += v * v;
	}
	float inv = 1.f / sqrtf(q / (float)d + eps);
	for (long long c = 0; c < d; c++)
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
	add_rmsnorm_naive<<<(unsigned)((t + 127) / 128), 128, 0, (cudaStream_t)a->stream>>>(
		(const __nv_bfloat16 *)a->buffers[0], (__nv_bfloat16 *)a->buffers[1],
		(const __nv_bfloat16 *)a->buffers[2], (__nv_bfloat16 *)a->buffers[3], t, d,
		(float)a->reals[0]);
	return cudaGetLastError() != cudaSuccess;
}
