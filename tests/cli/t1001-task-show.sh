#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# atb task show: declared parameters, buffers with evaluated counts, the
# honest baseline's why, knobs and floor; JSON per parameter set for the runner.
. "$(dirname "$0")/lib.sh"

test_expect "show sgemm as text" '
	expect_exit 0 "$ATB" task show sgemm &&
	expect_grep "timing set   M=192 N=192 K=192" "$TRASH/out" &&
	expect_grep "M=67 N=45 K=31" "$TRASH/out" &&
	expect_grep "[M, K] = 36864 elements" "$TRASH/out" &&
	expect_grep "cache-blocked i-k-j" "$TRASH/out" &&
	expect_grep "why" "$TRASH/out" &&
	expect_grep "TILE_I" "$TRASH/out" &&
	expect_grep "flops 2*M*N*K = 14155776" "$TRASH/out"
'

test_expect "show relu --json: its own generator is [0, 1)" '
	expect_exit 0 "$ATB" --json task show relu &&
	expect_grep "\"kind\": \"uniform\"" "$TRASH/out" &&
	expect_grep "\"low\": 0.0" "$TRASH/out" &&
	expect_grep "\"high\": 1.0" "$TRASH/out" &&
	expect_grep "\"use\": \"correctness\"" "$TRASH/out" &&
	expect_grep "\"count\": 1000003" "$TRASH/out"
'

test_expect "show by path" '
	expect_exit 0 "$ATB" task show "$ATB_SOURCE_DIR/tests/fixtures/task/good.yaml" &&
	expect_grep "task         good (cpu)" "$TRASH/out"
'

test_expect "show of an unknown task exits 2" '
	expect_exit 2 "$ATB" task show nosuchtask &&
	expect_grep "no task named '\''nosuchtask'\''" "$TRASH/err"
'

test_done
