#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Gate timed_correctness: outputs checked while timed.  Between timed
# rounds the runner changes a few key-chosen input elements of every arm
# and poisons its outputs again; on key-chosen rounds each arm's outputs
# are compared with the reference's of the same round.  A candidate that
# skips work on timed calls, or serves results cached on a sample of its
# inputs, is refused; honest ones are not.  First atb-runner on its own
# (the samples events' timed_checks), then atb measure with planted cheats
# on the relu-spin fixture task, slowed so the floor and the anomaly
# breaker cannot see them.  PROTO: gates.timed_correctness.
. "$(dirname "$0")/lib.sh"

RUNNER=${ATB_RUNNER:-$ATB_BUILD_DIR/atb-runner}
FIX=$ATB_SOURCE_DIR/tests/fixtures/runner
CHEATS=$ATB_SOURCE_DIR/tests/fixtures/cheats
[ -x "$RUNNER" ] || skip_all "no atb-runner at $RUNNER"
command -v jq >/dev/null || skip_all "jq not installed"
command -v cc >/dev/null || skip_all "no C compiler"

for f in relu_ref relu_good relu_skip_timed relu_sample_cache; do
	cc -shared -fPIC -O2 -I"$ATB_SOURCE_DIR/include" -o "$f.so" "$FIX/$f.c" ||
		skip_all "cannot build fixture $f"
done

# run OUT CAND FILTER: the relu job with CAND as the candidate, one set, changed by FILTER.
run() {
	jq -c --arg b "$PWD/relu_ref.so" --arg c "$PWD/$2.so" \
		".arms[0].so=\$b | .arms[1].so=\$c | .sets=[.sets[0]] | .correctness.distributions=[]
		 | .seeds=[1,2] | $3" "$FIX/relu-job.json" | "$RUNNER" >"$1" 2>"$1.err"
}

KEY='.timed_checks={"key":"0123456789abcdef"}'
CAND='select(.event=="samples" and .arm=="candidate")'

test_expect "runner: an honest candidate passes every timed check, at least 2 per seed" '
	run good.ev relu_good "$KEY" &&
	jq -se "[.[] | $CAND] | length == 2 and all(.timed_checks.rounds_checked >= 2
		and .timed_checks.failed == 0 and .timed_checks.reference == false)" good.ev &&
	jq -se "[.[] | select(.event==\"samples\" and .arm==\"baseline\")]
		| all(.timed_checks.reference)" good.ev
'

test_expect "runner: a job without timed_checks has none (jobs from before the gate)" '
	run plain.ev relu_good "." &&
	jq -se "[.[] | select(.event==\"samples\")] | length == 4 and all(has(\"timed_checks\") | not)" plain.ev
'

test_expect "runner: a bad key is refused as a bad job" '
	expect_exit 2 run bad.ev relu_good ".timed_checks={\"key\":\"nothex\"}" &&
	expect_grep "timed_checks.key" bad.ev
'

test_expect "runner: skipping work on timed calls leaves the poison, every checked round fails" '
	run skip.ev relu_skip_timed "$KEY" &&
	jq -se "[.[] | $CAND] | all(.timed_checks.failed == .timed_checks.rounds_checked
		and .timed_checks.failed >= 2 and .timed_checks.nan_count > 0
		and .timed_checks.first_bad.got == null)" skip.ev &&
	jq -se "[.[] | select(.event==\"correctness\")] | all(.pass)" skip.ev
'

test_expect "runner: a cache keyed on sampled inputs serves stale outputs where inputs changed" '
	run cache.ev relu_sample_cache "$KEY" &&
	jq -se "[.[] | $CAND] | all(.timed_checks.failed >= 2 and .timed_checks.nan_count == 0
		and .timed_checks.max_abs_err > 0)" cache.ev &&
	jq -se "[.[] | select(.event==\"correctness\")] | all(.pass)" cache.ev
'

test_expect "runner: another key checks other rounds, the same key the same ones" '
	run k1.ev relu_good "$KEY | .timing.trials_min=40 | .timing.trials_max=40" &&
	run k2.ev relu_good "$KEY | .timing.trials_min=40 | .timing.trials_max=40" &&
	run k3.ev relu_good ".timed_checks={\"key\":\"fedcba9876543210\"} | .timing.trials_min=40
		| .timing.trials_max=40" &&
	a=$(jq -c "$CAND | .timed_checks.rounds_checked" k1.ev) &&
	b=$(jq -c "$CAND | .timed_checks.rounds_checked" k2.ev) &&
	[ "$a" = "$b" ] &&
	# the count alone can tie; the share over 40 rounds is about 1/8 plus the forced 2
	jq -se "[.[] | $CAND] | all(.timed_checks.rounds_checked >= 2 and .timed_checks.rounds_checked <= 20)" k3.ev
'

# ---- atb measure ----------------------------------------------------------------

export ATB_DB=$TRASH/m.db
cp -r "$CHEATS/tasks/relu-spin" task

# refused NAME: measuring candidate folder NAME is refused by timed_correctness.
refused() {
	expect_exit 2 "$ATB" measure --json "$TRASH/task" "$1" --seeds 2 &&
	jq -e '.verdict == "rejected" and .gate == "timed_correctness" and (.rejection_id > 0)' \
		"$TRASH/out" >/dev/null || { cat "$TRASH/out" "$TRASH/err"; return 1; }
}

test_expect "measure: a candidate that skips work on timed calls (2.5x, above the floor) is refused" '
	refused "$CHEATS/relu/skip-timed-slow" &&
	jq -e ".reason | test(\"wrong after timed calls on seed [0-9]+: round [0-9]+ first, [0-9]+ of [0-9]+ checked rounds failed\")" \
		"$TRASH/out" >/dev/null &&
	expect_grep "NaN (unwritten)" "$TRASH/out" &&
	sqlite3 "$ATB_DB" "SELECT detail FROM rejection WHERE rule = '\''gate:timed_correctness'\''" |
		grep -q "rounds_checked"
'

test_expect "measure: a cache keyed on a sample of the inputs is refused" '
	refused "$CHEATS/relu/cache-sample" &&
	jq -e ".reason | test(\"0 NaN, max abs error [0-9.e-]+.; Y.[0-9]+. is [0-9.e-]+, the reference\")" \
		"$TRASH/out" >/dev/null
'

# Two seeds are below stats.min_paired_seeds, so the store's validator
# refuses it after every gate has passed: no gate, timed_correctness
# included, may refuse the honest candidate.  A loaded box can refuse a try
# first (clock, judged before timed_correctness; noise or drift, after it
# but then the try says nothing about the validator): an honest candidate,
# so independent tries (lib.sh).
test_expect "measure: the honest relu-spin candidate passes the gate" '
	expect_gate_past_box validator "$ATB" measure --json "$TRASH/task" \
		"$CHEATS/relu/honest-spin" --seeds 2
'

# The bundled sgemm at its default knobs: the timed checks compare a
# 192 x 192 GEMM with the protocol's reduction tolerance on perturbed inputs.
test_expect "measure: the honest sgemm template passes the gate" '
	mkdir sg && cp "$ATB_SOURCE_DIR/tasks/sgemm/tunable.c" sg/kernel.c &&
	expect_exit 2 "$ATB" measure --json sgemm "$TRASH/sg" --seeds 2;
	jq -e ".gate != \"timed_correctness\" and .gate != \"correctness\"" "$TRASH/out" >/dev/null ||
		{ cat "$TRASH/out" "$TRASH/err"; exit 1; }
'

test_expect "every refusal is in the store and the audit chain verifies" '
	[ "$(sqlite3 "$ATB_DB" "SELECT count(*) FROM rejection WHERE rule = '\''gate:timed_correctness'\''")" = 2 ] &&
	"$ATB" audit verify >/dev/null
'

test_done
