#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Budgets and the baseline proposer: atb run --proposer llm on the fixture
# task relu-steady with a TEST DOUBLE as the model (tests/cli/llm-double.py,
# 10 tokens a call), a token budget of 5: iteration 0 (the default knobs, no
# call) and iteration 1 (one call, 10 tokens) run, then the budget is spent
# and the run ends early; --baseline-proposer random then runs the seeded
# random proposer on the same task, seed and seeds for as many iterations,
# and both usable counts come out side by side.
. "$(dirname "$0")/lib.sh"
command -v jq >/dev/null || skip_all "jq not installed"
command -v python3 >/dev/null || skip_all "python3 not installed"

cp -r "$ATB_SOURCE_DIR/tests/fixtures/task/relu-steady" relu
echo '[{"content": "{\"knobs\": {\"SELECT\": \"1\", \"UNROLL\": \"2\", \"ALIGN_HINT\": \"0\"}, \"cflags\": \"\"}"}]' >script.json
llm_double

test_expect "usage: the baseline is random, budgets are positive" '
	expect_exit 2 "$ATB" run ./relu --baseline-proposer grid &&
	expect_exit 2 "$ATB" run ./relu --cost-budget -1 &&
	expect_exit 2 "$ATB" run ./relu --token-budget 0 &&
	expect_exit 2 "$ATB" run --resume abc --baseline-proposer random
'

test_expect "a spent token budget ends the llm run; the random baseline runs as many iterations" '
	"$ATB" run ./relu --proposer llm --model double --base-url "$URL" --iterations 4 \
		--token-budget 5 --baseline-proposer random --seed 2 --quiet --json >out 2>err &&
	jq -e ".budget == \"tokens\" and .done == 2 and .planned == 4 and .llm_calls == 1
		and .tokens == 10 and (.interrupted | not)" out &&
	jq -e ".baseline.proposer == \"random\" and .baseline.done == 2 and (.baseline.usable | type) == \"number\"
		and (.usable | type) == \"number\" and .baseline.run != .run" out &&
	test "$(wc -l <d.log)" = 1 &&
	sqlite3 atb.db "SELECT proposer, iterations, seed, paired_seeds FROM run ORDER BY created" >runrows &&
	test "$(sed -n 1p runrows)" = "llm|4|2|8" && test "$(sed -n 2p runrows)" = "random|2|2|8" &&
	sqlite3 atb.db "SELECT knobs FROM iteration WHERE k = 1 AND run = (SELECT id FROM run WHERE proposer = '\''llm'\'')" |
		grep -qF "\"SELECT\":\"1\""
'

test_done
