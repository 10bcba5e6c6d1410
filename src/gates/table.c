/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The gate table: every gate a measurement can be refused at, in the order
 * they are applied, with the protocol clause each implements.  A refusal
 * at a gate that is not here is a programming error (atb_judge_refuse
 * says so) rather than a new rule nobody documented.
 *
 * Does not: hold the tests' code (measure/gates.c has the kernel gates'
 * judgements on the runner's facts, judge.c the statistical ones).
 */
#include <string.h>

#include "atb/engine.h"
#include "atb/judge.h"
#include "atb/measure.h"
#include "banned.h"

#define K ATB_JUDGE_KERNEL
#define E ATB_JUDGE_ENGINE
#define I ATB_JUDGE_INGEST

static const struct atb_judge_gate gates[] = {
	/* before anything runs */
	{ATB_GATE_SURFACE, "task.surface", K,
	 "the candidate folder holds only the task's surface files, regular, no links; "
	 "their hashes unchanged after every runner", "candidate_dir"},
	{ATB_GATE_STATIC, "gates.static", K, "torch: python/atb_static.py's findings on the copy",
	 "findings"},
	{ATB_GATE_BUILD, "build", K, "the build's status and log", "what, log_tail"},
	{ATB_GATE_ENGINE_START, "engine.fresh_engine_per_arm", E,
	 "the candidate configuration's engine starts and gets ready", "log_dir"},
	{ATB_GATE_ENGINE_BASELINE, "engine", E,
	 "the default configuration starts, answers and matches itself across restarts",
	 "log_dir, start, seed"},
	{ATB_GATE_OUTPUT_EQUIVALENCE, "engine.output_equivalence", E,
	 "greedy probes of every start against the default's first", "start, seed"},
	/* the runner's facts */
	{ATB_GATE_HANG, "gates.hang", K, "no event for longer than the watchdog allows",
	 "silent_s, limit_s"},
	{ATB_GATE_TAMPER, "gates.tamper", K, "torch: the interpreter watch's tamper event",
	 "event"},
	{ATB_GATE_RUNNER, "timing.job_timeout_s", K, "the runner's outcome and its events",
	 "outcome"},
	{ATB_GATE_CLOCK, "gates.clock", K,
	 "per timed group: the runner's span against the harness's", "groups"},
	{ATB_GATE_BACKGROUND, "gates.background", K,
	 "cpu: other threads' and processes' CPU over each timed group", "event"},
	{ATB_GATE_INPUT_MUTATION, "gates.input_mutation", K, "inputs changed by the candidate",
	 "event"},
	{ATB_GATE_OUTPUT_ALIASING, "gates.output_aliasing", K,
	 "an output overlapping another buffer", "event"},
	{ATB_GATE_RESULT_REUSE, "gates.result_reuse", K,
	 "right on fresh buffers, stale on old ones", "event"},
	{ATB_GATE_CORRECTNESS, "correctness.tolerances", K,
	 "every checked output within the tolerances", "event, candidate_failures"},
	{ATB_GATE_SIDE_STREAM, "gates.side_stream", K, "cuda: work escaping the timed window",
	 "event"},
	{ATB_GATE_ENGINE_DIED, "engine", E, "the engine alive after every load", "log_dir"},
	{ATB_GATE_ENGINE_ERRORS, "engine", E, "no failed request or probe", ""},
	{ATB_GATE_CLIENT_LAG, "engine.client_lag", E,
	 "version 6 on: each arm's client_lag_share against max_share, the arms' shares "
	 "(mean over seeds) against max_arm_difference; versions 1 to 5: an arm's p99 "
	 "dispatch lag against engine.max_dispatch_lag_ms",
	 "arm, seed, client_lag_share, max_share; or client_lag_share_baseline, "
	 "client_lag_share_candidate, difference, max_arm_difference, per_seed"},
	/* the numbers */
	{ATB_GATE_PHYSICAL_FLOOR, "gates.physical_floor.margin", K,
	 "every per-seed candidate median at or over margin x the floor",
	 "floor_ns, margin, seed, candidate_median_ns"},
	{ATB_GATE_TIMED_CORRECTNESS, "gates.timed_correctness", K,
	 "outputs compared after timed rounds", "timed_checks, seed, rounds"},
	{ATB_GATE_BASELINE_DRIFT, "gates.baseline_drift.tolerance", K,
	 "median over seeds of baseline beside / alone within 1 +/- tolerance",
	 "ratio, tolerance, per_seed_medians_ns"},
	{ATB_GATE_NOISE, "stats.cv_cap", K | E,
	 "the cv of the judge's statistics under the cap after gates.rerun.max_runs runs; "
	 "throttled or slow clocks; seeds disagreeing on drift", "cv, cv_cap, attempts"},
	{ATB_GATE_DERIVED, "stats", I,
	 "a claimed interval is the seeded bootstrap of the samples", "claimed, derived"},
	/* in the store: quarantine, not refusal */
	{ATB_GATE_ANOMALY, "gates.anomaly_breaker.factor", K | E | I,
	 "speedup at or over the factor: quarantined for review", ""},
};

const struct atb_judge_gate *atb_judge_gates(size_t *n)
{
	if (n)
		*n = sizeof(gates) / sizeof(gates[0]);
	return gates;
}

const struct atb_judge_gate *atb_judge_gate(const char *id)
{
	size_t i;

	for (i = 0; id && i < sizeof(gates) / sizeof(gates[0]); i++)
		if (!strcmp(gates[i].id, id))
			return &gates[i];
	return NULL;
}
