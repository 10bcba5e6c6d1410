#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# atb run --proposer llm-code against the real llama-server (loopback, the
# tiny chain model of tools/engine, made with a 32768-token context so that
# the prompt, which holds the reference, the template and the ABI, fits).
# The task is the fixture relu-tiny (a few lines of source: a short prompt and
# a small schema bound).  The request carries a JSON schema (response_format), so even this model's
# garbage is a parsable {"files": {"kernel.c": "..."}}: the reply is parsed,
# written inside the candidate folder, and judged by the normal measure path
# (its text is no C: the build gate refuses it).  Then the server is stopped
# and 'atb run --replay' reproduces the proposals byte for byte.
. "$(dirname "$0")/lib.sh"
. "$ATB_SOURCE_DIR/tools/engine/test-lib.sh"
command -v jq >/dev/null || skip_all "jq not installed"
command -v curl >/dev/null || skip_all "curl not installed"
command -v sqlite3 >/dev/null || skip_all "sqlite3 not installed"

gen=$ATB_SOURCE_DIR/tools/engine/make-tiny-gguf.py
MODEL=$ATB_ENGINE_HOME/models/tiny-s1-ctx32k-$(sha256sum "$gen" | cut -c1-12).gguf
if [ ! -s "$MODEL" ]; then
	"$ENGINE_PY" "$gen" "$MODEL.$$" --seed 1 --ctx 32768 && mv -f "$MODEL.$$" "$MODEL" ||
		{ echo "not ok - cannot write the tiny model"; exit 1; }
fi
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$LLAMA_SERVER" --model "$MODEL" --host 127.0.0.1 --port "$PORT" --parallel 1 \
	--threads 1 --ctx-size 32768 >server.log 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; rm -rf "$TRASH"' EXIT
for i in $(seq 1 150); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.1; done
cp -r "$ATB_SOURCE_DIR/tests/fixtures/task/relu-tiny" relu
iters() { sqlite3 -cmd ".timeout 10000" -json atb.db "SELECT k, knobs, outcome, reason FROM iteration WHERE run = '$1' ORDER BY k"; }

test_expect "the real server's schema-bound reply is parsed, written and refused by the build gate" '
	"$ATB" run ./relu --proposer llm-code --model tiny --base-url "http://127.0.0.1:$PORT" \
		--iterations 2 --seed 1 --quiet --json >run.json &&
	RUN=$(jq -r .run run.json) && echo "$RUN" >run_id &&
	iters "$RUN" >it.json && cat it.json &&
	"$ATB" llm show "$RUN" --json >show.json &&
	jq -e ".calls == 2 and .ok == 2 and (.halted | not)" show.json &&
	sqlite3 atb.db "SELECT content FROM llm_call WHERE run = '\''$RUN'\'' AND n = 1" >c1.json &&
	jq -j ".files[\"kernel.c\"]" c1.json >want.c && test -s want.c &&
	cmp want.c "runs/$RUN/iter-0/candidate/kernel.c" &&
	jq -e "all(.[]; .outcome == \"build\")" it.json &&
	grep -q "response_format" <(sqlite3 atb.db "SELECT request FROM llm_call WHERE run = '\''$RUN'\'' AND n = 1") &&
	"$ATB" audit verify >/dev/null && "$ATB" llm check >/dev/null
'

test_expect "with the server stopped, the replay reproduces the proposals byte for byte" '
	RUN=$(cat run_id) && stop_server $SERVER "http://127.0.0.1:$PORT/health" &&
	! curl -sf "http://127.0.0.1:$PORT/health" &&
	"$ATB" run --replay "$RUN" --quiet --json >rep.json &&
	REP=$(jq -r .run rep.json) &&
	jq -e ".replay_of == \"$RUN\" and .done == 2" rep.json &&
	cmp <(iters "$RUN" | jq -c "[.[] | .knobs, .outcome]") <(iters "$REP" | jq -c "[.[] | .knobs, .outcome]") &&
	for k in 0 1; do cmp "runs/$RUN/iter-$k/candidate/kernel.c" "runs/$REP/iter-$k/candidate/kernel.c" || exit 1; done &&
	"$ATB" audit verify >/dev/null && "$ATB" llm check >/dev/null
'

test_done
