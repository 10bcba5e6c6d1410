#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# correctness.input_sets_per_seed in atb-runner: each (seed, set) gets the
# task's own inputs plus input_sets_per_seed - 1 adversarial distributions,
# rotated over the job's seeds so that every distribution is used; too few
# seeds fall back to every distribution; result reuse is checked once per
# (seed, set, arm).  The planted relu identity and static result cache are
# still caught with 2 seeds.  PROTO: correctness.input_sets_per_seed,
# correctness.distributions; gates result_reuse.
. "$(dirname "$0")/lib.sh"

RUNNER=${ATB_RUNNER:-$ATB_BUILD_DIR/atb-runner}
FIX=$ATB_SOURCE_DIR/tests/fixtures/runner
[ -x "$RUNNER" ] || skip_all "no atb-runner at $RUNNER"
command -v jq >/dev/null || skip_all "jq not installed"
command -v cc >/dev/null || skip_all "no C compiler"

for f in relu_ref relu_good relu_identity relu_cache; do
	cc -shared -fPIC -O2 -I"$ATB_SOURCE_DIR/include" -o "$f.so" "$FIX/$f.c" ||
		skip_all "cannot build fixture $f"
done

# The protocol's four distributions, 3 input sets per seed (v1 and v2).
FOUR='.correctness.distributions += [{"name": "tiny_magnitude", "kind": "uniform", "low": -0.001, "high": 0.001}]
	| .correctness.input_sets_per_seed = 3 | .options = {"skip_timing": true}'

# run CANDIDATE FILTER: the relu job, with FILTER applied, into CANDIDATE.ev.
run() {
	jq -c --arg b "$PWD/relu_ref.so" --arg c "$PWD/$1.so" \
		".arms[0].so=\$b | .arms[1].so=\$c | $2" "$FIX/relu-job.json" >"$1.job" &&
	"$RUNNER" <"$1.job" >"$1.ev" 2>"$1.err"
}

# q FILE JQ: jq over every event of FILE, slurped.
q() { jq -se "$2" "$1" >/dev/null || { echo "failed: $2"; jq -c 'select(.event!="samples")' "$1" | head -20; return 1; }; }

test_expect "2 seeds, 3 input sets a seed: task plus two distributions by rotation" '
	run relu_good "$FOUR | .seeds = [11, 12]" &&
	q relu_good.ev "map(select(.event==\"env\"))[0].correctness_inputs
		== {\"input_sets_per_seed\": 3, \"rule\": \"rotation\", \"distributions_per_seed\": 2}" &&
	q relu_good.ev "[.[] | select(.event==\"correctness\")] | length == 12" &&
	q relu_good.ev "[.[] | select(.event==\"correctness\" and .seed==11) | .input] | unique
		== [\"normal\", \"signed_uniform\", \"task\"]" &&
	q relu_good.ev "[.[] | select(.event==\"correctness\" and .seed==12) | .input] | unique
		== [\"large_magnitude\", \"task\", \"tiny_magnitude\"]" &&
	q relu_good.ev "map(select(.event==\"done\"))[0] | .correctness_failures == 0 and .correctness_ns > 0"
'

test_expect "every distribution is used across the seeds (4 seeds, 2 sets a seed)" '
	run relu_good "$FOUR | .correctness.input_sets_per_seed = 2 | .seeds = [5, 6, 7, 8]" &&
	q relu_good.ev "[.[] | select(.event==\"correctness\") | .input] | unique
		== [\"large_magnitude\", \"normal\", \"signed_uniform\", \"task\", \"tiny_magnitude\"]" &&
	q relu_good.ev "[.[] | select(.event==\"correctness\" and .seed==7) | .input] | unique
		== [\"large_magnitude\", \"task\"]"
'

test_expect "too few seeds to use every distribution: every distribution on every seed" '
	run relu_good "$FOUR | .seeds = [9]" &&
	q relu_good.ev "map(select(.event==\"env\"))[0].correctness_inputs.rule == \"all\"" &&
	q relu_good.ev "[.[] | select(.event==\"correctness\" and .set==\"n4096\")] | length == 5"
'

test_expect "without the key (older jobs) every distribution runs on every seed" '
	run relu_good ".options = {\"skip_timing\": true}" &&
	q relu_good.ev "map(select(.event==\"env\"))[0].correctness_inputs
		== {\"input_sets_per_seed\": null, \"rule\": \"all\", \"distributions_per_seed\": 3}" &&
	q relu_good.ev "[.[] | select(.event==\"correctness\")] | length == 24"
'

test_expect "result reuse is checked once per seed and set, on the first input set" '
	run relu_good "$FOUR | .seeds = [11, 12]" &&
	q relu_good.ev "[.[] | select(.event==\"correctness\" and .gates.result_reuse.checked)]
		| length == 4 and all(.input == \"task\")" &&
	q relu_good.ev "[.[] | select(.event==\"correctness\")]
		| all(.gates.result_reuse.checked_on == \"task\" and .gates.result_reuse.follows_inputs)"
'

test_expect "the relu identity is still caught with 2 seeds" '
	run relu_identity "$FOUR | .seeds = [1, 2]" &&
	q relu_identity.ev "[.[] | select(.event==\"correctness\" and .input==\"task\")] | all(.pass)" &&
	q relu_identity.ev "[.[] | select(.event==\"correctness\" and .input!=\"task\")]
		| length == 8 and all(.pass | not)" &&
	q relu_identity.ev "map(select(.event==\"done\"))[0].correctness_failures == 8"
'

test_expect "a static result cache is still caught with 2 seeds" '
	run relu_cache "$FOUR | .seeds = [1, 2]" &&
	q relu_cache.ev "[.[] | select(.event==\"correctness\" and .gates.result_reuse.checked)]
		| length == 4 and all(.gates.result_reuse.follows_inputs | not)"
'

test_expect "a job with no checked arm (reference and baseline_alone) runs no correctness" '
	run relu_good "$FOUR | .seeds = [1, 2] | .arms[1].name = \"baseline_alone\"" &&
	q relu_good.ev "[.[] | select(.event==\"correctness\")] | length == 0" &&
	q relu_good.ev "map(select(.event==\"done\"))[0].correctness_events == 0"
'

test_expect "a bad input_sets_per_seed is refused with its field" '
	jq -c ".correctness.input_sets_per_seed = 0" "$FIX/relu-job.json" >bad.job &&
	expect_exit 2 sh -c "\"$RUNNER\" <bad.job >bad.ev" &&
	q bad.ev "map(select(.event==\"error\"))[0] | .reason == \"bad_job\"
		and (.message | test(\"correctness.input_sets_per_seed\"))"
'

test_done
