/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * sgemm naive starting point: the textbook i-j-k triple loop, unblocked,
 * with a dot product over a column of B (strided access).  Reported beside
 * the honest baseline, labelled "naive", never instead of it.
 */
#include <stdint.h>

#include "atb/kernel.h"

int atb_kernel(const struct atb_kernel_args *args)
{
	const float *A, *B;
	float *C;
	int64_t M, N, K, i, j, k;

	if (args->nbuffers != 3 || args->nints != 3)
		return 1;
	A = args->buffers[0];
	B = args->buffers[1];
	C = args->buffers[2];
	M = args->ints[0];
	N = args->ints[1];
	K = args->ints[2];
	for (i = 0; i < M; i++)
		for (j = 0; j < N; j++) {
			float sum = 0.0f;

			for (k = 0; k < K; k++)
				sum += A[i * K + k] * B[k * N + j];
			C[i * N + j] = sum;
		}
	return 0;
}
