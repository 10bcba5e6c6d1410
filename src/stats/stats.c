/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Medians, quantiles and the order-statistic confidence interval of a
 * median.  The interval is what the runner's noise-based stopping rule
 * watches, so it is computed after every trial: one sort, then a binary
 * search over the binomial CDF.
 */
#include <math.h>
#include <string.h>

#include <gsl/gsl_cdf.h>
#include <gsl/gsl_sort.h>
#include <gsl/gsl_statistics_double.h>

#include "atb/alloc.h"
#include "atb/stats.h"
#include "stats_int.h"
#include "banned.h"

enum atb_status atbi_stats_check_finite(const double *samples, size_t n,
					const char *what,
					struct atb_error *err)
{
	size_t i;

	if (n == 0)
		return atb_error_set(err, ATB_ERR_USAGE,
				     "no %ss: need at least one", what);
	if (!samples)
		return atb_error_set(err, ATB_ERR_USAGE,
				     "missing %s array: NULL with n = %zu",
				     what, n);
	for (i = 0; i < n; i++)
		if (!isfinite(samples[i]))
			return atb_error_set(err, ATB_ERR_USAGE,
					     "non-finite %s at index %zu: '%g'",
					     what, i, samples[i]);
	return ATB_OK;
}

enum atb_status atbi_stats_sorted_copy(const double *samples, size_t n,
				       double **out, struct atb_error *err)
{
	double *c;

	*out = NULL;
	c = atb_malloc(n * sizeof(*c));
	if (!c)
		return atb_error_set(err, ATB_ERR_NOMEM,
				     "out of memory sorting %zu samples", n);
	memcpy(c, samples, n * sizeof(*c));
	gsl_sort(c, 1, n);
	*out = c;
	return ATB_OK;
}

enum atb_status atb_stats_quantile(const double *samples, size_t n, double q,
				   double *out, struct atb_error *err)
{
	enum atb_status s;
	double *sorted;

	if (!(q >= 0.0 && q <= 1.0))
		return atb_error_set(err, ATB_ERR_USAGE,
				     "quantile out of range: '%g' (need 0 <= q <= 1)",
				     q);
	s = atbi_stats_check_finite(samples, n, "sample", err);
	if (s)
		return s;
	s = atbi_stats_sorted_copy(samples, n, &sorted, err);
	if (s)
		return s;
	*out = q == 0.5 ? gsl_stats_median_from_sorted_data(sorted, 1, n)
			: gsl_stats_quantile_from_sorted_data(sorted, 1, n, q);
	atb_free(sorted);
	return ATB_OK;
}

enum atb_status atb_stats_median(const double *samples, size_t n, double *out,
				 struct atb_error *err)
{
	return atb_stats_quantile(samples, n, 0.5, out, err);
}

/*
 * Largest k in [0, n/2) with P(B <= k) <= a for B ~ Bin(n, 1/2); the CI is
 * then [x(k+1), x(n-k)] in 1-based order statistics, with coverage
 * 1 - 2 P(B <= k) >= 1 - 2a.  P(B <= k) grows with k, so binary search.
 */
void atbi_stats_median_ci_index(size_t n, double level, size_t *lo_i,
				size_t *hi_i)
{
	double a = (1.0 - level) / 2.0;
	size_t lo = 0, hi, mid;

	*lo_i = n;
	*hi_i = n;
	if (n == 0 || n > (size_t)0xffffffffu)
		return;
	if (gsl_cdf_binomial_P(0, 0.5, (unsigned)n) > a)
		return;
	/* invariant: P(B <= lo) <= a, and P(B <= hi) > a (or hi is past n/2) */
	hi = (n + 1) / 2;
	while (hi - lo > 1) {
		mid = lo + (hi - lo) / 2;
		if (gsl_cdf_binomial_P((unsigned)mid, 0.5, (unsigned)n) <= a)
			lo = mid;
		else
			hi = mid;
	}
	*lo_i = lo;         /* 0-based index of x(lo+1) */
	*hi_i = n - 1 - lo; /* 0-based index of x(n-lo) */
}

enum atb_status atb_stats_median_ci(const double *samples, size_t n,
				    double level, double *lo, double *hi,
				    struct atb_error *err)
{
	enum atb_status s;
	double *sorted;
	size_t li, hi_idx;

	if (!(level > 0.0 && level < 1.0))
		return atb_error_set(err, ATB_ERR_USAGE,
				     "confidence level out of range: '%g' (need 0 < level < 1)",
				     level);
	s = atbi_stats_check_finite(samples, n, "sample", err);
	if (s)
		return s;
	s = atbi_stats_sorted_copy(samples, n, &sorted, err);
	if (s)
		return s;
	atbi_stats_median_ci_index(n, level, &li, &hi_idx);
	if (li >= n) {
		*lo = -HUGE_VAL;
		*hi = HUGE_VAL;
	} else {
		*lo = sorted[li];
		*hi = sorted[hi_idx];
	}
	atb_free(sorted);
	return ATB_OK;
}

const char *atb_stats_verdict_name(enum atb_verdict v)
{
	switch (v) {
	case ATB_VERDICT_NO_DIFFERENCE: return "no_difference";
	case ATB_VERDICT_FASTER: return "faster";
	case ATB_VERDICT_SLOWER: return "slower";
	}
	return "unknown";
}
