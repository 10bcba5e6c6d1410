#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# atb task list: the bundled CPU and CUDA tasks, as text and JSON; help text.
. "$(dirname "$0")/lib.sh"

test_expect "list names the fifteen bundled kernel tasks and the two engine tasks" '
	expect_exit 0 "$ATB" task list &&
	for t in cuda_gemm cuda_layernorm cuda_merge_attn_states cuda_reduce_sum cuda_relu cuda_rmsnorm_residual cuda_silu_mul cuda_softmax cuda_transpose layernorm prefix_sum relu sgemm softmax stencil2d engine-llamacpp-random engine-llamacpp-repeat; do
		grep -q "^$t " "$TRASH/out" || { echo "missing $t"; cat "$TRASH/out"; exit 1; }
	done &&
	[ "$(grep -vc " engine " "$TRASH/out")" -eq 15 ] && [ "$(grep -c " engine " "$TRASH/out")" -eq 2 ]
'

test_expect "list --json, before or after the command" '
	expect_exit 0 "$ATB" --json task list &&
	expect_grep "\"name\": \"sgemm\"" "$TRASH/out" &&
	expect_exit 0 "$ATB" task list --json &&
	expect_grep "\"kind\": \"cpu\"" "$TRASH/out"
'

test_expect "help documents every subcommand" '
	expect_exit 0 "$ATB" task --help &&
	expect_grep "atb task list" "$TRASH/out" &&
	expect_grep "atb task show" "$TRASH/out" &&
	expect_grep "atb task check" "$TRASH/out" &&
	expect_grep "exit codes" "$TRASH/out" &&
	expect_exit 0 "$ATB" help task &&
	expect_grep "--protocol FILE" "$TRASH/out"
'

test_expect "usage errors exit 2" '
	expect_exit 2 "$ATB" task &&
	expect_exit 2 "$ATB" task frobnicate &&
	expect_exit 2 "$ATB" task list --bogus &&
	expect_exit 2 "$ATB" task show
'

test_expect "an empty tasks folder lists nothing" '
	mkdir -p "$TRASH/home/tasks" &&
	ATB_HOME="$TRASH/home" expect_exit 0 "$ATB" task list &&
	[ ! -s "$TRASH/out" ]
'

test_done
