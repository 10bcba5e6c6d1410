/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * prefix_sum naive starting point: the textbook recurrence
 * Y[i] = Y[i-1] + X[i], reading the previous output back from memory.
 */
#include <stdint.h>

#include "atb/kernel.h"

int atb_kernel(const struct atb_kernel_args *args)
{
	const int32_t *X;
	int32_t *Y;
	int64_t N, i;

	if (args->nbuffers != 2 || args->nints != 1)
		return 1;
	X = args->buffers[0];
	Y = args->buffers[1];
	N = args->ints[0];
	if (N < 1)
		return 0;
	Y[0] = X[0];
	for (i = 1; i < N; i++)
		Y[i] = (int32_t)((uint32_t)Y[i - 1] + (uint32_t)X[i]);
	return 0;
}
