/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The comparison oracle: a plain copy of the element rule of
 * runner_compare_bounded as it was before it was made fast (runner/check.c,
 * 2026-11-29: one element at a time, a dtype switch per read, a division per
 * element).  tests/unit/u-compare.c holds the fast rule to this one bit for
 * bit, and bench/bench-compare.c times it as "the old rule".  It is the
 * definition, so it is never optimised: change it only when the protocol's
 * rule itself changes (PROTO: correctness.tolerances), and then in the same
 * commit as runner/check.c.  Needs runner/runner_int.h (struct runner_cmp)
 * and atb/runner.h (the half conversions) before it.
 */
#ifndef ATB_COMPARE_ORACLE_H
#define ATB_COMPARE_ORACLE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static double oracle_elem(const void *p, enum atb_dtype d, size_t k)
{
	switch (d) {
	case ATB_DTYPE_FP32:
		return ((const float *)p)[k];
	case ATB_DTYPE_FP64:
		return ((const double *)p)[k];
	case ATB_DTYPE_INT32:
		return ((const int32_t *)p)[k];
	case ATB_DTYPE_INT64:
		return (double)((const int64_t *)p)[k];
	case ATB_DTYPE_FP16:
		return atb_fp16_to_float(((const uint16_t *)p)[k]);
	case ATB_DTYPE_BF16:
		return atb_bf16_to_float(((const uint16_t *)p)[k]);
	}
	return NAN;
}

static void oracle_compare(const void *ref, const void *got, enum atb_dtype d, size_t n,
			   double atol, double rtol, const double *extra, struct runner_cmp *c)
{
	size_t k;

	memset(c, 0, sizeof(*c));
	c->first_bad = -1;
	for (k = 0; k < n; k++) {
		double r, g, ad, rd;
		int ok;

		if (d == ATB_DTYPE_INT64 &&
		    ((const int64_t *)ref)[k] == ((const int64_t *)got)[k])
			continue;
		r = oracle_elem(ref, d, k);
		g = oracle_elem(got, d, k);
		if (isnan(g) && !isnan(r))
			c->nnan++;
		if (isnan(r) || isnan(g)) {
			ok = isnan(r) && isnan(g);
			ad = rd = 0;
		} else if (isinf(r) || isinf(g)) {
			ok = r == g;
			ad = rd = ok ? 0 : INFINITY;
		} else {
			ad = fabs(g - r);
			rd = r != 0 ? ad / fabs(r) : (ad ? INFINITY : 0);
			ok = ad <= atol + rtol * fabs(r) + (extra ? extra[k] : 0);
		}
		if (ad > c->max_abs)
			c->max_abs = ad;
		if (rd > c->max_rel)
			c->max_rel = rd;
		if (!ok) {
			if (c->first_bad < 0) {
				c->first_bad = (long long)k;
				c->bad_ref = r;
				c->bad_got = g;
			}
			c->nbad++;
		}
	}
}

#endif
