#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# A short seeded flag search over the REAL engine (llama.cpp's llama-server,
# scripts/install-engine-deps.sh) on the repetitive workload:
# `atb run ENGINE_TASK --proposer random`.  The seed is chosen from the
# proposer's own plan so that the search meets a combination the engine
# refuses (--spec-ngram-simple-size-n 0: the server exits at start with its
# message); that iteration stays in the run as unusable, gate engine_start,
# with the engine's own message as the reason; the run goes on and finishes.
# The plan is a pure function of the seed (same seed, same proposals).
# Iteration 0, the default against itself, may be admitted (about 1.0x) or,
# on a loaded box, refused as noise: either is an outcome of the run.
. "$(dirname "$0")/lib.sh"
. "$ATB_SOURCE_DIR/tools/engine/test-lib.sh"
command -v jq >/dev/null || skip_all "jq not installed"
command -v sqlite3 >/dev/null || skip_all "sqlite3 not installed"

REP=$LLAMA_TASKS/engine-llamacpp-repeat/engine.yaml
# Two iterations: the default (a null A/B) and the refused combination, so
# the test does not spend minutes measuring a third configuration (one with
# threads=2 took 205 s on this loaded box, through noise re-runs).
ITER=2

test_expect "a seed whose plan holds a refused combination (and the plan repeats)" '
	for s in $(seq 0 200); do
		"$ATB" run "$REP" --plan --iterations $ITER --seed "$s" >plan 2>&1 || exit 1
		grep -q "^1 .*\"spec_ngram_size_n\":\"0\"" plan && { echo "$s" >seed; break; }
	done
	test -s seed &&
	"$ATB" run "$REP" --plan --iterations $ITER --seed "$(cat seed)" >plan2 && cmp plan plan2
'

test_expect "the search runs to the end; the refusal is an unusable iteration with its message" '
	expect_exit 0 "$ATB" --db atb.db run "$REP" --proposer random --iterations $ITER \
		--seed "$(cat seed)" --seeds 8 --runs-dir runs --quiet --json &&
	cp "$TRASH/out" run.json &&
	sqlite3 atb.db "select rule || \" \" || reason from rejection" >rej &&
	expect_grep "gate:engine_start" rej &&
	expect_grep "ngram size N must be between 1 and 1024" rej
'

test_expect "atb report shows the run against the default" '
	id=$(jq -r .run run.json) &&
	"$ATB" --db atb.db report "$id" >rep 2>&1 &&
	expect_grep "engine_start" rep
'

test_done
