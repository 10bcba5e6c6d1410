#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# atb run --proposer llm-code on a CUDA task, on the GPU machine (issue 14:
# "one LLM run on a CUDA task with the replayed calls of a recorded run").
# The model is the TEST DOUBLE tests/cli/llm-double.py (the GPU machine has
# no model server and no network), scripted call by call:
#   iteration 0   call 1: the honest baseline's kernel as a fenced ```cuda
#                 kernel.cu block -> built by nvcc, correct, timed
#   iteration 1   calls 2-5 (the protocol's calls per iteration): a path
#                 traversal, an absolute path, a diff naming ../../evil.cu, a
#                 file off the surface -> refused, nothing written, the
#                 iteration unusable ("proposal")
#   iteration 2   call 6: a copy of X to Y (right on the task's own [0, 1)
#                 inputs) -> built, refused by the correctness gate on the
#                 protocol's signed inputs
# Then 'atb run --replay' with the double stopped reproduces every proposal
# (the candidate files) and the verdicts' outcomes from the recorded calls.
# cuda_relu with N / 16 (4 Mi floats) keeps it under a minute.  Skipped
# where there is no CUDA driver or no nvcc; scripts/gpu-check's llm-cuda step
# runs it there.
. "$(dirname "$0")/lib.sh"
. "$ATB_HOME/tests/fixtures/cheats/cuda_common.sh"
cuda_require
command -v python3 >/dev/null || skip_all "python3 not installed"

cuda_task_shrink cuda_relu "$TRASH/relu" 16 || exit 1
python3 - "$ATB_HOME/tasks/cuda_relu/baseline.cu" <<'PY'
import json, sys
good = open(sys.argv[1]).read()
cheat = good.replace("fmaxf(v.x, 0.f)", "v.x").replace("fmaxf(v.y, 0.f)", "v.y") \
            .replace("fmaxf(v.z, 0.f)", "v.z").replace("fmaxf(v.w, 0.f)", "v.w") \
            .replace("fmaxf(x[i], 0.f)", "x[i]")
assert cheat != good and "fmaxf" not in cheat
script = [
    {"content": "The grid-stride float4 kernel.\n\n```cuda kernel.cu\n" + good + "```\n"},
    {"content": json.dumps({"files": {"../../evil.cu": "int x;\n"}})},
    {"content": json.dumps({"files": {"/tmp/atb-t5115-evil.cu": "int x;\n"}})},
    {"content": "```diff\n--- a/kernel.cu\n+++ b/../../evil.cu\n@@ -0,0 +1 @@\n+int x;\n```\n"},
    {"content": json.dumps({"files": {"evil.cu": "int x;\n"}})},
    {"content": json.dumps({"files": {"kernel.cu": cheat}})},
]
json.dump(script, open("script.json", "w"))
open("good.cu", "w").write(good)
open("cheat.cu", "w").write(cheat)
PY
llm_double
export ATB_DB=$TRASH/atb.db

# outcomes RUN: each iteration's outcome and proposal (the files' hashes),
# one line each, from atb report.
outcomes() { "$ATB" report "$1" --json | python3 -c 'import json, sys
for it in json.load(sys.stdin)["trajectory"]:
    print(it["iteration"], it["outcome"], json.dumps(it["knobs"], sort_keys=True))'; }

test_expect "the model's CUDA kernel is built, checked and timed; the cheat refused" '
	"$ATB" run "$TRASH/relu" --proposer llm-code --model double --base-url "$URL" \
		--iterations 3 --seed 3 --no-naive --quiet --json >run.json &&
	RUN=$(python3 -c "import json; print(json.load(open(\"run.json\"))[\"run\"])") &&
	echo "$RUN" >run_id && cat run.json &&
	C=runs/$RUN/iter-0/candidate && cmp good.cu "$C/kernel.cu" &&
	cmp cheat.cu "runs/$RUN/iter-2/candidate/kernel.cu" &&
	outcomes "$RUN" | tee oc && grep -q "^0 usable {.*\"files\": {\"kernel.cu\": " oc &&
	grep -q "^1 proposal " oc && grep -q "^2 correctness " oc &&
	test -z "$(find "$TRASH" -name evil.cu | head -1)" && test ! -e /tmp/atb-t5115-evil.cu
'

test_expect "replay without any server: the same proposals and outcomes" '
	RUN=$(cat run_id) && kill $DOUBLE && wait $DOUBLE 2>/dev/null; n=$(wc -l <d.log) &&
	"$ATB" run --replay "$RUN" --quiet --json >rep.json && cat rep.json &&
	REP=$(python3 -c "import json; print(json.load(open(\"rep.json\"))[\"run\"])") &&
	for k in 0 1 2; do cmp "runs/$RUN/iter-$k/candidate/kernel.cu" "runs/$REP/iter-$k/candidate/kernel.cu" || exit 1; done &&
	outcomes "$REP" >oc2 && cat oc2 && cmp oc oc2 &&
	test "$(wc -l <d.log)" = "$n" &&
	"$ATB" audit verify >/dev/null && "$ATB" llm check >/dev/null
'

test_done
