#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# ctest: lock timing -- an honest verdict from real timing (CMakeLists.txt)
# atb suite --baseline compile with real PyTorch on CPU tensors, one small
# task (02 ReLU on [0,1), its size cut as in t4110) and its copy candidate:
# the row carries a speedup vs torch.compile(Model) with its interval and
# the compilation's wall time, the totals a "median vs compile" against the
# kernelbench bar, the table a "vs compile" line; eager stays the headline
# (the task's speedup, fast_p and the median are over eager); the inputs
# were made on the CPU (a cpu job).  Slow: one full protocol job with
# inductor compiling C++ (minutes on a loaded 2-core box).  Skipped (77)
# without torch, and under ASan.
. "$(dirname "$0")/lib.sh"

command -v jq >/dev/null || skip_all "jq not installed"
[ -x "$ATB_BUILD_DIR/atb-runner" ] || skip_all "no atb-runner in $ATB_BUILD_DIR"
need_torch_cpu "$ATB_BUILD_DIR/atb-runner"
export ATB_PYTHON=$PY
KB="$ATB_HOME/tasks/kernelbench"

mkdir -p kb/level1
sed 's/^ROWS = .*/ROWS = 192/; s/^COLS = .*/COLS = 320/' "$KB/level1/02_ReLU.py" >kb/level1/02_ReLU.py

test_expect "a copy under --baseline compile: eager headline, compile speedup with CI beside it" '
	"$ATB" --db c.db suite kb --candidates "$KB/candidates/copy" --device cpu \
		--baseline compile --json >c.json 2>c.err &&
	jq -c ".tasks[0] | {outcome, speedup, compile_speedup, compile_ci_low, compile_ci_high,
		compile_s, compile_why, inputs_on}" c.json &&
	jq -e ".baseline==\"compile\" and .done==1 and .tasks[0].inputs_on==\"cpu\" and
		(.tasks[0].outcome|IN(\"usable\", \"noise\", \"baseline_drift\")) and
		.tasks[0].compile_s>0" c.json >/dev/null &&
	if jq -e ".tasks[0].outcome==\"usable\"" c.json >/dev/null; then
		jq -e ".tasks[0] | .compile_speedup>0 and .compile_ci_low<=.compile_speedup and
			.compile_speedup<=.compile_ci_high and .compile_why==null" c.json >/dev/null &&
		jq -e ".totals.median_compile_speedup | .value>0 and .bar==1.2 and
			(.ci_verdict|IN(\"above\", \"below\", \"undecided\"))" c.json >/dev/null &&
		jq -e ".totals.median_speedup.value==.tasks[0].speedup" c.json >/dev/null &&
		"$ATB" --db c.db suite --resume "$(jq -r .run c.json)" >table.out 2>table.err &&
		expect_grep "vs compile " table.out && expect_grep "median vs compile" table.out
	else
		echo "# note: not admitted on this box ($(jq -r ".tasks[0].outcome" c.json)); compile checks not run"
	fi
'

test_done
