/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * layernorm tunable template.  Knobs: LANES independent partial sums for
 * the mean and variance reductions (breaks the dependency chain, lets the
 * compiler vectorise without -ffast-math); UNROLL the unroll factor of the
 * output loop; FUSED 1 = fold gamma * rstd into one scale per element.
 */
#include <math.h>
#include <stdint.h>

#include "atb/kernel.h"

#ifndef LANES
#define LANES 1
#endif
#ifndef UNROLL
#define UNROLL 1
#endif
#ifndef FUSED
#define FUSED 0
#endif

#define ATB_STR_(x) #x
#define ATB_PRAGMA_(x) _Pragma(ATB_STR_(x))
#define ATB_UNROLL_(n) ATB_PRAGMA_(GCC unroll n)
#define ATB_UNROLL(n) ATB_UNROLL_(n)

static float lane_sum(const float *restrict x, int64_t n, float shift, int square)
{
	float s[LANES], total = 0.0f;
	int64_t c;
	int l;

	for (l = 0; l < LANES; l++)
		s[l] = 0.0f;
	for (c = 0; c + LANES <= n; c += LANES)
		for (l = 0; l < LANES; l++) {
			float d = x[c + l] - shift;

			s[l] += square ? d * d : d;
		}
	for (; c < n; c++) {
		float d = x[c] - shift;

		s[0] += square ? d * d : d;
	}
	for (l = 0; l < LANES; l++)
		total += s[l];
	return total;
}

int atb_kernel(const struct atb_kernel_args *args)
{
	const float *restrict X, *restrict G, *restrict B;
	float *restrict Y;
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
		const float *restrict x = X + r * C;
		float *restrict y = Y + r * C;
		float mean = lane_sum(x, C, 0.0f, 0) / (float)C;
		float var = lane_sum(x, C, mean, 1) / (float)C;
		float rstd = 1.0f / sqrtf(var + eps);

		ATB_UNROLL(UNROLL)
		for (c = 0; c < C; c++) {
#if FUSED
			float scale = G[c] * rstd;

			y[c] = x[c] * scale + (B[c] - mean * scale);
#else
			y[c] = (x[c] - mean) * rstd * G[c] + B[c];
#endif
		}
	}
	return 0;
}
