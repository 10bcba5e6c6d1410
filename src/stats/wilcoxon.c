/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The Wilcoxon signed-rank test, two-sided.  Exact for small samples by
 * counting sign assignments with a subset-sum dynamic programme over
 * doubled midranks (so ties keep it exact, conditional on the tie
 * pattern); the normal approximation with tie and continuity corrections
 * beyond ATB_STATS_WILCOXON_EXACT_MAX.  Formulas: docs/internals/stats.md.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_cdf.h>
#include <gsl/gsl_sort.h>

#include "atb/alloc.h"
#include "atb/stats.h"
#include "stats_int.h"
#include "banned.h"

/*
 * Exact two-sided p-value.  r2[] holds the doubled midranks (integers) of
 * the n nonzero |d|; w2 is the observed doubled W+.  counts[s] is the number
 * of sign assignments whose doubled W+ is s; there are 2^n in all, at most
 * 2^25, which doubles count exactly.
 */
static enum atb_status exact_p(const unsigned *r2, size_t n, unsigned w2,
			       double *p, struct atb_error *err)
{
	unsigned total = 0, s;
	double *counts, below = 0.0, above = 0.0, all;
	size_t i;

	for (i = 0; i < n; i++)
		total += r2[i];
	counts = atb_calloc((size_t)total + 1, sizeof(*counts));
	if (!counts)
		return atb_error_set(err, ATB_ERR_NOMEM,
				     "out of memory for the wilcoxon null distribution");
	counts[0] = 1.0;
	for (i = 0; i < n; i++)
		for (s = total; s >= r2[i]; s--) {
			counts[s] += counts[s - r2[i]];
			if (s == r2[i])
				break;
		}
	all = ldexp(1.0, (int)n);
	for (s = 0; s <= total; s++) {
		if (s <= w2)
			below += counts[s];
		if (s >= w2)
			above += counts[s];
	}
	atb_free(counts);
	*p = 2.0 * fmin(below, above) / all;
	if (*p > 1.0)
		*p = 1.0;
	return ATB_OK;
}

enum atb_status atb_stats_wilcoxon(const double *d, size_t n,
				   struct atb_wilcoxon *out,
				   struct atb_error *err)
{
	enum atb_status s;
	double *absd = NULL;
	size_t *order = NULL;
	unsigned *r2 = NULL;
	size_t i, j, k, m = 0;
	double tie_term = 0.0, w2_plus = 0.0;

	memset(out, 0, sizeof(*out));
	out->p_value = 1.0;
	out->min_p_value = 1.0;
	s = atbi_stats_check_finite(d, n, "difference", err);
	if (s)
		return s;
	if (n > (size_t)1 << 24)
		return atb_error_set(err, ATB_ERR_USAGE,
				     "too many differences for the wilcoxon test: %zu",
				     n);
	absd = atb_malloc(n * sizeof(*absd));
	order = atb_malloc(n * sizeof(*order));
	r2 = atb_malloc(n * sizeof(*r2));
	if (!absd || !order || !r2) {
		s = atb_error_set(err, ATB_ERR_NOMEM,
				  "out of memory ranking %zu differences", n);
		goto out;
	}
	for (i = 0; i < n; i++)
		if (d[i] != 0.0)
			absd[m++] = fabs(d[i]);
	out->n_zero = n - m;
	out->n_used = m;
	if (m == 0) {
		out->exact = 1;
		goto out;
	}
	/* order[] indexes absd[] by increasing |d|; d's nonzero entries
	 * appear in absd[] in input order, so sign of absd[i] is recovered
	 * from the i-th nonzero d. */
	gsl_sort_index(order, absd, 1, m);
	for (i = 0; i < m; i = j) {
		unsigned r2_mid;

		for (j = i + 1; j < m && absd[order[j]] == absd[order[i]]; j++)
			;
		/* ranks i+1 .. j share the midrank (i+1+j)/2: doubled, i+1+j */
		r2_mid = (unsigned)(i + 1 + j);
		for (k = i; k < j; k++)
			r2[order[k]] = r2_mid;
		if (j - i > 1) {
			double t = (double)(j - i);

			out->ties = 1;
			tie_term += t * t * t - t;
		}
	}
	for (i = 0, k = 0; i < n; i++) {
		if (d[i] == 0.0)
			continue;
		if (d[i] > 0.0)
			w2_plus += r2[k];
		k++;
	}
	out->w_plus = w2_plus / 2.0;
	out->w_minus = (double)m * (double)(m + 1) / 2.0 - out->w_plus;

	if (m <= ATB_STATS_WILCOXON_EXACT_MAX) {
		out->exact = 1;
		/* the extreme outcome, every sign the same, is the only one
		 * with W+ = 0, ties or not */
		out->min_p_value = fmin(1.0, ldexp(1.0, 1 - (int)m));
		s = exact_p(r2, m, (unsigned)w2_plus, &out->p_value, err);
		goto out;
	} else {
		double mm = (double)m;
		double mean = mm * (mm + 1.0) / 4.0;
		double var = mm * (mm + 1.0) * (2.0 * mm + 1.0) / 24.0 -
			     tie_term / 48.0;
		double dev = fabs(out->w_plus - mean) - 0.5;
		double sd = sqrt(var);

		if (dev < 0.0)
			dev = 0.0;
		out->z = (out->w_plus >= mean ? dev : -dev) / sd;
		out->p_value = fmin(1.0, 2.0 * gsl_cdf_ugaussian_Q(dev / sd));
		out->min_p_value =
			fmin(1.0, 2.0 * gsl_cdf_ugaussian_Q((mean - 0.5) / sd));
	}
out:
	atb_free(absd);
	atb_free(order);
	atb_free(r2);
	return s;
}
