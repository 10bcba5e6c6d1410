#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# bench/bench-kb-eval.py's own side (KernelBench's eval protocol, re-implemented
# as the reference atb's wall is compared with): on a copy of relu01 it
# runs 5 correctness trials (all pass on a copy), times 100 trials of each
# model and reports them (--kb-only: no atb measurement, which the bench
# itself is for and which is too slow for a test); --deadline stops it
# before a measurement starts; a missing task folder is a usage error
# naming it.  Needs a python with PyTorch; skipped without one.  Not a
# benchmark run: no figure is judged.
. "$(dirname "$0")/lib.sh"

need_torch_cpu "$ATB_BUILD_DIR/atb-runner"
command -v jq >/dev/null || skip_all "jq not installed"
BENCH=$ATB_SOURCE_DIR/bench/bench-kb-eval.py
mkdir suite && cp "$ATB_SOURCE_DIR/tests/fixtures/torch/relu01.py" suite/

test_expect "--kb-only: 5 of 5 correctness trials on the copy, 100 timed trials a model, a table row" '
	"$PY" "$BENCH" --kb-only --device cpu --python "$PY" --suite suite --json kb.json >out 2>err &&
	grep -q "correct 5/5" out && grep -q "^relu01.py " out &&
	jq -e ".rows|length==1 and (.[0].kb.new_ns|length)==100 and (.[0].kb.ref_ns|length)==100
		and .[0].kb.correct==5 and .[0].kb.wall>0" kb.json >/dev/null
'

test_expect "--deadline: nothing started past it, said so, exit 0" '
	"$PY" "$BENCH" --kb-only --device cpu --python "$PY" --suite suite --deadline 0.000001 >out 2>err &&
	grep -q "stopped at --deadline" out && ! grep -q "correct 5/5" out
'

test_expect "a missing task folder: usage error naming it (exit 2)" '
	expect_exit 2 "$PY" "$BENCH" --kb-only --suite no-such-dir &&
	expect_grep "no-such-dir" "$TRASH/err"
'

test_done
