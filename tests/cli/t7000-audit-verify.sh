#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# atb audit verify / show: a clean chain, then the first bad entry named
# after an edit of the mirror, an edit of the store, and a truncation.
. "$(dirname "$0")/lib.sh"

"$ATB" protocol verify >/dev/null 2>&1 || skip_all "atb protocol verify fails: no frozen protocol to sync"
command -v sqlite3 >/dev/null || skip_all "the sqlite3 shell is not installed"
FX=$ATB_SOURCE_DIR/tests/fixtures/store
export ATB_DB=$TRASH/v.db
"$ATB" db init >/dev/null || exit 1
"$ATB" db ingest-json "$FX/ok-kernel.json" >/dev/null || exit 1
"$ATB" db ingest-json "$FX/rejected-cv-over-cap.json" >/dev/null 2>&1
"$ATB" db ingest-json "$FX/ok-engine.json" >/dev/null || exit 1
cp v.db.audit.jsonl mirror.orig
# One entry per frozen protocol, then the box, the kernel's ingest, the
# rejection and the engine's ingest.
P=$(grep -c '^  - version:' "$ATB_HOME/protocol/protocol.lock")
T=$((P + 4)) KERN=$((P + 2)) REJ=$((P + 3))

test_expect "audit --help documents the chain" '
	expect_exit 0 "$ATB" audit --help &&
	expect_grep "prev_hash" "$TRASH/out" && expect_grep "verify" "$TRASH/out" &&
	expect_grep "--since" "$TRASH/out"
'

test_expect "a clean chain verifies" '
	expect_exit 0 "$ATB" audit verify &&
	expect_grep "audit chain ok: $T entries in the store, $T in the mirror" "$TRASH/out"
'

test_expect "audit show lists entries after --since" '
	expect_exit 0 "$ATB" audit show --since $KERN &&
	test "$(wc -l <"$TRASH/out")" = 2 &&
	expect_grep "$REJ " "$TRASH/out" && expect_grep " rejection " "$TRASH/out"
'

test_expect "audit show --json gives parsed payloads" '
	expect_exit 0 "$ATB" --json audit show &&
	expect_grep "\"kind\": \"protocol.frozen\"" "$TRASH/out"
'

test_expect "an edited mirror entry is named with its seq and copy" '
	sed -i "${KERN}s/\"task\":\"relu\"/\"task\":\"RELU\"/" v.db.audit.jsonl &&
	expect_exit 1 "$ATB" audit verify &&
	expect_grep "audit entry $KERN (mirror): hash does not match" "$TRASH/err" &&
	expect_exit 1 "$ATB" audit verify --json &&
	expect_grep "\"copy\": \"mirror\"" "$TRASH/out"
'

test_expect "a truncated mirror is found" '
	head -n 2 mirror.orig >v.db.audit.jsonl &&
	expect_exit 1 "$ATB" audit verify &&
	expect_grep "audit entry 3 (mirror)" "$TRASH/err"
'

test_expect "reordered mirror entries are found" '
	{ sed -n 1,2p mirror.orig; sed -n 4p mirror.orig; sed -n 3p mirror.orig; sed -n 5p mirror.orig; } >v.db.audit.jsonl &&
	expect_exit 1 "$ATB" audit verify &&
	expect_grep "audit entry 3 (mirror)" "$TRASH/err"
'

test_expect "an edited store entry is found" '
	cp mirror.orig v.db.audit.jsonl &&
	expect_exit 0 "$ATB" audit verify &&
	sqlite3 v.db "DROP TRIGGER audit_no_update; UPDATE audit SET payload = replace(payload, '"'"'relu'"'"', '"'"'RELU'"'"') WHERE seq = $KERN;" &&
	expect_exit 1 "$ATB" audit verify &&
	expect_grep "audit entry $KERN (db): hash does not match" "$TRASH/err"
'

test_done
