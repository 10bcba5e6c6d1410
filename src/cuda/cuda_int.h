/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Internals of src/cuda: the driver's function table (filled by dlsym in
 * cuda.c from NVIDIA's documented signatures), struct atb_cuda, and the one
 * macro every driver call goes through.  ATB_CU_CALL(fn(args), err) calls
 * atbi_cu.fn(args) and, on a CUresult other than CUDA_SUCCESS, fills err
 * with "cuFn(args) failed: CUDA_ERROR_X (n) at file:line" and yields
 * ATB_ERR_SYSTEM (ATB_ERR_NOMEM for CUDA_ERROR_OUT_OF_MEMORY); ATB_CU does
 * the same and returns that status from the calling function (nvbench's
 * NVBENCH_DRIVER_API_CALL, without the abort).
 */
#ifndef ATB_CUDA_INT_H
#define ATB_CUDA_INT_H

#include <stddef.h>

#include "atb/cuda.h"
#include "util.h"

typedef int cu_result;                 /* CUresult */
typedef int cu_device;                 /* CUdevice */
typedef unsigned long long cu_dptr;    /* CUdeviceptr */
typedef void *cu_handle;               /* CUcontext, CUstream, CUevent, CUmodule, CUfunction */

enum {
	CU_ATTR_CLOCK_RATE = 13,
	CU_ATTR_SM_COUNT = 16,
	CU_ATTR_MEMORY_CLOCK_RATE = 36,
	CU_ATTR_BUS_WIDTH = 37,
	CU_ATTR_L2_CACHE_SIZE = 38,
	CU_ATTR_CC_MAJOR = 75,
	CU_ATTR_CC_MINOR = 76,
	CU_ATTR_MAX_PERSISTING_L2 = 108,
};

struct cudrv {
	void *lib;
	cu_result (*cuInit)(unsigned);
	cu_result (*cuDriverGetVersion)(int *);
	cu_result (*cuGetErrorName)(cu_result, const char **);
	cu_result (*cuDeviceGetCount)(int *);
	cu_result (*cuDeviceGet)(cu_device *, int);
	cu_result (*cuDeviceGetName)(char *, int, cu_device);
	cu_result (*cuDeviceGetAttribute)(int *, int, cu_device);
	cu_result (*cuDeviceTotalMem)(size_t *, cu_device);
	cu_result (*cuDeviceGetPCIBusId)(char *, int, cu_device);
	cu_result (*cuDevicePrimaryCtxRetain)(cu_handle *, cu_device);
	cu_result (*cuDevicePrimaryCtxRelease)(cu_device);
	cu_result (*cuCtxSetCurrent)(cu_handle);
	cu_result (*cuCtxSynchronize)(void);
	cu_result (*cuCtxResetPersistingL2Cache)(void);
	cu_result (*cuStreamCreate)(cu_handle *, unsigned);
	cu_result (*cuStreamDestroy)(cu_handle);
	cu_result (*cuStreamSynchronize)(cu_handle);
	cu_result (*cuMemAlloc)(cu_dptr *, size_t);
	cu_result (*cuMemFree)(cu_dptr);
	cu_result (*cuMemcpyHtoDAsync)(cu_dptr, const void *, size_t, cu_handle);
	cu_result (*cuMemcpyDtoHAsync)(void *, cu_dptr, size_t, cu_handle);
	cu_result (*cuMemcpyDtoDAsync)(cu_dptr, cu_dptr, size_t, cu_handle);
	cu_result (*cuMemsetD8Async)(cu_dptr, unsigned char, size_t, cu_handle);
	cu_result (*cuMemsetD32Async)(cu_dptr, unsigned, size_t, cu_handle);
	cu_result (*cuEventCreate)(cu_handle *, unsigned);
	cu_result (*cuEventRecord)(cu_handle, cu_handle);
	cu_result (*cuEventSynchronize)(cu_handle);
	cu_result (*cuEventElapsedTime)(float *, cu_handle, cu_handle);
	cu_result (*cuEventDestroy)(cu_handle);
	cu_result (*cuModuleLoadData)(cu_handle *, const void *);
	cu_result (*cuModuleGetFunction)(cu_handle *, cu_handle, const char *);
	cu_result (*cuModuleUnload)(cu_handle);
	cu_result (*cuLaunchKernel)(cu_handle, unsigned, unsigned, unsigned, unsigned, unsigned,
				   unsigned, unsigned, cu_handle, void **, void **);
};

ATBI_FUNC extern struct cudrv atbi_cu;

struct atb_cuda {
	struct atb_cuda_device_info info;
	cu_device dev;
	cu_handle ctx;
	int retained;
	cu_handle stream;
	cu_handle spin_mod, spin_fn;
	cu_handle cmp_mod, cmp_fn[6];  /* compare.c: one entry point per atb_dtype */
	cu_dptr cmp_out;               /* compare.c: its 5 x u64 result */
};

/*
 * 1 when every entry of atbi_cu is what the loader put there and lies in
 * libcuda; 0 with the reason in why (a candidate forged the device clock).
 */
ATBI_FUNC int atbi_cuda_table_intact(char *why, size_t why_size);

/* "CUDA_ERROR_INVALID_VALUE" for r, through cuGetErrorName. */
ATBI_FUNC const char *atbi_cuda_error_name(int r);

/* Fill err for a failed driver call; returns the status. */
ATBI_FUNC enum atb_status atbi_cuda_fail(int r, const char *call, const char *file, int line,
					 struct atb_error *err);

#define ATB_CU_CALL(call, err)                                                   \
	__extension__({                                                          \
		cu_result r_ = atbi_cu.call;                                     \
		r_ ? atbi_cuda_fail(r_, #call, __FILE__, __LINE__, (err))   \
		   : ATB_OK;                                                     \
	})

#define ATB_CU(call, err)                                                        \
	do {                                                                     \
		enum atb_status st_ = ATB_CU_CALL(call, err);                    \
		if (st_)                                                         \
			return st_;                                              \
	} while (0)

#endif
