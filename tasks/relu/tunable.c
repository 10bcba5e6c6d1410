/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * relu tunable template: Y = max(X, 0) over N fp32 values.  Knobs: SELECT
 * 0 = compare-and-select, 1 = fmaxf, 2 = clear the sign-extended mask with
 * integer operations; UNROLL the unroll factor; ALIGN_HINT 1 = tell the
 * compiler the buffers are 64-byte aligned (the runner allocates them so).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "atb/kernel.h"

#ifndef SELECT
#define SELECT 0
#endif
#ifndef UNROLL
#define UNROLL 1
#endif
#ifndef ALIGN_HINT
#define ALIGN_HINT 0
#endif

#define ATB_STR_(x) #x
#define ATB_PRAGMA_(x) _Pragma(ATB_STR_(x))
#define ATB_UNROLL_(n) ATB_PRAGMA_(GCC unroll n)
#define ATB_UNROLL(n) ATB_UNROLL_(n)

int atb_kernel(const struct atb_kernel_args *args)
{
	const float *restrict X;
	float *restrict Y;
	int64_t N, i;

	if (args->nbuffers != 2 || args->nints != 1)
		return 1;
	X = args->buffers[0];
	Y = args->buffers[1];
	N = args->ints[0];
#if ALIGN_HINT
	if (((uintptr_t)X | (uintptr_t)Y) % 64 == 0) {
		X = __builtin_assume_aligned(X, 64);
		Y = __builtin_assume_aligned(Y, 64);
	}
#endif
	ATB_UNROLL(UNROLL)
	for (i = 0; i < N; i++) {
#if SELECT == 1
		Y[i] = fmaxf(X[i], 0.0f);
#elif SELECT == 2
		uint32_t u;
		int32_t s;

		memcpy(&u, &X[i], sizeof(u));
		memcpy(&s, &X[i], sizeof(s));
		u &= ~(uint32_t)(s >> 31);
		memcpy(&Y[i], &u, sizeof(u));
#else
		Y[i] = X[i] > 0.0f ? X[i] : 0.0f;
#endif
	}
	return 0;
}
