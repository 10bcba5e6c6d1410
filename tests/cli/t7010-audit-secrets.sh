#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# No secret reaches the audit chain: with OPENAI_API_KEY set, ingests and
# rejections whose text contains the key leave it in neither copy.
. "$(dirname "$0")/lib.sh"

"$ATB" protocol verify >/dev/null 2>&1 || skip_all "atb protocol verify fails: no frozen protocol to sync"
command -v sqlite3 >/dev/null || skip_all "the sqlite3 shell is not installed"
FX=$ATB_SOURCE_DIR/tests/fixtures/store
export ATB_DB=$TRASH/k.db
export OPENAI_API_KEY=sk-proj-atbtest0123456789abcdef
"$ATB" db init >/dev/null || exit 1

test_expect "an ingest and a refusal carrying the key" '
	sed "s/\"cand-1\"/\"cand $OPENAI_API_KEY\"/" "$FX/ok-kernel.json" >ok.json &&
	expect_exit 0 "$ATB" db ingest-json ok.json &&
	sed "s/\"relu\"/\"relu $OPENAI_API_KEY\"/; s/\"cand-1\"/\"$OPENAI_API_KEY\"/" "$FX/rejected-cv-over-cap.json" >bad.json &&
	expect_exit 2 "$ATB" db ingest-json bad.json
'

test_expect "the key is in neither the store nor the mirror" '
	sqlite3 k.db .dump >dump.sql &&
	! grep -qF "$OPENAI_API_KEY" dump.sql &&
	! grep -qF "$OPENAI_API_KEY" k.db.audit.jsonl &&
	grep -qF "[redacted]" k.db.audit.jsonl
'

test_expect "the chain still verifies" '
	expect_exit 0 "$ATB" audit verify
'

test_done
