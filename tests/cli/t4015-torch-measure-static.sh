#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The static checks on the path of every torch candidate (gate static,
# python/atb_static.py called by atb_measure_candidate): each planted
# fallback in tests/fixtures/torch/relu01/static_* -- the ones an attacker
# who read the checker would write: getattr with a computed name,
# sys.modules, __import__, importlib, exec, gc, traceback frames, a star
# import and globals(), a fullwidth "Ｍodel", __builtins__, a C++ source
# calling back into Python, a file too deep to parse, setattr on torch,
# sys reached as os.sys, a signal handler armed on a timer, sys taken as a
# value ([sys][0].modules) or reached as getattr(os, "sys") --
# and the suite's planted ones (subclass, try/except fallback, no ModelNew,
# syntax error) are refused by `atb measure` at gate static, the reason
# naming the file, the line and the rule, stored as gate:static with the
# findings in the audit entry measure.static, before any runner starts.
# With PyTorch, each working fallback is first shown to pass every runtime
# check in a bare runner (correctness on the adversarial inputs, timing,
# the tamper watch): the static gate is what stops it.  Honest candidates
# (the bundled copies, the fixtures' honest ones) have no refusing
# finding.  `atb run` refuses a torch task up front (it has nothing to
# propose).  The static refusals need only python3; PROTO: gates static.
. "$(dirname "$0")/lib.sh"

command -v python3 >/dev/null || skip_all "python3 is needed for the static checker"
command -v jq >/dev/null || skip_all "jq not installed"
FIX=$ATB_SOURCE_DIR/tests/fixtures/torch
KB=$ATB_SOURCE_DIR/tasks/kernelbench
export ATB_PYTHON=${ATB_PYTHON:-python3} ATB_TORCH_DEVICE=cpu
export ATB_DB=$TRASH/atb.db

# refused TASK CANDIDATE RULE LINE: atb measure rejects it at gate static
# for RULE at LINE of CANDIDATE, stored, nothing measured.
refused() {
	expect_exit 2 "$ATB" measure --json "$1" "$2" &&
	jq -e --arg r "$3" --arg f "$2" --arg l "line $4 of" '
		.verdict=="rejected" and .gate=="static" and .result_id==null and
		(.reason|startswith("static: " + $r + " at " + $l + " '"'"'" + $f + "'"'"': ")) and
		(.findings|index($r)) != null' "$TRASH/out" >/dev/null ||
	{ cat "$TRASH/out" "$TRASH/err"; return 1; }
}

for fx in getattr:reflection:13 sys_modules:reflection:14 import:dynamic_code:8 \
	  importlib:dynamic_code:8 exec:dynamic_code:9 gc:reflection:8 frames:reflection:15 \
	  star:reflection:9 unicode:fallback_to_reference:8 builtins:reflection:9 \
	  cxx:dynamic_code:13 deep:unanalysable:1 setattr:reflection:12 os_sys:reflection:14 \
	  signal:reflection:11 sys_alias:reflection:14 getattr_module:reflection:12; do
	IFS=: read -r c rule line <<<"$fx"
	test_expect "atb measure refuses static_$c at gate static ($rule, line $line)" '
		refused "$FIX/relu01.py" "$FIX/relu01/static_'"$c"'/model_new.py" '"$rule $line"'
	'
done

# The review of session 30: the runner's Session reached through
# [sys][0].modules["gc"] (an alias of sys), its init inputs and the
# reference's scale rewritten (t4070 runs them in a bare runner); and the
# second review's doors: other modules' private names for sys, builtins and
# inspect (collections._sys, pprint._sys, argparse._sys, enum.bltns,
# torch.foreach._inspect) and modules.get("gc")
for c in scalelin/initlist_bf16:16 scalelin/refattr_zero:14 scalelin/data_zero:16 \
	 scalelin/class_swap:19 relu01/dists:13 linear/data_zero:16 pscale/data_zero:16; do
	IFS=: read -r c line <<<"$c"
	test_expect "atb measure refuses $c at gate static (reflection, line $line)" '
		refused "$FIX/'"${c%%/*}"'.py" "$FIX/'"$c"'/model_new.py" reflection '"$line"'
	'
done

# PROTO: timing.placement -- the runner's pad draws reached through its own
# module (t4075 runs them in a bare runner)
for fx in placement_replace:reflection:10 placement_read:reflection:13 overwrite_ref:reflection:44; do
	IFS=: read -r c rule line <<<"$fx"
	test_expect "atb measure refuses $c at gate static ($rule, line $line)" '
		refused "$FIX/relu01.py" "$FIX/relu01/'"$c"'/model_new.py" '"$rule $line"'
	'
done

for fx in subclass:fallback_to_reference:20 fallback:fallback_to_reference:22 \
	  no_modelnew:no_modelnew:1 syntax_error:syntax_error:12; do
	IFS=: read -r c rule line <<<"$fx"
	test_expect "atb measure refuses the suite's planted '$c' too ($rule)" '
		refused "$KB/level1/02_ReLU.py" "$ATB_SOURCE_DIR/tests/fixtures/suite/'"$c"'/02_ReLU.py" \
			'"$rule $line"'
	'
done

test_expect "the refusals are in the store as gate:static, the findings in the audit chain" '
	n=$(sql "$ATB_DB" "SELECT count(*) FROM rejection WHERE rule = '"'"'gate:static'"'"'") &&
	test "$n" = 31 &&
	test "$(sql "$ATB_DB" "SELECT count(*) FROM result")" = 0 &&
	sql "$ATB_DB" "SELECT detail FROM rejection WHERE reason LIKE '"'"'%static_gc%'"'"'" >gc.detail &&
	jq -e ".rule==\"reflection\" and .line==8 and (.file|endswith(\"static_gc/model_new.py\")) and
		.checker.sandbox != null" gc.detail >/dev/null &&
	"$ATB" audit show --json >audit.json &&
	test "$(jq "[.[] | select(.kind==\"measure.static\")] | length" audit.json)" = 31 &&
	"$ATB" db check >/dev/null && "$ATB" audit verify >/dev/null
'

test_expect "honest candidates have no refusing finding (calls_replaced_op only annotates)" '
	for c in "$KB"/candidates/copy/*.py; do
		python3 "$ATB_SOURCE_DIR/python/atb_static.py" --reference "$KB/level1/$(basename "$c")" "$c" |
			jq -e "[.findings[].kind | select(. != \"calls_replaced_op\")] | length == 0" >/dev/null ||
			{ echo "refused: $c"; exit 1; }
	done &&
	for c in relu01/honest relu01/clamp relu01/tamper_hook softmax/copy matmul/copy linear/honest \
		 relu_floor/honest relu_floor/cache rowsum/honest scalelin/honest counter/honest \
		 relu_spin/honest pscale/honest; do
		t=${c%%/*}
		python3 "$ATB_SOURCE_DIR/python/atb_static.py" --reference "$FIX/$t.py" "$FIX/$c/model_new.py" |
			jq -e "[.findings[].kind | select(. != \"calls_replaced_op\")] | length == 0" >/dev/null ||
			{ echo "refused: $c"; exit 1; }
	done
'

test_expect "atb run refuses a torch task up front, creating nothing (exit 2)" '
	expect_exit 2 "$ATB" --db run.db run "$FIX/relu01.py" --iterations 1 --runs-dir runs &&
	expect_grep "atb run has nothing to propose" "$TRASH/err" && test ! -e run.db
'

# With torch: each working fallback passes every runtime check in a bare
# runner, so it is the static gate that refuses it.
RUNNER=${ATB_RUNNER:-$ATB_BUILD_DIR/atb-runner}
PY=${ATB_PYTHON_TORCH:-$ATB_SOURCE_DIR/.venv-torch/bin/python3}
[ "$ATB_PYTHON" != python3 ] && PY=$ATB_PYTHON
if [ -x "$RUNNER" ] && [ -x "$PY" ] && "$PY" -c "import torch" 2>/dev/null &&
	! ldd "$RUNNER" 2>/dev/null | grep -q libasan; then
	"$PY" -c '
import sys, os, sysconfig, json
v = sysconfig.get_config_var
lib = [os.path.join(d, n) for n in (v("INSTSONAME"), v("LDLIBRARY")) if n and ".so" in n
       for d in (v("LIBDIR") or "", os.path.join(sys.base_prefix, "lib")) if os.path.exists(os.path.join(d, n))]
print(json.dumps({"library": lib[0] if lib else "", "home": sys.base_prefix,
                  "path": [p for p in sys.path if p]}))' >python.json
	for c in getattr sys_modules import importlib exec gc frames star unicode builtins os_sys; do
		test_expect "without the static gate, static_$c is a working fallback (bare runner: correct, timed, no tamper)" '
			jq -c --arg t "$FIX/relu01.py" --arg c "$FIX/relu01/static_'"$c"'/model_new.py" \
				--arg m "$ATB_SOURCE_DIR/python" --slurpfile p python.json \
				".arms[0].py=\$t | .arms[1].py=\$c | .torch.python=\$p[0] |
				 .torch.module_path=\$m | .options.skip_timing=false" \
				"$FIX/relu01-job.json" >'"$c"'.job &&
			"$RUNNER" <'"$c"'.job >'"$c"'.ev 2>'"$c"'.err &&
			jq -se "(map(select(.event==\"done\"))[0] | .correctness_failures==0 and
				 .timing==\"done\") and (map(select(.event==\"tamper\" or
				 .event==\"error\")) | length==0)" '"$c"'.ev >/dev/null ||
			{ jq -c "select(.event==\"done\" or .event==\"error\" or .event==\"tamper\")" \
				'"$c"'.ev; tail -5 '"$c"'.err; exit 1; }
		'
	done
else
	echo "# skipped the bare-runner checks: no python with torch at '$PY' (or a sanitizer runner)"
fi

test_done
