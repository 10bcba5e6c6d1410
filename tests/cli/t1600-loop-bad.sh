#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# atb run and atb report refuse bad input with exact messages and exit 2,
# before anything is written; --plan shows that the same seed gives the same
# proposals.  (Real runs: t1610-loop-resume.sh, t8000-report-json-csv.sh.)
. "$(dirname "$0")/lib.sh"

test_expect "an unknown task is refused and no store is created" '
	expect_exit 2 "$ATB" run no-such-task --iterations 2 &&
	expect_grep "atb: no task named '"'"'no-such-task'"'"' in '"'"'$ATB_HOME/tasks'"'"'" "$TRASH/err" &&
	test ! -e atb.db
'

while IFS='|' read -r args msg; do
	test_expect "run $args is refused" '
		expect_exit 2 "$ATB" run '"$args"' &&
		expect_grep "'"$msg"'" "$TRASH/err" &&
		test ! -e atb.db
	'
done <<'CASES'
relu --iterations 0|atb run: bad --iterations '0': expected an integer from 1 to 100000
relu --iterations abc|atb run: bad --iterations 'abc': expected an integer from 1 to 100000
relu --iterations 100001|atb run: bad --iterations '100001': expected an integer from 1 to 100000
relu --seed -1|atb run: bad --seed '-1': expected an integer from 0 to 9223372036854775807
relu --iterations|atb run: option '--iterations' needs a value
relu --frobnicate|atb run: unknown option '--frobnicate'
|atb run: missing TASK (or --resume RUN_ID, --replay RUN_ID)
relu --resume abc|atb run: give TASK or --resume RUN_ID, not both
CASES

test_expect "an unknown proposer is refused" '
	expect_exit 2 "$ATB" run relu --proposer grid --iterations 1 &&
	expect_grep "atb: unknown proposer '"'"'grid'"'"'; the proposers are: random" "$TRASH/err"
'

test_expect "fewer paired seeds than the protocol asks are refused" '
	expect_exit 2 "$ATB" run relu --seeds 3 --iterations 1 &&
	expect_grep "atb: 3 paired seeds is below the protocol'"'"'s stats.min_paired_seeds (8)" "$TRASH/err"
'

test_expect "resume of an unknown run id is refused" '
	"$ATB" db init >/dev/null &&
	expect_exit 2 "$ATB" run --resume nope &&
	expect_grep "atb: no run '"'"'nope'"'"' in store '"'"'atb.db'"'"'" "$TRASH/err"
'

test_expect "report of an unknown run id is refused" '
	expect_exit 2 "$ATB" report nope &&
	expect_grep "atb: no run '"'"'nope'"'"' in store '"'"'atb.db'"'"'" "$TRASH/err" &&
	expect_exit 2 "$ATB" report --last &&
	expect_grep "atb: no runs in store '"'"'atb.db'"'"'" "$TRASH/err" &&
	expect_exit 2 "$ATB" report &&
	expect_grep "atb report: give exactly one of RUN_ID, --last or --list" "$TRASH/err" &&
	expect_exit 2 "$ATB" report --list --csv x.csv &&
	expect_grep "atb report: --csv goes with RUN_ID or --last, not --list" "$TRASH/err"
'

test_expect "report --list of a store without runs" '
	"$ATB" report --list >out &&
	expect_grep "(no runs yet" out &&
	"$ATB" report --list --json >out &&
	test "$(tr -d " \n" <out)" = "[]"
'

test_expect "same seed, same proposals; another seed, others" '
	"$ATB" run sgemm --plan --iterations 12 --seed 7 >a &&
	"$ATB" run sgemm --plan --iterations 12 --seed 7 >b &&
	"$ATB" run sgemm --plan --iterations 12 --seed 8 >c &&
	cmp a b && ! cmp -s a c && test "$(wc -l <a)" -eq 12 &&
	"$ATB" --json run sgemm --plan --iterations 2 --seed 7 >j &&
	expect_grep "\"cflags\"" j
'

test_expect "help documents every option" '
	"$ATB" run --help >h &&
	for o in --proposer --iterations --seed --seeds --naive --no-naive --resume --replay llm-code \
		--plan --runs-dir --runner --quiet --json usable quarantined; do
		expect_grep "$o" h || exit 1
	done &&
	"$ATB" report --help >h &&
	for o in --last --list --csv --json honest naive gate; do
		expect_grep "$o" h || exit 1
	done
'

test_done
