/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The CUDA driver API through dlopen (atb/cuda.h): the loader, the device,
 * its primary context and stream, device memory, events, the spin kernel and
 * the CUDA-events timer for the timing core.  The types and signatures
 * below are declared here from NVIDIA's documented driver API (cuda.h is
 * not needed to build); handles are opaque pointers, enums are int.  The
 * versioned symbol names (cuMemAlloc_v2, ...) are those cuda.h maps the
 * plain names to.
 *
 * Does not: compile kernels, launch a task's kernels, or print.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "atb/alloc.h"
#include "atb/cuda.h"
#include "cuda_int.h"
#include "util.h"
#include "banned.h"

struct cudrv atbi_cu;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static enum atb_status load_status = ATB_ERR_NOT_FOUND;
static char load_msg[256];

/* dlsym returns void *; copying the bits avoids an object-to-function cast. */
#define SYM(field, name)                                                 \
	do {                                                             \
		void *s_ = dlsym(atbi_cu.lib, name);                     \
		if (!s_) {                                               \
			snprintf(load_msg, sizeof(load_msg),             \
				 "no cuda driver: no symbol '%s' in libcuda.so.1", name); \
			return ATB_ERR_NOT_FOUND;                        \
		}                                                        \
		memcpy(&atbi_cu.field, &s_, sizeof(s_));                 \
	} while (0)

static enum atb_status load_symbols(void)
{
	void *s;

	SYM(cuInit, "cuInit");
	SYM(cuDriverGetVersion, "cuDriverGetVersion");
	SYM(cuGetErrorName, "cuGetErrorName");
	SYM(cuDeviceGetCount, "cuDeviceGetCount");
	SYM(cuDeviceGet, "cuDeviceGet");
	SYM(cuDeviceGetName, "cuDeviceGetName");
	SYM(cuDeviceGetAttribute, "cuDeviceGetAttribute");
	SYM(cuDeviceTotalMem, "cuDeviceTotalMem_v2");
	SYM(cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId");
	SYM(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
	SYM(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
	SYM(cuCtxSetCurrent, "cuCtxSetCurrent");
	SYM(cuCtxSynchronize, "cuCtxSynchronize");
	SYM(cuCtxResetPersistingL2Cache, "cuCtxResetPersistingL2Cache");
	SYM(cuStreamCreate, "cuStreamCreate");
	SYM(cuStreamDestroy, "cuStreamDestroy_v2");
	SYM(cuStreamSynchronize, "cuStreamSynchronize");
	SYM(cuMemAlloc, "cuMemAlloc_v2");
	SYM(cuMemFree, "cuMemFree_v2");
	SYM(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
	SYM(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
	SYM(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
	SYM(cuMemsetD8Async, "cuMemsetD8Async");
	SYM(cuMemsetD32Async, "cuMemsetD32Async");
	SYM(cuEventCreate, "cuEventCreate");
	SYM(cuEventRecord, "cuEventRecord");
	SYM(cuEventSynchronize, "cuEventSynchronize");
	SYM(cuEventDestroy, "cuEventDestroy_v2");
	SYM(cuModuleLoadData, "cuModuleLoadData");
	SYM(cuModuleGetFunction, "cuModuleGetFunction");
	SYM(cuModuleUnload, "cuModuleUnload");
	SYM(cuLaunchKernel, "cuLaunchKernel");
	/* cuEventElapsedTime_v2 since CUDA 12.8; older drivers have only v1. */
	s = dlsym(atbi_cu.lib, "cuEventElapsedTime_v2");
	if (!s)
		s = dlsym(atbi_cu.lib, "cuEventElapsedTime");
	if (!s) {
		snprintf(load_msg, sizeof(load_msg),
			 "no cuda driver: no symbol 'cuEventElapsedTime' in libcuda.so.1");
		return ATB_ERR_NOT_FOUND;
	}
	memcpy(&atbi_cu.cuEventElapsedTime, &s, sizeof(s));
	return ATB_OK;
}

/*
 * The driver table's guard (PROTO: gates.clock, on the device's clock): a
 * candidate runs in atb-runner's address space and can replace the
 * cuEventElapsedTime the timer calls through atbi_cu with one that scales
 * its own trials (tests/fixtures/cheats/cuda_relu/clock: the word holding
 * the address, found by scanning the runner's writable segments).  A copy
 * of every entry, XOR-ed with a key drawn when the driver is loaded (so a
 * scan for the address does not find it), is compared with the table
 * before every elapsed-time query, and every entry must still lie in
 * libcuda.so.1.  An attacker who has read this can still defeat it (find
 * the key, patch the check); it raises the bar, it does not seal.
 */
#define CU_ENTRIES ((sizeof(atbi_cu) - sizeof(void *)) / sizeof(void (*)(void)))
static uintptr_t cu_guard[CU_ENTRIES];
static uintptr_t cu_key;
static int cu_guarded;

static uintptr_t cu_entry(size_t i)
{
	uintptr_t v;

	memcpy(&v, (const char *)&atbi_cu + sizeof(void *) + i * sizeof(v), sizeof(v));
	return v;
}

static void guard_take(void)
{
	size_t i;

	if (getrandom(&cu_key, sizeof(cu_key), 0) != (ssize_t)sizeof(cu_key))
		cu_key = (uintptr_t)&cu_key ^ (uintptr_t)atbi_monotonic_ns();
	for (i = 0; i < CU_ENTRIES; i++)
		cu_guard[i] = cu_entry(i) ^ cu_key;
	cu_guarded = 1;
}

int atbi_cuda_table_intact(char *why, size_t why_size)
{
	size_t i;

	if (!cu_guarded)
		return 1;
	for (i = 0; i < CU_ENTRIES; i++)
		if (cu_entry(i) != (cu_guard[i] ^ cu_key)) {
			snprintf(why, why_size,
				 "the cuda driver's function table in atb-runner was changed after "
				 "the driver was loaded (entry %zu of %zu points elsewhere): the device "
				 "clock was forged", i, (size_t)CU_ENTRIES);
			return 0;
		}
	return 1;
}

static void load_once_fn(void)
{
	const char *name = "libcuda.so.1";
	int r, n = 0;

	atbi_cu.lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (!atbi_cu.lib) {
		const char *e = dlerror();

		snprintf(load_msg, sizeof(load_msg), "no cuda driver: cannot load '%s': %s", name,
			 e ? e : "unknown error");
		load_status = ATB_ERR_NOT_FOUND;
		return;
	}
	if ((load_status = load_symbols()))
		return;
	guard_take();
	r = atbi_cu.cuInit(0);
	if (r) {
		snprintf(load_msg, sizeof(load_msg), "no cuda driver: cuInit failed: %s (%d)",
			 atbi_cuda_error_name(r), r);
		load_status = r == 100 /* CUDA_ERROR_NO_DEVICE */ ? ATB_ERR_NOT_FOUND
								 : ATB_ERR_SYSTEM;
		return;
	}
	if (atbi_cu.cuDeviceGetCount(&n) || n < 1) {
		snprintf(load_msg, sizeof(load_msg), "no cuda driver: no cuda device");
		load_status = ATB_ERR_NOT_FOUND;
		return;
	}
	load_status = ATB_OK;
}

enum atb_status atb_cuda_load(struct atb_error *err)
{
	pthread_once(&load_once, load_once_fn);
	if (load_status)
		return atb_error_set(err, load_status, "%s", load_msg);
	return ATB_OK;
}

const char *atbi_cuda_error_name(int r)
{
	const char *s = NULL;

	if (atbi_cu.cuGetErrorName && !atbi_cu.cuGetErrorName(r, &s) && s)
		return s;
	return "CUDA_ERROR_UNKNOWN";
}

enum atb_status atbi_cuda_fail(int r, const char *call, const char *file, int line,
			       struct atb_error *err)
{
	/* 2 is CUDA_ERROR_OUT_OF_MEMORY. */
	return atb_error_set(err, r == 2 ? ATB_ERR_NOMEM : ATB_ERR_SYSTEM,
			     "%s failed: %s (%d) at %s:%d", call, atbi_cuda_error_name(r), r,
			     file, line);
}

/* ---- the device ------------------------------------------------------- */

static int attr(struct atb_cuda *c, int which)
{
	int v = 0;

	if (atbi_cu.cuDeviceGetAttribute(&v, which, c->dev))
		return 0;
	return v;
}

enum atb_status atb_cuda_open(int ordinal, struct atb_cuda **out, struct atb_error *err)
{
	struct atb_cuda *c;
	enum atb_status st;
	size_t total = 0;
	int n = 0;

	*out = NULL;
	if ((st = atb_cuda_load(err)))
		return st;
	ATB_CU(cuDeviceGetCount(&n), err);
	if (ordinal < 0 || ordinal >= n)
		return atb_error_set(err, ATB_ERR_USAGE, "no cuda device %d: %d device(s)",
				     ordinal, n);
	c = atb_calloc(1, sizeof(*c));
	if (!c)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot open cuda device: out of memory");
	c->info.ordinal = ordinal;
	if ((st = ATB_CU_CALL(cuDeviceGet(&c->dev, ordinal), err)) ||
	    (st = ATB_CU_CALL(cuDevicePrimaryCtxRetain(&c->ctx, c->dev), err)))
		goto fail;
	c->retained = 1;
	if ((st = ATB_CU_CALL(cuCtxSetCurrent(c->ctx), err)) ||
	    (st = ATB_CU_CALL(cuDeviceGetName(c->info.name, (int)sizeof(c->info.name) - 1,
					      c->dev), err)) ||
	    (st = ATB_CU_CALL(cuDeviceGetPCIBusId(c->info.pci_bus_id,
						    (int)sizeof(c->info.pci_bus_id) - 1, c->dev),
			      err)) ||
	    (st = ATB_CU_CALL(cuDeviceTotalMem(&total, c->dev), err)) ||
	    (st = ATB_CU_CALL(cuDriverGetVersion(&c->info.driver_version), err)))
		goto fail;
	c->info.total_mem_bytes = total;
	c->info.cc_major = attr(c, CU_ATTR_CC_MAJOR);
	c->info.cc_minor = attr(c, CU_ATTR_CC_MINOR);
	c->info.sm_count = attr(c, CU_ATTR_SM_COUNT);
	c->info.l2_bytes = (size_t)attr(c, CU_ATTR_L2_CACHE_SIZE);
	c->info.persisting_l2_max_bytes = (size_t)attr(c, CU_ATTR_MAX_PERSISTING_L2);
	c->info.sm_clock_khz = attr(c, CU_ATTR_CLOCK_RATE);
	c->info.mem_clock_khz = attr(c, CU_ATTR_MEMORY_CLOCK_RATE);
	c->info.mem_bus_width_bits = attr(c, CU_ATTR_BUS_WIDTH);
	/* Non-blocking: no implicit sync with the legacy default stream, so work a
	 * candidate hides there is not silently pulled into the timed window. */
	if ((st = ATB_CU_CALL(cuStreamCreate(&c->stream, 1 /* CU_STREAM_NON_BLOCKING */), err)))
		goto fail;
	*out = c;
	return ATB_OK;
fail:
	atb_cuda_close(c);
	return st;
}

enum atb_status atb_cuda_device_cc(int ordinal, int *major, int *minor, struct atb_error *err)
{
	enum atb_status st;
	cu_device dev = 0;
	int n = 0;

	*major = *minor = 0;
	if ((st = atb_cuda_load(err)))
		return st;
	ATB_CU(cuDeviceGetCount(&n), err);
	if (ordinal < 0 || ordinal >= n)
		return atb_error_set(err, ATB_ERR_USAGE, "no cuda device %d: %d device(s)",
				     ordinal, n);
	ATB_CU(cuDeviceGet(&dev, ordinal), err);
	ATB_CU(cuDeviceGetAttribute(major, CU_ATTR_CC_MAJOR, dev), err);
	ATB_CU(cuDeviceGetAttribute(minor, CU_ATTR_CC_MINOR, dev), err);
	return ATB_OK;
}

void atb_cuda_close(struct atb_cuda *c)
{
	if (!c)
		return;
	if (c->spin_mod)
		atbi_cu.cuModuleUnload(c->spin_mod);
	if (c->cmp_mod)
		atbi_cu.cuModuleUnload(c->cmp_mod);
	if (c->cmp_out)
		atbi_cu.cuMemFree(c->cmp_out);
	if (c->stream)
		atbi_cu.cuStreamDestroy(c->stream);
	if (c->retained)
		atbi_cu.cuDevicePrimaryCtxRelease(c->dev);
	atb_free(c);
}

const struct atb_cuda_device_info *atb_cuda_info(const struct atb_cuda *c)
{
	return &c->info;
}

void *atb_cuda_stream(const struct atb_cuda *c)
{
	return c->stream;
}

/* ---- memory --------------------------------------------------------------- */

enum atb_status atb_cuda_alloc(struct atb_cuda *c, size_t bytes, uint64_t *dptr,
			       struct atb_error *err)
{
	unsigned long long p = 0;

	*dptr = 0;
	/* cuMemAlloc refuses 0 bytes; a zero-length buffer still gets an address. */
	ATB_CU(cuMemAlloc(&p, bytes ? bytes : 256), err);
	*dptr = p;
	return ATB_OK;
}

void atb_cuda_free(struct atb_cuda *c, uint64_t dptr)
{
	(void)c;
	if (dptr)
		atbi_cu.cuMemFree(dptr);
}

enum atb_status atb_cuda_h2d(struct atb_cuda *c, uint64_t dst, const void *src, size_t bytes,
			     struct atb_error *err)
{
	if (!bytes)
		return ATB_OK;
	ATB_CU(cuMemcpyHtoDAsync(dst, src, bytes, c->stream), err);
	ATB_CU(cuStreamSynchronize(c->stream), err);
	return ATB_OK;
}

enum atb_status atb_cuda_d2h(struct atb_cuda *c, void *dst, uint64_t src, size_t bytes,
			     struct atb_error *err)
{
	if (!bytes)
		return ATB_OK;
	ATB_CU(cuMemcpyDtoHAsync(dst, src, bytes, c->stream), err);
	ATB_CU(cuStreamSynchronize(c->stream), err);
	return ATB_OK;
}

enum atb_status atb_cuda_d2d_async(struct atb_cuda *c, uint64_t dst, uint64_t src, size_t bytes,
				   struct atb_error *err)
{
	if (!bytes)
		return ATB_OK;
	ATB_CU(cuMemcpyDtoDAsync(dst, src, bytes, c->stream), err);
	return ATB_OK;
}

enum atb_status atb_cuda_memset8(struct atb_cuda *c, uint64_t dst, unsigned char value,
				 size_t bytes, struct atb_error *err)
{
	if (!bytes)
		return ATB_OK;
	ATB_CU(cuMemsetD8Async(dst, value, bytes, c->stream), err);
	ATB_CU(cuStreamSynchronize(c->stream), err);
	return ATB_OK;
}

enum atb_status atb_cuda_memset32(struct atb_cuda *c, uint64_t dst, uint32_t value,
				  size_t count, struct atb_error *err)
{
	if (!count)
		return ATB_OK;
	ATB_CU(cuMemsetD32Async(dst, value, count, c->stream), err);
	ATB_CU(cuStreamSynchronize(c->stream), err);
	return ATB_OK;
}

enum atb_status atb_cuda_stream_sync(struct atb_cuda *c, struct atb_error *err)
{
	ATB_CU(cuStreamSynchronize(c->stream), err);
	return ATB_OK;
}

enum atb_status atb_cuda_ctx_sync(struct atb_cuda *c, struct atb_error *err)
{
	(void)c;
	ATB_CU(cuCtxSynchronize(), err);
	return ATB_OK;
}

enum atb_status atb_cuda_reset_persisting_l2(struct atb_cuda *c, struct atb_error *err)
{
	(void)c;
	ATB_CU(cuCtxResetPersistingL2Cache(), err);
	return ATB_OK;
}

/* ---- the spin kernel ---------------------------------------------------- */

/*
 * One thread that waits `ns` nanoseconds by the global timer.  PTX, so the
 * driver JIT-compiles it for whatever device is there and atb needs no nvcc
 * at run time.
 */
static const char spin_ptx[] =
	".version 7.0\n"
	".target sm_70\n"
	".address_size 64\n"
	".visible .entry atb_spin(.param .u64 atb_spin_ns)\n"
	"{\n"
	"  .reg .u64 %rd<5>;\n"
	"  .reg .pred %p<2>;\n"
	"  ld.param.u64 %rd1, [atb_spin_ns];\n"
	"  mov.u64 %rd2, %globaltimer;\n"
	"SPIN:\n"
	"  mov.u64 %rd3, %globaltimer;\n"
	"  sub.u64 %rd4, %rd3, %rd2;\n"
	"  setp.lt.u64 %p1, %rd4, %rd1;\n"
	"  @%p1 bra SPIN;\n"
	"  ret;\n"
	"}\n";

enum atb_status atb_cuda_spin(struct atb_cuda *c, uint64_t spin_ns, struct atb_error *err)
{
	unsigned long long ns = spin_ns;
	void *params[1] = {&ns};

	if (!c->spin_fn) {
		ATB_CU(cuModuleLoadData(&c->spin_mod, spin_ptx), err);
		ATB_CU(cuModuleGetFunction(&c->spin_fn, c->spin_mod, "atb_spin"), err);
	}
	ATB_CU(cuLaunchKernel(c->spin_fn, 1, 1, 1, 1, 1, 1, 0, c->stream, params, NULL), err);
	return ATB_OK;
}

/* ---- events ------------------------------------------------------------ */

struct atb_cuda_events {
	struct atb_cuda *c;
	void *start, *stop;
};

enum atb_status atb_cuda_events_new(struct atb_cuda *c, struct atb_cuda_events **out,
				    struct atb_error *err)
{
	struct atb_cuda_events *e;
	enum atb_status st;

	*out = NULL;
	e = atb_calloc(1, sizeof(*e));
	if (!e)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot create events: out of memory");
	e->c = c;
	if ((st = ATB_CU_CALL(cuEventCreate(&e->start, 0 /* CU_EVENT_DEFAULT */), err)) ||
	    (st = ATB_CU_CALL(cuEventCreate(&e->stop, 0), err))) {
		atb_cuda_events_free(e);
		return st;
	}
	*out = e;
	return ATB_OK;
}

enum atb_status atb_cuda_events_record_start(struct atb_cuda_events *e, struct atb_error *err)
{
	ATB_CU(cuEventRecord(e->start, e->c->stream), err);
	return ATB_OK;
}

enum atb_status atb_cuda_events_record_stop(struct atb_cuda_events *e, struct atb_error *err)
{
	ATB_CU(cuEventRecord(e->stop, e->c->stream), err);
	return ATB_OK;
}

enum atb_status atb_cuda_events_elapsed_ns(struct atb_cuda_events *e, int64_t *ns,
					   struct atb_error *err)
{
	float ms = 0;

	char why[256];

	*ns = -1;
	/* PROTO: gates.clock -- the table the query goes through is the one loaded */
	if (!atbi_cuda_table_intact(why, sizeof(why)))
		return atb_error_set(err, ATB_ERR_CHECK, "%s", why);
	ATB_CU(cuEventSynchronize(e->stop), err);
	ATB_CU(cuEventElapsedTime(&ms, e->start, e->stop), err);
	*ns = (int64_t)((double)ms * 1e6 + 0.5);
	return ATB_OK;
}

void atb_cuda_events_free(struct atb_cuda_events *e)
{
	if (!e)
		return;
	if (e->start)
		atbi_cu.cuEventDestroy(e->start);
	if (e->stop)
		atbi_cu.cuEventDestroy(e->stop);
	atb_free(e);
}
