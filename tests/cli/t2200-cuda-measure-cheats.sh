#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# atb measure on the GPU: every planted GPU cheat (tests/fixtures/cheats/
# cuda_relu/) is refused by `atb measure` with its exact gate, stored as a
# rejection; the honest template with default knobs is admitted.  The task
# is cuda_relu at N = 16 Mi (128 MiB a call, about 30 us on an H200), so
# the whole file runs in a few minutes.  Skipped where there is no CUDA
# driver or no nvcc; scripts/gpu-check runs it on the GPU box.
# PROTO: gates side_stream, gates.physical_floor.margin, gates.timed_correctness, correctness.poison,
# correctness.distributions, correctness.tolerances.
. "$(dirname "$0")/lib.sh"

CHEATS=$ATB_HOME/tests/fixtures/cheats/cuda_relu
. "$ATB_HOME/tests/fixtures/cheats/cuda_common.sh"
cuda_require
export ATB_DB=$TRASH/m.db
cuda_task_copy cuda_relu task 's/value: 67108864/value: 16777216/'

# refused NAME GATE: measuring candidate folder NAME is refused by GATE.
refused() {
	cuda_refused "$TRASH/task" "$CHEATS/$1" "$2"
}

test_expect "correctness: identity on the task's [0,1) inputs fails signed ones" '
	refused identity correctness && grep -q "signed_uniform\|normal\|magnitude" "$TRASH/out"
'
test_expect "side_stream: work on another stream escapes the timed window" '
	refused sidestream side_stream
'
test_expect "result_reuse: a result left in a recycled allocation" '
	refused stale result_reuse
'
test_expect "input_mutation: ReLU in place on the input" '
	refused mutate input_mutation
'
test_expect "correctness: a constant output matching one fixed input" '
	refused constant correctness
'
test_expect "correctness: fp32 computed through fp16, beyond the tolerance" '
	refused fp16 correctness
'
test_expect "physical_floor: timed calls that skip the work, on the GPU floor" '
	refused skip-timed physical_floor && grep -q "physical floor" "$TRASH/out"
'
# PROTO: gates.timed_correctness -- honest time, outputs written elsewhere
# on timed calls: only the checks between timed rounds see it.
test_expect "timed_correctness: timed calls that write their result elsewhere" '
	refused skip-timed-slow timed_correctness &&
	grep -q "wrong after timed calls on seed" "$TRASH/out"
'
test_expect "the GPU floor was measured once and cached with the box" '
	if have_sql; then
		sql "$ATB_DB" "SELECT kind, value FROM box_capability" | tee caps.txt &&
		test "$(grep -c "^gpu0_mem_bw_bytes_per_s|" caps.txt)" = 1
	else
		echo "no sqlite3 shell nor python3 here: the cache is not inspected"
	fi
'
test_expect "the honest template with default knobs is admitted" '
	mkdir honest && cp "$ATB_HOME/tasks/cuda_relu/tunable.cu" honest/kernel.cu &&
	expect_exit 0 "$ATB" measure --json "$TRASH/task" honest --naive &&
	grep -q "\"verdict\": \"admitted\"" "$TRASH/out" &&
	grep -Eq "\"floor_ns\": [1-9]" "$TRASH/out" && cat "$TRASH/out" ||
		{ cat "$TRASH/out" "$TRASH/err"; false; }
'
test_done
