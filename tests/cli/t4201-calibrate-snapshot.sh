#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# scripts/gpu-check --snapshot: a calibration's state folder packed while atb
# may still be writing it (the periodic snapshots of the calibrate steps, so a
# device call cut at its own limit still brings a resumable state back).  The
# store is copied through SQLite's backup, the audit mirror cut to the entries
# the copy holds (a mirror line is written before its COMMIT: the live mirror
# may be one or more entries ahead), the rest as it is.  Needs no GPU.
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || skip_all "python3 not installed"
command -v sqlite3 >/dev/null || skip_all "sqlite3 not installed"
"$ATB" protocol verify >/dev/null 2>&1 || skip_all "atb protocol verify fails: no frozen protocol to sync"
FX=$ATB_SOURCE_DIR/tests/fixtures/store
GC=$ATB_SOURCE_DIR/scripts/gpu-check

mkdir -p st/runs/r1 st/tasks/t && echo keep >st/runs/r1/file && echo task >st/tasks/t/task.yaml
"$ATB" --db st/atb.db db init >/dev/null &&
"$ATB" --db st/atb.db db ingest-json "$FX/ok-kernel.json" >/dev/null || exit 1

test_expect "a snapshot holds the store, its mirror and the rest, and verifies" '
	bash "$GC" --snapshot st snap.tgz && mkdir a && tar xzf snap.tgz -C a &&
	test -f a/atb.db && test -f a/atb.db.audit.jsonl && test "$(cat a/runs/r1/file)" = keep &&
	test -f a/tasks/t/task.yaml && test ! -e a/atb.db-wal &&
	n=$(sqlite3 a/atb.db "SELECT count(*) FROM audit") && [ "$n" -ge 2 ] &&
	test "$(wc -l <a/atb.db.audit.jsonl)" = "$n" &&
	expect_exit 0 "$ATB" --db a/atb.db audit verify &&
	expect_exit 0 "$ATB" --db a/atb.db db check
'

# The live mirror ahead of the store (entries written, their COMMITs not yet
# made): two lines past the store's end, which a plain copy would keep and
# audit verify would then refuse as a store cut short.
test_expect "a mirror ahead of its store is cut to the store's entries" '
	cp -r st ahead && tail -n 1 ahead/atb.db.audit.jsonl >>ahead/atb.db.audit.jsonl &&
	tail -n 1 ahead/atb.db.audit.jsonl >>ahead/atb.db.audit.jsonl &&
	expect_exit 1 "$ATB" --db ahead/atb.db audit verify &&
	bash "$GC" --snapshot ahead snap2.tgz && mkdir b && tar xzf snap2.tgz -C b &&
	test "$(wc -l <b/atb.db.audit.jsonl)" = "$(sqlite3 b/atb.db "SELECT count(*) FROM audit")" &&
	expect_exit 0 "$ATB" --db b/atb.db audit verify
'

test_expect "a mirror behind its store is no state to resume from: the tarball is not replaced" '
	cp -r st behind && head -n 1 behind/atb.db.audit.jsonl >m && mv m behind/atb.db.audit.jsonl &&
	cp snap.tgz keep.tgz && cp snap.tgz snap3.tgz &&
	! bash "$GC" --snapshot behind snap3.tgz.none &&
	test ! -e snap3.tgz.none && test ! -e snap3.tgz.none.part &&
	bash "$GC" --snapshot behind snap3.tgz; cmp snap3.tgz keep.tgz
'

test_expect "no store yet: nothing is written" '
	mkdir empty && ! bash "$GC" --snapshot empty none.tgz && test ! -e none.tgz
'

test_expect "--help prints the usage, an unknown option is refused and creates nothing" '
	bash "$GC" --help >help.txt && grep -q "^  scripts/gpu-check --prepare" help.txt &&
	grep -q "^Exit status:" help.txt && ! grep -q "^#" help.txt &&
	expect_exit 2 bash "$GC" --bogus && grep -q "unknown option .--bogus." "$TRASH/err" &&
	test ! -e ./--bogus && test ! -e ./--help
'

test_done
