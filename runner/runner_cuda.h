/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * atb-runner's cuda backend (runner/cuda.c), chosen by the job's top-level
 * "backend": "cuda" (docs/internals/cuda.md).
 */
#ifndef ATB_RUNNER_CUDA_H
#define ATB_RUNNER_CUDA_H

#include "atb/runner.h"

/*
 * Run a parsed job on device 0: env, correctness, side-stream checks,
 * timing, gpu_state, done.  Returns an exit status (RUNNER_EXIT_*); on
 * failure an error event has been emitted ("no_cuda" where no driver loads).
 */
int runner_cuda_run(const struct atb_runner_job *job);

#endif
