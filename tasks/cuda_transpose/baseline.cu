// SPDX-License-Identifier: GPL-3.0-or-later
// cuda_transpose honest baseline: cuBLAS SGEAM on the runner's stream.  The
// row-major R x C X is the column-major C x R matrix A; Y (row-major C x R)
// is the column-major R x C matrix A^T = 1 * op(A) + 0 * op(B), with B = A
// transposed too (finite inputs: 0 * B is 0).  The handle is created once
// and kept; it holds no inputs or results.
#include <cublas_v2.h>

#include "atb/kernel.h"

static cublasHandle_t handle;

extern "C" int atb_kernel(const struct atb_kernel_args *a)
{
	if (a->nbuffers != 2 || a->nints != 2)
		return 2;
	int r = (int)a->ints[0], c = (int)a->ints[1];
	const float one = 1.f, zero = 0.f;

	if (!handle && cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS)
		return 3;
	if (cublasSetStream(handle, (cudaStream_t)a->stream) != CUBLAS_STATUS_SUCCESS)
		return 4;
	if (r <= 0 || c <= 0)
		return 0;
	const float *x = (const float *)a->buffers[0];
	return cublasSgeam(handle, CUBLAS_OP_T, CUBLAS_OP_T, r, c, &one, x, c, &zero, x, c,
			   (float *)a->buffers[1], r) != CUBLAS_STATUS_SUCCESS;
}
