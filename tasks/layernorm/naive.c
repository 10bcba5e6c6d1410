/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * layernorm naive starting point: the formula element by element, with the
 * square root and the division inside the output loop.
 */
#include <math.h>
#include <stdint.h>

#include "atb/kernel.h"

int atb_kernel(const struct atb_kernel_args *args)
{
	const float *X, *G, *B;
	float *Y;
	int64_t R, C, r, c;
	double eps;

	if (args->nbuffers != 4 || args->nints != 2 || args->nreals != 1)
		return 1;
	X = args->buffers[0];
	G = args->buffers[1];
	B = args->buffers[2];
	Y = args->buffers[3];
	R = args->ints[0];
	C = args->ints[1];
	eps = args->reals[0];
	for (r = 0; r < R; r++) {
		float mean = 0.0f, var = 0.0f;

		for (c = 0; c < C; c++)
			mean += X[r * C + c] / (float)C;
		for (c = 0; c < C; c++)
			var += (X[r * C + c] - mean) * (X[r * C + c] - mean) / (float)C;
		for (c = 0; c < C; c++)
			Y[r * C + c] = (X[r * C + c] - mean) / sqrtf(var + (float)eps) * G[c] + B[c];
	}
	return 0;
}
