/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * NVIDIA's NVML, loaded at run time with dlopen: the one loader that the
 * box fingerprint (src/box/nvml.c) and the cuda runner's volatile GPU state
 * (src/cuda/nvml.c, atb_cuda_gpu_sample) both use.  The library is
 * $ATB_NVML_LIBRARY when set (tests, unusual installs), else
 * libnvidia-ml.so.1.  The types and signatures are declared here from
 * NVIDIA's documented API, so the NVML header is not needed to build;
 * enums are int.
 *
 * Does not: decide what a missing library means (the box says "no GPU", the
 * sampler says "not valid"), or change any setting of a GPU.
 */
#ifndef ATB_NVML_INT_H
#define ATB_NVML_INT_H

#include <stddef.h>

#include "atb/status.h"
#include "util.h"

typedef int atbi_nvml_return;                          /* nvmlReturn_t */
typedef struct atbi_nvml_device_st *atbi_nvml_device;  /* nvmlDevice_t */

struct atbi_nvml_memory {  /* nvmlMemory_t (v1) */
	unsigned long long total;
	unsigned long long free;
	unsigned long long used;
};

enum {
	ATBI_NVML_SUCCESS = 0,
	ATBI_NVML_CLOCK_SM = 1,          /* nvmlClockType_t */
	ATBI_NVML_CLOCK_MEM = 2,
	ATBI_NVML_TEMPERATURE_GPU = 0,   /* nvmlTemperatureSensors_t */
	ATBI_NVML_NAME_BUFFER = 96,      /* NVML_DEVICE_NAME_V2_BUFFER_SIZE */
	ATBI_NVML_UUID_BUFFER = 96,      /* NVML_DEVICE_UUID_V2_BUFFER_SIZE */
	ATBI_NVML_DRIVER_BUFFER = 80,    /* NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE */
};

/*
 * The loaded library and every entry point either user needs.  init and
 * shutdown are always there after atbi_nvml_load; any other may be NULL
 * (an older driver): each user checks the ones it cannot do without.
 */
struct atbi_nvml {
	void *lib;
	char path[256];
	atbi_nvml_return (*init)(void);
	atbi_nvml_return (*shutdown)(void);
	const char *(*error_string)(atbi_nvml_return);
	atbi_nvml_return (*device_count)(unsigned *);
	atbi_nvml_return (*device_by_index)(unsigned, atbi_nvml_device *);
	atbi_nvml_return (*device_by_pci)(const char *, atbi_nvml_device *);
	atbi_nvml_return (*device_name)(atbi_nvml_device, char *, unsigned);
	atbi_nvml_return (*device_uuid)(atbi_nvml_device, char *, unsigned);
	atbi_nvml_return (*driver_version)(char *, unsigned);
	atbi_nvml_return (*cuda_driver_version)(int *);
	atbi_nvml_return (*memory_info)(atbi_nvml_device, struct atbi_nvml_memory *);
	atbi_nvml_return (*max_clock)(atbi_nvml_device, int, unsigned *);
	atbi_nvml_return (*clock)(atbi_nvml_device, int, unsigned *);
	atbi_nvml_return (*persistence_mode)(atbi_nvml_device, int *);
	atbi_nvml_return (*temperature)(atbi_nvml_device, int, unsigned *);
	atbi_nvml_return (*throttle_reasons)(atbi_nvml_device, unsigned long long *);
	atbi_nvml_return (*power_usage)(atbi_nvml_device, unsigned *);
};

/*
 * dlopen NVML, look every entry point up and call nvmlInit_v2.  n->path is
 * the library tried.  On success *n holds the library (release with
 * atbi_nvml_unload).  Otherwise nothing is held (n->lib is NULL), why says
 * why ("cannot load nvml 'P': E", "'P' lacks a required nvml symbol",
 * "nvmlInit_v2 failed: E"), and the status is ATB_ERR_NOT_FOUND.  Safe from several threads on separate
 * structs (NVML counts its inits).
 */
ATBI_FUNC enum atb_status atbi_nvml_load(struct atbi_nvml *n, char *why, size_t size);

/* nvmlShutdown and dlclose; a struct that did not load is fine. */
ATBI_FUNC void atbi_nvml_unload(struct atbi_nvml *n);

/* NVML's text for r, or "nvml error R" in buf. */
ATBI_FUNC const char *atbi_nvml_error(const struct atbi_nvml *n, atbi_nvml_return r,
				      char *buf, size_t size);

#endif
