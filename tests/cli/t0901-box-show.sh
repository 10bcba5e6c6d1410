#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# atb box: the text description, --json, --fingerprint, --stable, --compiler,
# usage errors, and the fingerprint recomputed from the printed identity.
. "$(dirname "$0")/lib.sh"

command -v python3 >/dev/null || skip_all "python3 is needed to read the JSON"

test_expect "atb box prints a description with the fingerprint" '
	expect_exit 0 "$ATB" box &&
	expect_grep "fingerprint  " "$TRASH/out" &&
	expect_grep "cpu          " "$TRASH/out" &&
	expect_grep "kernel       " "$TRASH/out" &&
	expect_grep "compiler     cc: " "$TRASH/out"
'

test_expect "atb --json box is JSON with a 64-hex fingerprint equal to --fingerprint" '
	expect_exit 0 "$ATB" --json box && cp "$TRASH/out" box.json &&
	expect_exit 0 "$ATB" box --fingerprint && cp "$TRASH/out" fp.txt &&
	python3 -c "
import json, re, sys
box = json.load(open(\"box.json\"))
fp = open(\"fp.txt\").read().strip()
assert re.fullmatch(r\"[0-9a-f]{64}\", box[\"fingerprint\"]), box[\"fingerprint\"]
assert box[\"fingerprint\"] == fp, (box[\"fingerprint\"], fp)
assert \"volatile\" in box and isinstance(box[\"gpus\"], list)
"
'

test_expect "--json after the command is the same as before it" '
	expect_exit 0 "$ATB" box --json &&
	python3 -c "import json,sys; json.load(sys.stdin)" <"$TRASH/out"
'

test_expect "the fingerprint is the sha-256 of the canonical identity" '
	expect_exit 0 "$ATB" box --json &&
	python3 -c "
import hashlib, json, sys
box = json.load(sys.stdin)
text = json.dumps(box[\"identity\"], sort_keys=True, separators=(\",\", \":\"), ensure_ascii=True)
assert hashlib.sha256(text.encode()).hexdigest() == box[\"fingerprint\"]
" <"$TRASH/out"
'

test_expect "two runs give the same fingerprint" '
	a=$("$ATB" box --fingerprint) && b=$("$ATB" box --fingerprint) &&
	test "$a" = "$b"
'

test_expect "--stable leaves out the volatile fields" '
	expect_exit 0 "$ATB" box --json --stable &&
	python3 -c "
import json, sys
box = json.load(sys.stdin)
assert \"volatile\" not in box and \"identity\" in box
" <"$TRASH/out"
'

test_expect "without NVML the box has no GPUs and says why" '
	ATB_NVML_LIBRARY=/nonexistent expect_exit 0 "$ATB" --json box &&
	python3 -c "
import json, sys
box = json.load(sys.stdin)
assert box[\"gpus\"] == [] and box[\"identity\"][\"gpus\"] == []
assert \"cannot load nvml\" in box[\"volatile\"][\"gpu_probe\"]
" <"$TRASH/out"
'

test_expect "another compiler gives another fingerprint; a missing one is unknown" '
	a=$("$ATB" box --fingerprint) &&
	b=$("$ATB" box --fingerprint --compiler /nonexistent/cc) &&
	test "$a" != "$b" &&
	expect_exit 0 "$ATB" box --compiler=/nonexistent/cc &&
	expect_grep "compiler     /nonexistent/cc: cannot be run" "$TRASH/out"
'

test_expect "usage errors exit 2" '
	expect_exit 2 "$ATB" box --bogus &&
	expect_grep "unknown argument" "$TRASH/err" &&
	expect_exit 2 "$ATB" box --compiler &&
	expect_exit 2 "$ATB" box --stable &&
	expect_exit 2 "$ATB" box --compiler=-x &&
	expect_grep "bad compiler" "$TRASH/err"
'

test_expect "--help documents the identity fields and every option" '
	expect_exit 0 "$ATB" box --help &&
	for w in --json --stable --fingerprint --compiler identity volatile \
		memory_total_gib ATB_NVML_LIBRARY "exit codes"; do
		expect_grep "$w" "$TRASH/out" || exit 1
	done &&
	expect_exit 0 "$ATB" help box && expect_grep "usage: atb box" "$TRASH/out"
'

test_done
