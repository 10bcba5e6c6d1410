#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The clock attack on the cuda backend (issue 11, item 3, "on every
# backend"): tests/fixtures/cheats/cuda_relu/clock does the task's own
# baseline work and, on its first call, points atb-runner's copy of the
# driver's cuEventElapsedTime (a function pointer in its writable data,
# src/cuda/cuda.c) at a function that returns 0.9x the true time of the
# candidate's own trials: about 1.11x, under the physical floor's reach on
# a bandwidth-bound task.  Host clocks are untouched, so gate clock's span
# check sees nothing.  This test asks that it is not admitted; it fails
# while device time can be forged (no gate refuses it yet: the open part
# of the attack, docs/internals/gates.md, "Clock").  The compile check runs
# wherever nvcc is; the rest needs the GPU (scripts/gpu-check, step t2230).
. "$(dirname "$0")/lib.sh"

CHEATS=$ATB_HOME/tests/fixtures/cheats/cuda_relu
command -v nvcc >/dev/null || PATH="/usr/local/cuda/bin:$PATH"
command -v nvcc >/dev/null || skip_all "no nvcc: not a CUDA build machine"

test_expect "the cuda clock cheat builds with the protocol's nvcc flags" '
	nvcc -O3 --shared -Xcompiler -fPIC -I"$ATB_HOME/include" -o clock.so \
		"$CHEATS/clock/kernel.cu" &&
	nm -D clock.so | grep -q " T atb_kernel"
'

. "$ATB_HOME/tests/fixtures/cheats/cuda_common.sh"
cuda_require
export ATB_DB=$TRASH/m.db
cuda_task_copy cuda_relu task 's/value: 67108864/value: 16777216/'

test_expect "a candidate that forges the runner's device clock is not admitted" '
	rc=0 &&
	"$ATB" measure --json "$TRASH/task" "$CHEATS/clock" --seeds 4 --no-naive \
		>"$TRASH/out" 2>"$TRASH/err" || rc=$? &&
	jq -r "\"# \" + ({verdict, gate, speedup, reason} | tojson)" "$TRASH/out" &&
	[ $rc = 2 ] && jq -e ".verdict == \"rejected\"" "$TRASH/out" >/dev/null ||
		{ echo "# open attack: the forged device clock was not refused"; cat "$TRASH/err"; exit 1; }
'

test_done
