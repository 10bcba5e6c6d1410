#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# atb db init / info: creating the store, re-running init, and refusing
# files that are not atb stores (or are newer) without writing to them.
. "$(dirname "$0")/lib.sh"

"$ATB" protocol verify >/dev/null 2>&1 || skip_all "atb protocol verify fails: no frozen protocol to sync"
command -v sqlite3 >/dev/null || skip_all "the sqlite3 shell is not installed"
# how many versions are frozen, and the current one: from the shipped lock
cur=$(sed -n "s/^current: //p" "$ATB_HOME/protocol/protocol.lock")
nfrozen=$(grep -c "^  - version: " "$ATB_HOME/protocol/protocol.lock")

test_expect "db --help documents every subcommand" '
	expect_exit 0 "$ATB" db --help &&
	for w in init info check ingest-json atb-rule; do expect_grep "$w" "$TRASH/out"; done
'

test_expect "db init creates the store with the frozen protocols" '
	expect_exit 0 "$ATB" --db s.db db init &&
	expect_grep "schema 4" "$TRASH/out" &&
	expect_grep "$nfrozen frozen protocols ($nfrozen new), current v$cur" "$TRASH/out" &&
	test -f s.db && test -f s.db.audit.jsonl
'

test_expect "db init again adds nothing" '
	expect_exit 0 "$ATB" --db s.db db init &&
	expect_grep "(0 new)" "$TRASH/out"
'

test_expect "application_id and user_version are set" '
	test "$(sqlite3 s.db "PRAGMA application_id")" = 1635017265 &&
	test "$(sqlite3 s.db "PRAGMA user_version")" = 4 &&
	test "$(sqlite3 s.db "PRAGMA journal_mode")" = wal
'

test_expect "db info --json reports schema, rows and protocols" '
	expect_exit 0 "$ATB" --db s.db db info --json &&
	expect_grep "\"schema\": 4" "$TRASH/out" &&
	expect_grep "\"frozen_protocol\": $nfrozen" "$TRASH/out" &&
	expect_exit 0 "$ATB" --json --db s.db db info &&
	expect_grep "\"audit\": $nfrozen" "$TRASH/out"
'

test_expect "a text file is not an atb store and is left alone" '
	echo "just some text, certainly not sqlite" >notes.txt &&
	cp notes.txt notes.orig &&
	expect_exit 2 "$ATB" --db notes.txt db init &&
	expect_grep "'"'"'notes.txt'"'"' is not an atb store" "$TRASH/err" &&
	cmp notes.txt notes.orig && ! test -e notes.txt.audit.jsonl
'

test_expect "another application's database is not an atb store" '
	sqlite3 other.db "CREATE TABLE t(x); PRAGMA application_id = 7;" &&
	cp other.db other.orig &&
	expect_exit 2 "$ATB" --db other.db db info &&
	expect_grep "is not an atb store" "$TRASH/err" &&
	expect_exit 2 "$ATB" --db other.db db init &&
	cmp other.db other.orig
'

test_expect "a store from a newer atb asks for an upgrade" '
	sqlite3 newer.db "CREATE TABLE t(x); PRAGMA application_id = 1635017265; PRAGMA user_version = 5;" &&
	cp newer.db newer.orig &&
	expect_exit 2 "$ATB" --db newer.db db init &&
	expect_grep "store '"'"'newer.db'"'"' has schema 5, this atb reads up to 4; upgrade atb" "$TRASH/err" &&
	cmp newer.db newer.orig
'

test_expect "a schema 1 store is refused, named, and left alone" '
	sqlite3 v1.db "CREATE TABLE t(x); PRAGMA application_id = 1635017265; PRAGMA user_version = 1;" &&
	cp v1.db v1.orig &&
	expect_exit 2 "$ATB" --db v1.db db info &&
	expect_grep "store '"'"'v1.db'"'"' has schema 1, which this atb no longer reads (it reads 2-4)" "$TRASH/err" &&
	expect_exit 2 "$ATB" --db v1.db db init &&
	cmp v1.db v1.orig
'

test_expect "a missing store is named, not created, by info" '
	expect_exit 2 "$ATB" --db none.db db info &&
	expect_grep "does not exist" "$TRASH/err" &&
	! test -e none.db
'

test_expect "unknown subcommands and options are usage errors" '
	expect_exit 2 "$ATB" db frobnicate &&
	expect_exit 2 "$ATB" db info --bogus
'

test_done
