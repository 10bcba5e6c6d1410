#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The model-call audit's store rules, each against an SQL attack from the
# sqlite3 shell: calls are append-only and numbered in order, a truncated
# call cannot be stored as a good one, a failed one names its error, a
# halted run takes no call and keeps its halt, and an edit made after
# dropping the triggers is found by atb llm check (row hash and audit entry).
# The calls come from a TEST DOUBLE (tests/cli/llm-double.py) scripted to
# answer "length", so a run halts without a model server.
. "$(dirname "$0")/lib.sh"
command -v jq >/dev/null || skip_all "jq not installed"
command -v sqlite3 >/dev/null || skip_all "sqlite3 not installed"

echo '[{"content": "cut", "finish_reason": "length"}]' >script.json
llm_double
export ATB_LLM_BASE_URL=$URL ATB_LLM_MODEL=m
echo hi >p.txt
"$ATB" --db t.db llm call --prompt-file p.txt --run ok3 --repeat 3 >/dev/null 2>&1
"$ATB" --db t.db llm call --prompt-file p.txt --run cut --repeat 4 >/dev/null 2>&1
# refused RULE SQL: the statement fails with atb-rule:RULE
refused() {
	! sqlite3 t.db "$2" 2>err && grep -q "atb-rule:$1" err || { echo "not refused: $2"; cat err; return 1; }
}
ROW="INSERT INTO llm_call (run, n, transport, request_hash, request, prompt, model, params,
	outcome, attempts, latency_s, row_hash, created, finish_reason, content, error) SELECT"
H=$(printf '%064d' 0)

test_expect "the set-up stored 7 calls and halted run cut" '
	test "$(sqlite3 t.db "SELECT count(*) FROM llm_call")" = 7 &&
	test "$(sqlite3 t.db "SELECT run FROM llm_halt")" = cut
'

test_expect "llm_call_rows_are_never_updated_or_deleted" '
	refused append_only "UPDATE llm_call SET outcome = '\''ok'\'', finish_reason = NULL WHERE id = 1" &&
	refused append_only "DELETE FROM llm_call WHERE run = '\''cut'\''"
'

test_expect "truncated_call_cannot_enter_db_as_ok" '
	refused malformed "$ROW '\''ok3'\'', 3, '\''http'\'', '\''$H'\'', '\''{}'\'', '\''p'\'', '\''m'\'', '\''{}'\'',
		'\''ok'\'', 1, 0.1, '\''$H'\'', '\''now'\'', '\''length'\'', '\''x'\'', NULL" &&
	grep -q "truncated exactly when its finish_reason is length" err
'

test_expect "failed_call_without_error_cannot_enter_db" '
	refused malformed "$ROW '\''ok3'\'', 3, '\''http'\'', '\''$H'\'', '\''{}'\'', '\''p'\'', '\''m'\'', '\''{}'\'',
		'\''failed'\'', 1, 0.1, '\''$H'\'', '\''now'\'', NULL, NULL, NULL"
'

test_expect "call_out_of_order_cannot_enter_db" '
	refused malformed "$ROW '\''ok3'\'', 7, '\''http'\'', '\''$H'\'', '\''{}'\'', '\''p'\'', '\''m'\'', '\''{}'\'',
		'\''truncated'\'', 1, 0.1, '\''$H'\'', '\''now'\'', '\''length'\'', '\''x'\'', NULL" &&
	grep -q "recorded in order" err
'

test_expect "call_of_halted_run_cannot_enter_db; the halt stays" '
	refused infrastructure_defect "$ROW '\''cut'\'', 4, '\''http'\'', '\''$H'\'', '\''{}'\'', '\''p'\'', '\''m'\'', '\''{}'\'',
		'\''ok'\'', 1, 0.1, '\''$H'\'', '\''now'\'', '\''stop'\'', '\''x'\'', NULL" &&
	refused append_only "DELETE FROM llm_halt" &&
	refused append_only "UPDATE llm_halt SET reason = '\''empty'\''" &&
	refused append_only "INSERT OR REPLACE INTO llm_halt VALUES ('\''cut'\'', '\''empty'\'', 4, '\''{}'\'', '\''now'\'')"
'

test_expect "db info counts the model calls and db check re-hashes them" '
	expect_exit 0 "$ATB" --db t.db db info &&
	expect_grep "llm_call         7" "$TRASH/out" &&
	expect_exit 0 "$ATB" --db t.db db info --json &&
	jq -e ".rows.llm_call == 7" "$TRASH/out" >/dev/null &&
	expect_exit 0 "$ATB" --db t.db db check &&
	expect_grep "every model call re-hashed" "$TRASH/out"
'

test_expect "an edit behind the triggers is found by atb llm check and db check" '
	"$ATB" --db t.db llm check >/dev/null &&
	sqlite3 t.db "DROP TRIGGER llm_call_no_update; UPDATE llm_call SET finish_reason = '\''stop'\'', outcome = '\''ok'\'' WHERE id = 5" 2>err ||
		{ cat err; false; } &&
	expect_exit 1 "$ATB" --db t.db llm check &&
	expect_grep "model call 5 was changed" "$TRASH/err" &&
	expect_exit 1 "$ATB" --db t.db db check &&
	expect_grep "atb-rule:llm_call: model call 5 was changed" "$TRASH/out" &&
	expect_exit 1 "$ATB" --db t.db db check --json &&
	jq -e ".ok == false and ([.findings[] | select(.rule == \"llm_call\")] | length) == 1" \
		"$TRASH/out" >/dev/null
'

test_done
