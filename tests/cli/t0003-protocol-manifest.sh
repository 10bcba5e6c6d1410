#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The trusted-file manifest (protocol/manifest): the shipped home matches it,
# so this test fails when a header, a bundled task, atb's python or the lock
# changes without 'atb protocol manifest --write'; a copy of the home with
# include/atb/kernel.h appended to (the attack of issue 11) is refused by
# verify and by atb measure before anything is stored, naming the file and
# both digests; a new or a missing trusted file is refused too.
. "$(dirname "$0")/lib.sh"

test_expect "the shipped home matches its manifest (regenerate after a trusted change)" '
	expect_exit 0 "$ATB" protocol manifest || {
		echo "a trusted file changed: if on purpose, run atb protocol manifest --write"
		exit 1; }
	expect_grep "ok  manifest" "$TRASH/out" &&
	expect_exit 0 "$ATB" protocol verify && expect_grep "ok  manifest" "$TRASH/out" &&
	grep -q "  include/atb/kernel.h$" "$ATB_HOME/protocol/manifest" &&
	grep -q "  tasks/relu/baseline.c$" "$ATB_HOME/protocol/manifest" &&
	grep -q "  tasks/relu/task.yaml$" "$ATB_HOME/protocol/manifest" &&
	grep -q "  python/atb_static.py$" "$ATB_HOME/protocol/manifest" &&
	grep -q "  python/atb_torch/runner.py$" "$ATB_HOME/protocol/manifest" &&
	grep -q "  protocol/protocol.lock$" "$ATB_HOME/protocol/manifest"
'

mkdir home
for d in include tasks engines python protocol; do cp -r "$ATB_HOME/$d" home/; done
find home -name __pycache__ -prune -exec rm -rf {} +

test_expect "a copy of the home verifies; sha256sum reads the manifest too" '
	expect_exit 0 "$ATB" protocol manifest --home home &&
	if command -v sha256sum >/dev/null; then (cd home && sha256sum -c --quiet protocol/manifest); fi
'

old=$(sha256sum home/include/atb/kernel.h | cut -d" " -f1)
printf '/* appended by a candidate */\nstatic inline void atb_slow(void) {}\n' >>home/include/atb/kernel.h
new=$(sha256sum home/include/atb/kernel.h | cut -d" " -f1)
msg="trusted file 'include/atb/kernel.h' changed: the manifest has sha256 $old, the file has $new"

test_expect "an append to include/atb/kernel.h is refused by manifest and verify" '
	expect_exit 2 "$ATB" protocol manifest --home home &&
	expect_grep "$msg" "$TRASH/err" &&
	expect_exit 2 "$ATB" protocol verify --home home && expect_grep "$msg" "$TRASH/err"
'

test_expect "atb measure refuses to start in the tampered home, nothing stored" '
	ATB_HOME=$TRASH/home ATB_DB=$TRASH/m.db expect_exit 2 "$ATB" measure relu \
		"$ATB_SOURCE_DIR/tests/fixtures/cheats/relu/honest-spin" &&
	expect_grep "$msg" "$TRASH/err" &&
	{ [ ! -f m.db ] || { [ "$(sqlite3 m.db "SELECT count(*) FROM rejection")" = 0 ] &&
		[ "$(sqlite3 m.db "SELECT count(*) FROM result")" = 0 ]; }; }
'

test_expect "--write re-blesses the home; a new or a missing file is refused" '
	expect_exit 0 "$ATB" protocol manifest --write --home home &&
	expect_grep "wrote protocol/manifest" "$TRASH/out" &&
	expect_exit 0 "$ATB" protocol manifest --home home &&
	echo "import sys" >home/python/sitecustomize.py &&
	expect_exit 2 "$ATB" protocol manifest --home home &&
	expect_grep "file '\''python/sitecustomize.py'\'' (sha256 " "$TRASH/err" &&
	expect_grep ") is not in the trusted-file manifest" "$TRASH/err" &&
	rm home/python/sitecustomize.py && rm home/tasks/relu/naive.c &&
	expect_exit 2 "$ATB" protocol manifest --home home --json &&
	expect_grep "trusted file '\''tasks/relu/naive.c'\'' is missing" "$TRASH/out"
'

test_expect "usage: --write is for manifest only; --help documents manifest" '
	expect_exit 2 "$ATB" protocol verify --write &&
	expect_exit 0 "$ATB" protocol --help &&
	expect_grep "atb protocol manifest [--write]" "$TRASH/out" &&
	expect_grep "HOME/protocol/manifest" "$TRASH/out"
'

test_done
