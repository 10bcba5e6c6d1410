#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# A candidate that is plainly wrong on some inputs (precision lost on a
# data-dependent path, no state) must be filed as correctness, never as
# result_reuse, even when its first inputs are right and the result-reuse
# step's second inputs are the first it gets wrong.  The planted cheat
# tests/fixtures/cheats/relu/lossy rounds its first element to bf16 above
# 0.5.  PROTO: gates result_reuse (the fresh-buffer rerun), correctness.
. "$(dirname "$0")/lib.sh"

RUNNER=${ATB_RUNNER:-$ATB_BUILD_DIR/atb-runner}
CHEATS=$ATB_SOURCE_DIR/tests/fixtures/cheats
FIX=$ATB_SOURCE_DIR/tests/fixtures/runner
[ -x "$RUNNER" ] || skip_all "no atb-runner at $RUNNER"
command -v jq >/dev/null || skip_all "jq not installed"
command -v cc >/dev/null || skip_all "no C compiler"
export ATB_DB=$TRASH/m.db

cc -shared -fPIC -O2 -I"$ATB_SOURCE_DIR/include" -o relu_ref.so "$FIX/relu_ref.c" &&
cc -shared -fPIC -O2 -I"$ATB_SOURCE_DIR/include" -o lossy.so "$CHEATS/relu/lossy/kernel.c" &&
cc -shared -fPIC -O2 -I"$ATB_SOURCE_DIR/include" -o cache.so "$FIX/relu_cache.c" ||
	skip_all "cannot build the fixtures"

# run_job SO: the relu runner job on candidate SO, events into SO.ev.
run_job() {
	jq -c --arg b "$PWD/relu_ref.so" --arg c "$PWD/$1" \
		'.arms[0].so=$b | .arms[1].so=$c | .seeds=[1,2,3,4]' "$FIX/relu-job.json" |
		"$RUNNER" >"$1.ev" 2>"$1.err"
}

test_expect "runner: wrong on the second inputs in old and in fresh buffers is a wrong output" '
	run_job lossy.so &&
	jq -se "[.[] | select(.event==\"correctness\" and .gates.result_reuse.wrong_in_fresh_buffers)]
		| length > 0 and all(.pass==false and .first_bad.index==0)" lossy.so.ev >/dev/null &&
	jq -se "[.[] | select(.event==\"correctness\" and .gates.result_reuse.follows_inputs==false)]
		| length == 0" lossy.so.ev >/dev/null
'

test_expect "runner: a pointer-keyed cache is right in fresh buffers, so still result reuse" '
	run_job cache.so &&
	jq -se "[.[] | select(.event==\"correctness\" and .gates.result_reuse.checked)]
		| length > 0 and all(.gates.result_reuse.follows_inputs==false and
		  .gates.result_reuse.failed_step==\"same_buffers_new_inputs\" and
		  .gates.result_reuse.wrong_in_fresh_buffers==false)" cache.so.ev >/dev/null
'

test_expect "measure: the lossy candidate is refused by correctness, not result_reuse" '
	cp -r "$CHEATS/tasks/relu-spin" task &&
	expect_exit 2 "$ATB" measure --json "$TRASH/task" "$CHEATS/relu/lossy" --seeds 2 &&
	jq -e ".verdict == \"rejected\" and .gate == \"correctness\"" "$TRASH/out" >/dev/null ||
		{ cat "$TRASH/out" "$TRASH/err"; exit 1; }
'

test_expect "measure: the pointer-keyed cache is still refused by result_reuse" '
	expect_exit 2 "$ATB" measure --json "$TRASH/task" "$CHEATS/relu/cache" --seeds 2 &&
	jq -e ".verdict == \"rejected\" and .gate == \"result_reuse\"" "$TRASH/out" >/dev/null ||
		{ cat "$TRASH/out" "$TRASH/err"; exit 1; }
'

test_done
