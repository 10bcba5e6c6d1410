/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The physical floor: the least time a kernel that moves `bytes` and does
 * `flops` can take on this box.  A measured time below
 * margin * max(bytes / bandwidth, flops / peak) is impossible: the kernel
 * skipped work (an identity "ReLU", a cached result) and the gate refuses it.
 *
 * atb measures the box's memory bandwidth and peak floating-point rate itself
 * (on first use; the store caches them per box fingerprint).  Both are
 * measured as upper bounds of what any candidate could reach: every core
 * busy, the widest vector unit the CPU has (function multiversioning picks
 * AVX-512, AVX2+FMA or the baseline ISA at run time), the best of several
 * repetitions, and atb_floor_remeasure_cpu to measure again (longer) when a
 * candidate beats a floor measured while the box was busy.
 *
 * On a GPU (tasks of kind cuda) the same two numbers come from the device:
 * atb_floor_measure_gpu times a large device-to-device copy (bytes read plus
 * written) and large GEMMs through cuBLAS (loaded with dlopen at run time,
 * like libcuda) in fp32, fp16 and bf16, and atb_floor_gpu_caps turns them
 * into the caps the gate uses (docs/internals/gates.md says why the highest
 * rate of any precision, with headroom, bounds every task).
 *
 * Does not: decide verdicts (gates do), touch the store, or print.
 */
#ifndef ATB_FLOOR_H
#define ATB_FLOOR_H

#include <stddef.h>
#include <stdint.h>

#include "atb/status.h"

struct atb_floor_caps {
	double mem_bw_bytes_per_s;  /* bytes read + written per second, all cores */
	double peak_flops_per_s;    /* fp32 FMA rate, 2 flops per FMA, all cores */
	int threads;                /* cores used */
	char isa[16];               /* "avx512f", "avx2", "baseline" */
	char method[160];           /* how it was measured, for the record */
};

/*
 * Measure this box's CPU memory bandwidth and fp32 peak: the best rate of
 * each core (its fastest 8 MiB piece of a pass, its fastest sixteenth of
 * an FMA run: short enough to fall between two preemptions on a busy box)
 * over at least 5 repetitions, more while they still find a
 * faster one (up to 20, or about 1.5 s), summed over the cores.  The caps
 * bound speed from above, so the maximum observed is the one kept.
 * work_bytes is the size of each streamed buffer (0: 256 MiB; it must
 * exceed the last-level cache several times).  Errors: ATB_ERR_NOMEM,
 * ATB_ERR_SYSTEM (threads).
 */
enum atb_status atb_floor_measure_cpu(uint64_t work_bytes, struct atb_floor_caps *out,
				      struct atb_error *err);

/*
 * Measure again, longer (at least 10 repetitions, up to 40 or about 4 s),
 * and raise *caps to the higher of each rate (atb_floor_caps_merge): caps
 * only go up, so the floor only goes down.  For the physical-floor gate:
 * when a candidate beats the floor computed from caps measured earlier (on
 * a box that was busy then), re-measure once and judge it against the new
 * floor; a candidate that still beats it skipped work.  *caps is unchanged
 * on failure.  Errors: as atb_floor_measure_cpu.
 */
enum atb_status atb_floor_remeasure_cpu(uint64_t work_bytes, struct atb_floor_caps *caps,
					struct atb_error *err);

/*
 * Raise caps to the higher bandwidth and peak of caps and again (threads
 * likewise; method becomes again's when it raised anything).
 */
void atb_floor_caps_merge(struct atb_floor_caps *caps, const struct atb_floor_caps *again);

/*
 * The floor in ns for a call that moves bytes and does flops:
 * max(bytes / bandwidth, flops / peak) * 1e9, without the protocol's margin.
 * 0 when both are 0 or caps are unknown.
 */
double atb_floor_ns(const struct atb_floor_caps *caps, int64_t bytes, int64_t flops);

/*
 * The bytes this machine's CPU data caches hold in all: every data or
 * unified cache of every level, each instance once (sysfs
 * /sys/devices/system/cpu/cpu* /cache/index* /: size, level, type and
 * shared_cpu_list).  An output that fits in them can be written without
 * reaching memory, so the physical floor of a write counts only the bytes
 * beyond them (PROTO: gates.physical_floor.cache_allowance).  0 when sysfs
 * does not say.  sysfs_root: NULL for "/sys" (tests give a planted tree).
 */
uint64_t atb_floor_cpu_cache_bytes(const char *sysfs_root);

/* ---- the GPU ---- */

/* Capability kinds of device ordinal N in the store's box_capability table. */
#define ATB_FLOOR_GPU_KIND_MEM_BW "gpu%d_mem_bw_bytes_per_s"
#define ATB_FLOOR_GPU_KIND_FP32 "gpu%d_peak_flops_per_s_fp32"
#define ATB_FLOOR_GPU_KIND_FP16 "gpu%d_peak_flops_per_s_fp16"
#define ATB_FLOOR_GPU_KIND_BF16 "gpu%d_peak_flops_per_s_bf16"

/*
 * A measured GEMM rate is what cuBLAS reaches, not what the tensor cores
 * can: a candidate may beat cuBLAS on its shape.  The flops cap the gate
 * uses is the highest measured rate of any precision times this headroom,
 * so the floor never refuses an honest kernel that is faster than cuBLAS
 * (cuBLAS reaches well over 1/2 of the tensor cores' rate on large GEMMs).
 */
#define ATB_FLOOR_GPU_GEMM_HEADROOM 2.0

struct atb_floor_gpu {
	int ordinal;
	char device[128];
	/* best device-to-device copy: 2 x bytes per second (read + write) */
	double copy_bw_bytes_per_s;
	/* 2 x memory clock x bus width, from the driver's attributes; 0 unknown */
	double attr_bw_bytes_per_s;
	/* best GEMM rates through cuBLAS, 2 flops per multiply-add; 0 when
	   cuBLAS could not be loaded or the call failed (why in cublas_why) */
	double gemm_flops_per_s_fp32;   /* cublasSgemm, default math (no TF32) */
	double gemm_flops_per_s_fp16;   /* cublasGemmEx fp16 in, fp32 compute */
	double gemm_flops_per_s_bf16;   /* cublasGemmEx bf16 in, fp32 compute */
	char cublas_why[160];
	char method[384];
};

/*
 * Measure device `ordinal`: memory bandwidth (cuMemcpyDtoDAsync of
 * copy_bytes, 0: 1 GiB or an eighth of the device memory, timed with events,
 * best of 10) and GEMM peaks (m = n = k = 8192, best of 5 after a warm-up).
 * About a second on an H200.  A missing cuBLAS is not an error: the GEMM
 * rates stay 0 and cublas_why says why.  Errors: those of atb_cuda_open
 * (ATB_ERR_NOT_FOUND: no cuda driver), ATB_ERR_NOMEM (device memory),
 * ATB_ERR_SYSTEM (a driver call failed, named).
 */
enum atb_status atb_floor_measure_gpu(int ordinal, uint64_t copy_bytes, struct atb_floor_gpu *out,
				      struct atb_error *err);

/*
 * The caps the physical floor uses on the GPU: bandwidth the larger of the
 * measured copy and the attribute figure; peak the highest GEMM rate of any
 * precision times ATB_FLOOR_GPU_GEMM_HEADROOM (0: unknown, so the flops term
 * of the floor is not applied).  method says which.
 */
void atb_floor_gpu_caps(const struct atb_floor_gpu *g, struct atb_floor_caps *out);

#endif
