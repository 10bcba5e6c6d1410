#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The torch backend where no python can be embedded: atb-runner is built
# without libpython, so a torch job whose libpython does not load ends with
# "no_python" (exit 3), and a torch job missing its python description is
# refused naming the field (exit 2).  Runs everywhere: no python or torch
# needed.
. "$(dirname "$0")/lib.sh"

RUNNER=${ATB_RUNNER:-$ATB_BUILD_DIR/atb-runner}
FIX=$ATB_SOURCE_DIR/tests/fixtures/torch
[ -x "$RUNNER" ] || skip_all "no atb-runner at $RUNNER"
command -v jq >/dev/null || skip_all "jq not installed"

job() {
	jq -c --arg t "$FIX/relu01.py" --arg c "$FIX/relu01/honest/model_new.py" \
		".arms[0].py=\$t | .arms[1].py=\$c | $1" "$FIX/relu01-job.json"
}

test_expect "the hello event lists the torch backend" '
	job ".torch.python.library=\"/nonexistent/libpython3.so\"" >j &&
	expect_exit 3 "$RUNNER" <j && head -1 "$TRASH/out" >hello &&
	jq -e ".backends|index(\"torch\")" hello >/dev/null
'

test_expect "a libpython that does not load: no_python, exit 3" '
	job ".torch.python.library=\"/nonexistent/libpython3.so\"" >j &&
	expect_exit 3 "$RUNNER" <j &&
	jq -se "map(select(.event==\"error\"))[0] | .reason==\"no_python\" and
		(.message|contains(\"/nonexistent/libpython3.so\"))" "$TRASH/out" >/dev/null
'

test_expect "no shared libpython (a static build): no_python, saying why" '
	job ".torch.python.library=\"\"" >j &&
	expect_exit 3 "$RUNNER" <j &&
	jq -se "map(select(.event==\"error\"))[0].message|contains(\"no shared libpython\")" \
		"$TRASH/out" >/dev/null
'

test_expect "a job without torch.python is refused, the field named (exit 2)" '
	job "del(.torch.python)" >j &&
	expect_exit 2 "$RUNNER" <j &&
	jq -se "map(select(.event==\"error\"))[0] | .reason==\"bad_job\" and
		(.message|contains(\"torch.python\"))" "$TRASH/out" >/dev/null
'

test_expect "an arm without its python file is refused, the arm named" '
	job "del(.arms[1].py)" >j &&
	expect_exit 2 "$RUNNER" <j &&
	jq -se "map(select(.event==\"error\"))[0].message|contains(\"arms[1].py\")" \
		"$TRASH/out" >/dev/null
'

test_expect "a bad device is refused, the field and value named" '
	job ".torch.device=\"tpu\"" >j &&
	expect_exit 2 "$RUNNER" <j &&
	jq -se "map(select(.event==\"error\"))[0].message|contains(\"torch.device: bad device '"'"'tpu'"'"'\")" \
		"$TRASH/out" >/dev/null
'

test_expect "the shared sections are checked by the one job parser" '
	job ".seeds=[]" >j &&
	expect_exit 2 "$RUNNER" <j &&
	jq -se "map(select(.event==\"error\"))[0].message|contains(\"seeds\")" \
		"$TRASH/out" >/dev/null
'

test_done
