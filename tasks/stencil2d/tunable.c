/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * stencil2d tunable template: one 5-point Jacobi sweep, tiled.  Knobs:
 * TILE_I, TILE_J the tile of the interior visited at once (TILE_J 0 = whole
 * rows); UNROLL the unroll factor of the inner loop.  Correct for any H, W.
 */
#include <stdint.h>

#include "atb/kernel.h"

#ifndef TILE_I
#define TILE_I 32
#endif
#ifndef TILE_J
#define TILE_J 0
#endif
#ifndef UNROLL
#define UNROLL 1
#endif

#define ATB_STR_(x) #x
#define ATB_PRAGMA_(x) _Pragma(ATB_STR_(x))
#define ATB_UNROLL_(n) ATB_PRAGMA_(GCC unroll n)
#define ATB_UNROLL(n) ATB_UNROLL_(n)

int atb_kernel(const struct atb_kernel_args *args)
{
	const float *restrict in;
	float *restrict out;
	int64_t H, W, i, j, i0, j0, tj;

	if (args->nbuffers != 2 || args->nints != 2)
		return 1;
	in = args->buffers[0];
	out = args->buffers[1];
	H = args->ints[0];
	W = args->ints[1];
	/* The boundary: first and last rows and columns. */
	for (j = 0; j < W; j++) {
		out[j] = in[j];
		out[(H - 1) * W + j] = in[(H - 1) * W + j];
	}
	for (i = 1; i < H - 1; i++) {
		out[i * W] = in[i * W];
		out[i * W + W - 1] = in[i * W + W - 1];
	}
	tj = TILE_J > 0 ? TILE_J : (W > 2 ? W - 2 : 1);
	for (j0 = 1; j0 < W - 1; j0 += tj)
		for (i0 = 1; i0 < H - 1; i0 += TILE_I) {
			int64_t ie = i0 + TILE_I < H - 1 ? i0 + TILE_I : H - 1;
			int64_t je = j0 + tj < W - 1 ? j0 + tj : W - 1;

			for (i = i0; i < ie; i++) {
				const float *restrict n = in + (i - 1) * W, *restrict c = in + i * W;
				const float *restrict s = in + (i + 1) * W;
				float *restrict o = out + i * W;

				ATB_UNROLL(UNROLL)
				for (j = j0; j < je; j++)
					o[j] = 0.25f * (n[j] + s[j] + c[j - 1] + c[j + 1]);
			}
		}
	return 0;
}
