/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * A suite's aggregate statistics (include/atb/suite.h): which outcomes are
 * correct, the correct rate and fast_p over all tasks with Wilson score
 * intervals, and the median and geometric-mean speedup of the admitted
 * tasks with percentile bootstrap intervals.  docs/internals/suite.md gives
 * the formulas.  Pure functions: no I/O, no clock.
 *
 * Does not: read the store or decide what is admitted (the rows say).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <gsl/gsl_cdf.h>
#include <gsl/gsl_rng.h>
#include <gsl/gsl_sort.h>
#include <gsl/gsl_statistics_double.h>

#include "atb/alloc.h"
#include "atb/suite.h"
#include "banned.h"

int atb_suite_outcome_correct(const char *outcome)
{
	static const char *const ok[] = {"usable", "admitted", "quarantined", "noise",
					 "baseline_drift", NULL};
	size_t i;

	for (i = 0; ok[i]; i++)
		if (!strcmp(outcome, ok[i]))
			return 1;
	/* The store's validator refused the timing: correctness had passed. */
	return !strncmp(outcome, "rejected:", 9);
}

void atb_suite_wilson(size_t k, size_t n, double level, double *lo, double *hi)
{
	double z, p, z2, den, centre, half;

	if (n == 0) {
		*lo = 0.0;
		*hi = 1.0;
		return;
	}
	z = gsl_cdf_ugaussian_Pinv(0.5 + level / 2.0);
	z2 = z * z;
	p = (double)k / (double)n;
	den = 1.0 + z2 / (double)n;
	centre = (p + z2 / (2.0 * (double)n)) / den;
	half = z / den * sqrt(p * (1.0 - p) / (double)n + z2 / (4.0 * (double)n * (double)n));
	*lo = centre - half < 0.0 ? 0.0 : centre - half;
	*hi = centre + half > 1.0 ? 1.0 : centre + half;
}

static void judge(struct atb_suite_stat *s, double bar)
{
	s->bar = bar;
	if (!s->has || bar <= 0.0) {
		s->ci_verdict[0] = '\0';
		s->meets = s->has && s->value >= bar;
		return;
	}
	s->meets = s->value >= bar;
	snprintf(s->ci_verdict, sizeof(s->ci_verdict), "%s",
		 s->lo >= bar ? "above" : s->hi < bar ? "below" : "undecided");
}

static void rate(struct atb_suite_stat *s, size_t k, size_t n, double level)
{
	memset(s, 0, sizeof(*s));
	if (n == 0)
		return;
	s->has = 1;
	s->value = (double)k / (double)n;
	atb_suite_wilson(k, n, level, &s->lo, &s->hi);
}

static double geomean(const double *x, size_t n)
{
	double sum = 0.0;
	size_t i;

	for (i = 0; i < n; i++)
		sum += log(x[i]);
	return exp(sum / (double)n);
}

/* Median of x (sorted in place). */
static double median_sorting(double *x, size_t n)
{
	gsl_sort(x, 1, n);
	return gsl_stats_median_from_sorted_data(x, 1, n);
}

/*
 * Point values and percentile bootstrap intervals of the median and the
 * geometric mean of x[0..n-1] (n >= 1): tasks resampled with replacement.
 */
static enum atb_status bootstrap(const double *x, size_t n, int resamples, double level,
				 uint64_t seed, struct atb_suite_stat *med,
				 struct atb_suite_stat *geo, struct atb_error *err)
{
	double *draw = atb_malloc(n * sizeof(*draw));
	double *meds = atb_malloc((size_t)resamples * sizeof(*meds));
	double *geos = atb_malloc((size_t)resamples * sizeof(*geos));
	gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
	double tail = (1.0 - level) / 2.0;
	enum atb_status st = ATB_OK;
	size_t i;
	int b;

	if (!draw || !meds || !geos || !rng) {
		st = atb_error_set(err, ATB_ERR_NOMEM, "cannot bootstrap the suite: out of memory");
		goto out;
	}
	gsl_rng_set(rng, (unsigned long)seed);
	memcpy(draw, x, n * sizeof(*draw));
	med->value = median_sorting(draw, n);
	geo->value = geomean(x, n);
	for (b = 0; b < resamples; b++) {
		for (i = 0; i < n; i++)
			draw[i] = x[gsl_rng_uniform_int(rng, n)];
		geos[b] = geomean(draw, n);
		meds[b] = median_sorting(draw, n);
	}
	gsl_sort(meds, 1, (size_t)resamples);
	gsl_sort(geos, 1, (size_t)resamples);
	med->lo = gsl_stats_quantile_from_sorted_data(meds, 1, (size_t)resamples, tail);
	med->hi = gsl_stats_quantile_from_sorted_data(meds, 1, (size_t)resamples, 1.0 - tail);
	geo->lo = gsl_stats_quantile_from_sorted_data(geos, 1, (size_t)resamples, tail);
	geo->hi = gsl_stats_quantile_from_sorted_data(geos, 1, (size_t)resamples, 1.0 - tail);
	med->has = geo->has = 1;
out:
	gsl_rng_free(rng);
	atb_free(draw);
	atb_free(meds);
	atb_free(geos);
	return st;
}

static enum atb_status speedups(const struct atb_suite_row *rows, size_t n, int compile,
				double **out, size_t *m, struct atb_error *err)
{
	size_t i;

	*out = NULL;
	*m = 0;
	if (n == 0)
		return ATB_OK;
	*out = atb_malloc(n * sizeof(**out));
	if (!*out)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot aggregate the suite: out of memory");
	for (i = 0; i < n; i++) {
		double s = compile ? rows[i].compile_speedup : rows[i].speedup;

		if (!rows[i].admitted || (compile && s == 0.0))
			continue;
		if (!isfinite(s) || s <= 0.0) {
			atb_free(*out);
			*out = NULL;
			return atb_error_set(err, ATB_ERR_USAGE,
					     "task '%s': admitted speedup %g is not finite and positive",
					     rows[i].task, s);
		}
		(*out)[(*m)++] = s;
	}
	return ATB_OK;
}

enum atb_status atb_suite_aggregate(const struct atb_suite_row *rows, size_t n,
				    const struct atb_protocol *p, uint64_t bootstrap_seed,
				    struct atb_suite_stats *out, struct atb_error *err)
{
	double level = p->stats.ci_level;
	double *x = NULL;
	size_t i, j, m = 0;
	enum atb_status st;

	memset(out, 0, sizeof(*out));
	out->ntasks = n;
	out->ci_level = level;
	out->bootstrap_resamples = p->stats.bootstrap_resamples;
	out->bootstrap_seed = bootstrap_seed;
	if (level <= 0.0 || level >= 1.0 || p->stats.bootstrap_resamples < 1)
		return atb_error_set(err, ATB_ERR_USAGE,
				     "protocol v%d: ci_level %g or bootstrap_resamples %d out of range",
				     p->version, level, p->stats.bootstrap_resamples);
	for (i = 0; i < n; i++) {
		out->ncorrect += rows[i].correct != 0;
		out->nadmitted += rows[i].admitted != 0;
		out->nstatic += !strcmp(rows[i].outcome, ATB_SUITE_STATIC);
		out->nmissing += !strcmp(rows[i].outcome, ATB_SUITE_NO_CANDIDATE);
		out->ntimeout += !strcmp(rows[i].outcome, ATB_SUITE_TIMEOUT);
	}
	rate(&out->correct_rate, out->ncorrect, n, level);
	judge(&out->correct_rate, p->kernelbench.correct_rate_bar);

	/* PROTO: kernelbench.fast_p, over all tasks */
	out->nfast_p = p->kernelbench.nfast_p;
	for (j = 0; j < out->nfast_p; j++) {
		double thr = p->kernelbench.fast_p[j];

		out->fast_p_threshold[j] = thr;
		for (i = 0; i < n; i++)
			out->fast_p_count[j] += rows[i].admitted && rows[i].speedup > thr;
		rate(&out->fast_p[j], out->fast_p_count[j], n, level);
	}

	st = speedups(rows, n, 0, &x, &m, err);
	if (!st && m)
		st = bootstrap(x, m, p->stats.bootstrap_resamples, level, bootstrap_seed,
			       &out->median_speedup, &out->geomean_speedup, err);
	atb_free(x);
	if (st)
		return st;
	/* PROTO: kernelbench.median_speedup_bar */
	judge(&out->median_speedup, p->kernelbench.median_speedup_bar);
	judge(&out->geomean_speedup, 0.0);

	st = speedups(rows, n, 1, &x, &m, err);
	if (!st && m) {
		struct atb_suite_stat geo;

		memset(&geo, 0, sizeof(geo));
		st = bootstrap(x, m, p->stats.bootstrap_resamples, level, bootstrap_seed,
			       &out->median_compile, &geo, err);
	}
	atb_free(x);
	if (!st)
		judge(&out->median_compile, p->kernelbench.median_speedup_bar);
	return st;
}
