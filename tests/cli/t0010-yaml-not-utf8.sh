#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# A YAML file that is not UTF-8 is refused at its byte by every command that
# loads YAML (issue 12): libfyaml 0.7.12 loops forever on "%" 0xAD
# (tests/fixtures/yaml/, docs/internals/libfyaml-hang.md), and `task show`,
# `engine show`, `protocol freeze` and `task list` hung on it.  Each command
# runs under a timeout, so a hang fails the test instead of blocking it;
# valid UTF-8 beyond ASCII still loads.
. "$(dirname "$0")/lib.sh"

FX=$ATB_SOURCE_DIR/tests/fixtures/yaml
HANG=$FX/percent-0xad.yaml
T=20

# refused CMD...: exits 2 within $T seconds, naming the file, line 1 column 2 and the byte.
refused() {
	expect_exit 2 timeout $T "$@" &&
	expect_grep ":1:2: malformed yaml: byte 0xad (offset 1) is not utf-8" "$TRASH/err"
}

test_expect "the fixture is the reported input: % then 0xad" '
	test "$(od -An -tx1 "$HANG" | tr -d " \n")" = 25ad
'

test_expect "task show refuses it" '
	mkdir -p t && cp "$HANG" t/task.yaml &&
	refused "$ATB" task show t/task.yaml && expect_grep "t/task.yaml:1:2" "$TRASH/err" &&
	refused "$ATB" task check t/task.yaml
'

test_expect "engine show refuses it, as a spec and as an engine task" '
	mkdir -p e && cp "$HANG" e/engine.yaml && cp "$HANG" spec.yaml &&
	refused "$ATB" engine show spec.yaml && expect_grep "spec.yaml:1:2" "$TRASH/err" &&
	refused "$ATB" engine show e/engine.yaml
'

test_expect "protocol freeze and digest refuse it and write nothing" '
	mkdir home && cp -r "$ATB_SOURCE_DIR/protocol" home/ && cp -r home before &&
	refused "$ATB" protocol freeze "$HANG" --home home &&
	diff -r before home &&
	refused "$ATB" protocol digest "$HANG"
'

test_expect "protocol verify names a frozen version file that got such a byte" '
	mkdir vh && cp -r "$ATB_SOURCE_DIR/protocol" vh/ && cp "$HANG" vh/protocol/v1.yaml &&
	refused "$ATB" protocol verify --home vh &&
	expect_grep "vh/protocol/v1.yaml:1:2" "$TRASH/err"
'

test_expect "task list refuses a bundled task holding it" '
	mkdir -p lh/tasks/bad && cp -r "$ATB_SOURCE_DIR/tasks/relu" lh/tasks/ &&
	cp "$HANG" lh/tasks/bad/task.yaml &&
	ATB_HOME=$TRASH/lh refused "$ATB" task list &&
	expect_grep "tasks/bad/task.yaml:1:2" "$TRASH/err"
'

test_expect "a directive after a document end with an overlong byte is refused at line 3" '
	expect_exit 2 timeout $T "$ATB" protocol digest "$FX/after-end-overlong.yaml" &&
	expect_grep "after-end-overlong.yaml:3:2: malformed yaml: byte 0xc0" "$TRASH/err" &&
	mkdir -p o && cp "$FX/after-end-overlong.yaml" o/task.yaml &&
	expect_exit 2 timeout $T "$ATB" task show o/task.yaml &&
	expect_grep "byte 0xc0" "$TRASH/err"
'

test_expect "valid utf-8 beyond ascii still loads: a protocol with such comments keeps its digest" '
	expect_exit 0 "$ATB" protocol digest "$ATB_SOURCE_DIR/protocol/v3.yaml" && cp "$TRASH/out" plain &&
	{ printf "# caf\303\251 \342\234\223 \360\235\233\274\n"; cat "$ATB_SOURCE_DIR/protocol/v3.yaml"; } >u.yaml &&
	expect_exit 0 timeout $T "$ATB" protocol digest u.yaml &&
	test "$(cut -d" " -f1 plain)" = "$(cut -d" " -f1 "$TRASH/out")"
'

test_expect "every bundled task, engine and protocol file still loads" '
	expect_exit 0 timeout 120 "$ATB" task list &&
	! grep -q "does not load" "$TRASH/out" &&
	expect_exit 0 timeout $T "$ATB" protocol verify &&
	for f in "$ATB_SOURCE_DIR"/engines/*.yaml; do
		expect_exit 0 timeout $T "$ATB" engine show "$f" || { echo "$f"; false; }
	done
'

test_done
