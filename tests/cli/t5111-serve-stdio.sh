#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# atb serve --stdio from another language: a Python client (standard
# library only, tests/fixtures/serve/client.py) speaks JSON-RPC 2.0 in the
# Model Context Protocol's shape over the server's stdin and stdout:
# initialize, tools/list with JSON Schemas, list_tasks, show_task, refused
# submissions (traversal, absolute path, folder, a name outside the
# surface: nothing written), malformed JSON, a line over the limit, unknown
# methods and tools, bad params, a batch, a planted cheat the correctness
# gate refuses, a KernelBench-format task's fallback the static gate
# refuses, the honest candidate, get_verdict, get_history, and end of
# input.  The client checks the deterministic parts strictly; the honest
# candidate's timing verdict may be a loaded box's refusal (noise, drift),
# which is accepted and printed.  The audit chain verifies afterwards.
. "$(dirname "$0")/lib.sh"

CHEATS=$ATB_SOURCE_DIR/tests/fixtures/cheats
CLIENT=$ATB_SOURCE_DIR/tests/fixtures/serve/client.py
[ -x "$ATB_BUILD_DIR/atb-runner" ] || skip_all "no atb-runner"
command -v cc >/dev/null || skip_all "no C compiler"
command -v jq >/dev/null || skip_all "jq not installed"
command -v python3 >/dev/null || skip_all "no python3"
FIX=$ATB_SOURCE_DIR/tests/fixtures/torch
# the static checker and the task's loading need a python3, not PyTorch
export ATB_PYTHON=${ATB_PYTHON:-python3}
cp -r "$CHEATS/tasks/relu-spin" task
mkdir tmp

test_expect "--help documents the tools and the errors; --stdio is required" '
	"$ATB" serve --help >help && expect_grep "submit_candidate" help &&
	expect_grep "-32602" help &&
	expect_exit 2 "$ATB" serve && expect_grep "--stdio" "$TRASH/err" &&
	expect_exit 2 "$ATB" serve --stdio --max-message-bytes 5 &&
	[ ! -e s.db ]
'

test_expect "a Python client drives the server through every tool and error" '
	TMPDIR=$TRASH/tmp python3 "$CLIENT" "$ATB" "$TRASH/s.db" "$TRASH/task" \
		"$CHEATS/relu/honest-spin" "$CHEATS/relu/identity" "$TRASH/summary.json" \
		"$FIX/relu01.py" "$FIX/relu01/static_getattr/model_new.py" &&
	jq -c ".honest | {verdict, gate, speedup, ci_low, ci_high, cv, reason}" summary.json
'

test_expect "the honest candidate: admitted, or refused by the box alone" '
	jq -e ".honest | (.verdict == \"admitted\" and .result_id > 0 and .usable == true)
	       or (.verdict == \"rejected\" and ($BOX_GATES))" summary.json >/dev/null ||
		{ jq . summary.json; false; }
'

test_expect "the history is in the store: atb report shows the agent run" '
	"$ATB" --db s.db report agent1 --json >r.json &&
	jq -e ".run.proposer == \"agent\" and .run.done == 2 and
	       .trajectory[0].outcome == \"correctness\"" r.json >/dev/null &&
	[ -z "$(ls tmp)" ]
'

test_expect "the audit chain verifies" '
	"$ATB" --db s.db audit verify >v.txt && expect_grep "audit chain ok" v.txt
'

test_done
