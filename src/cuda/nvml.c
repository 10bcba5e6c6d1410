/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The volatile GPU state the cuda runner reports (atb_cuda_gpu_sample):
 * SM and memory clocks, clock-event (throttle) reasons, temperature and
 * power, read through atb's one NVML loader (src/box/nvml_int.h, which
 * honours $ATB_NVML_LIBRARY), loaded once per process and kept.
 *
 * Does not: change any setting of the GPU (no clocks, no power limits).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "atb/cuda.h"
#include "box/nvml_int.h"
#include "util.h"
#include "banned.h"

static struct atbi_nvml nv;
static int nv_ok;
static char nv_why[128];
static pthread_once_t nv_once = PTHREAD_ONCE_INIT;

static void nv_load(void)
{
	const char *missing;

	if (atbi_nvml_load(&nv, nv_why, sizeof(nv_why)))
		return;
	/* What a sample reads; a driver without one of them gives no samples. */
	missing = !nv.device_by_pci ? "nvmlDeviceGetHandleByPciBusId_v2"
		: !nv.clock ? "nvmlDeviceGetClockInfo"
		: !nv.max_clock ? "nvmlDeviceGetMaxClockInfo"
		: !nv.throttle_reasons ? "nvmlDeviceGetCurrentClocksThrottleReasons"
		: !nv.temperature ? "nvmlDeviceGetTemperature"
		: !nv.power_usage ? "nvmlDeviceGetPowerUsage"
		: NULL;
	if (missing) {
		snprintf(nv_why, sizeof(nv_why), "no symbol '%s' in nvml", missing);
		atbi_nvml_unload(&nv);
		return;
	}
	nv_ok = 1;
}

/* nvmlClocksEventReasons bits that are not a slow-down: idle (0x1) and
 * application clocks setting (0x2). */
#define NOT_THROTTLE 0x3ULL

void atb_cuda_gpu_sample(const char *pci, struct atb_cuda_gpu_sample *out)
{
	atbi_nvml_device d = NULL;
	unsigned v = 0;

	memset(out, 0, sizeof(*out));
	out->temperature_c = -1;
	out->at_ns = atbi_monotonic_ns();
	pthread_once(&nv_once, nv_load);
	if (!nv_ok) {
		snprintf(out->why, sizeof(out->why), "%s", nv_why);
		return;
	}
	if (!pci || nv.device_by_pci(pci, &d)) {
		snprintf(out->why, sizeof(out->why), "nvml has no device at '%s'", pci ? pci : "");
		return;
	}
	out->valid = 1;
	if (!nv.clock(d, ATBI_NVML_CLOCK_SM, &v))
		out->sm_clock_mhz = v;
	if (!nv.clock(d, ATBI_NVML_CLOCK_MEM, &v))
		out->mem_clock_mhz = v;
	if (!nv.max_clock(d, ATBI_NVML_CLOCK_SM, &v))
		out->sm_clock_max_mhz = v;
	if (!nv.throttle_reasons(d, &out->throttle_reasons))
		out->throttled = (out->throttle_reasons & ~NOT_THROTTLE) != 0;
	if (!nv.temperature(d, ATBI_NVML_TEMPERATURE_GPU, &v))
		out->temperature_c = (int)v;
	if (!nv.power_usage(d, &v))
		out->power_mw = v;
}

/*
 * The SM clock and clock-event reasons alone, for one sample per timed trial
 * (PROTO: gates.clocks): the device handle is looked up once per bus id and
 * kept, so a sample is two NVML queries.  0, or -1 without NVML or device.
 */
int atb_cuda_sm_clock(const char *pci, unsigned *mhz, unsigned long long *reasons)
{
	static char have_pci[64];
	static atbi_nvml_device have;

	*mhz = 0;
	*reasons = 0;
	pthread_once(&nv_once, nv_load);
	if (!nv_ok || !pci)
		return -1;
	if (!have || strcmp(have_pci, pci)) {
		have = NULL;
		if (nv.device_by_pci(pci, &have) || !have) {
			have = NULL;
			return -1;
		}
		snprintf(have_pci, sizeof(have_pci), "%s", pci);
	}
	if (nv.clock(have, ATBI_NVML_CLOCK_SM, mhz))
		return -1;
	if (nv.throttle_reasons(have, reasons))
		*reasons = 0;
	return 0;
}
