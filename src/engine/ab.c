/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The paired configuration A/B of a serving engine (PROTO: engine.*): the
 * engine's default configuration (the honest baseline) against a candidate
 * configuration on the paired seeds, ABBA over consecutive seeds, a fresh
 * engine per arm, the identical seeded workload for both arms of a seed,
 * warm-up excluded; the output-equivalence gate on every engine start;
 * death (watched while the load runs), request failures and client lag
 * refused (from protocol version 6 by the share of the load it can have
 * moved, the load generator's client_lag_share, and by the arms'
 * difference); statistics by stats/ (per-seed requests/s ratios, geometric
 * mean, bootstrap CI, Wilcoxon, cv), both arms of every seed re-run, in
 * the seed's paired order, at most twice when the cv is over the cap (so
 * every stored pair is two measurements adjacent in time), and the result
 * through the judge (gates/: statistics, noise gate, re-run bound,
 * refusals, ingest), kind "engine".
 *
 * Does not: generate load itself (loadgen/), compute statistics (the
 * judge does, with stats/), or decide usability (loop/).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <jansson.h>

#include "atb/alloc.h"
#include "atb/box.h"
#include "atb/judge.h"
#include "atb/protocol.h"
#include "atb/stats.h"
#include "atb/store.h"
#include "engine_int.h"
#include "banned.h"

enum { ARM_A = 0, ARM_B = 1 };   /* A: the default configuration; B: the candidate */

/*
 * Re-runs: at most gates.rerun.max_runs runs in all (the judge's bound,
 * as for kernels).  A re-run measures both arms of every seed again, in
 * the seed's paired order: re-measuring only the noisier side would pair
 * its new values with the other side's older ones, and drift of the box
 * between the two would read as a speedup or a slowdown (docs/engine.md).
 */

/* Latency metrics kept per seed and arm, ratio'd like the rate (lower is better). */
#define NLAT 4
static const char *const lat_names[NLAT] = {"ttft_median_ms", "tpot_median_ms",
					    "e2e_median_ms", "e2e_p99_ms"};

struct ab {
	struct atb_store *store;
	const struct atb_protocol *p;
	const struct atb_engine_task *t;
	const struct atb_engine_config *config[2];
	const struct atb_engine_ab_opts *o;
	struct atb_measure_outcome *out;
	struct atb_error *err;
	size_t nseeds;
	double *rate[2];               /* [arm][seed] requests/s */
	double *lag_share[2];          /* [arm][seed] client_lag_share */
	double *lat[2][NLAT];          /* [arm][metric][seed] */
	struct atb_engine_probe_set ref; /* the default configuration's first probes */
	int have_ref;
	size_t starts[2];              /* engines started per arm */
	json_t *per_seed;              /* detail for stats_json */
	int64_t t0_ns;                 /* for the progress line's ETA */
	size_t arms_done, arms_total;
	int attempts;                  /* 1 + noise re-runs so far */
	int rerun;                     /* conclude asks for a re-run of both arms */
	int64_t order;                 /* arm measurements so far in this job (per_seed's order) */
	json_t *reruns;                /* each re-run: the cvs that caused it, values replaced */
	json_t *counters;              /* metric counter differences, summed per arm */
	char *config_json;
	struct atb_judge judge;        /* refusals, statistics, ingest (gates/) */
};

static void phase(struct ab *A, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void phase(struct ab *A, const char *fmt, ...)
{
	char buf[160];
	va_list ap;
	int n;

	if (!A->o->progress)
		return;
	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (A->arms_done && A->arms_done < A->arms_total && n > 0 && (size_t)n < sizeof(buf)) {
		double per = (double)(atbi_monotonic_ns() - A->t0_ns) / 1e9 / (double)A->arms_done;

		snprintf(buf + n, sizeof(buf) - (size_t)n, " (ETA %.0f s)",
			 per * (double)(A->arms_total - A->arms_done));
	}
	A->o->progress(A->o->progress_ctx, buf);
}

/* Store a rejection "gate:<gate>" through the judge and fill the outcome. */
static enum atb_status refuse(struct ab *A, const char *gate, const char *reason, json_t *extra)
{
	return atb_judge_refuse(&A->judge, gate, ATB_ERR_CHECK, reason, extra, A->err);
}

/* The engine's counters now; NAN where absent. */
static void read_counters(struct atb_engine_proc *proc, const struct atb_engine_spec *spec,
			  double *v)
{
	char url[256], why[128], *body = NULL;
	long status = 0;
	size_t i;

	for (i = 0; i < spec->ncounters; i++)
		v[i] = NAN;
	if (!spec->metrics_path || !spec->ncounters)
		return;
	snprintf(url, sizeof(url), "%s%s", atb_engine_base_url(proc), spec->metrics_path);
	if (atbi_engine_http(url, NULL, 5000, &status, &body, why, sizeof(why)) == ATB_OK &&
	    status == 200)
		for (i = 0; i < spec->ncounters; i++)
			v[i] = atbi_prom_value(body, spec->counters[i]);
	atb_free(body);
}

static void add_counters(struct ab *A, int arm, const double *before, const double *after)
{
	const struct atb_engine_spec *spec = A->t->spec;
	json_t *o = json_object_get(A->counters, arm == ARM_A ? "baseline" : "candidate");
	size_t i;

	for (i = 0; o && i < spec->ncounters; i++) {
		double d = after[i] - before[i];
		json_t *cur = json_object_get(o, spec->counters[i]);

		if (!isfinite(d))
			continue;
		json_object_set_new(o, spec->counters[i],
				    json_real((cur ? json_real_value(cur) : 0.0) + d));
	}
}

/* Why a run's failures happened: "http_5xx:24 reset:1". */
static void failure_text(const struct atb_loadgen_summary *s, char *buf, size_t size)
{
	size_t i, n = 0;

	buf[0] = '\0';
	for (i = 1; i < ATB_LOADGEN_FAIL_COUNT && n < size; i++)
		if (s->failures[i])
			n += (size_t)snprintf(buf + n, size - n, "%s%s:%zu", n ? " " : "",
					      atb_loadgen_failure_name((enum atb_loadgen_failure)i),
					      s->failures[i]);
}

/* The first failed record's error, for the reason. */
static const char *first_error(const struct atb_loadgen_result *res)
{
	size_t i, n = atb_loadgen_result_count(res);

	for (i = 0; i < n; i++) {
		const struct atb_loadgen_record *r = atb_loadgen_result_record(res, i);

		if (r->failure != ATB_LOADGEN_OK)
			return r->error;
	}
	return "";
}

static const char *arm_name(int arm)
{
	return arm == ARM_A ? "baseline" : "candidate";
}

static void settle(void)
{
	struct timespec ts = {0, 300000000L};

	nanosleep(&ts, NULL);
}

/*
 * A dead engine is refused (engine_died; the baseline's: engine_baseline),
 * with `when` (may be "") after the log's tail.
 */
static enum atb_status check_alive_at(struct ab *A, struct atb_engine_proc *proc, int arm,
				      uint64_t seed, const char *dir, const char *when,
				      int *refused)
{
	char why[700], reason[900];

	if (atb_engine_alive(proc, why, sizeof(why)))
		return ATB_OK;
	snprintf(reason, sizeof(reason), "%s configuration, seed %" PRIu64 ": %s%s",
		 arm_name(arm), seed, why, when);
	*refused = 1;
	return refuse(A, arm == ARM_A ? ATB_GATE_ENGINE_BASELINE : ATB_GATE_ENGINE_DIED, reason,
		      json_pack("{s:s}", "log_dir", dir));
}

static enum atb_status check_alive(struct ab *A, struct atb_engine_proc *proc, int arm,
				   uint64_t seed, const char *dir, int *refused)
{
	return check_alive_at(A, proc, arm, seed, dir, "", refused);
}

/* The load generator's abort check: waitpid(WNOHANG) at most every 10 ms. */
struct watch {
	struct atb_engine_proc *proc;
	int64_t last_ns;
};

static int engine_dead(void *ctx)
{
	struct watch *w = ctx;
	int64_t now = atbi_monotonic_ns();

	if (now - w->last_ns < 10000000)
		return 0;
	w->last_ns = now;
	return !atb_engine_alive(w->proc, NULL, 0);
}

/* "5.0 s open loop" or "closed loop": what a death cut short. */
static const char *schedule_text(const struct atb_loadgen_workload *wl, char *buf, size_t size)
{
	size_t n = atb_loadgen_workload_count(wl);
	int64_t last = n ? atb_loadgen_workload_get(wl, n - 1)->intended_ns : -1;

	if (last < 0)
		snprintf(buf, size, "closed loop");
	else
		snprintf(buf, size, "%.1f s open loop", (double)last / 1e9);
	return buf;
}

/* "N of M probes failed (http_4xx:N ...)": the probes' failures by HTTP class. */
static void probe_failures(const struct atb_engine_probe_set *ps, char *buf, size_t size)
{
	static const char *const names[] = {"no_response", "http_4xx", "http_5xx", "http_other"};
	size_t count[4] = {0}, nfail = 0, i, n;

	for (i = 0; i < ps->n; i++) {
		long h = ps->out[i].http_status;

		if (strcmp(ps->out[i].finish_reason, "error"))
			continue;
		nfail++;
		count[h == 0 ? 0 : h >= 400 && h < 500 ? 1 : h >= 500 && h < 600 ? 2 : 3]++;
	}
	n = (size_t)snprintf(buf, size, "%zu of %zu probes failed (", nfail, ps->n);
	for (i = 0; i < 4 && n < size; i++)
		if (count[i])
			n += (size_t)snprintf(buf + n, size - n, "%s%s:%zu", buf[n - 1] == '(' ? "" : " ",
					      names[i], count[i]);
	if (n < size)
		snprintf(buf + n, size - n, ")");
}

/*
 * PROTO: engine.output_equivalence.  The greedy probes of a freshly started
 * engine against the default configuration's first ones: on every start,
 * not only the first seed's, so outputs that change across restarts are
 * caught (the probe set is small: a few short greedy requests).  A
 * candidate that differs is refused (output_equivalence); the default
 * configuration differing from itself across restarts refuses the A/B as
 * engine_baseline (nothing can be compared against it).
 */
static enum atb_status probe_start(struct ab *A, struct atb_engine_proc *proc, int arm,
				   uint64_t seed, const char *dir, int *refused)
{
	struct atb_engine_probe_set got;
	char why[700], reason[1000], fails[120];
	enum atb_status st;
	size_t i, start = A->starts[arm];

	memset(&got, 0, sizeof(got));
	st = atb_engine_probe(proc, A->t, &got, A->err);
	if (st || (st = check_alive(A, proc, arm, seed, dir, refused)) || *refused)
		goto out;
	for (i = 0; i < got.n; i++)
		if (!strcmp(got.out[i].finish_reason, "error")) {
			/* A reset may be the engine dying: let it finish exiting. */
			settle();
			if ((st = check_alive(A, proc, arm, seed, dir, refused)) || *refused)
				goto out;
			probe_failures(&got, fails, sizeof(fails));
			snprintf(reason, sizeof(reason), "%s configuration: probe %zu failed (http %ld): "
				 "%.300s; %s", arm_name(arm), i, got.out[i].http_status, got.out[i].text,
				 fails);
			*refused = 1;
			st = refuse(A, arm == ARM_A ? ATB_GATE_ENGINE_BASELINE : ATB_GATE_ENGINE_ERRORS,
				    reason, NULL);
			goto out;
		}
	if (!A->have_ref) {
		/* the baseline runs first on the first seed (ABBA or AB) */
		A->ref = got;
		A->have_ref = 1;
		memset(&got, 0, sizeof(got));
		goto out;
	}
	if (atb_engine_equivalent(&A->ref, &got, why, sizeof(why)))
		goto out;
	*refused = 1;
	if (arm == ARM_A) {
		snprintf(reason, sizeof(reason), "the default configuration's greedy outputs differ "
			 "across restarts (start %zu, seed %" PRIu64 ", vs its first start): %s", start,
			 seed, why);
		st = refuse(A, ATB_GATE_ENGINE_BASELINE, reason,
			    json_pack("{s:I,s:I}", "start", (json_int_t)start, "seed", (json_int_t)seed));
	} else {
		if (start == 1)
			snprintf(reason, sizeof(reason), "%s", why);
		else
			snprintf(reason, sizeof(reason), "candidate start %zu (seed %" PRIu64 "), after "
				 "matching on its earlier starts: outputs differ across restarts: %s",
				 start, seed, why);
		st = refuse(A, ATB_GATE_OUTPUT_EQUIVALENCE, reason,
			    json_pack("{s:I,s:I}", "start", (json_int_t)start, "seed", (json_int_t)seed));
	}
out:
	atb_engine_probe_release(&got);
	return st;
}

/*
 * One arm of one seed.  Returns ATB_OK with *refused set when a gate
 * refused (already stored); an error status only when it could not go on.
 */
static enum atb_status run_arm(struct ab *A, size_t si, int arm, int *refused)
{
	const struct atb_engine_spec *spec = A->t->spec;
	struct atb_engine_proc *proc = NULL;
	struct atb_loadgen_config cfg = A->t->workload;
	struct atb_loadgen_result *res = NULL;
	const struct atb_loadgen_summary *sum;
	struct atbi_subst sub = {NULL, "127.0.0.1", 0, NULL};
	char dir[PATH_MAX], path[PATH_MAX + 16], why[900], fails[160], *model = NULL;
	char when[160] = "", sched[48];
	struct atb_loadgen_workload *wl = NULL;
	struct watch watch;
	int64_t load_t0, load_start_ns, load_end_ns;
	double before[64], after[64], load_s, share;
	uint64_t seed = A->o->seed_base + si;
	enum atb_status st;
	json_t *ps;

	*refused = 0;
	/* a noise re-run keeps the earlier attempt's logs: seed-S-ARM-rerunK */
	if ((A->attempts > 1 ? snprintf(dir, sizeof(dir), "%s/seed-%" PRIu64 "-%s-rerun%d",
					A->o->work_dir, seed, arm_name(arm), A->attempts - 1)
			     : snprintf(dir, sizeof(dir), "%s/seed-%" PRIu64 "-%s", A->o->work_dir,
					seed, arm_name(arm))) >= (int)sizeof(dir))
		return atb_error_set(A->err, ATB_ERR_USAGE, "work folder '%s' is too long",
				     A->o->work_dir);
	if (mkdir(dir, 0755) != 0 && errno != EEXIST)
		return atb_error_set(A->err, ATB_ERR_IO, "cannot create folder '%s': %s", dir,
				     strerror(errno));
	phase(A, "seed %zu/%zu %s: start", si + 1, A->nseeds, arm_name(arm));
	A->starts[arm]++;
	st = atb_engine_start(A->t, A->config[arm], dir, &proc, A->err);
	if (st == ATB_ERR_CHECK) {
		snprintf(why, sizeof(why), "%s configuration: %.800s", arm_name(arm), A->err->msg);
		atb_error_clear(A->err);
		*refused = 1;
		return refuse(A, arm == ARM_A ? ATB_GATE_ENGINE_BASELINE : ATB_GATE_ENGINE_START,
			      why, json_pack("{s:s}", "log_dir", dir));
	}
	if (st)
		return st;

	/* PROTO: engine.output_equivalence, on every start (docs/internals/engine.md). */
	phase(A, "seed %zu/%zu %s: probes", si + 1, A->nseeds, arm_name(arm));
	if ((st = probe_start(A, proc, arm, seed, dir, refused)) || *refused)
		goto out;

	/* The seed's workload, identical for both arms. */
	st = atbi_engine_expand(A->t->model, &sub, &model, A->err);
	if (st)
		goto out;
	cfg.url = atb_engine_base_url(proc);
	cfg.model = model;
	cfg.seed = seed;
	if (!A->t->warmup_set)
		cfg.warmup = (size_t)A->p->engine.warmup_requests;   /* PROTO: engine.warmup_requests */
	cfg.max_dispatch_lag_ms = A->p->engine.max_dispatch_lag_ms;  /* PROTO: engine.max_dispatch_lag_ms */
	cfg.test_dispatch_delay_ns += A->o->test_dispatch_delay_ns[arm];
	read_counters(proc, spec, before);
	phase(A, "seed %zu/%zu %s: load", si + 1, A->nseeds, arm_name(arm));
	/* Death during the load stops it at once (engine_died within ~50 ms). */
	watch = (struct watch){proc, 0};
	cfg.should_abort = engine_dead;
	cfg.abort_ctx = &watch;
	st = atb_loadgen_workload_new(&cfg, &wl, A->err);
	load_t0 = atbi_monotonic_ns();
	load_start_ns = atbi_realtime_ns();
	if (!st)
		st = atb_loadgen_run_workload(&cfg, wl, &res, A->err);
	load_s = (double)(atbi_monotonic_ns() - load_t0) / 1e9;
	load_end_ns = atbi_realtime_ns();
	if (st)
		goto out;
	sum = atb_loadgen_result_summary(res);
	if (snprintf(path, sizeof(path), "%s/records.jsonl", dir) < (int)sizeof(path))
		(void)atb_loadgen_result_write_records(res, path, NULL);

	/* Death between or during requests: waitpid(WNOHANG), with the log's tail. */
	if (sum->aborted) {
		snprintf(when, sizeof(when), " (caught %.2f s into the load, %zu of %zu measured "
			 "requests finished, schedule %s)", load_s, sum->completed, sum->requests,
			 schedule_text(wl, sched, sizeof(sched)));
	}
	if ((st = check_alive_at(A, proc, arm, seed, dir, when, refused)) || *refused)
		goto out;
	if (sum->failed) {
		settle();
		if ((st = check_alive(A, proc, arm, seed, dir, refused)) || *refused)
			goto out;
		failure_text(sum, fails, sizeof(fails));
		snprintf(why, sizeof(why), "%s configuration, seed %" PRIu64 ": %zu of %zu requests "
			 "failed (%s): %.300s", arm_name(arm), seed, sum->failed, sum->requests,
			 fails, first_error(res));
		*refused = 1;
		st = refuse(A, arm == ARM_A ? ATB_GATE_ENGINE_BASELINE : ATB_GATE_ENGINE_ERRORS, why,
			    NULL);
		goto out;
	}
	share = sum->client_lag_share;   /* atb/loadgen.h says what it bounds */
	if (A->p->engine.has_client_lag && share > A->p->engine.client_lag_max_share) {
		/* PROTO: engine.client_lag.max_share */
		snprintf(why, sizeof(why), "%s arm, seed %" PRIu64 ": the client's lag could move "
			 "requests/s by %.2f%% (%s lag %.3f ms over the %.3f s load; dispatch lag "
			 "p50 %.3f ms, p99 %.3f ms) over the protocol's max_share %.2f%%: the client, "
			 "not the engine, was measured", arm_name(arm), seed, 100.0 * share,
			 cfg.arrival == ATB_LOADGEN_ARRIVAL_CLOSED ? "summed over the slots, a slot's"
								    : "largest",
			 sum->client_lag_ms,
			 sum->duration_s, sum->dispatch_lag_ms.median, sum->dispatch_lag_ms.p99,
			 100.0 * A->p->engine.client_lag_max_share);
		*refused = 1;
		st = refuse(A, ATB_GATE_CLIENT_LAG, why,
			    json_pack("{s:s,s:I,s:f,s:f,s:f,s:f}", "arm", arm_name(arm), "seed",
				      (json_int_t)seed, "client_lag_share", share, "max_share",
				      A->p->engine.client_lag_max_share, "dispatch_lag_p99_ms",
				      sum->dispatch_lag_ms.p99, "dispatch_lag_max_ms",
				      sum->dispatch_lag_ms.max));
		goto out;
	}
	if (!A->p->engine.has_client_lag && sum->client_limited) {
		/* PROTO: engine.max_dispatch_lag_ms (versions 1 to 5) */
		snprintf(why, sizeof(why), "%s arm, seed %" PRIu64 ": the client lagged (p99 dispatch "
			 "lag %.3f ms over the protocol's %.3f ms): the client, not the engine, was "
			 "measured", arm_name(arm), seed, sum->dispatch_lag_ms.p99,
			 sum->max_dispatch_lag_ms);
		*refused = 1;
		st = refuse(A, ATB_GATE_CLIENT_LAG, why, NULL);
		goto out;
	}
	read_counters(proc, spec, after);
	add_counters(A, arm, before, after);
	A->rate[arm][si] = sum->requests_per_s;
	A->lag_share[arm][si] = share;
	A->lat[arm][0][si] = sum->ttft_ms.median;
	A->lat[arm][1][si] = sum->tpot_ms.median;
	A->lat[arm][2][si] = sum->e2e_ms.median;
	A->lat[arm][3][si] = sum->e2e_ms.p99;
	/* attempt, order and the load's wall-clock span: the pair's adjacency, stored */
	ps = json_pack("{s:I,s:s,s:f,s:f,s:f,s:f,s:f,s:f,s:s,s:i,s:I,s:I,s:I}", "seed",
		       (json_int_t)seed, "arm", arm_name(arm), "requests_per_s",
		       sum->requests_per_s, "output_tokens_per_s", sum->output_tokens_per_s,
		       "ttft_median_ms", sum->ttft_ms.median, "tpot_median_ms",
		       sum->tpot_ms.median, "e2e_median_ms", sum->e2e_ms.median, "e2e_p99_ms",
		       sum->e2e_ms.p99, "workload_digest", atb_loadgen_result_workload_digest(res),
		       "attempt", A->attempts, "order", (json_int_t)A->order, "load_start_ns",
		       (json_int_t)load_start_ns, "load_end_ns", (json_int_t)load_end_ns);
	/* the client's lag per arm, judged or not (PROTO: engine.client_lag) */
	if (ps && json_object_update_new(ps, json_pack("{s:f,s:f,s:f,s:f,s:f}",
						       "dispatch_lag_p50_ms",
						       sum->dispatch_lag_ms.median,
						       "dispatch_lag_p99_ms", sum->dispatch_lag_ms.p99,
						       "dispatch_lag_max_ms", sum->dispatch_lag_ms.max,
						       "dispatch_lag_mean_ms", sum->dispatch_lag_ms.mean,
						       "client_lag_share", share))) {
		json_decref(ps);
		ps = NULL;
	}
	A->order++;
	if (ps)
		json_array_append_new(A->per_seed, ps);
out:
	atb_free(model);
	atb_loadgen_result_free(res);
	atb_loadgen_workload_free(wl);
	phase(A, "seed %zu/%zu %s: stop", si + 1, A->nseeds, arm_name(arm));
	atb_engine_stop(proc);
	A->arms_done++;
	return st;
}

/* The judge's statistics of per-seed values (one a seed and arm). */
static enum atb_status paired_values(struct ab *A, struct atb_paired_seed *ps, const double *base,
				     const double *cand, struct atb_paired_result *r,
				     struct atb_error *e)
{
	size_t i;

	for (i = 0; i < A->nseeds; i++) {
		ps[i].seed = A->o->seed_base + i;
		ps[i].baseline = &base[i];
		ps[i].nbaseline = 1;
		ps[i].candidate = &cand[i];
		ps[i].ncandidate = 1;
	}
	return atb_judge_stats_of(&A->judge, ps, A->nseeds,
				  atb_judge_bootstrap_seed(A->o->seed_base, A->nseeds), r, e);
}

/* Latency ratios (default / candidate, > 1: candidate faster) with CIs. */
static json_t *latency_json(struct ab *A, struct atb_paired_seed *ps)
{
	json_t *o = json_object();
	size_t m, i;

	/* latencies are costs: lower is better, whatever the headline's metric */
	A->judge.higher_is_better = 0;
	for (m = 0; o && m < NLAT; m++) {
		struct atb_paired_result r;
		struct atb_error e;

		for (i = 0; i < A->nseeds; i++)
			if (!(A->lat[ARM_A][m][i] > 0 && A->lat[ARM_B][m][i] > 0))
				break;
		if (i < A->nseeds)
			continue;   /* e.g. tpot with one-token answers */
		memset(&r, 0, sizeof(r));
		if (paired_values(A, ps, A->lat[ARM_A][m], A->lat[ARM_B][m], &r, &e) == ATB_OK)
			json_object_set_new(o, lat_names[m],
					    json_pack("{s:f,s:f,s:f,s:f}", "ratio", r.geomean_ratio,
						      "ci_low", r.ci_lo, "ci_high", r.ci_hi, "p_value",
						      r.wilcoxon.p_value));
		atb_stats_paired_release(&r);
	}
	A->judge.higher_is_better = 1;
	return o;
}

/*
 * The requests/s ratio (candidate / default, > 1: candidate faster) with its
 * CI, and each arm's median over the seeds in req/s, for the stats column:
 * reports read it from there (atb_store_result_stats).
 */
static json_t *rate_json(struct ab *A, const struct atb_paired_result *r)
{
	struct atb_error e;
	double b = 0, c = 0;

	atb_stats_median(A->rate[ARM_A], A->nseeds, &b, &e);
	atb_stats_median(A->rate[ARM_B], A->nseeds, &c, &e);
	return json_pack("{s:f,s:f,s:f,s:f,s:f,s:f}", "ratio", r->geomean_ratio, "ci_low",
			 r->ci_lo, "ci_high", r->ci_hi, "p_value", r->wilcoxon.p_value,
			 "baseline_median", b, "candidate_median", c);
}

/*
 * The latency ratios as one line in out->note, which the loop stores as a
 * usable iteration's note and reports show: "latency vs default (> 1:
 * faster): NAME RATIOx [LO, HI]; ..." (docs/engine.md).
 */
static void latency_note(struct ab *A, struct atb_paired_seed *ps)
{
	json_t *lat = latency_json(A, ps), *v;
	size_t m, n;

	n = (size_t)snprintf(A->out->note, sizeof(A->out->note), "latency vs default (> 1: faster):");
	for (m = 0; lat && m < NLAT && n < sizeof(A->out->note); m++) {
		v = json_object_get(lat, lat_names[m]);
		if (v)
			n += (size_t)snprintf(A->out->note + n, sizeof(A->out->note) - n,
					      "%s %s %.4gx [%.4g, %.4g]", m ? ";" : "", lat_names[m],
					      json_real_value(json_object_get(v, "ratio")),
					      json_real_value(json_object_get(v, "ci_low")),
					      json_real_value(json_object_get(v, "ci_high")));
	}
	json_decref(lat);
}

/* The noise gate's wording (PROTO: stats.cv_cap), from the judge's statistics. */
static void noise_words(void *ctx, const struct atb_paired_result *r, char *reason, size_t size,
			json_t **detail)
{
	struct ab *A = ctx;

	snprintf(reason, size, "cv %.4f of the per-seed requests/s over the protocol's cap "
		 "%.4f after %d runs (%d re-runs of both arms on every seed; cv of the "
		 "per-seed ratios %.4f, per arm: baseline %.4f, candidate %.4f)", r->cv,
		 r->cv_cap, A->attempts, A->attempts - 1, r->cv_ratio, r->cv_baseline,
		 r->cv_candidate);
	*detail = json_pack("{s:f,s:f,s:f,s:f,s:f,s:i,s:O,s:O}", "cv", r->cv, "cv_cap", r->cv_cap,
			    "cv_ratio", r->cv_ratio, "cv_baseline", r->cv_baseline,
			    "cv_candidate", r->cv_candidate, "attempts", A->attempts, "reruns",
			    A->reruns, "per_seed", A->per_seed);
}

/*
 * The judge asked for another run (the cv over the cap before the last):
 * record the re-run (the cvs that caused it and the pairs it replaces),
 * drop every per-seed entry and measure both arms of every seed again, in
 * the paired order (see above for why both).
 */
static enum atb_status again(struct ab *A, const struct atb_paired_result *r)
{
	json_t *e;

	e = json_pack("{s:i,s:s,s:f,s:f,s:f,s:f,s:O}", "after_attempt", A->attempts, "side",
		      "both", "cv", r->cv, "cv_ratio", r->cv_ratio, "cv_baseline", r->cv_baseline,
		      "cv_candidate", r->cv_candidate, "replaced", A->per_seed);
	if (!e || json_array_append_new(A->reruns, e))
		return atb_error_set(A->err, ATB_ERR_NOMEM, "out of memory");
	/* the replaced pairs stay in reruns[].replaced; this attempt starts afresh */
	json_decref(A->per_seed);
	if (!(A->per_seed = json_array()))
		return atb_error_set(A->err, ATB_ERR_NOMEM, "out of memory");
	json_object_set_new(A->counters, "baseline", json_object());
	json_object_set_new(A->counters, "candidate", json_object());
	A->rerun = 1;
	return ATB_OK;
}

/*
 * PROTO: engine.client_lag.max_arm_difference.  A lag the box gives both
 * arms alike moves both rates alike; one that hits one arm more than the
 * other moves the paired ratio by up to the difference of their shares.
 * Its mean over the seeds (baseline minus candidate: > 0 flatters the
 * candidate) is the systematic part; what varies from seed to seed is
 * in the per-seed ratios' spread, which the CI and the noise gate judge.
 */
static enum atb_status arms_lag_check(struct ab *A, int *refused)
{
	double d = 0, b = 0, c = 0, lim = A->p->engine.client_lag_max_arm_difference;
	char why[600];
	size_t i;

	for (i = 0; i < A->nseeds; i++) {
		b += A->lag_share[ARM_A][i];
		c += A->lag_share[ARM_B][i];
	}
	b /= (double)A->nseeds;
	c /= (double)A->nseeds;
	d = b - c;
	if (!(fabs(d) > lim))
		return ATB_OK;
	snprintf(why, sizeof(why), "the arms' client lag differs: it could move the paired "
		 "requests/s ratio by %.2f%% (mean over %zu seeds of the share of the load the lag "
		 "can have moved: baseline %.2f%%, candidate %.2f%%) over the protocol's "
		 "max_arm_difference %.2f%%: the client, not the engine, made the difference",
		 100.0 * fabs(d), A->nseeds, 100.0 * b, 100.0 * c, 100.0 * lim);
	*refused = 1;
	return refuse(A, ATB_GATE_CLIENT_LAG, why,
		      json_pack("{s:f,s:f,s:f,s:f,s:O}", "client_lag_share_baseline", b,
				"client_lag_share_candidate", c, "difference", d,
				"max_arm_difference", lim, "per_seed", A->per_seed));
}

/*
 * The attempt's per-seed requests/s to the judge, which computes the
 * statistics, applies the noise gate with its re-run bound and ingests.
 */
static enum atb_status conclude(struct ab *A)
{
	struct atb_paired_seed *ps = atb_calloc(A->nseeds, sizeof(*ps));
	struct atb_judge_seed *js = atb_calloc(A->nseeds, sizeof(*js));
	struct atb_judge_facts f;
	struct atb_judge_noise noise = {noise_words, A};
	struct atb_paired_result r;
	json_t *sj = NULL;
	enum atb_status st;
	int rerun = 0;
	size_t i;

	memset(&r, 0, sizeof(r));
	A->rerun = 0;
	if (!ps || !js) {
		st = atb_error_set(A->err, ATB_ERR_NOMEM, "out of memory");
		goto out;
	}
	if (A->p->engine.has_client_lag) {
		int refused = 0;

		if ((st = arms_lag_check(A, &refused)) || refused)
			goto out;
	}
	for (i = 0; i < A->nseeds; i++) {
		js[i].seed = A->o->seed_base + i;
		js[i].v[ATB_ARM_BASELINE] = &A->rate[ARM_A][i];
		js[i].n[ATB_ARM_BASELINE] = 1;
		js[i].v[ATB_ARM_CANDIDATE] = &A->rate[ARM_B][i];
		js[i].n[ATB_ARM_CANDIDATE] = 1;
	}
	memset(&f, 0, sizeof(f));
	f.seeds = js;
	f.nseeds = A->nseeds;
	/* PROTO: stats.bootstrap_resamples -- seeded as measure's, kept in the stats */
	f.bootstrap_seed = atb_judge_bootstrap_seed(A->o->seed_base, A->nseeds);
	/* trial: the attempt (0: first run, k: re-run k) whose pair is kept */
	f.trial_base = A->attempts - 1;
	A->judge.attempts = A->attempts;
	A->out->attempts = A->attempts;
	/* the stats column's engine keys need the ratio's interval: the judge's */
	st = atb_judge_stats(&A->judge, &f, &r, A->err);
	if (st)
		goto out;
	sj = json_pack("{s:s,s:s,s:o,s:o,s:o,s:O,s:O,s:s,s:b,s:O,s:s}", "engine",
		       A->t->spec->name, "metric", "requests_per_s", "config",
		       json_loads(A->config_json, 0, NULL), "requests_per_s", rate_json(A, &r),
		       "latency", latency_json(A, ps), "per_seed", A->per_seed, "counters",
		       A->counters, "paired_order", A->p->engine.paired_order,
		       "fresh_engine_per_arm", A->p->engine.fresh_engine_per_arm, "reruns",
		       A->reruns, "rerun_arms", "both");
	if (!sj) {
		st = atb_error_set(A->err, ATB_ERR_NOMEM, "out of memory");
		goto out;
	}
	json_object_set_new(sj, "engine_cpus", atb_engine_task_cpus_json(A->t));
	st = atb_judge_conclude(&A->judge, &f, sj, &noise, &rerun, NULL, A->err);
	if (st)
		goto out;
	if (rerun) {
		st = again(A, &r);
		goto out;
	}
	if (A->out->verdict != ATB_MEASURE_REJECTED)
		latency_note(A, ps);
out:
	json_decref(sj);
	atb_stats_paired_release(&r);
	atb_free(ps);
	atb_free(js);
	return st;
}

/*
 * One attempt: both arms of every seed, back to back (PROTO:
 * engine.paired_order, ABBA: the default first on even seeds, the
 * candidate first on odd ones), then the statistics.  The first run and
 * each noise re-run take the same order, so a stored pair is always two
 * measurements adjacent in time.
 */
static enum atb_status run_seeds(struct ab *A, int *refused)
{
	enum atb_status st = ATB_OK;
	size_t si;

	for (si = 0; !st && !*refused && si < A->nseeds; si++) {
		int first = (si % 2 == 0 || strcmp(A->p->engine.paired_order, "ABBA")) ? ARM_A
										      : ARM_B;

		st = run_arm(A, si, first, refused);
		if (!st && !*refused)
			st = run_arm(A, si, 1 - first, refused);
	}
	if (!st && !*refused)
		st = conclude(A);
	return st;
}

static void ab_release(struct ab *A)
{
	int a, m;

	for (a = 0; a < 2; a++) {
		atb_free(A->rate[a]);
		atb_free(A->lag_share[a]);
		for (m = 0; m < NLAT; m++)
			atb_free(A->lat[a][m]);
	}
	atb_engine_probe_release(&A->ref);
	json_decref(A->reruns);
	json_decref(A->per_seed);
	json_decref(A->counters);
	atb_free(A->config_json);
	atb_judge_release(&A->judge);
}

enum atb_status atb_engine_ab(struct atb_store *store, const struct atb_protocol *p,
			      const struct atb_engine_task *t,
			      const struct atb_engine_config *config,
			      const struct atb_engine_ab_opts *opts,
			      struct atb_measure_outcome *out, struct atb_error *err)
{
	static const struct atb_engine_config none;
	struct ab A;
	char id[33];
	enum atb_status st;
	int a, m, refused = 0;
	int64_t t0 = atbi_monotonic_ns();

	memset(out, 0, sizeof(*out));
	memset(&A, 0, sizeof(A));
	if (!opts->work_dir)
		return atb_error_set(err, ATB_ERR_USAGE, "an engine A/B needs a work folder");
	A.store = store;
	A.p = p;
	A.t = t;
	A.config[ARM_A] = &none;
	A.config[ARM_B] = config ? config : &none;
	A.o = opts;
	A.out = out;
	A.err = err;
	A.nseeds = opts->nseeds ? opts->nseeds : (size_t)p->stats.min_paired_seeds;
	A.t0_ns = t0;
	if (A.nseeds < 2 || A.nseeds > 100000)
		return atb_error_set(err, ATB_ERR_USAGE, "%zu paired seeds; 2 to 100000", A.nseeds);
	/* the home's trusted files (engine specs, tasks, ...) before anything
	   runs or is stored, as for a kernel measurement */
	if ((st = atb_protocol_manifest_verify(NULL, NULL, err)))
		return st;
	if ((st = atbi_random_id(id)))
		return atb_error_set(err, st, "cannot make a job id");
	snprintf(out->job_uuid, sizeof(out->job_uuid), "%s", id);
	atb_alloc_install_json();
	A.per_seed = json_array();
	A.reruns = json_array();
	A.counters = json_pack("{s:{},s:{}}", "baseline", "candidate");
	st = atb_engine_config_json(A.config[ARM_B], &A.config_json, err);
	for (a = 0; !st && a < 2; a++) {
		A.rate[a] = atb_calloc(A.nseeds, sizeof(double));
		A.lag_share[a] = atb_calloc(A.nseeds, sizeof(double));
		st = A.rate[a] && A.lag_share[a] ? ATB_OK
						 : atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
		for (m = 0; !st && m < NLAT; m++) {
			A.lat[a][m] = atb_calloc(A.nseeds, sizeof(double));
			st = A.lat[a][m] ? ATB_OK : atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
		}
	}
	if (!st && (!A.per_seed || !A.counters || !A.reruns))
		st = atb_error_set(err, ATB_ERR_NOMEM, "out of memory");
	A.judge.store = store;
	A.judge.p = p;
	A.judge.out = out;
	A.judge.producer = ATB_JUDGE_ENGINE;
	A.judge.kind = "engine";
	A.judge.task = t->name;
	A.judge.candidate = opts->candidate_label ? opts->candidate_label : A.config_json;
	A.judge.unit = "req/s";
	A.judge.metric = "requests_per_s/paired";
	A.judge.higher_is_better = 1;   /* PROTO: engine -- requests/s, higher is better */
	if (!st)
		st = atb_judge_init(&A.judge, err);
	if (!st) {
		/* what every refusal's detail carries */
		json_t *d = A.judge.detail;

		json_object_set_new(d, "task", json_string(t->name));
		json_object_set_new(d, "engine", json_string(t->spec->name));
		json_object_set_new(d, "config", json_loads(A.config_json, 0, NULL));
		json_object_set_new(d, "protocol_digest", json_string(p->digest));
		json_object_set_new(d, "engine_cpus", atb_engine_task_cpus_json(t));
		st = atb_judge_register_box(&A.judge, NULL, opts->box_fingerprint, err);
	}
	/*
	 * PROTO: engine.paired_order (ABBA): baseline first on even seeds,
	 * candidate first on odd ones, so drift over the run hits both arms.
	 * PROTO: engine.fresh_engine_per_arm: every arm starts its own engine
	 * (this implementation always does; reuse is never needed for a
	 * fair comparison, only for speed).
	 */
	A.attempts = 1;
	A.arms_total = 2 * A.nseeds;
	st = st ? st : run_seeds(&A, &refused);
	/* PROTO: stats.cv_cap: both arms again on every seed, in order, at most twice */
	while (!st && !refused && A.rerun) {
		A.attempts++;
		A.arms_total += 2 * A.nseeds;
		st = run_seeds(&A, &refused);
	}
	out->run_s = (double)(atbi_monotonic_ns() - t0) / 1e9;
	ab_release(&A);
	return st;
}
