#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The 4096-token trap, for real: llama.cpp's llama-server (the real one, on
# loopback, the tiny model of tools/engine) with a context of 128 tokens (it rounds it up to 256)
# ends every reply on the length limit long before the protocol's
# max_tokens (PROTO: llm.max_output_tokens, 16384), just as a 4096-token
# cap did to 97.3% of the paper's calls.  The first calls are stored as
# truncated; once the run has llm.alarms' min_calls (default 4) calls the
# truncation rate is over llm.truncation_alarm_rate, the run halts as an
# infrastructure defect with the evidence, and takes no more calls.
. "$(dirname "$0")/lib.sh"
. "$ATB_SOURCE_DIR/tools/engine/test-lib.sh"
command -v jq >/dev/null || skip_all "jq not installed"
command -v curl >/dev/null || skip_all "curl not installed"

KEY=sk-llama-test-0123456789
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$LLAMA_SERVER" --model "$ATB_TINY_GGUF" --host 127.0.0.1 --port "$PORT" --parallel 1 \
	--threads 1 --ctx-size 128 --api-key "$KEY" >server.log 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; rm -rf "$TRASH"' EXIT
for i in $(seq 1 600); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.1; done  # 60 s: a loaded box
export ATB_LLM_BASE_URL=http://127.0.0.1:$PORT ATB_LLM_MODEL=tiny ATB_LLM_API_KEY=$KEY
echo "Write a fast sgemm kernel." >p.txt

test_expect "the real server cuts every reply on the length limit, far below max_tokens" '
	for i in 1 2 3; do
		"$ATB" --db t.db llm call --prompt-file p.txt --run trap --json >c$i.json
	done &&
	jq -s -e "all(.[]; .outcome == \"truncated\" and .finish_reason == \"length\"
		and .completion_tokens > 0 and .completion_tokens < 1000)" c1.json c2.json c3.json &&
	"$ATB" --db t.db llm show trap --json | jq -e ".calls == 3 and .truncated == 3 and (.halted | not)"
'

test_expect "the fourth truncated call halts the run as an infrastructure defect, with the evidence" '
	expect_exit 1 "$ATB" --db t.db llm call --prompt-file p.txt --run trap &&
	expect_grep "halted as an infrastructure defect: truncation rate 1.000 over 0.050 after 4 calls" "$TRASH/err" &&
	grep "^{" "$TRASH/out" >ev.json &&
	jq -e ".halt == \"infrastructure_defect\" and .reason == \"truncation\" and .calls == 4
		and .counts.truncated == 4 and .max_tokens == 16384 and .completion_tokens_max < 1000
		and (.call_ids | length) == 4" ev.json &&
	jq -r .explanation ev.json | grep -q "an output cap below the protocol" &&
	sqlite3 t.db "SELECT reason, calls FROM llm_halt" >halt && test "$(cat halt)" = "truncation|4" &&
	sqlite3 t.db "SELECT count(*) FROM audit WHERE kind = '\''llm.infrastructure_defect'\''" >n && test "$(cat n)" = 1
'

test_expect "a halted run asks the server nothing more" '
	before=$(grep -c "POST /v1/chat/completions" server.log || true) &&
	expect_exit 2 "$ATB" --db t.db llm call --prompt-file p.txt --run trap &&
	expect_grep "halted as an infrastructure defect (truncation)" "$TRASH/err" &&
	test "$(grep -c "POST /v1/chat/completions" server.log || true)" = "$before" &&
	"$ATB" --db t.db llm show trap --json | jq -e ".calls == 4 and .halted"
'

test_expect "the server checked the key; the chain verifies; the key is in no file atb wrote" '
	ATB_LLM_API_KEY=wrong-key-0000000000 expect_exit 3 "$ATB" --db t.db llm call --prompt-file p.txt --run nokey --max-attempts 1 &&
	expect_grep "http 401" "$TRASH/err" &&
	"$ATB" --db t.db audit verify >/dev/null && "$ATB" --db t.db llm check >/dev/null &&
	sqlite3 t.db .dump >dump &&
	! grep -l -- "$KEY" t.db t.db.audit.jsonl dump c1.json ev.json "$TRASH/out" "$TRASH/err"
'

test_done
