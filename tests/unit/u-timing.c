/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Unit tests of the timing core (src/timing) with a scripted fake timer, so
 * that stopping, ordering and flushing are checked exactly, and of the cpu
 * timer against the monotonic clock and, with timing.preemption, against a
 * competitor pinned to its CPU.  PROTO: timing.warmup, timing.trials,
 * timing.stopping, timing.cache_flush, timing.interleave, timing.preemption.
 */
#define _GNU_SOURCE
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "atb/alloc.h"
#include "atb/timing.h"
#include "timing/timing_int.h"
#include "banned.h"

/* A fake timer: elapsed_ns is what the last call said it took. */
struct fake {
	int64_t next_ns;
	int flushes;
	int starts;
	int running;
	int bad_stop;   /* a call ran outside start/stop */
};

static void f_start(void *s) { ((struct fake *)s)->starts++; ((struct fake *)s)->running = 1; }
static void f_stop(void *s) { ((struct fake *)s)->running = 0; }
static int64_t f_elapsed(void *s) { return ((struct fake *)s)->next_ns; }
static void f_flush(void *s) { ((struct fake *)s)->flushes++; }
static int64_t f_res(void *s) { (void)s; return 1; }

static const struct atb_timer_ops fake_ops = {
	.name = "fake", .start = f_start, .stop = f_stop, .elapsed_ns = f_elapsed,
	.flush = f_flush, .resolution_ns = f_res, .release = NULL,
};

struct script {
	struct fake *fake;
	int calls[4];
	int timed_calls[4];
	int64_t base_ns[4];
	int noisy;        /* alternate +-40% */
	int fail_arm;     /* -1: none */
	int fail_after;   /* fail on this call number of fail_arm */
	long sleep_ns;    /* real time burnt per call */
	size_t last_arm[1024];
	size_t nlast;
};

static int scripted_call(void *ctx, size_t arm)
{
	struct script *s = ctx;
	int n = s->calls[arm]++;

	if ((int)arm == s->fail_arm && n >= s->fail_after)
		return 7;
	if (s->fake->running) {
		s->timed_calls[arm]++;
		if (s->nlast < 1024)
			s->last_arm[s->nlast++] = arm;
	}
	s->fake->next_ns = s->base_ns[arm];
	if (s->noisy)
		s->fake->next_ns = s->base_ns[arm] * (n % 2 ? 14 : 6) / 10;
	if (s->sleep_ns) {
		struct timespec ts = {0, s->sleep_ns};

		nanosleep(&ts, NULL);
	}
	return 0;
}

static void setup_cfg(struct atb_timing_config *c)
{
	atb_timing_config_default(c);
	c->warmup_min_iterations = 2;
	c->warmup_min_time_ns = 0;
	c->trials_min = 10;
	c->trials_max = 30;
	c->max_time_per_seed_ns = 0;
}

Test(timing, constant_times_stop_at_trials_min_on_target)
{
	struct fake f = {0};
	struct atb_timer t = {.ops = &fake_ops, .state = &f};
	struct script s = {.fake = &f, .base_ns = {1000, 2000}, .fail_arm = -1};
	struct atb_timing_config c;
	struct atb_timing_seed r;
	struct atb_error e;

	setup_cfg(&c);
	cr_assert_eq(atb_timing_run_seed(&c, &t, 5, 2, scripted_call, &s, &r, &e), ATB_OK);
	cr_assert_eq(r.stop, ATB_STOP_TARGET);
	cr_assert_eq(r.rounds, 10);
	cr_assert_eq(r.arms[0].ntrials, 10);
	cr_assert_eq(r.arms[1].ntrials, 10);
	cr_assert_eq(r.arms[0].times_ns[3], 1000);
	cr_assert_eq(r.arms[1].times_ns[3], 2000);
	cr_assert_float_eq(r.arms[1].median_ns, 2000.0, 1e-9);
	cr_assert_float_eq(r.arms[1].ci_rel_halfwidth, 0.0, 1e-12);
	cr_assert_eq(r.arms[0].warmup_iterations, 2);
	cr_assert_str_eq(atb_timing_stop_name(r.stop), "target");
	atb_timing_seed_release(&r);
}

/* PROTO: gates.side_stream.timed -- a timer that measures the device's
   wait after each stop: the core keeps it per trial, beside the time */
static struct atb_timer *extra_owner;
static int64_t f_elapsed_extra(void *s)
{
	extra_owner->last_device_extra_ns = ((struct fake *)s)->next_ns / 10 + 1;
	return ((struct fake *)s)->next_ns;
}

static const struct atb_timer_ops extra_ops = {
	.name = "fake_extra", .start = f_start, .stop = f_stop, .elapsed_ns = f_elapsed_extra,
	.flush = f_flush, .resolution_ns = f_res, .release = NULL,
};

Test(timing, device_extra_is_kept_per_trial_only_when_the_timer_measures_it)
{
	struct fake f = {0};
	struct atb_timer t = {.ops = &extra_ops, .state = &f, .measures_device_extra = 1};
	struct script s = {.fake = &f, .base_ns = {1000, 2000}, .fail_arm = -1};
	struct atb_timing_config c;
	struct atb_timing_seed r;
	struct atb_error e;
	size_t i;

	extra_owner = &t;
	setup_cfg(&c);
	cr_assert_eq(atb_timing_run_seed(&c, &t, 5, 2, scripted_call, &s, &r, &e), ATB_OK);
	cr_assert_not_null(r.arms[0].device_extra_ns);
	for (i = 0; i < r.arms[1].ntrials; i++) {
		cr_assert_eq(r.arms[0].device_extra_ns[i], 101);
		cr_assert_eq(r.arms[1].device_extra_ns[i], 201);
	}
	atb_timing_seed_release(&r);
	t.measures_device_extra = 0;
	cr_assert_eq(atb_timing_run_seed(&c, &t, 5, 2, scripted_call, &s, &r, &e), ATB_OK);
	cr_assert_null(r.arms[0].device_extra_ns);
	cr_assert_null(r.arms[1].device_extra_ns);
	atb_timing_seed_release(&r);
}

Test(timing, noisy_times_run_to_trials_max)
{
	struct fake f = {0};
	struct atb_timer t = {.ops = &fake_ops, .state = &f};
	struct script s = {.fake = &f, .base_ns = {1000, 1000}, .noisy = 1, .fail_arm = -1};
	struct atb_timing_config c;
	struct atb_timing_seed r;
	struct atb_error e;

	setup_cfg(&c);
	cr_assert_eq(atb_timing_run_seed(&c, &t, 5, 2, scripted_call, &s, &r, &e), ATB_OK);
	cr_assert_eq(r.stop, ATB_STOP_TRIALS_MAX);
	cr_assert_eq(r.rounds, 30);
	cr_assert_eq(r.arms[0].ntrials, 30);
	cr_assert(r.arms[0].ci_rel_halfwidth > 0.01);
	atb_timing_seed_release(&r);
}

Test(timing, flush_before_every_timed_call_and_not_in_warmup)
{
	struct fake f = {0};
	struct atb_timer t = {.ops = &fake_ops, .state = &f};
	struct script s = {.fake = &f, .base_ns = {1000, 1000}, .noisy = 1, .fail_arm = -1};
	struct atb_timing_config c;
	struct atb_timing_seed r;
	struct atb_error e;

	setup_cfg(&c);
	cr_assert_eq(atb_timing_run_seed(&c, &t, 5, 2, scripted_call, &s, &r, &e), ATB_OK);
	cr_assert_eq(f.flushes, 60);
	cr_assert_eq(f.starts, 60);
	cr_assert_eq(s.timed_calls[0] + s.timed_calls[1], 60);
	cr_assert_eq(s.calls[0], 30 + 2);  /* trials + warm-up */
	atb_timing_seed_release(&r);

	memset(&f, 0, sizeof(f));
	memset(s.calls, 0, sizeof(s.calls));
	c.flush = 0;
	cr_assert_eq(atb_timing_run_seed(&c, &t, 5, 2, scripted_call, &s, &r, &e), ATB_OK);
	cr_assert_eq(f.flushes, 0);
	atb_timing_seed_release(&r);
}

Test(timing, order_is_drawn_from_the_seed_and_reproducible)
{
	size_t a[2 * 64], b[2 * 64], d[2 * 64], i;
	int firsts[2] = {0, 0}, differ = 0;
	struct atb_error e;

	cr_assert_eq(atb_timing_round_orders(ATB_INTERLEAVE_RANDOMIZED_PAIRS, 42, 2, 64, a, &e), ATB_OK);
	cr_assert_eq(atb_timing_round_orders(ATB_INTERLEAVE_RANDOMIZED_PAIRS, 42, 2, 64, b, &e), ATB_OK);
	cr_assert_eq(atb_timing_round_orders(ATB_INTERLEAVE_RANDOMIZED_PAIRS, 43, 2, 64, d, &e), ATB_OK);
	cr_assert_arr_eq(a, b, sizeof(a));
	for (i = 0; i < 64; i++) {
		cr_assert_eq(a[2 * i] + a[2 * i + 1], 1);  /* a permutation of {0,1} */
		firsts[a[2 * i]]++;
		differ |= a[2 * i] != d[2 * i];
	}
	cr_assert(firsts[0] > 10 && firsts[1] > 10, "both orders occur (%d, %d)", firsts[0], firsts[1]);
	cr_assert(differ, "another seed gives another order");
	cr_assert_eq(atb_timing_round_orders(ATB_INTERLEAVE_FIXED, 42, 2, 4, d, &e), ATB_OK);
	for (i = 0; i < 4; i++)
		cr_assert(d[2 * i] == 0 && d[2 * i + 1] == 1);
}

Test(timing, run_seed_follows_the_drawn_order)
{
	struct fake f = {0};
	struct atb_timer t = {.ops = &fake_ops, .state = &f};
	struct script s = {.fake = &f, .base_ns = {1000, 1000}, .noisy = 1, .fail_arm = -1};
	struct atb_timing_config c;
	struct atb_timing_seed r;
	struct atb_error e;
	size_t order[2 * 30], k;

	setup_cfg(&c);
	cr_assert_eq(atb_timing_run_seed(&c, &t, 99, 2, scripted_call, &s, &r, &e), ATB_OK);
	cr_assert_eq(atb_timing_round_orders(c.interleave, 99, 2, 30, order, &e), ATB_OK);
	cr_assert_eq(s.nlast, 60);
	for (k = 0; k < 60; k++)
		cr_assert_eq(s.last_arm[k], order[k], "timed call %zu", k);
	for (k = 0; k < 30; k++) {
		cr_assert_eq(r.arms[0].round[k], (int)k);
		cr_assert_eq((size_t)r.arms[0].position[k], order[2 * k] == 0 ? 0u : 1u);
	}
	atb_timing_seed_release(&r);
}

Test(timing, time_budget_stops_the_seed)
{
	struct fake f = {0};
	struct atb_timer t = {.ops = &fake_ops, .state = &f};
	struct script s = {.fake = &f, .base_ns = {1000, 1000}, .noisy = 1, .fail_arm = -1,
			   .sleep_ns = 200000};
	struct atb_timing_config c;
	struct atb_timing_seed r;
	struct atb_error e;

	setup_cfg(&c);
	c.trials_min = 1000;
	c.trials_max = 1000;
	c.max_time_per_seed_ns = 10000000;  /* 10 ms */
	cr_assert_eq(atb_timing_run_seed(&c, &t, 1, 2, scripted_call, &s, &r, &e), ATB_OK);
	cr_assert_eq(r.stop, ATB_STOP_TIME_BUDGET);
	cr_assert(r.rounds >= 1 && r.rounds < 1000);
	cr_assert(r.elapsed_ns >= 10000000);
	atb_timing_seed_release(&r);
}

Test(timing, warmup_meets_iterations_and_time)
{
	struct fake f = {0};
	struct atb_timer t = {.ops = &fake_ops, .state = &f};
	struct script s = {.fake = &f, .base_ns = {1000}, .fail_arm = -1, .sleep_ns = 100000};
	struct atb_timing_config c;
	struct atb_timing_seed r;
	struct atb_error e;

	setup_cfg(&c);
	c.warmup_min_iterations = 3;
	c.warmup_min_time_ns = 2000000;
	cr_assert_eq(atb_timing_run_seed(&c, &t, 1, 1, scripted_call, &s, &r, &e), ATB_OK);
	cr_assert(r.arms[0].warmup_iterations >= 3);
	cr_assert(r.arms[0].warmup_ns >= 2000000);
	atb_timing_seed_release(&r);
}

Test(timing, a_failing_call_is_a_check_error)
{
	struct fake f = {0};
	struct atb_timer t = {.ops = &fake_ops, .state = &f};
	struct script s = {.fake = &f, .base_ns = {1000, 1000}, .fail_arm = 1, .fail_after = 5};
	struct atb_timing_config c;
	struct atb_timing_seed r;
	struct atb_error e;

	setup_cfg(&c);
	cr_assert_eq(atb_timing_run_seed(&c, &t, 1, 2, scripted_call, &s, &r, &e), ATB_ERR_CHECK);
	cr_assert(strstr(e.msg, "arm 1 failed"), "%s", e.msg);
	atb_timing_seed_release(&r);
}

Test(timing, bad_configs_are_refused)
{
	struct fake f = {0};
	struct atb_timer t = {.ops = &fake_ops, .state = &f};
	struct script s = {.fake = &f, .fail_arm = -1};
	struct atb_timing_config c;
	struct atb_timing_seed r;
	struct atb_error e;
	enum atb_timing_interleave il;

	setup_cfg(&c);
	c.trials_max = 5;
	cr_assert_eq(atb_timing_run_seed(&c, &t, 1, 2, scripted_call, &s, &r, &e), ATB_ERR_USAGE);
	atb_timing_seed_release(&r);
	setup_cfg(&c);
	cr_assert_eq(atb_timing_run_seed(&c, &t, 1, 0, scripted_call, &s, &r, &e), ATB_ERR_USAGE);
	atb_timing_seed_release(&r);
	cr_assert_eq(atb_timing_interleave_parse("randomized_pairs", &il, &e), ATB_OK);
	cr_assert_eq(atb_timing_interleave_parse("ABBA", &il, &e), ATB_ERR_SCHEMA);
}

Test(timing, median_ci_order_statistics)
{
	int64_t x[20];
	double med, rel;
	struct atb_error e;
	int i;

	for (i = 0; i < 20; i++)
		x[i] = 100 + i;  /* 100..119 */
	cr_assert_eq(atb_timing_median_ci(x, 20, 0.95, &med, &rel, &e), ATB_OK);
	cr_assert_float_eq(med, 109.5, 1e-9);
	/* n = 20, 95%: [x(6), x(15)] = [105, 114] */
	cr_assert_float_eq(rel, (114.0 - 105.0) / 2.0 / 109.5, 1e-12);
	cr_assert_eq(atb_timing_median_ci(x, 3, 0.95, &med, &rel, &e), ATB_OK);
	cr_assert(isinf(rel));
	cr_assert_eq(atb_timing_median_ci(x, 0, 0.95, &med, &rel, &e), ATB_ERR_USAGE);
}

Test(timing, cpu_timer_measures_monotonic_time_and_flushes)
{
	struct atb_timer *t;
	struct atb_error e;
	struct timespec ts = {0, 2000000};
	int64_t ns;

	cr_assert_eq(atb_timer_cpu_new(1 << 20, &t, &e), ATB_OK);
	cr_assert_str_eq(t->ops->name, "cpu");
	cr_assert_eq(t->flush_bytes, 1u << 20);
	cr_assert(t->ops->resolution_ns(t->state) > 0);
	t->ops->flush(t->state);
	t->ops->start(t->state);
	nanosleep(&ts, NULL);
	t->ops->stop(t->state);
	ns = t->ops->elapsed_ns(t->state);
	cr_assert(ns >= 2000000 && ns < 1000000000, "%lld", (long long)ns);
	atb_timer_free(t);
	cr_assert_eq(atb_timing_flush_bytes(32u << 20, 2, 64u << 20, 0), 64u << 20);
	cr_assert_eq(atb_timing_flush_bytes(48u << 20, 2, 64u << 20, 0), 96u << 20);
	/* PROTO: timing.cache_flush.cpu_max_bytes: a 480 MiB LLC flushes the bound */
	cr_assert_eq(atb_timing_flush_bytes(480u << 20, 2, 64u << 20, 64u << 20), 64u << 20);
	cr_assert_eq(atb_timing_flush_bytes(16u << 20, 2, 64u << 20, 256u << 20), 64u << 20);
}

Test(timing, allocation_failures_are_clean)
{
	struct fake f = {0};
	struct atb_timer t = {.ops = &fake_ops, .state = &f};
	struct script s = {.fake = &f, .base_ns = {1000, 1000}, .noisy = 1, .fail_arm = -1};
	struct atb_timing_config c;
	struct atb_timing_seed r;
	struct atb_error e;
	long k;
	enum atb_status st;

	setup_cfg(&c);
	for (k = 1; k < 400; k++) {
		atb_alloc_fail_at(k);
		st = atb_timing_run_seed(&c, &t, 3, 2, scripted_call, &s, &r, &e);
		atb_timing_seed_release(&r);
		if (!atb_alloc_failed()) {
			cr_assert_eq(st, ATB_OK);
			break;
		}
		cr_assert_eq(st, ATB_ERR_NOMEM, "k=%ld: %s", k, e.msg);
	}
	atb_alloc_fail_at(0);
	cr_assert(k > 1 && k < 400);
}

Test(timing, incremental_ci_index_agrees_with_stats)
{
	static double ranks[600];
	double levels[] = {0.9, 0.95, 0.99};
	struct atb_error e;
	size_t n, li;

	for (n = 0; n < 600; n++)
		ranks[n] = (double)n;
	for (li = 0; li < 3; li++) {
		long lo = -1, want;

		cr_assert_eq(atbi_timing_ci_index(ranks, 1, levels[li], &lo, &e), ATB_OK);
		for (n = 2; n < 600; n++) {
			lo = atbi_timing_ci_index_next(lo, n, levels[li]);
			cr_assert_eq(atbi_timing_ci_index(ranks, n, levels[li], &want, &e), ATB_OK);
			cr_assert_eq(lo, want, "n=%zu level=%g: %ld vs %ld", n, levels[li], lo, want);
		}
	}
}

/*
 * A device-like fake: a call only queues work (20 us of it); sync waits for
 * the queue.  PROTO: timing.warmup.min_time_ms -- the warm-up ends with the
 * queue drained, counts device-complete time, and never lets more launches
 * pile up than the time asks for.
 */
struct queue_fake {
	struct fake f;
	int pending, max_pending, syncs;
	int pending_at_first_timed;   /* -1 until the first timed call */
};

static int q_sync(void *st)
{
	struct queue_fake *q = st;
	struct timespec ts = {0, 20000L * q->pending};

	while (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	nanosleep(&ts, NULL);
	q->pending = 0;
	q->syncs++;
	return 0;
}

static int queued_call(void *ctx, size_t arm)
{
	struct queue_fake *q = ctx;

	(void)arm;
	if (q->f.running && q->pending_at_first_timed < 0)
		q->pending_at_first_timed = q->pending;
	if (++q->pending > q->max_pending)
		q->max_pending = q->pending;
	q->f.next_ns = 1000;
	return 0;
}

static const struct atb_timer_ops queue_ops = {
	.name = "queue", .start = f_start, .stop = f_stop, .elapsed_ns = f_elapsed,
	.flush = f_flush, .resolution_ns = f_res, .release = NULL, .sync = q_sync,
};

Test(timing, warmup_syncs_the_device_and_counts_device_time)
{
	struct queue_fake q = {.pending_at_first_timed = -1};
	struct atb_timer t = {.ops = &queue_ops, .state = &q};
	struct atb_timing_config c;
	struct atb_timing_seed r;
	struct atb_error e;

	setup_cfg(&c);
	c.warmup_min_time_ns = 5000000;
	cr_assert_eq(atb_timing_run_seed(&c, &t, 5, 1, queued_call, &q, &r, &e), ATB_OK);
	cr_assert_geq(q.syncs, 2);
	cr_assert_eq(q.pending_at_first_timed, 0, "the first timed call waited behind %d",
		     q.pending_at_first_timed);
	cr_assert_geq(r.arms[0].warmup_ns, 5000000);
	/* 5 ms of 20 us calls is 250; batches at most double: well under 1000. */
	cr_assert_lt(r.arms[0].warmup_iterations, 1000, "%d warm-up calls",
		     r.arms[0].warmup_iterations);
	cr_assert_lt(q.max_pending, 1000);
	atb_timing_seed_release(&r);
}

Test(timing, cpu_timer_sync_is_a_noop)
{
	struct atb_timer *t = NULL;
	struct atb_error e;

	cr_assert_eq(atb_timer_cpu_new(0, &t, &e), ATB_OK);
	cr_assert_not_null(t->ops->sync);
	cr_assert_eq(t->ops->sync(t->state), 0);
	atb_timer_free(t);
}

/* ---- round hooks (PROTO: gates.timed_correctness) ------------------------ */

struct hook_log {
	struct fake *fake;
	struct script *s;
	int before[64], after[64];   /* round numbers, in call order */
	int nbefore, nafter;
	int in_window;               /* a hook ran between start and stop */
	int timed_at_before[64];     /* timed calls done when before_round ran */
	int fail_before;             /* fail before this round; -1 never */
};

static int h_before(void *ctx, int round)
{
	struct hook_log *h = ctx;

	h->in_window |= h->fake->running;
	h->timed_at_before[h->nbefore] = h->s->timed_calls[0] + h->s->timed_calls[1];
	h->before[h->nbefore++] = round;
	return round == h->fail_before ? -1 : 0;
}

static int h_after(void *ctx, int round)
{
	struct hook_log *h = ctx;

	h->in_window |= h->fake->running;
	h->after[h->nafter++] = round;
	return 0;
}

/* PROTO: gates.hang -- the progress hook has no context: it counts here */
static struct fake *progress_fake;
static int progress_calls, progress_in_window;

static void h_progress(void)
{
	progress_calls++;
	progress_in_window |= progress_fake->running;
}

Test(timing, round_hooks_run_around_every_round_outside_the_timed_window)
{
	struct fake f = {0};
	struct atb_timer t = {.ops = &fake_ops, .state = &f};
	struct script s = {.fake = &f, .base_ns = {1000, 2000}, .fail_arm = -1};
	struct hook_log h = {.fake = &f, .s = &s, .fail_before = -1};
	struct atb_timing_hooks hooks = {.before_round = h_before, .after_round = h_after, .ctx = &h,
					 .progress = h_progress};
	struct atb_timing_config c;
	struct atb_timing_seed r, plain;
	struct atb_error e;
	int k;

	setup_cfg(&c);
	progress_fake = &f;
	cr_assert_eq(atb_timing_run_seed_hooked(&c, &t, 5, 2, scripted_call, &s, &hooks, &r, &e),
		     ATB_OK);
	cr_assert_eq(r.rounds, 10);
	/* after every round and every warm-up batch (at least one per arm), never timed */
	cr_assert_geq(progress_calls, 10 + 2, "%d progress calls", progress_calls);
	cr_assert_not(progress_in_window, "the progress hook ran inside the timed window");
	cr_assert_eq(h.nbefore, 10);
	cr_assert_eq(h.nafter, 10);
	cr_assert_not(h.in_window, "a hook ran inside the timed window");
	for (k = 0; k < 10; k++) {
		cr_assert_eq(h.before[k], k);
		cr_assert_eq(h.after[k], k);
		/* before round k: exactly k rounds of 2 arms were timed, none of round k */
		cr_assert_eq(h.timed_at_before[k], 2 * k, "round %d", k);
	}
	/* the hooks change nothing the core times or orders */
	memset(&f, 0, sizeof(f));
	memset(s.calls, 0, sizeof(s.calls));
	cr_assert_eq(atb_timing_run_seed(&c, &t, 5, 2, scripted_call, &s, &plain, &e), ATB_OK);
	cr_assert_eq(plain.rounds, r.rounds);
	for (k = 0; k < 10; k++)
		cr_assert_eq(plain.arms[0].position[k], r.arms[0].position[k]);
	atb_timing_seed_release(&r);
	atb_timing_seed_release(&plain);
}

Test(timing, a_failing_round_hook_aborts_the_seed)
{
	struct fake f = {0};
	struct atb_timer t = {.ops = &fake_ops, .state = &f};
	struct script s = {.fake = &f, .base_ns = {1000, 2000}, .fail_arm = -1};
	struct hook_log h = {.fake = &f, .s = &s, .fail_before = 3};
	struct atb_timing_hooks hooks = {.before_round = h_before, .ctx = &h};
	struct atb_timing_config c;
	struct atb_timing_seed r;
	struct atb_error e;

	setup_cfg(&c);
	cr_assert_eq(atb_timing_run_seed_hooked(&c, &t, 5, 2, scripted_call, &s, &hooks, &r, &e),
		     ATB_ERR_SYSTEM);
	cr_assert(strstr(e.msg, "round hook failed before round 3"), "%s", e.msg);
	cr_assert_eq(s.timed_calls[0] + s.timed_calls[1], 6);
	atb_timing_seed_release(&r);
}

/* ---- the per-trial hook (PROTO: gates.clocks) ---------------------------- */

struct trial_log {
	struct fake *fake;
	size_t arm[64], trial[64];
	int n, in_window, fail_at;
};

static int h_trial(void *ctx, size_t arm, size_t trial)
{
	struct trial_log *l = ctx;

	l->in_window |= l->fake->running;
	l->arm[l->n] = arm;
	l->trial[l->n] = trial;
	return ++l->n == l->fail_at ? -1 : 0;
}

Test(timing, the_trial_hook_sees_every_timed_call_once_with_its_index_outside_the_window)
{
	struct fake f = {0};
	struct atb_timer t = {.ops = &fake_ops, .state = &f};
	struct script s = {.fake = &f, .base_ns = {1000, 2000}, .fail_arm = -1};
	struct trial_log l = {.fake = &f, .fail_at = -1};
	struct atb_timing_hooks hooks = {.after_call = h_trial, .call_ctx = &l};
	struct atb_timing_config c;
	struct atb_timing_seed r;
	struct atb_error e;
	size_t seen[2] = {0, 0};
	int k;

	setup_cfg(&c);
	cr_assert_eq(atb_timing_run_seed_hooked(&c, &t, 5, 2, scripted_call, &s, &hooks, &r, &e),
		     ATB_OK);
	cr_assert_eq(l.n, 2 * r.rounds, "one call per timed trial, none for the warm-up");
	cr_assert_not(l.in_window, "the trial hook ran inside the timed window");
	for (k = 0; k < l.n; k++) {
		cr_assert_lt(l.arm[k], 2);
		/* each arm's trials come in order: the index is its position in times_ns */
		cr_assert_eq(l.trial[k], seen[l.arm[k]], "call %d", k);
		seen[l.arm[k]]++;
	}
	cr_assert_eq(seen[0], r.arms[0].ntrials);
	cr_assert_eq(seen[1], r.arms[1].ntrials);
	atb_timing_seed_release(&r);

	/* a failing trial hook stops the seed */
	memset(&f, 0, sizeof(f));
	l.n = 0;
	l.fail_at = 3;
	cr_assert_eq(atb_timing_run_seed_hooked(&c, &t, 5, 2, scripted_call, &s, &hooks, &r, &e),
		     ATB_ERR_SYSTEM);
	cr_assert(strstr(e.msg, "trial hook failed"), "%s", e.msg);
	atb_timing_seed_release(&r);
}

/* ---- timing.preemption: run_delay taken out of a cpu trial ---------- */

static int64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t wall_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static volatile double spin_sink;

/* about ms milliseconds of this thread's CPU time */
static void spin_cpu(int64_t ms)
{
	int64_t until = thread_cpu_ns() + ms * 1000000;
	double a = 1;

	while (thread_cpu_ns() < until)
		a = a * 1.0000001 + 1e-9;
	spin_sink = a;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return x < y ? -1 : x > y;
}

Test(timing, cpu_timer_keeps_a_sleep_in_and_only_subtracts_where_asked)
{
	struct atb_timer *t;
	struct atb_error e;
	struct timespec ts = {0, 2000000};
	int64_t ns;

	cr_assert_eq(atb_timer_cpu_new(0, &t, &e), ATB_OK);
	if (atb_timer_cpu_subtract_preemption(t, &e) != ATB_OK) {
		atb_timer_free(t);
		cr_skip_test("no /proc/thread-self/schedstat here: %s", e.msg);
	}
	/* a sleep is not a wait for a CPU: it stays in the trial */
	t->ops->start(t->state);
	nanosleep(&ts, NULL);
	t->ops->stop(t->state);
	ns = t->ops->elapsed_ns(t->state);
	cr_assert(ns >= 1900000, "a 2 ms sleep read %lld ns", (long long)ns);
	cr_assert(t->last_preempted_ns >= 0);
	atb_timer_free(t);
	/* only the cpu timer does it */
	{
		struct atb_timer other = {.ops = NULL};

		cr_assert_eq(atb_timer_cpu_subtract_preemption(&other, &e), ATB_ERR_USAGE);
	}
}

/*
 * A spinning child pinned to the same CPU as this thread takes about half
 * of it: each 20 ms (CPU) trial reads about 40 ms of wall time, and with
 * the waits taken out about its CPU time again.  The effect is 2x, and a
 * busier box only makes the wall time longer: noise cannot flip it.
 */
Test(timing, cpu_timer_takes_a_competitors_share_out_of_the_trial)
{
	enum { N = 9 };
	struct atb_timer *t;
	struct atb_error e;
	int64_t wall[N], sub[N], cpu[N];
	cpu_set_t set, old;
	pid_t kid;
	int i, cpu_id;

	cr_assert_eq(atb_timer_cpu_new(0, &t, &e), ATB_OK);
	if (atb_timer_cpu_subtract_preemption(t, &e) != ATB_OK) {
		atb_timer_free(t);
		cr_skip_test("no /proc/thread-self/schedstat here: %s", e.msg);
	}
	cr_assert_eq(sched_getaffinity(0, sizeof(old), &old), 0);
	cpu_id = sched_getcpu();
	CPU_ZERO(&set);
	CPU_SET(cpu_id, &set);
	cr_assert_eq(sched_setaffinity(0, sizeof(set), &set), 0);
	kid = fork();
	cr_assert(kid >= 0);
	if (kid == 0) {   /* the competitor: inherits the pinning, spins until killed */
		for (;;)
			spin_sink = spin_sink * 1.0000001 + 1e-9;
	}
	for (i = 0; i < N; i++) {
		int64_t w0 = wall_ns(), c0 = thread_cpu_ns();

		t->ops->start(t->state);
		spin_cpu(20);
		t->ops->stop(t->state);
		sub[i] = t->ops->elapsed_ns(t->state);
		wall[i] = wall_ns() - w0;
		cpu[i] = thread_cpu_ns() - c0;
	}
	kill(kid, SIGKILL);
	waitpid(kid, NULL, 0);
	sched_setaffinity(0, sizeof(old), &old);
	atb_timer_free(t);
	qsort(wall, N, sizeof(*wall), cmp_i64);
	qsort(sub, N, sizeof(*sub), cmp_i64);
	qsort(cpu, N, sizeof(*cpu), cmp_i64);
	cr_assert((double)wall[N / 2] >= 1.5 * (double)cpu[N / 2],
		  "the competitor did not compete: wall %lld ns, cpu %lld ns",
		  (long long)wall[N / 2], (long long)cpu[N / 2]);
	cr_assert((double)sub[N / 2] <= 1.2 * (double)cpu[N / 2] &&
		  (double)sub[N / 2] >= 0.8 * (double)cpu[N / 2],
		  "with the waits taken out %lld ns, the thread's cpu time %lld ns (wall %lld ns)",
		  (long long)sub[N / 2], (long long)cpu[N / 2], (long long)wall[N / 2]);
}

/* ---- the round trip's empty call (PROTO: timing.round_trip) --------------- */

struct rt_log {
	struct fake *fake;
	int calls, done, in_window, done_in_window, flushes_before, bad_order, fail_at;
};

static int h_rt(void *ctx)
{
	struct rt_log *l = ctx;

	/* inside its window, after a flush of its own */
	l->in_window += l->fake->running;
	l->flushes_before = l->fake->flushes;
	l->bad_order |= l->done != l->calls;
	l->fake->next_ns = 700;
	return ++l->calls == l->fail_at ? -1 : 0;
}

static int h_rt_done(void *ctx)
{
	struct rt_log *l = ctx;

	l->done_in_window |= l->fake->running;
	l->done++;
	return 0;
}

Test(timing, the_empty_call_is_timed_like_a_trial_every_nth_round)
{
	struct fake f = {0};
	struct atb_timer t = {.ops = &fake_ops, .state = &f};
	struct script s = {.fake = &f, .base_ns = {1000, 2000}, .fail_arm = -1};
	struct rt_log l = {.fake = &f, .fail_at = -1};
	struct atb_timing_hooks hooks = {.round_trip = h_rt, .round_trip_done = h_rt_done,
					 .rt_ctx = &l, .round_trip_every = 3};
	struct atb_timing_config c;
	struct atb_timing_seed r, plain;
	struct atb_error e;
	size_t k;

	setup_cfg(&c);
	cr_assert_eq(atb_timing_run_seed_hooked(&c, &t, 5, 2, scripted_call, &s, &hooks, &r, &e),
		     ATB_OK, "%s", e.msg);
	cr_assert_eq(r.rounds, 10);
	/* rounds 0, 3, 6, 9: each inside a window, its stop settled outside it */
	cr_assert_eq(l.calls, 4);
	cr_assert_eq(r.nround_trip, 4);
	cr_assert_eq(l.in_window, 4, "the empty call ran outside its window");
	cr_assert_not(l.done_in_window, "round_trip_done ran inside the window");
	cr_assert_eq(l.done, 4);
	cr_assert_not(l.bad_order);
	for (k = 0; k < r.nround_trip; k++)
		cr_assert_eq(r.round_trip_ns[k], 700);
	/* a flush before it, as before every arm's trial: 2 arms x 10 rounds + 4 */
	cr_assert_eq(f.flushes, 24, "%d flushes", f.flushes);
	/* the arms' times and orders are the ones without it */
	memset(&f, 0, sizeof(f));
	memset(s.calls, 0, sizeof(s.calls));
	cr_assert_eq(atb_timing_run_seed(&c, &t, 5, 2, scripted_call, &s, &plain, &e), ATB_OK);
	cr_assert_eq(plain.rounds, r.rounds);
	cr_assert_eq(plain.nround_trip, 0);
	cr_assert_null(plain.round_trip_ns);
	for (k = 0; k < 10; k++) {
		cr_assert_eq(plain.arms[0].position[k], r.arms[0].position[k]);
		cr_assert_eq(plain.arms[1].times_ns[k], r.arms[1].times_ns[k]);
	}
	atb_timing_seed_release(&r);
	atb_timing_seed_release(&plain);

	/* a failing empty call stops the seed */
	memset(&f, 0, sizeof(f));
	memset(&l, 0, sizeof(l));
	l.fake = &f;
	l.fail_at = 2;
	cr_assert_eq(atb_timing_run_seed_hooked(&c, &t, 5, 2, scripted_call, &s, &hooks, &r, &e),
		     ATB_ERR_SYSTEM);
	cr_assert(strstr(e.msg, "the round trip's empty call failed in round 3"), "%s", e.msg);
	atb_timing_seed_release(&r);
}

/*
 * PROTO: timing.round_trip.position (version 13 on) -- the hook says where
 * in each round the empty call goes: before the arm at that position, or
 * after them all; the recorded slots say so, a slot out of range means
 * after, and the arms' own positions and times are as without it.
 */
struct slot_log {
	struct rt_log rt;
	struct script *s;
	int asked[64], seen[64], fail_round;
	size_t first[64];
	uint64_t seed;
};

static size_t h_slot(void *ctx, uint64_t seed, int round, const size_t *order, size_t narms)
{
	struct slot_log *l = ctx;

	l->seed = seed;
	cr_assert(round >= 0 && round < 64 && narms == 2);
	if (round == l->fail_round)
		return SIZE_MAX;
	l->first[round] = order[0];
	/* 0 and 1 before that arm, 2 after both, 3 out of range (after both) */
	l->asked[round] = round % 4;
	return (size_t)(round % 4 == 3 ? 99 : round % 4);
}

static int h_slot_rt(void *ctx)
{
	struct slot_log *l = ctx;
	int done = l->s->timed_calls[0] + l->s->timed_calls[1];

	/* arm calls before it in this round: every round has two */
	cr_assert(l->rt.calls < 64);
	l->seen[l->rt.calls] = done - 2 * l->rt.calls;
	return h_rt(&l->rt);
}

static int h_slot_done(void *ctx)
{
	return h_rt_done(&((struct slot_log *)ctx)->rt);
}

Test(timing, the_empty_call_goes_where_the_slot_hook_says)
{
	struct fake f = {0};
	struct atb_timer t = {.ops = &fake_ops, .state = &f};
	struct script s = {.fake = &f, .base_ns = {1000, 2000}, .fail_arm = -1};
	struct slot_log l = {.rt = {.fake = &f, .fail_at = -1}, .s = &s, .fail_round = -1};
	struct atb_timing_hooks hooks = {.round_trip = h_slot_rt, .round_trip_done = h_slot_done,
					 .rt_ctx = &l, .round_trip_every = 1,
					 .round_trip_slot = h_slot};
	struct atb_timing_config c;
	struct atb_timing_seed r, plain;
	struct atb_error e;
	size_t k;

	setup_cfg(&c);
	cr_assert_eq(atb_timing_run_seed_hooked(&c, &t, 5, 2, scripted_call, &s, &hooks, &r, &e),
		     ATB_OK, "%s", e.msg);
	cr_assert_eq(r.rounds, 10);
	cr_assert_eq(r.nround_trip, 10);
	cr_assert_eq(l.seed, 5);
	cr_assert_eq(l.rt.in_window, 10, "the empty call ran outside its window");
	cr_assert_not(l.rt.done_in_window);
	for (k = 0; k < r.nround_trip; k++) {
		int want = l.asked[k] > 2 ? 2 : l.asked[k];

		cr_assert_eq(r.round_trip_slot[k], want, "round %zu: slot %d, want %d", k,
			     r.round_trip_slot[k], want);
		cr_assert_eq(l.seen[k], want, "round %zu: %d arm calls before the empty call, want %d",
			     k, l.seen[k], want);
		cr_assert_eq(r.round_trip_ns[k], 700);
		/* the hook saw the round's order: its first arm is at position 0 */
		cr_assert_eq(r.arms[l.first[k]].position[k], 0, "round %zu", k);
	}
	/* the arms' positions (counting arms only) and times as without it */
	memset(&f, 0, sizeof(f));
	memset(s.calls, 0, sizeof(s.calls));
	memset(s.timed_calls, 0, sizeof(s.timed_calls));
	cr_assert_eq(atb_timing_run_seed(&c, &t, 5, 2, scripted_call, &s, &plain, &e), ATB_OK);
	cr_assert_eq(plain.rounds, r.rounds);
	for (k = 0; k < 10; k++) {
		cr_assert_eq(plain.arms[0].position[k], r.arms[0].position[k]);
		cr_assert_eq(plain.arms[1].position[k], r.arms[1].position[k]);
		cr_assert_eq(plain.arms[0].times_ns[k], r.arms[0].times_ns[k]);
		cr_assert_eq(plain.arms[1].times_ns[k], r.arms[1].times_ns[k]);
	}
	atb_timing_seed_release(&r);
	atb_timing_seed_release(&plain);

	/* a place that cannot be drawn stops the seed */
	memset(&f, 0, sizeof(f));
	memset(&s.calls, 0, sizeof(s.calls));
	memset(&s.timed_calls, 0, sizeof(s.timed_calls));
	memset(&l, 0, sizeof(l));
	l.rt.fake = &f;
	l.rt.fail_at = -1;
	l.s = &s;
	l.fail_round = 4;
	cr_assert_eq(atb_timing_run_seed_hooked(&c, &t, 5, 2, scripted_call, &s, &hooks, &r, &e),
		     ATB_ERR_SYSTEM);
	cr_assert(strstr(e.msg, "cannot draw the round trip's place in round 4"), "%s", e.msg);
	cr_assert_eq(l.rt.calls, 4);
	atb_timing_seed_release(&r);
}
