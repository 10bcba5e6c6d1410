/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The volatile GPU state the cuda runner reports (atb_cuda_gpu_sample):
 * SM and memory clocks, clock-event (throttle) reasons, temperature and
 * power, read through NVML loaded with dlopen.  src/box/nvml.c probes the
 * box's identity and does not read throttle reasons or power, and keeps its
 * loader private; this file loads only the handful of functions it needs
 * (declared here from NVIDIA's documented API) once per process.
 *
 * Does not: change any setting of the GPU (no clocks, no power limits).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "atb/cuda.h"
#include "util.h"
#include "banned.h"

typedef int nvml_ret;
typedef void *nvml_dev;

static struct {
	void *lib;
	int ok;
	char why[128];
	nvml_ret (*init)(void);
	nvml_ret (*by_pci)(const char *, nvml_dev *);
	nvml_ret (*clock)(nvml_dev, int, unsigned *);
	nvml_ret (*max_clock)(nvml_dev, int, unsigned *);
	nvml_ret (*reasons)(nvml_dev, unsigned long long *);
	nvml_ret (*temperature)(nvml_dev, int, unsigned *);
	nvml_ret (*power)(nvml_dev, unsigned *);
} nv;

static pthread_once_t nv_once = PTHREAD_ONCE_INIT;

#define NVSYM(field, name)                                                    \
	do {                                                                  \
		void *s_ = dlsym(nv.lib, name);                               \
		if (!s_) {                                                    \
			snprintf(nv.why, sizeof(nv.why), "no symbol '%s' in nvml", name); \
			return;                                               \
		}                                                             \
		memcpy(&nv.field, &s_, sizeof(s_));                           \
	} while (0)

static void nv_load(void)
{
	nv.lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!nv.lib) {
		snprintf(nv.why, sizeof(nv.why), "cannot load 'libnvidia-ml.so.1'");
		return;
	}
	NVSYM(init, "nvmlInit_v2");
	NVSYM(by_pci, "nvmlDeviceGetHandleByPciBusId_v2");
	NVSYM(clock, "nvmlDeviceGetClockInfo");
	NVSYM(max_clock, "nvmlDeviceGetMaxClockInfo");
	NVSYM(reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
	NVSYM(temperature, "nvmlDeviceGetTemperature");
	NVSYM(power, "nvmlDeviceGetPowerUsage");
	if (nv.init()) {
		snprintf(nv.why, sizeof(nv.why), "nvmlInit failed");
		return;
	}
	nv.ok = 1;
}

/* nvmlClocksEventReasons bits that are not a slow-down: idle (0x1) and
 * application clocks setting (0x2). */
#define NOT_THROTTLE 0x3ULL

void atb_cuda_gpu_sample(const char *pci, struct atb_cuda_gpu_sample *out)
{
	nvml_dev d = NULL;
	unsigned v = 0;

	memset(out, 0, sizeof(*out));
	out->temperature_c = -1;
	out->at_ns = atbi_monotonic_ns();
	pthread_once(&nv_once, nv_load);
	if (!nv.ok) {
		snprintf(out->why, sizeof(out->why), "%s", nv.why);
		return;
	}
	if (!pci || nv.by_pci(pci, &d)) {
		snprintf(out->why, sizeof(out->why), "nvml has no device at '%s'", pci ? pci : "");
		return;
	}
	out->valid = 1;
	if (!nv.clock(d, 1 /* NVML_CLOCK_SM */, &v))
		out->sm_clock_mhz = v;
	if (!nv.clock(d, 2 /* NVML_CLOCK_MEM */, &v))
		out->mem_clock_mhz = v;
	if (!nv.max_clock(d, 1, &v))
		out->sm_clock_max_mhz = v;
	if (!nv.reasons(d, &out->throttle_reasons))
		out->throttled = (out->throttle_reasons & ~NOT_THROTTLE) != 0;
	if (!nv.temperature(d, 0 /* NVML_TEMPERATURE_GPU */, &v))
		out->temperature_c = (int)v;
	if (!nv.power(d, &v))
		out->power_mw = v;
}
