#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Bad protocol files: the error line names file:line:column and the field.
. "$(dirname "$0")/lib.sh"

FIX="$ATB_SOURCE_DIR/tests/fixtures/protocol"

test_expect "an out-of-range value names file:line:column and field" '
	expect_exit 2 "$ATB" protocol freeze "$FIX/bad-out-of-range.yaml" --home "$TRASH" &&
	expect_grep "atb: $FIX/bad-out-of-range.yaml:8:11: stats.cv_cap: expected a number in (0, 1), got '"'"'1.5'"'"'" "$TRASH/err"
'

test_expect "an unknown key names the key" '
	expect_exit 2 "$ATB" protocol freeze "$FIX/bad-unknown-key.yaml" --home "$TRASH" &&
	expect_grep "bad-unknown-key.yaml:8:3: stats.cv_capp: unknown key" "$TRASH/err"
'

test_expect "malformed yaml is one error line, nothing from libfyaml" '
	expect_exit 2 "$ATB" protocol freeze "$FIX/bad-malformed.yaml" --home "$TRASH" &&
	expect_grep "bad-malformed.yaml:21:4: malformed yaml" "$TRASH/err" &&
	[ "$(wc -l <"$TRASH/err")" = 1 ]
'

test_expect "--json reports the error as an object too" '
	expect_exit 2 "$ATB" protocol freeze "$FIX/bad-trials.yaml" --home "$TRASH" --json &&
	expect_grep "\"field\": \"timing.trials.max\"" "$TRASH/out" &&
	expect_grep "\"status\": \"schema\"" "$TRASH/out" &&
	expect_grep "\"line\": 21" "$TRASH/out"
'

# The current version and the next: a candidate is the current file with one
# value changed (it has every key the current version requires).
cur=$(sed -n 's/^current: \([0-9]*\)$/\1/p' "$ATB_HOME/protocol/protocol.lock")
next=$((cur + 1))
# the keys the next version requires that the current has not (none for v8 yet; v6 added client_lag)
NEW_KEYS='s/^\(  max_dispatch_lag_ms: .*\)$/\1\n  client_lag: {max_share: 0.02, max_arm_difference: 0.01}/'
grep -q '^  client_lag:' "$ATB_HOME/protocol/v$cur.yaml" && NEW_KEYS=

test_expect "freeze adds a new version and keeps the old one" '
	mkdir home && cp -r "$ATB_HOME/protocol" home/ &&
	sed "s/^version: $cur/version: $next/; s/cv_cap: 0.05/cv_cap: 0.04/; $NEW_KEYS" \
		"$ATB_HOME/protocol/v$cur.yaml" >cand.yaml &&
	expect_exit 0 "$ATB" protocol freeze cand.yaml --home home &&
	expect_grep "as protocol version $next" "$TRASH/out" &&
	[ -f home/protocol/v$next.yaml ] &&
	expect_exit 0 "$ATB" protocol verify --home home &&
	for v in $(seq 1 $next); do expect_grep "ok  version $v" "$TRASH/out" || return 1; done &&
	expect_exit 0 "$ATB" protocol show --home home --version 1 --json &&
	expect_grep "\"cv_cap\": 0.05" "$TRASH/out" &&
	expect_exit 0 "$ATB" protocol show --home home --json &&
	expect_grep "\"cv_cap\": 0.04" "$TRASH/out"
'

test_expect "freeze refuses a version that is not current + 1" '
	mkdir home3 && cp -r "$ATB_HOME/protocol" home3/ &&
	sed "s/^version: $cur/version: $((next + 1))/; s/cv_cap: 0.05/cv_cap: 0.04/; $NEW_KEYS" \
		"$ATB_HOME/protocol/v$cur.yaml" >c5.yaml &&
	expect_exit 2 "$ATB" protocol freeze c5.yaml --home home3 &&
	expect_grep "the next version is $next" "$TRASH/err" &&
	[ ! -f home3/protocol/v$((next + 1)).yaml ] && [ ! -f home3/protocol/v$next.yaml ]
'

test_done
