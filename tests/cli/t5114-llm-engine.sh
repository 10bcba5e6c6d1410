#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# atb run --proposer llm on an engine task: the model proposes a launch
# configuration (JSON {"config": {...}} under a JSON schema of the task's
# search flags), checked against the flag space by the code every random
# draw passes, and measured by the same engine A/B.  The engine is the TEST
# DOUBLE engine (tests/fixtures/engine/double_engine.py, a fake server, not
# an engine; task tests/fixtures/engine/search.yaml as in t3120) and, for
# scripted replies, the model is the TEST DOUBLE tests/cli/llm-double.py:
# iteration 1's reply {"speedup": 2.0} is measured (the 2x flag), iteration
# 2's {"truncate": 9} lies outside the flag's domain and iteration 3's
# {"nope": true} names no flag, each four times (llm.max_calls_per_iteration):
# two unusable 'proposal' iterations with their reasons, never started.
# --baseline-proposer random runs the seeded random search beside it.  Then
# the replay, with the double stopped, reproduces the proposals byte for
# byte.  Last, one run against the real llama-server (the tiny model of
# tools/engine, 32768-token context as t5108) whose schema-bound reply is a
# parsable configuration (skipped with the reason where llama-server is not
# installed).
. "$(dirname "$0")/lib.sh"
command -v jq >/dev/null || skip_all "jq not installed"
command -v python3 >/dev/null || skip_all "python3 is needed for the test doubles"
command -v sqlite3 >/dev/null || skip_all "sqlite3 not installed"
command -v curl >/dev/null || skip_all "curl not installed"

TASK=$ATB_SOURCE_DIR/tests/fixtures/engine/search.yaml
python3 -c '
import json
good = {"content": json.dumps({"config": {"speedup": 2.0}})}
out_of_range = {"content": json.dumps({"config": {"truncate": 9}})}
unknown = {"content": json.dumps({"config": {"nope": True}})}
json.dump([good] + [out_of_range] * 4 + [unknown] * 4, open("script.json", "w"))'
llm_double
SERVER=
trap 'kill $DOUBLE $SERVER 2>/dev/null; rm -rf "$TRASH"' EXIT
iters() { sqlite3 -cmd ".timeout 10000" -json atb.db "SELECT k, knobs, outcome, reason, result, speedup, ci_low FROM iteration WHERE run = '$1' ORDER BY k"; }

test_expect "llm-code is refused for an engine task: it has no code" '
	expect_exit 2 "$ATB" run "$TASK" --proposer llm-code --model double --base-url "$URL" \
		--iterations 2 --quiet &&
	expect_grep "its proposals are launch configurations (--proposer llm)" err &&
	test ! -s d.log
'

test_expect "the usable proposal is measured, the two outside the space are stored with their reasons" '
	"$ATB" run "$TASK" --proposer llm --model double --base-url "$URL" --iterations 4 \
		--seed 6 --baseline-proposer random --quiet --json >run.json &&
	RUN=$(jq -r .run run.json) && echo "$RUN" >run_id &&
	iters "$RUN" >it.json && cat it.json &&
	jq -e ".done == 4 and .llm_calls == 9 and .best.iteration == 1" run.json &&
	jq -e ".[0].knobs == \"{}\" and .[0].outcome == \"usable\"" it.json &&
	jq -e ".[1].knobs == \"{\\\"speedup\\\":\\\"2.0\\\"}\" and .[1].outcome == \"usable\"
		and .[1].result > 0 and .[1].ci_low > 1.3" it.json &&
	jq -e ".[2].outcome == \"proposal\" and .[2].knobs == \"{}\" and .[2].result == null
		and (.[2].reason | contains(\"flag '"'"'truncate'"'"': 9 is outside its domain [0, 4]\"))" it.json &&
	jq -e ".[3].outcome == \"proposal\" and .[3].result == null
		and (.[3].reason | contains(\"engine '"'"'double'"'"' has no flag '"'"'nope'"'"'\"))" it.json &&
	test ! -e "runs/$RUN/iter-2" && test ! -e "runs/$RUN/iter-3" &&
	test "$(wc -l <d.log)" = 9 &&
	jq -e ".baseline.proposer == \"random\" and .baseline.done == 4" run.json &&
	B=$(jq -r .baseline.run run.json) &&
	test "$(sqlite3 atb.db "SELECT proposer FROM run WHERE id = '\''$B'\''")" = random
'

test_expect "every call carries the template digest, the flag space and the schema" '
	jq -s -e "map(.body | fromjson) | length == 9 and all(.[];
		(.messages[0].content | startswith(\"atb prompt template llm-engine-1 sha256:\"))
		and (.messages[1].content | contains(\"truncate: int, 0 to 4; default 0\"))
		and (.messages[1].content | contains(\"speedup: float, one of 1.0, 1.5, 2.0; default 1.0\"))
		and .response_format.json_schema.schema.properties.config.properties.truncate.maximum == 4)" d.log &&
	D=$(sha256sum "$ATB_SOURCE_DIR/tasks/prompts/llm-engine-1.txt" | cut -c1-64) &&
	jq -s -e "all(.[]; .body | fromjson | .messages[0].content | startswith(\"atb prompt template llm-engine-1 sha256:$D\"))" d.log &&
	jq -s -e ".[8].body | fromjson | .messages[1].content | contains(\"2: {} -> proposal (flag '"'"'truncate'"'"': 9 is outside its domain [0, 4])\")
		and contains(\"1: {\\\"speedup\\\":\\\"2.0\\\"} -> usable, requests/s \")" d.log &&
	"$ATB" llm show "$(cat run_id)" --json | jq -e ".calls == 9 and (.halted | not)" &&
	"$ATB" audit verify >/dev/null && "$ATB" llm check >/dev/null
'

test_expect "the replay asks no server and reproduces the proposals byte for byte" '
	RUN=$(cat run_id) && kill $DOUBLE && wait $DOUBLE 2>/dev/null;
	"$ATB" run --replay "$RUN" --quiet --json >rep.json &&
	REP=$(jq -r .run rep.json) && jq -e ".replay_of == \"$RUN\" and .done == 4" rep.json &&
	cmp <(iters "$RUN" | jq -c "[.[] | .knobs, .outcome]") <(iters "$REP" | jq -c "[.[] | .knobs, .outcome]") &&
	test "$(sqlite3 atb.db "SELECT count(*) FROM llm_call WHERE run = '\''$REP'\'' AND transport = '\''replay'\''")" = 9 &&
	test "$(wc -l <d.log)" = 9 &&
	"$ATB" audit verify >/dev/null && "$ATB" llm check >/dev/null
'

. "$ATB_SOURCE_DIR/tools/engine/env.sh"
if [ -n "$ENGINE_MISSING" ] && [ "${CI:-}" != true ]; then
	tests_run=$((tests_run + 1))
	echo "ok $tests_run - the real llama-server's schema-bound reply is a configuration # SKIP $ENGINE_MISSING"
else
	gen=$ATB_SOURCE_DIR/tools/engine/make-tiny-gguf.py
	MODEL=$ATB_ENGINE_HOME/models/tiny-s1-ctx32k-$(sha256sum "$gen" | cut -c1-12).gguf
	if [ ! -s "$MODEL" ]; then
		"$ENGINE_PY" "$gen" "$MODEL.$$" --seed 1 --ctx 32768 && mv -f "$MODEL.$$" "$MODEL" ||
			{ echo "not ok - cannot write the tiny model"; exit 1; }
	fi
	# one real-engine test at a time (tools/engine/test-lib.sh's lock)
	exec 8>"$ATB_ENGINE_HOME/.test.lock"
	flock 8
	PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	"$LLAMA_SERVER" --model "$MODEL" --host 127.0.0.1 --port "$PORT" --parallel 1 \
		--threads 1 --ctx-size 32768 >server.log 2>&1 &
	SERVER=$!
	for i in $(seq 1 150); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.1; done
	test_expect "the real llama-server's schema-bound reply is a configuration" '
		"$ATB" run "$TASK" --proposer llm --model tiny --base-url "http://127.0.0.1:$PORT" \
			--iterations 2 --seed 1 --quiet --json >real.json &&
		RUN=$(jq -r .run real.json) && iters "$RUN" >rit.json && cat rit.json &&
		"$ATB" llm show "$RUN" --json | jq -e ".calls >= 1 and .ok >= 1 and (.halted | not)" &&
		sqlite3 atb.db "SELECT content FROM llm_call WHERE run = '\''$RUN'\'' ORDER BY n LIMIT 1" >c1.json &&
		cat c1.json && jq -e ".config | type == \"object\"" c1.json &&
		jq -c ".config | with_entries(.value |= tostring)" c1.json >want.json &&
		jq -c ".[1].knobs | fromjson" rit.json >got.json &&
		{ cmp want.json got.json || jq -e ".[1].outcome == \"proposal\"" rit.json; } &&
		sqlite3 atb.db "SELECT request FROM llm_call WHERE run = '\''$RUN'\'' ORDER BY n LIMIT 1" |
			jq -e ".response_format.json_schema.name == \"engine_config\"" &&
		"$ATB" audit verify >/dev/null && "$ATB" llm check >/dev/null
	'
fi

test_done
