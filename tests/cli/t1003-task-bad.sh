#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Bad task files are refused with exit 2 and file:line:column: field: message.
. "$(dirname "$0")/lib.sh"

FIX="$ATB_SOURCE_DIR/tests/fixtures/task"

# fixture  expected "line:column: field: " prefix  message fragment
while IFS='|' read -r file where msg; do
	test_expect "$file is refused" '
		expect_exit 2 "$ATB" task show "$FIX/'"$file"'" &&
		expect_grep "atb: $FIX/'"$file"':'"$where"'" "$TRASH/err" &&
		expect_grep "'"$msg"'" "$TRASH/err"
	'
done <<'CASES'
bad-unknown-key.yaml|4:1: colour: |unknown key
bad-wrong-type.yaml|6:33: params[0].value: |expected an integer
bad-missing-field.yaml|2:1: description: |missing field
bad-dtype.yaml|12:22: buffers[1].dtype: |bad dtype
bad-role.yaml|12:34: buffers[1].role: |bad role
bad-expression.yaml|11:46: buffers[0].shape[0]: |unexpected end of expression
bad-unknown-param.yaml|12:47: buffers[1].shape[0]: |unknown parameter
bad-div-zero.yaml|20:16: floor.bytes: |division by zero
bad-overflow.yaml|20:28: floor.flops: |integer overflow
bad-negative-shape.yaml|12:46: buffers[0].shape[0]: |must be at least 1
bad-surface-dotdot.yaml|15:11: surface[0]: |'..' in file name
bad-surface-absolute.yaml|15:11: surface[0]: |absolute path
bad-flag.yaml|19:24: knobs.cflags[2]: |not allowed
bad-out-generator.yaml|12:63: buffers[1].generator: |out buffer has no generator
CASES

test_expect "malformed YAML exits 2" '
	expect_exit 2 "$ATB" task show "$FIX/bad-malformed.yaml" &&
	expect_grep "malformed yaml" "$TRASH/err"
'

test_done
