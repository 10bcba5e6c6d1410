#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The torch reference's own error (protocol version 14,
# correctness.reference_precision), on CPU tensors, driven as atb drives
# the runner: the reference of every compared set is computed again in
# float64 and a floating output may differ from the reference by factor x
# the reference's own difference from that float64 result, on top of the
# dtype's tolerance.  tests/fixtures/torch/tf32sim.py is a task whose
# reference is only TF32-precise while torch.backends.cudnn.allow_tf32 is
# on (PyTorch's default; cuDNN's convolutions on a GPU), as KernelBench's
# conv tasks are on the GPU: a candidate computing in full fp32, more
# precise than the reference, was refused correctness under version 13.
# tests/fixtures/torch/longsum.py is an fp32 GEMM with K = 8192 whose honest
# split-K order was refused on large_magnitude inputs by summation order
# alone.  bfloat16 cheats are still refused, and a candidate that turns a
# TF32 switch on to widen the allowance is refused tamper.  The GPU half (a
# real cuDNN TF32 conv) is t4025.
. "$(dirname "$0")/lib.sh"

RUNNER=${ATB_RUNNER:-$ATB_BUILD_DIR/atb-runner}
FIX=$ATB_SOURCE_DIR/tests/fixtures/torch
[ -x "$RUNNER" ] || skip_all "no atb-runner at $RUNNER"
need_torch_cpu "$RUNNER"
command -v jq >/dev/null || skip_all "jq not installed"

python_json python.json

RP='.correctness.reference_precision={"factor":4,"max_relative":0.0078125}'

# run OUT TASK CANDIDATE [FILTER]: the relu01 job's settings with that task
# and candidate (correctness only unless FILTER says), events in OUT.ev.
run() {
	jq -c --arg t "$FIX/$2.py" --arg c "$FIX/$2/$3/model_new.py" \
		--arg m "$ATB_SOURCE_DIR/python" --slurpfile p python.json \
		".arms[0].py=\$t | .arms[1].py=\$c | .torch.python=\$p[0] |
		 .torch.module_path=\$m | ${4:-.}" "$FIX/relu01-job.json" >"$1.job" &&
	{ "$RUNNER" <"$1.job" >"$1.ev" 2>"$1.err"; echo $? >"$1.rc"; }
}

# failures EV: the done event's correctness_failures (-1: no done event)
failures() {
	jq -se 'map(select(.event=="done"))[0].correctness_failures // -1' "$1"
}

test_expect "version 13 (no allowance): the honest full-fp32 candidate is refused correctness" '
	run v13 tf32sim fp32 && [ "$(failures v13.ev)" -gt 0 ] &&
	jq -se "map(select(.event==\"done\"))[0] | has(\"reference_precision\") | not" v13.ev >/dev/null
'

test_expect "version 14: the copy, the full-fp32 and another TF32 rounding pass every check" '
	for c in copy fp32 tf32_split; do
		run $c tf32sim $c "$RP" && [ "$(cat $c.rc)" = 0 ] && [ "$(failures $c.ev)" = 0 ] ||
			{ echo "# $c: $(failures $c.ev) failures"; tail -3 $c.err; return 1; }
	done &&
	jq -se "map(select(.event==\"done\"))[0].reference_precision |
		.factor==4 and .differed>0 and .unbounded==0 and .largest_allowance>0" fp32.ev >/dev/null
'

test_expect "the allowance is in every compared buffer and grows with the inputs (large_magnitude)" '
	jq -se "[.[]|select(.event==\"correctness\")|.buffers[]?] |
		length>0 and all(.reference_allowance>0)" fp32.ev >/dev/null &&
	jq -se "[.[]|select(.event==\"correctness\" and .input==\"large_magnitude\")|
		.buffers[0].reference_allowance] as \$l |
		[.[]|select(.event==\"correctness\" and .input==\"task\")|
		.buffers[0].reference_allowance] as \$t |
		(\$l|length)>0 and (\$t|length)>0 and (\$l|min) > 100*(\$t|max)" fp32.ev >/dev/null
'

test_expect "the result-reuse steps compare with the allowance too (B drawn afresh)" '
	jq -se "[.[]|select(.event==\"correctness\")|.gates.result_reuse.follows_inputs] |
		length>0 and all" fp32.ev >/dev/null
'

test_expect "version 13: the honest split-K order of a long sum is refused on large_magnitude" '
	run ls13 longsum split && [ "$(failures ls13.ev)" -gt 0 ] &&
	jq -se "[.[]|select(.event==\"correctness\" and .pass==false)|.input]|
		length>0 and all(.==\"large_magnitude\")" ls13.ev >/dev/null
'

test_expect "version 14: the split-K order passes every check; its bfloat16 cheat does not" '
	run ls14 longsum split "$RP" && [ "$(failures ls14.ev)" = 0 ] &&
	run lsbf longsum bf16 "$RP" && [ "$(failures lsbf.ev)" -ge 4 ]
'

test_expect "cheat: operands rounded to bfloat16 (about 8x TF32): refused on every set" '
	run bf16 tf32sim bf16 "$RP" &&
	[ "$(jq -s "[.[]|select(.event==\"correctness\" and .pass==false and
		(.input|test(\"tiny\")|not))]|length" bf16.ev)" -ge 4 ] &&
	jq -se "[.[]|select(.event==\"correctness\" and (.input|test(\"tiny\")|not))|.pass]|
		all|not" bf16.ev >/dev/null
'

# Timed checks as t4000 runs them (half the rounds, 30 s a seed at most).
TIMED='.options.skip_timing=false | .timed_checks={"key":"0123456789abcdef","check_share":0.5} |
	.timing.max_time_per_seed_s=30'

test_expect "timed checks: the full-fp32 candidate passes them with the allowance of the seed" '
	run timed tf32sim fp32 "$RP | $TIMED" && [ "$(cat timed.rc)" = 0 ] &&
	jq -se "map(select(.event==\"done\"))[0].timing==\"done\"" timed.ev >/dev/null &&
	jq -se "[.[] | select(.event==\"samples\" and .arm==\"candidate\")] | length == 2 and
		all(.timed_checks.rounds_checked >= 2 and .timed_checks.failed == 0)" timed.ev >/dev/null
'

test_expect "attack: TF32 for matmuls turned on at the import to widen the allowance: tamper" '
	run widen tf32sim matmul_tf32_on "$RP" &&
	jq -se "(map(select(.event==\"tamper\"))[0].changes[0].what |
		test(\"allow_tf32|float32_matmul\")) and
		(map(select(.event==\"error\"))[0].reason==\"tamper\")" widen.ev >/dev/null ||
	{ jq -c "select(.event==\"tamper\" or .event==\"error\")" widen.ev; false; }
'

test_expect "a reference that rounds nothing (relu01): matched bit for bit, no allowance anywhere" '
	run relu relu01 honest "$RP" && [ "$(failures relu.ev)" = 0 ] &&
	jq -se "map(select(.event==\"done\"))[0].reference_precision |
		.differed==0 and .largest_allowance==0" relu.ev >/dev/null &&
	jq -se "[.[]|select(.event==\"correctness\")|.buffers[]|has(\"reference_allowance\")]|
		any|not" relu.ev >/dev/null
'

# A reviewer's attacks and honest cases (session 29), each passed or refused
# wrongly by the first form of the rule.
test_expect "attack: copy.deepcopy replaced at the import (it made the twin): bfloat16 refused" '
	run dcbf longsum deepcopy_bf16 "$RP" && [ "$(failures dcbf.ev)" -ge 4 ] &&
	! jq -e "select(.event==\"tamper\")" dcbf.ev >/dev/null
'

test_expect "attack: torch.nn.Parameter.__deepcopy__ replaced at the import: tamper" '
	run pdc linear param_deepcopy "$RP" &&
	jq -se "(map(select(.event==\"tamper\"))[0].changes[0].what |
		test(\"Parameter.__deepcopy__\")) and
		(map(select(.event==\"error\"))[0].reason==\"tamper\")" pdc.ev >/dev/null ||
	{ jq -c "select(.event==\"tamper\" or .event==\"error\")" pdc.ev; false; }
'

# (An honest copy of a reference that draws random numbers is not matched
# either way: each arm draws from the generator where the call before it
# left it; docs/torch.md, Known limits.)
test_expect "dropout in the reference: the float64 twin draws the same mask, junk is refused" '
	run dnod dropout nodrop "$RP" && [ "$(failures dnod.ev)" -ge 4 ] &&
	jq -se "map(select(.event==\"done\"))[0].reference_precision.largest_allowance < 1e-3" \
		dnod.ev >/dev/null
'

test_expect "a float64 input the reference writes: the twin writes its own copy (honest passes)" '
	run inpl f64inplace outofplace "$RP" && [ "$(cat inpl.rc)" = 0 ] &&
	[ "$(failures inpl.ev)" = 0 ]
'

test_expect "max_relative: a float64 run off by a jump gives no allowance (copy passes, off by 0.5 refused)" '
	run jcopy f64jump copy "$RP" && [ "$(failures jcopy.ev)" = 0 ] &&
	run joff f64jump off "$RP" && [ "$(failures joff.ev)" -ge 4 ] &&
	jq -se "map(select(.event==\"done\"))[0].reference_precision |
		.unbounded>0 and .largest_allowance==0" joff.ev >/dev/null
'

test_expect "17 tensor outputs: every reference copy has a slot (honest copy passes)" '
	run many many copy "$RP" && [ "$(failures many.ev)" = 0 ]
'

test_expect "a reference that cannot run in float64: no allowance, the reason said, the job goes on" '
	run f64 fp32only copy "$RP" && [ "$(cat f64.rc)" = 0 ] && [ "$(failures f64.ev)" = 0 ] &&
	jq -se "map(select(.event==\"done\"))[0].reference_precision |
		(.unavailable|test(\"float64 failed: TypeError: this model runs in float32 only\")) and
		.compared==0" f64.ev >/dev/null ||
	{ jq -c "select(.event==\"done\")" f64.ev; false; }
'

test_done
