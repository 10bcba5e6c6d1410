/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The paired-seed analysis (PROTO: stats): per-seed medians and ratios,
 * their geometric mean and its bootstrap interval, the Wilcoxon verdict,
 * the cross-run CV against the cap, and the minimum detectable effect.
 * Every formula and the reason for each choice: docs/internals/stats.md.
 */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <gsl/gsl_cdf.h>
#include <gsl/gsl_rng.h>
#include <gsl/gsl_sort.h>
#include <gsl/gsl_statistics_double.h>

#include "atb/alloc.h"
#include "atb/stats.h"
#include "stats_int.h"
#include "banned.h"

#define MAX_RESAMPLES 10000000

void atb_stats_paired_release(struct atb_paired_result *r)
{
	if (!r)
		return;
	atb_free(r->seeds);
	memset(r, 0, sizeof(*r));
}

static enum atb_status check_params(const struct atb_paired_input *in,
				    struct atb_error *err)
{
	if (!(in->ci_level > 0.0 && in->ci_level < 1.0))
		return atb_error_set(err, ATB_ERR_USAGE,
				     "ci_level out of range: '%g' (need 0 < ci_level < 1)",
				     in->ci_level);
	if (!(in->significance_alpha > 0.0 && in->significance_alpha < 1.0))
		return atb_error_set(err, ATB_ERR_USAGE,
				     "significance_alpha out of range: '%g' (need 0 < alpha < 1)",
				     in->significance_alpha);
	if (!(in->cv_cap > 0.0 && isfinite(in->cv_cap)))
		return atb_error_set(err, ATB_ERR_USAGE,
				     "cv_cap out of range: '%g' (need a positive number)",
				     in->cv_cap);
	if (in->bootstrap_resamples < 1 ||
	    in->bootstrap_resamples > MAX_RESAMPLES)
		return atb_error_set(err, ATB_ERR_USAGE,
				     "bootstrap_resamples out of range: '%d' (need 1 to %d)",
				     in->bootstrap_resamples, MAX_RESAMPLES);
	if (!(in->resolution_rel >= 0.0 && in->resolution_rel < 1.0))
		return atb_error_set(err, ATB_ERR_USAGE,
				     "resolution_rel out of range: '%g' (need 0 <= resolution_rel < 1)",
				     in->resolution_rel);
	return ATB_OK;
}

static enum atb_status check_arm(uint64_t seed, const char *arm,
				 const double *x, size_t n,
				 struct atb_error *err)
{
	size_t i;

	if (!x)
		return atb_error_set(err, ATB_ERR_USAGE,
				     "missing samples: seed '%llu' %s array is NULL with %zu samples",
				     (unsigned long long)seed, arm, n);
	/* MT19937 draws indices below 2^32 (gsl_rng_uniform_int) */
	if (n > (size_t)UINT32_MAX)
		return atb_error_set(err, ATB_ERR_USAGE,
				     "too many samples: seed '%llu' %s has %zu (at most %lu)",
				     (unsigned long long)seed, arm, n,
				     (unsigned long)UINT32_MAX);
	for (i = 0; i < n; i++) {
		if (!isfinite(x[i]))
			return atb_error_set(err, ATB_ERR_USAGE,
					     "non-finite sample: seed '%llu' %s trial %zu is '%g'",
					     (unsigned long long)seed, arm, i,
					     x[i]);
		if (x[i] <= 0.0)
			return atb_error_set(err, ATB_ERR_USAGE,
					     "non-positive sample: seed '%llu' %s trial %zu is '%g'",
					     (unsigned long long)seed, arm, i,
					     x[i]);
	}
	return ATB_OK;
}

static enum atb_status check_seeds(const struct atb_paired_input *in,
				   struct atb_error *err)
{
	size_t i, j;
	enum atb_status s;

	if (in->nseeds < 2)
		return atb_error_set(err, ATB_ERR_USAGE,
				     "too few seeds: %zu (need at least 2 paired seeds)",
				     in->nseeds);
	if (!in->seeds)
		return atb_error_set(err, ATB_ERR_USAGE,
				     "missing seeds: NULL with nseeds = %zu",
				     in->nseeds);
	if (in->nseeds > (size_t)UINT32_MAX)
		return atb_error_set(err, ATB_ERR_USAGE,
				     "too many seeds: %zu", in->nseeds);
	for (i = 0; i < in->nseeds; i++) {
		const struct atb_paired_seed *p = &in->seeds[i];
		unsigned long long id = (unsigned long long)p->seed;

		if (!p->nbaseline && !p->ncandidate)
			return atb_error_set(err, ATB_ERR_USAGE,
					     "empty samples: seed '%llu' has no baseline and no candidate samples",
					     id);
		if (!p->nbaseline || !p->ncandidate)
			return atb_error_set(err, ATB_ERR_USAGE,
					     "unpaired input: seed '%llu' has %zu baseline and %zu candidate samples",
					     id, p->nbaseline, p->ncandidate);
		for (j = 0; j < i; j++)
			if (in->seeds[j].seed == p->seed)
				return atb_error_set(err, ATB_ERR_USAGE,
						     "unpaired input: seed '%llu' is listed twice (entries %zu and %zu)",
						     id, j, i);
		s = check_arm(p->seed, "baseline", p->baseline, p->nbaseline,
			      err);
		if (s)
			return s;
		s = check_arm(p->seed, "candidate", p->candidate,
			      p->ncandidate, err);
		if (s)
			return s;
	}
	return ATB_OK;
}

static double log_ratio(double base, double cand, int higher_is_better)
{
	return higher_is_better ? log(cand) - log(base) : log(base) - log(cand);
}

/* Median of n draws with replacement from x, using work[n]. */
static double resampled_median(gsl_rng *rng, const double *x, size_t n,
			       double *work)
{
	size_t i;

	for (i = 0; i < n; i++)
		work[i] = x[gsl_rng_uniform_int(rng, n)];
	return gsl_stats_median(work, 1, n);
}

/*
 * Percentile bootstrap of the mean log ratio.  gsl_rng_alloc would use
 * malloc; the state is allocated here instead (gsl_rng's two fields are
 * public) so that allocation failure injection covers it.
 */
static enum atb_status bootstrap(const struct atb_paired_input *in,
				 const double *logr,
				 struct atb_paired_result *out,
				 struct atb_error *err)
{
	size_t n = in->nseeds, B = (size_t)in->bootstrap_resamples;
	size_t b, i, maxtrials = 0;
	int within = n < ATB_STATS_BOOTSTRAP_FEW_SEEDS;
	double *reps = NULL, *work = NULL;
	gsl_rng rng;
	enum atb_status s = ATB_OK;

	rng.type = gsl_rng_mt19937;
	rng.state = atb_calloc(1, rng.type->size);
	reps = atb_malloc(B * sizeof(*reps));
	if (within)
		for (i = 0; i < n; i++) {
			if (in->seeds[i].nbaseline > maxtrials)
				maxtrials = in->seeds[i].nbaseline;
			if (in->seeds[i].ncandidate > maxtrials)
				maxtrials = in->seeds[i].ncandidate;
		}
	if (within)
		work = atb_malloc(maxtrials * sizeof(*work));
	if (!rng.state || !reps || (within && !work)) {
		s = atb_error_set(err, ATB_ERR_NOMEM,
				  "out of memory for %zu bootstrap resamples", B);
		goto out;
	}
	gsl_rng_set(&rng, (unsigned long)in->bootstrap_seed);
	for (b = 0; b < B; b++) {
		double sum = 0.0;

		for (i = 0; i < n; i++) {
			size_t j = gsl_rng_uniform_int(&rng, n);
			const struct atb_paired_seed *p = &in->seeds[j];

			if (within) {
				double mb = resampled_median(&rng, p->baseline,
							     p->nbaseline, work);
				double mc = resampled_median(&rng, p->candidate,
							     p->ncandidate, work);

				sum += log_ratio(mb, mc, in->higher_is_better);
			} else {
				sum += logr[j];
			}
		}
		reps[b] = sum / (double)n;
	}
	gsl_sort(reps, 1, B);
	out->boot_lo = exp(gsl_stats_quantile_from_sorted_data(
		reps, 1, B, (1.0 - in->ci_level) / 2.0));
	out->boot_hi = exp(gsl_stats_quantile_from_sorted_data(
		reps, 1, B, (1.0 + in->ci_level) / 2.0));
	/* PROTO: stats.resolution_rel -- at 0 the bootstrap's own bounds, bit for bit */
	out->resolution_rel = in->resolution_rel;
	out->ci_lo = in->resolution_rel > 0 ? out->boot_lo / (1.0 + in->resolution_rel)
					    : out->boot_lo;
	out->ci_hi = in->resolution_rel > 0 ? out->boot_hi * (1.0 + in->resolution_rel)
					    : out->boot_hi;
	out->bootstrap_within_seed = within;
out:
	atb_free(rng.state);
	atb_free(reps);
	atb_free(work);
	return s;
}

enum atb_status atb_stats_paired(const struct atb_paired_input *in,
				 struct atb_paired_result *out,
				 struct atb_error *err)
{
	enum atb_status s;
	size_t n, i;
	double *bmed = NULL, *cmed = NULL, *logr = NULL;
	double *sorted = NULL;
	double mb, mc, sd;

	if (!out)
		return atb_error_set(err, ATB_ERR_USAGE,
				     "missing result: NULL out");
	memset(out, 0, sizeof(*out));
	if (!in)
		return atb_error_set(err, ATB_ERR_USAGE,
				     "missing input: NULL in");
	s = check_params(in, err);
	if (s)
		return s;
	s = check_seeds(in, err);
	if (s)
		return s;
	n = in->nseeds;

	out->seeds = atb_calloc(n, sizeof(*out->seeds));
	bmed = atb_malloc(n * sizeof(*bmed));
	cmed = atb_malloc(n * sizeof(*cmed));
	logr = atb_malloc(n * sizeof(*logr));
	if (!out->seeds || !bmed || !cmed || !logr) {
		s = atb_error_set(err, ATB_ERR_NOMEM,
				  "out of memory for %zu seeds", n);
		goto fail;
	}
	out->nseeds = n;
	out->higher_is_better = in->higher_is_better ? 1 : 0;
	out->ci_level = in->ci_level;
	out->bootstrap_resamples = in->bootstrap_resamples;
	out->bootstrap_seed = in->bootstrap_seed;
	out->alpha = in->significance_alpha;
	out->cv_cap = in->cv_cap;

	for (i = 0; i < n; i++) {
		const struct atb_paired_seed *p = &in->seeds[i];
		struct atb_paired_seed_result *r = &out->seeds[i];

		s = atbi_stats_sorted_copy(p->baseline, p->nbaseline, &sorted,
					   err);
		if (s)
			goto fail;
		bmed[i] = gsl_stats_median_from_sorted_data(sorted, 1,
							    p->nbaseline);
		atb_free(sorted);
		s = atbi_stats_sorted_copy(p->candidate, p->ncandidate,
					   &sorted, err);
		if (s)
			goto fail;
		cmed[i] = gsl_stats_median_from_sorted_data(sorted, 1,
							    p->ncandidate);
		atb_free(sorted);
		sorted = NULL;
		logr[i] = log_ratio(bmed[i], cmed[i], in->higher_is_better);
		r->seed = p->seed;
		r->nbaseline = p->nbaseline;
		r->ncandidate = p->ncandidate;
		r->baseline_median = bmed[i];
		r->candidate_median = cmed[i];
		r->log_ratio = logr[i];
		r->ratio = exp(logr[i]);
	}

	out->geomean_ratio = exp(gsl_stats_mean(logr, 1, n));

	/* PROTO: stats.cv_cap */
	mb = gsl_stats_mean(bmed, 1, n);
	mc = gsl_stats_mean(cmed, 1, n);
	out->cv_baseline = gsl_stats_sd_m(bmed, 1, n, mb) / mb;
	out->cv_candidate = gsl_stats_sd_m(cmed, 1, n, mc) / mc;
	/* PROTO: stats.cv_of: the sample CV of the per-seed ratios (n >= 2 here) */
	{
		double sum = 0, sq = 0, mr, d;
		size_t k;

		for (k = 0; k < n; k++)
			sum += exp(logr[k]);
		mr = sum / (double)n;
		for (k = 0; k < n; k++) {
			d = exp(logr[k]) - mr;
			sq += d * d;
		}
		out->cv_ratio = sqrt(sq / (double)(n - 1)) / mr;
	}
	out->cv = in->cv_of_ratio ? out->cv_ratio : fmax(out->cv_baseline, out->cv_candidate);
	out->cv_within_cap = out->cv <= in->cv_cap;

	/* PROTO: stats.significance_alpha */
	s = atb_stats_wilcoxon(logr, n, &out->wilcoxon, err);
	if (s)
		goto fail;
	if (out->wilcoxon.p_value < in->significance_alpha &&
	    out->wilcoxon.w_plus != out->wilcoxon.w_minus)
		out->verdict = out->wilcoxon.w_plus > out->wilcoxon.w_minus
				       ? ATB_VERDICT_FASTER
				       : ATB_VERDICT_SLOWER;
	else
		out->verdict = ATB_VERDICT_NO_DIFFERENCE;

	/* minimum detectable effect: paired t-test, two-sided, 80% power */
	sd = gsl_stats_sd(logr, 1, n);
	out->log_ratio_sd = sd;
	out->mde_ratio =
		exp((gsl_cdf_tdist_Pinv(1.0 - in->significance_alpha / 2.0,
					(double)(n - 1)) +
		     gsl_cdf_tdist_Pinv(ATB_STATS_MDE_POWER, (double)(n - 1))) *
		    sd / sqrt((double)n));

	/* PROTO: stats.ci_level, stats.bootstrap_resamples */
	s = bootstrap(in, logr, out, err);
	if (s)
		goto fail;
	/*
	 * PROTO: stats.resolution_rel -- a difference inside the resolution is
	 * not one this measurement can tell from an effect its seeds share.
	 */
	if (in->resolution_rel > 0 &&
	    ((out->verdict == ATB_VERDICT_FASTER && !(out->ci_lo > 1.0)) ||
	     (out->verdict == ATB_VERDICT_SLOWER && !(out->ci_hi < 1.0))))
		out->verdict = ATB_VERDICT_NO_DIFFERENCE;

	atb_free(bmed);
	atb_free(cmed);
	atb_free(logr);
	return ATB_OK;
fail:
	atb_free(bmed);
	atb_free(cmed);
	atb_free(logr);
	atb_stats_paired_release(out);
	return s;
}
