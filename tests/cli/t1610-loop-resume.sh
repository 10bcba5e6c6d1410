#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# A real `atb run` process killed with SIGKILL in the middle of an iteration
# leaves a consistent store (db check, audit verify) with no row for that
# iteration; `atb run --resume` redoes it and finishes, and the run's whole
# sequence of proposals equals the uninterrupted plan for the same seed.
# SIGTERM stops a run after the measurement in progress with exit 130.
# Real measurements on the fixture task relu-steady (seconds per iteration).
. "$(dirname "$0")/lib.sh"

command -v python3 >/dev/null || skip_all "python3 is needed to compare JSON"
[ -x "$ATB_BUILD_DIR/atb-runner" ] || skip_all "no atb-runner in $ATB_BUILD_DIR"

# relu-steady: the bundled relu's knobs and labels with fixed busy waits, so
# the stopping target is met after the protocol's minimum trials.
cp -r "$ATB_SOURCE_DIR/tests/fixtures/task/relu-steady" relu

count_done() {
	"$ATB" report --last --json 2>/dev/null |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["run"]["done"])' 2>/dev/null ||
		echo 0
}

test_expect "a run killed with SIGKILL mid-iteration leaves a consistent store" '
	setsid "$ATB" run ./relu --iterations 2 --seed 11 >run.out 2>run.err &
	pid=$!
	# the cheap check first: polling atb report would compete for the CPU
	for i in $(seq 300); do
		ls -d runs/*/iter-1 >/dev/null 2>&1 && [ "$(count_done)" -ge 1 ] && break
		sleep 1
	done
	sleep 3
	kill -9 -- -$pid 2>/dev/null || kill -9 $pid
	rc=0; wait $pid || rc=$?
	test $rc -eq 137 &&
	done_=$(count_done) && test "$done_" -eq 1 &&
	echo "$done_" >done_before &&
	"$ATB" db check >check.out &&
	"$ATB" audit verify >verify.out
'

test_expect "atb run --resume redoes the unfinished iteration and finishes" '
	id=$("$ATB" report --last --json | python3 -c "import json,sys; print(json.load(sys.stdin)[\"run\"][\"id\"])") &&
	"$ATB" run --resume "$id" >resume.out 2>resume.err &&
	expect_grep "run $id: task" resume.out &&
	"$ATB" report "$id" --json >report.json &&
	python3 -c "import json,sys; r=json.load(open(\"report.json\")); sys.exit(0 if r[\"run\"][\"done\"]==2 and r[\"run\"][\"complete\"] else 1)" &&
	"$ATB" db check >/dev/null && "$ATB" audit verify >/dev/null
'

test_expect "the resumed run proposed exactly the uninterrupted plan" '
	"$ATB" run ./relu --plan --iterations 2 --seed 11 --json >plan.json &&
	python3 - <<"PY"
import json
r = json.load(open("report.json"))
plan = json.load(open("plan.json"))
got = [it["knobs"] for it in r["trajectory"]]
assert [it["iteration"] for it in r["trajectory"]] == [0, 1], r["trajectory"]
assert got == plan, (got, plan)
PY
'

test_expect "resuming a finished run does nothing" '
	id=$("$ATB" report --last --json | python3 -c "import json,sys; print(json.load(sys.stdin)[\"run\"][\"id\"])") &&
	"$ATB" run --resume "$id" --json >again.json &&
	python3 -c "import json; r=json.load(open(\"again.json\")); assert r[\"done\"]==2 and r[\"first_iteration\"]==2, r"
'

# term_run NAME SEED [SIGNALS]: a 3-iteration run of ./relu in its own session
# (so a signal to atb does not reach the runner), SIGTERM sent SIGNALS times
# (default 1) once iteration 0 has started, the next one after atb said it
# will stop; atb's exit status in NAME.rc, its stderr in NAME.err.
term_run() {
	local name=$1 pid i n rc=0
	mkdir "$name"
	setsid "$ATB" --db "$name/atb.db" run ./relu --iterations 3 --seed "$2" \
		--runs-dir "$name/runs" >"$name.out" 2>"$name.err" &
	pid=$!
	for i in $(seq 300); do
		ls -d "$name"/runs/*/iter-0 >/dev/null 2>&1 && break
		sleep 1
	done
	for n in $(seq "${3:-1}"); do
		kill -TERM $pid
		for i in $(seq 50); do grep -q "stopping after" "$name.err" && break; sleep 0.1; done
	done
	wait $pid || rc=$?
	echo $rc >"$name.rc"
	"$ATB" --db "$name/atb.db" db check >/dev/null &&
		"$ATB" --db "$name/atb.db" audit verify >/dev/null ||
		{ echo "$name: the store does not check"; return 1; }
}

test_expect "SIGTERM stops a run after the measurement in progress: exit 130, resumable" '
	term_run term 5 &&
	{ test "$(cat term.rc)" = 130 || { echo "exit $(cat term.rc), want 130"; cat term.err; false; }; } &&
	expect_grep "interrupted after" term.err && expect_grep "atb run --resume" term.err &&
	expect_grep "stopping after the work in progress" term.err
'

# The first signal only sets a flag (the measurement in progress ends, which
# can take minutes under load); a second one stops at once by SIGTERM's
# default action: the shell sees 128 + 15, not the graceful 130, and the
# store is as consistent as after SIGKILL.  The runner is in atb's session
# (setsid), so the first SIGTERM does not reach it: only the second signal
# can have ended the job before its measurement did.
test_expect "a second SIGTERM stops at once: killed by the signal, the store consistent" '
	term_run term2 6 2 &&
	{ test "$(cat term2.rc)" = 143 || { echo "exit $(cat term2.rc), want 143"; cat term2.err; false; }; } &&
	expect_grep "stopping now" term2.err && ! grep -q "interrupted after" term2.err
'

test_done
