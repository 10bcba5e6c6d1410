/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * GPUs through NVIDIA's NVML, loaded at run time with dlopen so that atb has
 * no link-time dependency on the driver and runs unchanged on boxes without
 * one.  This file holds atb's one NVML loader (nvml_int.h: the entry points
 * declared from NVIDIA's documented API, $ATB_NVML_LIBRARY honoured), used
 * here and by src/cuda/nvml.c, and the box's GPU probe.  A missing library, a missing required symbol or a failed nvmlInit means
 * "no GPU": the reason goes into box->gpu_probe and the probe succeeds.
 * NVML sees every GPU of the host, whatever CUDA_VISIBLE_DEVICES says: the
 * box is the machine, not the process's view of it.  Does not: read the L2
 * size (NVML does not report it; the CUDA backend does).
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "atb/alloc.h"
#include "box_int.h"
#include "nvml_int.h"
#include "banned.h"

/* ---- the loader (nvml_int.h), shared with src/cuda ---------------------- */

/* dlsym returns void *; copying the bits avoids an object-to-function cast. */
#define LOAD(n, field, name)                                  \
	do {                                                  \
		void *sym_ = dlsym((n)->lib, name);           \
		memcpy(&(n)->field, &sym_, sizeof(sym_));     \
	} while (0)

enum atb_status atbi_nvml_load(struct atbi_nvml *n, char *why, size_t size)
{
	const char *path = getenv("ATB_NVML_LIBRARY");
	char ebuf[32];
	atbi_nvml_return r;

	memset(n, 0, sizeof(*n));
	if (!path || !path[0])
		path = "libnvidia-ml.so.1";
	snprintf(n->path, sizeof(n->path), "%s", path);
	n->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!n->lib) {
		const char *e = dlerror();

		snprintf(why, size, "cannot load nvml '%s': %s", path, e ? e : "unknown error");
		return ATB_ERR_NOT_FOUND;
	}
	LOAD(n, init, "nvmlInit_v2");
	LOAD(n, shutdown, "nvmlShutdown");
	LOAD(n, error_string, "nvmlErrorString");
	LOAD(n, device_count, "nvmlDeviceGetCount_v2");
	LOAD(n, device_by_index, "nvmlDeviceGetHandleByIndex_v2");
	LOAD(n, device_by_pci, "nvmlDeviceGetHandleByPciBusId_v2");
	LOAD(n, device_name, "nvmlDeviceGetName");
	LOAD(n, device_uuid, "nvmlDeviceGetUUID");
	LOAD(n, driver_version, "nvmlSystemGetDriverVersion");
	LOAD(n, cuda_driver_version, "nvmlSystemGetCudaDriverVersion");
	LOAD(n, memory_info, "nvmlDeviceGetMemoryInfo");
	LOAD(n, max_clock, "nvmlDeviceGetMaxClockInfo");
	LOAD(n, clock, "nvmlDeviceGetClockInfo");
	LOAD(n, persistence_mode, "nvmlDeviceGetPersistenceMode");
	LOAD(n, temperature, "nvmlDeviceGetTemperature");
	LOAD(n, throttle_reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
	LOAD(n, power_usage, "nvmlDeviceGetPowerUsage");
	if (!n->init || !n->shutdown) {
		snprintf(why, size, "'%s' lacks a required nvml symbol", path);
		goto fail;
	}
	r = n->init();
	if (r != ATBI_NVML_SUCCESS) {
		snprintf(why, size, "nvmlInit_v2 failed: %s",
			 atbi_nvml_error(n, r, ebuf, sizeof(ebuf)));
		goto fail;
	}
	return ATB_OK;
fail:
	dlclose(n->lib);
	n->lib = NULL;
	return ATB_ERR_NOT_FOUND;
}

void atbi_nvml_unload(struct atbi_nvml *n)
{
	if (!n->lib)
		return;
	n->shutdown();
	dlclose(n->lib);
	n->lib = NULL;
}

const char *atbi_nvml_error(const struct atbi_nvml *n, atbi_nvml_return r, char *buf,
			    size_t size)
{
	const char *s = n->error_string ? n->error_string(r) : NULL;

	if (s)
		return s;
	snprintf(buf, size, "nvml error %d", r);
	return buf;
}

/* ---- the box's GPUs -------------------------------------------------------- */

/* Record why there is no GPU; only memory can fail. */
static enum atb_status note(struct atb_box *box, struct atb_error *err,
			    const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static enum atb_status note(struct atb_box *box, struct atb_error *err,
			    const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	atb_free(box->gpu_probe);
	box->gpu_probe = atb_strdup(buf);
	if (!box->gpu_probe)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot probe gpus: out of memory");
	return ATB_OK;
}

static enum atb_status probe_device(struct atbi_nvml *n, struct atb_box_gpu *g,
				    unsigned index)
{
	atbi_nvml_device dev;
	char text[ATBI_NVML_NAME_BUFFER > ATBI_NVML_UUID_BUFFER ? ATBI_NVML_NAME_BUFFER : ATBI_NVML_UUID_BUFFER];
	struct atbi_nvml_memory mem;
	unsigned v;
	int mode;
	enum atb_status st;

	g->index = index;
	g->temperature_c = -1;
	g->persistence_mode = -1;
	if (n->device_by_index(index, &dev) != ATBI_NVML_SUCCESS)
		return ATB_OK;  /* a lost GPU: listed, name and uuid unknown */
	if (n->device_name(dev, text, sizeof(text)) == ATBI_NVML_SUCCESS) {
		text[sizeof(text) - 1] = '\0';
		if ((st = atbi_box_clean(text, sizeof(text), &g->name)))
			return st;
	}
	if (n->device_uuid(dev, text, sizeof(text)) == ATBI_NVML_SUCCESS) {
		text[sizeof(text) - 1] = '\0';
		if ((st = atbi_box_clean(text, sizeof(text), &g->uuid)))
			return st;
	}
	if (n->memory_info && n->memory_info(dev, &mem) == ATBI_NVML_SUCCESS) {
		g->memory_total_bytes = mem.total;
		g->memory_free_bytes = mem.free;
	}
	if (n->max_clock && n->max_clock(dev, ATBI_NVML_CLOCK_SM, &v) == ATBI_NVML_SUCCESS)
		g->sm_clock_max_mhz = v;
	if (n->max_clock && n->max_clock(dev, ATBI_NVML_CLOCK_MEM, &v) == ATBI_NVML_SUCCESS)
		g->mem_clock_max_mhz = v;
	if (n->clock && n->clock(dev, ATBI_NVML_CLOCK_SM, &v) == ATBI_NVML_SUCCESS)
		g->sm_clock_mhz = v;
	if (n->clock && n->clock(dev, ATBI_NVML_CLOCK_MEM, &v) == ATBI_NVML_SUCCESS)
		g->mem_clock_mhz = v;
	if (n->temperature &&
	    n->temperature(dev, ATBI_NVML_TEMPERATURE_GPU, &v) == ATBI_NVML_SUCCESS)
		g->temperature_c = (int)v;
	if (n->persistence_mode && n->persistence_mode(dev, &mode) == ATBI_NVML_SUCCESS)
		g->persistence_mode = mode != 0;
	return ATB_OK;
}

static enum atb_status probe_devices(struct atbi_nvml *n, struct atb_box *box,
				     struct atb_error *err)
{
	char text[ATBI_NVML_DRIVER_BUFFER], ebuf[32];
	unsigned count = 0, i;
	atbi_nvml_return r;
	int cuda = 0;
	enum atb_status st;

	r = n->device_count(&count);
	if (r != ATBI_NVML_SUCCESS)
		return note(box, err, "no gpu: nvmlDeviceGetCount_v2 failed: %s",
			    atbi_nvml_error(n, r, ebuf, sizeof(ebuf)));
	if (n->driver_version &&
	    n->driver_version(text, sizeof(text)) == ATBI_NVML_SUCCESS) {
		text[sizeof(text) - 1] = '\0';
		if (atbi_box_clean(text, sizeof(text), &box->gpu_driver_version))
			return atb_error_set(err, ATB_ERR_NOMEM,
					     "cannot probe gpus: out of memory");
	}
	if (n->cuda_driver_version && n->cuda_driver_version(&cuda) == ATBI_NVML_SUCCESS)
		box->cuda_driver_version = cuda;
	if (count == 0)
		return note(box, err, "no gpu: nvml loaded, no devices");
	box->gpus = atb_calloc(count, sizeof(*box->gpus));
	if (!box->gpus)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot probe gpus: out of memory");
	for (i = 0; i < count; i++) {
		/* counted first so atb_box_free releases what is already there */
		box->ngpus = i + 1;
		st = probe_device(n, &box->gpus[i], i);
		if (st)
			return atb_error_set(err, st, "cannot probe gpu %u: out of memory", i);
	}
	return note(box, err, "ok");
}

enum atb_status atbi_box_probe_gpus(struct atb_box *box, struct atb_error *err)
{
	struct atbi_nvml n;
	char why[512];
	enum atb_status st;

	if (atbi_nvml_load(&n, why, sizeof(why)))
		return note(box, err, "no gpu: %s", why);
	if (!n.device_count || !n.device_by_index || !n.device_name || !n.device_uuid) {
		atbi_nvml_unload(&n);
		return note(box, err, "no gpu: '%s' lacks a required nvml symbol", n.path);
	}
	st = probe_devices(&n, box, err);
	atbi_nvml_unload(&n);
	return st;
}
