#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# atb run --proposer llm-code on a KernelBench-format (torch) task: the model
# writes model_new.py.  The model is a TEST DOUBLE (tests/cli/llm-double.py)
# with scripted content: iteration 0 a ModelNew that execs its way to the
# reference (the planted cheat tests/fixtures/torch/relu01/static_exec), which
# the normal measure path refuses at gate static before any runner starts;
# iteration 1 a traversal four times, refused with nothing written;
# iteration 2 a reply cut on the length limit, which puts the run's
# truncation rate over the protocol's alarm: the run halts as an
# infrastructure defect.  The prompt holds the reference and ModelNew's
# interface.  Then the replay without a server reproduces both proposals
# and halts at the same call.  Needs only python3 (the
# static checker), not torch: nothing here reaches a runner.
. "$(dirname "$0")/lib.sh"
command -v jq >/dev/null || skip_all "jq not installed"
command -v python3 >/dev/null || skip_all "python3 not installed"
command -v sqlite3 >/dev/null || skip_all "sqlite3 not installed"
export ATB_PYTHON=${ATB_PYTHON:-python3} ATB_TORCH_DEVICE=cpu

mkdir task && cp "$ATB_SOURCE_DIR/tests/fixtures/torch/relu01.py" task/relu01.py
CHEAT=$ATB_SOURCE_DIR/tests/fixtures/torch/relu01/static_exec/model_new.py
python3 - "$CHEAT" <<'PY'
import json, sys
cheat = open(sys.argv[1]).read()
json.dump([{"content": json.dumps({"files": {"model_new.py": cheat}})}] +
          [{"content": json.dumps({"files": {"../model_new.py": "x = 1\n"}})}] * 4 +
          [{"content": "{\"files\": {\"model_new.py\": \"import", "finish_reason": "length"}],
          open("script.json", "w"))
PY
llm_double
iters() { sqlite3 -cmd ".timeout 10000" -json atb.db "SELECT k, knobs, outcome, reason FROM iteration WHERE run = '$1' ORDER BY k"; }

test_expect "the model's model_new.py goes through the static gate; a traversal writes nothing" '
	expect_exit 1 "$ATB" run task/relu01.py --proposer llm-code --model double --base-url "$URL" \
		--iterations 3 --quiet &&
	expect_grep "halted as an infrastructure defect" "$TRASH/err" &&
	RUN=$(sqlite3 atb.db "SELECT id FROM run") && echo "$RUN" >run_id &&
	iters "$RUN" >it.json && cat it.json && jq -e "length == 2" it.json &&
	cmp "$CHEAT" "runs/$RUN/iter-0/candidate/model_new.py" &&
	jq -e ".[0].outcome == \"static\" and (.[0].reason | contains(\"dynamic_code\"))" it.json &&
	jq -e ".[1].outcome == \"proposal\" and (.[1].reason | contains(\"climbs out\"))" it.json &&
	test -z "$(ls -A "runs/$RUN/iter-1/candidate")" && test ! -e "runs/$RUN/iter-1/model_new.py" &&
	jq -r .body d.log | sed -n 1p | jq -r ".messages[0].content" | head -1 |
		grep -q "^atb prompt template llm-code-torch-1 sha256:[0-9a-f]\{64\}$" &&
	jq -r .body d.log | sed -n 1p | jq -r ".messages[1].content" >p1 &&
	expect_grep "return torch.relu(x)" p1 && expect_grep "class ModelNew(torch.nn.Module)" p1 &&
	jq -r .body d.log | sed -n 2p | jq -r ".messages[1].content" >p2 &&
	expect_grep "  0: model_new.py $(sha256sum "$CHEAT" | cut -c1-12) -> static (" p2
'

test_expect "the replay without a server reproduces both proposals and the halt" '
	RUN=$(cat run_id) && kill $DOUBLE && wait $DOUBLE 2>/dev/null;
	expect_exit 1 "$ATB" run --replay "$RUN" --quiet &&
	expect_grep "halted as an infrastructure defect" "$TRASH/err" &&
	REP=$(sqlite3 atb.db "SELECT id FROM run WHERE id != '\''$RUN'\''") &&
	"$ATB" llm show "$REP" --json | jq -e ".calls == 6 and .truncated == 1 and .halted and .halt_reason == \"truncation\"" &&
	cmp <(iters "$RUN" | jq -c "[.[] | .knobs, .outcome]") <(iters "$REP" | jq -c "[.[] | .knobs, .outcome]") &&
	cmp "$CHEAT" "runs/$REP/iter-0/candidate/model_new.py" &&
	"$ATB" audit verify >/dev/null && "$ATB" llm check >/dev/null
'

test_expect "a torch task with a knob proposer is refused up front" '
	expect_exit 2 "$ATB" --db other.db run task/relu01.py --iterations 1 &&
	expect_grep "atb run has nothing to propose for it but code (--proposer llm-code" "$TRASH/err" &&
	test ! -e other.db
'

test_expect "a store or runs folder inside the task folder is refused before the run starts" '
	cp task/relu01.py relu01.py &&
	expect_exit 2 "$ATB" --db here.db run ./relu01.py --proposer llm-code --model double \
		--base-url http://127.0.0.1:1 --iterations 1 &&
	expect_grep "store '\''here.db'\'' lies in the folder of task '\''relu01'\''" "$TRASH/err" &&
	expect_exit 2 "$ATB" --db other2.db run task/relu01.py --proposer llm-code --model double \
		--base-url http://127.0.0.1:1 --iterations 1 --runs-dir task/runs &&
	expect_grep "runs folder '\''task/runs'\'' lies in the folder" "$TRASH/err" &&
	test "$(sqlite3 here.db "SELECT count(*) FROM run")" = 0
'

test_done
