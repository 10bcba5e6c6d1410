#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# atb loadgen: help, bad options (exit 2), the same seed gives the same
# workload digest, a bad dataset line names file:line (exit 2), an
# unreachable server (exit 3), a real run over loopback HTTP against
# tests/fixtures/loadgen/fake_openai.py (a TEST DOUBLE of an
# OpenAI-compatible server) with --json and --records, and a run whose p99
# dispatch lag exceeds a tiny limit is flagged client_limited (exit 1).
. "$(dirname "$0")/lib.sh"

. "$ATB_SOURCE_DIR/tests/fixtures/loadgen/server.sh"
FIX=$LOADGEN_FIX

test_expect "help documents every option" '
	$ATB loadgen --help >help &&
	for o in --url --endpoint --model --stream --no-stream --timeout-s --seed \
		--requests --warmup --prompts --input-len --output-len --ignore-eos \
		--temperature --rate --arrival --burstiness --concurrency \
		--max-concurrency --slo-ttft-ms --slo-tpot-ms --slo-e2e-ms \
		--max-dispatch-lag-ms --json --records --dry-run; do
		expect_grep "$o" help
	done &&
	$ATB help loadgen | grep -q "exit codes"
'

test_expect "bad options exit 2 with the value named" '
	expect_exit 2 $ATB loadgen --url http://127.0.0.1:1 --requests 3 &&
	expect_grep "--seed is required" "$TRASH/err" &&
	expect_exit 2 $ATB loadgen --seed 1 --requests 3 &&
	expect_grep "--url is required" "$TRASH/err" &&
	expect_exit 2 $ATB loadgen --url http://x --seed 1 --requests 0 &&
	expect_exit 2 $ATB loadgen --url http://x --seed 1 --requests 3 --rate abc &&
	expect_grep "'"'"'abc'"'"'" "$TRASH/err" &&
	expect_exit 2 $ATB loadgen --url http://x --seed 1 --requests 3 --rate 5 --concurrency 2 &&
	expect_exit 2 $ATB loadgen --url http://x --seed 1 --requests 3 --rate 5 --arrival weibull &&
	expect_grep weibull "$TRASH/err" &&
	expect_exit 2 $ATB loadgen --url http://x --seed 1 --requests 3 --input-len normal:5 &&
	expect_grep "normal:5" "$TRASH/err" &&
	expect_exit 2 $ATB loadgen --url http://x --seed 1 --requests 3 --endpoint embeddings &&
	expect_exit 2 $ATB loadgen --url http://x --seed 1 --requests 3 --frobnicate &&
	expect_exit 2 $ATB loadgen --url http://x --seed -1 --requests 3 &&
	expect_exit 2 $ATB loadgen --url http://x --seed 1 --requests 3 --burstiness 2
'

test_expect "the same seed gives the same workload, another seed another" '
	$ATB loadgen --dry-run --seed 9 --requests 40 --rate 5 --arrival gamma \
		--burstiness 0.5 --input-len lognormal:40:0.5 --output-len uniform:2:9 >a &&
	$ATB loadgen --dry-run --seed 9 --requests 40 --rate 5 --arrival gamma \
		--burstiness 0.5 --input-len lognormal:40:0.5 --output-len uniform:2:9 >b &&
	$ATB loadgen --dry-run --seed 10 --requests 40 --rate 5 --arrival gamma \
		--burstiness 0.5 --input-len lognormal:40:0.5 --output-len uniform:2:9 >c &&
	cmp a b && ! cmp -s a c &&
	$ATB --json loadgen --dry-run --seed 9 --requests 3 --prompts repetitive >j1 &&
	$ATB loadgen --dry-run --seed 9 --requests 3 --prompts repetitive --json >j2 &&
	cmp j1 j2 && grep -q "\"prompts\":\"repetitive\"" j1
'

test_expect "a bad dataset line names file and line, exit 2" '
	expect_exit 2 $ATB loadgen --dry-run --seed 1 --requests 3 --prompts "$FIX/bad-json.jsonl" &&
	expect_grep "bad-json.jsonl:3" "$TRASH/err" &&
	expect_exit 2 $ATB loadgen --dry-run --seed 1 --requests 3 --prompts "$FIX/bad-output-len.jsonl" &&
	expect_grep "bad-output-len.jsonl:4: output_len:" "$TRASH/err" &&
	$ATB loadgen --dry-run --seed 1 --requests 3 --prompts "$FIX/sharegpt.jsonl" >out &&
	expect_grep "3 requests" out
'

test_expect "an unreachable server for every request exits 3" '
	port=$(python3 -c "import socket; s=socket.socket(); s.bind((\"127.0.0.1\",0)); print(s.getsockname()[1])") &&
	expect_exit 3 $ATB loadgen --url http://127.0.0.1:$port --seed 1 --requests 3 \
		--max-dispatch-lag-ms 1000 &&
	expect_grep "unreachable for every request" "$TRASH/err" &&
	expect_grep "connect 3" "$TRASH/out"
'

start_server --token-ms 2 --fault http500 --fault-every 4

test_expect "a run reports metrics, failures by category and writes records" '
	$ATB loadgen --url "$URL" --seed 3 --requests 8 --warmup 2 --concurrency 2 \
		--output-len 5 --records rec.jsonl --slo-ttft-ms 5000 >out &&
	expect_grep "8 measured (+2 warm-up)" out &&
	expect_grep "http_5xx 2" out &&
	expect_grep "goodput" out &&
	expect_grep "dispatch lag" out &&
	grep -q "^client lag   .* ms, .*% of the .* s run" out &&
	test $(wc -l <rec.jsonl) = 10 &&
	grep -q "\"failure\":\"http_5xx\"" rec.jsonl &&
	grep -q "\"text\":\" w0 w1 w2 w3 w4\"" rec.jsonl
'

# The JSON is printed whether or not the run is client_limited: exit 1 is
# allowed here, since beside two CPU hogs the p99 lag read 23.6 ms against the
# protocol's 10 ms default this test checks (the flag itself is test 8's).
test_expect "--json prints the summary and the workload digest" '
	{ $ATB loadgen --url "$URL" --seed 3 --requests 4 --rate 50 --output-len 3 --json >j
	  rc=$?; [ $rc = 0 ] || [ $rc = 1 ]; } &&
	python3 -c "
import json, sys
o = json.load(open(\"j\"))
s = o[\"summary\"]
assert s[\"requests\"] == 4, s
assert len(o[\"workload_digest\"]) == 64
assert \"p99\" in s[\"ttft_ms\"] and \"max\" in s[\"dispatch_lag_ms\"]
assert s[\"max_dispatch_lag_ms\"] == 10, s  # the protocol engine.max_dispatch_lag_ms
assert s[\"client_limited\"] == (s[\"dispatch_lag_ms\"][\"p99\"] > 10), s
# PROTO: engine.client_lag: open loop, the largest lag over the duration
assert s[\"client_lag_ms\"] == s[\"dispatch_lag_ms\"][\"max\"], s
assert abs(s[\"client_lag_share\"] - s[\"client_lag_ms\"] / (s[\"duration_s\"] * 1000)) < 1e-12, s
"
'

test_expect "a dispatch lag over the limit is flagged client_limited, exit 1" '
	expect_exit 1 $ATB loadgen --url "$URL" --seed 3 --requests 6 --rate 100 \
		--output-len 2 --max-dispatch-lag-ms 0.0000001 &&
	expect_grep "CLIENT LIMITED" "$TRASH/out" &&
	expect_grep "client_limited" "$TRASH/err"
'

stop_server
test_done
