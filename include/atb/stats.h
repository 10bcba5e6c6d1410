/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Statistics of a paired-seed measurement: medians and quantiles of raw
 * samples, the distribution-free confidence interval of a median, and the
 * paired analysis of baseline against candidate (per-seed ratios, their
 * geometric mean with a bootstrap interval, the Wilcoxon signed-rank test,
 * the cross-run CV of per-seed medians, and the run's minimum detectable
 * effect).  docs/internals/stats.md gives every formula and its source.
 *
 * Pure functions on caller-owned arrays: no I/O, no global state, no clock.
 * The verdict is computed here and only in the harness, never in the runner
 * (the runner may call atb_stats_median_ci for its stopping rule).  All
 * memory goes through atb_malloc, so every function may fail with
 * ATB_ERR_NOMEM; bad arguments are refused with ATB_ERR_USAGE and a message
 * that names the seed and trial index at fault.  GSL is used for sorting,
 * quantiles, the binomial, normal and t distributions and the MT19937
 * generator; inputs are checked first, so GSL's error handler never fires.
 *
 * Does not: decide what to do with a verdict (gates and ingest do), read the
 * protocol (the caller copies its stats section into the input), or print.
 */
#ifndef ATB_STATS_H
#define ATB_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "atb/status.h"

/*
 * Median of n samples into *out.  The samples are not modified (a sorted
 * copy is made).  ATB_ERR_USAGE: n == 0, samples NULL, or a sample that is
 * NaN or infinite (the message names its index).  ATB_ERR_NOMEM.
 */
enum atb_status atb_stats_median(const double *samples, size_t n, double *out,
				 struct atb_error *err);

/*
 * The q-quantile (0 <= q <= 1) of n samples into *out, by linear
 * interpolation between order statistics (Hyndman and Fan's definition 7,
 * the default of R and NumPy; GSL gsl_stats_quantile_from_sorted_data).
 * q = 0.5 is the median.  Statuses as atb_stats_median, and ATB_ERR_USAGE
 * for q outside [0, 1].
 */
enum atb_status atb_stats_quantile(const double *samples, size_t n, double q,
				   double *out, struct atb_error *err);

/*
 * Distribution-free confidence interval of the median at confidence level
 * `level` (0 < level < 1) from order statistics: [x(l), x(n+1-l)] with the
 * largest l such that P(B <= l-1) <= (1-level)/2 for B ~ Binomial(n, 1/2),
 * so the coverage is at least `level` for any continuous distribution.
 *
 * When n is too small for any such l (n < 6 at level 0.95), *lo = -HUGE_VAL
 * and *hi = +HUGE_VAL and the status is ATB_OK: the interval is unbounded,
 * so a stopping rule on its width keeps sampling.
 *
 * Cost: one copy and one sort of n doubles and O(log n) binomial CDF
 * evaluations, cheap enough to call after every trial.  The relative
 * half-width for the runner's stopping rule (PROTO: timing.stopping) is
 * (hi - lo) / (2 * median).
 *
 * Statuses as atb_stats_median, and ATB_ERR_USAGE for level outside (0, 1).
 */
enum atb_status atb_stats_median_ci(const double *samples, size_t n,
				    double level, double *lo, double *hi,
				    struct atb_error *err);

/* Result of the Wilcoxon signed-rank test of "d is symmetric about 0". */
struct atb_wilcoxon {
	size_t n_used;      /* observations after dropping exact zeros */
	size_t n_zero;      /* exact zeros dropped (Wilcoxon's method) */
	double w_plus;      /* sum of the (mid)ranks of |d| where d > 0 */
	double w_minus;     /* same for d < 0; w_plus + w_minus = n(n+1)/2 */
	double z;           /* normal score with tie and continuity correction;
			       0 when exact */
	double p_value;     /* two-sided; 1 when n_used == 0 */
	double min_p_value; /* smallest two-sided p the test could give at
			       this n_used (2^(1-n) when exact): when it is
			       above alpha no data can reach significance */
	int exact;          /* 1: exact null distribution (n_used <= 25) */
	int ties;           /* 1: some |d| were tied (midranks used) */
};

/* n_used at or below which the null distribution is enumerated exactly. */
#define ATB_STATS_WILCOXON_EXACT_MAX 25

/*
 * Two-sided Wilcoxon signed-rank test on d[0..n-1] (for the paired
 * analysis, the per-seed log ratios).  Zeros are dropped (Wilcoxon's own
 * method); tied |d| get midranks.  For n_used <= 25 the p-value is exact:
 * the permutation distribution of W+ over all 2^n sign assignments,
 * counted by dynamic programming (conditional on the ties, so it stays
 * exact with ties).  Beyond, the normal approximation with the tie
 * correction of the variance and a continuity correction of 1/2.
 * ATB_ERR_USAGE: n == 0, d NULL, or a non-finite d (named by index).
 * ATB_ERR_NOMEM.
 */
enum atb_status atb_stats_wilcoxon(const double *d, size_t n,
				   struct atb_wilcoxon *out,
				   struct atb_error *err);

/* One seed of a paired measurement: the raw samples of both arms. */
struct atb_paired_seed {
	uint64_t seed;            /* the seed that fixed the inputs */
	const double *baseline;   /* nbaseline samples (time, or a rate) */
	size_t nbaseline;
	const double *candidate;  /* ncandidate samples, same unit */
	size_t ncandidate;
};

/*
 * Input of atb_stats_paired.  Every pointer is borrowed for the call only.
 * The four numbers come from the protocol's stats section (PROTO: stats.*).
 */
struct atb_paired_input {
	const struct atb_paired_seed *seeds;
	size_t nseeds;               /* >= 2 */
	double ci_level;             /* (0, 1), e.g. 0.95 */
	int bootstrap_resamples;     /* >= 1, e.g. 10000 */
	double significance_alpha;   /* (0, 1), e.g. 0.05 */
	double cv_cap;               /* > 0, e.g. 0.05 */
	uint64_t bootstrap_seed;     /* seeds MT19937; kept in the result */
	/*
	 * 0: samples are costs (times), ratio = baseline / candidate.
	 * 1: samples are rates (requests/s), ratio = candidate / baseline.
	 * Either way a ratio above 1 means the candidate is better.
	 */
	int higher_is_better;
	/*
	 * 0: cv (the one cv_cap bounds) is the larger per-arm CV of per-seed
	 * medians (protocol v1).  1: cv is the CV of the per-seed ratios
	 * (PROTO: stats.cv_of, per_seed_ratio, v2 on).
	 */
	int cv_of_ratio;
	/*
	 * PROTO: stats.resolution_rel (version 10 on; 0 before): the share a
	 * ratio may be off by an effect shared by every seed of one
	 * measurement (one runner's code placement, handles, workspaces), which
	 * no resampling of its seeds can see.  >= 0 and < 1.  The reported
	 * interval is the bootstrap's [lo / (1 + r), hi * (1 + r)], and a
	 * verdict of faster or slower also needs that interval to exclude 1.
	 */
	double resolution_rel;
};

enum atb_verdict {
	ATB_VERDICT_NO_DIFFERENCE = 0, /* p >= alpha: no detectable difference */
	ATB_VERDICT_FASTER = 1,        /* p < alpha and the candidate is better */
	ATB_VERDICT_SLOWER = 2,        /* p < alpha and the candidate is worse */
};

/* Stable lowercase name: "no_difference", "faster", "slower". */
const char *atb_stats_verdict_name(enum atb_verdict v);

struct atb_paired_seed_result {
	uint64_t seed;
	size_t nbaseline, ncandidate;
	double baseline_median;
	double candidate_median;
	double ratio;       /* > 1: candidate better (see higher_is_better) */
	double log_ratio;   /* natural log of ratio */
};

/*
 * Below this many seeds the bootstrap resamples trials within each drawn
 * seed as well as the seeds (a two-stage bootstrap): with few seeds the
 * seed-only bootstrap has few distinct resamples and ignores the noise of
 * each per-seed median.
 */
#define ATB_STATS_BOOTSTRAP_FEW_SEEDS 10

/* Power for the minimum detectable effect. */
#define ATB_STATS_MDE_POWER 0.8

/*
 * Result of atb_stats_paired.  Caller-owned; release with
 * atb_stats_paired_release (seeds[] is owned by the result).
 */
struct atb_paired_result {
	struct atb_paired_seed_result *seeds; /* nseeds entries, input order */
	size_t nseeds;
	int higher_is_better;

	/* exp(mean of per-seed log ratios) */
	double geomean_ratio;

	/*
	 * The interval of geomean_ratio: the percentile bootstrap's
	 * [boot_lo, boot_hi] widened by resolution_rel (equal to it at 0).
	 */
	double ci_lo, ci_hi;
	double boot_lo, boot_hi;
	double resolution_rel;
	double ci_level;
	int bootstrap_resamples;
	uint64_t bootstrap_seed;     /* reproduces the CI exactly */
	int bootstrap_within_seed;   /* 1: trials resampled too (few seeds) */

	/* Wilcoxon signed-rank test on per-seed log ratios, and the verdict */
	struct atb_wilcoxon wilcoxon;
	double alpha;
	enum atb_verdict verdict;

	/* cross-run CV of per-seed medians (sample sd / mean), of the ratios */
	double cv_baseline;
	double cv_candidate;
	double cv_ratio;             /* CV of the per-seed ratios */
	double cv;                   /* cv_ratio, or the larger per-arm one (cv_of_ratio) */
	double cv_cap;
	int cv_within_cap;           /* cv <= cv_cap (PROTO: stats.cv_cap) */

	/* minimum detectable effect at alpha with 80% power */
	double log_ratio_sd;         /* sample sd of per-seed log ratios */
	double mde_ratio;            /* smallest ratio > 1 distinguishable from 1 */
};

/*
 * The paired analysis of one measurement (PROTO: stats).  Fills *out, which
 * the caller then owns (atb_stats_paired_release); on failure *out is left
 * released (seeds NULL), so releasing it again is harmless.
 *
 * Per seed: the median of each arm and ratio = baseline/candidate (or
 * candidate/baseline when higher_is_better).  Then the geometric mean of
 * the ratios, its percentile bootstrap CI (seeds resampled with
 * replacement by MT19937 seeded with bootstrap_seed; trials too below
 * ATB_STATS_BOOTSTRAP_FEW_SEEDS seeds), the Wilcoxon signed-rank test on
 * the log ratios with verdict FASTER/SLOWER when p < alpha (direction from
 * W+ against W-) and, when resolution_rel > 0, the widened interval
 * excludes 1 on that side; NO_DIFFERENCE otherwise, the CV of per-seed medians
 * of each arm against cv_cap, and the minimum detectable effect
 * exp((t(1-alpha/2, n-1) + t(power, n-1)) * sd / sqrt(n)).
 *
 * ATB_ERR_USAGE, with the seed and trial named: fewer than 2 seeds; a seed
 * with no samples in either arm; a seed with samples in one arm only, or a
 * seed listed twice (unpaired input); a sample that is not finite or not
 * positive; ci_level, alpha, cv_cap, bootstrap_resamples or resolution_rel
 * out of range.
 * ATB_ERR_NOMEM.
 */
enum atb_status atb_stats_paired(const struct atb_paired_input *in,
				 struct atb_paired_result *out,
				 struct atb_error *err);

/* Free what *r owns and zero it.  r may be NULL; idempotent. */
void atb_stats_paired_release(struct atb_paired_result *r);

#endif
