/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The judge: the one place where raw facts become a verdict and a row.
 *
 * Producers (measure/ for kernels, engine/ab.c for serving engines, the
 * CLI's `atb db ingest-json`, suite/ for a killed job) hand in what they
 * saw: per-seed, per-arm samples, the identity of the job (task,
 * candidate, box) and the facts their gates read.  They never hand in a
 * speedup, an interval or a cv: the judge computes every statistic with
 * stats/ under the frozen protocol (PROTO: stats.*), applies the ordered
 * gate table (atb_judge_gates), decides whether a noisy measurement is
 * measured again (PROTO: gates.rerun.max_runs) and is the only caller of
 * the store's atb_store_ingest and atb_store_reject, so a refusal's rule,
 * wording of the outcome and detail keys are the same whoever measured.
 *
 * Does not: run anything, read the protocol from disk, or print.  The
 * store re-derives again on insert what SQL can (medians, ratios, speedup,
 * cv) and `atb db check` the rest (the bootstrap interval).
 */
#ifndef ATB_JUDGE_H
#define ATB_JUDGE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "atb/measure.h"
#include "atb/stats.h"
#include "atb/status.h"
#include "atb/store.h"

struct atb_box;

/* Refusals of a recomputed number (ingest-json: a claimed interval). */
#define ATB_GATE_DERIVED "derived"

/* Which producers a gate applies to. */
#define ATB_JUDGE_KERNEL 1u
#define ATB_JUDGE_ENGINE 2u
#define ATB_JUDGE_INGEST 4u

/*
 * One row of the gate table, in the order the gates are applied: id (the
 * rejection rule is "gate:<id>"), the protocol clause it implements, what
 * its test reads and what its refusal's detail carries.
 */
struct atb_judge_gate {
	const char *id;
	const char *protocol_key;
	unsigned producers;   /* ATB_JUDGE_* */
	const char *test;     /* what is judged, in words (docs/internals/gates.md) */
	const char *detail;   /* the keys of the refusal's detail beside the job's */
};

/* The table (static storage) and its length; a row by id, NULL when unknown. */
const struct atb_judge_gate *atb_judge_gates(size_t *n);
const struct atb_judge_gate *atb_judge_gate(const char *id);

/*
 * PROTO: gates.rerun.max_runs -- runs of one measurement at most: the
 * first plus the re-runs a noisy (cv over the cap, drift, throttled)
 * measurement gets.  Version 5 on the key is required; before, 3.
 */
#define ATB_JUDGE_DEFAULT_MAX_RUNS 3
int atb_judge_max_runs(const struct atb_protocol *p);

/*
 * The bootstrap's seed of a measurement whose seeds are seed_base ..
 * seed_base + nseeds - 1: stored in the result's stats (bootstrap_seed),
 * so `atb db check` reproduces the interval.  Below 2^63.
 */
uint64_t atb_judge_bootstrap_seed(uint64_t seed_base, size_t nseeds);

/* One paired seed's raw samples, per arm (enum atb_arm); NULL/0: not run. */
struct atb_judge_seed {
	uint64_t seed;
	const double *v[4];
	size_t n[4];
	/* the trial numbers of v[arm] (NULL: 0 .. n-1 plus trial_base) */
	const int32_t *trial[4];
};

/* The raw facts a result is judged from. */
struct atb_judge_facts {
	const struct atb_judge_seed *seeds; /* in measurement order (the bootstrap's) */
	size_t nseeds;
	uint64_t bootstrap_seed;
	int32_t trial_base;   /* added to implicit trial numbers (engine: the attempt) */
};

/*
 * A judgement in progress: what every refusal of the job carries.  Set
 * the fields, then atb_judge_init; release with atb_judge_release.
 */
struct atb_judge {
	struct atb_store *store;
	const struct atb_protocol *p;
	struct atb_measure_outcome *out; /* verdict, gate, reason, ids: filled here */
	unsigned producer;               /* ATB_JUDGE_* */
	const char *kind;                /* "kernel" | "engine" (the store's job kind) */
	const char *task, *candidate;
	const char *unit, *metric;       /* of the samples: "ns", "time_ns/median" */
	int higher_is_better;            /* 1: rates (req/s); 0: times */
	char fingerprint[65];            /* set by atb_judge_register_box */
	json_t *detail;                  /* keys every refusal's detail starts with (owned) */
	int attempts;                    /* runs so far (1 on the first) */
};

/* Zero-initialised detail; ATB_ERR_NOMEM. */
enum atb_status atb_judge_init(struct atb_judge *j, struct atb_error *err);
void atb_judge_release(struct atb_judge *j);

/*
 * The box the job runs on, registered in the store: fingerprint given (64
 * hex, already registered) is taken as it is; else box's (probed with the
 * protocol's compiler when box is NULL) is registered.
 */
enum atb_status atb_judge_register_box(struct atb_judge *j, const struct atb_box *box,
				       const char *fingerprint, struct atb_error *err);

/*
 * Refuse at gate id (a row of the table; else ATB_ERR_USAGE) with status,
 * a one-line reason and extra detail (stolen; may be NULL): stored as
 * "gate:<id>" with j->detail's keys, the gate's protocol key, and extra;
 * j->out says rejected.  Returns the store's status.
 */
enum atb_status atb_judge_refuse(struct atb_judge *j, const char *gate, enum atb_status status,
				 const char *reason, json_t *extra, struct atb_error *err);

/* The same for a producer with no judgement (suite/: a killed job). */
enum atb_status atb_judge_refuse_job(struct atb_store *s, const char *job_uuid,
				     const char *protocol_digest, const char *gate,
				     enum atb_status status, const char *reason, json_t *detail,
				     int64_t *rejection_id, struct atb_error *err);

/*
 * The paired statistics of the baseline and candidate arms of facts under
 * the protocol (PROTO: stats.ci_level, bootstrap_resamples,
 * significance_alpha, cv_cap, cv_of), or of arm `base` against the
 * candidate (naive, compile: labelled comparisons).  ATB_ERR_USAGE when the
 * samples cannot be compared (err says why).  Caller owns *res.
 */
enum atb_status atb_judge_stats(const struct atb_judge *j, const struct atb_judge_facts *f,
				struct atb_paired_result *res, struct atb_error *err);
enum atb_status atb_judge_stats_of(const struct atb_judge *j, const struct atb_paired_seed *ps,
				   size_t n, uint64_t bootstrap_seed,
				   struct atb_paired_result *res, struct atb_error *err);

/*
 * PROTO: gates.rerun.max_runs -- 1 when another run is allowed after
 * j->attempts runs (the caller measures again and increments attempts).
 */
int atb_judge_rerun(const struct atb_judge *j);

/*
 * The statistics' keys of a result's stats (wilcoxon, p_value, alpha,
 * verdict, mde_ratio, cv_*, ci_level, bootstrap_*, seeds, attempts), set
 * into stats from res: the judge writes them, so db check re-derives the
 * interval from what it stored.
 */
enum atb_status atb_judge_stats_json(const struct atb_judge *j,
				     const struct atb_paired_result *res, json_t *stats,
				     struct atb_error *err);

/*
 * How a producer words the noise gate's refusal from the judge's
 * statistics (the numbers are the judge's; the wording names the
 * producer's quantities: per-seed requests/s, medians in ns).  detail is
 * a new object or NULL.
 */
struct atb_judge_noise {
	void (*words)(void *ctx, const struct atb_paired_result *r, char *reason, size_t size,
		      json_t **detail);
	void *ctx;
};

/*
 * Conclude: the statistics of facts (computed here from the samples,
 * whatever the producer computed before), their keys set into stats
 * (borrowed), the noise gate when noise is not NULL (PROTO: stats.cv_cap:
 * *rerun 1 when atb_judge_rerun allows another run, nothing stored; else
 * refused "noise"), then the ingest of every sample of facts.  j->out:
 * admitted or quarantined (PROTO: gates.anomaly_breaker.factor) with
 * result_id and the statistics, or rejected (gate "validator" for the
 * store's rules).  res (may be NULL) receives the statistics on ATB_OK;
 * caller owns it (atb_stats_paired_release).
 */
enum atb_status atb_judge_conclude(struct atb_judge *j, const struct atb_judge_facts *f,
				   json_t *stats, const struct atb_judge_noise *noise,
				   int *rerun, struct atb_paired_result *res,
				   struct atb_error *err);

/*
 * `atb db ingest-json`: a result handed in as samples.  The judge derives
 * the per-seed medians and ratios, the speedup, cv and interval from
 * in->samples (grouped by seed in first-seen order, the bootstrap seeded
 * by stats.bootstrap_seed or atb_judge_bootstrap_seed).  Numbers the file
 * claims (in->seeds, in->speedup, ... flagged in claimed) that agree with
 * the derivation are kept; any that differ go to the store as claimed,
 * whose rules re-derive them on insert and refuse (store:not_derived);
 * a claimed interval that is not the bootstrap of the samples is refused
 * here (gate "derived": SQL cannot re-draw a bootstrap).  Absent numbers
 * are the derived ones.  The stats keys of atb_judge_stats_json are set.
 */
#define ATB_JUDGE_CLAIM_SEEDS 1u
#define ATB_JUDGE_CLAIM_SPEEDUP 2u
#define ATB_JUDGE_CLAIM_INTERVAL 4u
#define ATB_JUDGE_CLAIM_CV 8u
enum atb_status atb_judge_ingest_samples(struct atb_store *s, const struct atb_protocol *p,
					 struct atb_ingest *in, unsigned claimed,
					 struct atb_ingest_outcome *io, struct atb_error *err);

#endif
