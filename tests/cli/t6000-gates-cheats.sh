#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Every gate of atb measure against a planted cheat (tests/fixtures/cheats/),
# each refused with its exact gate id, stored as a rejection and audited.
# The fixture task relu-spin (relu + a fixed 1 ms busy wait) keeps timings
# stable, so these run in seconds on a loaded machine.
# PROTO: gates.physical_floor.margin, correctness.poison,
# correctness.distributions, timing.job_timeout_s.
. "$(dirname "$0")/lib.sh"

CHEATS=$ATB_SOURCE_DIR/tests/fixtures/cheats
[ -x "$ATB_BUILD_DIR/atb-runner" ] || skip_all "no atb-runner"
command -v cc >/dev/null || skip_all "no C compiler"
command -v jq >/dev/null || skip_all "jq not installed"
export ATB_DB=$TRASH/m.db
cp -r "$CHEATS/tasks/relu-spin" task

# refused NAME GATE: measuring candidate folder NAME is refused by GATE.
refused() {
	expect_exit 2 "$ATB" measure --json "$TRASH/task" "$1" --seeds 2 &&
	[ -s "$TRASH/out" ] &&
	jq -e --arg g "$2" '.verdict == "rejected" and .gate == $g and (.rejection_id > 0)' \
		"$TRASH/out" >/dev/null || { cat "$TRASH/out" "$TRASH/err"; return 1; }
}

test_expect "surface: a file outside the surface is refused" '
	refused "$CHEATS/relu/extra-file" surface &&
	expect_grep "notes.txt" "$TRASH/out"
'

test_expect "surface: a symlink is refused (lstat)" '
	mkdir link && ln -s "$CHEATS/relu/honest-spin/kernel.c" link/kernel.c &&
	refused link surface && expect_grep "symlink" "$TRASH/out"
'

test_expect "surface: a subfolder is refused" '
	mkdir -p sub/kernel.c && refused sub surface
'

# The sandbox shows the runner no task and passes it no such variable, so
# the append cannot happen (t6300 tries harder); without the sandbox the
# surface recheck still catches it.  The appender spins 1 ms like
# honest-spin, so sandboxed it is admitted at about 1x, far from the physical
# floor and the cv cap on any load (as a bare ReLU it sat at the floor, and
# a floor measured at load 15 refused it).
test_expect "surface: a kernel that appends to the task file cannot, sandboxed" '
	cp task/task.yaml before.yaml &&
	ATB_CHEAT_TASK_YAML=$PWD/task/task.yaml expect_exit_past_box 0 "$ATB" measure --json \
		"$TRASH/task" "$CHEATS/relu/tamper" &&
	cmp -s before.yaml task/task.yaml
'

test_expect "surface: without the sandbox, the append is caught by the recheck" '
	ATB_SANDBOX=off ATB_CHEAT_TASK_YAML=$PWD/task/task.yaml refused "$CHEATS/relu/tamper" surface &&
	expect_grep "task.yaml" "$TRASH/out" && ! cmp -s before.yaml task/task.yaml &&
	cp before.yaml task/task.yaml
'

test_expect "build: a candidate that does not compile, with the compiler log kept" '
	refused "$CHEATS/relu/broken" build &&
	sqlite3 "$ATB_DB" "SELECT detail FROM rejection WHERE rule = '\''gate:build'\''" |
		grep -q "broken on purpose"
'

# Under AddressSanitizer the runner's own SEGV handler would turn the signal
# into exit 1; handle_segv=0 leaves it a signal, as in a normal build.
test_expect "runner: a crashing candidate is refused with the signal" '
	ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_segv=0 refused "$CHEATS/relu/crash" runner &&
	expect_grep SIGSEGV "$TRASH/out"
'

test_expect "correctness: the ReLU identity fails on signed inputs" '
	refused "$CHEATS/relu/identity" correctness &&
	jq -e ".reason | test(\"seed [0-9]+, set .*input .*is .*reference\")" "$TRASH/out" >/dev/null
'

test_expect "input_mutation: a kernel that writes its input" '
	refused "$CHEATS/relu/mutate" input_mutation
'

# A cache keyed on the input pointer is caught at the runner's
# same_buffers_new_inputs step (gate result_reuse), unless malloc hands a
# later check's fresh buffer the address of an earlier one: then the plain
# check sees the stale result first (gate correctness).  Either way refused.
test_expect "result_reuse: a kernel that caches by pointer" '
	refused "$CHEATS/relu/cache" result_reuse || refused "$CHEATS/relu/cache" correctness
'

# It beats the floor from the cached caps, so the caps are measured again
# (they only go up) and it is judged against the new floor: still refused.
# In process (isolation none).  From a worker (the default) see below.
test_expect "physical_floor: a kernel that skips unchecked calls" '
	ATB_ISOLATION=none refused "$CHEATS/relu/skip-timed" physical_floor &&
	expect_grep "physical floor" "$TRASH/out" &&
	jq -e ".floor_remeasured == true and .floor_ns <= .floor_cached_ns" "$TRASH/out" >/dev/null &&
	expect_grep "floor re-measured" "$TRASH/out"
'

# From a worker it cannot tell checked calls from the others, and every
# checked round finds its output unwritten (timed_correctness).  Under
# protocol v12 the round trip left in its calls (the empty calls' 0.1-
# quantile taken out) kept it over this task's 10 us floor, so that was the
# refusal; v13 takes the median out, its calls then read about 3-4 us, and
# the floor, judged first, refuses it (session 27).  Either is the cheat's.
test_expect "timed_correctness or physical_floor: the same kernel from an arm worker" '
	expect_exit 2 "$ATB" measure --json "$TRASH/task" "$CHEATS/relu/skip-timed" --seeds 2 &&
	jq -e ".verdict == \"rejected\" and .rejection_id > 0 and .isolation == \"process\" and
		((.gate == \"physical_floor\" and (.reason | test(\"physical floor\"))) or
		 (.gate == \"timed_correctness\" and (.reason | test(\"work skipped or cached while timed\"))))" \
		"$TRASH/out" >/dev/null || { cat "$TRASH/out" "$TRASH/err"; exit 1; }
'

# The drift cheat needs a baseline whose time is CPU work: relu-spin's
# wall-clock busy wait would absorb the stolen time.  In process (isolation
# none): from an arm's worker its timer is stopped outside its own trials.
test_expect "baseline_drift: a candidate that slows the baseline beside it" '
	cp -r "$CHEATS/tasks/relu-work" work &&
	ATB_ISOLATION=none expect_exit 2 "$ATB" measure --json "$TRASH/work" "$CHEATS/relu/drift" --seeds 2 &&
	jq -e ".verdict == \"rejected\" and .gate == \"baseline_drift\" and .drift_ratio > 1.5" \
		"$TRASH/out" >/dev/null || { cat "$TRASH/out" "$TRASH/err"; exit 1; }
'

# Refused as noise either way: by the cv cap, or (a loaded box, the
# baseline beside it 2.8x slower than alone in one run) already by the
# drift check's seeds disagreeing, which runs first; both after 3 runs.
test_expect "noise: a candidate whose time varies from seed to seed, after bounded re-runs" '
	refused "$CHEATS/relu/noisy" noise &&
	jq -e ".attempts == 3 and (.reason | test(\"over the cap|too noisy to judge baseline drift\"))" \
		"$TRASH/out" >/dev/null || { jq -c "{attempts, reason}" "$TRASH/out"; exit 1; }
'

test_expect "every refusal is in the store and the audit chain verifies" '
	[ "$(sqlite3 "$ATB_DB" "SELECT count(*) FROM rejection WHERE rule LIKE '\''gate:%'\''")" -ge 10 ] &&
	"$ATB" audit verify >/dev/null &&
	# the one result: the sandboxed task-file appender, whose kernel is honest
	[ "$(sqlite3 "$ATB_DB" "SELECT count(*) FROM result")" = 1 ] &&
	sqlite3 "$ATB_DB" "SELECT j.candidate FROM result r JOIN job j ON j.id = r.job" | grep -q tamper
'

# Measured once on first use (2 rows); each refusal of the skip-timed cheat
# by the floor re-measures once and adds a row for each cap it raised (0 to
# 2): in process, and from a worker when the floor is what refuses it there
# (protocol v13; under v12 it was timed_correctness).
test_expect "the floor caps were measured once, re-measured at most once a refusal, cached for the box" '
	n=$(sqlite3 "$ATB_DB" "SELECT count(*) FROM box_capability") &&
	[ "$n" -ge 2 ] && [ "$n" -le 6 ] || { echo "# $n rows"; exit 1; }
	[ "$(sqlite3 "$ATB_DB" "SELECT count(DISTINCT kind) FROM box_capability")" = 2 ]
'

test_done
