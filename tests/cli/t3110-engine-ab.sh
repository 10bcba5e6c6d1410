#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# atb engine ab on the TEST DOUBLE engine (tests/fixtures/engine/
# double_engine.py: a fake OpenAI-compatible server, not an engine; the real
# engine is llama.cpp in t32*).  Planted faults, each caught with a clear
# stored reason and nothing admitted: truncated, padded and altered greedy
# outputs (output_equivalence), exit at start on a bad flag, never ready,
# port already taken (engine_start), death mid-run (engine_died), HTTP 500
# and 400 (on the probes), malformed events and connections reset mid-stream
# (on the load), each engine_errors with the failures counted by category.  An honest lossless 2x decode speed-up is admitted, with
# per-seed ratios, CIs and latency ratios in the stored statistics.
. "$(dirname "$0")/lib.sh"

command -v python3 >/dev/null || skip_all "python3 is needed for the test double engine"
TASK=$ATB_SOURCE_DIR/tests/fixtures/engine/task.yaml

rejected_with() { # GATE PATTERN SETTINGS
	expect_exit 2 "$ATB" --db atb.db engine ab "$TASK" --candidate "$3" --seeds 8 --work-dir "w-$1" &&
	expect_grep "gate            $1" "$TRASH/out" &&
	expect_grep "$2" "$TRASH/out"
}

while IFS='|' read -r gate settings msg; do
	test_expect "planted: $settings is refused by $gate" '
		mkdir -p "w-'"$gate"'" && rejected_with '"$gate"' "'"$msg"'" "'"$settings"'"
	'
done <<'CASES'
output_equivalence|truncate=2|stops early
output_equivalence|pad=2|pads:
output_equivalence|alter=true|text differs at byte
engine_start|bad_flag=true|exited with status 2 at start: usage:
engine_start|never_ready=true|engine not ready after 10 s
engine_died|die_after=20|exited with status 3: double: listening on 127.0.0.1:
engine_died|die_after=20|fatal: simulated crash after 20 requests
engine_errors|fail_500=true|failed (http 500)
engine_errors|fail_500=true|5 of 5 probes failed (http_5xx:5)
engine_errors|fail_4xx=true|5 of 5 probes failed (http_4xx:5)
engine_errors|malformed=true|requests failed (malformed_event:32)
engine_errors|reset_after=2|requests failed (reset:
CASES

test_expect "a port already taken is named" '
	python3 -c "
import socket,time,sys
s=socket.socket(); s.bind((\"127.0.0.1\",0)); s.listen(1)
open(\"port\",\"w\").write(str(s.getsockname()[1])); sys.stdout.flush(); time.sleep(60)" &
	pid=$!; for i in $(seq 150); do [ -s port ] && break; sleep 0.2; done  # 30 s: a loaded box
	mkdir -p w-engine_start;
	rejected_with engine_start "already taken" "bind_port=$(cat port)"; rc=$?
	kill $pid; exit $rc
'

test_expect "the engine logs are kept in the arm's folder" '
	test -s w-engine_died/seed-1-candidate/engine.stderr &&
	expect_grep "simulated crash" w-engine_died/seed-1-candidate/engine.stderr
'

if command -v sqlite3 >/dev/null; then
	test_expect "every refusal is stored with its gate and reason, nothing admitted" '
		sqlite3 atb.db "select rule from rejection" | sort | uniq -c >rules &&
		expect_grep "3 gate:output_equivalence" rules &&
		expect_grep "3 gate:engine_start" rules &&
		expect_grep "2 gate:engine_died" rules &&
		expect_grep "5 gate:engine_errors" rules &&
		test "$(sqlite3 atb.db "select count(*) from result")" = 0
	'
fi

# The double sleeps 10 ms a token, so the 2x is in sleeps a loaded box hardly
# moves (it read 1.8-2.0x); the bounds leave it far more room.  An honest
# candidate: a refusal by the box (noise, client_lag) or a miss of the bounds
# gets an independent try (lib.sh's expect_verdict).
test_expect "an honest lossless 2x decode speed-up is admitted with CIs" '
	expect_verdict ".verdict == \"admitted\" and .speedup > 1.3 and .speedup < 2.2 and
		.ci_low > 1.2" \
		"$ATB" --db atb.db --json engine ab "$TASK" --candidate speedup=2.0 --seeds 8 \
		--work-dir .
'

if command -v sqlite3 >/dev/null; then
	test_expect "the stored result is kind engine, req/s, paired seeds, latency ratios" '
		# the last result: an earlier try of expect_verdict may have stored one
		test "$(sqlite3 atb.db "select kind||\" \"||n_seeds from result order by id desc limit 1")" = "engine 8" &&
		sqlite3 atb.db "select stats from result order by id desc limit 1" >s &&
		python3 -c "
import json; d=json.load(open(\"s\"))
assert d[\"latency\"][\"e2e_median_ms\"][\"ratio\"] > 1.3, d[\"latency\"]
assert d[\"counters\"][\"candidate\"][\"double_spec_accepted_tokens_total\"] > 0
assert len(d[\"per_seed\"]) == 16
assert \"engine_cpus\" in d and d[\"engine_cpus\"] is None, d.get(\"engine_cpus\")
# the stored pairs: one attempt (the last), the two arms of each seed
# consecutive (PROTO: engine.paired_order), the samples trial = attempt - 1
k = d[\"attempts\"]
o = {(p[\"seed\"], p[\"arm\"]): p[\"order\"] for p in d[\"per_seed\"] if p[\"attempt\"] == k}
assert len(o) == 16 and d[\"rerun_arms\"] == \"both\", d[\"per_seed\"]
assert all(abs(o[(s, \"baseline\")] - o[(s, \"candidate\")]) == 1 for s in range(1, 9)), o
import sqlite3
t = sqlite3.connect(\"atb.db\").execute(\"select distinct trial from sample where job = (select job from result order by id desc limit 1)\").fetchall()
assert t == [(k - 1,)], (t, k)"
	'
fi

test_done
