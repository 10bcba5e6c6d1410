/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * sgemm honest baseline: C = A * B (row-major, fp32), cache-blocked i-k-j
 * loops with the innermost loop streaming over rows of B and C, so the
 * compiler vectorises it at the protocol's -O2 -march=native.  This is the
 * straightforward kernel a user would otherwise write and run.
 */
#include <stdint.h>

#include "atb/kernel.h"

#define BS 64

static int64_t min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

int atb_kernel(const struct atb_kernel_args *args)
{
	const float *restrict A, *restrict B;
	float *restrict C;
	int64_t M, N, K, i, j, k, i0, j0, k0;

	if (args->nbuffers != 3 || args->nints != 3)
		return 1;
	A = args->buffers[0];
	B = args->buffers[1];
	C = args->buffers[2];
	M = args->ints[0];
	N = args->ints[1];
	K = args->ints[2];
	for (i = 0; i < M * N; i++)
		C[i] = 0.0f;
	for (i0 = 0; i0 < M; i0 += BS)
		for (k0 = 0; k0 < K; k0 += BS)
			for (j0 = 0; j0 < N; j0 += BS)
				for (i = i0; i < min64(i0 + BS, M); i++)
					for (k = k0; k < min64(k0 + BS, K); k++) {
						float aik = A[i * K + k];

						for (j = j0; j < min64(j0 + BS, N); j++)
							C[i * N + j] += aik * B[k * N + j];
					}
	return 0;
}
