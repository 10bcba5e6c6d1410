/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Internals shared by the stats module's files: sample checks and sorted
 * copies.  Not part of the public API.
 */
#ifndef ATB_STATS_INT_H
#define ATB_STATS_INT_H

#include <stddef.h>

#include "atb/status.h"
#include "util.h"

/*
 * Check that samples[0..n-1] exist and are finite; `what` names them in
 * the message ("sample", "d").  ATB_ERR_USAGE on the first bad one.
 */
ATBI_FUNC enum atb_status atbi_stats_check_finite(const double *samples,
						  size_t n, const char *what,
						  struct atb_error *err);

/* Sorted copy of samples; caller owns *out (atb_free).  ATB_ERR_NOMEM. */
ATBI_FUNC enum atb_status atbi_stats_sorted_copy(const double *samples,
						 size_t n, double **out,
						 struct atb_error *err);

/*
 * Index pair of the order-statistic CI of the median on n sorted samples:
 * 0-based [*lo_i, *hi_i], or *lo_i = n when no interval reaches `level`.
 */
ATBI_FUNC void atbi_stats_median_ci_index(size_t n, double level,
					  size_t *lo_i, size_t *hi_i);

#endif
