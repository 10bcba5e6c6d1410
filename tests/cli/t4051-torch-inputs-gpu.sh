#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# GPU machine: a cuda torch job's inputs are born on the GPU.  Two processes
# drawing with the same seed on cuda get byte-identical inputs (the paired
# arms and the baseline-alone runner see the same inputs); a real runner's
# env event says inputs_on "cuda" for relu01 and "cpu", with the reason,
# for a task that pins device='cpu'.  Skipped (77) without torch or cuda.
. "$(dirname "$0")/lib.sh"

RUNNER=${ATB_RUNNER:-$ATB_BUILD_DIR/atb-runner}
PY=${ATB_PYTHON:-$ATB_SOURCE_DIR/.venv-torch/bin/python3}
FIX=$ATB_SOURCE_DIR/tests/fixtures/torch
command -v jq >/dev/null || skip_all "jq not installed"
[ -x "$RUNNER" ] || skip_all "no atb-runner at $RUNNER"
[ -x "$PY" ] && "$PY" -c "import torch; assert torch.cuda.is_available()" 2>/dev/null ||
	skip_all "no python with torch and cuda at '$PY'"

draw() {
	local out=$1; shift
	PYTHONPATH=$ATB_SOURCE_DIR/python PYTHONDONTWRITEBYTECODE=1 \
		"$PY" -m atb_torch.inputs "$@" >"$out" 2>"$out.err"
}

"$PY" "$FIX/python-info.py" >python.json ||
	skip_all "cannot ask '$PY' about itself"

# env TASK: the env event of a correctness-only cuda job of TASK against itself.
env_of() {
	jq -c --arg t "$1" --arg m "$ATB_SOURCE_DIR/python" --slurpfile p python.json \
		'.arms[0].py=$t | .arms[1].py=$t | .torch.python=$p[0] |
		 .torch.module_path=$m | .torch.device="cuda"' "$FIX/relu01-job.json" >job.json &&
	"$RUNNER" <job.json 2>runner.err | jq -c 'select(.event=="env") | .torch'
}

test_expect "same seed on cuda, two processes: identical inputs, born on cuda" '
	draw a.json "$FIX/relu01.py" --device cuda --seed 7 &&
	draw b.json "$FIX/relu01.py" --device cuda --seed 7 &&
	test "$(jq -r .inputs_on a.json)" = cuda &&
	test "$(jq -r ".sha256[0]" a.json)" = "$(jq -r ".sha256[0]" b.json)"
'

test_expect "the runner records where the inputs were born, and why not" '
	env_of "$FIX/relu01.py" >e1.json && test "$(jq -r .inputs_on e1.json)" = cuda &&
	env_of "$FIX/inputs_pinned_cpu.py" >e2.json && test "$(jq -r .inputs_on e2.json)" = cpu &&
	expect_grep "returned input 0 on cpu" e2.json
'

test_done
