#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Record/replay: calls recorded against the real llama-server (loopback, the
# tiny model) are answered again from the store with the server stopped,
# byte for byte (content, finish_reason, tokens, the request hash); a request
# the run did not record is an error; replayed calls recorded into a new run
# reproduce the recorded run's outcomes, its halt included.
. "$(dirname "$0")/lib.sh"
. "$ATB_SOURCE_DIR/tools/engine/test-lib.sh"
command -v jq >/dev/null || skip_all "jq not installed"
command -v curl >/dev/null || skip_all "curl not installed"

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$LLAMA_SERVER" --model "$ATB_TINY_GGUF" --host 127.0.0.1 --port "$PORT" --parallel 1 \
	--threads 1 --ctx-size 128 >server.log 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; rm -rf "$TRASH"' EXIT
for i in $(seq 1 600); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.1; done  # 60 s: a loaded box
export ATB_LLM_BASE_URL=http://127.0.0.1:$PORT ATB_LLM_MODEL=tiny
echo "first prompt" >p1.txt
echo "second prompt" >p2.txt
echo "never asked" >p3.txt
# what must be identical between a call and its replay
same() { jq -S "{content, finish_reason, outcome, prompt_tokens, completion_tokens, reasoning_tokens, request_hash, http_status}" "$1"; }

test_expect "record two calls on the real server, then stop it" '
	"$ATB" --db t.db llm call --prompt-file p1.txt --run rec --json >r1.json &&
	"$ATB" --db t.db llm call --prompt-file p2.txt --run rec --temperature 0.7 --seed 5 --json >r2.json &&
	"$ATB" --db t.db llm call --prompt-file p1.txt --run rec --json >r3.json &&
	expect_exit 1 "$ATB" --db t.db llm call --prompt-file p1.txt --run cut --repeat 4 &&
	stop_server $SERVER "http://127.0.0.1:$PORT/health" &&
	jq -e ".attempts == 1 and .outcome == \"truncated\"" r1.json
'

test_expect "replayed without any server, byte for byte" '
	"$ATB" --db t.db llm call --prompt-file p1.txt --replay rec --json >y1.json &&
	"$ATB" --db t.db llm call --prompt-file p2.txt --replay rec --temperature 0.7 --seed 5 --json >y2.json &&
	cmp <(same r1.json) <(same y1.json) && cmp <(same r2.json) <(same y2.json) &&
	jq -e ".attempts == 0" y1.json &&
	cmp <(jq -j .content r1.json) <(jq -j .content y1.json) &&
	"$ATB" --db t.db llm call --prompt-file p2.txt --replay rec --temperature 0.7 --seed 5 >text &&
	cmp <(jq -r .content r2.json) text
'

test_expect "a request that was not recorded is an error: another prompt, temperature or seed" '
	expect_exit 2 "$ATB" --db t.db llm call --prompt-file p3.txt --replay rec &&
	expect_grep "was not recorded in run '\''rec'\''" "$TRASH/err" &&
	expect_exit 2 "$ATB" --db t.db llm call --prompt-file p2.txt --replay rec --temperature 0.7 &&
	expect_exit 2 "$ATB" --db t.db llm call --prompt-file p2.txt --replay rec --temperature 0.7 --seed 6 &&
	expect_exit 2 "$ATB" --db t.db llm call --prompt-file p1.txt --replay nosuchrun &&
	expect_grep "no recorded model calls" "$TRASH/err"
'

test_expect "the k-th request with a hash gets the k-th recording; one more is an error" '
	"$ATB" --db t.db llm call --prompt-file p1.txt --replay rec --repeat 2 --json >two.json &&
	test "$(jq -s length two.json)" = 2 &&
	expect_exit 2 "$ATB" --db t.db llm call --prompt-file p1.txt --replay rec --repeat 3 &&
	expect_grep "every recording is used" "$TRASH/err"
'

test_expect "replayed into a new run: rows with transport replay, the same outcomes and halt" '
	expect_exit 1 "$ATB" --db t.db llm call --prompt-file p1.txt --replay cut --run again --repeat 4 &&
	expect_grep "halted as an infrastructure defect: truncation" "$TRASH/err" &&
	"$ATB" --db t.db llm show again --json >a.json && "$ATB" --db t.db llm show cut --json >c.json &&
	cmp <(jq -S "del(.run, .latency_s)" a.json) <(jq -S "del(.run, .latency_s)" c.json) &&
	sqlite3 t.db "SELECT group_concat(transport) FROM llm_call WHERE run = '\''again'\''" >tr &&
	test "$(cat tr)" = "replay,replay,replay,replay" &&
	sqlite3 t.db "SELECT count(*) FROM llm_call a JOIN llm_call c ON a.n = c.n AND c.run = '\''cut'\''
		WHERE a.run = '\''again'\'' AND a.response IS c.response AND a.request IS c.request" >same &&
	test "$(cat same)" = 4 &&
	"$ATB" --db t.db audit verify >/dev/null && "$ATB" --db t.db llm check >/dev/null
'

test_done
