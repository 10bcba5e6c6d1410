/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Unit tests of src/cuda: the driver loader and its error macro everywhere;
 * the device, memory, events, the spin kernel and the CUDA-events timer on a
 * machine with a CUDA driver (skipped, and said so, where libcuda.so.1 does
 * not load).  PROTO: timing.cache_flush.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <criterion/criterion.h>

#include "atb/alloc.h"
#include "atb/cuda.h"
#include "atb/timing.h"
#include "cuda/cuda_int.h"
#include "banned.h"

static struct atb_cuda *open_or_skip(void)
{
	struct atb_error err;
	struct atb_cuda *c = NULL;

	atb_error_clear(&err);
	if (atb_cuda_load(&err) == ATB_ERR_NOT_FOUND)
		cr_skip_test("no cuda driver here: %s", err.msg);
	cr_assert_eq(atb_cuda_open(0, &c, &err), ATB_OK, "%s", err.msg);
	return c;
}

Test(cuda, load_says_why_when_absent)
{
	struct atb_error err;
	enum atb_status st;

	atb_error_clear(&err);
	st = atb_cuda_load(&err);
	if (st == ATB_OK)
		cr_skip_test("a cuda driver loads here");
	cr_assert(st == ATB_ERR_NOT_FOUND || st == ATB_ERR_SYSTEM);
	cr_assert(strstr(err.msg, "no cuda driver") != NULL, "%s", err.msg);
	/* Asking again gives the same answer without retrying the load. */
	cr_assert_eq(atb_cuda_load(&err), st);
}

Test(cuda, open_without_driver_fails_cleanly)
{
	struct atb_error err;
	struct atb_cuda *c = (struct atb_cuda *)1;

	atb_error_clear(&err);
	if (atb_cuda_load(&err) == ATB_OK)
		cr_skip_test("a cuda driver loads here");
	cr_assert_neq(atb_cuda_open(0, &c, &err), ATB_OK);
	cr_assert_null(c);
	atb_cuda_close(NULL);
}

Test(cuda, error_macro_names_call_file_and_line)
{
	struct atb_error err;

	atb_error_clear(&err);
	cr_assert_eq(atbi_cuda_fail(1, "cuMemAlloc(&p, n)", "src/cuda/x.c", 42, &err),
		     ATB_ERR_SYSTEM);
	cr_assert(strstr(err.msg, "cuMemAlloc(&p, n) failed") != NULL, "%s", err.msg);
	cr_assert(strstr(err.msg, "(1) at src/cuda/x.c:42") != NULL, "%s", err.msg);
	cr_assert_eq(atbi_cuda_fail(2, "cuMemAlloc", "f.c", 1, &err), ATB_ERR_NOMEM);
}

Test(cuda, device_attributes)
{
	struct atb_cuda *c = open_or_skip();
	const struct atb_cuda_device_info *i = atb_cuda_info(c);

	cr_assert(i->name[0]);
	cr_assert_gt(i->sm_count, 0);
	cr_assert_gt(i->l2_bytes, 0);
	cr_assert_geq(i->cc_major, 3);
	cr_assert_gt(i->total_mem_bytes, (size_t)1 << 28);
	cr_assert_gt(i->driver_version, 0);
	cr_assert(strchr(i->pci_bus_id, ':') != NULL, "%s", i->pci_bus_id);
	cr_assert_not_null(atb_cuda_stream(c));
	cr_log_info("%s: %d SMs, L2 %zu bytes, cc %d.%d", i->name, i->sm_count, i->l2_bytes,
		    i->cc_major, i->cc_minor);
	atb_cuda_close(c);
}

Test(cuda, memory_roundtrip_and_nan_poison)
{
	struct atb_cuda *c = open_or_skip();
	struct atb_error err;
	enum { N = 1 << 20 };
	float *h = atb_malloc(N * sizeof(float));
	uint64_t d = 0;
	size_t k;

	atb_error_clear(&err);
	for (k = 0; k < N; k++)
		h[k] = (float)k;
	cr_assert_eq(atb_cuda_alloc(c, N * sizeof(float), &d, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(atb_cuda_h2d(c, d, h, N * sizeof(float), &err), ATB_OK, "%s", err.msg);
	memset(h, 0, N * sizeof(float));
	cr_assert_eq(atb_cuda_d2h(c, h, d, N * sizeof(float), &err), ATB_OK, "%s", err.msg);
	for (k = 0; k < N; k++)
		cr_assert_eq(h[k], (float)k);
	cr_assert_eq(atb_cuda_memset32(c, d, 0x7fc00000u, N, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(atb_cuda_d2h(c, h, d, N * sizeof(float), &err), ATB_OK);
	for (k = 0; k < N; k++)
		cr_assert(isnan(h[k]));
	cr_assert_eq(atb_cuda_memset8(c, d, 0, N * sizeof(float), &err), ATB_OK);
	cr_assert_eq(atb_cuda_d2h(c, h, d, N * sizeof(float), &err), ATB_OK);
	cr_assert_eq(h[N - 1], 0.0f);
	atb_cuda_free(c, d);
	atb_free(h);
	atb_cuda_close(c);
}

Test(cuda, absurd_allocation_is_nomem)
{
	struct atb_cuda *c = open_or_skip();
	struct atb_error err;
	uint64_t d = 7;

	atb_error_clear(&err);
	cr_assert_eq(atb_cuda_alloc(c, (size_t)1 << 50, &d, &err), ATB_ERR_NOMEM, "%s", err.msg);
	cr_assert_eq(d, 0);
	cr_assert(strstr(err.msg, "cuMemAlloc") != NULL, "%s", err.msg);
	cr_assert(strstr(err.msg, "src/cuda/cuda.c:") != NULL, "%s", err.msg);
	atb_cuda_close(c);
}

Test(cuda, spin_kernel_and_events)
{
	struct atb_cuda *c = open_or_skip();
	struct atb_cuda_events *e = NULL;
	struct atb_error err;
	int64_t ns = 0;

	atb_error_clear(&err);
	cr_assert_eq(atb_cuda_events_new(c, &e, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(atb_cuda_spin(c, 1000, &err), ATB_OK, "%s", err.msg);  /* load it */
	cr_assert_eq(atb_cuda_events_record_start(e, &err), ATB_OK);
	cr_assert_eq(atb_cuda_spin(c, 200000, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(atb_cuda_events_record_stop(e, &err), ATB_OK);
	cr_assert_eq(atb_cuda_events_elapsed_ns(e, &ns, &err), ATB_OK, "%s", err.msg);
	cr_assert(ns >= 195000 && ns < 2000000, "spin of 200 us took %lld ns", (long long)ns);
	atb_cuda_events_free(e);
	atb_cuda_close(c);
}

/* The timer in the core: a 100 us spin is measured as about 100 us. */
static struct atb_cuda *g_c;

static int spin_call(void *ctx, size_t arm)
{
	(void)ctx;
	return atb_cuda_spin(g_c, arm ? 200000 : 100000, NULL) ? 1 : 0;
}

Test(cuda, timer_in_the_core)
{
	struct atb_cuda *c = open_or_skip();
	struct atb_timing_config cfg;
	struct atb_timing_seed s;
	struct atb_timer *t = NULL;
	struct atb_error err;
	size_t flush;

	atb_error_clear(&err);
	g_c = c;
	flush = atb_timing_flush_bytes(atb_cuda_info(c)->l2_bytes, 2, 1 << 20, 0);
	cr_assert_geq(flush, 2 * atb_cuda_info(c)->l2_bytes);
	cr_assert_eq(atb_cuda_timer_new(c, flush, ATB_CUDA_SPIN_NS, &t, &err), ATB_OK, "%s",
		     err.msg);
	cr_assert_str_eq(t->ops->name, "cuda_events");
	cr_assert_eq(t->flush_bytes, flush);
	atb_timing_config_default(&cfg);
	cfg.trials_min = 10;
	cfg.trials_max = 30;
	cr_assert_eq(atb_timing_run_seed(&cfg, t, 1, 2, spin_call, NULL, &s, &err), ATB_OK, "%s",
		     err.msg);
	cr_assert(s.arms[0].median_ns > 99000 && s.arms[0].median_ns < 110000, "%f",
		  s.arms[0].median_ns);
	cr_assert(s.arms[1].median_ns > 199000 && s.arms[1].median_ns < 210000, "%f",
		  s.arms[1].median_ns);
	cr_assert_str_eq(atb_cuda_timer_error(t), "");
	atb_timing_seed_release(&s);
	atb_timer_free(t);
	atb_cuda_close(c);
}

Test(cuda, gpu_sample_never_fails)
{
	struct atb_cuda_gpu_sample s;

	atb_cuda_gpu_sample("0000:00:00.0", &s);
	if (!s.valid)
		cr_assert(s.why[0]);
	atb_cuda_gpu_sample(NULL, &s);
	cr_assert_eq(s.valid, 0);
}

/* PROTO: gates.clock -- a replaced cuEventElapsedTime entry fails the query (the cuda_relu/clock attack). */
static cu_result (*real_elapsed)(float *, cu_handle, cu_handle);

static cu_result forged_elapsed(float *ms, cu_handle a, cu_handle b)
{
	cu_result r = real_elapsed(ms, a, b);

	*ms *= 0.5f;
	return r;
}

Test(cuda, a_replaced_driver_entry_fails_the_elapsed_query)
{
	struct atb_cuda *c = open_or_skip();
	struct atb_cuda_events *e = NULL;
	struct atb_error err;
	char why[256];
	int64_t ns = 0;

	atb_error_clear(&err);
	cr_assert(atbi_cuda_table_intact(why, sizeof(why)), "%s", why);
	cr_assert_eq(atb_cuda_events_new(c, &e, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(atb_cuda_events_record_start(e, &err), ATB_OK);
	cr_assert_eq(atb_cuda_spin(c, 100000, &err), ATB_OK, "%s", err.msg);
	cr_assert_eq(atb_cuda_events_record_stop(e, &err), ATB_OK);
	real_elapsed = atbi_cu.cuEventElapsedTime;
	atbi_cu.cuEventElapsedTime = forged_elapsed;
	cr_assert_not(atbi_cuda_table_intact(why, sizeof(why)));
	cr_assert_eq(atb_cuda_events_elapsed_ns(e, &ns, &err), ATB_ERR_CHECK);
	cr_assert(strstr(err.msg, "function table in atb-runner was changed"), "%s", err.msg);
	cr_assert_eq(ns, -1);
	atbi_cu.cuEventElapsedTime = real_elapsed;   /* restored: intact again */
	cr_assert(atbi_cuda_table_intact(why, sizeof(why)), "%s", why);
	cr_assert_eq(atb_cuda_events_elapsed_ns(e, &ns, &err), ATB_OK, "%s", err.msg);
	atb_cuda_events_free(e);
	atb_cuda_close(c);
}
