#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Gate background: a thread or process that burns CPU beside the timed
# calls (so during the baseline's) is refused for that, not as noise.  Over
# every timed group the runner reports the CPU time of its other threads
# (process CPU clock minus the timing thread's: exited threads' time stays
# in it), of the other processes it can see (/proc schedstat, reaped
# children's included) and the thread and process counts; at most 2% of the
# group's wall time + 20 ms (the defaults; PROTO:
# gates.background.max_cpu_share, abs_slack_ms).  Idle processes are not
# refused (t6300's escaping candidate leaves 8 sleepers: admitted).
# Cheats on relu-work (fixed CPU work, so a theft slows the baseline): a
# burner thread from the .so's constructor (measured: the baseline beside it
# read 46 us against the candidate's 23 us), a forked burner, and one
# started lazily on the first timed call that exits before the group ends.
# Each burns 8-35% of a group's wall time here: far over the 2% + 20 ms.
# bg-hidden is bg-thread with the runner's own facts suppressed (it patches
# atb-runner's GOT slot for fputs and drops the background events): the
# harness's reading of the job's CPU time in /proc, from outside the
# runner, refuses it.
. "$(dirname "$0")/lib.sh"

CHEATS=$ATB_SOURCE_DIR/tests/fixtures/cheats
RUNNER=$ATB_BUILD_DIR/atb-runner
[ -x "$RUNNER" ] || skip_all "no atb-runner"
command -v cc >/dev/null || skip_all "no C compiler"
command -v jq >/dev/null || skip_all "jq not installed"
command -v sqlite3 >/dev/null || skip_all "sqlite3 not installed"
export ATB_DB=$TRASH/m.db
# The gate, for backends whose arms share the runner (cuda, torch, a cpu job
# with isolation none): in an arm's worker (protocol v11's default for cpu)
# the burners are stopped with it outside its own trials and a fork is
# refused, so these cheats steal nothing there (t6310).
export ATB_ISOLATION=none

test_expect "the runner reports each timed group's background facts" '
	cc -shared -fPIC -O2 -I"$ATB_SOURCE_DIR/include" -o ref.so \
		"$ATB_SOURCE_DIR/tests/fixtures/runner/relu_ref.c" &&
	jq -c --arg b "$PWD/ref.so" ".arms[0].so=\$b | .arms[1].so=\$b" \
		"$ATB_SOURCE_DIR/tests/fixtures/runner/relu-job.json" | "$RUNNER" >a.ev &&
	n=$(jq -s "map(select(.event==\"samples\" and .arm==\"baseline\")) | length" a.ev) &&
	[ "$n" -ge 1 ] &&
	[ "$(jq -s "map(select(.event==\"background\")) | length" a.ev)" = "$n" ] &&
	jq -se "[.[] | select(.event==\"background\")] | all(.wall_ns > 0 and
		.threads_at_start == 1 and .threads_group_end == 1 and .processes_group_end == 0
		and .other_threads_cpu_ns >= 0 and .timing_thread_cpu_ns > 0)" a.ev >/dev/null
'

for c in bg-thread bg-fork bg-lazy bg-hidden; do
	test_expect "background: the $c cheat is refused for it" '
		expect_exit 2 "$ATB" measure --json "$CHEATS/tasks/relu-work" "$CHEATS/relu/'$c'" \
			--seeds 2 &&
		jq -e ".verdict == \"rejected\" and .gate == \"background\" and (.rejection_id > 0)
			and (.reason | test(\"(other threads used [0-9.]+ ms and other processes [0-9.]+ ms|seen from outside the runner: the job.s processes used [0-9.]+ ms) of CPU\"))" \
			"$TRASH/out" >/dev/null || { cat "$TRASH/out" "$TRASH/err"; exit 1; }
	'
done

test_expect "the refusals name what burned: threads, a process, a thread gone before the end" '
	sqlite3 "$ATB_DB" "SELECT detail FROM rejection WHERE rule = '\''gate:background'\'' ORDER BY id" >d &&
	[ "$(wc -l <d)" = 4 ] || { cat d; exit 1; }
	sed -n 1p d | jq -e ".event.other_threads_cpu_ns > 20000000 and .event.threads_group_end == 2
		and .max_cpu_share == 0.02" >/dev/null || { echo "bg-thread:"; sed -n 1p d; exit 1; }
	sed -n 2p d | jq -e ".event.other_processes_cpu_ns > 0 and .event.processes_group_end >= 1" \
		>/dev/null || { echo "bg-fork:"; sed -n 2p d; exit 1; }
	sed -n 3p d | jq -e ".event.other_threads_cpu_ns > 20000000 and
		.event.threads_group_end == .event.threads_at_start" >/dev/null ||
		{ echo "bg-lazy:"; sed -n 3p d; exit 1; }
	sed -n 4p d | jq -e ".event.seen_from == \"harness\" and
		.event.other_threads_cpu_ns > 30000000" >/dev/null || { echo "bg-hidden:"; sed -n 4p d; exit 1; }
'

test_expect "an honest candidate on relu-work is still admitted" '
	mkdir honest && cp "$CHEATS/tasks/relu-work/tunable.c" honest/kernel.c &&
	expect_exit_past_box 0 "$ATB" measure --json "$CHEATS/tasks/relu-work" honest &&
	jq -e ".verdict == \"admitted\"" "$TRASH/out" >/dev/null
'

test_expect "the refusals are audited and the chain verifies" '
	"$ATB" audit verify >/dev/null
'

test_done
