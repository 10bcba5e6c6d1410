#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# atb protocol verify / digest / show on the shipped protocol, and verify
# refusing a protocol file edited without a new version (a temp copy, --home).
. "$(dirname "$0")/lib.sh"

# the current version, from the shipped lock (every frozen one must verify)
cur=$(sed -n "s/^current: //p" "$ATB_HOME/protocol/protocol.lock")
[ -n "$cur" ] || { echo "no current version in the lock"; exit 1; }

test_expect "verify passes on the shipped protocol" '
	expect_exit 0 "$ATB" protocol verify &&
	expect_grep "ok  version 1" "$TRASH/out" &&
	expect_grep "ok  version 2" "$TRASH/out" &&
	expect_grep "ok  version 3" "$TRASH/out" &&
	for v in $(seq 1 "$cur"); do expect_grep "ok  version $v " "$TRASH/out" || return 1; done &&
	grep "ok  version $cur " "$TRASH/out" | grep -qF "(current)"
'

test_expect "verify --json lists every version" '
	expect_exit 0 "$ATB" protocol verify --json &&
	expect_grep "\"current\": $cur" "$TRASH/out" &&
	expect_grep "\"ok\": true" "$TRASH/out"
'

test_expect "digest of the current protocol equals the digest of the current version'\''s file" '
	expect_exit 0 "$ATB" protocol digest && d=$(cut -d" " -f1 "$TRASH/out") &&
	expect_exit 0 "$ATB" protocol digest "$ATB_HOME/protocol/v$cur.yaml" &&
	file=$(cut -d" " -f1 "$TRASH/out") &&
	[ ${#d} = 64 ] && [ "$d" = "$file" ] &&
	expect_grep "$d" "$ATB_HOME/protocol/protocol.lock"
'

test_expect "digest ignores comments and key order" '
	expect_exit 0 "$ATB" protocol digest "$ATB_SOURCE_DIR/tests/fixtures/protocol/good-reordered.yaml" &&
	a=$(cut -d" " -f1 "$TRASH/out") &&
	expect_exit 0 "$ATB" protocol digest "$ATB_HOME/protocol/v1.yaml" &&
	[ "$a" = "$(cut -d" " -f1 "$TRASH/out")" ] &&
	expect_grep "$a" "$ATB_HOME/protocol/protocol.lock"
'

test_expect "show prints sections, version and digest" '
	expect_exit 0 "$ATB" protocol show &&
	expect_grep "protocol $cur: " "$TRASH/out" &&
	expect_grep "digest   " "$TRASH/out" &&
	expect_grep "stats.cv_cap" "$TRASH/out" &&
	expect_grep "gates.anomaly_breaker.factor" "$TRASH/out" &&
	expect_grep "gates.throttle.max_share" "$TRASH/out" &&
	expect_grep "correctness.reduction_tolerance.growth" "$TRASH/out"
'

test_expect "show --json carries the canonical protocol (global --json too)" '
	expect_exit 0 "$ATB" --json protocol show --version 1 &&
	expect_grep "\"version\": 1" "$TRASH/out" &&
	expect_grep "\"cv_cap\": 0.05" "$TRASH/out" &&
	expect_grep "\"digest\": " "$TRASH/out"
'

test_expect "show --version of an unfrozen version exits 2" '
	next=$((cur + 1)) &&
	expect_exit 2 "$ATB" protocol show --version $next &&
	expect_grep "protocol version $next is not frozen" "$TRASH/err"
'

test_expect "verify fails with exit 2 after an edit without a new version" '
	mkdir home && cp -r "$ATB_HOME/protocol" home/ &&
	old=$("$ATB" protocol digest home/protocol/v1.yaml | cut -d" " -f1) &&
	sed -i "s/cv_cap: 0.05/cv_cap: 0.06/" home/protocol/v1.yaml &&
	new=$("$ATB" protocol digest home/protocol/v1.yaml | cut -d" " -f1) &&
	expect_exit 2 "$ATB" protocol verify --home home &&
	expect_grep "v1.yaml" "$TRASH/err" &&
	expect_grep "changed without a new version" "$TRASH/err" &&
	expect_grep "$old" "$TRASH/err" &&
	expect_grep "$new" "$TRASH/err" &&
	expect_exit 2 "$ATB" protocol show --home home --version 1
'

test_expect "a comment-only edit still verifies" '
	mkdir home2 && cp -r "$ATB_HOME/protocol" home2/ &&
	rm -f home2/protocol/manifest &&  # the trusted files are not copied (t0003)
	printf "# a trailing comment\n" >>home2/protocol/v1.yaml &&
	expect_exit 0 "$ATB" protocol verify --home home2 &&
	expect_grep "manifest  none: trusted files not checked" "$TRASH/out"
'

test_expect "usage errors exit 2; --help documents every subcommand" '
	expect_exit 2 "$ATB" protocol &&
	expect_exit 2 "$ATB" protocol frobnicate &&
	expect_exit 2 "$ATB" protocol show --bogus &&
	expect_exit 0 "$ATB" protocol --help &&
	for w in show digest verify freeze --home --json --version; do
		expect_grep "$w" "$TRASH/out" || exit 1
	done
'

test_done
