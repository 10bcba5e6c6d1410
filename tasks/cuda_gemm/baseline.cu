// SPDX-License-Identifier: GPL-3.0-or-later
// cuda_gemm honest baseline: cuBLAS SGEMM on the runner's stream.  Row-major
// C = A B is column-major C^T = B^T A^T, so B and A swap places.  The handle
// is created once and kept (creating one per call would time cuBLAS's setup,
// not its product); it holds no inputs or results.
#include <cublas_v2.h>

#include "atb/kernel.h"

static cublasHandle_t handle;

extern "C" int atb_kernel(const struct atb_kernel_args *a)
{
	if (a->nbuffers != 3 || a->nints != 3)
		return 2;
	int m = (int)a->ints[0], n = (int)a->ints[1], k = (int)a->ints[2];
	const float one = 1.f, zero = 0.f;

	if (!handle && cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS)
		return 3;
	if (cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS ||
	    cublasSetStream(handle, (cudaStream_t)a->stream) != CUBLAS_STATUS_SUCCESS)
		return 4;
	if (m <= 0 || n <= 0)
		return 0;
	return cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one,
			   (const float *)a->buffers[1], n, (const float *)a->buffers[0], k, &zero,
			   (float *)a->buffers[2], n) != CUBLAS_STATUS_SUCCESS;
}
