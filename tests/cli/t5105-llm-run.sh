#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# atb run --proposer llm on the fixture task relu-steady, with a TEST DOUBLE
# (tests/cli/llm-double.py) as the model, scripted call by call:
#   call 1      a proposal inside the knob space  -> iteration 1 measured
#   calls 2-5   knob values outside the space     -> iteration 2 unusable
#                                                    ("proposal"), nothing built
#   call 6      finish_reason length               -> the run halts as an
#                                                    infrastructure defect
# The prompts hold the knob space and the history with its verdicts; every
# call is recorded under the run's id; a halted run does not resume.
. "$(dirname "$0")/lib.sh"
command -v jq >/dev/null || skip_all "jq not installed"
command -v python3 >/dev/null || skip_all "python3 not installed"

cp -r "$ATB_SOURCE_DIR/tests/fixtures/task/relu-steady" relu
python3 - <<'PY'
import json
good = {"knobs": {"SELECT": "2", "UNROLL": "4", "ALIGN_HINT": "1"}, "cflags": "-O3"}
bad = {"knobs": {"SELECT": "9", "UNROLL": "4", "ALIGN_HINT": "1"}, "cflags": "-O3"}
json.dump([{"content": json.dumps(good)}] + [{"content": json.dumps(bad)}] * 4 +
          [{"content": "{\"knobs\": {", "finish_reason": "length"}], open("script.json", "w"))
PY
llm_double

test_expect "the run: iteration 1 is the model's proposal, 2 is unusable, then the halt" '
	expect_exit 1 "$ATB" run ./relu --proposer llm --model double --base-url "$URL" \
		--iterations 5 --seed 3 --quiet &&
	expect_grep "halted as an infrastructure defect" "$TRASH/err" &&
	RUN=$(sqlite3 atb.db "SELECT id FROM run") && echo "$RUN" >run_id &&
	sqlite3 atb.db "SELECT k, outcome, knobs FROM iteration ORDER BY k" >iters &&
	sed -n 2p iters | grep -q "^1|" && sed -n 2p iters | grep -qF "\"SELECT\":\"2\"" &&
	sed -n 2p iters | grep -qF "\"cflags\":\"-O3\"" &&
	test "$(sed -n 3p iters)" = "2|proposal|{}" && test "$(wc -l <iters)" = 3 &&
	test ! -e "runs/$RUN/iter-2/candidate/kernel.c"
'

test_expect "every call is recorded under the run id, with the prompt and the verdict history" '
	RUN=$(cat run_id) &&
	"$ATB" llm show "$RUN" --json >show &&
	jq -e ".calls == 6 and .ok == 5 and .truncated == 1 and .halted and .halt_reason == \"truncation\"" show &&
	sqlite3 atb.db "SELECT reason FROM iteration WHERE k = 2" | grep -q "SELECT" &&
	jq -r .body d.log | sed -n 1p | jq -r ".messages[1].content" >prompt1 &&
	expect_grep "SELECT: \"0\" \"1\" \"2\"" prompt1 &&
	expect_grep "0: {\"ALIGN_HINT\":\"0\",\"SELECT\":\"0\",\"UNROLL\":\"1\",\"cflags\":\"\"} -> " prompt1 &&
	jq -r .body d.log | sed -n 2p | jq -r ".messages[1].content" >prompt2 &&
	expect_grep "1: {\"ALIGN_HINT\":\"1\",\"SELECT\":\"2\",\"UNROLL\":\"4\",\"cflags\":\"-O3\"} -> " prompt2 &&
	jq -r .body d.log | sed -n 1p | jq -r ".messages[0].content" | head -1 | grep -q "^atb prompt template knobs-1 sha256:[0-9a-f]\{64\}$" &&
	jq -r .body d.log | jq -s -e "all(.[]; .max_tokens == 16384 and .model == \"double\")" &&
	"$ATB" audit verify >/dev/null && "$ATB" llm check >/dev/null
'

# Profiling feedback: a measured iteration's line gives the candidate's and the
# baseline's time per call, the medians of its stored per-seed medians, then the
# task's roofline on this box (the physical floor's memory and compute times,
# which binds, the candidate's time over the floor the gate used); an
# iteration without a result (2: the proposal was refused) gives none.  The
# ratio is printed to one decimal, and the numbers the test reads back come
# through sqlite3, jq and awk in decimal: a ratio on a rounding boundary
# (106.05, CI's failure of stop 34) may round either way, so the printed value
# must be within 0.05 of the ratio (awk's median keeps 17 digits, not print's 6).
test_expect "the history shows each measured iteration's time per call, from the store" '
	jq -r .body d.log | sed -n 6p | jq -r ".messages[1].content" >prompt6 &&
	for k in 0 1; do
		res=$(sqlite3 atb.db "SELECT coalesce(result, 0) FROM iteration WHERE k = $k") &&
		line=$(grep "^  $k: " prompt6) &&
		if [ "$res" -gt 0 ]; then
			want=$(sqlite3 atb.db "SELECT candidate_median FROM seed_result sr JOIN result r
				ON r.job = sr.job WHERE r.id = $res ORDER BY candidate_median" |
				awk "{v[NR] = \$1} END {m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
				     if (m >= 1e6) printf \"%.3f ms\", m / 1e6; else printf \"%.3f us\", m / 1e3}") &&
			echo "$line" | grep -qE "; per call: candidate [0-9.]+ (us|ms), baseline [0-9.]+ (us|ms)" &&
			echo "$line" | grep -qF "candidate $want," &&
			floor=$(sqlite3 atb.db "SELECT stats FROM result WHERE id = $res" | jq .floor.floor_ns) &&
			cand=$(sqlite3 atb.db "SELECT candidate_median FROM seed_result sr JOIN result r
				ON r.job = sr.job WHERE r.id = $res ORDER BY candidate_median" |
				awk "{v[NR] = \$1} END {printf \"%.17g\\n\", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}") &&
			x=$(awk "BEGIN {printf \"%.1f\", $cand / $floor}") &&
			echo "$line" | grep -qE "; floor: memory [0-9.]+ (us|ms) \([0-9.]+ [kMGTP]?B at [0-9.]+ [kMGTP]?B/s\), compute [0-9.]+ (us|ms) \([0-9.]+ [kMGTP]?FLOP at [0-9.]+ [kMGTP]?FLOP/s\), (memory|compute)-bound; candidate at [0-9.]+x its floor" &&
			got=$(echo "$line" | sed -E "s/.*candidate at ([0-9.]+)x its floor.*/\1/") &&
			awk "BEGIN {d = $got - $cand / $floor; exit !(d <= 0.0500001 && d >= -0.0500001)}" ||
				{ echo "# iteration $k (result $res, want $want, floor $floor ns, ${x}x): $line"; exit 1; }
		else
			! echo "$line" | grep -q "per call" || { echo "# $line"; exit 1; }
		fi
	done &&
	grep "^  2: " prompt6 | grep -v -q "per call"
'

test_expect "a halted run does not resume; an llm run does not resume without a model" '
	RUN=$(cat run_id) &&
	expect_exit 2 "$ATB" run --resume "$RUN" --quiet &&
	expect_grep "proposed by a model" "$TRASH/err" &&
	n=$(wc -l <d.log) &&
	expect_exit 2 "$ATB" run --resume "$RUN" --model double --base-url "$URL" --quiet &&
	expect_grep "halted as an infrastructure defect (truncation)" "$TRASH/err" &&
	test "$(wc -l <d.log)" = "$n"
'

test_expect "usage: llm needs a model and a server; unknown proposers are named" '
	expect_exit 2 env -u ATB_LLM_MODEL -u ATB_LLM_BASE_URL "$ATB" run ./relu --proposer llm &&
	expect_grep "needs a model and a server" "$TRASH/err" &&
	expect_exit 2 "$ATB" run ./relu --proposer oracle &&
	expect_grep "random, llm" "$TRASH/err"
'

test_done
