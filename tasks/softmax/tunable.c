/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * softmax tunable template: row-wise softmax of an R x C fp32 matrix.
 * Knobs: ONE_PASS 1 = online max-and-sum in one sweep (rescaling the sum
 * when the max grows), 0 = separate max pass; UNROLL the unroll factor of
 * the element loops; LANES the number of independent partial maxima and
 * sums (breaks the reduction dependency chain).
 */
#include <math.h>
#include <stdint.h>

#include "atb/kernel.h"

#ifndef ONE_PASS
#define ONE_PASS 0
#endif
#ifndef UNROLL
#define UNROLL 1
#endif
#ifndef LANES
#define LANES 1
#endif

#define ATB_STR_(x) #x
#define ATB_PRAGMA_(x) _Pragma(ATB_STR_(x))
#define ATB_UNROLL_(n) ATB_PRAGMA_(GCC unroll n)
#define ATB_UNROLL(n) ATB_UNROLL_(n)

int atb_kernel(const struct atb_kernel_args *args)
{
	const float *X;
	float *Y;
	int64_t R, C, r, c;
	int l;

	if (args->nbuffers != 2 || args->nints != 2)
		return 1;
	X = args->buffers[0];
	Y = args->buffers[1];
	R = args->ints[0];
	C = args->ints[1];
	for (r = 0; r < R; r++) {
		const float *restrict x = X + r * C;
		float *restrict y = Y + r * C;
		float mx, sum = 0.0f, inv;
#if ONE_PASS
		float m[LANES], s[LANES];

		for (l = 0; l < LANES; l++)
			m[l] = -INFINITY, s[l] = 0.0f;
		for (c = 0; c + LANES <= C; c += LANES)
			for (l = 0; l < LANES; l++) {
				float v = x[c + l];

				if (v > m[l]) {
					s[l] = s[l] * expf(m[l] - v) + 1.0f;
					m[l] = v;
				} else {
					s[l] += expf(v - m[l]);
				}
			}
		for (; c < C; c++) {
			float v = x[c];

			if (v > m[0]) {
				s[0] = s[0] * expf(m[0] - v) + 1.0f;
				m[0] = v;
			} else {
				s[0] += expf(v - m[0]);
			}
		}
		mx = m[0];
		for (l = 1; l < LANES; l++)
			mx = m[l] > mx ? m[l] : mx;
		for (l = 0; l < LANES; l++)
			if (m[l] > -INFINITY)
				sum += s[l] * expf(m[l] - mx);
		inv = 1.0f / sum;
		ATB_UNROLL(UNROLL)
		for (c = 0; c < C; c++)
			y[c] = expf(x[c] - mx) * inv;
#else
		float m[LANES];

		for (l = 0; l < LANES; l++)
			m[l] = x[0];
		for (c = 0; c + LANES <= C; c += LANES)
			for (l = 0; l < LANES; l++)
				m[l] = x[c + l] > m[l] ? x[c + l] : m[l];
		for (; c < C; c++)
			m[0] = x[c] > m[0] ? x[c] : m[0];
		mx = m[0];
		for (l = 1; l < LANES; l++)
			mx = m[l] > mx ? m[l] : mx;
		ATB_UNROLL(UNROLL)
		for (c = 0; c < C; c++) {
			y[c] = expf(x[c] - mx);
			sum += y[c];
		}
		inv = 1.0f / sum;
		ATB_UNROLL(UNROLL)
		for (c = 0; c < C; c++)
			y[c] *= inv;
#endif
	}
	return 0;
}
