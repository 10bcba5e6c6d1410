#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# A store survives SIGKILL at every fsync/fdatasync (issue 12): `atb db init`
# and an ingest are killed at call 1, 2, 3 ... (the test double
# test-doubles/atb-test-kill-at-sync.so, LD_PRELOADed) until a run makes
# fewer calls than the index; after each kill the store is either absent
# (and a fresh init works) or complete: `db check` and `audit verify` pass.
. "$(dirname "$0")/lib.sh"

"$ATB" protocol verify >/dev/null 2>&1 || skip_all "atb protocol verify fails: no frozen protocol to sync"
command -v sqlite3 >/dev/null || skip_all "the sqlite3 shell is not installed"
# one protocol row and one audit entry per frozen protocol
P=$(grep -c '^  - version:' "$ATB_HOME/protocol/protocol.lock")
SHIM=$ATB_BUILD_DIR/test-doubles/atb-test-kill-at-sync.so
[ -f "$SHIM" ] || skip_all "no fault-injection shim at '$SHIM'"
ldd "$ATB" 2>/dev/null | grep -q libasan &&
	skip_all "sanitizer build: ASan must be the first preloaded library"
FX=$ATB_SOURCE_DIR/tests/fixtures/store

# killed N CMD...: run CMD with SIGKILL at its Nth fsync/fdatasync; sets rc.
killed() {
	local n=$1; shift
	ATB_TEST_KILL_AT_SYNC=$n LD_PRELOAD=$SHIM "$@" >/dev/null 2>&1 && rc=0 || rc=$?
}

# usable DB: db check and audit verify both pass and init has nothing to repair.
usable() {
	expect_exit 0 "$ATB" --db "$1" db check &&
	expect_exit 0 "$ATB" --db "$1" audit verify
}

test_expect "the shim kills at the index it is given (and a run it spares counts its calls)" '
	killed 1 "$ATB" --db one.db db init && test "$rc" = 137 &&
	ATB_TEST_KILL_COUNT_FILE=$TRASH/count LD_PRELOAD=$SHIM "$ATB" --db full.db db init >/dev/null &&
	test "$(cat count)" -ge 6
'

test_expect "db init killed at every fsync leaves no store or a complete one" '
	n=1
	while :; do
		rm -rf k && mkdir k
		killed $n "$ATB" --db k/s.db db init
		[ "$rc" = 0 ] && break
		[ "$rc" = 137 ] || { echo "init at $n: exit $rc, not the kill"; false; }
		if [ -e k/s.db ]; then
			usable k/s.db || { echo "after a kill at sync $n"; false; }
		else
			expect_exit 1 "$ATB" --db k/s.db db check &&
			expect_grep "does not exist" "$TRASH/err" &&
			! test -e k/s.db.audit.jsonl
		fi
		expect_exit 0 "$ATB" --db k/s.db db init || { echo "re-init after sync $n"; false; }
		usable k/s.db || { echo "re-init after sync $n"; false; }
		expect_exit 0 "$ATB" --db k/s.db --json db info &&
		expect_grep "\"frozen_protocol\": $P" "$TRASH/out" &&
		expect_grep "\"audit\": $P" "$TRASH/out" &&
		! test -e k/s.db.creating
		n=$((n + 1))
	done
	echo "init makes $((n - 1)) syncs" && test $n -gt 6
'

# Which process adds which protocol is a race; that each is added once is not.
# A process may wait past the 1 s busy timeout on a loaded box: "locked" is
# an answer (a last init then adds what it left), a second store or chain is not.
test_expect "concurrent inits of one new store make one store and one chain" '
	for i in 1 2 3 4 5; do "$ATB" --db c.db db init >c$i.out 2>&1 & done
	wait
	for i in 1 2 3 4 5; do
		grep -q "ready: schema" c$i.out || grep -q "is locked by another process" c$i.out ||
			{ cat c$i.out; false; }
	done
	expect_exit 0 "$ATB" --db c.db db init &&
	usable c.db && ! test -e c.db.creating &&
	expect_exit 0 "$ATB" --db c.db --json db info &&
	expect_grep "\"frozen_protocol\": $P" "$TRASH/out" &&
	expect_grep "\"audit\": $P" "$TRASH/out"
'

test_expect "the first ingest killed at every fsync leaves the store and chain consistent" '
	"$ATB" --db base.db db init >/dev/null &&
	n=1
	while :; do
		rm -rf i && mkdir i && cp base.db base.db.audit.jsonl i/
		killed $n "$ATB" --db i/base.db db ingest-json "$FX/ok-kernel.json"
		[ "$rc" = 0 ] && break
		[ "$rc" = 137 ] || { echo "ingest at $n: exit $rc, not the kill"; false; }
		usable i/base.db || { echo "after a kill at sync $n"; false; }
		expect_exit 0 "$ATB" --db i/base.db db ingest-json "$FX/ok-kernel.json" &&
		usable i/base.db &&
		expect_exit 0 "$ATB" --db i/base.db --json db info || { echo "after sync $n"; false; }
		r=$(sed -n "s/.*\"result\": \([0-9]*\).*/\1/p" "$TRASH/out")
		test "$r" -le 2 || { echo "kill at $n: $r results"; false; }
		n=$((n + 1))
	done
	echo "ingest makes $((n - 1)) syncs" && test $n -gt 1
'

test_expect "a hot journal left by a killed writer is rolled back by init, named by check" '
	killed 4 sqlite3 h.db "PRAGMA application_id = 1635017265; CREATE TABLE a(x);" &&
	test "$rc" = 137 && test -e h.db-journal &&
	expect_exit 3 "$ATB" --db h.db db check &&
	expect_grep "left in the middle of a write by a crash" "$TRASH/err" &&
	expect_exit 0 "$ATB" --db h.db db init &&
	usable h.db && ! test -e h.db-journal
'

test_expect "a mirror without its store is never written over by a new chain" '
	"$ATB" --db m.db db init >/dev/null && rm m.db && cp m.db.audit.jsonl m.orig &&
	expect_exit 1 "$ATB" --db m.db db init &&
	expect_grep "audit mirror '"'"'m.db.audit.jsonl'"'"' exists but its store" "$TRASH/err" &&
	cmp m.db.audit.jsonl m.orig && ! test -e m.db && ! test -e m.db.creating
'

test_done
