#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# atb submit: an outside agent's candidate through atb measure's one path,
# the verdict as JSON on stdout, exit codes as atb measure's; --run stores
# it as the next iteration of an agent run that atb report shows; bad input
# is refused with the file or field named and nothing written.  The fixture
# task relu-spin keeps timings stable (t6000).
. "$(dirname "$0")/lib.sh"

CHEATS=$ATB_SOURCE_DIR/tests/fixtures/cheats
[ -x "$ATB_BUILD_DIR/atb-runner" ] || skip_all "no atb-runner"
command -v cc >/dev/null || skip_all "no C compiler"
command -v jq >/dev/null || skip_all "jq not installed"
command -v sqlite3 >/dev/null || skip_all "sqlite3 not installed"
export ATB_DB=$TRASH/s.db
cp -r "$CHEATS/tasks/relu-spin" task
cp -r "$CHEATS/tasks/relu-spin" task2

# nothing_written: no store, no audit mirror
nothing_written() {
	[ ! -e "$ATB_DB" ] && [ ! -e "$ATB_DB.audit.jsonl" ] ||
		{ echo "the store was written"; ls -la "$TRASH"; return 1; }
}

test_expect "--help documents the run and the JSON verdict" '
	"$ATB" submit --help >help && expect_grep "--run RUN_ID" help &&
	expect_grep "as atb measure" help && "$ATB" help submit | cmp - help
'

test_expect "bad input names the file or field, exits 2, writes nothing" '
	expect_exit 2 "$ATB" submit task no-such-dir && expect_grep "no-such-dir" "$TRASH/err" &&
	expect_exit 2 "$ATB" submit task "$CHEATS/relu/identity" --run "a/b" &&
	expect_grep "--run '\''a/b'\''" "$TRASH/err" &&
	expect_exit 2 "$ATB" submit task "$CHEATS/relu/identity" --run "" &&
	expect_exit 2 "$ATB" submit task "$CHEATS/relu/identity" --iterations 5 &&
	expect_grep "give --run too" "$TRASH/err" &&
	expect_exit 2 "$ATB" submit task "$CHEATS/relu/identity" --run a1 --iterations 0 &&
	expect_grep "--iterations" "$TRASH/err" &&
	expect_exit 2 "$ATB" submit task "$CHEATS/relu/identity" --knob NOPE=1 &&
	expect_grep "NOPE" "$TRASH/err" &&
	expect_exit 2 "$ATB" submit task "$CHEATS/relu/identity/kernel.c" &&
	expect_grep "is a file" "$TRASH/err" &&
	expect_exit 2 "$ATB" submit no-such-task "$CHEATS/relu/identity" &&
	expect_grep "no-such-task" "$TRASH/err" &&
	expect_exit 2 "$ATB" submit task "$CHEATS/relu/identity" --colour red &&
	expect_grep "--colour" "$TRASH/err" &&
	[ ! -s "$TRASH/out" ] && nothing_written
'

test_expect "a cheat: the JSON verdict of its gate, exit 2, stdout only JSON" '
	expect_exit 2 "$ATB" submit task "$CHEATS/relu/identity" --seeds 2 &&
	jq -e ".verdict == \"rejected\" and .gate == \"correctness\" and .rejection_id > 0
	       and (has(\"run\") | not)" "$TRASH/out" >/dev/null &&
	[ "$(sqlite3 "$ATB_DB" "SELECT count(*) FROM rejection WHERE rule = '\''gate:correctness'\''")" = 1 ]
'

test_expect "--run: a new agent run, the cheat its iteration 0" '
	expect_exit 2 "$ATB" submit task "$CHEATS/relu/identity" --run a1 --iterations 10 &&
	jq -e ".verdict == \"rejected\" and .gate == \"correctness\" and .run == \"a1\" and
	       .iteration == 0 and .outcome == \"correctness\" and .usable == false" \
		"$TRASH/out" >/dev/null &&
	expect_grep "a new agent run" "$TRASH/err" &&
	"$ATB" report a1 --json >r.json &&
	jq -e ".run.proposer == \"agent\" and .run.iterations == 10 and .run.done == 1 and
	       .run.paired_seeds >= 2 and .trajectory[0].outcome == \"correctness\"" r.json >/dev/null
'

test_expect "--run: a plan that differs from the run's, or another task, is refused before measuring" '
	jobs=$(sqlite3 "$ATB_DB" "SELECT count(*) FROM job") &&
	expect_exit 2 "$ATB" submit task "$CHEATS/relu/identity" --run a1 --seeds 9 &&
	expect_grep "leave --seeds out" "$TRASH/err" &&
	expect_exit 2 "$ATB" submit task "$CHEATS/relu/identity" --run a1 --seed-base 7 &&
	expect_grep "seed base" "$TRASH/err" &&
	expect_exit 2 "$ATB" submit task "$CHEATS/relu/identity" --run a1 --iterations 4 &&
	expect_grep "plans 10 iterations" "$TRASH/err" &&
	expect_exit 2 "$ATB" submit task2 "$CHEATS/relu/identity" --run a1 &&
	expect_grep "is of task" "$TRASH/err" && expect_grep "task2" "$TRASH/err" &&
	[ ! -s "$TRASH/out" ] &&
	[ "$(sqlite3 "$ATB_DB" "SELECT count(*) FROM job")" = "$jobs" ] &&
	[ "$(sqlite3 "$ATB_DB" "SELECT count(*) FROM iteration")" = 1 ]
'

test_expect "--run: a run with every planned iteration done takes no more" '
	expect_exit 2 "$ATB" submit task "$CHEATS/relu/identity" --run a2 --iterations 1 &&
	jq -e ".iteration == 0" "$TRASH/out" >/dev/null &&
	expect_exit 2 "$ATB" submit task "$CHEATS/relu/identity" --run a2 &&
	expect_grep "done all its 1 planned iterations" "$TRASH/err" && [ ! -s "$TRASH/out" ]
'

test_expect "an agent run is not resumed by atb run, and its report says how it grows" '
	expect_exit 2 "$ATB" run --resume a1 && expect_grep "outside agent" "$TRASH/err" &&
	"$ATB" report a1 >r.txt && expect_grep "proposer agent" r.txt &&
	expect_grep "atb submit TASK CANDIDATE --run a1" r.txt
'

# A timing verdict: a loaded box may refuse an honest copy by noise or drift
# (expect_exit_past_box tries again); each try is one more iteration of a1.
test_expect "the honest candidate: admitted, exit 0, a usable iteration of its run" '
	expect_exit_past_box 0 "$ATB" submit task "$CHEATS/relu/honest-spin" --run a1 &&
	jq -e ".verdict == \"admitted\" and .result_id > 0 and .run == \"a1\" and
	       .iteration >= 1 and .outcome == \"usable\" and .usable == true and
	       .ci_low <= .speedup and .speedup <= .ci_high" "$TRASH/out" >/dev/null &&
	"$ATB" report a1 --json >r.json &&
	jq -e ".trajectory[-1].outcome == \"usable\" and .usable.count == 1 and
	       .best.iteration == .trajectory[-1].iteration" r.json >/dev/null
'

# A KernelBench-format task: the static gate refuses a getattr fallback
# before any runner starts (needs python3 only, not PyTorch; t4015).
FIX=$ATB_SOURCE_DIR/tests/fixtures/torch
test_expect "a torch task: a file candidate, the static gate's verdict, an agent run's iteration" '
	ATB_PYTHON=python3 expect_exit 2 "$ATB" submit "$FIX/relu01.py" \
		"$FIX/relu01/static_getattr/model_new.py" --run k1 &&
	jq -e ".verdict == \"rejected\" and .gate == \"static\" and .run == \"k1\" and
	       .iteration == 0 and .outcome == \"static\" and (.findings | index(\"reflection\"))" \
		"$TRASH/out" >/dev/null &&
	"$ATB" report k1 --json | jq -e ".run.task | endswith(\"/relu01.py\")" >/dev/null
'

test_expect "the audit chain verifies" '
	"$ATB" audit verify >v.txt && expect_grep "audit chain ok" v.txt
'

test_done
