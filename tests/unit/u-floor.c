/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Tests for the physical floor's box measurements and arithmetic. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "atb/alloc.h"
#include "atb/floor.h"

Test(floor, measure_gives_positive_bandwidth_and_peak)
{
	struct atb_floor_caps c;
	struct atb_error e = {0};

	cr_assert_eq(atb_floor_measure_cpu(32u << 20, &c, &e), ATB_OK, "%s", e.msg);
	cr_assert_gt(c.mem_bw_bytes_per_s, 1e8);   /* any box moves > 100 MB/s */
	cr_assert_gt(c.peak_flops_per_s, 1e8);
	cr_assert_geq(c.threads, 1);
	cr_assert_neq(c.isa[0], '\0');
	cr_assert_neq(c.method[0], '\0');
}

Test(floor, floor_is_the_larger_of_memory_and_compute_time)
{
	struct atb_floor_caps c = {.mem_bw_bytes_per_s = 1e10, .peak_flops_per_s = 1e11};

	/* 1e9 bytes at 1e10 B/s: 0.1 s; 1e9 flops at 1e11: 0.01 s. */
	cr_assert_float_eq(atb_floor_ns(&c, 1000000000, 1000000000), 1e8, 1e-3);
	/* 1e6 bytes: 100 us; 1e12 flops: 10 s. */
	cr_assert_float_eq(atb_floor_ns(&c, 1000000, 1000000000000LL), 1e10, 1e-1);
	cr_assert_float_eq(atb_floor_ns(&c, 0, 0), 0.0, 0);
	cr_assert_float_eq(atb_floor_ns(NULL, 10, 10), 0.0, 0);
}

Test(floor, unknown_caps_give_no_floor)
{
	struct atb_floor_caps c = {0};

	cr_assert_float_eq(atb_floor_ns(&c, 1000, 1000), 0.0, 0);
}

Test(floor, allocation_failure_is_reported)
{
	struct atb_floor_caps c;
	struct atb_error e = {0};
	long k;

	for (k = 1; k <= 5; k++) {
		atb_alloc_fail_at(k);
		cr_assert_eq(atb_floor_measure_cpu(8u << 20, &c, &e), ATB_ERR_NOMEM, "k=%ld", k);
	}
	atb_alloc_fail_at(0);
}

/* The GPU caps: bandwidth the larger figure, peak the best precision with headroom. */
Test(floor, gpu_caps_take_upper_bounds)
{
	struct atb_floor_gpu g = {0};
	struct atb_floor_caps c;

	g.copy_bw_bytes_per_s = 4.0e12;
	g.attr_bw_bytes_per_s = 4.8e12;
	g.gemm_flops_per_s_fp32 = 5.0e13;
	g.gemm_flops_per_s_fp16 = 7.0e14;
	g.gemm_flops_per_s_bf16 = 6.5e14;
	atb_floor_gpu_caps(&g, &c);
	cr_assert_float_eq(c.mem_bw_bytes_per_s, 4.8e12, 1);
	cr_assert_float_eq(c.peak_flops_per_s, 7.0e14 * ATB_FLOOR_GPU_GEMM_HEADROOM, 1);
	g.attr_bw_bytes_per_s = 0;
	atb_floor_gpu_caps(&g, &c);
	cr_assert_float_eq(c.mem_bw_bytes_per_s, 4.0e12, 1);
}

/* No cuBLAS: no flops term, never a made-up peak. */
Test(floor, gpu_caps_without_cublas_have_no_flops_term)
{
	struct atb_floor_gpu g = {0};
	struct atb_floor_caps c;

	g.copy_bw_bytes_per_s = 4.0e12;
	atb_floor_gpu_caps(&g, &c);
	cr_assert_float_eq(c.peak_flops_per_s, 0.0, 0);
	/* 1 GiB and 1e15 flops: the floor is the bytes' time only */
	cr_assert_float_eq(atb_floor_ns(&c, 1 << 30, 1000000000000000LL),
			   (double)(1 << 30) / 4.0e12 * 1e9, 1e-3);
	cr_assert(strstr(c.method, "no cublas"), "%s", c.method);
}

/* Without a driver it says so; on a GPU every figure is positive. */
Test(floor, gpu_measure_on_this_machine)
{
	struct atb_floor_gpu g;
	struct atb_error e = {0};
	enum atb_status st = atb_floor_measure_gpu(0, 64u << 20, &g, &e);

	if (st == ATB_ERR_NOT_FOUND) {
		cr_log_info("skipped: %s", e.msg);
		return;
	}
	cr_assert_eq(st, ATB_OK, "%s", e.msg);
	cr_assert_gt(g.copy_bw_bytes_per_s, 1e10);
	cr_assert_neq(g.method[0], '\0');
	cr_log_info("gpu floor: copy %.4g B/s, attributes %.4g B/s, fp32 %.4g, fp16 %.4g, "
		    "bf16 %.4g flop/s (%s)", g.copy_bw_bytes_per_s, g.attr_bw_bytes_per_s,
		    g.gemm_flops_per_s_fp32, g.gemm_flops_per_s_fp16, g.gemm_flops_per_s_bf16,
		    g.method);
}

/* The caps bound speed from above: a merge keeps the higher of each rate. */
Test(floor, merge_keeps_the_maximum_of_each_rate)
{
	struct atb_floor_caps c = {.mem_bw_bytes_per_s = 3.17e9, .peak_flops_per_s = 5e10,
				   .threads = 2, .isa = "avx2", .method = "first"};
	struct atb_floor_caps again = {.mem_bw_bytes_per_s = 9e9, .peak_flops_per_s = 4e10,
				       .threads = 2, .isa = "avx2", .method = "again"};

	atb_floor_caps_merge(&c, &again);
	cr_assert_float_eq(c.mem_bw_bytes_per_s, 9e9, 1);
	cr_assert_float_eq(c.peak_flops_per_s, 5e10, 1);
	cr_assert_str_eq(c.method, "again");
	again.mem_bw_bytes_per_s = 1e9;
	again.peak_flops_per_s = 1e9;
	snprintf(again.method, sizeof(again.method), "slower");
	atb_floor_caps_merge(&c, &again);
	cr_assert_float_eq(c.mem_bw_bytes_per_s, 9e9, 1);
	cr_assert_float_eq(c.peak_flops_per_s, 5e10, 1);
	cr_assert_str_eq(c.method, "again");
}

/*
 * PROTO: gates.physical_floor -- a floor measured while the box was busy
 * (here: caps far too low) is raised by a re-measurement, so an honest
 * kernel that beat it is judged against the real one; caps measured high
 * are never lowered.
 */
Test(floor, remeasure_raises_caps_measured_under_load_and_never_lowers)
{
	struct atb_floor_caps low = {.mem_bw_bytes_per_s = 1e6, .peak_flops_per_s = 1e6,
				     .threads = 1, .isa = "baseline", .method = "busy box"};
	struct atb_floor_caps high = {.mem_bw_bytes_per_s = 1e15, .peak_flops_per_s = 1e18,
				      .threads = 1, .isa = "baseline", .method = "kept"};
	struct atb_error e = {0};
	double floor_before = atb_floor_ns(&low, 8 << 20, 0);

	cr_assert_eq(atb_floor_remeasure_cpu(16u << 20, &low, &e), ATB_OK, "%s", e.msg);
	cr_assert_gt(low.mem_bw_bytes_per_s, 1e8);
	cr_assert_gt(low.peak_flops_per_s, 1e8);
	cr_assert(strstr(low.method, "re-measured"), "%s", low.method);
	cr_assert_lt(atb_floor_ns(&low, 8 << 20, 0), floor_before);
	/* The same re-measurement merged into caps measured high lowers nothing. */
	atb_floor_caps_merge(&high, &low);
	cr_assert_float_eq(high.mem_bw_bytes_per_s, 1e15, 1);
	cr_assert_float_eq(high.peak_flops_per_s, 1e18, 1);
	cr_assert_str_eq(high.method, "kept");
}

Test(floor, remeasure_failure_leaves_caps_unchanged)
{
	struct atb_floor_caps c = {.mem_bw_bytes_per_s = 2e9, .peak_flops_per_s = 3e9,
				   .method = "before"};
	struct atb_error e = {0};

	atb_alloc_fail_at(1);
	cr_assert_eq(atb_floor_remeasure_cpu(8u << 20, &c, &e), ATB_ERR_NOMEM);
	atb_alloc_fail_at(0);
	cr_assert_float_eq(c.mem_bw_bytes_per_s, 2e9, 1);
	cr_assert_str_eq(c.method, "before");
}

/* ---- the caches a torch output may be written into ---- */

static void put(const char *root, const char *cpu, int idx, const char *file, const char *text)
{
	char path[1024];
	FILE *f;

	snprintf(path, sizeof(path), "%s/devices/system/cpu/%s/cache/index%d", root, cpu, idx);
	{
		char cmd[1200];

		snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", path);
		cr_assert_eq(system(cmd), 0);
	}
	snprintf(path + strlen(path), sizeof(path) - strlen(path), "/%s", file);
	f = fopen(path, "w");
	cr_assert(f);
	fprintf(f, "%s\n", text);
	fclose(f);
}

static void cache(const char *root, const char *cpu, int idx, const char *level, const char *type,
		  const char *size, const char *shared)
{
	put(root, cpu, idx, "level", level);
	put(root, cpu, idx, "type", type);
	put(root, cpu, idx, "size", size);
	put(root, cpu, idx, "shared_cpu_list", shared);
}

/* PROTO: gates.physical_floor.cache_allowance -- every data cache once, instruction caches not */
Test(floor, cpu_cache_bytes_count_each_data_cache_instance_once)
{
	char root[] = "/tmp/atb-u-floor-XXXXXX", cmd[256];

	cr_assert(mkdtemp(root));
	/* two cores: private L1d 48K, L1i 32K and L2 1M each, one shared L3 32M */
	cache(root, "cpu0", 0, "1", "Data", "48K", "0");
	cache(root, "cpu0", 1, "1", "Instruction", "32K", "0");
	cache(root, "cpu0", 2, "2", "Unified", "1024K", "0");
	cache(root, "cpu0", 3, "3", "Unified", "32768K", "0-1");
	cache(root, "cpu1", 0, "1", "Data", "48K", "1");
	cache(root, "cpu1", 1, "1", "Instruction", "32K", "1");
	cache(root, "cpu1", 2, "2", "Unified", "1024K", "1");
	cache(root, "cpu1", 3, "3", "Unified", "32768K", "0-1");
	cr_assert_eq(atb_floor_cpu_cache_bytes(root),
		     2 * (48u << 10) + 2 * (1024u << 10) + (32768u << 10));
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	cr_assert_eq(system(cmd), 0);
	/* nothing there: unknown, never a guess */
	cr_assert_eq(atb_floor_cpu_cache_bytes("/no/such/sysfs"), 0);
}
