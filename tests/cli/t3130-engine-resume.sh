#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# An engine flag search (on the TEST DOUBLE engine, tests/fixtures/engine/
# double_engine.py, a fake server) whose atb process is killed with SIGKILL
# mid-iteration: the engine it was measuring goes too (it asked for SIGTERM
# on its parent's death), the store stays consistent with no row for the
# unfinished iteration, and `atb run --resume` redoes it and finishes with
# the same configurations as the plan.
. "$(dirname "$0")/lib.sh"

command -v python3 >/dev/null || skip_all "python3 is needed for the test double engine"
TASK=$ATB_SOURCE_DIR/tests/fixtures/engine/search.yaml

count_done() {
	"$ATB" report --last --json 2>/dev/null |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["run"]["done"])' 2>/dev/null ||
		echo 0
}

test_expect "a search killed with SIGKILL mid-iteration leaves no engine and a consistent store" '
	"$ATB" run "$TASK" --iterations 2 --seed 6 >run.out 2>run.err &
	pid=$!
	for i in $(seq 600); do
		[ "$(count_done)" -ge 1 ] && ls runs/*/iter-1/seed-6-*/engine.stderr >/dev/null 2>&1 && break
		sleep 0.5
	done
	sleep 1
	kill -9 $pid
	rc=0; wait $pid || rc=$?
	test $rc -eq 137 && test "$(count_done)" -eq 1 &&
	sleep 1 &&
	port=$(sed -n "s/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p" runs/*/iter-1/seed-6-*/engine.stderr | tail -1) &&
	test -n "$port" &&
	python3 -c "
import socket,sys
s=socket.socket(); s.settimeout(1)
sys.exit(0 if s.connect_ex((\"127.0.0.1\", $port)) != 0 else 1)" &&
	"$ATB" db check >check.out &&
	"$ATB" audit verify >verify.out
'

# What is tested is the resume: the redone iteration has the planned knobs
# and an outcome.  Its verdict is real timing of the double (a 2x in
# sleeps), which a loaded box can still refuse (client_lag: the load
# generator starved; noise): then the run is done with that iteration
# unusable, and the best is iteration 0.  Seen at load 13 under ctest -j2.
test_expect "atb run --resume redoes the unfinished iteration with the planned configuration" '
	id=$("$ATB" report --last --json | python3 -c "import json,sys; print(json.load(sys.stdin)[\"run\"][\"id\"])") &&
	"$ATB" --json run --resume "$id" --quiet >res.json &&
	"$ATB" report "$id" --json >rj &&
	python3 -c "
import json; d=json.load(open(\"res.json\")); r=json.load(open(\"rj\"))
t = r[\"trajectory\"]
assert [x[\"knobs\"] for x in t] == [{}, {\"speedup\": \"2.0\"}], t
assert d[\"done\"]==2 and d[\"first_iteration\"]==1, d
assert d[\"usable\"] == sum(bool(x[\"usable\"]) for x in t), (d, t)
if t[1][\"usable\"]:
    assert d[\"best\"][\"iteration\"]==1, d
else:
    assert t[1][\"outcome\"] in (\"noise\", \"client_lag\"), t[1]
    print(\"# iteration 1 refused by the box:\", t[1][\"outcome\"])"
'

test_done
