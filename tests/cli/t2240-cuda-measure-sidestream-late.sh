#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# A side-stream escape the one side_stream probe per seed and arm does not
# see (issue 11, item 4 on the cuda backend):
# tests/fixtures/cheats/cuda_relu/sidestream-late is honest on every call
# that comes more than 5 ms after its previous one (the correctness calls,
# and the probe, made before timing after the seed's inputs were generated
# and uploaded) and moves the last tenth of the work to a stream of its own
# on the calls that follow closely (the warm-ups and timed trials).  The
# runner waits for the whole context between rounds and before it copies a
# round's outputs, so the timed checks see right outputs; only the timed
# window misses the tenth.  Protocol version 7's gates.side_stream times a
# context-wide wait after every timed trial's stop event and refuses a
# candidate whose median wait exceeds the reference's by more than 1 us and
# 1% of its trial.  On the H200 at 16 Mi elements (46 us trials) the
# cheat's median wait was 1.2-1.3 us over the reference's on each of 4
# seeds: refused, by a thin margin (the rule bounds what such a cheat can
# hide to max(1 us, 1%) per trial; docs/internals/cuda.md, "Known limits").
# At the bundled 64 Mi elements (178 us trials) it left the same 1.1-1.25 us,
# under 1% of the trial: not refused by that rule (the 4-seed run then met
# the store's stats.min_paired_seeds), so that shape is not this test's.
# The compile check runs wherever nvcc is; the rest needs the GPU
# (scripts/gpu-check, step t2240).
. "$(dirname "$0")/lib.sh"

CHEATS=$ATB_HOME/tests/fixtures/cheats/cuda_relu
command -v nvcc >/dev/null || PATH="/usr/local/cuda/bin:$PATH"
command -v nvcc >/dev/null || skip_all "no nvcc: not a CUDA build machine"

test_expect "the late side-stream cheat builds with the protocol's nvcc flags" '
	nvcc -O3 --shared -Xcompiler -fPIC -I"$ATB_HOME/include" -o late.so \
		"$CHEATS/sidestream-late/kernel.cu" &&
	nm -D late.so | grep -q " T atb_kernel"
'

. "$ATB_HOME/tests/fixtures/cheats/cuda_common.sh"
cuda_require
export ATB_DB=$TRASH/m.db
cuda_task_copy cuda_relu task 's/value: 67108864/value: 16777216/'

test_expect "a candidate that escapes to a side stream only after the probe is refused: side_stream" '
	rc=0 &&
	"$ATB" measure --json "$TRASH/task" "$CHEATS/sidestream-late" --seeds 4 --no-naive \
		>"$TRASH/out" 2>"$TRASH/err" || rc=$? &&
	jq -c "{verdict, gate, speedup, reason}" "$TRASH/out" &&
	[ $rc = 2 ] && jq -e ".verdict == \"rejected\" and .gate == \"side_stream\"" \
		"$TRASH/out" >/dev/null &&
	jq -e ".reason | test(\"timed windows\")" "$TRASH/out" >/dev/null ||
		{ echo "# the late side-stream escape was not refused by side_stream"; cat "$TRASH/err"; exit 1; }
'

test_done
