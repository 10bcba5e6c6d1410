/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * softmax naive starting point: the textbook formula per element,
 * exp(x - max) / sum(exp(x - max)), computing every exponential twice and
 * dividing per element.
 */
#include <math.h>
#include <stdint.h>

#include "atb/kernel.h"

int atb_kernel(const struct atb_kernel_args *args)
{
	const float *X;
	float *Y;
	int64_t R, C, r, c;

	if (args->nbuffers != 2 || args->nints != 2)
		return 1;
	X = args->buffers[0];
	Y = args->buffers[1];
	R = args->ints[0];
	C = args->ints[1];
	for (r = 0; r < R; r++) {
		float mx = X[r * C], sum = 0.0f;

		for (c = 0; c < C; c++)
			if (X[r * C + c] > mx)
				mx = X[r * C + c];
		for (c = 0; c < C; c++)
			sum += expf(X[r * C + c] - mx);
		for (c = 0; c < C; c++)
			Y[r * C + c] = expf(X[r * C + c] - mx) / sum;
	}
	return 0;
}
