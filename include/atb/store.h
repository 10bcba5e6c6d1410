/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The results store: one SQLite file whose schema IS the ingest validator.
 *
 * Every protocol rule that a stored row must obey (paired seeds, frozen
 * protocol digest, known box, baseline measured in the same job, CV cap,
 * anomaly breaker, no duplicate seeds, finite positive values, append-only
 * rows, a linked audit chain) is a CHECK constraint or a BEFORE trigger, so
 * the database refuses a forbidden row whoever writes it, the sqlite3 shell
 * included.  Refusals carry "atb-rule:<rule_id>: <explanation>"; the rule ids
 * are the suffixes of the ATB_REJECTED_* status names (paired_seeds, ...).
 *
 * atb_store_ingest() is the one writer of measurements: one transaction per
 * job (job, raw samples, per-seed results, result, audit entry).  A refused
 * ingest is rolled back and recorded as a rejection row with its reason.
 * Rows are never updated or deleted; a review adds a row.
 *
 * Does not: compute statistics (stats/ does), load the protocol from disk
 * (the caller passes frozen protocols in), or print.
 */
#ifndef ATB_STORE_H
#define ATB_STORE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "atb/protocol.h"
#include "atb/status.h"

#define ATB_STORE_SCHEMA_VERSION 4
/* The oldest schema this atb opens: read-only as it is, migrated to the
 * current one on the first read-write open. */
#define ATB_STORE_SCHEMA_OLDEST 2
/* PRAGMA application_id of every atb store: "atb1" in ASCII. */
#define ATB_STORE_APPLICATION_ID 0x61746231
/* How long a write waits for another process's lock before ATB_ERR_LOCKED. */
#define ATB_STORE_BUSY_TIMEOUT_MS 1000

struct atb_store;

enum atb_store_mode {
	ATB_STORE_READ_ONLY = 0,  /* reporting; the store must exist */
	ATB_STORE_READ_WRITE = 1, /* the store must exist */
	ATB_STORE_CREATE = 2,     /* read-write; create the schema if absent (atomically) */
};

/*
 * Open the store at path.  Before anything is written the file is checked
 * read-only: ATB_ERR_NOT_A_STORE ("'x' is not an atb store") for a non-SQLite
 * file or another application_id, ATB_ERR_STORE_NEWER for a newer schema,
 * ATB_ERR_NOT_FOUND when it does not exist (except ATB_STORE_CREATE),
 * ATB_ERR_LOCKED when another process holds it.  A read-write open also
 * recovers the audit mirror after a crash (see atb/audit.h), and rolls back
 * a hot journal a killed writer left (a read-only one refuses it,
 * ATB_ERR_STORE).  ATB_STORE_CREATE builds a new store as "<path>.creating"
 * and renames it into place, so a kill at any point leaves no store or a
 * complete one; it refuses (ATB_ERR_AUDIT) to start a new store beside an
 * audit mirror left from a removed one.
 * Caller owns *out (atb_store_close); *out is NULL on failure.
 */
enum atb_status atb_store_open(const char *path, enum atb_store_mode mode,
			       struct atb_store **out, struct atb_error *err);
void atb_store_close(struct atb_store *s);

/* The store's file path and its audit mirror's ("<db>.audit.jsonl"). */
const char *atb_store_path(const struct atb_store *s);
const char *atb_store_mirror_path(const struct atb_store *s);

/*
 * Insert every frozen protocol of list that the store lacks (one audit entry
 * "protocol.frozen" each, in a transaction each; a conflict anywhere in list
 * is found before any is inserted).  Each entry's digest must be the SHA-256 of its
 * canonical_json; a version or digest already stored with other content is
 * ATB_ERR_PROTOCOL.  *added (may be NULL) counts the new rows.
 */
enum atb_status atb_store_sync_protocols(struct atb_store *s,
					 const struct atb_frozen_protocol *list,
					 size_t n, size_t *added,
					 struct atb_error *err);

/*
 * Register a machine: fingerprint is 64 lowercase hex, description_json a
 * JSON object (stored canonical).  Registering a known fingerprint again is
 * ATB_OK and changes nothing.
 */
enum atb_status atb_store_register_box(struct atb_store *s, const char *fingerprint,
				       const char *description_json,
				       struct atb_error *err);

/*
 * Box capabilities (the physical floor's memory bandwidth and peak): one
 * measured value of kind (e.g. "cpu_mem_bw_bytes_per_s",
 * "cpu_peak_flops_per_s"; 1-63 of [a-z0-9_]) for a registered box, with how
 * it was measured.  Rows are append-only; the latest row per (fingerprint,
 * kind) is the one in force.  A put adds an audit entry "box.capability".
 * Errors: ATB_ERR_USAGE (bad kind, value not finite and positive),
 * ATB_REJECTED_NO_BOX (box not registered), ATB_ERR_STORE, ATB_ERR_IO.
 */
#define ATB_CAPABILITY_CPU_MEM_BW "cpu_mem_bw_bytes_per_s"
#define ATB_CAPABILITY_CPU_PEAK_FLOPS "cpu_peak_flops_per_s"
enum atb_status atb_store_capability_put(struct atb_store *s, const char *fingerprint,
					 const char *kind, double value, const char *method,
					 struct atb_error *err);
/*
 * The latest value of kind for the box into *value (method, when not NULL,
 * receives how it was measured, cut to method_size).  ATB_ERR_NOT_FOUND
 * when the box has none; ATB_ERR_STORE.
 */
enum atb_status atb_store_capability_get(struct atb_store *s, const char *fingerprint,
					 const char *kind, double *value, char *method,
					 size_t method_size, struct atb_error *err);

enum atb_arm {
	ATB_ARM_BASELINE = 0,       /* the honest baseline, same job, same box */
	ATB_ARM_CANDIDATE = 1,
	ATB_ARM_NAIVE = 2,          /* a naive starting point, reported beside */
	ATB_ARM_BASELINE_ALONE = 3, /* baseline timed alone (drift gate) */
};

/* "baseline", "candidate", "naive", "baseline_alone". */
const char *atb_arm_name(enum atb_arm arm);

/* One raw per-trial measurement (a time in ns, or a rate). */
struct atb_sample {
	int64_t seed;
	int32_t trial;
	enum atb_arm arm;
	double value;
};

/* One paired seed: the per-arm medians and their ratio (>1: candidate better). */
struct atb_seed_result {
	int64_t seed;
	double baseline_median;
	double candidate_median;
	double ratio;
};

/* A measured job with its result, as the harness hands it to the store. */
struct atb_ingest {
	const char *job_uuid;         /* NULL: a fresh random id */
	const char *kind;             /* "kernel" | "engine" */
	const char *task;
	const char *candidate;
	const char *protocol_digest;  /* must be frozen in the store */
	const char *box_fingerprint;  /* must be registered */
	const char *unit;             /* of sample values: "ns", "req/s", ... */
	const char *metric;           /* e.g. "time_ns/median" */
	const struct atb_sample *samples;
	size_t nsamples;
	const struct atb_seed_result *seeds;
	size_t nseeds;
	const char *baseline_job_uuid; /* NULL: this job (the only one allowed) */
	double speedup;               /* geometric mean of the seeds' ratios */
	double ci_low, ci_high;
	double cv;                    /* cross-run CV of per-seed medians */
	const char *stats_json;       /* JSON object with more statistics; NULL: {} */
};

struct atb_ingest_outcome {
	char job_uuid[65];
	int64_t job_id;       /* 0 when refused */
	int64_t result_id;    /* 0 when refused */
	int64_t rejection_id; /* > 0 when refused and recorded */
	int64_t audit_seq;    /* the ingest's (or rejection's) audit entry */
	int quarantined;      /* speedup >= the protocol's anomaly factor */
};

/*
 * Store one job and its result in one transaction.  The result's status is
 * "quarantined" when speedup >= the frozen protocol's
 * $.gates.anomaly_breaker.factor, else "admitted" (the schema re-checks).
 * On a validator refusal the transaction is rolled back, a rejection row
 * with the rule and reason is stored in a new transaction, and the rule's
 * ATB_REJECTED_* status is returned with the reason in err.  Other errors:
 * ATB_ERR_USAGE (missing fields), ATB_ERR_LOCKED, ATB_ERR_STORE, ATB_ERR_IO
 * (the audit mirror), ATB_ERR_NOMEM.  out may be NULL.
 */
enum atb_status atb_store_ingest(struct atb_store *s, const struct atb_ingest *in,
				 struct atb_ingest_outcome *out, struct atb_error *err);

/*
 * Record a job refused before ingest (build failure, correctness, timeout):
 * rule like "gate:correctness", status the refusal's status, reason one
 * line, detail_json NULL or a JSON object.  job_uuid may be NULL;
 * protocol_digest (64 hex: the protocol the job was judged under, frozen or
 * not) is stored in the row's protocol_digest column and is required
 * (schema 3: ATB_REJECTED_MALFORMED without it).
 * Secrets in reason/detail are redacted.  *rejection_id may be NULL.
 */
enum atb_status atb_store_reject(struct atb_store *s, const char *job_uuid,
				 const char *protocol_digest, const char *rule,
				 enum atb_status status,
				 const char *reason, const char *detail_json,
				 int64_t *rejection_id, struct atb_error *err);

/*
 * A human decision on a quarantined result: decision "admit" or "reject".
 * Adds a review row and an audit entry; ATB_REJECTED_REVIEW when the result
 * does not exist or is not quarantined.  *review_id may be NULL.
 */
enum atb_status atb_store_review(struct atb_store *s, int64_t result_id,
				 const char *decision, const char *reviewer,
				 const char *reason, int64_t *review_id,
				 struct atb_error *err);

/*
 * Append one audit entry of kind ([a-z0-9_.:-]+) with payload_json (a JSON
 * object; secrets redacted) in its own transaction.  *seq may be NULL.
 */
enum atb_status atb_store_audit_event(struct atb_store *s, const char *kind,
				      const char *payload_json, int64_t *seq,
				      struct atb_error *err);

/* A stored result, for reports. */
struct atb_result_row {
	int64_t id;
	char job_uuid[65];
	char kind[8];
	char *task;        /* owned by the array */
	char *candidate;   /* owned by the array */
	char metric[64];
	int64_t n_seeds;
	double speedup, ci_low, ci_high, cv;
	char status[16];   /* "admitted" | "quarantined" */
	char review[8];    /* latest review decision, "" when none */
	char protocol_digest[65];
	char box_fingerprint[65];
	char created[40];
};

/* Every result, oldest first.  Caller owns *rows (atb_store_results_free). */
enum atb_status atb_store_list_results(struct atb_store *s, struct atb_result_row **rows,
				       size_t *n, struct atb_error *err);
void atb_store_results_free(struct atb_result_row *rows, size_t n);

/*
 * One result with its statistics, as a new JSON object into *out:
 * {"id", "job_uuid", "kind", "metric", "n_seeds", "speedup", "ci_low",
 * "ci_high", "cv", "status", "stats"}, where "stats" is the result's stats
 * column parsed (the object its writer stored: for an engine result the
 * keys of atb/engine.h, e.g. "requests_per_s" and "latency").  The row's
 * numbers are the stored ones, not recomputed.  Caller owns *out
 * (json_decref); *out is NULL on failure.  Errors: ATB_ERR_USAGE (id <= 0),
 * ATB_ERR_NOT_FOUND "no result ID in store 'PATH'", ATB_ERR_STORE (SQLite,
 * or stats that are not a JSON object), ATB_ERR_NOMEM.
 */
enum atb_status atb_store_result_stats(struct atb_store *s, int64_t result_id, json_t **out,
				       struct atb_error *err);

struct atb_rejection_row {
	int64_t id;
	char job_uuid[65]; /* "" when none */
	char rule[64];
	int status;
	char *reason;      /* owned by the array */
	char created[40];
};

/* Every rejection, oldest first.  Caller owns *rows (atb_store_rejections_free). */
enum atb_status atb_store_list_rejections(struct atb_store *s, struct atb_rejection_row **rows,
					  size_t *n, struct atb_error *err);
void atb_store_rejections_free(struct atb_rejection_row *rows, size_t n);

/*
 * Runs of the tuning loop (atb run) and their iterations.  A run row holds
 * the plan (task, proposer, seed, planned iterations, paired seeds per
 * measurement, naive on/off), the protocol digest it runs under and the box
 * it runs on; one iteration row per finished iteration, written in one
 * transaction with its audit entry, so an interrupted iteration leaves no
 * row and is redone.  The schema refuses an iteration out of order, beyond
 * the plan, or "usable" without an admitted result of its own job
 * (PROTO: loop.usable_iteration).  Append-only like every table.
 */
#define ATB_RUN_ID_MAX 65

struct atb_run_row {
	char id[ATB_RUN_ID_MAX];     /* 1-64 of [0-9a-zA-Z-] */
	char task[128];              /* the task's name */
	char proposer[32];           /* "random" */
	int64_t seed;
	int64_t iterations;          /* planned */
	int64_t paired_seeds;        /* per measurement */
	int naive;                   /* 1: the naive baseline is timed too */
	char protocol_digest[65];
	char box_fingerprint[65];
	char created[40];            /* filled by the store */
	/* Filled by atb_store_get_run / atb_store_list_runs: */
	int64_t done;                /* iteration rows stored */
	int64_t usable;              /* of which usable */
};

/*
 * Store a new run (its created time is set here) with an audit entry
 * "run".  Errors: ATB_ERR_USAGE (missing fields), the validator's
 * ATB_REJECTED_* (run id taken: append_only; protocol not frozen; box not
 * registered), ATB_ERR_LOCKED, ATB_ERR_STORE, ATB_ERR_IO, ATB_ERR_NOMEM.
 */
enum atb_status atb_store_add_run(struct atb_store *s, const struct atb_run_row *run,
				  struct atb_error *err);

/* One run by id into *out: ATB_ERR_NOT_FOUND "no run 'ID' in store 'PATH'". */
enum atb_status atb_store_get_run(struct atb_store *s, const char *id, struct atb_run_row *out,
				  struct atb_error *err);

/* Every run, oldest first.  Caller owns *rows (atb_free); NULL when none. */
enum atb_status atb_store_list_runs(struct atb_store *s, struct atb_run_row **rows, size_t *n,
				    struct atb_error *err);

/* One finished iteration.  0 / "" / NULL mean "none" for the optional fields. */
struct atb_iteration_row {
	char run[ATB_RUN_ID_MAX];
	int64_t k;                   /* 0-based; rows are stored in order */
	char *knobs_json;            /* a JSON object {"NAME": "VALUE", ..., "cflags": ""} */
	char outcome[64];            /* "usable" or why not: a gate id, "quarantined", ... */
	int usable;
	char job_uuid[65];
	int64_t result_id;           /* > 0 when a result was ingested */
	int64_t rejection_id;        /* > 0 when a rejection was stored */
	/* vs the honest baseline; 0 when not measured */
	double speedup, ci_low, ci_high;
	/* vs the naive baseline, labelled; 0 when not measured */
	double naive_speedup, naive_ci_low, naive_ci_high;
	char *reason;                /* one line; may be NULL */
	double wall_s;               /* build + measurement wall time */
	char created[40];            /* filled by the store */
};

/*
 * Store one iteration row with an audit entry "iteration", in one
 * transaction.  When result_id > 0 the stored speedup and interval are
 * taken from that result (the schema checks they match).  Errors:
 * ATB_ERR_USAGE, the validator's ATB_REJECTED_* (out of order, beyond the plan, usable without an admitted
 * result: malformed; a k already stored: append_only), ATB_ERR_LOCKED,
 * ATB_ERR_STORE, ATB_ERR_IO, ATB_ERR_NOMEM.
 */
enum atb_status atb_store_add_iteration(struct atb_store *s, const struct atb_iteration_row *it,
					struct atb_error *err);

/*
 * The medians over a stored result's paired seeds of the per-seed baseline
 * and candidate medians (ns per call for a kernel): what a proposer's
 * history shows beside the speedup.  Errors: ATB_ERR_NOT_FOUND (no such
 * result, or no seeds), ATB_ERR_STORE, ATB_ERR_NOMEM.
 */
enum atb_status atb_store_result_medians(struct atb_store *s, int64_t result_id,
					 double *baseline, double *candidate,
					 struct atb_error *err);

/*
 * The physical floor a stored result was judged against (its stats' "floor":
 * PROTO: gates.physical_floor): the bytes and flops one call must move and
 * do, the box's rates the gate used, and the two times they give.
 */
struct atb_result_floor {
	double bytes, flops;                  /* per call; 0 when the task gives none */
	double mem_bw_bytes_per_s, peak_flops_per_s;
	double memory_ns, compute_ns;         /* bytes / bandwidth, flops / peak; 0: none */
	double floor_ns;                      /* the larger: what the gate compared */
};

/*
 * A stored result's floor into *out (zeroed first).  Errors:
 * ATB_ERR_NOT_FOUND (no such result, or a result without a floor: the task
 * gives no bytes or flops, or the box has no rates), ATB_ERR_STORE.
 */
enum atb_status atb_store_result_floor(struct atb_store *s, int64_t result_id,
				       struct atb_result_floor *out, struct atb_error *err);

/*
 * The iterations of run, in order.  Caller owns *rows
 * (atb_store_iterations_free: the strings are owned by the array).
 */
enum atb_status atb_store_list_iterations(struct atb_store *s, const char *run,
					  struct atb_iteration_row **rows, size_t *n,
					  struct atb_error *err);
void atb_store_iterations_free(struct atb_iteration_row *rows, size_t n);

/*
 * A registered box's description (canonical JSON object) into *out; caller
 * owns it (atb_free).  ATB_ERR_NOT_FOUND when the box is not registered.
 */
enum atb_status atb_store_get_box(struct atb_store *s, const char *fingerprint, char **out,
				  struct atb_error *err);

/* The version of a frozen protocol digest: ATB_ERR_NOT_FOUND when not frozen here. */
enum atb_status atb_store_protocol_version(struct atb_store *s, const char *digest,
					   int *version, struct atb_error *err);

#define ATB_STORE_NTABLES 12

struct atb_store_info {
	int schema_version;
	const char *tables[ATB_STORE_NTABLES]; /* static names */
	int64_t rows[ATB_STORE_NTABLES];
	int nprotocols;
	int protocol_versions[16];
	char protocol_digests[16][65];
	int nboxes;
	char box_fingerprints[16][65]; /* the first 16 */
};

/* Schema version, row counts per table, protocols and boxes. */
enum atb_status atb_store_info(struct atb_store *s, struct atb_store_info *info,
			       struct atb_error *err);

/* One problem found by atb_store_check. */
struct atb_store_finding {
	char rule[32];     /* a rule id, "schema", "integrity" or "audit" */
	char table[24];    /* "" when not about a row */
	int64_t row;       /* rowid / seq, 0 when none */
	char what[512];
};

/*
 * Re-verify the whole store: SQLite's integrity_check, the schema objects
 * (a dropped or altered trigger is found), every validator rule over every
 * row with SQL queries (so rows that got in while triggers were dropped are
 * found), frozen protocol digests, and the audit chain of both copies.
 * ATB_OK when clean, ATB_ERR_CHECK with the findings otherwise (the first
 * 1000 are kept in *found, *nkept of them; *nfound counts all).  Caller owns
 * *found (atb_free; NULL when none).  Works on a read-only store.
 */
enum atb_status atb_store_check(struct atb_store *s, struct atb_store_finding **found,
				size_t *nkept, size_t *nfound, struct atb_error *err);

#endif
