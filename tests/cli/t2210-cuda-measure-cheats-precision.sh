#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# atb measure on the GPU, the cheats issue 4 names beside t2200's: a
# constant output that matches one fixed input, a memorised output, and
# precision downgrades beyond the task's tolerance (an fp32 softmax computed
# in fp16, an fp32 GEMM through cuBLAS TF32 math and through bf16 tiles).
# Each planted cheat (tests/fixtures/cheats/cuda_softmax/, cuda_gemm/) is
# refused with its exact gate and stored as a rejection.  The tasks are
# shrunk for speed (cuda_softmax R = 2048, C = 8192; cuda_gemm 1024^3);
# their correctness sets are the bundled ones.  Skipped where there is no
# CUDA driver or no nvcc; scripts/gpu-check runs it on the GPU box.
# PROTO: correctness.tolerances, correctness.reduction_tolerance,
# correctness.distributions, gates result_reuse.
. "$(dirname "$0")/lib.sh"
. "$ATB_HOME/tests/fixtures/cheats/cuda_common.sh"
cuda_require
CHEATS=$ATB_HOME/tests/fixtures/cheats
export ATB_DB=$TRASH/m.db
cuda_task_copy cuda_softmax softmax '/name: R,/s/value: 8192/value: 2048/'
cuda_task_copy cuda_gemm gemm 's/value: 4096/value: 1024/'

test_expect "correctness: softmax writing 1/C everywhere (right for one constant input)" '
	cuda_refused "$TRASH/softmax" "$CHEATS/cuda_softmax/uniform" correctness &&
	grep -q "wrong output on seed 1, set" "$TRASH/out"
'
test_expect "result_reuse: softmax memorising its first output per shape" '
	cuda_refused "$TRASH/softmax" "$CHEATS/cuda_softmax/memo" result_reuse &&
	grep -q "same_buffers_new_inputs" "$TRASH/out"
'
test_expect "correctness: fp32 softmax computed in fp16" '
	cuda_refused "$TRASH/softmax" "$CHEATS/cuda_softmax/fp16" correctness
'
test_expect "correctness: fp32 GEMM through cuBLAS TF32 tensor-core math" '
	cuda_refused "$TRASH/gemm" "$CHEATS/cuda_gemm/tf32" correctness
'
test_expect "correctness: fp32 GEMM on bf16 tiles" '
	cuda_refused "$TRASH/gemm" "$CHEATS/cuda_gemm/bf16" correctness
'
test_expect "no planted cheat reached the results table" '
	if have_sql; then
		test "$(sql "$ATB_DB" "SELECT count(*) FROM result")" = 0 &&
		test "$(sql "$ATB_DB" "SELECT count(*) FROM rejection")" = 5
	else
		echo "no sqlite3 shell nor python3 here: the store is not inspected"
	fi
'
test_done
