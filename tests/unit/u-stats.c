/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Unit tests of the stats module: known answers (by hand, or from SciPy
 * 1.17.1 / NumPy 2.4 where a comment says so; the tests do not need Python),
 * coverage by simulation with a fixed seed, reproducibility of the
 * bootstrap, every refusal, and the allocation-failure walk.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>
#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>

#include "atb/alloc.h"
#include "atb/stats.h"
#include "banned.h"

#define EPS 1e-12

static int close_to(double got, double want, double tol)
{
	return fabs(got - want) <= tol * fmax(1.0, fabs(want));
}

/* ---- median and quantiles ---------------------------------------------- */

/* x and the expected values: numpy.median / numpy.quantile (linear) */
static const double qx[] = {3, 1, 4, 1, 5, 9, 2, 6};

Test(stats, median_of_even_count_is_mean_of_middle_pair)
{
	double m;

	cr_assert_eq(atb_stats_median(qx, 8, &m, NULL), ATB_OK);
	cr_assert(close_to(m, 3.5, EPS), "median %g", m);
}

Test(stats, median_of_odd_count_is_middle_value)
{
	static const double x[] = {7, -2, 5};
	double m;

	cr_assert_eq(atb_stats_median(x, 3, &m, NULL), ATB_OK);
	cr_assert_eq(m, 5.0);
}

Test(stats, median_leaves_samples_unsorted)
{
	double x[] = {3, 1, 2}, m;

	cr_assert_eq(atb_stats_median(x, 3, &m, NULL), ATB_OK);
	cr_assert(x[0] == 3 && x[1] == 1 && x[2] == 2);
}

Test(stats, quantiles_interpolate_linearly_like_numpy)
{
	double q;

	/* numpy.quantile(x, 0.25) = 1.75, (x, 0.9) = 6.9, ends = min, max */
	cr_assert_eq(atb_stats_quantile(qx, 8, 0.25, &q, NULL), ATB_OK);
	cr_assert(close_to(q, 1.75, EPS), "q25 %g", q);
	cr_assert_eq(atb_stats_quantile(qx, 8, 0.9, &q, NULL), ATB_OK);
	cr_assert(close_to(q, 6.9, 1e-12), "q90 %g", q);
	cr_assert_eq(atb_stats_quantile(qx, 8, 0.0, &q, NULL), ATB_OK);
	cr_assert_eq(q, 1.0);
	cr_assert_eq(atb_stats_quantile(qx, 8, 1.0, &q, NULL), ATB_OK);
	cr_assert_eq(q, 9.0);
}

Test(stats, quantile_refuses_q_outside_unit_interval)
{
	struct atb_error err;
	double q;

	atb_error_clear(&err);
	cr_assert_eq(atb_stats_quantile(qx, 8, 1.5, &q, &err), ATB_ERR_USAGE);
	cr_assert(strstr(err.msg, "quantile out of range"), "%s", err.msg);
	cr_assert_eq(atb_stats_quantile(qx, 8, NAN, &q, &err), ATB_ERR_USAGE);
}

Test(stats, median_refuses_empty_and_non_finite_samples)
{
	struct atb_error err;
	double x[] = {1, NAN, 3}, m;

	atb_error_clear(&err);
	cr_assert_eq(atb_stats_median(x, 0, &m, &err), ATB_ERR_USAGE);
	cr_assert(strstr(err.msg, "no samples"), "%s", err.msg);
	cr_assert_eq(atb_stats_median(x, 3, &m, &err), ATB_ERR_USAGE);
	cr_assert(strstr(err.msg, "non-finite sample at index 1"), "%s",
		  err.msg);
	x[1] = INFINITY;
	cr_assert_eq(atb_stats_median(x, 3, &m, &err), ATB_ERR_USAGE);
}

/* ---- confidence interval of the median ----------------------------------- */

/*
 * Order statistics from the binomial: largest k with P(Bin(n,1/2) <= k) <=
 * 0.025 is 0, 1, 39, 468 for n = 6, 10, 100, 1000 (scipy.stats.binom.cdf),
 * so the 95% CI is [x(k+1), x(n-k)].
 */
static void check_ci_indices(size_t n, size_t lo1, size_t hi1)
{
	double x[1000], lo, hi;
	size_t i;

	for (i = 0; i < n; i++)
		x[i] = (double)(n - i); /* reversed: x(j) = j */
	cr_assert_eq(atb_stats_median_ci(x, n, 0.95, &lo, &hi, NULL), ATB_OK);
	cr_assert_eq(lo, (double)lo1, "n %zu lo %g", n, lo);
	cr_assert_eq(hi, (double)hi1, "n %zu hi %g", n, hi);
}

Test(stats, median_ci_uses_binomial_order_statistics)
{
	check_ci_indices(6, 1, 6);
	check_ci_indices(10, 2, 9);
	check_ci_indices(100, 40, 61);
	check_ci_indices(1000, 469, 532);
}

Test(stats, median_ci_is_unbounded_when_too_few_samples)
{
	static const double x[] = {1, 2, 3, 4, 5};
	double lo, hi;

	/* n = 5: P(B <= 0) = 1/32 > 0.025, no order statistic will do */
	cr_assert_eq(atb_stats_median_ci(x, 5, 0.95, &lo, &hi, NULL), ATB_OK);
	cr_assert(isinf(lo) && lo < 0 && isinf(hi) && hi > 0);
	/* at 90% (a = 0.05) n = 5 is enough: [x(1), x(5)] */
	cr_assert_eq(atb_stats_median_ci(x, 5, 0.90, &lo, &hi, NULL), ATB_OK);
	cr_assert(lo == 1 && hi == 5);
}

Test(stats, median_ci_covers_true_median_at_nominal_rate)
{
	/*
	 * Exponential(1) samples, n = 30: median ln 2.  The 95% interval is
	 * [x(10), x(21)] with exact coverage 1 - 2 P(B <= 9) = 0.9572; 4000
	 * replications give a standard error of 0.0032.
	 */
	gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
	double x[30], lo, hi;
	int rep, covered = 0, i;

	gsl_rng_set(rng, 20261129);
	for (rep = 0; rep < 4000; rep++) {
		for (i = 0; i < 30; i++)
			x[i] = gsl_ran_exponential(rng, 1.0);
		cr_assert_eq(atb_stats_median_ci(x, 30, 0.95, &lo, &hi, NULL),
			     ATB_OK);
		covered += lo <= log(2.0) && log(2.0) <= hi;
	}
	gsl_rng_free(rng);
	cr_assert(covered >= 0.945 * 4000 && covered <= 0.970 * 4000,
		  "coverage %d/4000", covered);
}

Test(stats, median_ci_refuses_bad_level)
{
	struct atb_error err;
	double lo, hi;

	atb_error_clear(&err);
	cr_assert_eq(atb_stats_median_ci(qx, 8, 1.0, &lo, &hi, &err),
		     ATB_ERR_USAGE);
	cr_assert(strstr(err.msg, "confidence level out of range"), "%s",
		  err.msg);
	cr_assert_eq(atb_stats_median_ci(qx, 8, 0.0, &lo, &hi, &err),
		     ATB_ERR_USAGE);
}

/* ---- Wilcoxon signed-rank ------------------------------------------------ */

static void check_wilcoxon(const double *d, size_t n, double want_min_w,
			   double want_p, int want_exact)
{
	struct atb_wilcoxon w;

	cr_assert_eq(atb_stats_wilcoxon(d, n, &w, NULL), ATB_OK);
	cr_assert_eq(w.exact, want_exact, "n %zu exact %d", n, w.exact);
	cr_assert(close_to(fmin(w.w_plus, w.w_minus), want_min_w, EPS),
		  "n %zu W %g", n, fmin(w.w_plus, w.w_minus));
	cr_assert(close_to(w.p_value, want_p, 1e-12), "n %zu p %.17g want %.17g",
		  n, w.p_value, want_p);
}

/* expected: scipy.stats.wilcoxon(d, method='exact') statistic and pvalue */
Test(stats, wilcoxon_exact_p_matches_scipy_n6)
{
	static const double d[] = {0.12, -0.05, 0.31, 0.22, 0.08, 0.17};

	check_wilcoxon(d, 6, 1.0, 0.0625, 1);
}

Test(stats, wilcoxon_exact_p_matches_scipy_n10)
{
	static const double d[] = {0.5, -0.2, 1.3, 0.7, -0.9,
				   0.4, 1.1, 0.05, -0.35, 0.6};

	check_wilcoxon(d, 10, 13.0, 0.16015625, 1);
}

Test(stats, wilcoxon_exact_p_matches_scipy_n20)
{
	static const double d[] = {0.21, -0.13, 0.44, 0.05, 0.38, -0.02, 0.27,
				   0.19, -0.31, 0.52, 0.11, 0.09, -0.07, 0.33,
				   0.24, 0.015, 0.41, -0.18, 0.29, 0.36};

	check_wilcoxon(d, 20, 35.0, 0.0072956085205078125, 1);
}

Test(stats, wilcoxon_exact_p_matches_scipy_n25)
{
	double d[25];
	int i;

	/* python: [(i % 7 - 2.5) * 0.1 + 0.013 * i for i in range(25)] */
	for (i = 0; i < 25; i++)
		d[i] = (i % 7 - 2.5) * 0.1 + 0.013 * i;
	check_wilcoxon(d, 25, 47.0, 0.0011548399925231934, 1);
}

Test(stats, wilcoxon_exact_with_ties_matches_full_permutation)
{
	/*
	 * Tied |d| (0.1 x3, 0.2 x3): the DP over doubled midranks is the
	 * exact permutation distribution.  scipy.stats.wilcoxon(d,
	 * method=PermutationMethod()) enumerates all 2^10 sign flips: 0.4375.
	 */
	static const double d[] = {0.1, -0.1, 0.2, 0.2, -0.3,
				   0.4, 0.1, 0.5, 0.2, -0.6};
	struct atb_wilcoxon w;

	check_wilcoxon(d, 10, 19.0, 0.4375, 1);
	cr_assert_eq(atb_stats_wilcoxon(d, 10, &w, NULL), ATB_OK);
	cr_assert(w.ties);
}

Test(stats, wilcoxon_normal_approximation_matches_scipy_n40)
{
	/*
	 * numpy.random.default_rng(1).normal(0.08, 0.2, 40) rounded to 3
	 * places (ties at 0.123 and |0.004|); scipy.stats.wilcoxon(d,
	 * method='asymptotic', correction=True): W = 193.5, p below.
	 */
	static const double d[] = {
		0.149, 0.244, 0.146, -0.181, 0.261, 0.169, -0.027, 0.196,
		0.153, 0.139, 0.086, 0.189, -0.067, 0.047, -0.016, 0.2,
		0.088, 0.022, -0.076, 0.029, 0.082, 0.025, 0.339, 0.281,
		-0.462, -0.298, 0.045, -0.004, 0.123, 0.123, 0.504, -0.142,
		0.004, 0.489, 0.209, 0.213, -0.023, -0.25, 0.113, 0.102};
	struct atb_wilcoxon w;

	check_wilcoxon(d, 40, 193.5, 0.0036915158899722121, 0);
	cr_assert_eq(atb_stats_wilcoxon(d, 40, &w, NULL), ATB_OK);
	cr_assert(w.ties);
	cr_assert(w.z > 0);
}

Test(stats, wilcoxon_drops_zeros)
{
	/* zeros dropped: the same as the six nonzero values (n6 above) */
	static const double d[] = {0.0, 0.12, -0.05, 0.31, 0.0, 0.22, 0.08, 0.17};
	struct atb_wilcoxon w;

	check_wilcoxon(d, 8, 1.0, 0.0625, 1);
	cr_assert_eq(atb_stats_wilcoxon(d, 8, &w, NULL), ATB_OK);
	cr_assert_eq(w.n_zero, 2);
	cr_assert_eq(w.n_used, 6);
}

Test(stats, wilcoxon_all_zero_gives_p_one)
{
	static const double d[] = {0.0, 0.0, 0.0};
	struct atb_wilcoxon w;

	cr_assert_eq(atb_stats_wilcoxon(d, 3, &w, NULL), ATB_OK);
	cr_assert_eq(w.n_used, 0);
	cr_assert_eq(w.p_value, 1.0);
}

Test(stats, wilcoxon_min_p_is_two_over_two_to_the_n)
{
	static const double d[] = {1, 2, 3, 4, 5, 6};
	struct atb_wilcoxon w;

	/* every sign positive: the most extreme outcome, p = 2/2^n */
	cr_assert_eq(atb_stats_wilcoxon(d, 5, &w, NULL), ATB_OK);
	cr_assert_eq(w.p_value, 0.0625);
	cr_assert_eq(w.min_p_value, 0.0625);
	cr_assert_eq(atb_stats_wilcoxon(d, 6, &w, NULL), ATB_OK);
	cr_assert_eq(w.p_value, 0.03125);
}

Test(stats, wilcoxon_refuses_empty_and_non_finite)
{
	struct atb_error err;
	struct atb_wilcoxon w;
	double d[] = {1, -INFINITY};

	atb_error_clear(&err);
	cr_assert_eq(atb_stats_wilcoxon(d, 0, &w, &err), ATB_ERR_USAGE);
	cr_assert_eq(atb_stats_wilcoxon(d, 2, &w, &err), ATB_ERR_USAGE);
	cr_assert(strstr(err.msg, "non-finite difference at index 1"), "%s",
		  err.msg);
}

/* ---- the paired analysis ------------------------------------------------- */

#define MAXS 64
#define MAXT 256

struct fixture {
	struct atb_paired_seed seeds[MAXS];
	double base[MAXS][MAXT];
	double cand[MAXS][MAXT];
	struct atb_paired_input in;
};

static void fixture_init(struct fixture *f, size_t nseeds)
{
	size_t i;

	memset(f, 0, sizeof(*f));
	for (i = 0; i < nseeds; i++) {
		f->seeds[i].seed = 1000 + i;
		f->seeds[i].baseline = f->base[i];
		f->seeds[i].candidate = f->cand[i];
	}
	f->in.seeds = f->seeds;
	f->in.nseeds = nseeds;
	f->in.ci_level = 0.95;
	f->in.bootstrap_resamples = 2000;
	f->in.significance_alpha = 0.05;
	f->in.cv_cap = 0.05;
	f->in.bootstrap_seed = 42;
}

/*
 * nseeds seeds, ntrials trials per arm: times around base_ms (per-seed
 * offset of seed_spread) with multiplicative noise, the candidate `speedup`
 * times faster.
 */
static void fixture_fill(struct fixture *f, gsl_rng *rng, size_t nseeds,
			 size_t ntrials, double speedup, double noise,
			 double seed_spread)
{
	size_t i, j;

	fixture_init(f, nseeds);
	for (i = 0; i < nseeds; i++) {
		double level = 1.0 + seed_spread * gsl_ran_gaussian(rng, 1.0);

		for (j = 0; j < ntrials; j++) {
			f->base[i][j] = level * exp(noise * gsl_ran_gaussian(rng, 1.0));
			f->cand[i][j] = level / speedup *
					exp(noise * gsl_ran_gaussian(rng, 1.0));
		}
		f->seeds[i].nbaseline = ntrials;
		f->seeds[i].ncandidate = ntrials;
	}
}

Test(stats, paired_geomean_of_per_seed_ratios)
{
	static struct fixture f;
	struct atb_paired_result r;

	/* ratios 2, 0.5, 3 (baseline/candidate): geomean 3^(1/3) */
	fixture_init(&f, 3);
	f.base[0][0] = 2; f.cand[0][0] = 1;
	f.base[1][0] = 1; f.cand[1][0] = 2;
	f.base[2][0] = 6; f.cand[2][0] = 2;
	for (int i = 0; i < 3; i++)
		f.seeds[i].nbaseline = f.seeds[i].ncandidate = 1;
	cr_assert_eq(atb_stats_paired(&f.in, &r, NULL), ATB_OK);
	cr_assert(close_to(r.seeds[0].ratio, 2.0, EPS));
	cr_assert(close_to(r.seeds[1].ratio, 0.5, EPS));
	cr_assert(close_to(r.seeds[2].ratio, 3.0, EPS));
	cr_assert(close_to(r.geomean_ratio, 1.4422495703074083, 1e-14),
		  "geomean %.17g", r.geomean_ratio);
	cr_assert_eq(r.seeds[2].seed, 1002);
	atb_stats_paired_release(&r);

	/* a rate (higher is better): candidate/baseline, 3^(-1/3) */
	f.in.higher_is_better = 1;
	cr_assert_eq(atb_stats_paired(&f.in, &r, NULL), ATB_OK);
	cr_assert(close_to(r.geomean_ratio, 1.0 / 1.4422495703074083, 1e-14));
	cr_assert(close_to(r.seeds[0].ratio, 0.5, EPS));
	atb_stats_paired_release(&r);
}

Test(stats, paired_ratio_uses_median_of_each_arm)
{
	static struct fixture f;
	struct atb_paired_result r;
	static const double b[] = {10, 12, 11, 100};  /* median 11.5 */
	static const double c[] = {5, 4, 6};          /* median 5 */

	fixture_init(&f, 2);
	memcpy(f.base[0], b, sizeof(b));
	memcpy(f.cand[0], c, sizeof(c));
	f.seeds[0].nbaseline = 4;
	f.seeds[0].ncandidate = 3;
	f.base[1][0] = 1; f.cand[1][0] = 1;
	f.seeds[1].nbaseline = f.seeds[1].ncandidate = 1;
	cr_assert_eq(atb_stats_paired(&f.in, &r, NULL), ATB_OK);
	cr_assert_eq(r.seeds[0].baseline_median, 11.5);
	cr_assert_eq(r.seeds[0].candidate_median, 5.0);
	cr_assert(close_to(r.seeds[0].ratio, 2.3, EPS));
	atb_stats_paired_release(&r);
}

Test(stats, paired_cv_is_sd_over_mean_of_per_seed_medians)
{
	static struct fixture f;
	struct atb_paired_result r;
	static const double bm[] = {10, 11, 12, 9};
	int i;

	/*
	 * Baseline medians 10, 11, 12, 9: mean 10.5, sample sd sqrt(5/3), CV
	 * 0.12295...; candidate medians all 5: CV 0.  The larger is reported.
	 */
	fixture_init(&f, 4);
	for (i = 0; i < 4; i++) {
		f.base[i][0] = bm[i];
		f.cand[i][0] = 5;
		f.seeds[i].nbaseline = f.seeds[i].ncandidate = 1;
	}
	cr_assert_eq(atb_stats_paired(&f.in, &r, NULL), ATB_OK);
	cr_assert(close_to(r.cv_baseline, sqrt(5.0 / 3.0) / 10.5, EPS),
		  "cv %.17g", r.cv_baseline);
	cr_assert_eq(r.cv_candidate, 0.0);
	cr_assert_eq(r.cv, r.cv_baseline);
	cr_assert(!r.cv_within_cap);
	atb_stats_paired_release(&r);

	f.in.cv_cap = 0.13;
	cr_assert_eq(atb_stats_paired(&f.in, &r, NULL), ATB_OK);
	cr_assert(r.cv_within_cap);
	atb_stats_paired_release(&r);
}

Test(stats, paired_cv_of_ratio_cancels_drift_common_to_both_arms)
{
	static struct fixture f;
	struct atb_paired_result r;
	static const double bm[] = {10, 11, 12, 9};
	int i;

	/*
	 * PROTO: stats.cv_of.  The box drifts from seed to seed and slows both
	 * arms alike: baseline medians 10, 11, 12, 9, candidate exactly half.
	 * Per-arm medians: CV 0.12295 each (over a 0.05 cap); per-seed ratios
	 * all 2: CV 0.  Bounding the ratios admits it; bounding the medians,
	 * as protocol v1 does, refuses it.
	 */
	fixture_init(&f, 4);
	for (i = 0; i < 4; i++) {
		f.base[i][0] = bm[i];
		f.cand[i][0] = bm[i] / 2;
		f.seeds[i].nbaseline = f.seeds[i].ncandidate = 1;
	}
	f.in.cv_of_ratio = 1;
	cr_assert_eq(atb_stats_paired(&f.in, &r, NULL), ATB_OK);
	cr_assert(close_to(r.cv_baseline, sqrt(5.0 / 3.0) / 10.5, EPS), "cv %.17g", r.cv_baseline);
	cr_assert(close_to(r.cv_candidate, sqrt(5.0 / 3.0) / 10.5, EPS));
	cr_assert(fabs(r.cv_ratio) < 1e-15, "cv_ratio %.17g", r.cv_ratio);
	cr_assert_eq(r.cv, r.cv_ratio);
	cr_assert(r.cv_within_cap);
	atb_stats_paired_release(&r);

	f.in.cv_of_ratio = 0;
	cr_assert_eq(atb_stats_paired(&f.in, &r, NULL), ATB_OK);
	cr_assert_eq(r.cv, fmax(r.cv_baseline, r.cv_candidate));
	cr_assert(!r.cv_within_cap);
	atb_stats_paired_release(&r);

	/* Ratios 2, 2.2, 1.8, 2: mean 2, sample sd sqrt(0.08/3): CV 0.08165. */
	f.cand[1][0] = 11 / 2.2;
	f.cand[2][0] = 12 / 1.8;
	f.in.cv_of_ratio = 1;
	cr_assert_eq(atb_stats_paired(&f.in, &r, NULL), ATB_OK);
	cr_assert(close_to(r.cv_ratio, sqrt(0.08 / 3) / 2, 1e-12), "cv_ratio %.17g", r.cv_ratio);
	cr_assert(!r.cv_within_cap);
	atb_stats_paired_release(&r);
}

Test(stats, paired_mde_follows_t_formula)
{
	static struct fixture f;
	struct atb_paired_result r;
	int i;

	/*
	 * Log ratios 0.1 .. 0.5: sd sqrt(0.025).  scipy: t.ppf(0.975, 4) +
	 * t.ppf(0.8, 4) = 3.717409682432975.  MDE = exp(3.7174 * sd / sqrt 5).
	 */
	fixture_init(&f, 5);
	for (i = 0; i < 5; i++) {
		f.base[i][0] = exp(0.1 * (i + 1));
		f.cand[i][0] = 1.0;
		f.seeds[i].nbaseline = f.seeds[i].ncandidate = 1;
	}
	cr_assert_eq(atb_stats_paired(&f.in, &r, NULL), ATB_OK);
	cr_assert(close_to(r.log_ratio_sd, sqrt(0.025), 1e-12));
	cr_assert(close_to(r.mde_ratio,
			   exp(3.717409682432975 * sqrt(0.025) / sqrt(5.0)),
			   1e-9),
		  "mde %.17g", r.mde_ratio);
	atb_stats_paired_release(&r);
}

Test(stats, paired_mde_shrinks_with_more_seeds)
{
	static struct fixture f;
	struct atb_paired_result r;
	size_t n, i;
	double prev = INFINITY;

	/* the same spread of log ratios (+-0.05 alternating) at 4, 8, 16, 32 seeds */
	for (n = 4; n <= 32; n *= 2) {
		fixture_init(&f, n);
		for (i = 0; i < n; i++) {
			f.base[i][0] = exp(0.1 + (i % 2 ? 0.05 : -0.05));
			f.cand[i][0] = 1.0;
			f.seeds[i].nbaseline = f.seeds[i].ncandidate = 1;
		}
		f.in.bootstrap_resamples = 200;
		cr_assert_eq(atb_stats_paired(&f.in, &r, NULL), ATB_OK);
		cr_assert(r.mde_ratio > 1.0 && r.mde_ratio < prev,
			  "n %zu mde %g prev %g", n, r.mde_ratio, prev);
		prev = r.mde_ratio;
		atb_stats_paired_release(&r);
	}
}

Test(stats, paired_bootstrap_is_reproducible_for_same_seed)
{
	static struct fixture f;
	struct atb_paired_result r1, r2, r3;
	gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
	size_t nseeds[] = {5, 12}; /* two-stage, then seeds only */

	for (int k = 0; k < 2; k++) {
		gsl_rng_set(rng, 7);
		fixture_fill(&f, rng, nseeds[k], 30, 1.1, 0.03, 0.01);
		cr_assert_eq(atb_stats_paired(&f.in, &r1, NULL), ATB_OK);
		cr_assert_eq(atb_stats_paired(&f.in, &r2, NULL), ATB_OK);
		f.in.bootstrap_seed = 43;
		cr_assert_eq(atb_stats_paired(&f.in, &r3, NULL), ATB_OK);
		cr_assert_eq(r1.bootstrap_within_seed, k == 0);
		cr_assert_eq(r1.bootstrap_seed, 42);
		cr_assert_eq(r3.bootstrap_seed, 43);
		cr_assert(r1.ci_lo == r2.ci_lo && r1.ci_hi == r2.ci_hi);
		cr_assert(r1.ci_lo != r3.ci_lo || r1.ci_hi != r3.ci_hi,
			  "another seed gave the same CI");
		cr_assert(r1.ci_lo < r1.geomean_ratio &&
			  r1.geomean_ratio < r1.ci_hi);
		atb_stats_paired_release(&r1);
		atb_stats_paired_release(&r2);
		atb_stats_paired_release(&r3);
	}
	gsl_rng_free(rng);
}

Test(stats, paired_ci_covers_one_for_identical_arms)
{
	static struct fixture f;
	struct atb_paired_result r;
	size_t i, nseeds[] = {5, 12};

	for (int k = 0; k < 2; k++) {
		gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);

		gsl_rng_set(rng, 11);
		fixture_fill(&f, rng, nseeds[k], 40, 1.0, 0.02, 0.01);
		/* identical: the candidate's samples are the baseline's */
		for (i = 0; i < nseeds[k]; i++)
			memcpy(f.cand[i], f.base[i], sizeof(f.base[i]));
		cr_assert_eq(atb_stats_paired(&f.in, &r, NULL), ATB_OK);
		cr_assert_eq(r.geomean_ratio, 1.0);
		cr_assert(r.ci_lo <= 1.0 && 1.0 <= r.ci_hi, "ci [%g, %g]",
			  r.ci_lo, r.ci_hi);
		cr_assert_eq(r.verdict, ATB_VERDICT_NO_DIFFERENCE);
		atb_stats_paired_release(&r);

		/* same distribution, independent draws */
		fixture_fill(&f, rng, nseeds[k], 40, 1.0, 0.02, 0.01);
		cr_assert_eq(atb_stats_paired(&f.in, &r, NULL), ATB_OK);
		cr_assert(r.ci_lo <= 1.0 && 1.0 <= r.ci_hi, "ci [%g, %g]",
			  r.ci_lo, r.ci_hi);
		atb_stats_paired_release(&r);
		gsl_rng_free(rng);
	}
}

Test(stats, paired_verdict_faster_slower_and_none)
{
	static struct fixture f;
	struct atb_paired_result r;
	gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);

	gsl_rng_set(rng, 3);
	fixture_fill(&f, rng, 8, 20, 1.2, 0.01, 0.01);
	cr_assert_eq(atb_stats_paired(&f.in, &r, NULL), ATB_OK);
	cr_assert_eq(r.verdict, ATB_VERDICT_FASTER);
	cr_assert_eq(r.wilcoxon.p_value, 2.0 / 256.0);
	cr_assert(r.ci_lo > 1.1 && r.ci_hi < 1.3, "ci [%g, %g]", r.ci_lo,
		  r.ci_hi);
	cr_assert_str_eq(atb_stats_verdict_name(r.verdict), "faster");
	atb_stats_paired_release(&r);

	fixture_fill(&f, rng, 8, 20, 1.0 / 1.2, 0.01, 0.01);
	cr_assert_eq(atb_stats_paired(&f.in, &r, NULL), ATB_OK);
	cr_assert_eq(r.verdict, ATB_VERDICT_SLOWER);
	cr_assert(r.ci_hi < 1.0);
	atb_stats_paired_release(&r);

	/* rates: the candidate's higher rate is better */
	fixture_fill(&f, rng, 8, 20, 1.0 / 1.2, 0.01, 0.01);
	f.in.higher_is_better = 1;
	cr_assert_eq(atb_stats_paired(&f.in, &r, NULL), ATB_OK);
	cr_assert_eq(r.verdict, ATB_VERDICT_FASTER);
	atb_stats_paired_release(&r);
	gsl_rng_free(rng);
}

/*
 * PROTO: stats.resolution_rel.  The interval is the bootstrap's, widened by
 * (1 + r) on each side, the bootstrap's own bounds kept; at 0 it is the
 * bootstrap's bit for bit.  A difference the seeds agree on (p < alpha) but
 * inside the resolution is no difference: a copy 0.1% "faster" in every
 * seed (what one runner's code placement can do to every seed alike) is
 * not called faster under r = 0.002; a real 20% still is.
 */
Test(stats, paired_resolution_widens_the_interval_and_the_verdict_needs_it)
{
	static struct fixture f;
	struct atb_paired_result r0, r;
	gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);

	gsl_rng_set(rng, 11);
	fixture_fill(&f, rng, 8, 20, 1.001, 0.0001, 0.01);
	gsl_rng_free(rng);
	cr_assert_eq(atb_stats_paired(&f.in, &r0, NULL), ATB_OK);
	cr_assert_eq(r0.verdict, ATB_VERDICT_FASTER, "p %g", r0.wilcoxon.p_value);
	cr_assert(r0.ci_lo > 1.0, "[%.6f, %.6f]", r0.ci_lo, r0.ci_hi);
	cr_assert_eq(r0.boot_lo, r0.ci_lo);
	cr_assert_eq(r0.boot_hi, r0.ci_hi);
	cr_assert_eq(r0.resolution_rel, 0.0);

	f.in.resolution_rel = 0.002;
	cr_assert_eq(atb_stats_paired(&f.in, &r, NULL), ATB_OK);
	cr_assert_eq(r.boot_lo, r0.ci_lo);  /* the same bootstrap */
	cr_assert_eq(r.boot_hi, r0.ci_hi);
	cr_assert_eq(r.ci_lo, r0.ci_lo / 1.002);
	cr_assert_eq(r.ci_hi, r0.ci_hi * 1.002);
	cr_assert(r.ci_lo <= 1.0 && 1.0 <= r.ci_hi, "[%.6f, %.6f]", r.ci_lo, r.ci_hi);
	cr_assert_eq(r.geomean_ratio, r0.geomean_ratio);
	cr_assert_eq(r.wilcoxon.p_value, r0.wilcoxon.p_value);
	cr_assert_eq(r.verdict, ATB_VERDICT_NO_DIFFERENCE);
	cr_assert_eq(r.resolution_rel, 0.002);
	atb_stats_paired_release(&r);
	atb_stats_paired_release(&r0);

	/* slower by 0.1%: no difference either; by 20%: slower */
	rng = gsl_rng_alloc(gsl_rng_mt19937);
	gsl_rng_set(rng, 12);
	fixture_fill(&f, rng, 8, 20, 1.0 / 1.001, 0.0001, 0.01);
	f.in.resolution_rel = 0.002;
	cr_assert_eq(atb_stats_paired(&f.in, &r, NULL), ATB_OK);
	cr_assert(r.boot_hi < 1.0 && r.ci_hi >= 1.0, "[%.6f, %.6f]", r.boot_lo, r.boot_hi);
	cr_assert_eq(r.verdict, ATB_VERDICT_NO_DIFFERENCE);
	atb_stats_paired_release(&r);
	fixture_fill(&f, rng, 8, 20, 1.2, 0.01, 0.01);
	f.in.resolution_rel = 0.002;
	cr_assert_eq(atb_stats_paired(&f.in, &r, NULL), ATB_OK);
	cr_assert_eq(r.verdict, ATB_VERDICT_FASTER);
	cr_assert(r.ci_lo > 1.1);
	atb_stats_paired_release(&r);
	fixture_fill(&f, rng, 8, 20, 1.0 / 1.2, 0.01, 0.01);
	f.in.resolution_rel = 0.002;
	cr_assert_eq(atb_stats_paired(&f.in, &r, NULL), ATB_OK);
	cr_assert_eq(r.verdict, ATB_VERDICT_SLOWER);
	atb_stats_paired_release(&r);
	gsl_rng_free(rng);
}

Test(stats, paired_five_seeds_can_never_reach_alpha_005)
{
	static struct fixture f;
	struct atb_paired_result r;
	gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);

	/* a 2x speedup on 5 seeds: the exact test's floor is 2/32 = 0.0625 */
	gsl_rng_set(rng, 5);
	fixture_fill(&f, rng, 5, 20, 2.0, 0.01, 0.01);
	cr_assert_eq(atb_stats_paired(&f.in, &r, NULL), ATB_OK);
	cr_assert_eq(r.wilcoxon.min_p_value, 0.0625);
	cr_assert_eq(r.wilcoxon.p_value, 0.0625);
	cr_assert_eq(r.verdict, ATB_VERDICT_NO_DIFFERENCE);
	cr_assert(r.ci_lo > 1.5);
	atb_stats_paired_release(&r);
	gsl_rng_free(rng);
}

/* ---- refusals ------------------------------------------------------------ */

static void expect_refusal(struct fixture *f, const char *want)
{
	struct atb_error err;
	struct atb_paired_result r;

	atb_error_clear(&err);
	memset(&r, 0xab, sizeof(r));
	cr_assert_eq(atb_stats_paired(&f->in, &r, &err), ATB_ERR_USAGE,
		     "no refusal for '%s'", want);
	cr_assert_eq(err.status, ATB_ERR_USAGE);
	cr_assert(strstr(err.msg, want), "message '%s' lacks '%s'", err.msg,
		  want);
	cr_assert_null(r.seeds);
	atb_stats_paired_release(&r);
}

static void good_fixture(struct fixture *f)
{
	gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);

	gsl_rng_set(rng, 1);
	fixture_fill(f, rng, 6, 10, 1.0, 0.01, 0.0);
	gsl_rng_free(rng);
}

Test(stats, paired_refuses_fewer_than_two_seeds)
{
	static struct fixture f;

	good_fixture(&f);
	f.in.nseeds = 1;
	expect_refusal(&f, "too few seeds: 1");
	f.in.nseeds = 0;
	expect_refusal(&f, "too few seeds: 0");
}

Test(stats, paired_refuses_empty_samples)
{
	static struct fixture f;

	good_fixture(&f);
	f.seeds[2].nbaseline = 0;
	f.seeds[2].ncandidate = 0;
	expect_refusal(&f, "empty samples: seed '1002'");
}

Test(stats, paired_refuses_unpaired_seed)
{
	static struct fixture f;

	good_fixture(&f);
	f.seeds[3].ncandidate = 0;
	expect_refusal(&f, "unpaired input: seed '1003' has 10 baseline and 0 candidate");
	good_fixture(&f);
	f.seeds[4].seed = 1001;
	expect_refusal(&f, "unpaired input: seed '1001' is listed twice");
}

Test(stats, paired_refuses_non_finite_sample_naming_seed_and_trial)
{
	static struct fixture f;

	good_fixture(&f);
	f.cand[1][7] = NAN;
	expect_refusal(&f, "non-finite sample: seed '1001' candidate trial 7");
	good_fixture(&f);
	f.base[5][0] = INFINITY;
	expect_refusal(&f, "non-finite sample: seed '1005' baseline trial 0");
}

Test(stats, paired_refuses_non_positive_sample_naming_seed_and_trial)
{
	static struct fixture f;

	good_fixture(&f);
	f.base[0][3] = 0.0;
	expect_refusal(&f, "non-positive sample: seed '1000' baseline trial 3");
	good_fixture(&f);
	f.cand[2][9] = -1.5;
	expect_refusal(&f, "non-positive sample: seed '1002' candidate trial 9");
}

Test(stats, paired_refuses_bad_parameters)
{
	static struct fixture f;

	good_fixture(&f);
	f.in.ci_level = 1.0;
	expect_refusal(&f, "ci_level out of range");
	good_fixture(&f);
	f.in.significance_alpha = 0.0;
	expect_refusal(&f, "significance_alpha out of range");
	good_fixture(&f);
	f.in.cv_cap = -0.05;
	expect_refusal(&f, "cv_cap out of range");
	good_fixture(&f);
	f.in.bootstrap_resamples = 0;
	expect_refusal(&f, "bootstrap_resamples out of range");
	good_fixture(&f);
	f.in.resolution_rel = -0.001;
	expect_refusal(&f, "resolution_rel out of range");
	good_fixture(&f);
	f.in.resolution_rel = 1.0;
	expect_refusal(&f, "resolution_rel out of range");
	good_fixture(&f);
	f.in.resolution_rel = NAN;
	expect_refusal(&f, "resolution_rel out of range");
	good_fixture(&f);
	f.in.seeds = NULL;
	expect_refusal(&f, "missing seeds");
	good_fixture(&f);
	f.seeds[1].baseline = NULL;
	expect_refusal(&f, "missing samples: seed '1001' baseline");
}

/* ---- allocation failure -------------------------------------------------- */

static void alloc_walk_paired(size_t nseeds)
{
	static struct fixture f;
	struct atb_paired_result r;
	struct atb_error err;
	gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
	long n, k;

	gsl_rng_set(rng, 9);
	fixture_fill(&f, rng, nseeds, 15, 1.1, 0.02, 0.01);
	gsl_rng_free(rng);
	f.in.bootstrap_resamples = 100;
	atb_alloc_fail_at(0);
	cr_assert_eq(atb_stats_paired(&f.in, &r, NULL), ATB_OK);
	n = atb_alloc_count();
	atb_stats_paired_release(&r);
	cr_assert(n > 5, "only %ld allocations", n);
	for (k = 1; k <= n; k++) {
		atb_error_clear(&err);
		atb_alloc_fail_at(k);
		cr_assert_eq(atb_stats_paired(&f.in, &r, &err), ATB_ERR_NOMEM,
			     "k = %ld", k);
		cr_assert(atb_alloc_failed());
		cr_assert_eq(err.status, ATB_ERR_NOMEM);
		cr_assert_null(r.seeds);
		atb_stats_paired_release(&r);
	}
	atb_alloc_fail_at(0);
}

Test(stats, paired_allocation_failure_walk_returns_nomem)
{
	alloc_walk_paired(4);  /* two-stage bootstrap */
	alloc_walk_paired(12); /* seeds-only bootstrap */
}

Test(stats, median_ci_and_wilcoxon_allocation_failure_walk)
{
	static const double d[] = {0.5, -0.2, 1.3, 0.7, -0.9,
				   0.4, 1.1, 0.05, -0.35, 0.6};
	struct atb_wilcoxon w;
	double lo, hi, m;
	long n, k;

	atb_alloc_fail_at(0);
	cr_assert_eq(atb_stats_wilcoxon(d, 10, &w, NULL), ATB_OK);
	n = atb_alloc_count();
	for (k = 1; k <= n; k++) {
		atb_alloc_fail_at(k);
		cr_assert_eq(atb_stats_wilcoxon(d, 10, &w, NULL), ATB_ERR_NOMEM,
			     "k = %ld", k);
	}
	atb_alloc_fail_at(1);
	cr_assert_eq(atb_stats_median_ci(d, 10, 0.95, &lo, &hi, NULL),
		     ATB_ERR_NOMEM);
	atb_alloc_fail_at(1);
	cr_assert_eq(atb_stats_median(d, 10, &m, NULL), ATB_ERR_NOMEM);
	atb_alloc_fail_at(0);
}
