#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# atb loadgen over real loopback HTTP against tests/fixtures/loadgen/fake_openai.py
# (a TEST DOUBLE of an OpenAI-compatible server): a ShareGPT-style dataset on
# the chat endpoint reaches the server (its usage counts the prompt's words),
# a non-streamed run, open-loop arrivals with a cap, planted faults counted
# by category while the run goes on, and --records written atomically.
. "$(dirname "$0")/lib.sh"

. "$ATB_SOURCE_DIR/tests/fixtures/loadgen/server.sh"
FIX=$LOADGEN_FIX
LG="$ATB loadgen --max-dispatch-lag-ms 1000"

start_server --tokens 4

test_expect "a ShareGPT dataset on the chat endpoint reaches the server" '
	$LG --url "$URL" --endpoint chat --seed 2 --requests 5 \
		--prompts "$FIX/sharegpt.jsonl" --records rec.jsonl >out &&
	expect_grep "5 ok, 0 failed" out &&
	python3 -c "
import json
recs = [json.loads(l) for l in open(\"rec.jsonl\")]
assert len(recs) == 5
# the server counts prompt words: the five entries have 7, 3, 6, 4, 3 words
assert sorted(r[\"tokens_in\"] for r in recs) == [3, 3, 4, 6, 7], recs
# --tokens 4, or fewer where the entry asks for fewer (\"red green blue\": 3)
for r in recs:
    n = r[\"tokens_out\"]
    assert r[\"usage_from_server\"] and n in (3, 4) and len(r[\"token_ns\"]) == n, r
    assert r[\"text\"] == \"\".join(\" w%d\" % i for i in range(n)), r
"
'

test_expect "a non-streamed run has TTFT = e2e and no token times" '
	$LG --url "$URL" --no-stream --seed 2 --requests 3 --output-len 9 --records rec2.jsonl --json >j &&
	python3 -c "
import json
s = json.load(open(\"j\"))[\"summary\"]
assert s[\"completed\"] == 3 and s[\"tpot_ms\"][\"n\"] == 0, s
assert s[\"ttft_ms\"][\"max\"] == s[\"e2e_ms\"][\"max\"], s
for l in open(\"rec2.jsonl\"):
    r = json.loads(l)
    assert r[\"token_ns\"] == [] and r[\"first_token_ns\"] == r[\"end_ns\"] and r[\"tokens_out\"] == 4
"
'

test_expect "an open loop with a cap never holds more than the cap" '
	$LG --url "$URL" --seed 4 --requests 12 --rate 400 --arrival constant \
		--max-concurrency 2 --json >j &&
	python3 -c "
import json, urllib.request
s = json.load(open(\"j\"))[\"summary\"]
assert s[\"completed\"] == 12 and s[\"peak_in_flight\"] <= 2, s
st = json.load(urllib.request.urlopen(\"$URL/stats\"))
assert st[\"max_in_flight\"] <= 2, st
"
'
stop_server

start_server --fault reset --fault-every 3 --token-ms 1

test_expect "planted resets are counted and the run goes on" '
	$LG --url "$URL" --seed 5 --requests 9 --output-len 6 >out &&
	expect_grep "6 ok, 3 failed, reset 3" out
'

test_expect "--records to a folder that does not exist fails with the path, no file left" '
	expect_exit 3 $LG --url "$URL" --seed 5 --requests 1 --records "$TRASH/no/such/r.jsonl" &&
	expect_grep "no/such/r.jsonl" "$TRASH/err" &&
	! ls "$TRASH/no" 2>/dev/null
'
stop_server
test_done
