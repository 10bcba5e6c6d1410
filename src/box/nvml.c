/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * GPUs through NVIDIA's NVML, loaded at run time with dlopen so that atb has
 * no link-time dependency on the driver and runs unchanged on boxes without
 * one.  The types and signatures below are declared here from NVIDIA's
 * documented API (the NVML header is not needed to build); enums are int.
 * A missing library, a missing required symbol or a failed nvmlInit means
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
#include "banned.h"

typedef int nvml_return;                  /* nvmlReturn_t */
typedef struct nvml_device_st *nvml_device; /* nvmlDevice_t */
struct nvml_memory {                      /* nvmlMemory_t (v1) */
	unsigned long long total;
	unsigned long long free;
	unsigned long long used;
};

enum {
	NVML_SUCCESS = 0,
	NVML_CLOCK_SM = 1,          /* nvmlClockType_t */
	NVML_CLOCK_MEM = 2,
	NVML_TEMPERATURE_GPU = 0,   /* nvmlTemperatureSensors_t */
	NVML_NAME_BUFFER = 96,      /* NVML_DEVICE_NAME_V2_BUFFER_SIZE */
	NVML_UUID_BUFFER = 96,      /* NVML_DEVICE_UUID_V2_BUFFER_SIZE */
	NVML_DRIVER_BUFFER = 80,    /* NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE */
};

struct nvml {
	void *lib;
	nvml_return (*init)(void);
	nvml_return (*shutdown)(void);
	const char *(*error_string)(nvml_return);
	nvml_return (*device_count)(unsigned *);
	nvml_return (*device_by_index)(unsigned, nvml_device *);
	nvml_return (*device_name)(nvml_device, char *, unsigned);
	nvml_return (*device_uuid)(nvml_device, char *, unsigned);
	nvml_return (*driver_version)(char *, unsigned);
	nvml_return (*cuda_driver_version)(int *);
	nvml_return (*memory_info)(nvml_device, struct nvml_memory *);
	nvml_return (*max_clock)(nvml_device, int, unsigned *);
	nvml_return (*clock)(nvml_device, int, unsigned *);
	nvml_return (*persistence_mode)(nvml_device, int *);
	nvml_return (*temperature)(nvml_device, int, unsigned *);
};

/* dlsym returns void *; copying the bits avoids an object-to-function cast. */
#define LOAD(n, field, name)                                  \
	do {                                                  \
		void *sym_ = dlsym((n)->lib, name);           \
		memcpy(&(n)->field, &sym_, sizeof(sym_));     \
	} while (0)

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

static const char *nvml_error(const struct nvml *n, nvml_return r, char *buf, size_t size)
{
	const char *s = n->error_string ? n->error_string(r) : NULL;

	if (s)
		return s;
	snprintf(buf, size, "nvml error %d", r);
	return buf;
}

static enum atb_status probe_device(struct nvml *n, struct atb_box_gpu *g,
				    unsigned index)
{
	nvml_device dev;
	char text[NVML_NAME_BUFFER > NVML_UUID_BUFFER ? NVML_NAME_BUFFER : NVML_UUID_BUFFER];
	struct nvml_memory mem;
	unsigned v;
	int mode;
	enum atb_status st;

	g->index = index;
	g->temperature_c = -1;
	g->persistence_mode = -1;
	if (n->device_by_index(index, &dev) != NVML_SUCCESS)
		return ATB_OK;  /* a lost GPU: listed, name and uuid unknown */
	if (n->device_name(dev, text, sizeof(text)) == NVML_SUCCESS) {
		text[sizeof(text) - 1] = '\0';
		if ((st = atbi_box_clean(text, sizeof(text), &g->name)))
			return st;
	}
	if (n->device_uuid(dev, text, sizeof(text)) == NVML_SUCCESS) {
		text[sizeof(text) - 1] = '\0';
		if ((st = atbi_box_clean(text, sizeof(text), &g->uuid)))
			return st;
	}
	if (n->memory_info && n->memory_info(dev, &mem) == NVML_SUCCESS) {
		g->memory_total_bytes = mem.total;
		g->memory_free_bytes = mem.free;
	}
	if (n->max_clock && n->max_clock(dev, NVML_CLOCK_SM, &v) == NVML_SUCCESS)
		g->sm_clock_max_mhz = v;
	if (n->max_clock && n->max_clock(dev, NVML_CLOCK_MEM, &v) == NVML_SUCCESS)
		g->mem_clock_max_mhz = v;
	if (n->clock && n->clock(dev, NVML_CLOCK_SM, &v) == NVML_SUCCESS)
		g->sm_clock_mhz = v;
	if (n->clock && n->clock(dev, NVML_CLOCK_MEM, &v) == NVML_SUCCESS)
		g->mem_clock_mhz = v;
	if (n->temperature &&
	    n->temperature(dev, NVML_TEMPERATURE_GPU, &v) == NVML_SUCCESS)
		g->temperature_c = (int)v;
	if (n->persistence_mode && n->persistence_mode(dev, &mode) == NVML_SUCCESS)
		g->persistence_mode = mode != 0;
	return ATB_OK;
}

static enum atb_status probe_devices(struct nvml *n, struct atb_box *box,
				     struct atb_error *err)
{
	char text[NVML_DRIVER_BUFFER], ebuf[32];
	unsigned count = 0, i;
	nvml_return r;
	int cuda = 0;
	enum atb_status st;

	r = n->device_count(&count);
	if (r != NVML_SUCCESS)
		return note(box, err, "no gpu: nvmlDeviceGetCount_v2 failed: %s",
			    nvml_error(n, r, ebuf, sizeof(ebuf)));
	if (n->driver_version &&
	    n->driver_version(text, sizeof(text)) == NVML_SUCCESS) {
		text[sizeof(text) - 1] = '\0';
		if (atbi_box_clean(text, sizeof(text), &box->gpu_driver_version))
			return atb_error_set(err, ATB_ERR_NOMEM,
					     "cannot probe gpus: out of memory");
	}
	if (n->cuda_driver_version && n->cuda_driver_version(&cuda) == NVML_SUCCESS)
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
	const char *path = getenv("ATB_NVML_LIBRARY");
	struct nvml n;
	char ebuf[32];
	nvml_return r;
	enum atb_status st;

	memset(&n, 0, sizeof(n));
	if (!path || !path[0])
		path = "libnvidia-ml.so.1";
	n.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!n.lib) {
		const char *why = dlerror();

		return note(box, err, "no gpu: cannot load nvml '%s': %s", path,
			    why ? why : "unknown error");
	}
	LOAD(&n, init, "nvmlInit_v2");
	LOAD(&n, shutdown, "nvmlShutdown");
	LOAD(&n, error_string, "nvmlErrorString");
	LOAD(&n, device_count, "nvmlDeviceGetCount_v2");
	LOAD(&n, device_by_index, "nvmlDeviceGetHandleByIndex_v2");
	LOAD(&n, device_name, "nvmlDeviceGetName");
	LOAD(&n, device_uuid, "nvmlDeviceGetUUID");
	LOAD(&n, driver_version, "nvmlSystemGetDriverVersion");
	LOAD(&n, cuda_driver_version, "nvmlSystemGetCudaDriverVersion");
	LOAD(&n, memory_info, "nvmlDeviceGetMemoryInfo");
	LOAD(&n, max_clock, "nvmlDeviceGetMaxClockInfo");
	LOAD(&n, clock, "nvmlDeviceGetClockInfo");
	LOAD(&n, persistence_mode, "nvmlDeviceGetPersistenceMode");
	LOAD(&n, temperature, "nvmlDeviceGetTemperature");
	if (!n.init || !n.shutdown || !n.device_count || !n.device_by_index ||
	    !n.device_name || !n.device_uuid) {
		dlclose(n.lib);
		return note(box, err, "no gpu: '%s' lacks a required nvml symbol",
			    path);
	}
	r = n.init();
	if (r != NVML_SUCCESS) {
		st = note(box, err, "no gpu: nvmlInit_v2 failed: %s",
			  nvml_error(&n, r, ebuf, sizeof(ebuf)));
		dlclose(n.lib);
		return st;
	}
	st = probe_devices(&n, box, err);
	n.shutdown();
	dlclose(n.lib);
	return st;
}
