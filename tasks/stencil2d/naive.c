/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * stencil2d naive starting point: the textbook double loop with the
 * boundary test inside it, column by column (j outer), which strides through
 * memory.
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
	for (j = 0; j < W; j++)
		for (i = 0; i < H; i++) {
			if (i == 0 || j == 0 || i == H - 1 || j == W - 1)
				out[i * W + j] = in[i * W + j];
			else
				out[i * W + j] = 0.25f * (in[(i - 1) * W + j] + in[(i + 1) * W + j] +
							  in[i * W + j - 1] + in[i * W + j + 1]);
		}
	return 0;
}
