#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Inputs generated on the job's device (python/atb_torch/inputs.py, the
# code every torch runner draws its inputs with), checked on the CPU: the
# device path (get_inputs() with the device as torch's default device after
# torch.manual_seed) gives byte-identical inputs in two processes for the
# same seed, other inputs for another seed, the same on the protocol's
# adversarial redraw; a cpu job keeps the CPU path.  The placement rule is
# checked with torch's "meta" device standing in for cuda (tensors born on
# a device that is not the CPU, no GPU needed): a plain task's inputs are
# born there, a task pinning device='cpu' or raising off the CPU falls back
# to the CPU path with the reason.  The GPU side is t4051 (GPU machine).
# Skipped (77) without torch.
. "$(dirname "$0")/lib.sh"

PY=${ATB_PYTHON:-$ATB_SOURCE_DIR/.venv-torch/bin/python3}
FIX=$ATB_SOURCE_DIR/tests/fixtures/torch
command -v jq >/dev/null || skip_all "jq not installed"
[ -x "$PY" ] && "$PY" -c "import torch" 2>/dev/null ||
	skip_all "no python with torch at '$PY' (scripts/install-torch.sh installs one)"

# draw OUT ARGS...: what a runner would draw, as JSON in OUT.
draw() {
	local out=$1; shift
	PYTHONPATH=$ATB_SOURCE_DIR/python PYTHONDONTWRITEBYTECODE=1 \
		"$PY" -m atb_torch.inputs "$@" >"$out" 2>"$out.err"
}
NORMAL='{"name":"normal","kind":"normal","mean":0,"stddev":1}'

test_expect "same seed, two processes, device path: identical inputs; another seed differs" '
	draw a.json "$FIX/relu01.py" --device cpu --on-device --seed 7 &&
	draw b.json "$FIX/relu01.py" --device cpu --on-device --seed 7 &&
	draw c.json "$FIX/relu01.py" --device cpu --on-device --seed 8 &&
	test "$(jq -r .inputs_on a.json)" = cpu &&
	test "$(jq -r ".sha256[0]" a.json)" = "$(jq -r ".sha256[0]" b.json)" &&
	test "$(jq -r ".sha256[0]" a.json)" != "$(jq -r ".sha256[0]" c.json)" &&
	test "$(jq -r ".sha256[0]|length" a.json)" = 64
'

test_expect "the adversarial redraw is seeded too: same seed same bytes, not the task set" '
	draw n1.json "$FIX/relu01.py" --device cpu --on-device --seed 7 --dist "$NORMAL" &&
	draw n2.json "$FIX/relu01.py" --device cpu --seed 7 --dist "$NORMAL" &&
	test "$(jq -r ".sha256[0]" n1.json)" = "$(jq -r ".sha256[0]" n2.json)" &&
	test "$(jq -r ".sha256[0]" n1.json)" != "$(jq -r ".sha256[0]" a.json)" &&
	test "$(jq -r .inputs_why n2.json)" = "cpu job"
'

test_expect "placement: born on the device; device=cpu and a raising get_inputs fall back with why" '
	draw m.json "$FIX/relu01.py" --device meta &&
	draw p.json "$FIX/inputs_pinned_cpu.py" --device meta &&
	draw r.json "$FIX/inputs_raises_off_cpu.py" --device meta &&
	test "$(jq -r .inputs_on m.json)" = meta &&
	test "$(jq -r .inputs_on p.json)" = cpu &&
	expect_grep "returned input 0 on cpu with meta as the default device" p.json &&
	test "$(jq -r .inputs_on r.json)" = cpu &&
	expect_grep "raised with meta as the default device: RuntimeError: this task draws" r.json
'

test_done
