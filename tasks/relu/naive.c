/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * relu naive starting point: the textbook if/else per element.
 */
#include <stdint.h>

#include "atb/kernel.h"

int atb_kernel(const struct atb_kernel_args *args)
{
	const float *X;
	float *Y;
	int64_t N, i;

	if (args->nbuffers != 2 || args->nints != 1)
		return 1;
	X = args->buffers[0];
	Y = args->buffers[1];
	N = args->ints[0];
	for (i = 0; i < N; i++) {
		if (X[i] > 0.0f)
			Y[i] = X[i];
		else
			Y[i] = 0.0f;
	}
	return 0;
}
