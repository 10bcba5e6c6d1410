#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The REAL engine (llama.cpp's llama-server) dies mid-run: the test kills the
# candidate arm's server (by its pid, found through a model path only this
# test uses) once it is up and loaded.  atb engine ab must store a rejection
# with gate engine_died and the tail of the engine's log, admit nothing, and
# leave the store and the audit chain consistent.
. "$(dirname "$0")/lib.sh"
. "$ATB_SOURCE_DIR/tools/engine/test-lib.sh"
command -v jq >/dev/null || skip_all "jq not installed"
command -v sqlite3 >/dev/null || skip_all "sqlite3 not installed"

REP=$LLAMA_TASKS/engine-llamacpp-repeat/engine.yaml
SPEC=spec_type=ngram-simple,spec_ngram_size_n=3,spec_ngram_size_m=16
ln -s "$ATB_TINY_GGUF" "$TRASH/die.gguf"

# kill_candidate: wait for the candidate's server (the one with --spec-type)
# on this test's model, then until its log in the arm's folder shows it has
# answered a request (atb saw it ready and is probing or loading it: a kill
# before that is an engine_start refusal, also right, but not this test),
# then SIGKILL it.
kill_candidate() {
	local pid="" i
	for i in $(seq 1 600); do
		pid=$(pgrep -f -- "--model $TRASH/die.gguf .*--spec-type" | head -1)
		[ -n "$pid" ] && break
		sleep 0.1
	done
	[ -n "$pid" ] || return 0
	for i in $(seq 1 600); do
		grep -qs "prompt eval time" w-die/seed-1-candidate/engine.stderr && break
		sleep 0.02
	done
	kill -KILL "$pid" 2>/dev/null && echo "$pid" >"$TRASH/killed"
}

test_expect "a server killed mid-run is stored as a rejection with its log tail" '
	mkdir -p w-die
	kill_candidate & watcher=$!
	ATB_TINY_GGUF=$TRASH/die.gguf expect_exit 2 "$ATB" --db atb.db engine ab "$REP" \
		--candidate "$SPEC" --seeds 8 --work-dir w-die --json; rc=$?
	wait $watcher
	test $rc = 0 && test -s killed && cp "$TRASH/out" die.json &&
	jq -e ".verdict == \"rejected\" and .gate == \"engine_died\" and .result_id == null" die.json &&
	r=$(sqlite3 atb.db "select rule || \" \" || reason from rejection") &&
	echo "$r" | grep -q "^gate:engine_died .*killed by signal 9" &&
	# the tail of the engine'"'"'s own log is in the reason
	last=$(tail -1 w-die/seed-1-candidate/engine.stderr | tr -s " \t" " " | cut -c1-40) &&
	test -n "$last" && echo "$r" | grep -qF -- "$last" &&
	test "$(sqlite3 atb.db "select count(*) from result")" = 0
'

test_expect "the audit chain verifies after the death" '
	"$ATB" --db atb.db audit verify
'

test_done
