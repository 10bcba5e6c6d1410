/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Internals of the timing core shared with its unit tests: the stopping
 * rule's order-statistic index of the median CI.
 */
#ifndef ATB_TIMING_INT_H
#define ATB_TIMING_INT_H

#include <stddef.h>

#include "atb/status.h"
#include "util.h"

/*
 * 0-based index lo of the lower bound of the median CI for n samples at
 * `level`, from atb_stats_median_ci on ranks[0..n-1] = 0..n-1; -1 when the
 * interval is unbounded.  The upper bound is n - 1 - lo.
 */
ATBI_FUNC enum atb_status atbi_timing_ci_index(const double *ranks, size_t n, double level,
					       long *lo, struct atb_error *err);

/* The index for n_next = n + 1 samples, from the index lo for n. */
ATBI_FUNC long atbi_timing_ci_index_next(long lo, size_t n_next, double level);

#endif
