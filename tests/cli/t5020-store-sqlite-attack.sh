#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The validator is the schema: attacks through the sqlite3 shell are refused
# with the rule id, and rows that got in with a trigger dropped are found by
# atb db check.
. "$(dirname "$0")/lib.sh"

"$ATB" protocol verify >/dev/null 2>&1 || skip_all "atb protocol verify fails: no frozen protocol to sync"
command -v sqlite3 >/dev/null || skip_all "the sqlite3 shell is not installed"
FX=$ATB_SOURCE_DIR/tests/fixtures/store
export ATB_DB=$TRASH/a.db
"$ATB" db init >/dev/null && "$ATB" db ingest-json "$FX/ok-kernel.json" >/dev/null || exit 1

test_expect "sqlite3 cannot update a result" '
	! sqlite3 a.db "UPDATE result SET speedup = 9.0" 2>err.txt &&
	expect_grep "atb-rule:append_only:" err.txt
'

test_expect "sqlite3 cannot delete samples" '
	! sqlite3 a.db "DELETE FROM sample" 2>err.txt &&
	expect_grep "atb-rule:append_only:" err.txt
'

test_expect "sqlite3 cannot add a job under an unfrozen protocol" '
	! sqlite3 a.db "INSERT INTO job (uuid, kind, task, candidate, unit, protocol_digest, box_fingerprint, created) SELECT '"'"'evil'"'"', '"'"'kernel'"'"', '"'"'t'"'"', '"'"'c'"'"', unit, '"'"'00'"'"' || substr(protocol_digest, 3), box_fingerprint, '"'"'now'"'"' FROM job" 2>err.txt &&
	expect_grep "atb-rule:unfrozen_protocol:" err.txt
'

test_expect "sqlite3 cannot admit a 61000x result" '
	! sqlite3 a.db "INSERT INTO result (job, kind, metric, baseline_job, n_seeds, speedup, ci_low, ci_high, cv, status, stats, protocol_digest, box_fingerprint, created) SELECT 1, kind, metric, 1, n_seeds, 61000, 60000, 62000, cv, '"'"'admitted'"'"', stats, protocol_digest, box_fingerprint, created FROM result" 2>err.txt &&
	expect_grep "atb-rule:" err.txt
'

test_expect "sqlite3 cannot add a sample to a job whose result is stored" '
	! sqlite3 a.db "INSERT INTO sample SELECT job, arm, seed, 999, value FROM sample LIMIT 1" 2>err.txt &&
	expect_grep "result is stored; its samples are final" err.txt &&
	test "$(sqlite3 a.db "SELECT count(*) FROM sample WHERE trial = 999")" = 0
'

test_expect "a sample cannot name a box or protocol of its own" '
	! sqlite3 a.db "INSERT INTO sample (job, arm, seed, trial, value, box_fingerprint) VALUES (1, '"'"'baseline'"'"', 1, 999, 1.0, '"'"'x'"'"')" 2>err.txt &&
	expect_grep "has no column named box_fingerprint" err.txt
'

test_expect "db check is clean before tampering" '
	expect_exit 0 "$ATB" db check
'

test_expect "db check finds a row changed with its trigger dropped" '
	sqlite3 a.db "DROP TRIGGER result_no_update; UPDATE result SET cv = 0.3;" &&
	expect_exit 1 "$ATB" db check &&
	expect_grep "atb-rule:cv_over_cap: result 1: cv 0.3" "$TRASH/out" &&
	expect_grep "trigger '"'"'result_no_update'"'"' is missing" "$TRASH/out"
'

test_expect "db check --json lists findings" '
	expect_exit 1 "$ATB" db check --json &&
	expect_grep "\"rule\": \"cv_over_cap\"" "$TRASH/out" &&
	expect_grep "\"ok\": false" "$TRASH/out"
'

test_expect "samples stored before their job keep the job out, and db check names them" '
	sqlite3 a.db "INSERT INTO sample VALUES ((SELECT max(id) + 1 FROM job), '"'"'baseline'"'"', 1, 0, 1.0)" &&
	! sqlite3 a.db "INSERT INTO job (uuid, kind, task, candidate, unit, protocol_digest, box_fingerprint, created) SELECT '"'"'late'"'"', kind, task, candidate, unit, protocol_digest, box_fingerprint, created FROM job" 2>err.txt &&
	expect_grep "atb-rule:malformed: samples were stored under this job id before the job" err.txt &&
	expect_exit 1 "$ATB" db check &&
	expect_grep "sample of missing job 2" "$TRASH/out"
'

test_done
