#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Death detected mid-run, on the TEST DOUBLE engine (tests/fixtures/engine/
# double_engine.py, a fake server, not an engine): the candidate dies a few
# requests into a 5 s open-loop schedule (task-long.yaml); the load
# generator's abort hook (waitpid on the engine while the workload runs)
# stops the run at once, and the refusal engine_died is stored with the log's
# tail and when it was caught: within a second of the last answer, not at
# the end of the schedule.
. "$(dirname "$0")/lib.sh"

command -v python3 >/dev/null || skip_all "python3 is needed for the test double engine"
command -v jq >/dev/null || skip_all "jq not installed"
TASK=$ATB_SOURCE_DIR/tests/fixtures/engine/task-long.yaml

test_expect "planted: a candidate dying 5 requests into a 5 s schedule is caught within a second" '
	# The baseline arm refused as client_lag (the loaded box, or ASan, kept
	# the client from sending on time: 70 ms p99 lag seen) says nothing of
	# the candidate: more tries, the client niced up where allowed (beside
	# two CPU hogs at load 6 the p99 lag read 16-36 ms in 6 of 6 runs; at
	# nice -10, 12 ms in 3 of 4; the limit is 10 ms, engine.max_dispatch_lag_ms).
	# The candidate is refused on every try; no try can admit it.
	NICE=(); [ "$(nice -n -10 nice 2>/dev/null)" = -10 ] && NICE=(nice -n -10)
	for try in 1 2 3 4 5; do
		rm -rf w && mkdir w &&
		expect_exit 2 "${NICE[@]}" "$ATB" --db atb.db --json engine ab "$TASK" \
			--candidate die_after=12 --seeds 2 --work-dir w || exit 1
		jq -e ".gate == \"client_lag\"" "$TRASH/out" >/dev/null || break
		echo "# try $try refused by the box: $(jq -r .reason "$TRASH/out")"
	done &&
	cp "$TRASH/out" j &&
	python3 - <<-PY
	import json, re
	d = json.load(open("j"))
	assert d["verdict"] == "rejected" and d["gate"] == "engine_died", d
	r = d["reason"]
	assert "simulated crash after 12 requests" in r, r
	assert "schedule 5.0 s open loop" in r, r
	caught = float(re.search(r"caught ([0-9.]+) s into the load", r).group(1))
	recs = [json.loads(l) for l in open("w/seed-1-candidate/records.jsonl")]
	ok_end = max(x["end_ns"] for x in recs if x["failure"] == "ok") / 1e9
	aborted = [x for x in recs if x["failure"] == "aborted"]
	# caught within a second of its last answer, long before the schedule ends
	assert caught - ok_end < 1.0 and caught < 2.5, (caught, ok_end)
	assert len(aborted) > 80, len(aborted)
	PY
'

if command -v sqlite3 >/dev/null; then
	test_expect "the refusal is stored as engine_died with the log tail, nothing admitted" '
		sqlite3 atb.db "select rule, reason from rejection" >rules &&
		expect_grep "gate:engine_died" rules &&
		expect_grep "fatal: simulated crash" rules &&
		test "$(sqlite3 atb.db "select count(*) from result")" = 0
	'
fi

test_done
