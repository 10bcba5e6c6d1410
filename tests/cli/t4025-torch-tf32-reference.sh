#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The precision of the torch reference on the GPU (GPU machine; skipped
# where torch.cuda is not available).  In fp32 PyTorch runs cuDNN
# convolutions in TF32 by default (torch.backends.cudnn.allow_tf32), so the
# reference of a conv task is only as precise as TF32 (errors of some 1e-4
# relative), while an fp32 output is held to the protocol's fp32 tolerance
# (1e-4).  A copy matches the reference bit for bit as long as cuDNN picks
# the same algorithm; an honest candidate that computes the convolution in
# full fp32 (tests/fixtures/torch/conv1d/fp32: matmuls, no TF32) is more
# precise than the reference and must be admitted: under protocol v13 it
# was refused correctness (4.2 million of 22.4 million elements, session
# 29 on an H100); from v14 the reference's own error against its float64
# result is allowed for (correctness.reference_precision; the CPU half is
# t4026).  Run by scripts/gpu-check only when named (step t4025).
. "$(dirname "$0")/lib.sh"

FIX=$ATB_SOURCE_DIR/tests/fixtures/torch
PY=${ATB_PYTHON:-$ATB_SOURCE_DIR/.venv-torch/bin/python3}
[ -x "$ATB" ] || skip_all "no atb at $ATB"
command -v jq >/dev/null || skip_all "jq not installed"
[ -x "$PY" ] && "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" \
	2>/dev/null || skip_all "no python with torch.cuda at '$PY' (GPU machine test)"
export ATB_PYTHON=$PY ATB_DB=$TRASH/atb.db

# How far the reference's TF32 is from full fp32 on this card, for the note.
"$PY" - "$FIX/conv1d.py" <<'PY' || true
import importlib.util, sys, torch
s = importlib.util.spec_from_file_location("t", sys.argv[1]); t = importlib.util.module_from_spec(s)
s.loader.exec_module(t)
torch.manual_seed(0)
m = t.Model(*t.get_init_inputs()).cuda()
x = t.get_inputs()[0].cuda()
a = m(x)
torch.backends.cudnn.allow_tf32 = False
b = m(x)
d = (a - b).abs()
print("# tf32 against fp32: max abs %.3g, max rel %.3g, over 1e-4 + 1e-4|fp32|: %d of %d"
      % (d.max().item(), (d / b.abs().clamp_min(1e-30)).max().item(),
         int((d > 1e-4 + 1e-4 * b.abs()).sum().item()), d.numel()))
PY

test_expect "a copy of the TF32 conv: admitted, CI covering 1" '
	expect_verdict ".verdict==\"admitted\" and .ci_low<=1 and .ci_high>=1" \
		"$ATB" measure --json --device cuda "$FIX/conv1d.py" "$FIX/conv1d/copy/model_new.py"
'

test_expect "the same conv in full fp32 (more precise than the reference): admitted" '
	"$ATB" measure --json --device cuda "$FIX/conv1d.py" "$FIX/conv1d/fp32/model_new.py" \
		>fp32.json 2>fp32.err; echo "# $(jq -c "{verdict, gate, reason, speedup}" fp32.json)" &&
	jq -e ".verdict==\"admitted\"" fp32.json >/dev/null
'

test_expect "the same conv on bfloat16 operands (less precise than TF32): refused correctness" '
	"$ATB" measure --json --device cuda "$FIX/conv1d.py" "$FIX/conv1d/bf16/model_new.py" \
		>bf16.json 2>bf16.err; echo "# $(jq -c "{verdict, gate, reason}" bf16.json)" &&
	jq -e ".verdict==\"rejected\" and .gate==\"correctness\"" bf16.json >/dev/null
'

test_done
