#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# gates.background on the torch backend (CPU tensors): the runner makes
# PyTorch's intra-op pool before any candidate code is imported and trusts
# the threads alive then (Session.trusted_threads, held by the tamper
# watch); each timed group's background event adds
# untrusted_threads_cpu_ns, the other threads' CPU less the trusted ones',
# which the judge reads where present (src/measure/gates.c).  An honest
# matmul, whose pool works beside every call, would be refused by the
# rule the cpu backend uses and is not by this one; the planted bg_pool
# (tests/fixtures/torch/relu01/bg_pool: a concurrent.futures thread, which
# the tamper watch lets pass, burning while the candidate is not in its
# call) is over 2% + 20 ms.  atb measure judges torch tasks by it from
# protocol version 5 (gates.background.torch_cpu; version 4: recorded,
# not judged).  Needs a python with PyTorch.  PROTO: gates.background
. "$(dirname "$0")/lib.sh"

RUNNER=${ATB_RUNNER:-$ATB_BUILD_DIR/atb-runner}
FIX=$ATB_SOURCE_DIR/tests/fixtures/torch
[ -x "$RUNNER" ] || skip_all "no atb-runner at $RUNNER"
need_torch_cpu "$RUNNER"
command -v jq >/dev/null || skip_all "jq not installed"
"$PY" "$FIX/python-info.py" >python.json || skip_all "cannot ask '$PY' about itself"

# run NAME TASK CANDIDATE [FILTER]: that job, timed; NAME.ev.
run() {
	jq -c --arg t "$FIX/$2.py" --arg c "$FIX/$2/$3/model_new.py" \
		--arg m "$ATB_SOURCE_DIR/python" --slurpfile p python.json \
		".arms[0].py=\$t | .arms[1].py=\$c | .torch.python=\$p[0] |
		 .torch.module_path=\$m | .options.skip_timing=false | ${4:-.}" \
		"$FIX/relu01-job.json" >"$1.job" &&
	{ "$RUNNER" <"$1.job" >"$1.ev" 2>"$1.err"; echo $? >"$1.rc"; }
}

# The judge's limits (the defaults, version 4's values): 2% of the wall + 20 ms.
ALLOWED='(0.02 * .wall_ns + 20000000)'
BG='[.[] | select(.event=="background")]'

test_expect "honest ReLU: every group reports its trusted threads, nothing untrusted burned" '
	run honest relu01 honest && [ "$(cat honest.rc)" = 0 ] &&
	jq -se "$BG | length == 2 and all(.trusted_threads >= 1 and
		.untrusted_threads_cpu_ns <= $ALLOWED)" honest.ev >/dev/null &&
	jq -se "map(select(.event==\"env\"))[0].torch.trusted_threads | length >= 1" honest.ev >/dev/null
'

test_expect "honest matmul: its pool works beside the calls, the untrusted threads do not" '
	run matmul matmul copy && [ "$(cat matmul.rc)" = 0 ] &&
	jq -se "$BG | length == 2 and all(.untrusted_threads_cpu_ns <= $ALLOWED)" matmul.ev >/dev/null ||
	{ jq -c "select(.event==\"background\")" matmul.ev; exit 1; }
	if [ "$(jq -s "map(select(.event==\"env\"))[0].torch.threads" matmul.ev)" -gt 1 ]; then
		jq -se "$BG | any(.other_threads_cpu_ns > $ALLOWED)" matmul.ev >/dev/null ||
		{ echo "# the pool did not work beside the calls here"; jq -c "select(.event==\"background\")" matmul.ev; }
	else
		echo "# one intra-op thread here: nothing for the pool to do"
	fi
'

test_expect "bg_pool: a burner on a pool thread passes the tamper watch and is over the limit" '
	run bg relu01 bg_pool ".timing.trials_min=60 | .timing.trials_max=80" &&
	[ "$(cat bg.rc)" = 0 ] &&
	jq -se "(map(select(.event==\"tamper\")) | length == 0) and
		($BG | length == 2 and any(.untrusted_threads_cpu_ns > $ALLOWED))" bg.ev >/dev/null ||
	{ jq -c "select(.event==\"background\" or .event==\"tamper\" or .event==\"error\")" bg.ev; exit 1; }
'

test_done
