/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The protocol schema: every key of a protocol file with its type and
 * range, as one table that the validator walks, filling struct
 * atb_protocol.  The first failure is reported as ATB_ERR_SCHEMA with
 * file:line:column of the offending node and the dotted field path.
 *
 * Does not: compute the digest or read the lock (protocol.c, yaml.c).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "atb/alloc.h"
#include "protocol_int.h"
#include "banned.h"

enum fkind {
	F_MAP, F_INT, F_LLONG, F_REAL, F_BOOL, F_STR, F_ENUM,
	F_STRLIST, F_REALLIST, F_ENUMLIST, F_TOLERANCES, F_DISTRIBUTIONS,
};

/* Range flags: which bounds a number has and whether they are open. */
#define R_LO 1u
#define R_LO_OPEN 2u
#define R_HI 4u
#define R_HI_OPEN 8u

#define NOSTORE ((size_t)-1)

struct vctx;

struct field {
	const char *key;
	enum fkind kind;
	size_t off;                     /* into the base struct; NOSTORE.  F_MAP:
					   an int set to 1 once the map passed */
	size_t size;                    /* char array size; list element size */
	unsigned range;
	double lo, hi;
	const char *const *choices;     /* F_ENUM, F_ENUMLIST */
	const struct field *sub;        /* F_MAP */
	size_t count_off;               /* lists: the size_t count */
	size_t max_items;
	int optional;                   /* may be absent (a key added by a later version) */
	/* cross-field check run after a F_MAP's keys are all valid */
	enum atb_status (*after)(struct vctx *c, struct fy_node *map, void *base,
				 const char *path);
};

struct vctx {
	const struct atbi_yaml *y;
	struct atb_error *err;
};

#define OFF(m) offsetof(struct atb_protocol, m)
#define SZ(m) sizeof(((struct atb_protocol *)0)->m)

#define MAP(k, s) {.key = k, .kind = F_MAP, .off = NOSTORE, .sub = s}
#define MAPX(k, s, fn) {.key = k, .kind = F_MAP, .off = NOSTORE, .sub = s, .after = fn}
/* A map a later version added: may be absent; `has` (an int) is 1 once it passed. */
#define OPTMAP(k, s, has) {.key = k, .kind = F_MAP, .off = OFF(has), .sub = s, .optional = 1}
#define INT(k, m, lo_, hi_) \
	{.key = k, .kind = F_INT, .off = OFF(m), .range = R_LO | R_HI, .lo = lo_, .hi = hi_}
#define LLONG(k, m, lo_, hi_) \
	{.key = k, .kind = F_LLONG, .off = OFF(m), .range = R_LO | R_HI, .lo = lo_, .hi = hi_}
/* REAL(key, member, RANGE) where RANGE is flags, lo, hi (e.g. OPEN01) */
#define REAL(k, m, ...) REAL_(k, m, __VA_ARGS__)
#define REAL_(k, m, r, lo_, hi_) \
	{.key = k, .kind = F_REAL, .off = OFF(m), .range = r, .lo = lo_, .hi = hi_}
#define BOOL(k, m) {.key = k, .kind = F_BOOL, .off = OFF(m)}
#define STR(k, m) {.key = k, .kind = F_STR, .off = OFF(m), .size = SZ(m)}
#define END {.key = NULL}

/* (0, 1), [0, 1], > 0, >= 0, > 1 */
#define OPEN01 (R_LO | R_LO_OPEN | R_HI | R_HI_OPEN), 0, 1
#define CLOSED01 (R_LO | R_HI), 0, 1
#define POS (R_LO | R_LO_OPEN), 0, 0
#define NONNEG R_LO, 0, 0
#define ABOVE1 (R_LO | R_LO_OPEN), 1, 0

static const char *const protocol_names[] = {"atb", NULL};
static const char *const clocks[] = {"monotonic", NULL};        /* PROTO: timing.clock */
static const char *const stopping_rules[] = {"median_ci_halfwidth", "fixed", NULL};
static const char *const interleaves[] = {"randomized_pairs", "alternating", "abba", NULL};
static const char *const placements[] = {"fixed", "alternate", "shuffled", "keyed", NULL};
static const char *const preemptions[] = {"none", "run_delay", NULL};
static const char *const isolations[] = {"none", "process", NULL};
static const char *const rt_positions[] = {"after", "after_reference", "keyed", NULL};
static const char *const poisons[] = {"nan", "pattern", NULL};
static const char *const dist_kinds[] = {"uniform", "normal", NULL};
static const char *const usable_steps[] = {"built", "correct", "measured", "admitted", NULL};
static const char *const paired_orders[] = {"ABBA", "ABAB", "randomized", NULL};
static const char *const equivalences[] = {"greedy_token_exact", "greedy_text_exact", NULL};
static const char *const dtypes[] = {
	"fp64", "fp32", "tf32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2",
	"int64", "int32", "int16", "int8", "uint8", "bool", NULL,
};

static enum atb_status trials_after(struct vctx *c, struct fy_node *map, void *base,
				    const char *path);

static const char *const cv_ofs[] = {"per_seed_ratio", "per_seed_medians", NULL};

static const struct field stats_fields[] = {
	REAL("cv_cap", stats.cv_cap, OPEN01),
	/* PROTO: stats.cv_of (version 2 on; optional here, required below) */
	{.key = "cv_of", .kind = F_ENUM, .off = OFF(stats.cv_of), .size = SZ(stats.cv_of),
	 .choices = cv_ofs, .optional = 1},
	INT("min_paired_seeds", stats.min_paired_seeds, 2, 100000),
	REAL("ci_level", stats.ci_level, OPEN01),
	INT("bootstrap_resamples", stats.bootstrap_resamples, 100, 100000000),
	REAL("significance_alpha", stats.significance_alpha, OPEN01),
	/* PROTO: stats.resolution_rel (version 10 on; optional here, required below) */
	{.key = "resolution_rel", .kind = F_REAL, .off = OFF(stats.resolution_rel),
	 .range = R_LO | R_HI | R_HI_OPEN, .lo = 0, .hi = 0.5, .optional = 1},
	END,
};

static const struct field warmup_fields[] = {
	INT("min_iterations", timing.warmup_min_iterations, 0, 1000000),
	REAL("min_time_ms", timing.warmup_min_time_ms, NONNEG),
	END,
};

static const struct field trials_fields[] = {
	INT("min", timing.trials_min, 1, 100000000),
	INT("max", timing.trials_max, 1, 100000000),
	END,
};

static const struct field stopping_fields[] = {
	{.key = "rule", .kind = F_ENUM, .off = OFF(timing.stopping_rule),
	 .size = SZ(timing.stopping_rule), .choices = stopping_rules},
	REAL("target_rel_halfwidth", timing.target_rel_halfwidth, OPEN01),
	REAL("max_time_per_seed_s", timing.max_time_per_seed_s, POS),
	END,
};

static enum atb_status flush_after(struct vctx *c, struct fy_node *map, void *base,
				   const char *path)
{
	(void)c;
	(void)path;
	if (fy_node_mapping_lookup_by_string(map, "cpu_max_bytes", -1))
		((struct atb_protocol *)base)->timing.has_cache_flush_cpu_max = 1;
	return ATB_OK;
}

static const struct field flush_fields[] = {
	BOOL("enabled", timing.cache_flush),
	REAL("factor", timing.cache_flush_factor, ABOVE1),
	LLONG("min_bytes", timing.cache_flush_min_bytes, 0, 1099511627776.0),
	/* PROTO: timing.cache_flush.cpu_max_bytes -- optional: versions 1 to 5
	 * have no such key (no bound); required from version 6 on
	 * (atbi_protocol_validate), at least min_bytes */
	{.key = "cpu_max_bytes", .kind = F_LLONG, .off = OFF(timing.cache_flush_cpu_max_bytes),
	 .range = R_LO | R_HI, .lo = 1048576, .hi = 1099511627776.0, .optional = 1},
	END,
};

/* PROTO: timing.round_trip (version 12 on) -- the arm workers' round trip, timed and taken out */
static const struct field round_trip_fields[] = {
	INT("every_rounds", timing.round_trip_every, 1, 1000),
	BOOL("subtract", timing.round_trip_subtract),
	/* a low quantile, or the median: (0, 0.5] */
	REAL("quantile", timing.round_trip_quantile, R_LO | R_LO_OPEN | R_HI, 0, 0.5),
	/* optional: version 12 has no such keys (after; no rule); required
	 * from version 13 on (atbi_protocol_validate) */
	{.key = "position", .kind = F_ENUM, .off = OFF(timing.round_trip_position),
	 .size = SZ(timing.round_trip_position), .choices = rt_positions, .optional = 1},
	{.key = "max_share_under", .kind = F_REAL, .off = OFF(timing.round_trip_max_share_under),
	 .range = R_LO | R_HI, .lo = 0, .hi = 1, .optional = 1},
	END,
};

static const struct field timing_fields[] = {
	{.key = "clock", .kind = F_ENUM, .off = NOSTORE, .choices = clocks},
	MAP("warmup", warmup_fields),
	MAPX("trials", trials_fields, trials_after),
	MAP("stopping", stopping_fields),
	MAPX("cache_flush", flush_fields, flush_after),
	{.key = "interleave", .kind = F_ENUM, .off = OFF(timing.interleave),
	 .size = SZ(timing.interleave), .choices = interleaves},
	/* optional: versions 1 to 3 have no such key (fixed); required from
	 * version 4 on (atbi_protocol_validate) */
	{.key = "placement", .kind = F_ENUM, .off = OFF(timing.placement),
	 .size = SZ(timing.placement), .choices = placements, .optional = 1},
	/* PROTO: timing.preemption -- optional: versions 1 to 4 have no such
	 * key (none); required from version 5 on (atbi_protocol_validate) */
	{.key = "preemption", .kind = F_ENUM, .off = OFF(timing.preemption),
	 .size = SZ(timing.preemption), .choices = preemptions, .optional = 1},
	/* PROTO: timing.isolation -- optional: versions 1 to 10 have no such
	 * key (none); required from version 11 on (atbi_protocol_validate) */
	{.key = "isolation", .kind = F_ENUM, .off = OFF(timing.isolation),
	 .size = SZ(timing.isolation), .choices = isolations, .optional = 1},
	/* PROTO: timing.round_trip -- optional: versions 1 to 11 have no such
	 * map (none); required from version 12 on (atbi_protocol_validate) */
	OPTMAP("round_trip", round_trip_fields, timing.has_round_trip),
	REAL("job_timeout_s", timing.job_timeout_s, POS),
	END,
};

static const struct field cpu_fields[] = {
	STR("compiler", build.cpu_compiler),
	{.key = "flags", .kind = F_STRLIST, .off = OFF(build.cpu_flags),
	 .size = SZ(build.cpu_flags[0]), .count_off = OFF(build.ncpu_flags),
	 .max_items = ATB_PROTOCOL_MAX_FLAGS},
	END,
};

static const struct field cuda_fields[] = {
	STR("compiler", build.cuda_compiler),
	{.key = "flags", .kind = F_STRLIST, .off = OFF(build.cuda_flags),
	 .size = SZ(build.cuda_flags[0]), .count_off = OFF(build.ncuda_flags),
	 .max_items = ATB_PROTOCOL_MAX_FLAGS},
	END,
};

static const struct field build_fields[] = {
	MAP("cpu", cpu_fields),
	MAP("cuda", cuda_fields),
	REAL("timeout_s", build.timeout_s, POS),
	END,
};

static const char *const growths[] = {"sqrt_length", "length", NULL};

static enum atb_status reduction_after(struct vctx *c, struct fy_node *map, void *base,
				       const char *path)
{
	(void)c;
	(void)map;
	(void)path;
	((struct atb_protocol *)base)->correctness.reduction.has = 1;
	return ATB_OK;
}

/* PROTO: correctness.reduction_tolerance (version 2 on) */
static const struct field reduction_fields[] = {
	REAL("factor", correctness.reduction.factor, POS),
	{.key = "growth", .kind = F_ENUM, .off = OFF(correctness.reduction.growth),
	 .size = SZ(correctness.reduction.growth), .choices = growths},
	END,
};

static enum atb_status ref_precision_after(struct vctx *c, struct fy_node *map, void *base,
					   const char *path)
{
	(void)c;
	(void)map;
	(void)path;
	((struct atb_protocol *)base)->correctness.reference_precision.has = 1;
	return ATB_OK;
}

/* PROTO: correctness.reference_precision (version 14 on) */
static const struct field ref_precision_fields[] = {
	REAL("factor", correctness.reference_precision.factor, POS),
	REAL("max_relative", correctness.reference_precision.max_relative,
	     (R_LO | R_LO_OPEN | R_HI), 0, 1),
	END,
};

static const struct field correctness_fields[] = {
	INT("input_sets_per_seed", correctness.input_sets_per_seed, 1, 1000),
	{.key = "poison", .kind = F_ENUM, .off = OFF(correctness.poison),
	 .size = SZ(correctness.poison), .choices = poisons},
	{.key = "tolerances", .kind = F_TOLERANCES},
	{.key = "distributions", .kind = F_DISTRIBUTIONS},
	BOOL("odd_shapes", correctness.odd_shapes),
	/* PROTO: correctness.input_chunk_elements -- optional: versions 1 to 7
	 * have no such key (one stream per buffer); required from version 8 on
	 * (atbi_protocol_validate) */
	{.key = "input_chunk_elements", .kind = F_LLONG,
	 .off = OFF(correctness.input_chunk_elements), .range = R_LO | R_HI, .lo = 4096,
	 .hi = 1073741824.0, .optional = 1},
	/* optional in the table: version 1 has no such key; required from
	 * version 2 on (atbi_protocol_validate) */
	{.key = "reduction_tolerance", .kind = F_MAP, .off = NOSTORE, .sub = reduction_fields,
	 .after = reduction_after, .optional = 1},
	/* optional in the table: versions 1 to 13 have no such key; required
	 * from version 14 on (atbi_protocol_validate) */
	{.key = "reference_precision", .kind = F_MAP, .off = NOSTORE,
	 .sub = ref_precision_fields, .after = ref_precision_after, .optional = 1},
	END,
};

static const struct field breaker_fields[] = {
	REAL("factor", gates.anomaly_factor, ABOVE1),   /* PROTO: gates.anomaly_breaker */
	END,
};

static const struct field floor_fields[] = {
	REAL("margin", gates.floor_margin, (R_LO | R_LO_OPEN | R_HI), 0, 1),
	/* PROTO: gates.physical_floor.cache_allowance -- optional: versions 1
	 * to 3 have no such key (the gate then uses 2); required from version
	 * 4 on (atbi_protocol_validate) */
	{.key = "cache_allowance", .kind = F_REAL, .off = OFF(gates.floor_cache_allowance),
	 .range = R_LO | R_HI, .lo = 1, .hi = 64, .optional = 1},
	END,
};

static const struct field drift_fields[] = {
	REAL("tolerance", gates.drift_tolerance, (R_LO | R_HI | R_HI_OPEN), 0, 1),
	END,
};

/* PROTO: gates.throttle (version 2 on) */
static const struct field throttle_fields[] = {
	REAL("max_share", gates.throttle_max_share, CLOSED01),
	END,
};

/* PROTO: gates.clock (version 3 on) */
static const struct field clock_fields[] = {
	REAL("rel_tolerance", gates.clock_rel_tolerance, OPEN01),
	REAL("abs_slack_ms", gates.clock_abs_slack_ms, NONNEG),
	END,
};

/* PROTO: gates.clocks (version 4 on) */
static const struct field clocks_fields[] = {
	REAL("floor_ratio", gates.clocks_floor_ratio, OPEN01),
	REAL("max_share_below", gates.clocks_max_share_below, CLOSED01),
	REAL("max_arm_rel_difference", gates.clocks_max_arm_rel_difference, OPEN01),
	END,
};

/* PROTO: gates.timed_correctness (version 3 on) */
static const struct field timed_fields[] = {
	REAL("check_share", gates.timed_check_share, (R_LO | R_LO_OPEN | R_HI), 0, 1),
	INT("min_checks_per_seed", gates.timed_min_checks_per_seed, 0, 64),
	INT("perturb_elements", gates.timed_perturb_elements, 0, 64),
	END,
};

/* PROTO: gates.hang (version 4 on) */
static const struct field hang_fields[] = {
	REAL("startup_s", gates.hang_startup_s, POS),
	REAL("min_s", gates.hang_min_s, POS),
	REAL("factor", gates.hang_factor, POS),
	INT("progress_ms", gates.hang_progress_ms, 1, 60000),
	END,
};

static enum atb_status background_after(struct vctx *c, struct fy_node *map, void *base,
					const char *path)
{
	(void)c;
	(void)path;
	((struct atb_protocol *)base)->gates.has_background = 1;
	if (fy_node_mapping_lookup_by_string(map, "torch_cpu", -1))
		((struct atb_protocol *)base)->gates.has_background_torch_cpu = 1;
	return ATB_OK;
}

/* PROTO: gates.background (version 4 on; torch_cpu required from version 5) */
static const struct field background_fields[] = {
	REAL("max_cpu_share", gates.background_max_cpu_share, CLOSED01),
	REAL("abs_slack_ms", gates.background_abs_slack_ms, NONNEG),
	{.key = "torch_cpu", .kind = F_BOOL, .off = OFF(gates.background_torch_cpu),
	 .optional = 1},
	END,
};

/* PROTO: gates.side_stream (version 7 on) -- the timed trials' device wait */
static const struct field side_stream_fields[] = {
	REAL("rel_tolerance", gates.side_stream_rel_tolerance, OPEN01),
	REAL("abs_slack_us", gates.side_stream_abs_slack_us, NONNEG),
	END,
};

/* PROTO: gates.rerun (version 5 on) -- the judge's re-run bound */
static const struct field rerun_fields[] = {
	INT("max_runs", gates.rerun_max_runs, 1, 10),
	END,
};

static const struct field gates_fields[] = {
	MAP("anomaly_breaker", breaker_fields),
	MAP("physical_floor", floor_fields),
	MAP("baseline_drift", drift_fields),
	/* optional in the table: version 1 has no such key; required from
	 * version 2 on (atbi_protocol_validate) */
	OPTMAP("throttle", throttle_fields, gates.has_throttle),
	/* optional: versions 1 and 2 have no such key; required from
	 * version 3 on (atbi_protocol_validate) */
	OPTMAP("clock", clock_fields, gates.has_clock),
	/* optional: versions 1 and 2 have no such key (the runner job then
	 * gets the defaults); required from version 3 on */
	OPTMAP("timed_correctness", timed_fields, gates.has_timed_correctness),
	/* optional: versions 1 to 3 have no such key (they judge the clock by
	 * NVML's reasons, gates.throttle); required from version 4 on */
	OPTMAP("clocks", clocks_fields, gates.has_clocks),
	/* optional: versions 1 to 3 have no such keys (the defaults hold);
	 * required from version 4 on */
	OPTMAP("hang", hang_fields, gates.has_hang),
	{.key = "background", .kind = F_MAP, .off = NOSTORE, .sub = background_fields,
	 .after = background_after, .optional = 1},
	/* optional: versions 1 to 4 have no such key (the judge's default, 3
	 * runs, holds); required from version 5 on */
	OPTMAP("rerun", rerun_fields, gates.has_rerun),
	/* optional: versions 1 to 6 have no such key (the timed trials' device
	 * wait is recorded, not judged); required from version 7 on */
	OPTMAP("side_stream", side_stream_fields, gates.has_side_stream),
	END,
};

static const struct field anchoring_fields[] = {
	REAL("band", anchor_band, OPEN01),
	END,
};

static const struct field kernelbench_fields[] = {
	REAL("correct_rate_bar", kernelbench.correct_rate_bar, CLOSED01),
	REAL("median_speedup_bar", kernelbench.median_speedup_bar, POS),
	{.key = "fast_p", .kind = F_REALLIST, .off = OFF(kernelbench.fast_p),
	 .size = sizeof(double), .count_off = OFF(kernelbench.nfast_p),
	 .max_items = ATB_PROTOCOL_MAX_FASTP, .range = R_LO, .lo = 0},
	END,
};

/* PROTO: llm.alarms (version 4 on) */
static const struct field alarm_fields[] = {
	INT("min_calls", llm.alarm_min_calls, 1, 1000000),
	REAL("empty_rate", llm.alarm_empty_rate, CLOSED01),
	REAL("unparsable_rate", llm.alarm_unparsable_rate, CLOSED01),
	REAL("failed_rate", llm.alarm_failed_rate, CLOSED01),
	END,
};

static const struct field llm_fields[] = {
	INT("max_output_tokens", llm.max_output_tokens, 1, 100000000),
	REAL("truncation_alarm_rate", llm.truncation_alarm_rate, CLOSED01),
	INT("max_calls_per_iteration", llm.max_calls_per_iteration, 1, 1000),
	REAL("request_timeout_s", llm.request_timeout_s, POS),
	/* optional: versions 1 to 3 have no such key (the defaults in
	 * atb/protocol.h apply); required from version 4 on */
	OPTMAP("alarms", alarm_fields, llm.has_alarms),
	END,
};

static const struct field loop_fields[] = {
	{.key = "usable_iteration", .kind = F_ENUMLIST, .off = OFF(loop.usable_iteration),
	 .size = SZ(loop.usable_iteration[0]), .count_off = OFF(loop.nusable_iteration),
	 .max_items = ATB_PROTOCOL_MAX_USABLE, .choices = usable_steps},
	END,
};

/* PROTO: engine.client_lag (version 6 on) -- the A/B's client lag rule */
static const struct field client_lag_fields[] = {
	REAL("max_share", engine.client_lag_max_share, OPEN01),
	REAL("max_arm_difference", engine.client_lag_max_arm_difference, OPEN01),
	END,
};

static const struct field engine_fields[] = {
	{.key = "paired_order", .kind = F_ENUM, .off = OFF(engine.paired_order),
	 .size = SZ(engine.paired_order), .choices = paired_orders},
	BOOL("fresh_engine_per_arm", engine.fresh_engine_per_arm),
	INT("warmup_requests", engine.warmup_requests, 0, 1000000),
	{.key = "output_equivalence", .kind = F_ENUM, .off = OFF(engine.output_equivalence),
	 .size = SZ(engine.output_equivalence), .choices = equivalences},
	REAL("max_dispatch_lag_ms", engine.max_dispatch_lag_ms, POS),
	/* optional: versions 1 to 5 have no such key (an arm's p99 dispatch
	 * lag over max_dispatch_lag_ms refuses, as before); required from
	 * version 6 on (atbi_protocol_validate) */
	OPTMAP("client_lag", client_lag_fields, engine.has_client_lag),
	END,
};

static const struct field root_fields[] = {
	{.key = "protocol", .kind = F_ENUM, .off = NOSTORE, .choices = protocol_names},
	INT("version", version, 1, 1000000),
	STR("title", title),
	MAP("stats", stats_fields),
	MAP("timing", timing_fields),
	MAP("build", build_fields),
	MAP("correctness", correctness_fields),
	MAP("gates", gates_fields),
	MAP("anchoring", anchoring_fields),
	MAP("kernelbench", kernelbench_fields),
	MAP("llm", llm_fields),
	MAP("loop", loop_fields),
	MAP("engine", engine_fields),
	END,
};

/* Entries of correctness.tolerances.<dtype> and correctness.distributions[i]. */
#define TOFF(m) offsetof(struct atb_tolerance, m)
#define DOFF(m) offsetof(struct atb_distribution, m)

static const struct field tolerance_fields[] = {
	{.key = "atol", .kind = F_REAL, .off = TOFF(atol), .range = R_LO, .lo = 0},
	{.key = "rtol", .kind = F_REAL, .off = TOFF(rtol), .range = R_LO, .lo = 0},
	END,
};

static const struct field uniform_fields[] = {
	{.key = "name", .kind = F_STR, .off = DOFF(name), .size = sizeof(((struct atb_distribution *)0)->name)},
	{.key = "kind", .kind = F_ENUM, .off = DOFF(kind), .size = sizeof(((struct atb_distribution *)0)->kind),
	 .choices = dist_kinds},
	{.key = "low", .kind = F_REAL, .off = DOFF(low)},
	{.key = "high", .kind = F_REAL, .off = DOFF(high)},
	END,
};

static const struct field normal_fields[] = {
	{.key = "name", .kind = F_STR, .off = DOFF(name), .size = sizeof(((struct atb_distribution *)0)->name)},
	{.key = "kind", .kind = F_ENUM, .off = DOFF(kind), .size = sizeof(((struct atb_distribution *)0)->kind),
	 .choices = dist_kinds},
	{.key = "mean", .kind = F_REAL, .off = DOFF(mean)},
	{.key = "stddev", .kind = F_REAL, .off = DOFF(stddev), .range = R_LO | R_LO_OPEN, .lo = 0},
	END,
};

static enum atb_status fail_at(struct vctx *c, struct fy_node *n, unsigned line,
			       unsigned col, const char *path, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));

static enum atb_status fail_at(struct vctx *c, struct fy_node *n, unsigned line,
			       unsigned col, const char *path, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	atbi_yaml_mark(n, &line, &col);
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return atb_error_set_at(c->err, ATB_ERR_SCHEMA, c->y->path, line, col, path,
				"%s", msg);
}

/* What a node is, for "got ..." in messages. */
static void describe_got(struct fy_node *n, char *buf, size_t size)
{
	const char *s;
	size_t len = 0;

	if (!n) {
		snprintf(buf, size, "nothing");
	} else if (fy_node_is_mapping(n)) {
		snprintf(buf, size, "a mapping");
	} else if (fy_node_is_sequence(n)) {
		snprintf(buf, size, "a sequence");
	} else {
		s = fy_node_get_scalar(n, &len);
		if (!s)
			s = "";
		snprintf(buf, size, "%s'%.*s%s'",
			 fy_node_get_style(n) == FYNS_PLAIN ? "" : "the quoted string ",
			 len > 60 ? 60 : (int)len, s, len > 60 ? "..." : "");
	}
}

static void fmt_num(char *buf, size_t size, double v)
{
	snprintf(buf, size, "%.10g", v);
}

/* "a number in (0, 1)", "an integer >= 1", "a number" */
static void describe_want(const struct field *f, char *buf, size_t size)
{
	const char *what = (f->kind == F_INT || f->kind == F_LLONG) ? "an integer" : "a number";
	char lo[32], hi[32];

	fmt_num(lo, sizeof(lo), f->lo);
	fmt_num(hi, sizeof(hi), f->hi);
	if ((f->range & R_LO) && (f->range & R_HI))
		snprintf(buf, size, "%s in %c%s, %s%c", what, (f->range & R_LO_OPEN) ? '(' : '[',
			 lo, hi, (f->range & R_HI_OPEN) ? ')' : ']');
	else if (f->range & R_LO)
		snprintf(buf, size, "%s %s %s", what, (f->range & R_LO_OPEN) ? ">" : ">=", lo);
	else if (f->range & R_HI)
		snprintf(buf, size, "%s %s %s", what, (f->range & R_HI_OPEN) ? "<" : "<=", hi);
	else
		snprintf(buf, size, "%s", what);
}

static int in_range(const struct field *f, double v)
{
	if (f->range & R_LO) {
		if ((f->range & R_LO_OPEN) ? !(v > f->lo) : !(v >= f->lo))
			return 0;
	}
	if (f->range & R_HI) {
		if ((f->range & R_HI_OPEN) ? !(v < f->hi) : !(v <= f->hi))
			return 0;
	}
	return 1;
}

static void describe_choices(const char *const *ch, char *buf, size_t size)
{
	size_t n = 0;
	int w;

	buf[0] = '\0';
	for (; *ch && n < size; ch++) {
		w = snprintf(buf + n, size - n, "%s'%s'", n ? ", " : "", *ch);
		if (w < 0)
			break;
		n += (size_t)w;
	}
}

static int choice_index(const char *const *ch, const char *s, size_t len)
{
	int i;

	for (i = 0; ch[i]; i++)
		if (strlen(ch[i]) == len && !memcmp(ch[i], s, len))
			return i;
	return -1;
}

static enum atb_status check_map(struct vctx *c, struct fy_node *map,
				 const struct field *fields, void *base, const char *path,
				 unsigned line, unsigned col);

/* One scalar element: number, bool, string or enum; stored at dst. */
static enum atb_status check_scalar(struct vctx *c, const struct field *f, enum fkind kind,
				    struct fy_node *n, void *dst, size_t size,
				    const char *path, unsigned line, unsigned col)
{
	struct atbi_scalar sc;
	char want[256], got[128];
	enum atb_status st;

	if (kind == F_INT || kind == F_LLONG || kind == F_REAL)
		describe_want(f, want, sizeof(want));
	else if (kind == F_BOOL)
		snprintf(want, sizeof(want), "true or false");
	else if (kind == F_ENUM) {
		char ch[200];

		describe_choices(f->choices, ch, sizeof(ch));
		snprintf(want, sizeof(want), "one of %s", ch);
	} else
		snprintf(want, sizeof(want), "a string");
	describe_got(n, got, sizeof(got));
	if (!n || !fy_node_is_scalar(n))
		return fail_at(c, n, line, col, path, "expected %s, got %s", want, got);
	st = atbi_yaml_scalar(c->y, n, path, &sc, c->err);
	if (st)
		return st;
	switch (kind) {
	case F_INT:
	case F_LLONG:
		if (sc.type != ATBI_SCALAR_INT || !in_range(f, (double)sc.i))
			return fail_at(c, n, line, col, path, "expected %s, got %s", want, got);
		if (dst && kind == F_INT)
			*(int *)dst = (int)sc.i;
		else if (dst)
			*(long long *)dst = sc.i;
		return ATB_OK;
	case F_REAL:
		if ((sc.type != ATBI_SCALAR_INT && sc.type != ATBI_SCALAR_REAL) ||
		    !in_range(f, sc.d))
			return fail_at(c, n, line, col, path, "expected %s, got %s", want, got);
		if (dst)
			*(double *)dst = sc.d;
		return ATB_OK;
	case F_BOOL:
		if (sc.type != ATBI_SCALAR_BOOL)
			return fail_at(c, n, line, col, path, "expected %s, got %s", want, got);
		if (dst)
			*(int *)dst = sc.b;
		return ATB_OK;
	case F_ENUM:
		if (sc.type != ATBI_SCALAR_STRING || choice_index(f->choices, sc.text, sc.len) < 0)
			return fail_at(c, n, line, col, path, "expected %s, got %s", want, got);
		break;
	default:
		if (sc.type != ATBI_SCALAR_STRING || !sc.len || memchr(sc.text, '\0', sc.len))
			return fail_at(c, n, line, col, path, "expected a non-empty string, got %s",
				       got);
		if (dst && sc.len >= size)
			return fail_at(c, n, line, col, path,
				       "expected a string of at most %zu characters, got %s",
				       size - 1, got);
		break;
	}
	if (dst) {
		memcpy(dst, sc.text, sc.len);
		((char *)dst)[sc.len] = '\0';
	}
	return ATB_OK;
}

static struct fy_node *map_get(struct fy_node *map, const char *key, struct fy_node **keynode)
{
	struct fy_node_pair *pair;
	void *it = NULL;
	size_t len;
	const char *s;

	while ((pair = fy_node_mapping_iterate(map, &it))) {
		s = fy_node_get_scalar(fy_node_pair_key(pair), &len);
		if (s && len == strlen(key) && !memcmp(s, key, len)) {
			if (keynode)
				*keynode = fy_node_pair_key(pair);
			return fy_node_pair_value(pair);
		}
	}
	return NULL;
}

static enum atb_status check_list(struct vctx *c, const struct field *f, struct fy_node *n,
				  void *base, const char *path, unsigned line, unsigned col)
{
	enum fkind ek = f->kind == F_STRLIST ? F_STR : f->kind == F_REALLIST ? F_REAL : F_ENUM;
	char got[128], sub[256];
	struct fy_node *item;
	void *it = NULL;
	size_t i = 0, count;
	enum atb_status st;

	describe_got(n, got, sizeof(got));
	if (!n || !fy_node_is_sequence(n))
		return fail_at(c, n, line, col, path, "expected a sequence, got %s", got);
	count = (size_t)fy_node_sequence_item_count(n);
	if (count < 1 || count > f->max_items)
		return fail_at(c, n, line, col, path,
			       "expected a sequence of 1 to %zu items, got %zu", f->max_items,
			       count);
	while ((item = fy_node_sequence_iterate(n, &it))) {
		char *dst = (char *)base + f->off + i * f->size;

		atbi_path_index(sub, sizeof(sub), path, i);
		st = check_scalar(c, f, ek, item, dst, f->size, sub, line, col);
		if (st)
			return st;
		if (ek == F_ENUM) {
			size_t j;

			for (j = 0; j < i; j++)
				if (!strcmp((char *)base + f->off + j * f->size, dst))
					return fail_at(c, item, line, col, sub,
						       "duplicate item '%s'", dst);
		}
		i++;
	}
	*(size_t *)((char *)base + f->count_off) = i;
	return ATB_OK;
}

static enum atb_status check_tolerances(struct vctx *c, struct fy_node *n,
					struct atb_protocol *p, const char *path,
					unsigned line, unsigned col)
{
	struct fy_node_pair *pair;
	void *it = NULL;
	char got[128], sub[256], ch[400];
	enum atb_status st;

	describe_got(n, got, sizeof(got));
	if (!n || !fy_node_is_mapping(n) || fy_node_mapping_item_count(n) < 1)
		return fail_at(c, n, line, col, path,
			       "expected a mapping of dtype to {atol, rtol}, got %s", got);
	if ((size_t)fy_node_mapping_item_count(n) > ATB_PROTOCOL_MAX_DTYPES)
		return fail_at(c, n, line, col, path, "too many dtypes, at most %d",
			       ATB_PROTOCOL_MAX_DTYPES);
	p->correctness.ntolerances = 0;
	while ((pair = fy_node_mapping_iterate(n, &it))) {
		struct fy_node *kn = fy_node_pair_key(pair);
		struct atb_tolerance *t = &p->correctness.tolerances[p->correctness.ntolerances];
		unsigned kl = line, kc = col;
		const char *ks;
		size_t klen = 0;

		ks = fy_node_get_scalar(kn, &klen);
		if (!ks)
			ks = "";
		atbi_path_key(sub, sizeof(sub), path, ks, klen);
		atbi_yaml_mark(kn, &kl, &kc);
		if (choice_index(dtypes, ks, klen) < 0) {
			describe_choices(dtypes, ch, sizeof(ch));
			return fail_at(c, kn, line, col, sub,
				       "unknown dtype '%.*s'; expected one of %s",
				       klen > 60 ? 60 : (int)klen, ks, ch);
		}
		memcpy(t->dtype, ks, klen);
		t->dtype[klen] = '\0';
		st = check_map(c, fy_node_pair_value(pair), tolerance_fields, t, sub, kl, kc);
		if (st)
			return st;
		p->correctness.ntolerances++;
	}
	return ATB_OK;
}

static enum atb_status check_distributions(struct vctx *c, struct fy_node *n,
					   struct atb_protocol *p, const char *path,
					   unsigned line, unsigned col)
{
	struct fy_node *item;
	void *it = NULL;
	char got[128], sub[256], sub2[256];
	size_t count, i = 0, j;
	enum atb_status st;

	describe_got(n, got, sizeof(got));
	if (!n || !fy_node_is_sequence(n))
		return fail_at(c, n, line, col, path, "expected a sequence, got %s", got);
	count = (size_t)fy_node_sequence_item_count(n);
	if (count < 1 || count > ATB_PROTOCOL_MAX_DISTS)
		return fail_at(c, n, line, col, path,
			       "expected a sequence of 1 to %d items, got %zu",
			       ATB_PROTOCOL_MAX_DISTS, count);
	while ((item = fy_node_sequence_iterate(n, &it))) {
		struct atb_distribution *d = &p->correctness.distributions[i];
		struct fy_node *kind, *high;
		const struct field *fields;
		unsigned il = line, ic = col;

		atbi_path_index(sub, sizeof(sub), path, i);
		atbi_yaml_mark(item, &il, &ic);
		describe_got(item, got, sizeof(got));
		if (!fy_node_is_mapping(item))
			return fail_at(c, item, line, col, sub, "expected a mapping, got %s", got);
		kind = map_get(item, "kind", NULL);
		atbi_path_key(sub2, sizeof(sub2), sub, "kind", 4);
		if (!kind)
			return fail_at(c, item, line, col, sub2, "missing field 'kind'");
		st = check_scalar(c, &uniform_fields[1], F_ENUM, kind, d->kind, sizeof(d->kind),
				  sub2, il, ic);
		if (st)
			return st;
		fields = !strcmp(d->kind, "uniform") ? uniform_fields : normal_fields;
		st = check_map(c, item, fields, d, sub, il, ic);
		if (st)
			return st;
		if (fields == uniform_fields && !(d->low < d->high)) {
			char lo[32];

			high = map_get(item, "high", NULL);
			atbi_path_key(sub2, sizeof(sub2), sub, "high", 4);
			describe_got(high, got, sizeof(got));
			fmt_num(lo, sizeof(lo), d->low);
			return fail_at(c, high, line, col, sub2,
				       "expected a number > low (%s), got %s", lo, got);
		}
		for (j = 0; j < i; j++)
			if (!strcmp(p->correctness.distributions[j].name, d->name)) {
				atbi_path_key(sub2, sizeof(sub2), sub, "name", 4);
				return fail_at(c, map_get(item, "name", NULL), line, col, sub2,
					       "duplicate distribution name '%s'", d->name);
			}
		i++;
	}
	p->correctness.ndistributions = i;
	return ATB_OK;
}

static enum atb_status trials_after(struct vctx *c, struct fy_node *map, void *base,
				    const char *path)
{
	struct atb_protocol *p = base;
	char sub[256], got[128];

	if (p->timing.trials_min <= p->timing.trials_max)
		return ATB_OK;
	atbi_path_key(sub, sizeof(sub), path, "max", 3);
	describe_got(map_get(map, "max", NULL), got, sizeof(got));
	return fail_at(c, map_get(map, "max", NULL), 0, 0, sub,
		       "expected an integer >= %s.min (%d), got %s", path,
		       p->timing.trials_min, got);
}

static enum atb_status check_map(struct vctx *c, struct fy_node *map,
				 const struct field *fields, void *base, const char *path,
				 unsigned line, unsigned col)
{
	struct fy_node_pair *pair;
	void *it = NULL;
	unsigned long long seen = 0;
	char got[128], sub[256];
	enum atb_status st;
	size_t i;

	describe_got(map, got, sizeof(got));
	if (!map || !fy_node_is_mapping(map))
		return fail_at(c, map, line, col, path, "expected a mapping, got %s", got);
	/* a missing field is reported at the key that holds this mapping */
	if (!path[0])
		atbi_yaml_mark(map, &line, &col);
	while ((pair = fy_node_mapping_iterate(map, &it))) {
		struct fy_node *kn = fy_node_pair_key(pair), *vn = fy_node_pair_value(pair);
		const struct field *f = NULL;
		unsigned kl = line, kc = col;
		const char *ks;
		size_t klen = 0;

		ks = fy_node_get_scalar(kn, &klen);
		if (!ks)
			ks = "";
		atbi_path_key(sub, sizeof(sub), path, ks, klen);
		atbi_yaml_mark(kn, &kl, &kc);
		for (i = 0; fields[i].key; i++)
			if (strlen(fields[i].key) == klen && !memcmp(fields[i].key, ks, klen)) {
				f = &fields[i];
				break;
			}
		if (!f)
			return fail_at(c, kn, line, col, sub, "unknown key '%.*s'",
				       klen > 60 ? 60 : (int)klen, ks);
		seen |= 1ull << i;
		switch (f->kind) {
		case F_MAP:
			st = check_map(c, vn, f->sub, base, sub, kl, kc);
			if (!st && f->off != NOSTORE)
				*(int *)(void *)((char *)base + f->off) = 1;
			if (!st && f->after)
				st = f->after(c, vn, base, sub);
			break;
		case F_STRLIST:
		case F_REALLIST:
		case F_ENUMLIST:
			st = check_list(c, f, vn, base, sub, kl, kc);
			break;
		case F_TOLERANCES:
			st = check_tolerances(c, vn, base, sub, kl, kc);
			break;
		case F_DISTRIBUTIONS:
			st = check_distributions(c, vn, base, sub, kl, kc);
			break;
		default:
			st = check_scalar(c, f, f->kind, vn,
					  f->off == NOSTORE ? NULL : (char *)base + f->off,
					  f->size, sub, kl, kc);
			break;
		}
		if (st)
			return st;
	}
	for (i = 0; fields[i].key; i++)
		if (!(seen & (1ull << i)) && !fields[i].optional) {
			atbi_path_key(sub, sizeof(sub), path, fields[i].key, strlen(fields[i].key));
			return atb_error_set_at(c->err, ATB_ERR_SCHEMA, c->y->path, line, col, sub,
						"missing field '%s'", fields[i].key);
		}
	return ATB_OK;
}

/*
 * A key version `since` requires is missing: the error at section `sec`'s
 * mark (the file's start when the section is absent), naming field.
 */
static enum atb_status missing_since(const struct atbi_yaml *y, const char *sec,
				     const char *field, const char *key, int since,
				     struct atb_error *err)
{
	unsigned line = 1, col = 1;
	struct fy_node *n = fy_node_mapping_lookup_by_string(y->root, sec, -1);

	if (n)
		atbi_yaml_mark(n, &line, &col);
	return atb_error_set_at(err, ATB_ERR_SCHEMA, y->path, line, col, field,
				"missing field '%s' (required from version %d)", key, since);
}

enum atb_status atbi_protocol_validate(const struct atbi_yaml *y, struct atb_protocol *p,
				       struct atb_error *err)
{
	struct vctx c = {y, err};
	enum atb_status st;

	if (!y->root)
		return atb_error_set_at(err, ATB_ERR_SCHEMA, y->path, 1, 1, NULL,
					"empty protocol file; expected a mapping");
	st = check_map(&c, y->root, root_fields, p, "", 1, 1);
	if (!st && p->version >= 2 && !p->correctness.reduction.has)
		return missing_since(y, "correctness", "correctness.reduction_tolerance", "reduction_tolerance", 2, err);
	if (!st && p->version >= 2 && !p->stats.cv_of[0])
		return missing_since(y, "stats", "stats.cv_of", "cv_of", 2, err);
	if (!st && p->version >= 2 && !p->gates.has_throttle)
		return missing_since(y, "gates", "gates.throttle", "throttle", 2, err);
	if (!st && p->version >= 3 && !p->gates.has_clock)
		return missing_since(y, "gates", "gates.clock", "clock", 3, err);
	if (!st && p->version >= 4 && !(p->gates.floor_cache_allowance > 0))
		return missing_since(y, "gates", "gates.physical_floor.cache_allowance", "cache_allowance", 4, err);
	if (!st && p->version >= 3 && !p->gates.has_timed_correctness)
		return missing_since(y, "gates", "gates.timed_correctness", "timed_correctness", 3, err);
	if (!st && p->version >= 4 && (!p->gates.has_clocks || !p->timing.placement[0])) {
		unsigned line = 1, col = 1;
		const char *sec = !p->gates.has_clocks ? "gates" : "timing";
		struct fy_node *gn = fy_node_mapping_lookup_by_string(y->root, sec, -1);

		if (gn)
			atbi_yaml_mark(gn, &line, &col);
		return atb_error_set_at(err, ATB_ERR_SCHEMA, y->path, line, col,
					!p->gates.has_clocks ? "gates.clocks" : "timing.placement",
					"missing field '%s' (required from version 4)",
					!p->gates.has_clocks ? "clocks" : "placement");
	}
	if (!st && p->version >= 4 && (!p->gates.has_hang || !p->gates.has_background)) {
		unsigned line = 1, col = 1;
		struct fy_node *gn = fy_node_mapping_lookup_by_string(y->root, "gates", -1);

		if (gn)
			atbi_yaml_mark(gn, &line, &col);
		return atb_error_set_at(err, ATB_ERR_SCHEMA, y->path, line, col,
					p->gates.has_hang ? "gates.background" : "gates.hang",
					"missing field '%s' (required from version 4)",
					p->gates.has_hang ? "background" : "hang");
	}
	if (!st && p->version >= 5 && !p->gates.has_background_torch_cpu)
		return missing_since(y, "gates", "gates.background.torch_cpu", "torch_cpu", 5, err);
	if (!st && p->version >= 5 && !p->timing.preemption[0])
		return missing_since(y, "timing", "timing.preemption", "preemption", 5, err);
	if (!st && p->version >= 5 && !p->gates.has_rerun)
		return missing_since(y, "gates", "gates.rerun", "rerun", 5, err);
	if (!st && p->version >= 6 && !p->timing.has_cache_flush_cpu_max)
		return missing_since(y, "timing", "timing.cache_flush.cpu_max_bytes", "cpu_max_bytes", 6, err);
	if (!st && p->timing.has_cache_flush_cpu_max &&
	    p->timing.cache_flush_cpu_max_bytes < p->timing.cache_flush_min_bytes) {
		unsigned line = 1, col = 1;
		struct fy_node *tn = fy_node_mapping_lookup_by_string(y->root, "timing", -1);

		if (tn)
			atbi_yaml_mark(tn, &line, &col);
		return atb_error_set_at(err, ATB_ERR_SCHEMA, y->path, line, col,
					"timing.cache_flush.cpu_max_bytes",
					"cpu_max_bytes %lld is below min_bytes %lld",
					p->timing.cache_flush_cpu_max_bytes,
					p->timing.cache_flush_min_bytes);
	}
	if (!st && p->version >= 6 && !p->engine.has_client_lag)
		return missing_since(y, "engine", "engine.client_lag", "client_lag", 6, err);
	if (!st && p->version >= 7 && !p->gates.has_side_stream)
		return missing_since(y, "gates", "gates.side_stream", "side_stream", 7, err);
	if (!st && p->version >= 10) {
		struct fy_node *sn = fy_node_mapping_lookup_by_string(y->root, "stats", -1);

		if (!sn || !fy_node_mapping_lookup_by_string(sn, "resolution_rel", -1))
			return missing_since(y, "stats", "stats.resolution_rel", "resolution_rel", 10,
					     err);
	}
	if (!st && p->version >= 11 && !p->timing.isolation[0])
		return missing_since(y, "timing", "timing.isolation", "isolation", 11, err);
	if (!st && p->version >= 12 && !p->timing.has_round_trip)
		return missing_since(y, "timing", "timing.round_trip", "round_trip", 12, err);
	if (!st && p->version >= 13 && !p->timing.round_trip_position[0])
		return missing_since(y, "timing", "timing.round_trip.position", "position", 13, err);
	if (!st && p->version >= 13 && !(p->timing.round_trip_max_share_under >= 0))
		return missing_since(y, "timing", "timing.round_trip.max_share_under",
				     "max_share_under", 13, err);
	if (!st && p->version >= 14 && !p->correctness.reference_precision.has)
		return missing_since(y, "correctness", "correctness.reference_precision",
				     "reference_precision", 14, err);
	if (!st && p->version >= 8 && !p->correctness.input_chunk_elements)
		return missing_since(y, "correctness", "correctness.input_chunk_elements",
				     "input_chunk_elements", 8, err);
	if (!st && p->version >= 4 && !p->llm.has_alarms)
		return missing_since(y, "llm", "llm.alarms", "alarms", 4, err);
	return st;
}
