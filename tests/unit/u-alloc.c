/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Tests for the one allocator: alignment and failure injection. */
#include <stdint.h>

#include <criterion/criterion.h>

#include "atb/alloc.h"

Test(alloc, aligned_alloc_is_aligned_and_freed_by_atb_free)
{
	size_t sizes[] = {1, 100, 4096, 409600, 0};
	size_t i;

	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		void *p = atb_aligned_alloc(4096, sizes[i]);

		cr_assert_not_null(p);
		cr_assert_eq((uintptr_t)p % 4096, 0, "size %zu at %p", sizes[i], p);
		atb_free(p);
	}
}

Test(alloc, injected_failure_hits_exactly_the_kth_allocation)
{
	void *a, *b, *c;

	atb_alloc_fail_at(2);
	a = atb_malloc(10);
	b = atb_aligned_alloc(64, 10);
	c = atb_calloc(1, 10);
	atb_alloc_fail_at(0);
	cr_assert_not_null(a);
	cr_assert_null(b);
	cr_assert_not_null(c);
	atb_free(a);
	atb_free(c);
}
