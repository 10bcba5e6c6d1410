/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * prefix_sum honest baseline: inclusive scan of N int32 values,
 * Y[i] = X[0] + ... + X[i], with a running sum in a register.  Arithmetic
 * wraps modulo 2^32 (done in uint32_t, so overflow is defined and every
 * summation order gives the same bits).
 */
#include <stdint.h>

#include "atb/kernel.h"

int atb_kernel(const struct atb_kernel_args *args)
{
	const int32_t *X;
	int32_t *Y;
	int64_t N, i;
	uint32_t sum = 0;

	if (args->nbuffers != 2 || args->nints != 1)
		return 1;
	X = args->buffers[0];
	Y = args->buffers[1];
	N = args->ints[0];
	for (i = 0; i < N; i++) {
		sum += (uint32_t)X[i];
		Y[i] = (int32_t)sum;
	}
	return 0;
}
