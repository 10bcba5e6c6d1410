#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# A newcomer's first hour (issue 13): global options after the command, a
# local task folder named without ./, the allowed values of a bad knob, bad
# input refused before a store exists, a run id given by its unique prefix,
# a refusal that shows its numbers, re-runs announced with the attempt, and
# progress lines in a log.  Every refusal here is planted (a candidate that
# fails correctness, one whose time depends on its seed's inputs), so no
# verdict rests on a quiet box; the timings are seconds (relu-spin).
. "$(dirname "$0")/lib.sh"

CHEATS=$ATB_SOURCE_DIR/tests/fixtures/cheats
command -v jq >/dev/null || skip_all "jq not installed"
command -v sqlite3 >/dev/null || skip_all "sqlite3 not installed"

test_expect "global options work after the command as before it" '
	"$ATB" db init --db after.db >/dev/null && test -f after.db &&
	"$ATB" db info --db=after.db --json >info.json && jq -e . info.json >/dev/null &&
	"$ATB" task show relu --json >show.json && jq -e ".name == \"relu\"" show.json >/dev/null &&
	expect_exit 2 "$ATB" db info --db &&
	expect_grep "needs a value" "$TRASH/err"
'

test_expect "a bad candidate path is refused before any store is created, in a sentence" '
	mkdir typo && cd typo &&
	expect_exit 2 "$ATB" measure sgemm /nonexistent &&
	expect_grep "the candidate folder '\''/nonexistent'\'' cannot be read" "$TRASH/err" &&
	! grep -q "^atb measure: surface" "$TRASH/err" &&
	expect_exit 2 "$ATB" measure sgemm /etc/hostname &&
	expect_grep "is a file" "$TRASH/err" &&
	expect_exit 2 "$ATB" measure sgemm /nonexistent --db x.db &&
	expect_exit 2 "$ATB" run sgemm --proposer nope --iterations 1 &&
	expect_exit 2 "$ATB" run sgemm --seeds 3 --iterations 1 &&
	expect_grep "below the protocol'\''s stats.min_paired_seeds (8)" "$TRASH/err" &&
	test -z "$(ls -A)"
'

test_expect "--seeds below 2 says the real bounds" '
	expect_exit 2 "$ATB" measure sgemm . --seeds 1 &&
	expect_grep "from 2 to 1024" "$TRASH/err" &&
	expect_grep "from 2 to 7 the candidate is measured" "$TRASH/err"
'

test_expect "a bad knob value or knob name lists the allowed ones" '
	mkdir c && expect_exit 2 "$ATB" measure sgemm c --knob TILE_I=7 &&
	expect_grep "(64, 16, 32, 128)" "$TRASH/err" &&
	expect_exit 2 "$ATB" measure sgemm c --knob BM=7 &&
	expect_grep "its knobs: TILE_I, TILE_J" "$TRASH/err" &&
	expect_exit 2 "$ATB" measure sgemm c --cflags -O9 &&
	expect_grep "-funroll-loops" "$TRASH/err" &&
	test ! -e atb.db
'

# Precedence: a bundled name means the bundled task from every folder; a
# name no bundled task has is a folder here.
test_expect "a local task folder is found without ./; a bundled name wins" '
	mkdir badtask && printf "kind: cpu\n" >badtask/task.yaml &&
	expect_exit 2 "$ATB" task check badtask &&
	expect_grep "badtask/task.yaml" "$TRASH/err" &&
	cp -r "$CHEATS/tasks/relu-spin" myrelu && "$ATB" task check myrelu >/dev/null &&
	mkdir relu && printf "kind: cpu\n" >relu/task.yaml &&
	"$ATB" task check relu >/dev/null &&
	expect_exit 2 "$ATB" task check ./relu &&
	expect_exit 2 "$ATB" task check nosuchtask &&
	expect_grep "no task folder '\''nosuchtask'\'' here" "$TRASH/err"
'

[ -x "$ATB_BUILD_DIR/atb-runner" ] || { echo "# no atb-runner: the measuring tests are skipped"; test_done; exit; }
command -v cc >/dev/null || { echo "# no C compiler: the measuring tests are skipped"; test_done; exit; }

# wrong: every iteration of its run is refused on correctness, in seconds
cp -r "$CHEATS/tasks/relu-spin" wrong && cp "$CHEATS/relu/identity/kernel.c" wrong/tunable.c

test_expect "a refused iteration prints its reason; off a terminal, progress lines show life" '
	ATB_PROGRESS_INTERVAL_S=0 "$ATB" run wrong --iterations 1 --db runs.db >run.out 2>run.err &&
	expect_grep "iter 1/1 correctness: wrong output on seed" run.err &&
	expect_grep "phase build" run.err &&
	"$ATB" run wrong --iterations 1 --db runs.db >run2.out 2>run2.err &&
	! grep -q "phase build" run2.err && expect_grep "outcome correctness" run2.err
'

test_expect "atb report takes a unique run-id prefix and lists an ambiguous one" '
	id=$(sed -n "s/^run \([0-9a-f]*\):.*/\1/p" run.out) && test -n "$id" &&
	"$ATB" report "${id:0:6}" --db runs.db >rep.out &&
	expect_grep "$id" rep.out &&
	# runs until two ids share their first character (17 at most)
	for i in $(seq 1 17); do
		dup=$(sqlite3 runs.db "SELECT substr(id, 1, 1) FROM run GROUP BY 1 HAVING count(*) > 1 LIMIT 1")
		[ -n "$dup" ] && break
		"$ATB" run wrong --iterations 1 --db runs.db --quiet >/dev/null 2>&1
	done &&
	test -n "$dup" &&
	expect_exit 2 "$ATB" report "$dup" --db runs.db &&
	expect_grep "is ambiguous" "$TRASH/err" &&
	[ "$(grep -c "^  $dup" "$TRASH/err")" -ge 2 ]
'

# noisy: a correct relu whose busy wait depends on the seed's inputs: the
# cross-run cv is far over the cap on every attempt (t6000's noise cheat)
test_expect "a noise refusal shows its numbers, and the re-runs their attempt and reason" '
	expect_exit 2 "$ATB" measure "$CHEATS/tasks/relu-spin" "$CHEATS/relu/noisy" --seeds 2 \
		--db m.db &&
	expect_grep "gate            noise" "$TRASH/out" &&
	grep -Eq "^  medians         baseline [0-9]+ ns, candidate [0-9]+ ns" "$TRASH/out" &&
	grep -Eq "^  cv              [0-9.]+ \(cap 0.05\)" "$TRASH/out" &&
	grep -Eq "^  per seed        speedups [0-9.]+ to [0-9.]+" "$TRASH/out" &&
	expect_grep "runs            3 of at most 3" "$TRASH/out" &&
	expect_grep "attempt 2 of 3: re-running because the cross-run cv" "$TRASH/err" &&
	expect_grep "attempt 3 of 3: re-running because" "$TRASH/err" &&
	expect_grep "timing seed 1/2 (attempt 2 of 3)" "$TRASH/err" &&
	# the drift runners count every seed
	expect_grep "drift seed 1/2" "$TRASH/err" && expect_grep "drift seed 2/2" "$TRASH/err"
'

test_done
