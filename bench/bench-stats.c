/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Cost of the statistics the harness and runner call: the median CI (the
 * runner calls it after every trial) against a plain sort of the same
 * samples, and one paired analysis with the protocol's 10000 bootstrap
 * resamples, with and without the two-stage (within-seed) bootstrap.
 * Prints each time and its ratio to the reference measured in this run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <gsl/gsl_sort.h>

#include "atb/alloc.h"
#include "atb/stats.h"
#include "util.h"
#include "banned.h"

static double now_ns(void)
{
	return (double)atbi_monotonic_ns();
}

static double sink;

static int bench_median_ci(gsl_rng *rng, size_t n)
{
	double *x = malloc(n * sizeof(*x)), *c = malloc(n * sizeof(*c));
	double lo, hi, t0, sort_ns, ci_ns;
	int reps = 200, r;
	size_t i;

	if (!x || !c)
		return 1;
	for (i = 0; i < n; i++)
		x[i] = 1.0 + gsl_ran_exponential(rng, 0.01);
	t0 = now_ns();
	for (r = 0; r < reps; r++) {
		memcpy(c, x, n * sizeof(*c));
		gsl_sort(c, 1, n);
		sink += c[n / 2];
	}
	sort_ns = (now_ns() - t0) / reps;
	t0 = now_ns();
	for (r = 0; r < reps; r++) {
		if (atb_stats_median_ci(x, n, 0.95, &lo, &hi, NULL))
			return 1;
		sink += lo + hi;
	}
	ci_ns = (now_ns() - t0) / reps;
	printf("median_ci n=%-5zu %10.1f us   copy+sort %10.1f us   ratio %.2f\n",
	       n, ci_ns / 1e3, sort_ns / 1e3, ci_ns / sort_ns);
	free(x);
	free(c);
	return 0;
}

static int bench_paired(gsl_rng *rng, size_t nseeds, size_t ntrials)
{
	struct atb_paired_seed *seeds = calloc(nseeds, sizeof(*seeds));
	double *data = malloc(2 * nseeds * ntrials * sizeof(*data));
	struct atb_paired_input in;
	struct atb_paired_result r;
	double t0, ns;
	size_t i;

	if (!seeds || !data)
		return 1;
	for (i = 0; i < 2 * nseeds * ntrials; i++)
		data[i] = 1.0 + gsl_ran_exponential(rng, 0.01);
	for (i = 0; i < nseeds; i++) {
		seeds[i].seed = i;
		seeds[i].baseline = data + 2 * i * ntrials;
		seeds[i].nbaseline = ntrials;
		seeds[i].candidate = data + (2 * i + 1) * ntrials;
		seeds[i].ncandidate = ntrials;
	}
	memset(&in, 0, sizeof(in));
	in.seeds = seeds;
	in.nseeds = nseeds;
	in.ci_level = 0.95;
	in.bootstrap_resamples = 10000;
	in.significance_alpha = 0.05;
	in.cv_cap = 0.05;
	in.bootstrap_seed = 1;
	t0 = now_ns();
	if (atb_stats_paired(&in, &r, NULL))
		return 1;
	ns = now_ns() - t0;
	printf("paired seeds=%-3zu trials=%-4zu B=10000 %s %10.1f ms\n", nseeds,
	       ntrials, r.bootstrap_within_seed ? "two-stage " : "seeds-only",
	       ns / 1e6);
	atb_stats_paired_release(&r);
	free(seeds);
	free(data);
	return 0;
}

int main(void)
{
	gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
	int bad = 0;

	gsl_rng_set(rng, 1);
	bad |= bench_median_ci(rng, 10);
	bad |= bench_median_ci(rng, 200);
	bad |= bench_median_ci(rng, 1000);
	bad |= bench_median_ci(rng, 4000);
	bad |= bench_paired(rng, 5, 200);
	bad |= bench_paired(rng, 9, 200);
	bad |= bench_paired(rng, 10, 200);
	bad |= bench_paired(rng, 50, 200);
	gsl_rng_free(rng);
	return bad || sink == 0.0;
}
