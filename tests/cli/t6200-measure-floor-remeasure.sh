#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The physical floor on a loaded box: caps cached while the box was busy
# are too low, so the floor they give is too high.  A planted stale row
# (memory bandwidth 1e5 B/s, "measured under load") makes the honest
# relu-spin template beat the floor; atb measure then re-measures the caps
# once (atb_floor_remeasure_cpu, which only raises them), stores the raised
# ones and judges again: the honest candidate is not refused by the floor,
# and the output records both floors.  The skip-timed cheat is still
# refused after a re-measure (t6000 checks it too).
# PROTO: gates.physical_floor.margin.
. "$(dirname "$0")/lib.sh"

CHEATS=$ATB_SOURCE_DIR/tests/fixtures/cheats
[ -x "$ATB_BUILD_DIR/atb-runner" ] || skip_all "no atb-runner"
command -v cc >/dev/null || skip_all "no C compiler"
command -v jq >/dev/null || skip_all "jq not installed"
command -v sqlite3 >/dev/null || skip_all "sqlite3 not installed"
export ATB_DB=$TRASH/m.db
BW=cpu_mem_bw_bytes_per_s

test_expect "first use measures the caps (an identity refused on correctness)" '
	expect_exit 2 "$ATB" measure --json "$CHEATS/tasks/relu-spin" "$CHEATS/relu/identity" \
		--seeds 2 &&
	jq -e ".gate == \"correctness\"" "$TRASH/out" >/dev/null &&
	[ "$(sqlite3 "$ATB_DB" "SELECT count(*) FROM box_capability")" = 2 ]
'

test_expect "plant a stale low bandwidth for this box (measured under load)" '
	sqlite3 "$ATB_DB" "INSERT INTO box_capability (fingerprint, kind, value, method,
		measured_at) SELECT fingerprint, kind, 1e5, '\''planted: measured under load'\'',
		measured_at FROM box_capability WHERE kind = '\''$BW'\'' LIMIT 1" &&
	[ "$(sqlite3 "$ATB_DB" "SELECT value FROM box_capability WHERE kind = '\''$BW'\''
		ORDER BY id DESC LIMIT 1")" = 100000.0 ]
'

# The verdict itself may be noise on a busy box; what matters is that the
# floor did not refuse it and that it was re-measured.
test_expect "an honest candidate is not refused: the re-measure raises the caps" '
	"$ATB" measure --json "$CHEATS/tasks/relu-spin" "$CHEATS/relu/honest-spin" --seeds 2 \
		>"$TRASH/out" 2>"$TRASH/err" || true
	jq -e ".floor_remeasured == true and .gate != \"physical_floor\"
		and .floor_cached_ns > 1e8 and .floor_ns < .floor_cached_ns / 1000" \
		"$TRASH/out" >/dev/null || { cat "$TRASH/out" "$TRASH/err"; exit 1; }
'

test_expect "the raised bandwidth is stored as the cap in force" '
	v=$(sqlite3 "$ATB_DB" "SELECT value FROM box_capability WHERE kind = '\''$BW'\''
		ORDER BY id DESC LIMIT 1") &&
	awk -v v="$v" "BEGIN { exit !(v > 1e8) }" &&
	[ "$(sqlite3 "$ATB_DB" "SELECT count(*) FROM box_capability WHERE kind = '\''$BW'\''")" = 3 ]
'

test_expect "an admitted result records the re-measure in its stats" '
	n=$(sqlite3 "$ATB_DB" "SELECT count(*) FROM result") &&
	if [ "$n" -gt 0 ]; then
		sqlite3 "$ATB_DB" "SELECT stats FROM result ORDER BY id DESC LIMIT 1" |
			jq -e ".floor.remeasured == true and .floor.floor_cached_ns > .floor.floor_ns" \
			>/dev/null
	fi
'

# In process: an arm worker's round trip alone (about 15 us quiet, 80 under
# load) is over this task's 10 us floor, so from a worker the cheat is
# refused by gate timed_correctness instead (t6000).
test_expect "the skip-timed cheat still beats the re-measured floor" '
	ATB_ISOLATION=none expect_exit 2 "$ATB" measure --json "$CHEATS/tasks/relu-spin" "$CHEATS/relu/skip-timed" \
		--seeds 2 &&
	jq -e ".gate == \"physical_floor\"" "$TRASH/out" >/dev/null ||
		{ cat "$TRASH/out" "$TRASH/err"; exit 1; }
'

test_done
