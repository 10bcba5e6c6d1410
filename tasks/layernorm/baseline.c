/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * layernorm honest baseline: per row of an R x C fp32 matrix,
 * Y = (X - mean) / sqrt(var + eps) * gamma + beta, with a two-pass mean and
 * variance (the accurate textbook method) and one reciprocal square root
 * per row.
 */
#include <math.h>
#include <stdint.h>

#include "atb/kernel.h"

int atb_kernel(const struct atb_kernel_args *args)
{
	const float *X, *G, *B;
	float *Y;
	int64_t R, C, r, c;
	float eps;

	if (args->nbuffers != 4 || args->nints != 2 || args->nreals != 1)
		return 1;
	X = args->buffers[0];
	G = args->buffers[1];
	B = args->buffers[2];
	Y = args->buffers[3];
	R = args->ints[0];
	C = args->ints[1];
	eps = (float)args->reals[0];
	for (r = 0; r < R; r++) {
		const float *x = X + r * C;
		float *y = Y + r * C;
		float mean = 0.0f, var = 0.0f, rstd;

		for (c = 0; c < C; c++)
			mean += x[c];
		mean /= (float)C;
		for (c = 0; c < C; c++) {
			float d = x[c] - mean;

			var += d * d;
		}
		var /= (float)C;
		rstd = 1.0f / sqrtf(var + eps);
		for (c = 0; c < C; c++)
			y[c] = (x[c] - mean) * rstd * G[c] + B[c];
	}
	return 0;
}
