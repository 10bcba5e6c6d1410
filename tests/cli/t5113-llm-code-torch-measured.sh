#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# ctest: lock timing -- an honest verdict from real timing (CMakeLists.txt)
# atb run --proposer llm-code on a KernelBench-format task, to the runners:
# the model is a TEST DOUBLE (tests/cli/llm-double.py) whose scripted reply
# is the honest ModelNew of the fixture relu01 (a fenced ```python
# model_new.py block); it passes the static checks, builds, is correct, and
# is measured against PyTorch eager by the normal path (timing: admitted or
# refused by a box gate on this loaded box), then its replay without a
# server writes the same model_new.py.  The task file lies in a folder of its
# own: the surface gate hashes the task's folder, so a store or a runs/
# folder beside the .py changes it during the measurement and refuses the
# candidate (gate surface).  Needs PyTorch (need_torch_cpu).
. "$(dirname "$0")/lib.sh"
command -v jq >/dev/null || skip_all "jq not installed"
command -v sqlite3 >/dev/null || skip_all "sqlite3 not installed"
need_torch_cpu "$ATB_BUILD_DIR/atb-runner"
export ATB_PYTHON=$PY ATB_TORCH_DEVICE=cpu

mkdir task && cp "$ATB_SOURCE_DIR/tests/fixtures/torch/relu01.py" task/relu01.py
HONEST=$ATB_SOURCE_DIR/tests/fixtures/torch/relu01/honest/model_new.py
"$PY" - "$HONEST" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
json.dump([{"content": "```python model_new.py\n" + text + "```\n"}], open("script.json", "w"))
PY
llm_double "$PY"
OK='.outcome == "usable" or .outcome == "noise" or .outcome == "baseline_drift" or .outcome == "clock"'
iters() { sqlite3 -cmd ".timeout 10000" -json atb.db "SELECT k, knobs, outcome, reason FROM iteration WHERE run = '$1' ORDER BY k"; }

test_expect "the model's honest ModelNew is built, correct and measured against eager" '
	"$ATB" run task/relu01.py --proposer llm-code --model double --base-url "$URL" \
		--iterations 1 --quiet --json >run.json &&
	RUN=$(jq -r .run run.json) && echo "$RUN" >run_id &&
	iters "$RUN" >it.json && cat it.json &&
	cmp "$HONEST" "runs/$RUN/iter-0/candidate/model_new.py" &&
	jq -e ".[0] | $OK" it.json
'

test_expect "the replay without a server writes the same model_new.py" '
	RUN=$(cat run_id) && kill $DOUBLE && wait $DOUBLE 2>/dev/null;
	"$ATB" run --replay "$RUN" --quiet --json >rep.json &&
	REP=$(jq -r .run rep.json) &&
	cmp <(iters "$RUN" | jq -c "[.[] | .knobs]") <(iters "$REP" | jq -c "[.[] | .knobs]") &&
	cmp "$HONEST" "runs/$REP/iter-0/candidate/model_new.py" &&
	iters "$REP" | jq -e ".[0] | $OK" &&
	"$ATB" audit verify >/dev/null && "$ATB" llm check >/dev/null
'

test_done
