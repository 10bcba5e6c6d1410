/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The kernel ABI: what a task's baseline, naive and candidate sources export
 * once built to a shared object, and what atb-runner calls.  This header is
 * the only atb header a kernel source may include; it has no dependencies.
 *
 *   int atb_kernel(const struct atb_kernel_args *args);   returns 0 on success
 *
 * Buffers come in the order the task's task.yaml declares them (inputs,
 * outputs and in-out buffers alike), integer and real scalar parameters in
 * their declaration order.  A kernel must not keep pointers or state from one
 * call to the next: the runner's gates look for exactly that.  Knobs arrive
 * as preprocessor macros at build time (-DTILE=64), never at run time.
 */
#ifndef ATB_KERNEL_H
#define ATB_KERNEL_H

#include <stdint.h>

#define ATB_KERNEL_ABI_VERSION 1
#define ATB_KERNEL_SYMBOL "atb_kernel"

struct atb_kernel_args {
	void *const *buffers;  /* nbuffers device or host pointers */
	const int64_t *ints;   /* integer parameters (shapes) */
	const double *reals;   /* real parameters (eps, scale) */
	int nbuffers;
	int nints;
	int nreals;
	void *stream;          /* cudaStream_t / CUstream for GPU kernels; NULL on the CPU */
};

typedef int (*atb_kernel_fn)(const struct atb_kernel_args *args);

#endif
