/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The output comparison on the GPU: runner_compare's rule (PROTO:
 * correctness.tolerances) over two device arrays, so a torch job on cuda
 * compares its outputs where they are, not after copying both to the host.
 * The kernel (src/cuda/compare.cu) runs as PTX the driver JIT-compiles;
 * its results are bit-identical to runner_compare's (u-cuda holds the two
 * to that on planted arrays of every dtype).  Does not: copy, allocate for
 * the caller, or decide anything (the caller's rule does).
 */
#ifndef ATB_CUDA_COMPARE_H
#define ATB_CUDA_COMPARE_H

#include <stddef.h>
#include <stdint.h>

#include "atb/cuda.h"
#include "atb/runner.h"
#include "atb/status.h"

/* As runner_compare's struct runner_cmp: maxima over the elements (NaN
   elements as 0, unequal infinities as infinity), the first failing index
   (-1 when none) with both values as doubles, the counts. */
struct atb_cuda_cmp {
	double max_abs, max_rel;
	long long first_bad;
	double bad_ref, bad_got;
	size_t nbad, nnan;
};

/*
 * Load the comparison's module on c's context (once; later calls return at
 * once).  ATB_ERR_SYSTEM when the driver cannot JIT the PTX (a driver older
 * than the toolkit that wrote it): the caller then compares on the host.
 */
enum atb_status atb_cuda_compare_load(struct atb_cuda *c, struct atb_error *err);

/*
 * Compare n elements of dtype d at device addresses ref and got with atol
 * and rtol, on c's stream, and wait for it.  The arrays must be dense and
 * live until it returns.  Errors: ATB_ERR_SYSTEM (a driver call, named),
 * ATB_ERR_USAGE (an unknown dtype).
 */
enum atb_status atb_cuda_compare(struct atb_cuda *c, uint64_t ref, uint64_t got,
				 enum atb_dtype d, size_t n, double atol, double rtol,
				 struct atb_cuda_cmp *out, struct atb_error *err);

#endif
