/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The protocol, frozen as code.
 *
 * protocol/ under atb_home() holds one YAML file per frozen version
 * (v1.yaml, v2.yaml, ...) and protocol.lock, which lists every frozen
 * version with the SHA-256 of its canonical form and names the current one.
 * The canonical form is the YAML tree as JSON with sorted keys and no
 * whitespace (util's atbi_json_canonical), so comments, layout and key order
 * do not change the digest and every value does.
 *
 * Loading checks the file against its schema (unknown keys, wrong types,
 * missing fields and out-of-range values are refused with file:line:column
 * and the field path) and, for frozen versions, against the lock.  Older
 * frozen versions stay loadable so old results keep their meaning.
 *
 * Does not: write the lock (except atb_protocol_freeze), or touch the store.
 */
#ifndef ATB_PROTOCOL_H
#define ATB_PROTOCOL_H

#include <stddef.h>

#include "atb/status.h"

#define ATB_PROTOCOL_MAX_DTYPES 16
#define ATB_PROTOCOL_MAX_DISTS 16
#define ATB_PROTOCOL_MAX_FASTP 8
#define ATB_PROTOCOL_MAX_FLAGS 16
#define ATB_PROTOCOL_MAX_USABLE 8

struct atb_tolerance {
	char dtype[16];   /* "fp32", "bf16", ... */
	double atol;
	double rtol;
};

struct atb_distribution {
	char name[48];    /* "signed_uniform" */
	char kind[16];    /* "uniform" | "normal" */
	double low, high; /* uniform */
	double mean, stddev; /* normal */
};

struct atb_protocol {
	int version;
	char digest[65];          /* SHA-256 hex of the canonical form */
	char *canonical_json;     /* owned */
	char *path;               /* file it was loaded from; owned */
	char title[128];

	struct {
		double cv_cap;
		int min_paired_seeds;
		double ci_level;
		int bootstrap_resamples;
		double significance_alpha;
		/*
		 * stats.cv_of (version 2 on): what cv_cap bounds, "per_seed_ratio"
		 * (the CV of the paired per-seed ratios) or "per_seed_medians"
		 * (the larger per-arm CV of per-seed medians, version 1's rule);
		 * "" when absent (version 1).
		 */
		char cv_of[24];
		/*
		 * stats.resolution_rel (version 10 on; 0 when absent): how far a
		 * ratio may be off by what every seed of one measurement shares;
		 * the interval is widened by it (include/atb/stats.h).
		 */
		double resolution_rel;
	} stats;

	struct {
		int warmup_min_iterations;
		double warmup_min_time_ms;
		int trials_min;
		int trials_max;
		char stopping_rule[32];
		double target_rel_halfwidth;
		double max_time_per_seed_s;
		int cache_flush;                 /* bool */
		double cache_flush_factor;
		long long cache_flush_min_bytes;
		/*
		 * timing.cache_flush.cpu_max_bytes (version 6 on; absent:
		 * has_cache_flush_cpu_max 0, no bound): a flush by a CPU timer
		 * (cpu tasks, torch on cpu) writes at most this much.
		 */
		long long cache_flush_cpu_max_bytes;
		int has_cache_flush_cpu_max;
		char interleave[32];
		/* "fixed", "alternate", "shuffled" or "keyed" (runner.h; keyed version 9 on); "" when absent (before version 4: fixed) */
		char placement[16];
		/* "none" or "run_delay" (timing.h: atb_timer_cpu_subtract_preemption);
		 * "" when absent (before version 5: none) */
		char preemption[16];
		/* "none" or "process": where a cpu task's arms run (runner.h,
		 * options.isolation; runner/worker.c); "" when absent (before
		 * version 11: none) */
		char isolation[16];
		/*
		 * timing.round_trip (version 12 on; absent: has_round_trip 0,
		 * none): with isolation process, an empty call to a worker that
		 * loads nothing, timed as an arm's trial after every
		 * round_trip_every-th round; round_trip_subtract: each seed
		 * group's round_trip_quantile-quantile of those is taken out of
		 * every trial (runner.h options.round_trip).
		 */
		int round_trip_every;
		int round_trip_subtract;
		double round_trip_quantile;
		int has_round_trip;
		/*
		 * timing.round_trip.position (version 13 on): "after" (the empty
		 * call after the round's arms; "" when absent, before version 13),
		 * "after_reference" (right after the reference arm's call) or
		 * "keyed" (its place among the round's calls drawn from the job's
		 * placement key); round_trip_max_share_under (version 13
		 * on; -1 when absent: no rule): the largest share of an arm's
		 * trials in a seed group that the subtraction may leave at or
		 * under 0 ns (kept at 1 ns); more, and the group is not resolved
		 * against the round trip: the job is re-run within bounds, then
		 * refused as noise.
		 */
		char round_trip_position[16];
		double round_trip_max_share_under;
		double job_timeout_s;
	} timing;

	struct {
		char cpu_compiler[64];
		char cpu_flags[ATB_PROTOCOL_MAX_FLAGS][64];
		size_t ncpu_flags;
		char cuda_compiler[64];
		char cuda_flags[ATB_PROTOCOL_MAX_FLAGS][64];
		size_t ncuda_flags;
		double timeout_s;
	} build;

	struct {
		int input_sets_per_seed;
		char poison[16];
		struct atb_tolerance tolerances[ATB_PROTOCOL_MAX_DTYPES];
		size_t ntolerances;
		struct atb_distribution distributions[ATB_PROTOCOL_MAX_DISTS];
		size_t ndistributions;
		int odd_shapes;                  /* bool */
		/*
		 * correctness.input_chunk_elements (version 8 on; absent: 0, one
		 * mt19937 stream per input buffer): a buffer of more elements is
		 * drawn in chunks of this many, chunk c > 0 from a stream of its
		 * own, so the runner can draw chunks in parallel.
		 */
		long long input_chunk_elements;
		/*
		 * correctness.reduction_tolerance (version 2 on; absent: has 0).
		 * An output the task marks as a reduction of length K over its
		 * operands also gets factor * g(K) * u * bound_ij, g(K) = sqrt(K)
		 * ("sqrt_length") or K ("length"), u the unit roundoff of the
		 * accumulation dtype (docs/protocol.md).
		 */
		struct {
			int has;
			double factor;
			char growth[16];             /* "sqrt_length" | "length" */
		} reduction;
		/*
		 * correctness.reference_precision (version 14 on; absent: has 0,
		 * no allowance).  The torch backend computes each compared
		 * reference again in float64, and a floating output may also
		 * differ from the reference by factor x the largest |difference|
		 * between the two (docs/protocol.md).
		 */
		struct {
			int has;
			double factor;
			double max_relative;  /* no allowance past this x max|float64| */
		} reference_precision;
	} correctness;

	struct {
		double anomaly_factor;
		double floor_margin;
		/*
		 * gates.physical_floor.cache_allowance (version 4 on; absent: 0,
		 * and the gate uses ATBI_FLOOR_CACHE_ALLOWANCE, 2): a torch
		 * task's floor counts only its outputs' bytes beyond this many
		 * times the caches (an output that fits is written at cache speed)
		 */
		double floor_cache_allowance;
		double drift_tolerance;
		/* gates.throttle.max_share (version 2 on; absent: has_throttle 0) */
		int has_throttle;
		double throttle_max_share;
		/*
		 * gates.clock (version 3 on; absent: has_clock 0, and the gate
		 * uses atbi_clock_tolerance's defaults, 0.05 and 25 ms): the
		 * runner's span of a timed group against the harness's
		 */
		int has_clock;
		double clock_rel_tolerance;
		double clock_abs_slack_ms;
		/* gates.timed_correctness (version 3 on; absent: has_ 0 and the
		 * runner job gets the defaults 0.125, 2, 4) */
		int has_timed_correctness;
		double timed_check_share;
		int timed_min_checks_per_seed;
		int timed_perturb_elements;
		/*
		 * gates.clocks (version 4 on; absent: has_clocks 0, and the GPU's
		 * clock is judged by gates.throttle's NVML reasons as before): the
		 * SM clock read after every timed trial, per arm.  Below
		 * floor_ratio x the GPU's maximum SM clock in more than
		 * max_share_below of the trials, or the arms' mean clocks apart by
		 * more than max_arm_rel_difference: noise.
		 */
		int has_clocks;
		double clocks_floor_ratio;
		double clocks_max_share_below;
		double clocks_max_arm_rel_difference;
		/* gates.hang (version 4 on; absent: has_hang 0 and the watchdog
		 * uses the defaults 120 s, 20 s, 10, 250 ms: measure_int.h) */
		int has_hang;
		double hang_startup_s;
		double hang_min_s;
		double hang_factor;
		int hang_progress_ms;
		/* gates.background (version 4 on; absent: has_background 0 and
		 * the defaults 0.02, 20 ms: measure_int.h) */
		int has_background;
		double background_max_cpu_share;
		double background_abs_slack_ms;
		/* gates.background.torch_cpu (required from version 5; absent:
		 * 0, today's rule: torch tasks' background facts are recorded,
		 * not judged): judge torch tasks on the CPU device too, by the
		 * CPU of the threads PyTorch's pools did not have before any
		 * candidate code (runner/watch.c, untrusted_threads_cpu_ns) */
		int has_background_torch_cpu;
		int background_torch_cpu;   /* bool */
		/* gates.rerun.max_runs (version 5 on; absent: has_rerun 0 and the
		 * judge's default, 3 runs: atb/judge.h) */
		int has_rerun;
		int rerun_max_runs;
		/*
		 * gates.side_stream (version 7 on; absent: has_side_stream 0, and
		 * the timed trials' device wait is recorded, not judged): after
		 * each timed trial's stop event the runner times a context-wide
		 * wait; a candidate whose median wait exceeds the reference's by
		 * more than abs_slack_us and more than rel_tolerance x its median
		 * trial left work running past its timed window (the one probe
		 * per seed and arm before timing is judged in every version).
		 */
		int has_side_stream;
		double side_stream_rel_tolerance;
		double side_stream_abs_slack_us;
	} gates;

	double anchor_band;

	struct {
		double correct_rate_bar;
		double median_speedup_bar;
		double fast_p[ATB_PROTOCOL_MAX_FASTP];
		size_t nfast_p;
	} kernelbench;

	struct {
		int max_output_tokens;
		double truncation_alarm_rate;
		int max_calls_per_iteration;
		double request_timeout_s;
		/*
		 * llm.alarms (version 4 on; absent: has_alarms 0 and the
		 * defaults min_calls 4, empty 0.05, unparsable 0.10, failed
		 * 0.10): a run whose share of such calls is over the rate,
		 * once it has min_calls calls, halts as an infrastructure
		 * defect (truncation uses truncation_alarm_rate)
		 */
		int has_alarms;
		int alarm_min_calls;
		double alarm_empty_rate;
		double alarm_unparsable_rate;
		double alarm_failed_rate;
	} llm;

	struct {
		/* steps an iteration must reach to count as usable, in order */
		char usable_iteration[ATB_PROTOCOL_MAX_USABLE][16];
		size_t nusable_iteration;
	} loop;

	struct {
		char paired_order[16];
		int fresh_engine_per_arm;        /* bool */
		int warmup_requests;
		char output_equivalence[32];
		double max_dispatch_lag_ms;
		/*
		 * engine.client_lag (version 6 on; absent: has_client_lag 0 and
		 * an A/B is refused when an arm's p99 dispatch lag exceeds
		 * max_dispatch_lag_ms, as in versions 1 to 5).  Per arm, the
		 * share of the load's duration by which the client's lateness
		 * can have moved requests/s (open loop: the largest lag; closed
		 * loop: the summed lag over the concurrency) over max_share, or
		 * the arms' shares apart by more than max_arm_difference on the
		 * mean over seeds: the client biased the comparison.
		 */
		int has_client_lag;
		double client_lag_max_share;
		double client_lag_max_arm_difference;
	} engine;
};

/* One entry of protocol.lock. */
struct atb_frozen_protocol {
	int version;
	char digest[65];
	char *file;            /* path of the YAML file; owned */
	char *canonical_json;  /* owned */
};

/*
 * Parse and validate a protocol file; no lock check.  Caller owns *out
 * (atb_protocol_free); *out is NULL on failure.  Errors: ATB_ERR_NOT_FOUND,
 * ATB_ERR_IO, ATB_ERR_PARSE (malformed YAML), ATB_ERR_SCHEMA (unknown key,
 * wrong type, missing field, bad value), each with file:line:column and field.
 */
enum atb_status atb_protocol_load_file(const char *path, struct atb_protocol **out,
				       struct atb_error *err);

/*
 * Load the current frozen protocol (the lock's "current") from
 * home/protocol/, checking its digest against the lock: ATB_ERR_PROTOCOL on
 * a mismatch (the file changed without a new version), when the file's
 * `version:` differs from the lock entry's, when the file is missing or the
 * version is not frozen, and when there is no lock.  home NULL means
 * atb_home().  Caller owns *out (atb_protocol_free); NULL on failure.
 */
enum atb_status atb_protocol_load_current(const char *home, struct atb_protocol **out,
					  struct atb_error *err);

/* As atb_protocol_load_current, for a given frozen version. */
enum atb_status atb_protocol_load_version(const char *home, int version,
					  struct atb_protocol **out, struct atb_error *err);

/* As atb_protocol_load_current, for the frozen version with this digest. */
enum atb_status atb_protocol_load_digest(const char *home, const char *digest,
					 struct atb_protocol **out, struct atb_error *err);

void atb_protocol_free(struct atb_protocol *p);

/*
 * Every frozen version in home/protocol/protocol.lock, each re-read and
 * checked against its digest.  Caller owns *out (atb_protocol_frozen_free).
 */
enum atb_status atb_protocol_frozen_list(const char *home, struct atb_frozen_protocol **out,
					 size_t *n, int *current_version,
					 struct atb_error *err);
void atb_protocol_frozen_free(struct atb_frozen_protocol *list, size_t n);

/*
 * Check every lock entry against its file and that the current version
 * exists: ATB_OK, or ATB_ERR_PROTOCOL naming the first version whose file
 * no longer matches its frozen digest.
 */
enum atb_status atb_protocol_verify(const char *home, struct atb_error *err);

/* Digest of a protocol file's canonical form, without schema checks. */
enum atb_status atb_protocol_digest_file(const char *path, char out[65], struct atb_error *err);

/*
 * Freeze the protocol file at path as the next version: it must pass the
 * schema, its `version:` must be the lock's current + 1, and every existing
 * entry must still verify.  The file is copied to home/protocol/v<N>.yaml
 * (unless it is that file) and the lock gains an entry and names it
 * current; existing entries are never changed.  An absent lock counts as
 * empty (the first freeze writes version 1).  On success *version and
 * digest (both may be NULL) receive the new entry.  Errors: those of
 * atb_protocol_load_file and atb_protocol_verify; ATB_ERR_PROTOCOL for a
 * wrong version or an already-frozen file; ATB_ERR_IO when writing fails.
 */
enum atb_status atb_protocol_freeze(const char *home, const char *path, int *version,
				    char digest[65], struct atb_error *err);

/*
 * The trusted-file manifest, home/protocol/manifest (home NULL: atb_home()):
 * the SHA-256 of every file under home/include, home/tasks and
 * home/engines, every .py
 * under home/python, and protocol/protocol.lock (bytecode and dot-files
 * skipped), one "DIGEST  PATH" line each, sorted (sha256sum's format).
 *
 * atb_protocol_manifest_write (maintainers) writes it from the files as they
 * are; *nfiles (may be NULL) receives the count.  Errors: ATB_ERR_IO,
 * ATB_ERR_NOMEM, ATB_ERR_USAGE (over 8192 files, too deep).
 *
 * atb_protocol_manifest_verify checks the files against it: ATB_OK, or
 * ATB_ERR_PROTOCOL naming the first file (in path order) that changed
 * (both digests), is missing, or is not in the manifest, or when there is
 * no manifest or it is malformed.  Measurement refuses to start on any
 * error.  atb_protocol_manifest_exists: 1 when the file exists.
 */
enum atb_status atb_protocol_manifest_write(const char *home, size_t *nfiles,
					    struct atb_error *err);
enum atb_status atb_protocol_manifest_verify(const char *home, size_t *nfiles,
					     struct atb_error *err);
int atb_protocol_manifest_exists(const char *home);

/* Tolerance for a dtype, or NULL when the protocol has none. */
const struct atb_tolerance *atb_protocol_tolerance(const struct atb_protocol *p,
						   const char *dtype);

#endif
