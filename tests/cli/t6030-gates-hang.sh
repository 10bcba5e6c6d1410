#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Gate hang: a kernel call that never returns no longer holds the job for
# timing.job_timeout_s (300 s).  The runner sends "progress" events from
# outside every timed window; the harness kills a runner silent longer than
# max(gates.hang.min_s, factor x the longest silence so far) (20 s and 10
# by default; startup_s, 120 s, before the first check) and measure refuses
# it as hang, naming the last event, the silence and the limit.  The cheat
# loops forever on about its 3rd timed call.  That the watchdog, not the
# 300 s job timeout, ended it is the gate and reason asserted; its limit rule
# is checked exactly on the stored numbers (the second test).  The wall-time
# bound (< 200 s for the whole measurement, builds included) is under the
# 300 s and leaves a loaded box room: the limit itself grows with the box's
# stalls (10 x the longest silence before: 5 s stalls at load 15 make it
# 50 s).  PROTO: gates.hang.
. "$(dirname "$0")/lib.sh"

CHEATS=$ATB_SOURCE_DIR/tests/fixtures/cheats
[ -x "$ATB_BUILD_DIR/atb-runner" ] || skip_all "no atb-runner"
command -v cc >/dev/null || skip_all "no C compiler"
command -v jq >/dev/null || skip_all "jq not installed"
command -v sqlite3 >/dev/null || skip_all "sqlite3 not installed"
export ATB_DB=$TRASH/m.db

test_expect "hang: a kernel that loops on its 3rd timed call is refused in far less than 300 s" '
	t0=$(date +%s) &&
	expect_exit 2 "$ATB" measure --json "$CHEATS/tasks/relu-spin" "$CHEATS/relu/hang" --seeds 2 &&
	t1=$(date +%s) && echo "# refused after $((t1 - t0)) s" &&
	[ $((t1 - t0)) -lt 200 ] &&
	jq -e ".verdict == \"rejected\" and .gate == \"hang\" and (.rejection_id > 0)
		and (.reason | test(\"made no progress for [0-9.]+ s after .timed_begin seed [0-9]+. and was killed: limit [0-9.]+ s\"))" \
		"$TRASH/out" >/dev/null || { cat "$TRASH/out" "$TRASH/err"; exit 1; }
'

# The limit is max(min_s, factor x the longest silence before): 20 s unless
# the box stalled the runner for over 2 s earlier.
test_expect "the refusal keeps the silence, the limit and the rule" '
	sqlite3 "$ATB_DB" "SELECT detail FROM rejection WHERE rule = '\''gate:hang'\''" |
		jq -e ".stall_s >= .limit_s and .in_startup == false and
			.min_s == 20 and .factor == 10 and .startup_s == 120 and .limit_s >= 20 and
			((.limit_s - ([20, 10 * .longest_gap_s] | max))
				| if . < 0 then -. else . end) < 0.01" >/dev/null
'

test_expect "the honest template on the same task is not killed" '
	expect_exit_past_box 0 "$ATB" measure --json "$CHEATS/tasks/relu-spin" "$CHEATS/relu/honest-spin" &&
	jq -e ".verdict == \"admitted\"" "$TRASH/out" >/dev/null
'

test_expect "the refusal is audited and the chain verifies" '
	"$ATB" audit verify >/dev/null
'

test_done
