#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Work that needs a GPU, asked for on a box with no CUDA driver (this
# project's CPU box, CI): refused before anything is built, run or stored,
# exit 2, naming the option or the task's kind and the loader's reason.
# Before, `atb calibrate --kind cuda` stored nine runner rejections and
# reported "false refusals 9/9", and the README's `atb suite ... --device
# cuda` stored eleven runner rows and exited 0.  Skipped where a driver
# loads (the GPU machine: there the same commands measure).
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || skip_all "python3 not installed"
python3 -c 'import ctypes; ctypes.CDLL("libcuda.so.1")' 2>/dev/null &&
	skip_all "a CUDA driver loads here: the commands would measure"
KB=$ATB_SOURCE_DIR/tasks/kernelbench

# refused NAME ARGS...: exit 2, the message, no store and no runs folder.
refused() {
	local name=$1; shift
	mkdir "$name" && (cd "$name" && expect_exit 2 "$ATB" --db s.db "$@") &&
	grep -q "needs a CUDA driver, and this box has none (cannot load 'libcuda.so.1'" "$TRASH/err" &&
	grep -q "nothing was run or stored" "$TRASH/err" &&
	test ! -e "$name/s.db" && test ! -e "$name/s.db.audit.jsonl" && test ! -e "$name/runs" ||
	{ cat "$TRASH/err"; ls -A "$name"; false; }
}

test_expect "calibrate --kind cuda" '
	refused k calibrate --kind cuda && grep -q "^atb calibrate: --kind cuda needs" "$TRASH/err"
'
test_expect "calibrate --suite DIR --device cuda" '
	refused s calibrate --suite "$KB/level1" --device cuda
'
test_expect "measure of a task of kind cuda" '
	mkdir cand && refused m measure cuda_relu "$PWD/cand" &&
	grep -q "a task of kind cuda needs" "$TRASH/err"
'
test_expect "the README suite example with --device cuda" '
	refused u suite "$KB" --candidates "$KB/candidates/copy" --device cuda
'
test_expect "cpu work is not held to it: measure relu goes on to its own checks" '
	mkdir c && (cd c && expect_exit 2 "$ATB" --db s.db measure relu "$PWD/none") &&
	! grep -q "CUDA driver" "$TRASH/err" && grep -q "none" "$TRASH/err"
'

test_done
