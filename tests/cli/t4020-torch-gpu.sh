#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The torch backend on the GPU (runs on the GPU machine; skipped where
# torch.cuda is not available): events on PyTorch's stream; the side-stream
# cheat escapes its timed window and `atb measure` rejects it (gate
# side_stream); empty_like after the reference reads the poisoned caching
# allocator's blocks; the ReLU identity is caught on the signed variants; a
# copy of an eager GEMM is admitted at ~1.00x with the CI covering 1; the
# tamper watch sees no change in the honest run and sees the planted hook;
# the outputs are compared on the GPU (runner/torch.c compare_device).
# Needs ATB_PYTHON (the GPU machine's /opt/torch/.venv/bin/python3).
# PROTO: gates side_stream, result_reuse, correctness.distributions.
. "$(dirname "$0")/lib.sh"

RUNNER=${ATB_RUNNER:-$ATB_BUILD_DIR/atb-runner}
FIX=$ATB_SOURCE_DIR/tests/fixtures/torch
PY=${ATB_PYTHON:-$ATB_SOURCE_DIR/.venv-torch/bin/python3}
[ -x "$RUNNER" ] || skip_all "no atb-runner at $RUNNER"
command -v jq >/dev/null || skip_all "jq not installed"
[ -x "$PY" ] && "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" \
	2>/dev/null || skip_all "no python with torch.cuda at '$PY' (GPU machine test)"
export ATB_PYTHON=$PY ATB_TORCH_DEVICE=cuda ATB_DB=$TRASH/atb.db

"$PY" -c '
import sys, os, sysconfig, json
v = sysconfig.get_config_var
lib = [os.path.join(d, n) for n in (v("INSTSONAME"), v("LDLIBRARY")) if n and ".so" in n
       for d in (v("LIBDIR") or "", os.path.join(sys.base_prefix, "lib")) if os.path.exists(os.path.join(d, n))]
print(json.dumps({"library": lib[0] if lib else "", "home": sys.base_prefix,
                  "path": [p for p in sys.path if p]}))' >python.json

run() {  # run CANDIDATE [FILTER]: relu01 on cuda, events in CANDIDATE.ev
	jq -c --arg t "$FIX/relu01.py" --arg c "$FIX/relu01/$1/model_new.py" \
		--arg m "$ATB_SOURCE_DIR/python" --slurpfile p python.json \
		".arms[0].py=\$t | .arms[1].py=\$c | .torch.python=\$p[0] | .torch.module_path=\$m |
		 .torch.device=\"cuda\" | ${2:-.}" "$FIX/relu01-job.json" >"$1.job" &&
	{ "$RUNNER" <"$1.job" >"$1.ev" 2>"$1.err"; echo $? >"$1.rc"; }
}

test_expect "honest on cuda: every fact passes, timed with cuda events on PyTorch's stream" '
	run honest ".options.skip_timing=false" && [ "$(cat honest.rc)" = 0 ] &&
	jq -se "map(select(.event==\"env\"))[0] | .device==\"cuda\" and .timer==\"cuda_events\"
		and .torch.stream>0" honest.ev >/dev/null &&
	{ jq -se "map(select(.event==\"env\"))[0] | .compare==\"gpu\"" honest.ev >/dev/null ||
	  { echo "outputs not compared on the GPU: $(jq -sc "map(select(.event==\"env\"))[0].compare" honest.ev)"; false; }; } &&
	jq -se "map(select(.event==\"done\"))[0] | .correctness_failures==0 and .timing==\"done\"
		and .side_stream_escapes==0" honest.ev >/dev/null
'

# PROTO: gates tamper -- on cuda the watch also holds torch.cuda, the
# current stream (the runner's), the allocator's settings: the honest run
# above must have seen no change, the planted hook must be seen.
test_expect "tamper watch on cuda: honest unchanged, a global forward pre-hook seen" '
	jq -se "map(select(.event==\"tamper\"))|length==0" honest.ev >/dev/null &&
	run tamper_hook ".options.skip_timing=false" &&
	jq -se "map(select(.event==\"tamper\"))[0].changes[0].what==
		\"a global forward pre-hook was registered\"" tamper_hook.ev >/dev/null
'

test_expect "side-stream cheat: its work escapes the timed window (side_stream escaped)" '
	run side_stream ".options.skip_timing=false" && [ "$(cat side_stream.rc)" = 0 ] &&
	jq -se "[.[]|select(.event==\"side_stream\" and .arm==\"candidate\")|.escaped]|any" \
		side_stream.ev >/dev/null
'

test_expect "empty_like after the reference reads the poisoned allocator blocks" '
	run empty_like &&
	jq -se "[.[]|select(.event==\"correctness\")|.pass|not]|all" empty_like.ev >/dev/null
'

test_expect "ReLU identity on cuda: caught on the signed sets only" '
	run identity_copy &&
	jq -se "[.[]|select(.event==\"correctness\" and .input!=\"task\")|.pass|not]|all" \
		identity_copy.ev >/dev/null
'

# PROTO: gates result_reuse -- on cuda the reference's outputs are compared
# from the runner's own slots (ref0, refb0).  The step in fresh tensors
# that tells a cache from a wrong kernel compares B's outputs with A's
# reference: it must read A's slot, not B's (it read B's before 7d71611, so
# a first-result cache was called wrong on B, with no reuse step named).
test_expect "result reuse on cuda: a first-result cache and a pointer cache named at step same_buffers_new_inputs" '
	run stale_first && [ "$(cat stale_first.rc)" = 0 ] &&
	jq -r "select(.event==\"correctness\") | [.seed, .input, .pass,
		(.gates.result_reuse.failed_step // \"-\")] | @tsv" stale_first.ev >f &&
	{ [ "$(head -1 f)" = "1	task	true	same_buffers_new_inputs" ] || { cat f; false; }; } &&
	run cache && [ "$(cat cache.rc)" = 0 ] &&
	jq -r "select(.event==\"correctness\") | .gates.result_reuse.failed_step // \"-\"" \
		cache.ev >g &&
	{ grep -qx same_buffers_new_inputs g || { cat g; false; }; }
'

# The reference's output zeroed in PyTorch's memory (memory_snapshot and a
# CUDA extension) while the candidate returns zeros: the runner compares
# with its own copy of the reference (cuMemAlloc, outside the allocator's
# list), made before the candidate runs on the set, so every set fails.
if "$PY" -c "import torch.utils.cpp_extension as c; c.verify_ninja_availability()" 2>/dev/null; then
test_expect "the reference's output overwritten through memory_snapshot: still caught" '
	run overwrite_ref &&
	jq -se "[.[]|select(.event==\"correctness\" and .arm==\"candidate\")] | length > 0 and
		(map(.pass|not)|all)" overwrite_ref.ev >/dev/null ||
	{ tail -5 overwrite_ref.err; jq -sc "[.[]|select(.event==\"correctness\")|{arm,pass}]" overwrite_ref.ev; false; }
'
else
	echo "# skipped: overwrite_ref needs ninja for torch.utils.cpp_extension (not installed)"
fi

test_expect "atb measure rejects the side-stream cheat (gate side_stream)" '
	expect_exit 2 "$ATB" measure --json --seeds 2 "$FIX/relu01.py" "$FIX/relu01/side_stream" &&
	cat "$TRASH/out" && jq -e ".gate==\"side_stream\"" "$TRASH/out" >/dev/null
'

test_expect "a copy of an eager GEMM: admitted at ~1.00x, CI covering 1" '
	expect_verdict ".verdict==\"admitted\" and .ci_low<=1 and .ci_high>=1 and .speedup>0.97 and
		.speedup<1.03" "$ATB" measure --json "$FIX/matmul.py" "$FIX/matmul/copy/model_new.py" &&
	cp "$TRASH/out" gemm.json
'

# The numbers, for the closing note (not a test).
[ -f gemm.json ] && jq -c "{verdict, speedup, ci_low, ci_high, cv, seeds, baseline_median_ns,
	candidate_median_ns, drift_ratio}" gemm.json | sed "s/^/# gemm copy: /"
[ -f side_stream.ev ] && jq -c "select(.event==\"side_stream\")" side_stream.ev | sed "s/^/# /"

test_done
