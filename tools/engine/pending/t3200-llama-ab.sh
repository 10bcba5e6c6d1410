#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The REAL engine: llama.cpp's llama-server (scripts/install-engine-deps.sh),
# started on loopback by atb, on the tiny constructed model the test writes
# (tools/engine/make-tiny-gguf.py: greedy decoding follows one seeded cycle).
# Prompt-lookup (n-gram) speculation against the engine's default:
#  - on the repetitive workload (the cycle is in the prompt) it is admitted
#    with requests/s ratio > 1 and its CI above 1, the greedy probes equal
#    the default's token for token, and the engine's own counters show the
#    drafts were made and accepted (the treatment was delivered);
#  - on the random workload it gives no speedup (no admitted CI above 1)
#    and its drafts find nothing to accept.
# PROTO: engine.paired_order, engine.fresh_engine_per_arm,
# engine.output_equivalence, stats.min_paired_seeds.
. "$(dirname "$0")/lib.sh"
. "$ATB_SOURCE_DIR/tools/engine/test-lib.sh"
command -v jq >/dev/null || skip_all "jq not installed"
command -v curl >/dev/null || skip_all "curl not installed"
command -v sqlite3 >/dev/null || skip_all "sqlite3 not installed"

REP=$LLAMA_TASKS/engine-llamacpp-repeat/engine.yaml
RND=$LLAMA_TASKS/engine-llamacpp-random/engine.yaml
SPEC=spec_type=ngram-simple,spec_ngram_size_n=3,spec_ngram_size_m=16

test_expect "llama-server answers greedily and deterministically on the tiny model" '
	port=$(python3 -c "import socket; s=socket.socket(); s.bind((\"127.0.0.1\",0)); print(s.getsockname()[1])")
	"$LLAMA_SERVER" --model "$ATB_TINY_GGUF" --host 127.0.0.1 --port "$port" --parallel 1 \
		>srv.log 2>&1 &
	pid=$!
	for i in $(seq 1 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.2; done
	p=$(jq -c "{prompt, max_tokens: 24, temperature: 0}" "${REP%/*}/probes.jsonl" | head -1)
	curl -sf "http://127.0.0.1:$port/v1/completions" -d "$p" | jq -r ".choices[0].text" >a
	curl -sf "http://127.0.0.1:$port/v1/completions" -d "$p" | jq -r ".choices[0].text" >b
	kill "$pid"; wait "$pid" || true
	test -s a && cmp a b &&
	# the continuation is the cycle the prompt already holds
	jq -r .prompt "${REP%/*}/probes.jsonl" | head -1 >prompt &&
	grep -qF "$(cat a)" prompt
'

test_expect "n-gram speculation on the repetitive workload: admitted, CI above 1" '
	mkdir -p w-rep w-rnd &&
	expect_exit 0 "$ATB" --db atb.db engine ab "$REP" --candidate "$SPEC" --seeds 8 \
		--work-dir w-rep --json &&
	cp "$TRASH/out" rep.json &&
	jq -e ".verdict == \"admitted\" and .speedup > 1 and .ci_low > 1" rep.json
'

test_expect "the drafts were made and accepted (treatment delivered), none in the default" '
	grep -h "draft acceptance" w-rep/seed-*-candidate/engine.stderr >acc &&
	test -s acc &&
	! grep -q "draft acceptance" w-rep/seed-1-baseline/engine.stderr
'

test_expect "n-gram speculation on the random workload: no speedup" '
	"$ATB" --db atb.db engine ab "$RND" --candidate "$SPEC" --seeds 8 --work-dir w-rnd \
		--json >rnd.json || true
	# admitted with its CI reaching 1 or below, or refused as noise: never a
	# speedup, and never a failure of the engine itself
	test -s rnd.json &&
	jq -e "(.verdict == \"admitted\" and .ci_low <= 1) or .gate == \"noise\"" rnd.json
'

test_expect "both results are stored with paired seeds and the audit chain verifies" '
	test "$(sqlite3 atb.db "select count(*) from result")" -ge 1 &&
	"$ATB" --db atb.db audit verify >v 2>&1
'

test_done
