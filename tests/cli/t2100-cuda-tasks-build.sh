#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The CUDA tasks of issue 4 (item 4): each loads with its shapes, dtypes and
# floors, and its baseline, naive kernel and template (default knobs) build
# with nvcc under the protocol's build.cuda flags (`atb task check`).  No GPU
# is needed: nothing runs here.  Skipped without nvcc.
. "$(dirname "$0")/lib.sh"

tasks="cuda_layernorm cuda_rmsnorm_residual cuda_silu_mul cuda_merge_attn_states cuda_reduce_sum cuda_transpose"

test_expect "each new task shows its bf16/fp32 buffers and a timing set" '
	for t in $tasks; do
		expect_exit 0 "$ATB" --json task show "$t" || exit 1
		expect_grep "\"kind\": \"cuda\"" "$TRASH/out" || exit 1
	done &&
	expect_exit 0 "$ATB" --json task show cuda_silu_mul &&
	expect_grep "\"dtype\": \"bf16\"" "$TRASH/out" &&
	expect_exit 0 "$ATB" --json task show cuda_merge_attn_states &&
	expect_grep "\"dtype\": \"fp32\"" "$TRASH/out"
'

command -v nvcc >/dev/null || PATH="/usr/local/cuda/bin:$PATH"
command -v nvcc >/dev/null || skip_all "no nvcc"

for t in $tasks; do
	test_expect "$t: baseline, naive and template build with nvcc" '
		expect_exit 0 "$ATB" task check '"$t"' &&
		expect_grep "check ok" "$TRASH/out"
	'
done

test_done
