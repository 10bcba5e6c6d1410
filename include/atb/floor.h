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
 * repetitions.
 *
 * Does not: decide verdicts (gates do), touch the store, or print.
 */
#ifndef ATB_FLOOR_H
#define ATB_FLOOR_H

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
 * Measure this box's CPU memory bandwidth and fp32 peak.  Takes about a
 * second.  work_bytes is the size of each streamed buffer (0: 256 MiB; it
 * must exceed the last-level cache several times).  Errors: ATB_ERR_NOMEM,
 * ATB_ERR_SYSTEM (threads).
 */
enum atb_status atb_floor_measure_cpu(uint64_t work_bytes, struct atb_floor_caps *out,
				      struct atb_error *err);

/*
 * The floor in ns for a call that moves bytes and does flops:
 * max(bytes / bandwidth, flops / peak) * 1e9, without the protocol's margin.
 * 0 when both are 0 or caps are unknown.
 */
double atb_floor_ns(const struct atb_floor_caps *caps, int64_t bytes, int64_t flops);

#endif
