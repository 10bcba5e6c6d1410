#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# atb task check: every bundled task validates and its baseline, naive and
# template build with the protocol's flags; a compile error exits 1 with the
# compiler's output.
. "$(dirname "$0")/lib.sh"

PROTO="$ATB_SOURCE_DIR/protocol/v1.yaml"
command -v cc >/dev/null || skip_all "no C compiler 'cc'"
"$ATB" task check relu --protocol "$PROTO" >/dev/null 2>&1
[ $? -le 1 ] || skip_all "protocol v1 does not load yet"

for t in sgemm softmax layernorm stencil2d prefix_sum relu; do
	test_expect "check $t" '
		expect_exit 0 "$ATB" task check '"$t"' --protocol "$PROTO" &&
		expect_grep "baseline" "$TRASH/out" &&
		expect_grep "check ok" "$TRASH/out"
	'
done

test_expect "check --json reports each build" '
	expect_exit 0 "$ATB" --json task check sgemm --protocol "$PROTO" &&
	expect_grep "\"build\": \"naive\"" "$TRASH/out" &&
	expect_grep "\"ok\": true" "$TRASH/out" &&
	expect_grep "\"knobs\": \"TILE_I=64" "$TRASH/out"
'

test_expect "a baseline that does not compile: exit 1 with the log" '
	mkdir "$TRASH/broken" &&
	cp "$ATB_SOURCE_DIR/tests/fixtures/task/good.yaml" "$ATB_SOURCE_DIR/tests/fixtures/task/copy.c" "$TRASH/broken/" &&
	cp "$ATB_SOURCE_DIR/tests/fixtures/task/broken.c" "$TRASH/broken/" &&
	sed "s/source: copy.c, label: copy/source: broken.c, label: copy/" "$ATB_SOURCE_DIR/tests/fixtures/task/good.yaml" >"$TRASH/broken/task.yaml" &&
	expect_exit 1 "$ATB" task check "$TRASH/broken" --protocol "$PROTO" &&
	expect_grep "FAILED" "$TRASH/out" &&
	expect_grep "this_is_not_declared" "$TRASH/out" &&
	expect_grep "check FAILED" "$TRASH/out"
'

test_expect "check with the current frozen protocol" '
	if "$ATB" protocol verify >/dev/null 2>&1; then
		expect_exit 0 "$ATB" task check relu
	else
		echo "# skipped: protocol lock does not verify"
	fi
'

test_done
