/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The CUDA driver API, loaded at run time.  libcuda.so.1 is dlopen()ed on
 * first use, so atb builds and runs on machines with no GPU: there every
 * function here returns ATB_ERR_NOT_FOUND ("no cuda driver") and the GPU
 * tests report themselves skipped.  Every driver call goes through one
 * macro that records the call, file and line and turns a CUresult into an
 * atb status with the driver's error name in the message (nvbench's
 * NVBENCH_DRIVER_API_CALL); nothing aborts.
 *
 * A struct atb_cuda is one device, its primary context (made current on the
 * opening thread) and one non-blocking stream: the runner's stream, passed to
 * kernels as args->stream.  A task's shared object is built by nvcc with the
 * CUDA runtime linked statically; the runtime attaches to the same primary
 * context, so a kernel launched with <<<grid, block, 0, (cudaStream_t)
 * args->stream>>> runs on the runner's stream (docs/internals/cuda.md).
 *
 * The CUDA-events timer (atb_cuda_timer_new) plugs into the one timing core
 * (atb/timing.h): events on the runner's stream, an L2 flush by
 * cuMemsetD8Async of at least twice the L2 before each timed call, and a
 * short spin kernel (PTX, loaded with cuModuleLoadData) ahead of the start
 * event, so the host's launch latency stays out of the window (nvbench's
 * cold measurement).
 *
 * Does not: compile anything (nvcc is the task build's job), launch a task's
 * kernels, or read NVML (atb_cuda_gpu_sample does, through the box module's
 * shared NVML loader, which honours $ATB_NVML_LIBRARY, only for the
 * volatile state the runner reports).
 * Not thread-safe: one struct atb_cuda per thread.
 */
#ifndef ATB_CUDA_H
#define ATB_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "atb/status.h"
#include "atb/timing.h"

struct atb_cuda;

/* What the driver reports about the device (attributes read once at open). */
struct atb_cuda_device_info {
	int ordinal;
	char name[256];
	char pci_bus_id[32];           /* "0000:19:00.0", for NVML */
	int driver_version;            /* cuDriverGetVersion, e.g. 13000 */
	int cc_major, cc_minor;        /* compute capability, 9.0 on the H200 */
	int sm_count;
	size_t l2_bytes;               /* CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE */
	size_t persisting_l2_max_bytes;
	int sm_clock_khz;              /* peak, CU_DEVICE_ATTRIBUTE_CLOCK_RATE */
	int mem_clock_khz;             /* peak, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE */
	int mem_bus_width_bits;
	size_t total_mem_bytes;        /* cuDeviceTotalMem */
};

/*
 * Load libcuda.so.1 and cuInit(0) (once per process).  ATB_OK when a CUDA
 * driver and at least one device are there.  Errors: ATB_ERR_NOT_FOUND (no
 * library, no symbol, no device: "no cuda driver: ..."), ATB_ERR_SYSTEM
 * (cuInit failed).  Cheap after the first call.
 */
enum atb_status atb_cuda_load(struct atb_error *err);

/*
 * Open device `ordinal`: retain its primary context, make it current, read
 * its attributes, create a non-blocking stream.  Caller owns *out
 * (atb_cuda_close); *out is NULL on failure.  Errors: those of
 * atb_cuda_load, ATB_ERR_USAGE (no such device), ATB_ERR_SYSTEM (a driver
 * call failed: the message names it, e.g. "cuStreamCreate failed:
 * CUDA_ERROR_...(N) at src/cuda/cuda.c:123"), ATB_ERR_NOMEM.
 */
enum atb_status atb_cuda_open(int ordinal, struct atb_cuda **out, struct atb_error *err);

/*
 * Compute capability of device `ordinal` without creating a context (for
 * nvcc's -arch).  Errors: those of atb_cuda_load, ATB_ERR_USAGE, ATB_ERR_SYSTEM.
 */
enum atb_status atb_cuda_device_cc(int ordinal, int *major, int *minor, struct atb_error *err);

/* Destroy the stream and release the primary context.  NULL is harmless. */
void atb_cuda_close(struct atb_cuda *c);

/* The device's attributes; valid while c is open. */
const struct atb_cuda_device_info *atb_cuda_info(const struct atb_cuda *c);

/* The runner's stream (a CUstream) to pass as args->stream. */
void *atb_cuda_stream(const struct atb_cuda *c);

/*
 * Device memory.  Pointers are device addresses (CUdeviceptr).  Copies and
 * memsets are synchronous with respect to the host (they run on the
 * runner's stream and wait for it).  atb_cuda_memset32 writes count 32-bit
 * words of value (the NaN poison is 0x7fc00000).  Errors: ATB_ERR_SYSTEM
 * (the driver call, named), ATB_ERR_NOMEM (cuMemAlloc out of memory).
 */
enum atb_status atb_cuda_alloc(struct atb_cuda *c, size_t bytes, uint64_t *dptr,
			       struct atb_error *err);
void atb_cuda_free(struct atb_cuda *c, uint64_t dptr);
enum atb_status atb_cuda_h2d(struct atb_cuda *c, uint64_t dst, const void *src, size_t bytes,
			     struct atb_error *err);
enum atb_status atb_cuda_d2h(struct atb_cuda *c, void *dst, uint64_t src, size_t bytes,
			     struct atb_error *err);
/*
 * Device-to-device copy of bytes on the runner's stream, asynchronous (the
 * GPU floor times it with events).  Errors: ATB_ERR_SYSTEM.
 */
enum atb_status atb_cuda_d2d_async(struct atb_cuda *c, uint64_t dst, uint64_t src, size_t bytes,
				   struct atb_error *err);
enum atb_status atb_cuda_memset8(struct atb_cuda *c, uint64_t dst, unsigned char value,
				 size_t bytes, struct atb_error *err);
enum atb_status atb_cuda_memset32(struct atb_cuda *c, uint64_t dst, uint32_t value,
				  size_t count, struct atb_error *err);

/* Wait for the runner's stream; for the whole context (every stream). */
enum atb_status atb_cuda_stream_sync(struct atb_cuda *c, struct atb_error *err);
enum atb_status atb_cuda_ctx_sync(struct atb_cuda *c, struct atb_error *err);

/*
 * Reset persisting-L2 lines (cuCtxResetPersistingL2Cache), so no access
 * policy window left by a kernel keeps data resident across trials.
 */
enum atb_status atb_cuda_reset_persisting_l2(struct atb_cuda *c, struct atb_error *err);

/*
 * Launch the spin kernel on the runner's stream: one thread that waits
 * spin_ns by %globaltimer.  Asynchronous.  Errors: ATB_ERR_SYSTEM.
 */
enum atb_status atb_cuda_spin(struct atb_cuda *c, uint64_t spin_ns, struct atb_error *err);

/*
 * A pair of events on the runner's stream, for callers that time by hand
 * (benchmarks, the side-stream check).  atb_cuda_events_elapsed_ns waits for
 * the stop event.  Caller owns *out (atb_cuda_events_free).
 */
struct atb_cuda_events;
enum atb_status atb_cuda_events_new(struct atb_cuda *c, struct atb_cuda_events **out,
				    struct atb_error *err);
enum atb_status atb_cuda_events_record_start(struct atb_cuda_events *e, struct atb_error *err);
enum atb_status atb_cuda_events_record_stop(struct atb_cuda_events *e, struct atb_error *err);
enum atb_status atb_cuda_events_elapsed_ns(struct atb_cuda_events *e, int64_t *ns,
					   struct atb_error *err);
void atb_cuda_events_free(struct atb_cuda_events *e);

/* Default spin ahead of each timed call: covers a runtime launch's latency. */
#define ATB_CUDA_SPIN_NS 20000

/*
 * The CUDA-events timer for the timing core.  flush_bytes: bytes written by
 * each flush (PROTO: timing.cache_flush; the caller passes at least twice
 * the L2, atb_timing_flush_bytes(l2, factor, min)); 0 disables the flush.
 * spin_ns: the spin kernel ahead of each start event (0: none).  Resets
 * persisting L2 at creation.  start() launches the spin kernel and records
 * the start event, stop() records the stop event, elapsed_ns() waits for it
 * and returns cuEventElapsedTime in ns (-1 on failure; the last error is
 * kept, see atb_cuda_timer_error).  Caller owns *out (atb_timer_free); c must
 * outlive it.  Errors: ATB_ERR_SYSTEM, ATB_ERR_NOMEM.
 */
enum atb_status atb_cuda_timer_new(struct atb_cuda *c, size_t flush_bytes, uint64_t spin_ns,
				   struct atb_timer **out, struct atb_error *err);

/* The first failure the timer saw ("" when none); valid while t lives. */
const char *atb_cuda_timer_error(const struct atb_timer *t);

/* Volatile GPU state from NVML (clocks, throttle reasons, temperature, power). */
struct atb_cuda_gpu_sample {
	int valid;                     /* 0: NVML not there (reason in why) */
	char why[128];
	unsigned sm_clock_mhz, mem_clock_mhz;
	unsigned sm_clock_max_mhz;
	unsigned long long throttle_reasons;  /* nvmlClocksEventReasons bit mask */
	int throttled;                 /* a reason other than idle / app clocks set */
	int temperature_c;             /* -1 unknown */
	unsigned power_mw;             /* 0 unknown */
	int64_t at_ns;                 /* CLOCK_MONOTONIC when read */
};

/*
 * Read the GPU at PCI bus id pci (atb_cuda_info()->pci_bus_id) through NVML,
 * loaded with dlopen once.  Never fails: without NVML, out->valid is 0 and
 * out->why says why.
 */
void atb_cuda_gpu_sample(const char *pci, struct atb_cuda_gpu_sample *out);

/*
 * The SM clock (MHz) and the clock-event reasons (nvmlClocksEventReasons) of
 * the GPU at pci, read cheaply enough to take after every timed trial: the
 * NVML handle is kept between calls.  0, or -1 (no NVML, no such device, or
 * the query failed; *mhz then 0).
 */
int atb_cuda_sm_clock(const char *pci, unsigned *mhz, unsigned long long *reasons);

#endif
