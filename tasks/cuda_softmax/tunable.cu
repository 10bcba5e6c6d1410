// SPDX-License-Identifier: GPL-3.0-or-later
// cuda_softmax tunable template.  Knobs: BLOCK threads per row; ONLINE 1
// fuses the max and the sum into one pass (online softmax), 0 keeps two.
#include "atb/kernel.h"

#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef ONLINE
#define ONLINE 0
#endif

__device__ void warp_pair(float &m, float &s)
{
	for (int o = 16; o > 0; o /= 2) {
		float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
		float mm = fmaxf(m, m2);
		s = (m == -INFINITY ? 0.f : s * __expf(m - mm)) +
		    (m2 == -INFINITY ? 0.f : s2 * __expf(m2 - mm));
		m = mm;
	}
}

__device__ void block_pair(float &m, float &s)
{
	__shared__ float pm[BLOCK / 32], ps[BLOCK / 32];
	int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
	warp_pair(m, s);
	__syncthreads();
	if (lane == 0) {
		pm[warp] = m;
		ps[warp] = s;
	}
	__syncthreads();
	m = pm[0];
	s = ps[0];
	for (int i = 1; i < BLOCK / 32; i++) {
		float mm = fmaxf(m, pm[i]);
		s = s * __expf(m - mm) + ps[i] * __expf(pm[i] - mm);
		m = mm;
	}
}

__global__ void __launch_bounds__(BLOCK) softmax_rows(const float *__restrict__ x,
						      float *__restrict__ y, long long cols)
{
	const float *xr = x + (long long)blockIdx.x * cols;
	float *yr = y + (long long)blockIdx.x * cols;
	float m = -INFINITY, s = 0.f;
#if ONLINE
	for (long long c = threadIdx.x; c < cols; c += BLOCK) {
		float v = xr[c];
		if (v > m) {
			s = (m == -INFINITY ? 0.f : s * __expf(m - v)) + 1.f;
			m = v;
		} else {
			s += __expf(v - m);
		}
	}
#else
	for (long long c = threadIdx.x; c < cols; c += BLOCK)
		m = fmaxf(m, xr[c]);
	__shared__ float gm;
	{
		float t = m, z = 0.f;  /* the pair reduction with zero sums is a max */
		block_pair(t, z);
		if (threadIdx.x == 0)
			gm = t;
		__syncthreads();
		m = gm;
	}
	for (long long c = threadIdx.x; c < cols; c += BLOCK)
		s += __expf(xr[c] - m);
#endif
	block_pair(m, s);
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
