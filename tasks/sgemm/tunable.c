/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * sgemm tunable template: C = A * B (row-major, fp32), three-level tiling.
 * Knobs (-D macros): TILE_I, TILE_J, TILE_K tile sizes; UNROLL the unroll
 * factor of the innermost loop; LOOP_ORDER 0 = i-k-j inside a tile, 1 =
 * k-i-j inside a tile.  Correct for any M, N, K (edge tiles are clipped).
 */
#include <stdint.h>

#include "atb/kernel.h"

#ifndef TILE_I
#define TILE_I 64
#endif
#ifndef TILE_J
#define TILE_J 64
#endif
#ifndef TILE_K
#define TILE_K 64
#endif
#ifndef UNROLL
#define UNROLL 1
#endif
#ifndef LOOP_ORDER
#define LOOP_ORDER 0
#endif

#define ATB_STR_(x) #x
#define ATB_PRAGMA_(x) _Pragma(ATB_STR_(x))
#define ATB_UNROLL_(n) ATB_PRAGMA_(GCC unroll n)
#define ATB_UNROLL(n) ATB_UNROLL_(n)

static inline int64_t min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

int atb_kernel(const struct atb_kernel_args *args)
{
	const float *restrict A, *restrict B;
	float *restrict C;
	int64_t M, N, K, i, j, k, i0, j0, k0;

	if (args->nbuffers != 3 || args->nints != 3)
		return 1;
	A = args->buffers[0];
	B = args->buffers[1];
	C = args->buffers[2];
	M = args->ints[0];
	N = args->ints[1];
	K = args->ints[2];
	for (i = 0; i < M * N; i++)
		C[i] = 0.0f;
	for (i0 = 0; i0 < M; i0 += TILE_I)
		for (k0 = 0; k0 < K; k0 += TILE_K)
			for (j0 = 0; j0 < N; j0 += TILE_J) {
				int64_t ie = min64(i0 + TILE_I, M), ke = min64(k0 + TILE_K, K);
				int64_t je = min64(j0 + TILE_J, N);
#if LOOP_ORDER == 0
				for (i = i0; i < ie; i++)
					for (k = k0; k < ke; k++) {
#else
				for (k = k0; k < ke; k++)
					for (i = i0; i < ie; i++) {
#endif
						const float aik = A[i * K + k];
						float *restrict c = C + i * N;
						const float *restrict b = B + k * N;

						ATB_UNROLL(UNROLL)
						for (j = j0; j < je; j++)
							c[j] += aik * b[j];
					}
			}
	return 0;
}
