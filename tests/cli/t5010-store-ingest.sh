#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# atb db ingest-json: admitted, quarantined and refused results (each
# fixture in tests/fixtures/store with the status it must produce), bad JSON
# with file:line:column, and atb db check on the result.
. "$(dirname "$0")/lib.sh"

"$ATB" protocol verify >/dev/null 2>&1 || skip_all "atb protocol verify fails: no frozen protocol to sync"
FX=$ATB_SOURCE_DIR/tests/fixtures/store
export ATB_DB=$TRASH/r.db
"$ATB" db init >/dev/null || exit 1

test_expect "a paired kernel result is admitted" '
	expect_exit 0 "$ATB" db ingest-json "$FX/ok-kernel.json" &&
	expect_grep "admitted, speedup 1.5x over 10 paired seeds" "$TRASH/out"
'

test_expect "a paired engine result is admitted (json output)" '
	expect_exit 0 "$ATB" db ingest-json "$FX/ok-engine.json" --json &&
	expect_grep "\"status\": \"ok\"" "$TRASH/out" &&
	expect_grep "\"quarantined\": false" "$TRASH/out"
'

test_expect "a 61000x result is quarantined, never admitted" '
	expect_exit 0 "$ATB" db ingest-json "$FX/anomaly-quarantined.json" &&
	expect_grep "quarantined (anomaly breaker" "$TRASH/out"
'

for case in cv-over-cap:cv_over_cap paired-seeds-engine:paired_seeds \
	    paired-seeds-kernel:paired_seeds bad-time:bad_time duplicate-seed:duplicate_seed \
	    unfrozen-protocol:unfrozen_protocol no-box:no_box; do
	file=${case%%:*} rule=${case##*:}
	test_expect "rejected-$file.json is refused by atb-rule:$rule and recorded" '
		expect_exit 2 "$ATB" db ingest-json "$FX/rejected-'"$file"'.json" &&
		expect_grep "atb-rule:'"$rule"':" "$TRASH/err" &&
		expect_grep "stored as rejection" "$TRASH/err"
	'
done

test_expect "a refused ingest in json names its status" '
	expect_exit 2 "$ATB" --json db ingest-json "$FX/rejected-cv-over-cap.json" &&
	expect_grep "\"status\": \"rejected:cv_over_cap\"" "$TRASH/out"
'

test_expect "malformed json is refused with file:line:column" '
	expect_exit 2 "$ATB" db ingest-json "$FX/bad-syntax.json" &&
	expect_grep "bad-syntax.json:4:" "$TRASH/err"
'

test_expect "a wrong field type names its path" '
	expect_exit 2 "$ATB" db ingest-json "$FX/bad-field-type.json" &&
	expect_grep "samples[2].value: expected a number" "$TRASH/err"
'

test_expect "results, rejections and audit entries were counted" '
	expect_exit 0 "$ATB" db info --json &&
	expect_grep "\"result\": 3" "$TRASH/out" &&
	expect_grep "\"rejection\": 8" "$TRASH/out"
'

test_expect "db check and audit verify pass on what the validator let in" '
	expect_exit 0 "$ATB" db check &&
	expect_exit 0 "$ATB" audit verify
'

test_done
