/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The timing core: warm-up, paired interleaved rounds, the cache flush and
 * the noise-based stopping rule over any struct atb_timer (see
 * include/atb/timing.h).  The median CI here is the stopping rule's own,
 * distribution-free order-statistic interval; the verdicts use src/stats in
 * the harness.  Nothing here allocates inside the timed region.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <gsl/gsl_cdf.h>
#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>

#include "atb/alloc.h"
#include "atb/stats.h"
#include "atb/timing.h"
#include "timing_int.h"
#include "util.h"
#include "banned.h"

/* ---- the cpu timer --------------------------------------------------- */

struct cpu_timer {
	int64_t t0, t1;
	unsigned char *buf;
	size_t nbytes;
	unsigned char fill;
	volatile uint64_t sink;
	struct atb_timer *owner;
	int sched_fd;                 /* /proc/thread-self/schedstat; -1: none */
	uint64_t delay0, delay1;      /* run_delay before the start, after the stop */
	uint64_t count0, count1;      /* times scheduled in, likewise */
};

/*
 * schedstat's fields: time on a CPU, time runnable waiting for one
 * (run_delay), and the number of times scheduled in, all since the thread
 * began.  pread on a kept descriptor: no allocation, one syscall.
 */
static int sched_read(int fd, uint64_t *delay, uint64_t *count)
{
	char buf[96], *p, *end;
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);

	if (n <= 0)
		return -1;
	buf[n] = 0;
	(void)strtoull(buf, &p, 10);
	*delay = strtoull(p, &end, 10);
	if (end == p)
		return -1;
	*count = strtoull(end, &p, 10);
	return p == end ? -1 : 0;
}

static int64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void cpu_start(void *state)
{
	struct cpu_timer *c = state;

	if (c->sched_fd >= 0 && sched_read(c->sched_fd, &c->delay0, &c->count0))
		c->count0 = UINT64_MAX;  /* unreadable: nothing is taken out */
	c->t0 = mono_ns();
}

static void cpu_stop(void *state)
{
	struct cpu_timer *c = state;

	c->t1 = mono_ns();
	if (c->sched_fd >= 0 && sched_read(c->sched_fd, &c->delay1, &c->count1))
		c->count0 = UINT64_MAX;
}

/*
 * PROTO: timing.preemption -- the wall time, less the waits for a CPU when
 * the thread was switched out in between (count changed).  The readings
 * bracket the clock's, so a wait just outside [t0, t1] can be counted:
 * hence the cap at the wall time.
 */
static int64_t cpu_elapsed_ns(void *state)
{
	struct cpu_timer *c = state;
	int64_t wall = c->t1 - c->t0, wait = 0;

	if (c->sched_fd >= 0 && c->count0 != UINT64_MAX && c->count1 != c->count0 &&
	    c->delay1 > c->delay0) {
		wait = c->delay1 - c->delay0 > (uint64_t)INT64_MAX ? INT64_MAX
								 : (int64_t)(c->delay1 - c->delay0);
		if (wait > wall)
			wait = wall > 0 ? wall : 0;
	}
	c->owner->last_preempted_ns = wait;
	return wall - wait;
}

/*
 * Write every byte, then read one word per 64-byte line: both the dirty
 * write-back and the read evict whatever the last call left in the caches.
 */
static void cpu_flush(void *state)
{
	struct cpu_timer *c = state;
	uint64_t acc = 0;
	size_t i;

	if (!c->nbytes)
		return;
	memset(c->buf, c->fill++, c->nbytes);
	for (i = 0; i + sizeof(uint64_t) <= c->nbytes; i += 64) {
		uint64_t w;

		memcpy(&w, c->buf + i, sizeof(w));
		acc += w;
	}
	c->sink += acc;
}

static int64_t cpu_resolution_ns(void *state)
{
	struct timespec ts;

	(void)state;
	if (clock_getres(CLOCK_MONOTONIC, &ts))
		return -1;
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void cpu_release(void *state)
{
	struct cpu_timer *c = state;

	if (!c)
		return;
	if (c->sched_fd >= 0)
		close(c->sched_fd);
	atb_free(c->buf);
	atb_free(c);
}

/* A cpu call is complete when it returns: nothing to wait for. */
static int cpu_sync(void *state)
{
	(void)state;
	return 0;
}

static const struct atb_timer_ops cpu_ops = {
	.name = "cpu",
	.start = cpu_start,
	.stop = cpu_stop,
	.elapsed_ns = cpu_elapsed_ns,
	.flush = cpu_flush,
	.resolution_ns = cpu_resolution_ns,
	.release = cpu_release,
	.sync = cpu_sync,
};

enum atb_status atb_timer_cpu_new(size_t flush_bytes, struct atb_timer **out,
				  struct atb_error *err)
{
	struct atb_timer *t;
	struct cpu_timer *c;
	struct timespec ts;

	*out = NULL;
	if (clock_gettime(CLOCK_MONOTONIC, &ts))
		return atb_error_set(err, ATB_ERR_SYSTEM, "no monotonic clock");
	t = atb_calloc(1, sizeof(*t));
	c = atb_calloc(1, sizeof(*c));
	if (!t || !c) {
		atb_free(t);
		atb_free(c);
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot allocate timer: out of memory");
	}
	if (flush_bytes) {
		c->buf = atb_malloc(flush_bytes);
		if (!c->buf) {
			atb_free(t);
			atb_free(c);
			return atb_error_set(err, ATB_ERR_NOMEM,
					     "cannot allocate %zu-byte flush buffer: out of memory",
					     flush_bytes);
		}
		/* Touch every page now so the first flush does not fault. */
		memset(c->buf, 1, flush_bytes);
	}
	c->nbytes = flush_bytes;
	c->owner = t;
	c->sched_fd = -1;
	t->ops = &cpu_ops;
	t->state = c;
	t->flush_bytes = flush_bytes;
	*out = t;
	return ATB_OK;
}

enum atb_status atb_timer_cpu_subtract_preemption(struct atb_timer *t, struct atb_error *err)
{
	struct cpu_timer *c;
	uint64_t d, n;
	int fd;

	if (!t || t->ops != &cpu_ops)
		return atb_error_set(err, ATB_ERR_USAGE, "only the cpu timer subtracts preemption");
	c = t->state;
	fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return atb_error_set(err, ATB_ERR_SYSTEM,
				     "cannot open '/proc/thread-self/schedstat': %s", strerror(errno));
	if (sched_read(fd, &d, &n)) {
		close(fd);
		return atb_error_set(err, ATB_ERR_SYSTEM,
				     "'/proc/thread-self/schedstat' does not read as the kernel's "
				     "three counters");
	}
	if (c->sched_fd >= 0)
		close(c->sched_fd);
	c->sched_fd = fd;
	return ATB_OK;
}

void atb_timer_free(struct atb_timer *t)
{
	if (!t)
		return;
	if (t->ops && t->ops->release)
		t->ops->release(t->state);
	atb_free(t);
}

size_t atb_timing_flush_bytes(size_t cache_bytes, double factor, size_t min_bytes,
			      size_t max_bytes)
{
	double want = factor * (double)cache_bytes;
	size_t n = want > 0 ? (size_t)want : 0;

	n = n > min_bytes ? n : min_bytes;
	return max_bytes && n > max_bytes ? max_bytes : n;
}

/* ---- configuration ---------------------------------------------------- */

void atb_timing_config_default(struct atb_timing_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->warmup_min_iterations = 3;
	cfg->warmup_min_time_ns = 20000000;
	cfg->trials_min = 10;
	cfg->trials_max = 200;
	cfg->target_rel_halfwidth = 0.01;
	cfg->ci_level = 0.95;
	cfg->max_time_per_seed_ns = 5000000000LL;
	cfg->flush = 1;
	cfg->interleave = ATB_INTERLEAVE_RANDOMIZED_PAIRS;
}

enum atb_status atb_timing_interleave_parse(const char *name,
					    enum atb_timing_interleave *out,
					    struct atb_error *err)
{
	if (name && !strcmp(name, "randomized_pairs")) {
		*out = ATB_INTERLEAVE_RANDOMIZED_PAIRS;
		return ATB_OK;
	}
	if (name && !strcmp(name, "fixed")) {
		*out = ATB_INTERLEAVE_FIXED;
		return ATB_OK;
	}
	return atb_error_set(err, ATB_ERR_SCHEMA,
			     "unknown interleave '%s': expected randomized_pairs or fixed",
			     name ? name : "");
}

const char *atb_timing_stop_name(enum atb_timing_stop s)
{
	switch (s) {
	case ATB_STOP_TARGET:
		return "target";
	case ATB_STOP_TRIALS_MAX:
		return "trials_max";
	case ATB_STOP_TIME_BUDGET:
		return "time_budget";
	default:
		return "none";
	}
}

/* ---- the median CI (stopping rule) ------------------------------------ */

/*
 * The stopping rule's median and CI come from src/stats (atb_stats_median_ci:
 * order statistics, binomial), on a double copy the caller provides.
 */
static enum atb_status median_ci_d(double *x, const int64_t *t, size_t n, double level,
				   double *median, double *rel, struct atb_error *err)
{
	double lo, hi;
	enum atb_status st;
	size_t i;

	for (i = 0; i < n; i++)
		x[i] = (double)t[i];
	st = atb_stats_median(x, n, median, err);
	if (!st)
		st = atb_stats_median_ci(x, n, level, &lo, &hi, err);
	if (st)
		return st;
	if (!isfinite(lo) || !isfinite(hi) || !(*median > 0))
		*rel = INFINITY;
	else
		*rel = (hi - lo) / (2.0 * *median);
	return ATB_OK;
}

enum atb_status atb_timing_median_ci(const int64_t *x, size_t n, double level,
				     double *median, double *rel_halfwidth,
				     struct atb_error *err)
{
	double *d;
	enum atb_status st;

	if (!n || !(level > 0 && level < 1))
		return atb_error_set(err, ATB_ERR_USAGE,
				     "bad median ci request: n %zu, level %g", n, level);
	d = atb_malloc(n * sizeof(*d));
	if (!d)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot copy samples: out of memory");
	st = median_ci_d(d, x, n, level, median, rel_halfwidth, err);
	atb_free(d);
	return st;
}

/* ---- round orders ---------------------------------------------------- */

/*
 * The order generator's seed: a splitmix64 step of the seed, so the order
 * stream is not the input generator's stream for the same seed.
 */
static unsigned long order_seed(uint64_t seed)
{
	uint64_t z = seed + 0x9e3779b97f4a7c15ULL;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return (unsigned long)(z ^ (z >> 31));
}

static void next_order(enum atb_timing_interleave il, gsl_rng *r, size_t narms,
		       size_t *order)
{
	size_t i;

	for (i = 0; i < narms; i++)
		order[i] = i;
	if (il == ATB_INTERLEAVE_RANDOMIZED_PAIRS && narms > 1)
		gsl_ran_shuffle(r, order, narms, sizeof(*order));
}

enum atb_status atb_timing_round_orders(enum atb_timing_interleave il, uint64_t seed,
					size_t narms, size_t nrounds, size_t *order,
					struct atb_error *err)
{
	gsl_rng *r;
	size_t k;

	if (!narms)
		return atb_error_set(err, ATB_ERR_USAGE, "no arms to order");
	r = gsl_rng_alloc(gsl_rng_mt19937);
	if (!r)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot allocate rng: out of memory");
	gsl_rng_set(r, order_seed(seed));
	for (k = 0; k < nrounds; k++)
		next_order(il, r, narms, order + k * narms);
	gsl_rng_free(r);
	return ATB_OK;
}

/* ---- one seed --------------------------------------------------------- */

void atb_timing_seed_release(struct atb_timing_seed *s)
{
	size_t i;

	if (!s)
		return;
	for (i = 0; s->arms && i < s->narms; i++) {
		atb_free(s->arms[i].times_ns);
		atb_free(s->arms[i].round);
		atb_free(s->arms[i].position);
		atb_free(s->arms[i].device_extra_ns);
	}
	atb_free(s->arms);
	atb_free(s->round_trip_ns);
	atb_free(s->round_trip_slot);
	memset(s, 0, sizeof(*s));
}

static enum atb_status check_config(const struct atb_timing_config *c, size_t narms,
				    struct atb_error *err)
{
	if (!narms)
		return atb_error_set(err, ATB_ERR_USAGE, "no arms to time");
	if (c->trials_min < 1 || c->trials_max < c->trials_min)
		return atb_error_set(err, ATB_ERR_USAGE,
				     "bad trial bounds: min %d, max %d",
				     c->trials_min, c->trials_max);
	if (c->warmup_min_iterations < 0 || c->warmup_min_time_ns < 0)
		return atb_error_set(err, ATB_ERR_USAGE, "bad warm-up: negative");
	if (!(c->ci_level > 0 && c->ci_level < 1))
		return atb_error_set(err, ATB_ERR_USAGE, "bad ci level %g", c->ci_level);
	return ATB_OK;
}

static int timer_sync(struct atb_timer *timer)
{
	return timer->ops->sync ? timer->ops->sync(timer->state) : 0;
}

/*
 * PROTO: timing.warmup.min_iterations, timing.warmup.min_time_ms -- in
 * device-complete time.  A device call returns when it is queued, so a
 * warm-up that only watched the host clock queued a thousand launches in
 * its 20 ms and the first timed trials waited behind them.  Calls go in
 * batches, each ended by the timer's sync, and the clock is read only after
 * a sync; a batch is at most twice the last one and no more than the
 * remaining time at the observed rate, so the overshoot is bounded.
 */
static enum atb_status warm_up(const struct atb_timing_config *cfg, struct atb_timer *timer,
			       size_t arm, atb_timing_call_fn call, void *ctx,
			       const struct atb_timing_hooks *hooks,
			       struct atb_timing_arm *a, struct atb_error *err)
{
	int64_t t0 = atbi_monotonic_ns(), now = t0;
	int64_t it = 0, batch = 1, k;

	if (timer_sync(timer))
		return atb_error_set(err, ATB_ERR_SYSTEM, "timer '%s' failed before warm-up",
				     timer->ops->name);
	while (it < cfg->warmup_min_iterations || now - t0 < cfg->warmup_min_time_ns) {
		int64_t left_ns, rate_ns;

		for (k = 0; k < batch; k++)
			if (call(ctx, arm))
				return atb_error_set(err, ATB_ERR_CHECK,
						     "arm %zu failed during warm-up", arm);
		it += batch;
		if (timer_sync(timer))
			return atb_error_set(err, ATB_ERR_SYSTEM,
					     "timer '%s' failed during warm-up", timer->ops->name);
		if (hooks && hooks->progress)
			hooks->progress();
		now = atbi_monotonic_ns();
		rate_ns = (now - t0) / it;
		left_ns = cfg->warmup_min_time_ns - (now - t0);
		/* Calls the time still needs (twice the last batch at most), or
		 * the iterations still missing, whichever is more. */
		batch = left_ns <= 0 ? 0 : rate_ns > 0 && left_ns / rate_ns + 1 < 2 * batch
			? left_ns / rate_ns + 1 : 2 * batch;
		if (cfg->warmup_min_iterations - it > batch)
			batch = cfg->warmup_min_iterations - it;
		if (batch < 1)
			batch = 1;
	}
	a->warmup_iterations = (int)it;
	a->warmup_ns = now - t0;
	return ATB_OK;
}

/*
 * The stopping rule without a sort or a search per round.  Each arm keeps
 * its samples sorted by insertion.  The CI's order-statistic index depends
 * only on n and the level: it is taken from atb_stats_median_ci (run on the
 * ranks 0..n-1, so its bounds are indices) when the rule first runs, and
 * then advanced one round at a time with one binomial CDF evaluation,
 * since l(n+1) is l(n) or l(n)+1.  u-timing checks that the two agree for
 * every n.  lo < 0: the interval is unbounded at this n.
 */
enum atb_status atbi_timing_ci_index(const double *ranks, size_t n, double level, long *lo,
				     struct atb_error *err)
{
	double l, h;
	enum atb_status st = atb_stats_median_ci(ranks, n, level, &l, &h, err);

	if (st)
		return st;
	*lo = isfinite(l) ? (long)l : -1;
	return ATB_OK;
}

long atbi_timing_ci_index_next(long lo, size_t n_next, double level)
{
	/* lo is 0-based: order statistic lo + 1.  Can order statistic lo + 2 serve? */
	double p = gsl_cdf_binomial_P((unsigned)(lo + 1), 0.5, (unsigned)n_next);

	return p <= (1.0 - level) / 2.0 ? lo + 1 : lo;
}

static void sorted_insert(int64_t *s, size_t n, int64_t v)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (s[mid] <= v)
			lo = mid + 1;
		else
			hi = mid;
	}
	memmove(s + lo + 1, s + lo, (n - lo) * sizeof(*s));
	s[lo] = v;
}

static void arm_summary(const int64_t *s, size_t n, long lo, struct atb_timing_arm *a)
{
	double med = n % 2 ? (double)s[n / 2] : ((double)s[n / 2 - 1] + (double)s[n / 2]) / 2.0;

	a->median_ns = med;
	if (lo < 0 || !(med > 0))
		a->ci_rel_halfwidth = INFINITY;
	else
		a->ci_rel_halfwidth = ((double)s[n - 1 - (size_t)lo] - (double)s[lo]) / (2.0 * med);
}

enum atb_status atb_timing_run_seed(const struct atb_timing_config *cfg,
				    struct atb_timer *timer, uint64_t seed,
				    size_t narms, atb_timing_call_fn call, void *ctx,
				    struct atb_timing_seed *out, struct atb_error *err)
{
	return atb_timing_run_seed_hooked(cfg, timer, seed, narms, call, ctx, NULL, out, err);
}

/* PROTO: timing.round_trip -- the empty call, timed as an arm's trial is */
static enum atb_status time_round_trip(const struct atb_timing_config *cfg,
				       struct atb_timer *timer,
				       const struct atb_timing_hooks *hooks,
				       struct atb_timing_seed *out, int round, size_t slot,
				       struct atb_error *err)
{
	const struct atb_timer_ops *ops = timer->ops;
	int64_t t;
	int rc;

	if (cfg->flush && ops->flush)
		ops->flush(timer->state);
	ops->start(timer->state);
	rc = hooks->round_trip(hooks->rt_ctx);
	ops->stop(timer->state);
	t = rc ? -1 : ops->elapsed_ns(timer->state);
	if (t < 0 || (hooks->round_trip_done && hooks->round_trip_done(hooks->rt_ctx)))
		return atb_error_set(err, ATB_ERR_SYSTEM,
				     "the round trip's empty call failed in round %d", round);
	out->round_trip_slot[out->nround_trip] = (int)slot;
	out->round_trip_ns[out->nround_trip++] = t;
	return ATB_OK;
}

enum atb_status atb_timing_run_seed_hooked(const struct atb_timing_config *cfg,
					   struct atb_timer *timer, uint64_t seed,
					   size_t narms, atb_timing_call_fn call, void *ctx,
					   const struct atb_timing_hooks *hooks,
					   struct atb_timing_seed *out, struct atb_error *err)
{
	const struct atb_timer_ops *ops = timer->ops;
	size_t cap = (size_t)cfg->trials_max, i;
	size_t *order = NULL;
	double *ranks = NULL;
	int64_t *sorted = NULL, t_start;
	long lo = -1;
	size_t lo_n = 0;   /* the n that lo belongs to; 0: none yet */
	gsl_rng *r = NULL;
	enum atb_status st;
	int round;

	memset(out, 0, sizeof(*out));
	out->seed = seed;
	st = check_config(cfg, narms, err);
	if (st)
		return st;
	out->arms = atb_calloc(narms, sizeof(*out->arms));
	if (!out->arms)
		return atb_error_set(err, ATB_ERR_NOMEM, "cannot allocate samples: out of memory");
	out->narms = narms;
	/* Every array is sized for trials.max up front: no allocation while timing. */
	for (i = 0; i < narms; i++) {
		struct atb_timing_arm *a = &out->arms[i];

		a->times_ns = atb_malloc(cap * sizeof(*a->times_ns));
		a->round = atb_malloc(cap * sizeof(*a->round));
		a->position = atb_malloc(cap * sizeof(*a->position));
		a->ci_rel_halfwidth = INFINITY;
		if (timer->measures_device_extra &&
		    !(a->device_extra_ns = atb_malloc(cap * sizeof(*a->device_extra_ns))))
			goto nomem;
		if (!a->times_ns || !a->round || !a->position)
			goto nomem;
	}
	if (hooks && hooks->round_trip && hooks->round_trip_every > 0 &&
	    (!(out->round_trip_ns = atb_malloc(cap * sizeof(*out->round_trip_ns))) ||
	     !(out->round_trip_slot = atb_malloc(cap * sizeof(*out->round_trip_slot)))))
		goto nomem;
	order = atb_malloc(narms * sizeof(*order));
	ranks = atb_malloc(cap * sizeof(*ranks));
	sorted = atb_malloc(narms * cap * sizeof(*sorted));
	r = gsl_rng_alloc(gsl_rng_mt19937);
	if (!order || !ranks || !sorted || !r)
		goto nomem;
	for (i = 0; i < cap; i++)
		ranks[i] = (double)i;
	gsl_rng_set(r, order_seed(seed));

	t_start = atbi_monotonic_ns();
	for (i = 0; i < narms; i++) {
		st = warm_up(cfg, timer, i, call, ctx, hooks, &out->arms[i], err);
		if (st)
			goto done;
	}

	for (round = 0; round < cfg->trials_max; round++) {
		int all_met = 1;
		size_t p, rt_slot;

		/* PROTO: timing.interleave (randomized_pairs) */
		next_order(cfg->interleave, r, narms, order);
		/* PROTO: gates.timed_correctness -- outside the timed window */
		if (hooks && hooks->before_round && hooks->before_round(hooks->ctx, round)) {
			st = atb_error_set(err, ATB_ERR_SYSTEM,
					   "round hook failed before round %d", round);
			goto done;
		}
		/* PROTO: timing.round_trip -- this round's empty call, and where */
		rt_slot = narms + 1;
		if (out->round_trip_ns && round % hooks->round_trip_every == 0) {
			rt_slot = hooks->round_trip_slot
					  ? hooks->round_trip_slot(hooks->rt_ctx, seed, round, order,
								   narms)
					  : narms;
			if (rt_slot == SIZE_MAX) {
				st = atb_error_set(err, ATB_ERR_SYSTEM,
						   "cannot draw the round trip's place in round %d",
						   round);
				goto done;
			}
			if (rt_slot > narms)
				rt_slot = narms;
		}
		for (p = 0; p <= narms; p++) {
			struct atb_timing_arm *a;
			int64_t t;
			int rc;

			if (p == rt_slot) {
				st = time_round_trip(cfg, timer, hooks, out, round, p, err);
				if (st)
					goto done;
			}
			if (p == narms)
				break;
			a = &out->arms[order[p]];
			if (cfg->flush && ops->flush)
				ops->flush(timer->state);  /* PROTO: timing.cache_flush */
			ops->start(timer->state);
			rc = call(ctx, order[p]);
			ops->stop(timer->state);
			if (rc) {
				st = atb_error_set(err, ATB_ERR_CHECK,
						   "arm %zu failed in round %d", order[p], round);
				goto done;
			}
			t = ops->elapsed_ns(timer->state);
			if (t < 0) {
				st = atb_error_set(err, ATB_ERR_SYSTEM,
						   "timer '%s' failed in round %d", ops->name, round);
				goto done;
			}
			if (timer->last_preempted_ns > 0) {   /* PROTO: timing.preemption */
				a->preempted_ns += timer->last_preempted_ns;
				a->preempted_trials++;
			}
			sorted_insert(sorted + order[p] * cap, a->ntrials, t);
			a->times_ns[a->ntrials] = t;
			a->round[a->ntrials] = round;
			a->position[a->ntrials] = (int)p;
			if (a->device_extra_ns)  /* PROTO: gates.side_stream.timed */
				a->device_extra_ns[a->ntrials] = timer->last_device_extra_ns;
			a->ntrials++;
			if (hooks && hooks->after_call &&
			    hooks->after_call(hooks->call_ctx, order[p], a->ntrials - 1)) {
				st = atb_error_set(err, ATB_ERR_SYSTEM,
						   "trial hook failed after arm %zu in round %d",
						   order[p], round);
				goto done;
			}
		}
		out->rounds = round + 1;
		if (hooks && hooks->after_round && hooks->after_round(hooks->ctx, round)) {
			st = atb_error_set(err, ATB_ERR_SYSTEM,
					   "round hook failed after round %d", round);
			goto done;
		}
		if (hooks && hooks->progress)
			hooks->progress();

		/* PROTO: timing.stopping (median_ci_halfwidth), checked from trials.min on */
		if (out->rounds >= cfg->trials_min && cfg->target_rel_halfwidth > 0) {
			if (lo_n == 0) {
				st = atbi_timing_ci_index(ranks, (size_t)out->rounds, cfg->ci_level,
							  &lo, err);
				if (st)
					goto done;
			} else {
				lo = atbi_timing_ci_index_next(lo, (size_t)out->rounds, cfg->ci_level);
			}
			lo_n = (size_t)out->rounds;
			for (i = 0; i < narms; i++) {
				struct atb_timing_arm *a = &out->arms[i];

				arm_summary(sorted + i * cap, a->ntrials, lo, a);
				if (!(a->ci_rel_halfwidth <= cfg->target_rel_halfwidth))
					all_met = 0;
			}
		} else {
			all_met = 0;
		}
		if (all_met) {
			out->stop = ATB_STOP_TARGET;
			break;
		}
		if (out->rounds >= cfg->trials_max) {
			out->stop = ATB_STOP_TRIALS_MAX;
			break;
		}
		if (cfg->max_time_per_seed_ns > 0 &&
		    atbi_monotonic_ns() - t_start >= cfg->max_time_per_seed_ns) {
			out->stop = ATB_STOP_TIME_BUDGET;
			break;
		}
	}
	out->elapsed_ns = atbi_monotonic_ns() - t_start;
	/* The final median and CI of every arm, also when the rule never ran. */
	st = ATB_OK;
	if (lo_n != (size_t)out->rounds)
		st = atbi_timing_ci_index(ranks, (size_t)out->rounds, cfg->ci_level, &lo, err);
	for (i = 0; !st && i < narms; i++)
		arm_summary(sorted + i * cap, out->arms[i].ntrials, lo, &out->arms[i]);
	goto done;

nomem:
	st = atb_error_set(err, ATB_ERR_NOMEM, "cannot allocate samples: out of memory");
done:
	if (r)
		gsl_rng_free(r);
	atb_free(order);
	atb_free(ranks);
	atb_free(sorted);
	return st;
}
