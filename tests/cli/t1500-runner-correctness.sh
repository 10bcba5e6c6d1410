#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# atb-runner's correctness facts on real processes with planted cheats:
# honest, wrong, partial write (NaN poison), input mutation, static result
# cache (result reuse), relu identity (signed distributions), a kernel that
# prints to stdout, and refused jobs.  PROTO: correctness.poison,
# correctness.distributions, correctness.odd_shapes; gates input_mutation,
# result_reuse.
. "$(dirname "$0")/lib.sh"

RUNNER=${ATB_RUNNER:-$ATB_BUILD_DIR/atb-runner}
FIX=$ATB_SOURCE_DIR/tests/fixtures/runner
[ -x "$RUNNER" ] || skip_all "no atb-runner at $RUNNER"
command -v jq >/dev/null || skip_all "jq not installed"
command -v cc >/dev/null || skip_all "no C compiler"

for f in "$FIX"/*.c; do
	cc -shared -fPIC -O2 -I"$ATB_SOURCE_DIR/include" -o "$(basename "$f" .c).so" "$f" ||
		skip_all "cannot build fixture $f"
done

# ev_check FILE SELECT TEST: some event matches SELECT, and every one that does passes TEST.
ev_check() {
	jq -se "[.[] | select($2)] | length > 0 and all($3)" "$1" >/dev/null ||
		{ echo "no event in $1 with ($2) satisfies ($3):"; jq -c "select($2)" "$1" | head -5; return 1; }
}

# job CANDIDATE [jq filter]: the relu job with the given candidate.
job() {
	jq -c --arg b "$PWD/relu_ref.so" --arg c "$PWD/$1.so" \
		".arms[0].so=\$b | .arms[1].so=\$c | ${2:-.}" "$FIX/relu-job.json"
}

# run_job CANDIDATE [filter]: events into CANDIDATE.ev, exit status checked 0.
run_job() {
	job "$@" | "$RUNNER" >"$1.ev" 2>"$1.err"
}

test_expect "honest candidate passes every input set and is timed on every seed" '
	run_job relu_good &&
	[ "$(jq -s "map(select(.event==\"hello\")) | length" relu_good.ev)" = 1 ] &&
	[ "$(jq -s "map(select(.event==\"correctness\")) | length" relu_good.ev)" = 24 ] &&
	[ "$(jq -s "map(select(.event==\"correctness\" and .pass==false)) | length" relu_good.ev)" = 0 ] &&
	[ "$(jq -s "map(select(.event==\"samples\")) | length" relu_good.ev)" = 6 ] &&
	for s in 1 2 3; do for a in baseline candidate; do
		n=$(jq -s "map(select(.event==\"samples\" and .seed==$s and .arm==\"$a\"))[0].trials" relu_good.ev)
		[ "$n" -ge 10 ] || exit 1
	done; done &&
	ev_check relu_good.ev ".event==\"done\"" ".timing==\"done\" and .correctness_failures==0" &&
	# the diagnostic split of the correctness phase: every part present, none
	# negative, their sum within the phase (the rest is events and bookkeeping)
	ev_check relu_good.ev ".event==\"done\"" "(.correctness_parts_ns | keys) ==
		[\"arm\", \"compare\", \"gen\", \"hash\", \"reference\", \"reuse\"] and
		all(.correctness_parts_ns[]; . >= 0) and .correctness_parts_ns.gen > 0 and
		.correctness_parts_ns.arm > 0 and .correctness_parts_ns.reuse > 0 and
		([.correctness_parts_ns[]] | add) <= .correctness_ns"
'

test_expect "env reports clock, affinity, each arm's sha-256 and the flush size" '
	ev_check relu_good.ev ".event==\"env\"" ".clock==\"CLOCK_MONOTONIC\" and .clock_resolution_ns>0
		and (.cpu_affinity|length)>0 and .flush_bytes==262144 and .cache_bytes==65536
		and (.arms|length)==2" &&
	want=$(sha256sum relu_good.so | cut -d" " -f1) &&
	jq -se --arg h "$want" "map(select(.event==\"env\"))[0].arms[1].sha256==\$h" relu_good.ev
'

test_expect "a wrong kernel fails with its first bad index and timing is skipped" '
	run_job relu_wrong &&
	ev_check relu_wrong.ev ".event==\"correctness\" and .seed==1 and .input==\"task\" and .set==\"n4096\"" ".pass==false and .first_bad.index==0 and .max_abs_err>0" &&
	ev_check relu_wrong.ev ".event==\"done\"" ".timing==\"skipped_incorrect\"" &&
	! grep -q "\"event\":\"samples\"" relu_wrong.ev
'

test_expect "a kernel leaving half its output unwritten fails on the NaN poison" '
	run_job relu_partial &&
	ev_check relu_partial.ev ".event==\"correctness\" and .set==\"n4096\" and .seed==1 and .input==\"task\"" ".pass==false and .nan_count==2048 and .first_bad.index==2048"
'

test_expect "a kernel writing into its input is reported as input mutation" '
	run_job relu_mutate &&
	ev_check relu_mutate.ev ".event==\"correctness\" and .seed==1 and .input==\"task\" and .set==\"n4096\"" ".pass==true and .gates.input_mutation.mutated==[\"x\"]" &&
	ev_check relu_mutate.ev ".event==\"done\"" ".correctness_failures==24"
'

test_expect "a static result cache is caught by the result-reuse check" '
	run_job relu_cache &&
	ev_check relu_cache.ev ".event==\"correctness\" and .seed==1 and .input==\"task\" and .set==\"n4096\"" ".pass==true and .gates.result_reuse.checked==true
		  and .gates.result_reuse.follows_inputs==false" &&
	ev_check relu_cache.ev ".event==\"correctness\" and .seed==1 and .input==\"task\" and .set==\"n4096\"" ".gates.result_reuse.failed_step==\"same_buffers_new_inputs\""
'

# The failed step's mismatch is in the event (how far off, not only where):
# the pointer cache hands back A's result for B, errors of the values' size.
test_expect "a failed reuse step carries its mismatch; a passed one null" '
	ev_check relu_cache.ev ".event==\"correctness\" and .seed==1 and .input==\"task\" and .set==\"n4096\"" \
		".gates.result_reuse.failed_step_error.bad_count > 0 and
		 .gates.result_reuse.failed_step_error.max_abs_err > 0.01 and
		 .gates.result_reuse.failed_step_error.first_bad.buffer == \"y\"" &&
	run_job relu_good &&
	ev_check relu_good.ev ".event==\"correctness\" and .gates.result_reuse.checked" \
		".gates.result_reuse.failed_step_error == null"
'

# PROTO: gates result_reuse -- a kernel wrong on the second inputs in fresh
# buffers too is wrong, not a cache: one element a set, so a seed's first
# inputs are right and its second ones wrong often enough in six seeds.
test_expect "precision loss wrong on the reuse inputs is filed as correctness, not reuse" '
	job relu_lossy ".sets=[{\"name\":\"n1\",\"ints\":[1],\"counts\":[1,1]}] | .seeds=[1,2,3,4,5,6]" |
		"$RUNNER" >relu_lossy.ev 2>relu_lossy.err &&
	ev_check relu_lossy.ev ".event==\"correctness\" and .gates.result_reuse.wrong_in_fresh_buffers" \
		".pass==false and .first_bad.index==0 and .bad_count==1 and .gates.result_reuse.follows_inputs
		 and .gates.result_reuse.checked==false" &&
	[ "$(jq -s "map(select(.event==\"correctness\" and .gates.result_reuse.follows_inputs==false)) | length" relu_lossy.ev)" = 0 ]
'

test_expect "a cache keyed on pointers stays result reuse when fresh buffers are asked" '
	ev_check relu_cache.ev ".event==\"correctness\" and .gates.result_reuse.checked" ".gates.result_reuse.wrong_in_fresh_buffers==false"
'

test_expect "the relu identity passes on [0,1) but fails on the signed distributions" '
	run_job relu_identity &&
	[ "$(jq -s "map(select(.event==\"correctness\" and .input==\"task\" and .pass==false)) | length" relu_identity.ev)" = 0 ] &&
	for d in signed_uniform normal large_magnitude; do
		[ "$(jq -s "map(select(.event==\"correctness\" and .input==\"$d\" and .pass==true)) | length" relu_identity.ev)" = 0 ] || exit 1
	done
'

test_expect "odd-shape parameter sets are checked" '
	[ "$(jq -s "map(select(.event==\"correctness\" and .set==\"n1001_odd\")) | length" relu_good.ev)" = 12 ]
'

test_expect "correctness inputs are the same for the same seed" '
	run_job relu_wrong && cp relu_wrong.ev first.ev && run_job relu_wrong &&
	diff <(jq -c "select(.event==\"correctness\") | .first_bad" first.ev) \
	     <(jq -c "select(.event==\"correctness\") | .first_bad" relu_wrong.ev)
'

test_expect "a kernel printing to stdout cannot forge events" '
	run_job relu_chatty &&
	jq -e . relu_chatty.ev >/dev/null &&
	[ "$(jq -s "map(select(.event==\"done\")) | length" relu_chatty.ev)" = 1 ] &&
	tail -n 1 relu_chatty.ev | jq -e ".event==\"done\" and .correctness_events==24" &&
	grep -q "not json" relu_chatty.err
'

test_expect "a malformed job is refused with bad_job and exit 2" '
	echo "{\"abi\": 1, \"arms\": " | "$RUNNER" >bad.ev 2>/dev/null && exit 1;
	[ $? -ne 0 ] &&
	ev_check bad.ev ".event==\"error\"" ".reason==\"bad_job\""
'

test_expect "a job with a wrong field names the field" '
	expect_exit 2 sh -c "$(printf "%q " jq -c ".timing.trials_max=1" "$FIX/relu-job.json") | $RUNNER > bad2.ev" &&
	ev_check bad2.ev ".event==\"error\"" ".reason==\"bad_job\" and (.message|test(\"timing.trials_max\"))"
'

test_expect "a missing shared object is an error event, not a crash" '
	expect_exit 3 sh -c "$(printf "%q " jq -c --arg c "$PWD/nope.so" ".arms[0].so=\$c" "$FIX/relu-job.json") | $RUNNER > miss.ev" &&
	ev_check miss.ev ".event==\"error\"" ".reason==\"dlopen\""
'

test_expect "a shared object without atb_kernel is a no_symbol error" '
	echo "int not_the_kernel(void) { return 0; }" >nosym.c &&
	cc -shared -fPIC -o nosym.so nosym.c &&
	expect_exit 3 sh -c "$(printf "%q " jq -c --arg c "$PWD/nosym.so" ".arms[1].so=\$c | .arms[0].so=\"$PWD/relu_ref.so\"" "$FIX/relu-job.json") | $RUNNER > nosym.ev" &&
	ev_check nosym.ev ".event==\"error\"" ".reason==\"no_symbol\" and (.message|test(\"candidate\"))"
'

test_expect "atb-runner --help documents the events" '
	"$RUNNER" --help >help.txt &&
	for w in hello env correctness samples error done "exit status"; do expect_grep "$w" help.txt || exit 1; done
'

test_done
