/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * softmax honest baseline: row-wise softmax of an R x C fp32 matrix,
 * numerically stable (subtract the row max), three passes per row: max,
 * exponentials with their sum written to Y, one multiply by 1/sum.
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
		const float *x = X + r * C;
		float *y = Y + r * C;
		float mx = x[0], sum = 0.0f, inv;

		for (c = 1; c < C; c++)
			mx = x[c] > mx ? x[c] : mx;
		for (c = 0; c < C; c++) {
			y[c] = expf(x[c] - mx);
			sum += y[c];
		}
		inv = 1.0f / sum;
		for (c = 0; c < C; c++)
			y[c] *= inv;
	}
	return 0;
}
