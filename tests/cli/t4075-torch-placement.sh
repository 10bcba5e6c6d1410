#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# timing.placement (shuffled) on the torch backend: the pads in front of
# each model's timing inputs and parameters are drawn from (seed, model)
# under a key the candidate cannot know (BLAKE2b keyed with the job's
# placement_key, one per atb process from the kernel's CSPRNG; the
# runner's own os.urandom key when the job has none), through builtins
# bound before any candidate is imported; the runner reports them (event
# placement).  Planted in tests/fixtures/torch/relu01/placement_*: a
# candidate that replaces the runner's draw (refused by the tamper watch),
# one that reseeds every random.Random (what the runner drew through
# before: the pads were then the same on every seed; now it changes
# nothing), and one that reads the runner's module and predicts the
# pads as they were drawn before (from the seed alone: now wrong).  The
# static gate refuses all three for the import (t4015).  Under keyed the
# models are placed in the order runner_arm_order turns each seed.  Honest
# candidates draw fresh pads per job and are not refused.  Needs a python
# with PyTorch.  PROTO: timing.placement, gates tamper
. "$(dirname "$0")/lib.sh"

RUNNER=${ATB_RUNNER:-$ATB_BUILD_DIR/atb-runner}
FIX=$ATB_SOURCE_DIR/tests/fixtures/torch
[ -x "$RUNNER" ] || skip_all "no atb-runner at $RUNNER"
need_torch_cpu "$RUNNER"
command -v jq >/dev/null || skip_all "jq not installed"

"$PY" "$FIX/python-info.py" >python.json 2>/dev/null || "$PY" -c '
import sys, os, sysconfig, json
v = sysconfig.get_config_var
lib = [os.path.join(d, n) for n in (v("INSTSONAME"), v("LDLIBRARY")) if n and ".so" in n
       for d in (v("LIBDIR") or "", os.path.join(sys.base_prefix, "lib")) if os.path.exists(os.path.join(d, n))]
print(json.dumps({"library": lib[0] if lib else "", "home": sys.base_prefix,
                  "path": [p for p in sys.path if p]}))' >python.json ||
	skip_all "cannot ask '$PY' about itself"

# run NAME CANDIDATE [FILTER]: the relu01 job, timed, shuffled placement; NAME.ev, NAME.err, NAME.rc.
run() {
	jq -c --arg t "$FIX/relu01.py" --arg c "$FIX/relu01/$2/model_new.py" \
		--arg m "$ATB_SOURCE_DIR/python" --slurpfile p python.json \
		".arms[0].py=\$t | .arms[1].py=\$c | .torch.python=\$p[0] |
		 .torch.module_path=\$m | .options.skip_timing=false |
		 .timing.placement=\"shuffled\" | ${3:-.}" "$FIX/relu01-job.json" >"$1.job" &&
	{ "$RUNNER" <"$1.job" >"$1.ev" 2>"$1.err"; echo $? >"$1.rc"; }
}

# pads EV SEED MODEL: that model's pads on that seed, as JSON.
pads() {
	jq -c --argjson s "$2" --argjson m "$3" \
		'select(.event=="placement" and .seed==$s) | .placement.pads_bytes[$m]' "$1"
}

test_expect "honest: timed, one placement event per seed, two pads per model, no tamper" '
	run h1 honest && [ "$(cat h1.rc)" = 0 ] &&
	jq -se "(map(select(.event==\"placement\")) | length == 2 and
		 all(.placement.key_from == \"runner\" and
		     (.placement.pads_bytes | length == 2 and all(length == 2)))) and
		(map(select(.event==\"tamper\")) | length == 0) and
		(map(select(.event==\"done\"))[0].timing == \"done\")" h1.ev >/dev/null ||
	{ jq -c "select(.event==\"placement\" or .event==\"error\")" h1.ev; exit 1; }
'

test_expect "the pads are not the seed alone: two jobs draw different pads for the same seed" '
	run h2 honest && [ "$(cat h2.rc)" = 0 ] &&
	[ -n "$(pads h1.ev 1 0)" ] && [ "$(pads h1.ev 1 0)" != "$(pads h2.ev 1 0)" ] &&
	[ "$(pads h1.ev 2 1)" != "$(pads h2.ev 2 1)" ]
'

test_expect "the job placement_key fixes the draws: the same key, the same pads" '
	K=".timing.placement_key=\"00112233445566778899aabbccddeeff\"" &&
	run k1 honest "$K" && run k2 honest "$K" &&
	[ "$(pads k1.ev 1 0)" = "$(pads k2.ev 1 0)" ] && [ "$(pads k1.ev 2 1)" = "$(pads k2.ev 2 1)" ] &&
	[ "$(pads k1.ev 1 0)" != "$(pads k1.ev 2 0)" ] &&
	jq -se "map(select(.event==\"placement\"))[0].placement.key_from == \"job\"" k1.ev >/dev/null
'

test_expect "keyed (protocol v9) is shuffled here: the same key, the same pads as k1" '
	K=".timing.placement=\"keyed\" | .timing.placement_key=\"00112233445566778899aabbccddeeff\"" &&
	run k3 honest "$K" && [ "$(cat k3.rc)" = 0 ] &&
	[ -n "$(pads k3.ev 1 0)" ] && [ "$(pads k1.ev 1 0)" = "$(pads k3.ev 1 0)" ] &&
	[ "$(pads k1.ev 2 1)" = "$(pads k3.ev 2 1)" ]
'

# PROTO: timing.placement (keyed, version 10 on): the models are placed in an
# order that turns by one arm each seed (runner_arm_order, as the cpu and
# cuda backends allocate), reported as the event's order; shuffled keeps arm
# order and reports none.
test_expect "keyed: the placement order turns each seed, every arm placed first once" '
	jq -se "map(select(.event==\"placement\")) as \$p | (\$p | length == 2) and
		all(\$p[]; (.order | sort) == [\"baseline\", \"candidate\"]) and
		(\$p[0].order[0] != \$p[1].order[0])" k3.ev >/dev/null &&
	jq -se "all(.[]; .event != \"placement\" or (has(\"order\") | not))" k1.ev >/dev/null ||
	{ jq -c "select(.event==\"placement\")" k1.ev k3.ev; exit 1; }
'

test_expect "the runner draw replaced by the candidate: refused by the tamper watch" '
	run replace placement_replace &&
	jq -se "(map(select(.event==\"tamper\"))[0].changes | map(.what) |
		 index(\"atb_torch.runner._draw replaced\") != null) and
		(map(select(.event==\"error\"))[0].reason == \"tamper\") and
		(map(select(.event==\"placement\")) | length == 0)" replace.ev >/dev/null ||
	{ jq -c "select(.event==\"tamper\" or .event==\"error\")" replace.ev; tail -5 replace.err; exit 1; }
'

test_expect "every random.Random reseeded with 0: the pads still differ from seed to seed" '
	run reseed placement_reseed && [ "$(cat reseed.rc)" = 0 ] &&
	[ -n "$(pads reseed.ev 1 0)" ] && [ "$(pads reseed.ev 1 0)" != "$(pads reseed.ev 2 0)" ] &&
	[ "$(pads reseed.ev 1 1)" != "$(pads reseed.ev 2 1)" ]
'

test_expect "the runner module read: the pads predicted from the seed are not the ones drawn" '
	run read placement_read && [ "$(cat read.rc)" = 0 ] &&
	grep "^atb-placement-prediction " read.err | cut -d" " -f2- >predicted &&
	[ "$(wc -l <predicted)" = 2 ] &&
	for s in 1 2; do
		p=$(jq -c --argjson s $s "select(.seed==\$s).pads" predicted) &&
		[ -n "$p" ] && [ "$p" != "$(pads read.ev $s 0)" ] || exit 1
	done
'

test_done
