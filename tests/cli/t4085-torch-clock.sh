#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# ctest: lock timing -- an honest verdict from real timing (CMakeLists.txt)
# Gate clock on the torch backend (issue 11, "a faked clock"): a KernelBench
# candidate shares atb-runner's process with the C timing core, so one that
# builds and loads a C library at import (subprocess, torch.ops.load_library:
# nothing the static check refuses) can point the executable's GOT entry for
# clock_gettime at a clock that runs behind by half of each of its calls
# (tests/fixtures/torch/relu_spin/clock, the torch form of the cpu backend's
# relu/clock in t6010).  On the runner's own clock its trials read half the
# reference's; `atb measure` refuses it as gate clock, the harness's clock
# outside the process seeing the group's span longer; the honest copy of the
# same task passes the gate.  Needs a python with PyTorch and a C compiler.
# PROTO: gates clock
. "$(dirname "$0")/lib.sh"

RUNNER=${ATB_RUNNER:-$ATB_BUILD_DIR/atb-runner}
FIX=$ATB_SOURCE_DIR/tests/fixtures/torch
[ -x "$RUNNER" ] || skip_all "no atb-runner at $RUNNER"
need_torch_cpu "$RUNNER"
command -v jq >/dev/null || skip_all "jq not installed"
command -v cc >/dev/null || skip_all "no C compiler (the planted cheat builds its library)"
export ATB_PYTHON=$PY
export ATB_DB=$TRASH/m.db

python_json python.json

# Without the gate the cheat would pass as 2x: its calls read half the
# reference's on the runner's clock (the same ReLU and 1 ms wait).
test_expect "the planted cheat works: on the runner's clock its trials read half" '
	mkdir work && jq -c --arg t "$FIX/relu_spin.py" --arg c "$FIX/relu_spin/clock/model_new.py" \
		--arg m "$ATB_SOURCE_DIR/python" --slurpfile p python.json \
		".arms[0].py=\$t | .arms[1].py=\$c | .torch.python=\$p[0] |
		 .torch.module_path=\$m | .options.skip_timing=false" "$FIX/relu01-job.json" >clk.job &&
	(cd work && "$RUNNER" <../clk.job >../clk.ev 2>../clk.err) &&
	jq -se "[.[] | select(.event==\"samples\" and .seed==1)] | map({(.arm): .median_ns}) | add
		| .candidate < 0.7 * .baseline" clk.ev >/dev/null
'

test_expect "clock: a torch candidate that forges the runner's clock_gettime is refused" '
	expect_exit 2 "$ATB" measure --json "$FIX/relu_spin.py" "$FIX/relu_spin/clock/model_new.py" &&
	jq -e ".verdict == \"rejected\" and .gate == \"clock\" and (.rejection_id > 0)
		and (.reason | test(\"[0-9.]+ ms by the runner.s clock and [0-9.]+ ms by the harness.s\"))" \
		"$TRASH/out" >/dev/null || { cat "$TRASH/out" "$TRASH/err"; exit 1; }
	sqlite3 "$ATB_DB" "SELECT detail FROM rejection WHERE rule = '\''gate:clock'\''" |
		jq -se "length >= 1 and all(.runner_span_ns < .harness_span_ns)" >/dev/null
'

test_expect "the honest copy of the same task passes the clock gate" '
	expect_exit_past_box 0 "$ATB" measure --json "$FIX/relu_spin.py" \
		"$FIX/relu_spin/honest/model_new.py" &&
	jq -e ".verdict == \"admitted\"" "$TRASH/out" >/dev/null
'

test_expect "the refusal is audited and the chain verifies" '
	"$ATB" audit verify >/dev/null
'

test_done
