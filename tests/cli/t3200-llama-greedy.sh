#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The REAL engine: llama.cpp's llama-server (scripts/install-engine-deps.sh)
# on loopback, on the tiny constructed model (tools/engine/make-tiny-gguf.py:
# greedy decoding follows one seeded cycle).  No timing is judged here:
#  - greedy answers are deterministic and continue the cycle the prompt holds;
#  - prompt-lookup (n-gram) speculation (--spec-type ngram-simple) gives the
#    same greedy text token for token as no speculation, on the repetitive
#    and on the random prompts of tasks/engine-llamacpp-*;
#  - on the repetitive prompts the server drafts and accepts tokens (its
#    own timings: draft_n, draft_n_accepted), on the random ones it finds
#    nothing to draft: the treatment is delivered only where it can work;
#  - spec_ngram_size_n=0, inside engines/llamacpp.yaml's domain, renders to a
#    flag the server refuses at start with its own message (what a search
#    must count as an unusable iteration).
# The timed A/B, search and death tests are t3200-llama-ab, t3210-llama-search
# and t3220-llama-death (docs/engines-real.md).
. "$(dirname "$0")/lib.sh"
. "$ATB_SOURCE_DIR/tools/engine/test-lib.sh"
command -v jq >/dev/null || skip_all "jq not installed"
command -v curl >/dev/null || skip_all "curl not installed"

SPEC="--spec-type ngram-simple --spec-ngram-simple-size-n 3 --spec-ngram-simple-size-m 16"

# serve NAME ARGS...: start llama-server, wait until ready; pid in NAME.pid
serve() {
	local name=$1 port i; shift
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	"$LLAMA_SERVER" --model "$ATB_TINY_GGUF" --host 127.0.0.1 --port "$port" --parallel 1 \
		--threads 1 "$@" >"$name.log" 2>&1 &
	echo $! >"$name.pid"
	echo "$port" >"$name.port"
	for i in $(seq 1 600); do   # 60 s: a loaded box
		curl -sf "http://127.0.0.1:$port/health" >/dev/null && return 0
		sleep 0.1
	done
	echo "llama-server $name not ready:"; tail "$name.log"; return 1
}
stop() { kill "$(cat "$1.pid")"; wait "$(cat "$1.pid")" 2>/dev/null || true; }
# ask NAME TASK OUT: every probe of the task, greedy, 32 tokens; one JSON a line
ask() {
	local port; port=$(cat "$1.port")
	jq -c "{prompt, max_tokens: 32, temperature: 0}" "$LLAMA_TASKS/engine-llamacpp-$2/probes.jsonl" |
	while read -r p; do
		curl -sf "http://127.0.0.1:$port/v1/completions" -d "$p" |
			jq -c "{text: .choices[0].text, n: .usage.completion_tokens,
				finish: .choices[0].finish_reason, draft: (.timings.draft_n // 0),
				accepted: (.timings.draft_n_accepted // 0)}"
	done >"$3"
}

test_expect "greedy answers are deterministic and continue the prompt's cycle" '
	serve off &&
	ask off repeat a1 && ask off repeat a2 && ask off random r1 && stop off &&
	test "$(wc -l <a1)" = 4 && cmp a1 a2 &&
	jq -e "select(.n != 32 or .finish != \"length\")" a1 >bad; test ! -s bad &&
	paste -d "\t" <(jq -r .text a1) <(jq -r .prompt "$LLAMA_TASKS/engine-llamacpp-repeat/probes.jsonl") |
		while IFS="$(printf "\t")" read -r t p; do case $p in *"$t"*) ;; *) exit 1 ;; esac; done
'

test_expect "n-gram speculation: same greedy text, drafts accepted on repetitive prompts" '
	serve on $SPEC && ask on repeat b1 && ask on random s1 && stop on &&
	cmp <(jq -c "{text, n, finish}" a1) <(jq -c "{text, n, finish}" b1) &&
	cmp <(jq -c "{text, n, finish}" r1) <(jq -c "{text, n, finish}" s1) &&
	jq -s -e "all(.[]; .accepted >= 16)" b1
'

test_expect "on random prompts speculation finds nothing to accept; without it, no drafts" '
	jq -s -e "all(.[]; .accepted == 0)" s1 &&
	jq -s -e "all(.[]; .draft == 0)" a1 r1
'

test_expect "a value in the spec's domain that the server refuses at start, with its message" '
	"$ATB" engine render "$LLAMA_TASKS/engine-llamacpp-repeat/engine.yaml" \
		--candidate spec_ngram_size_n=0 >argv &&
	expect_grep "--spec-ngram-simple-size-n" argv &&
	expect_exit 1 "$LLAMA_SERVER" --model "$ATB_TINY_GGUF" --spec-ngram-simple-size-n 0 &&
	expect_grep "ngram size N must be between 1 and 1024" "$TRASH/err"
'

test_done
