/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Tests for the physical floor's box measurements and arithmetic. */
#include <math.h>

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

	for (k = 1; k <= 4; k++) {
		atb_alloc_fail_at(k);
		cr_assert_eq(atb_floor_measure_cpu(8u << 20, &c, &e), ATB_ERR_NOMEM, "k=%ld", k);
	}
	atb_alloc_fail_at(0);
}
