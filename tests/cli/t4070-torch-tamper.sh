#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The torch backend's tamper watch (python/atb_torch/tamper.py): the
# candidate shares the interpreter with the reference, so whatever it
# rebinds, registers or flips there slows (or changes) the reference too.
# Each planted cheat in tests/fixtures/torch/relu01/tamper_* computes the
# right ReLU and is refused for its own change: a global forward pre-hook,
# torch.relu replaced, a patch put back by the reference's own call (seen
# only by the check before a timed trial of the reference), the task
# module's global `torch` rebound, torch.set_num_threads(1), the runner's
# Session made to take the candidate as the reference, aten::relu's CPU
# kernel overridden through torch.library.  The honest
# candidates run with timing and report no change; atb measure refuses
# two cheats as gate tamper with the reason naming the change, and admits
# nothing.  Needs a python with PyTorch ($ATB_PYTHON, else .venv-torch).
# PROTO: gates tamper
. "$(dirname "$0")/lib.sh"

RUNNER=${ATB_RUNNER:-$ATB_BUILD_DIR/atb-runner}
FIX=$ATB_SOURCE_DIR/tests/fixtures/torch
[ -x "$RUNNER" ] || skip_all "no atb-runner at $RUNNER"
need_torch_cpu "$RUNNER"
command -v jq >/dev/null || skip_all "jq not installed"

python_json python.json

# run CANDIDATE [TASK [FILTER]]: the relu01 job on TASK (relu01) with that
# candidate (TASK/CANDIDATE), timed, FILTER applied to the job; events in
# CANDIDATE.ev (TASK.CANDIDATE.ev for another task).
run() {
	local task=${2:-relu01} o=$1
	[ "$task" = relu01 ] || o=$task.$1
	jq -c --arg t "$FIX/$task.py" --arg c "$FIX/$task/$1/model_new.py" \
		--arg m "$ATB_SOURCE_DIR/python" --slurpfile p python.json \
		'.arms[0].py=$t | .arms[1].py=$c | .torch.python=$p[0] |
		 .torch.module_path=$m | .options.skip_timing=false | '"${3:-.}" "$FIX/relu01-job.json" >"$o.job" &&
	{ "$RUNNER" <"$o.job" >"$o.ev" 2>"$o.err"; echo $? >"$o.rc"; }
}

# refused CANDIDATE WHAT [WHERE [TASK]]: one tamper event whose first change
# is WHAT (seen at WHERE, when not empty), the job ended by an error
# "tamper", no done.
refused() {
	local o=$1
	[ -z "${4:-}" ] || o=$4.$1
	run "$1" "${4:-}" &&
	jq -se --arg w "$2" --arg at "${3:-}" '
		(map(select(.event=="tamper")) | length==1 and
		 (.[0].changes[0].what==$w) and ($at=="" or .[0].changes[0].where==$at)) and
		(map(select(.event=="error"))[0].reason=="tamper") and
		(map(select(.event=="done")) | length==0)' "$o.ev" >/dev/null ||
	{ jq -c 'select(.event=="tamper" or .event=="error")' "$o.ev"; tail -5 "$o.err"; return 1; }
}

test_expect "honest candidates, timed: no change seen, the job done" '
	for c in honest clamp; do
		run $c && [ "$(cat $c.rc)" = 0 ] &&
		jq -se "(map(select(.event==\"tamper\"))|length==0) and
			(map(select(.event==\"done\"))[0].timing==\"done\") and
			(map(select(.event==\"phases\"))[0].seconds.tamper>0)" $c.ev >/dev/null ||
		return 1
	done
'

test_expect "BatchNorm in training mode: the reference's own writes to its running statistics are not the honest copy's (33_BatchNorm)" '
	run honest bn_train && [ "$(cat bn_train.honest.rc)" = 0 ] &&
	jq -se "(map(select(.event==\"tamper\"))|length==0) and
		(map(select(.event==\"done\"))[0].timing==\"done\")" bn_train.honest.ev >/dev/null ||
	{ jq -c "select(.event==\"tamper\" or .event==\"error\")" bn_train.honest.ev
	  tail -5 bn_train.honest.err; false; }
'

test_expect "a write into the reference's BatchNorm weight is still refused, next to a write into its running_var" '
	refused tamper_weight "the reference'"'"'s bn: parameters or buffers changed" "" bn_train
'

AT_IMPORT="the import of arm 'candidate'"
AT_BUILD="the construction of arm 'candidate'"
GLOBAL_TORCH="the task module's global 'torch' replaced"
INIT_CHANGED="atb_torch's Session.init_inputs changed (the task's init inputs, from which the float64 reference is built)"
ATTR_CHANGED="the reference's (the model): its attribute scaling_factor changed"

# The review of session 30: through gc (reached past the static check, t4015)
# a candidate rewrote what the watch compared by identity only: the task's
# init inputs in place (the float64 reference, built from them, 0.7% off:
# a bfloat16 GEMM inside the allowance, admitted) and a plain attribute of
# the reference (its scale set to 0: a candidate returning zeros matched).
test_expect "scalelin: the honest copy, timed, no change seen; the bfloat16 GEMM refused correctness" '
	run honest scalelin && [ "$(cat scalelin.honest.rc)" = 0 ] &&
	jq -se "(map(select(.event==\"tamper\"))|length==0) and
		(map(select(.event==\"done\"))[0] | .timing==\"done\" and .correctness_failures==0)" \
		scalelin.honest.ev >/dev/null &&
	run bf16 scalelin &&
	jq -se "map(select(.event==\"done\"))[0].correctness_failures > 0" scalelin.bf16.ev >/dev/null
'

test_expect "the task's init inputs rewritten in place (Session.init_inputs) are named" '
	refused initlist_bf16 "$INIT_CHANGED" "" scalelin
'

test_expect "a plain attribute of the reference set to 0 (its scale) is named" '
	refused refattr_zero "$ATTR_CHANGED" "" scalelin
'

test_expect "the same attribute replaced by a float subclass whose repr shows the old value is named" '
	refused refattr_subclass "the reference'"'"'s (the model): its attribute scaling_factor deleted, or replaced by what is not plain data" "" scalelin
'

test_expect "a reference that sets a plain attribute in its own calls (a counter): the honest copy, timed, no change seen" '
	run honest counter && [ "$(cat counter.honest.rc)" = 0 ] &&
	jq -se "(map(select(.event==\"tamper\"))|length==0) and
		(map(select(.event==\"done\"))[0].timing==\"done\")" counter.honest.ev >/dev/null ||
	{ jq -c "select(.event==\"tamper\" or .event==\"error\")" counter.honest.ev; false; }
'

# The second review of session 30 went past the static check through other
# modules' private names for sys, builtins and inspect (collections._sys,
# enum.bltns, torch.foreach._inspect; t4015 refuses those now) and changed
# what the watch did not compare: the reference's weights written through
# .data (same storage, same version counter), a weight's class set to a
# Parameter subclass whose __torch_function__ zeroes the reference's result,
# and the protocol's distributions rewritten in place to [0, 1) (the ReLU
# identity was admitted by atb measure).  Each is named now.
test_expect "the reference's weights zeroed through .data are named (their contents)" '
	refused data_zero "the reference'"'"'s linear: the contents of bias changed (a write its version counter did not count)" "$AT_BUILD" scalelin &&
	refused data_zero "the reference'"'"'s fc: the contents of bias changed (a write its version counter did not count)" "$AT_BUILD" linear &&
	refused data_zero "the reference'"'"'s (the model): the contents of scale changed (a write its version counter did not count)" "$AT_BUILD" pscale
'

test_expect "a reference weight's class swapped for a Parameter subclass is named" '
	refused class_swap "the reference'"'"'s linear: parameters or buffers changed" "$AT_BUILD" scalelin
'

test_expect "the protocol's distributions rewritten in place (Session.dists) are named" '
	refused dists "atb_torch'"'"'s Session.dists changed (the protocol'"'"'s input distributions)" "$AT_BUILD"
'

# Cheap only while timed (the collector off: a timed group), with the
# reference's weight zeroed through .data so that the timed checks' two
# calls of a round agree; before session 30 it passed all 8 checked rounds of
# each seed, no change seen.  The check right after the reference's call in a
# checked round hashes the weights.
test_expect "a weight zeroed for the timed group alone is named at the first checked round" '
	jq -c --arg t "$FIX/scalelin.py" --arg c "$FIX/scalelin/timed_zero/model_new.py" \
		--arg m "$ATB_SOURCE_DIR/python" --slurpfile p python.json \
		".arms[0].py=\$t | .arms[1].py=\$c | .torch.python=\$p[0] | .torch.module_path=\$m |
		 .options.skip_timing=false | .timing.max_time_per_seed_s=30 |
		 .timed_checks={\"key\":\"0123456789abcdef\",\"check_share\":0.5}" \
		"$FIX/relu01-job.json" >tz.job &&
	{ "$RUNNER" <tz.job >tz.ev 2>tz.err || true; } &&
	jq -se "(map(select(.event==\"tamper\")) | length==1 and
		 .[0].changes[0].where==\"a timed check of seed 1\" and
		 .[0].changes[0].what==\"the reference'"'"'s linear: the contents of weight changed (a write its version counter did not count)\") and
		(map(select(.event==\"done\")) | length==0)" tz.ev >/dev/null ||
	{ jq -c "select(.event==\"tamper\" or .event==\"error\" or .event==\"done\")" tz.ev; false; }
'

# The collector's object lists, refused for good by an audit hook installed
# before the candidate's import ("gc_guard": true, which atb measure sends:
# t4010): every door the two reviews of session 30 found past the static
# check ended in gc.get_objects.  Without the guard (the jobs above) the
# deeper layers are what these fixtures test.
test_expect "gc_guard: gc.get_objects refused and named; the honest copy, timed, unaffected" '
	for c in static_gc overwrite_ref_gc; do
		run $c "" ".torch.gc_guard=true" &&
		jq -se "(map(select(.event==\"tamper\")) | length==1 and
			 (.[0].changes[0].what | startswith(\"gc.get_objects was called (refused\"))) and
			(map(select(.event==\"done\")) | length==0)" $c.ev >/dev/null ||
		{ jq -c "select(.event==\"tamper\" or .event==\"error\")" $c.ev; return 1; }
	done &&
	run honest "" ".torch.gc_guard=true" && [ "$(cat honest.rc)" = 0 ] &&
	jq -se "(map(select(.event==\"tamper\"))|length==0) and
		(map(select(.event==\"env\"))[0].torch.gc_guard==true) and
		(map(select(.event==\"done\"))[0].timing==\"done\")" honest.ev >/dev/null &&
	run dists "" ".torch.gc_guard=true" &&
	jq -se "map(select(.event==\"done\")) | length==0" dists.ev >/dev/null
'

test_expect "a global forward pre-hook that slows the reference is seen at the import" '
	refused tamper_hook "a global forward pre-hook was registered" "$AT_IMPORT"
'

test_expect "torch.relu replaced by a slower wrapper is named" '
	refused tamper_relu "torch.relu replaced"
'

test_expect "a patch the reference call undoes itself: seen before a timed trial" '
	refused tamper_undone "torch.relu replaced" "a timed trial of seed 1"
'

test_expect "the task module global torch rebound is named" '
	refused tamper_globals "$GLOBAL_TORCH"
'

test_expect "torch.set_num_threads in the constructor: the flag and its values" '
	t=$(jq -r "select(.event==\"env\").torch.threads" honest.ev) &&
	n=$([ "$t" -gt 1 ] && echo 1 || echo 2) &&
	refused tamper_threads "torch.get_num_threads() is $n, was $t" "$AT_BUILD"
'

test_expect "the runner Session made to take the candidate as the reference" '
	refused tamper_session "atb_torch'"'"'s Session.reference replaced" "$AT_BUILD"
'

test_expect "aten::relu overridden through torch.library (the dispatcher, not torch.relu)" '
	refused tamper_library "an aten kernel registered through torch.library (aten/relu/CPU)" \
		"$AT_IMPORT"
'

export ATB_PYTHON=$PY ATB_TORCH_DEVICE=cpu
export ATB_DB=$TRASH/atb.db
# Through atb measure the hook is refused as tamper; the relu wrapper
# (an assignment torch.relu = ...) is refused before that, by the static
# checks (gate static, rule reflection): the watch above catches it too.
test_expect "atb measure: the hook is refused as tamper, the relu wrapper statically (exit 2)" '
	expect_exit 2 "$ATB" measure --json "$FIX/relu01.py" "$FIX/relu01/tamper_hook/model_new.py" &&
	jq -e ".verdict==\"rejected\" and .gate==\"tamper\" and .result_id==null" \
		"$TRASH/out" >/dev/null || { cat "$TRASH/out"; return 1; }
	expect_exit 2 "$ATB" measure --json "$FIX/relu01.py" "$FIX/relu01/tamper_relu/model_new.py" &&
	jq -e ".verdict==\"rejected\" and .gate==\"static\" and .result_id==null and
		(.reason|test(\"reflection at line 16 .*assigns to torch.relu\"))" \
		"$TRASH/out" >/dev/null || { cat "$TRASH/out"; return 1; }
'

test_done
