#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# atb run --replay of a run of the knob proposer (--proposer llm), with a
# TEST DOUBLE (tests/cli/llm-double.py) as the model: iteration 1's four
# replies name a flag choice the task does not have (the harness builds
# only declared knobs), so it is a "proposal" iteration; the replay, with
# the double stopped, asks the same four requests (the prompts' history is
# the recorded run's, whatever the re-measured iteration 0 gave) and
# reproduces every stored proposal.  The task is the fixture relu-tiny (no
# knobs, one flag choice); iteration 0's timing outcome is this box's and
# is not asserted.
. "$(dirname "$0")/lib.sh"
command -v jq >/dev/null || skip_all "jq not installed"
command -v python3 >/dev/null || skip_all "python3 not installed"
command -v sqlite3 >/dev/null || skip_all "sqlite3 not installed"

cp -r "$ATB_SOURCE_DIR/tests/fixtures/task/relu-tiny" relu
python3 -c 'import json; json.dump([{"content": json.dumps({"knobs": {}, "cflags": "-O9"})}], open("script.json", "w"))'
llm_double
# one reader at a time, with a busy timeout: two sqlite3 shells opening the
# store at once can meet its WAL recovery and one gets "database is locked"
# (seen under ASan, where the cmp below ran them side by side)
iters() { sqlite3 -cmd ".timeout 10000" -json atb.db "SELECT k, knobs, outcome FROM iteration WHERE run = '$1' ORDER BY k"; }

test_expect "the recorded run: iteration 1's replies lie outside the space" '
	"$ATB" run ./relu --proposer llm --model double --base-url "$URL" --iterations 2 \
		--quiet --json >run.json &&
	RUN=$(jq -r .run run.json) && echo "$RUN" >run_id &&
	iters "$RUN" >it.json && cat it.json &&
	jq -e ".[1].outcome == \"proposal\" and .[1].knobs == \"{}\"" it.json &&
	test "$(wc -l <d.log)" = 4
'

test_expect "the replay asks no server and reproduces the proposals" '
	RUN=$(cat run_id) && kill $DOUBLE && wait $DOUBLE 2>/dev/null;
	"$ATB" run --replay "$RUN" --quiet --json >rep.json &&
	REP=$(jq -r .run rep.json) && jq -e ".replay_of == \"$RUN\" and .done == 2" rep.json &&
	iters "$RUN" | jq -c "[.[] | .knobs]" >orig.knobs && iters "$REP" | jq -c "[.[] | .knobs]" >rep.knobs &&
	[ -s orig.knobs ] && cmp orig.knobs rep.knobs &&
	iters "$REP" | jq -e ".[1].outcome == \"proposal\"" &&
	test "$(sqlite3 atb.db "SELECT count(*) FROM llm_call WHERE run = '\''$REP'\'' AND transport = '\''replay'\''")" = 4 &&
	test "$(wc -l <d.log)" = 4 &&
	"$ATB" audit verify >/dev/null && "$ATB" llm check >/dev/null
'


# A replay that does not reproduce its recorded run fails, naming the
# iteration (issue 14: the check the two tests above pass).  Planted by an SQL
# attack on a copy of the store: iteration 0's recorded knobs rewritten, the
# table's append-only triggers dropped for it and put back, so the store opens
# as usual and only the replay (and the audit chain) can tell.
cat >tamper.sh <<'SH'
run=$1 db=$2
sqlite3 "$db" "SELECT sql || ';' FROM sqlite_schema WHERE type = 'trigger' AND tbl_name = 'iteration'" >trig.sql
[ -s trig.sql ] || exit 1
{
	sqlite3 "$db" "SELECT 'DROP TRIGGER \"' || name || '\";' FROM sqlite_schema WHERE type = 'trigger' AND tbl_name = 'iteration'"
	echo "UPDATE iteration SET knobs = '{\"cflags\":\"-O1\"}' WHERE run = '$run' AND k = 0;"
	cat trig.sql
} | sqlite3 "$db"
test "$(sqlite3 "$db" "SELECT knobs FROM iteration WHERE run = '$run' AND k = 0")" = '{"cflags":"-O1"}'
SH

test_expect "a replay whose proposal differs from the recorded run fails, naming the iteration" '
	RUN=$(cat run_id) &&
	sqlite3 -cmd ".timeout 10000" atb.db "PRAGMA wal_checkpoint(TRUNCATE)" >/dev/null &&
	cp atb.db t.db && cp atb.db.audit.jsonl t.db.audit.jsonl && bash tamper.sh "$RUN" t.db &&
	expect_exit 1 "$ATB" --db t.db run --replay "$RUN" --quiet &&
	expect_grep "iteration 0 proposed" "$TRASH/err" &&
	expect_grep "the recorded run {\"cflags\":\"-O1\"}" "$TRASH/err" &&
	expect_exit 1 "$ATB" --db t.db audit verify
'

test_done
