#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The job's top-level "backend": absent or "cpu" runs the cpu backend, an
# unknown one is refused naming the field, "cuda" without a CUDA driver is
# a runtime error (no_cuda), and a seed gives the same correctness facts
# whichever way the cpu backend is named.
. "$(dirname "$0")/lib.sh"

RUNNER=${ATB_RUNNER:-$ATB_BUILD_DIR/atb-runner}
FIX=$ATB_SOURCE_DIR/tests/fixtures/runner
[ -x "$RUNNER" ] || skip_all "no atb-runner at $RUNNER"
command -v jq >/dev/null || skip_all "jq not installed"
command -v cc >/dev/null || skip_all "no C compiler"

for f in relu_ref relu_wrong; do
	cc -shared -fPIC -O2 -I"$ATB_SOURCE_DIR/include" -o "$f.so" "$FIX/$f.c" ||
		skip_all "cannot build fixture $f"
done

# job FILTER: the relu job (wrong candidate, correctness only) through jq FILTER.
job() {
	jq -c --arg b "$PWD/relu_ref.so" --arg c "$PWD/relu_wrong.so" \
		".arms[0].so=\$b | .arms[1].so=\$c | .options={skip_timing:true} | $1" \
		"$FIX/relu-job.json"
}

test_expect "no backend is the cpu backend, and so is \"cpu\"" '
	job . | "$RUNNER" >none.ev &&
	job ".backend=\"cpu\"" | "$RUNNER" >cpu.ev &&
	jq -se "map(select(.event==\"env\"))[0].backend==\"cpu\"" none.ev >/dev/null &&
	jq -se "map(select(.event==\"env\"))[0].backend==\"cpu\"" cpu.ev >/dev/null
'

test_expect "the same seeds give the same correctness facts either way" '
	jq -c "select(.event==\"correctness\")" none.ev >a &&
	jq -c "select(.event==\"correctness\")" cpu.ev >b &&
	[ "$(wc -l <a)" = 24 ] && cmp a b
'

test_expect "an unknown backend is refused, the field named" '
	job ".backend=\"tpu\"" >tpu.json &&
	expect_exit 2 "$RUNNER" <tpu.json &&
	jq -se "map(select(.event==\"error\"))[0] | .reason==\"bad_job\"
		and (.message|startswith(\"backend: unknown backend '"'"'tpu'"'"'\"))" "$TRASH/out" >/dev/null
'

test_expect "a backend that is not a string is refused" '
	job ".backend=1" >one.json &&
	expect_exit 2 "$RUNNER" <one.json &&
	expect_grep "backend" "$TRASH/out"
'

# Where a CUDA driver loads, the cuda backend would run these cc-built
# kernels on device pointers: only the driverless case is checked here
# (t2000 covers the backend on a GPU).
if ldconfig -p 2>/dev/null | grep -q "libcuda\.so\.1"; then
	echo "# skipping the no-driver case: libcuda.so.1 is installed"
else
	test_expect "\"cuda\" without a CUDA driver is a runtime error, no_cuda" '
		job ".backend=\"cuda\"" >cuda.json &&
		expect_exit 3 "$RUNNER" <cuda.json &&
		jq -se "map(select(.event==\"error\"))[0].reason==\"no_cuda\"" "$TRASH/out" >/dev/null
	'
fi

test_done
