/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The arithmetic of a calibration (include/atb/calibrate.h): the admitted
 * rate, the coverage of the admitted intervals with Wilson intervals (the
 * suite's atb_suite_wilson: one formula in the project), the median
 * |speedup - 1|, the false refusals by reason, and the verdict against
 * targets.  Pure functions of the rows; docs/calibrate.md gives the
 * formulas.
 *
 * Does not: measure, store or print.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_sort.h>

#include "atb/alloc.h"
#include "atb/calibrate.h"
#include "atb/suite.h"
#include "banned.h"

static int pos_finite(double x)
{
	return isfinite(x) && x > 0.0;
}

static int cmp_refusal(const void *a, const void *b)
{
	const struct atb_calibrate_refusal *x = a, *y = b;

	if (x->count != y->count)
		return x->count > y->count ? -1 : 1;
	return strcmp(x->reason, y->reason);
}

static void count_refusal(struct atb_calibrate_summary *s, const char *outcome)
{
	const char *why = outcome[0] ? outcome : "unknown";
	size_t i;

	for (i = 0; i < s->nrefusals; i++)
		if (!strcmp(s->refusals[i].reason, why)) {
			s->refusals[i].count++;
			return;
		}
	/* the last slot is "other": a bounded table for any number of rows */
	if (s->nrefusals >= ATB_CALIBRATE_MAX_REASONS - 1)
		why = "other";
	for (i = 0; i < s->nrefusals; i++)
		if (!strcmp(s->refusals[i].reason, why)) {
			s->refusals[i].count++;
			return;
		}
	snprintf(s->refusals[s->nrefusals].reason, sizeof(s->refusals[0].reason), "%s", why);
	s->refusals[s->nrefusals++].count = 1;
}

enum atb_status atb_calibrate_summarize(struct atb_calibrate_row *rows, size_t n,
					double ci_level, struct atb_calibrate_summary *out,
					struct atb_error *err)
{
	double *dev = NULL;
	size_t i, m = 0;

	memset(out, 0, sizeof(*out));
	if (n > 0 && !rows)
		return atb_error_set(err, ATB_ERR_USAGE, "no calibration rows to summarize");
	if (!(ci_level > 0.0 && ci_level < 1.0))
		return atb_error_set(err, ATB_ERR_USAGE, "interval level %g is not in (0, 1)",
				     ci_level);
	for (i = 0; i < n; i++) {
		const struct atb_calibrate_row *r = &rows[i];

		if (r->admitted && (!pos_finite(r->speedup) || !pos_finite(r->ci_low) ||
				    !pos_finite(r->ci_high) || r->ci_low > r->speedup ||
				    r->speedup > r->ci_high))
			return atb_error_set(err, ATB_ERR_USAGE,
					     "admitted task '%s' has speedup %g with interval "
					     "[%g, %g]: not a measurement",
					     r->task, r->speedup, r->ci_low, r->ci_high);
	}
	out->ci_level = ci_level;
	out->ntasks = n;
	if (n) {
		dev = atb_calloc(n, sizeof(*dev));
		if (!dev)
			return atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	}
	for (i = 0; i < n; i++) {
		struct atb_calibrate_row *r = &rows[i];

		r->covers = r->admitted && r->ci_low <= 1.0 && 1.0 <= r->ci_high;
		if (!(r->boot_low > 0.0 && r->boot_high > 0.0)) {
			r->boot_low = r->ci_low;
			r->boot_high = r->ci_high;
		}
		r->boot_covers = r->admitted && r->boot_low <= 1.0 && 1.0 <= r->boot_high;
		if (!r->admitted) {
			out->nrefused++;
			count_refusal(out, r->outcome);
			continue;
		}
		out->nadmitted++;
		out->ncovered += (size_t)r->covers;
		out->nboot_covered += (size_t)r->boot_covers;
		dev[m++] = fabs(r->speedup - 1.0);
	}
	out->admitted_rate = n ? (double)out->nadmitted / (double)n : 0.0;
	atb_suite_wilson(out->nadmitted, n, ci_level, &out->admitted_lo, &out->admitted_hi);
	out->false_refusal_rate = n ? (double)out->nrefused / (double)n : 0.0;
	out->has_coverage = out->nadmitted > 0;
	out->coverage = out->nadmitted ? (double)out->ncovered / (double)out->nadmitted : 0.0;
	out->boot_coverage =
		out->nadmitted ? (double)out->nboot_covered / (double)out->nadmitted : 0.0;
	atb_suite_wilson(out->ncovered, out->nadmitted, ci_level, &out->coverage_lo,
			 &out->coverage_hi);
	if (m) {
		gsl_sort(dev, 1, m);
		out->has_dev = 1;
		out->median_abs_dev = m % 2 ? dev[m / 2] : (dev[m / 2 - 1] + dev[m / 2]) / 2.0;
		out->max_abs_dev = dev[m - 1];
	}
	atb_free(dev);
	for (i = 0; i < out->nrefusals; i++)
		out->refusals[i].rate = (double)out->refusals[i].count / (double)n;
	qsort(out->refusals, out->nrefusals, sizeof(out->refusals[0]), cmp_refusal);
	return ATB_OK;
}

/* Append " NAME A% OP B%" (a, b as percentages, prec decimals); OP from ge and ok. */
static size_t put(char *buf, size_t size, size_t at, const char *name, int prec, double a,
		  double b, int ok, int ge)
{
	const char *op = ge ? (ok ? ">=" : "<") : (ok ? "<=" : ">");
	int w;

	if (at >= size)
		return at;
	w = snprintf(buf + at, size - at, " %s %.*f%% %s %.*f%%", name, prec, 100 * a, op, prec,
		     100 * b);
	return w < 0 ? size : at + (size_t)w;
}

void atb_calibrate_judge(const struct atb_calibrate_summary *s,
			 const struct atb_calibrate_targets *t, struct atb_calibrate_verdict *out)
{
	size_t at = 0, size = sizeof(out->line);
	char *buf = out->line;
	int sep = 0;

	memset(out, 0, sizeof(*out));
	out->admitted_ok = t->min_admitted < 0 || (s->ntasks && s->admitted_rate >= t->min_admitted);
	out->coverage_ok = t->min_coverage < 0 || (s->has_coverage && s->coverage >= t->min_coverage);
	out->median_ok = t->max_median_dev < 0 ||
			 (s->has_dev && s->median_abs_dev <= t->max_median_dev);
	out->pass = out->admitted_ok && out->coverage_ok && out->median_ok;
	at = (size_t)snprintf(buf, size, "%s:", out->pass ? "pass" : "fail");
	if (t->min_admitted >= 0) {
		at = put(buf, size, at, "admitted", 1, s->admitted_rate, t->min_admitted,
			 out->admitted_ok, 1);
		sep = 1;
	}
	if (t->min_coverage >= 0) {
		if (sep && at < size)
			at += (size_t)snprintf(buf + at, size - at, ",");
		if (s->has_coverage)
			at = put(buf, size, at, "coverage", 1, s->coverage, t->min_coverage,
				 out->coverage_ok, 1);
		else if (at < size)
			at += (size_t)snprintf(buf + at, size - at,
					       " coverage n/a (no copy admitted) < %.1f%%",
					       100 * t->min_coverage);
		sep = 1;
	}
	if (t->max_median_dev >= 0) {
		if (sep && at < size)
			at += (size_t)snprintf(buf + at, size - at, ",");
		if (s->has_dev)
			at = put(buf, size, at, "median |speedup-1|", 2, s->median_abs_dev,
				 t->max_median_dev, out->median_ok, 0);
		else if (at < size)
			at += (size_t)snprintf(buf + at, size - at,
					       " median |speedup-1| n/a (no copy admitted) > %.2f%%",
					       100 * t->max_median_dev);
		sep = 1;
	}
	if (!sep && at < size)
		snprintf(buf + at, size - at, " no target checked");
}
