/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * prefix_sum tunable template: inclusive scan of N int32 values, wrapping
 * modulo 2^32.  Knobs: VEC4 1 = scan four elements at a time in a vector
 * register (two shifted adds, then the running offset), 0 = scalar;
 * BLOCK 0 = one pass, else a two-level scan over blocks of BLOCK elements
 * (local scan, then the block's offset added in a second, vectorisable
 * pass); UNROLL the unroll factor of the scalar loops.
 */
#include <stdint.h>
#include <string.h>

#include "atb/kernel.h"

#ifndef VEC4
#define VEC4 0
#endif
#ifndef BLOCK
#define BLOCK 0
#endif
#ifndef UNROLL
#define UNROLL 1
#endif

#define ATB_STR_(x) #x
#define ATB_PRAGMA_(x) _Pragma(ATB_STR_(x))
#define ATB_UNROLL_(n) ATB_PRAGMA_(GCC unroll n)
#define ATB_UNROLL(n) ATB_UNROLL_(n)

typedef uint32_t v4u __attribute__((vector_size(16)));

/* Inclusive scan of x[0..n) into y starting from sum; returns the new sum. */
static uint32_t scan(const int32_t *restrict x, int32_t *restrict y, int64_t n, uint32_t sum)
{
	int64_t i = 0;
#if VEC4
	const v4u zero = {0, 0, 0, 0};

	for (; i + 4 <= n; i += 4) {
		v4u v;

		memcpy(&v, x + i, sizeof(v));
		v += __builtin_shuffle(zero, v, (v4u){0, 4, 5, 6});
		v += __builtin_shuffle(zero, v, (v4u){0, 1, 4, 5});
		v += (v4u){sum, sum, sum, sum};
		memcpy(y + i, &v, sizeof(v));
		sum = v[3];
	}
#endif
	ATB_UNROLL(UNROLL)
	for (; i < n; i++) {
		sum += (uint32_t)x[i];
		y[i] = (int32_t)sum;
	}
	return sum;
}

int atb_kernel(const struct atb_kernel_args *args)
{
	const int32_t *restrict X;
	int32_t *restrict Y;
	int64_t N;

	if (args->nbuffers != 2 || args->nints != 1)
		return 1;
	X = args->buffers[0];
	Y = args->buffers[1];
	N = args->ints[0];
#if BLOCK > 0
	{
		uint32_t offset = 0;
		int64_t b0, i;

		for (b0 = 0; b0 < N; b0 += BLOCK) {
			int64_t n = b0 + BLOCK < N ? BLOCK : N - b0;
			uint32_t total = scan(X + b0, Y + b0, n, 0);

			ATB_UNROLL(UNROLL)
			for (i = b0; i < b0 + n; i++)
				Y[i] = (int32_t)((uint32_t)Y[i] + offset);
			offset += total;
		}
	}
#else
	scan(X, Y, N, 0);
#endif
	return 0;
}
