#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# ctest: lock timing -- an honest verdict from real timing (CMakeLists.txt)
# atb measure --baseline compile on CPU tensors, real PyTorch and inductor:
# the copy of relu01 stores a speedup vs torch.compile(Model) with its CI
# beside the honest one (labelled, stats.compile, never under naive), the
# compilation's wall time apart; a planted broken compile (compile_refused:
# a custom operator torch.compile cannot trace) leaves the candidate's
# verdict as it is and records why the compile speedup is absent; a
# compiled reference that differs from eager (compile_differs) is not timed
# and the runner says where it differed.  Slow: each measure is a full
# protocol job (8 paired seeds, cv re-runs, the drift runner) and inductor
# compiles C++ with gcc (tens of seconds cold).  Skipped (77) without
# torch, and under ASan (torch through the sanitizer's allocator).
. "$(dirname "$0")/lib.sh"

FIX=$ATB_SOURCE_DIR/tests/fixtures/torch
RUNNER=${ATB_RUNNER:-$ATB_BUILD_DIR/atb-runner}
command -v jq >/dev/null || skip_all "jq not installed"
command -v sqlite3 >/dev/null || skip_all "sqlite3 is needed to read the store"
need_torch_cpu "$RUNNER"
export ATB_PYTHON=$PY ATB_TORCH_DEVICE=cpu
export ATB_DB=$TRASH/atb.db

test_expect "--baseline is eager or compile, and compile only for torch tasks (exit 2)" '
	expect_exit 2 "$ATB" measure --baseline jit "$FIX/relu01.py" "$FIX/relu01/honest" &&
	expect_grep "--baseline must be eager or compile" "$TRASH/err" &&
	expect_exit 2 "$ATB" measure --baseline compile sgemm "$TRASH" &&
	expect_grep "--baseline compile is for KernelBench-format (torch) tasks" "$TRASH/err"
'

# verdict_ok FILE: the candidate was measured (admitted; or, on a box too loaded
# for the cv cap, refused by one of lib.sh's BOX_GATES: the protocol working,
# not a bug; issue 13 saw noise at drift 1.114 beside t4110 under -j 2).  What
# these tests assert is the compile fields, present on either outcome.
verdict_ok() {
	jq -e ".verdict==\"admitted\" or $BOX_GATES" "$1" >/dev/null
}

test_expect "a copy with --baseline compile: a compile speedup with its CI, compile time apart" '
	"$ATB" measure --json --baseline compile "$FIX/relu01.py" \
		"$FIX/relu01/honest/model_new.py" >copy.json 2>copy.err || true
	cat copy.json
	verdict_ok copy.json &&
	jq -e ".compile.mode==\"default\" and .compile.compile_s>0" copy.json >/dev/null &&
	if jq -e ".verdict==\"admitted\"" copy.json >/dev/null; then
		jq -e ".compile.speedup>0 and .compile.ci_low<=.compile.speedup and
			.compile.speedup<=.compile.ci_high and .compile.why==null and
			.speedup>0.8 and .speedup<1.25" copy.json >/dev/null &&
		id=$(jq .result_id copy.json) &&
		sqlite3 "$ATB_DB" "SELECT stats FROM result WHERE id=$id" >stats.json &&
		jq -e ".compile.measured and .compile.speedup>0 and .compile.ci_low>0 and
			.compile.mode==\"default\" and .compile.compile_s>0 and .naive==null and
			(.per_seed_medians_ns.compile|length)==8" stats.json >/dev/null
	else
		echo "# note: not admitted on this box ($(jq -r .gate copy.json)); stored checks not run"
	fi
'

test_expect "a planted broken compile: the verdict stands, the reason is recorded" '
	"$ATB" measure --json --baseline compile "$FIX/compile_refused.py" \
		"$FIX/compile_refused/copy" >ref.json 2>ref.err || true
	cat ref.json
	verdict_ok ref.json &&
	jq -e ".compile.speedup==null and
		(.compile.why|test(\"torch.compile failed on the first call: .*fake\"))" \
		ref.json >/dev/null &&
	if jq -e ".verdict==\"admitted\"" ref.json >/dev/null; then
		jq -e ".note|test(\"no speedup vs torch.compile\")" ref.json >/dev/null &&
		sqlite3 "$ATB_DB" "SELECT stats FROM result WHERE id=$(jq .result_id ref.json)" |
			jq -e ".compile.measured==false and (.compile.why|length>0)" >/dev/null
	fi
'

test_expect "a compiled reference that differs from eager is not timed; the runner says where" '
	"$PY" "$FIX/python-info.py" >python.json &&
	jq -c --arg t "$FIX/compile_differs.py" --arg c "$FIX/compile_differs/copy/model_new.py" \
		--arg m "$ATB_SOURCE_DIR/python" --slurpfile p python.json \
		".arms[0].py=\$t | .arms[1].py=\$c | .torch.python=\$p[0] | .torch.module_path=\$m |
		 .torch.compile={\"mode\": \"default\"} | .options.skip_timing=false | .seeds=[1]" \
		"$FIX/relu01-job.json" >differs.job &&
	"$RUNNER" <differs.job >differs.ev 2>differs.err &&
	jq -se "map(select(.event==\"compile\"))[0] | .ok==false and .checks==1 and
		(.why|test(\"differs from eager on seed 1\")) and .failed.buffers[0].pass==false" \
		differs.ev >/dev/null &&
	jq -se "map(select(.event==\"done\"))[0] | .correctness_failures==0 and .timing==\"done\"" \
		differs.ev >/dev/null &&
	test -z "$(jq -c "select(.event==\"samples\" and .arm==\"compile\")" differs.ev)" &&
	test -n "$(jq -c "select(.event==\"samples\" and .arm==\"candidate\")" differs.ev)"
'

test_done
