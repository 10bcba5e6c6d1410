/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The CUDA-events timer (atb_cuda_timer_new): a struct atb_timer_ops for the
 * one timing core.  nvbench's cold measurement: before each timed call the
 * core calls flush(), which writes flush_bytes (>= 2x L2) with
 * cuMemsetD8Async on the runner's stream, so the kernel starts with a cold
 * L2; start() then enqueues a short spin kernel and records the start event
 * behind it, so the kernel's own launch (host work in the task's wrapper) is
 * already queued when the start event fires and launch latency stays out of
 * the window; stop() records the stop event; elapsed_ns() waits for it,
 * then for the whole context, and keeps how long that second wait took
 * (last_device_extra_ns: work the call left on other streams).
 *
 * The ops table has no error channel, so a failed driver call is kept in
 * the state and reported as elapsed -1 (the core then fails the seed with
 * ATB_ERR_SYSTEM); atb_cuda_timer_error() gives the message.
 */
#include <stdio.h>
#include <string.h>

#include "atb/alloc.h"
#include "atb/cuda.h"
#include "cuda_int.h"
#include "util.h"
#include "banned.h"

struct cuda_timer {
	struct atb_timer *owner;
	struct atb_cuda *c;
	struct atb_cuda_events *ev;
	uint64_t flush_buf;
	size_t flush_bytes;
	uint64_t spin_ns;
	unsigned char flush_value;
	int failed;
	struct atb_error err;
};

static void keep(struct cuda_timer *t, enum atb_status st, const struct atb_error *e)
{
	if (st && !t->failed) {
		t->failed = 1;
		t->err = *e;
	}
}

static void ct_flush(void *state)
{
	struct cuda_timer *t = state;
	struct atb_error e;

	if (!t->flush_bytes || t->failed)
		return;
	atb_error_clear(&e);
	/* A different byte each time: the write cannot be elided as a no-op. */
	t->flush_value++;
	keep(t, ATB_CU_CALL(cuMemsetD8Async(t->flush_buf, t->flush_value, t->flush_bytes,
					    t->c->stream), &e), &e);
}

static void ct_start(void *state)
{
	struct cuda_timer *t = state;
	struct atb_error e;

	if (t->failed)
		return;
	atb_error_clear(&e);
	if (t->spin_ns)
		keep(t, atb_cuda_spin(t->c, t->spin_ns, &e), &e);
	keep(t, atb_cuda_events_record_start(t->ev, &e), &e);
}

static void ct_stop(void *state)
{
	struct cuda_timer *t = state;
	struct atb_error e;

	if (t->failed)
		return;
	atb_error_clear(&e);
	keep(t, atb_cuda_events_record_stop(t->ev, &e), &e);
}

static int64_t ct_elapsed(void *state)
{
	struct cuda_timer *t = state;
	struct atb_error e;
	int64_t ns = -1;

	if (t->failed)
		return -1;
	atb_error_clear(&e);
	keep(t, atb_cuda_events_elapsed_ns(t->ev, &ns, &e), &e);
	if (!t->failed) {
		/* PROTO: gates.side_stream.timed -- the stop event has been reached;
		 * whatever the device still runs was left on another stream. */
		int64_t t0 = atbi_monotonic_ns();

		keep(t, atb_cuda_ctx_sync(t->c, &e), &e);
		t->owner->last_device_extra_ns = atbi_monotonic_ns() - t0;
	}
	return t->failed ? -1 : ns;
}

/* Everything queued on the stream so far (the warm-up's launches) done. */
static int ct_sync(void *state)
{
	struct cuda_timer *t = state;
	struct atb_error e;

	if (t->failed)
		return -1;
	atb_error_clear(&e);
	keep(t, atb_cuda_stream_sync(t->c, &e), &e);
	return t->failed ? -1 : 0;
}

static int64_t ct_resolution(void *state)
{
	(void)state;
	return 500;  /* cuEventElapsedTime: "a resolution of around 0.5 microseconds" */
}

static void ct_release(void *state)
{
	struct cuda_timer *t = state;

	if (!t)
		return;
	atb_cuda_events_free(t->ev);
	atb_cuda_free(t->c, t->flush_buf);
	atb_free(t);
}

static const struct atb_timer_ops cuda_ops = {
	.name = "cuda_events",
	.start = ct_start,
	.stop = ct_stop,
	.elapsed_ns = ct_elapsed,
	.flush = ct_flush,
	.resolution_ns = ct_resolution,
	.release = ct_release,
	.sync = ct_sync,
};

enum atb_status atb_cuda_timer_new(struct atb_cuda *c, size_t flush_bytes, uint64_t spin_ns,
				   struct atb_timer **out, struct atb_error *err)
{
	struct cuda_timer *t;
	struct atb_timer *tm;
	enum atb_status st;

	*out = NULL;
	t = atb_calloc(1, sizeof(*t));
	tm = atb_calloc(1, sizeof(*tm));
	if (!t || !tm) {
		atb_free(t);
		atb_free(tm);
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot create the cuda timer: out of memory");
	}
	t->c = c;
	t->spin_ns = spin_ns;
	t->flush_bytes = flush_bytes;
	/* PROTO: timing.cache_flush -- persisting-L2 lines would survive the flush. */
	if ((st = atb_cuda_reset_persisting_l2(c, err)) ||
	    (st = atb_cuda_events_new(c, &t->ev, err)) ||
	    (flush_bytes && (st = atb_cuda_alloc(c, flush_bytes, &t->flush_buf, err))))
		goto fail;
	/* Load the spin kernel now, so the first trial does not pay for it. */
	if (spin_ns && ((st = atb_cuda_spin(c, 1000, err)) || (st = atb_cuda_stream_sync(c, err))))
		goto fail;
	tm->ops = &cuda_ops;
	tm->state = t;
	tm->measures_device_extra = 1;
	t->owner = tm;
	tm->flush_bytes = flush_bytes;
	*out = tm;
	return ATB_OK;
fail:
	ct_release(t);
	atb_free(tm);
	return st;
}

const char *atb_cuda_timer_error(const struct atb_timer *tm)
{
	const struct cuda_timer *t;

	if (!tm || tm->ops != &cuda_ops)
		return "";
	t = tm->state;
	return t->failed ? t->err.msg : "";
}
