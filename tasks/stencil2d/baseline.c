/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * stencil2d honest baseline: one 5-point Jacobi sweep over an H x W fp32
 * grid, OUT = 0.25 * (north + south + west + east) inside, the boundary
 * copied from IN.  Row-major loops with the interior inner loop free of
 * branches, so the compiler vectorises it.
 */
#include <stdint.h>

#include "atb/kernel.h"

int atb_kernel(const struct atb_kernel_args *args)
{
	const float *in;
	float *out;
	int64_t H, W, i, j;

	if (args->nbuffers != 2 || args->nints != 2)
		return 1;
	in = args->buffers[0];
	out = args->buffers[1];
	H = args->ints[0];
	W = args->ints[1];
	for (i = 0; i < H; i++) {
		if (i == 0 || i == H - 1) {
			for (j = 0; j < W; j++)
				out[i * W + j] = in[i * W + j];
			continue;
		}
		out[i * W] = in[i * W];
		for (j = 1; j < W - 1; j++)
			out[i * W + j] = 0.25f * (in[(i - 1) * W + j] + in[(i + 1) * W + j] +
						  in[i * W + j - 1] + in[i * W + j + 1]);
		if (W > 1)
			out[i * W + W - 1] = in[i * W + W - 1];
	}
	return 0;
}
