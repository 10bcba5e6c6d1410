#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# atb llm call against a TEST DOUBLE (tests/cli/llm-double.py, a scripted
# loopback HTTP server, not a model) for what only a script can plant:
# Retry-After, 429 and 5xx storms, hangs past the timeout, 4xx, garbage,
# reasoning tokens; and that the API key reaches the server's header and
# nothing else (store, audit mirror, output).  The real model server is in
# t5101-llm-truncation.sh (llama.cpp's).
. "$(dirname "$0")/lib.sh"
command -v jq >/dev/null || skip_all "jq not installed"
command -v python3 >/dev/null || skip_all "python3 not installed"

KEY=sk-atb-test-0123456789abcdef
export ATB_LLM_MODEL=double-model ATB_LLM_API_KEY=$KEY DOUBLE_KEY=$KEY
echo "say pong" >p.txt

# double NAME SCRIPT_JSON: start the test double; its URL in $URL, log NAME.log
double() {
	local i
	echo "$2" >"$1.script"
	rm -f "$1.port"
	python3 "$ATB_SOURCE_DIR/tests/cli/llm-double.py" "$1.script" "$1.log" "$1.port" &
	echo $! >"$1.pid"
	for i in $(seq 1 600); do [ -s "$1.port" ] && break; sleep 0.05; done  # 30 s: a loaded box
	URL=http://127.0.0.1:$(cat "$1.port")
	export ATB_LLM_BASE_URL=$URL
}
undouble() { kill "$(cat "$1.pid")" 2>/dev/null; wait "$(cat "$1.pid")" 2>/dev/null || true; }
trap 'for f in "$TRASH"/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null; done; rm -rf "$TRASH"' EXIT
# gap NAME K: seconds between request K-1 and K of the double's log
gap() { jq -s ".[$2].t - .[$(($2 - 1))].t" "$1.log"; }

test_expect "a call: the protocol's max_tokens, the key in the header only, the reply parsed and stored" '
	double ok "[{\"content\": \"pong\", \"reasoning_tokens\": 2}]" &&
	"$ATB" --db t.db llm call --prompt-file p.txt --run ok1 --json >out 2>err &&
	undouble ok &&
	jq -e ".outcome == \"ok\" and .content == \"pong\" and .attempts == 1 and .prompt_tokens == 7
		and .completion_tokens == 3 and .reasoning_tokens == 2 and .finish_reason == \"stop\"" out &&
	jq -e ".auth == true and .path == \"/v1/chat/completions\"" ok.log &&
	jq -r .body ok.log | jq -e ".max_tokens == 16384 and .model == \"double-model\"
		and .messages[0].content == \"say pong\\n\"" &&
	test "$(jq -j .body ok.log | sha256sum | cut -c1-64)" = "$(jq -r .request_hash out)" &&
	sqlite3 t.db "SELECT outcome, reasoning_tokens, attempts FROM llm_call WHERE run = '\''ok1'\''" >row &&
	test "$(cat row)" = "ok|2|1"
'

test_expect "429 with Retry-After: 1 is waited out (not the 1 ms backoff), then answered" '
	double ra "[{\"status\": 429, \"headers\": {\"Retry-After\": \"1\"}, \"body\": \"slow down\"}, {}]" &&
	"$ATB" --db t.db llm call --prompt-file p.txt --run ra1 --backoff-ms 1 --json >out &&
	undouble ra &&
	jq -e ".outcome == \"ok\" and .attempts == 2" out &&
	jq -n -e "$(gap ra 1) >= 0.95"
'

test_expect "a 5xx storm: exponential backoff with jitter, each wait at least half its step" '
	double st "[{\"status\": 503}, {\"status\": 502}, {\"status\": 500}, {}]" &&
	"$ATB" --db t.db llm call --prompt-file p.txt --run st1 --backoff-ms 200 --json >out &&
	undouble st &&
	jq -e ".outcome == \"ok\" and .attempts == 4" out &&
	jq -n -e "$(gap st 1) >= 0.1 and $(gap st 2) >= 0.2 and $(gap st 3) >= 0.4"
'

test_expect "a hang past the per-attempt timeout is retried" '
	double hang "[{\"delay_s\": 4}, {}]" &&
	"$ATB" --db t.db llm call --prompt-file p.txt --run hang1 --timeout-s 1 --backoff-ms 1 --json >out &&
	undouble hang &&
	jq -e ".outcome == \"ok\" and .attempts == 2 and .latency_s >= 1 and .latency_s < 4" out
'

test_expect "a 400 is not retried: the call fails (exit 3) and is stored as failed with its error" '
	double bad "[{\"status\": 400, \"body\": \"{\\\"error\\\": {\\\"message\\\": \\\"bad model\\\"}}\"}]" &&
	expect_exit 3 "$ATB" --db t.db llm call --prompt-file p.txt --run bad1 --backoff-ms 1 &&
	undouble bad && test "$(wc -l <bad.log)" = 1 &&
	expect_grep "http 400" "$TRASH/err" &&
	sqlite3 t.db "SELECT outcome, attempts, http_status, error LIKE '\''%bad model%'\'' FROM llm_call WHERE run = '\''bad1'\''" >row &&
	test "$(cat row)" = "failed|1|400|1"
'

test_expect "garbage with status 200 fails the call; a Retry-After over the limit is not waited for" '
	double junk "[{\"raw\": \"<html>proxy error</html>\"}]" &&
	expect_exit 3 "$ATB" --db t.db llm call --prompt-file p.txt --run junk1 &&
	undouble junk && expect_grep "not json" "$TRASH/err" &&
	echo "{\"retry_after_max_s\": 2}" >c.json &&
	double far "[{\"status\": 429, \"headers\": {\"Retry-After\": \"100\"}}, {}]" &&
	SECONDS=0 && expect_exit 3 "$ATB" --db t.db llm call --prompt-file p.txt --run far1 --config c.json &&
	undouble far && test "$SECONDS" -lt 20 && test "$(wc -l <far.log)" = 1 &&
	expect_grep "retry after 100 s" "$TRASH/err"
'

test_expect "replies that are not what was asked for count as unparsable; fenced code is found" '
	double js "[{\"content\": \"here you go: {oops\"}, {\"content\": \"x\\n\`\`\`c\\nint f;\\n\`\`\`\\n\"}]" &&
	"$ATB" --db t.db llm call --prompt-file p.txt --run js1 --expect json --json >a &&
	"$ATB" --db t.db llm call --prompt-file p.txt --run js1 --expect fenced --json >b &&
	undouble js &&
	jq -e ".outcome == \"unparsable\"" a && jq -e ".outcome == \"ok\"" b
'

test_expect "failed calls over the protocol's rate halt the run as an infrastructure defect" '
	double dead "[{\"status\": 500}]" &&
	for i in 1 2 3; do expect_exit 3 "$ATB" --db t.db llm call --prompt-file p.txt --run dead1 --max-attempts 2 --backoff-ms 1; done &&
	expect_exit 1 "$ATB" --db t.db llm call --prompt-file p.txt --run dead1 --max-attempts 2 --backoff-ms 1 &&
	expect_grep "halted as an infrastructure defect: failed rate 1.000" "$TRASH/err" &&
	grep "\"halt\":\"infrastructure_defect\"" "$TRASH/out" | jq -e ".reason == \"failed\" and .counts.failed == 4" &&
	expect_exit 2 "$ATB" --db t.db llm call --prompt-file p.txt --run dead1 --max-attempts 1 &&
	expect_grep "atb-rule:infrastructure_defect" "$TRASH/err" &&
	undouble dead && test "$(wc -l <dead.log)" = 8 &&
	"$ATB" --db t.db llm show dead1 --json | jq -e ".halted and .halt_reason == \"failed\" and .calls == 4"
'

test_expect "a price table gives each call its cost" '
	echo "{\"models\": {\"double-model\": {\"prompt_usd_per_mtok\": 1000000, \"completion_usd_per_mtok\": 2000000}}}" >prices.json &&
	double pr "[{}]" &&
	"$ATB" --db t.db llm call --prompt-file p.txt --run pr1 --prices prices.json --json >out &&
	undouble pr && jq -e ".cost_usd == 13" out &&
	echo "{\"models\": {\"m\": {\"prompt_usd_per_mtok\": -1}}}" >badp.json &&
	expect_exit 2 "$ATB" --db t.db llm call --prompt-file p.txt --run pr1 --prices badp.json &&
	expect_grep "models.m" "$TRASH/err"
'

test_expect "a config file with the key must be private; then its key is what the server gets" '
	env -u ATB_LLM_API_KEY true &&
	printf "{\"api_key\": \"%s\", \"model\": \"double-model\"}\n" "$KEY" >k.json && chmod 644 k.json &&
	double cf "[{}]" &&
	expect_exit 2 env -u ATB_LLM_API_KEY "$ATB" --db t.db llm call --prompt-file p.txt --run cf1 --config k.json &&
	expect_grep "chmod 600" "$TRASH/err" && test ! -s cf.log &&
	chmod 600 k.json &&
	env -u ATB_LLM_API_KEY "$ATB" --db t.db llm call --prompt-file p.txt --run cf1 --config k.json >/dev/null &&
	undouble cf && jq -e ".auth == true" cf.log &&
	echo "{\"model\": 3}" >m.json &&
	expect_exit 2 "$ATB" --db t.db llm call --prompt-file p.txt --config m.json &&
	expect_grep "m.json" "$TRASH/err" && expect_grep "model" "$TRASH/err"
'

test_expect "atb llm ping: one call, not recorded, usage errors named" '
	double pg "[{\"content\": \"pong\"}]" &&
	"$ATB" --db ping.db llm ping >out 2>err && undouble pg &&
	test "$(cat out)" = pong && expect_grep "ok, finish_reason stop" err && test ! -e ping.db &&
	jq -r .body pg.log | jq -e ".messages[0].content == \"Reply with: pong\"" &&
	expect_exit 2 "$ATB" llm call && expect_grep "needs --prompt-file" "$TRASH/err" &&
	expect_exit 2 "$ATB" llm call --prompt-file p.txt --run "bad/run" &&
	expect_grep "bad/run" "$TRASH/err" &&
	expect_exit 2 env -u ATB_LLM_BASE_URL "$ATB" --db t.db llm call --prompt-file p.txt --run x1 &&
	expect_grep "no server" "$TRASH/err" &&
	expect_exit 2 "$ATB" llm frob && "$ATB" --help | grep -q "^  llm "
'

test_expect "max_tokens_field: the protocol's limit under the name reasoning models want" '
	echo "{\"max_tokens_field\": \"max_completion_tokens\"}" >mt.json &&
	double mt "[{}]" &&
	"$ATB" --db t.db llm call --prompt-file p.txt --run mt1 --config mt.json >/dev/null &&
	undouble mt &&
	jq -r .body mt.log | jq -e ".max_completion_tokens == 16384 and (has(\"max_tokens\") | not)" &&
	echo "{\"max_tokens_field\": \"n_predict\"}" >mt2.json &&
	expect_exit 2 "$ATB" --db t.db llm call --prompt-file p.txt --config mt2.json &&
	expect_grep "max_tokens_field" "$TRASH/err"
'

test_expect "the key is nowhere: not in the store, its audit mirror, any output or log of atb" '
	"$ATB" --db t.db llm check >chk && expect_grep "match their rows and audit entries" chk &&
	"$ATB" --db t.db audit verify >/dev/null &&
	"$ATB" --db t.db llm show ok1 >show && "$ATB" llm --help >help &&
	sqlite3 t.db .dump >dump &&
	! grep -rl -- "$KEY" t.db t.db.audit.jsonl dump show help out err a b "$TRASH/out" "$TRASH/err" &&
	! grep -l -- "$KEY" ./*.log
'

test_done
