/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Building tasks of kind "cuda" (task_cuda.c): what task_build.c adds to the
 * protocol's build.cuda command line.
 */
#ifndef ATB_TASK_CUDA_H
#define ATB_TASK_CUDA_H

#include <stddef.h>

#include "util.h"

/*
 * nvcc's -arch for this box into buf ("-arch=sm_90"): $ATB_CUDA_ARCH when
 * set ("sm_90"), else the compute capability of device 0 when a CUDA driver
 * loads, else sm_90 (the H200).
 */
ATBI_FUNC void atbi_task_cuda_arch(char *buf, size_t size);

/* Libraries every CUDA task links against: cuBLAS (honest GEMM baselines). */
#define ATBI_TASK_CUDA_LIBS "-lcublas"

#endif
