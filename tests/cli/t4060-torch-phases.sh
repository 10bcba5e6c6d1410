#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Where a torch runner's time goes, and what its cheaper correctness phase
# must still catch.  The runner's "phases" event (runner/torch.c, before
# done): exclusive seconds per phase, the Python side's and the C side's,
# also appended to $ATB_RUNNER_PHASES_LOG (after a partial line per seed's
# correctness, for a runner killed at the timeout); the harness ignores it.  The
# reference's host copy made once per input set and the host buffers
# reused from call to call (python/atb_torch/runner.py) must not let a
# stale result pass: the planted relu01/stale_first (right once, then its
# first result forever) fails every later input set on values (and the
# first on result reuse).  The get_inputs() draw
# shared by a seed's input sets must not leak one arm's in-place writes
# into another set: relu01/mutate is caught on every signed set (t4000
# too).  Large outputs are compared in chunks on threads: the planted
# relu_big/tail_wrong (wrong in its last 3 elements) is found exactly.  Needs a python with PyTorch; skipped without one.
. "$(dirname "$0")/lib.sh"

RUNNER=${ATB_RUNNER:-$ATB_BUILD_DIR/atb-runner}
FIX=$ATB_SOURCE_DIR/tests/fixtures/torch
[ -x "$RUNNER" ] || skip_all "no atb-runner at $RUNNER"
need_torch_cpu "$RUNNER"
command -v jq >/dev/null || skip_all "jq not installed"

"$PY" "$FIX/python-info.py" >python.json 2>/dev/null || skip_all "cannot ask '$PY' about itself"

# job CANDIDATE [FILTER]: the relu01 job (task $TASK, default relu01) with that candidate.
job() {
	jq -c --arg t "$FIX/${TASK:-relu01}.py" --arg c "$FIX/${CDIR:-relu01}/$1/model_new.py" \
		--arg m "$ATB_SOURCE_DIR/python" --slurpfile p python.json \
		".arms[0].py=\$t | .arms[1].py=\$c | .torch.python=\$p[0] |
		 .torch.module_path=\$m | ${2:-.}" "$FIX/relu01-job.json"
}
run() {
	job "$@" >"$1.job" && { "$RUNNER" <"$1.job" >"$1.ev" 2>"$1.err"; echo $? >"$1.rc"; }
}

test_expect "phases: one event before done, every phase, also in the log file" '
	ATB_RUNNER_PHASES_LOG=$PWD/ph.log run honest ".options.skip_timing=false" &&
	[ "$(cat honest.rc)" = 0 ] &&
	[ "$(jq -r .event honest.ev | tail -2 | tr "\n" " ")" = "phases done " ] &&
	jq -se "map(select(.event==\"phases\"))[0] | .alone==false and .flushes>0 and
		(.seconds | has(\"interpreter\") and has(\"imports\") and has(\"models\") and
		 has(\"inputs\") and has(\"clones\") and has(\"reference\") and has(\"arms\") and
		 has(\"poison\") and has(\"host_copy\") and has(\"compare\") and has(\"mutation\") and
		 has(\"aliasing\") and has(\"reuse\") and has(\"prepare\") and has(\"warmup\") and
		 has(\"timed\") and has(\"flush\") and has(\"trial_overhead\") and has(\"other\")) and
		.seconds.timed>0 and .seconds.imports>0 and
		([.seconds[]] | add) > .wall_s*0.99 and ([.seconds[]] | add) < .wall_s*1.01" \
		honest.ev >/dev/null &&
	[ "$(wc -l <ph.log)" = 3 ] &&
	[ "$(jq -r .partial ph.log | tr "\n" " ")" = "true true null " ] &&
	jq -se "map(.job==\"torch-relu01\" and .event==\"phases\") | all" ph.log >/dev/null
'

test_expect "phases with timing skipped: still before done" '
	run clamp && [ "$(jq -r .event clamp.ev | tail -2 | tr "\n" " ")" = "phases done " ]
'

test_expect "planted stale result (right once, then its first result): every later set fails" '
	run stale_first && [ "$(cat stale_first.rc)" = 0 ] &&
	jq -r "select(.event==\"correctness\") | [.seed, .input, .pass,
		(.gates.result_reuse.failed_step // \"-\")] | @tsv" stale_first.ev >f &&
	[ "$(wc -l <f)" = 6 ] &&
	[ "$(head -1 f)" = "1	task	true	same_buffers_new_inputs" ] &&
	[ "$(tail -n +2 f | grep -c "	false	")" = 5 ] &&
	[ "$(jq -s "[.[]|select(.event==\"correctness\")|.buffers[]|select(.pass==false)]|length" \
		stale_first.ev)" = 5 ]
'

test_expect "in-place writes of one arm never reach the shared draw: mutate caught on every signed set" '
	run mutate && jq -r "select(.event==\"correctness\") | [.input,
		(.gates.input_mutation.mutated|join(\",\"))] | @tsv" mutate.ev >f &&
	[ "$(grep -vc "^task" f)" = 4 ] && [ "$(grep -v "^task" f | grep -c "	x$")" = 4 ]
'

# Outputs of 4 Mi elements and more are compared in chunks on threads
# (runner/torch.c, compare_parallel): the counts and the first bad index
# (one seed: every distribution is checked, 5 sets)
# must be those of one pass.
test_expect "chunked comparison: a wrong tail is found exactly (3 bad, first at 9437181)" '
	TASK=relu_big CDIR=relu_big run tail_wrong ".seeds=[1]" &&
	[ "$(cat tail_wrong.rc)" = 0 ] &&
	jq -r "select(.event==\"correctness\") | .buffers[0] | [.pass, .bad_count,
		.first_bad_index] | @tsv" tail_wrong.ev >f &&
	[ "$(wc -l <f)" = 5 ] && [ "$(sort -u f)" = "false	3	9437181" ]
'

test_expect "chunked comparison: the honest ReLU passes every set" '
	TASK=relu_big run honest ".seeds=[1]" && [ "$(cat honest.rc)" = 0 ] &&
	jq -se "[.[]|select(.event==\"correctness\")|.pass and .buffers[0].bad_count==0] |
		length==5 and all" honest.ev >/dev/null
'

# The reference's finite check (a float64 sum first, element by element
# only when that is not finite): exp01 is inf on large_magnitude only.
test_expect "a set the reference is not finite on is skipped, the others checked" '
	TASK=exp01 CDIR=exp01 run honest ".seeds=[1]" && [ "$(cat honest.rc)" = 0 ] &&
	jq -se "map(select(.event==\"done\"))[0].inputs_skipped_undefined==1" honest.ev >/dev/null &&
	[ "$(jq -r "select(.event==\"correctness\") | [.input, .pass] | @tsv" honest.ev |
		sort | tr "\n" " ")" = "normal	true signed_uniform	true task	true tiny_magnitude	true " ]
'

test_done
