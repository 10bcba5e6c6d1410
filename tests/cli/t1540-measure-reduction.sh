#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# atb measure sends a task buffer's reduction to the runner, so protocol v2's
# reduction rule applies in real measurements: on a small fixture GEMM
# (C = A B, K = 1024) whose reference sums k upwards, an honest candidate
# that sums k downwards passes correctness on every input set, and one that
# rounds its inputs to fp16 inside the kernel (a precision downgrade) fails
# with gate correctness.  The job is read through a wrapper runner that keeps
# what it was sent.  PROTO: correctness.reduction_tolerance.
. "$(dirname "$0")/lib.sh"

REAL=$ATB_BUILD_DIR/atb-runner
[ -x "$REAL" ] || skip_all "no atb-runner"
command -v cc >/dev/null || skip_all "no C compiler"
command -v jq >/dev/null || skip_all "jq not installed"
export ATB_DB=$TRASH/m.db

mkdir -p task honest fp16
cat >task/task.yaml <<'YAML'
name: gemm-reduction
kind: cpu
description: >-
  Fixture: C = A * B in fp32, row-major, C declared a reduction of length K.
params:
  - {name: M, type: int, value: 24}
  - {name: N, type: int, value: 24}
  - {name: K, type: int, value: 1024}
correctness_params:
  - {M: 16, N: 16, K: 1024}
  - {M: 3, N: 5, K: 7}
buffers:
  - {name: A, dtype: fp32, role: in, shape: [M, K], generator: {kind: uniform, low: -1.0, high: 1.0}}
  - {name: B, dtype: fp32, role: in, shape: [K, N], generator: {kind: uniform, low: -1.0, high: 1.0}}
  - name: C
    dtype: fp32
    role: out
    shape: [M, N]
    reduction: {length: K, operands: [A, B], accumulate: fp32}
baseline:
  source: baseline.c
  label: i-j-k, k upwards
  why: >-
    The textbook loop nest; the fixture only needs a reference order.
surface: [kernel.c]
candidate:
  template: baseline.c
floor:
  bytes: 4*(M*K + K*N + M*N)
  flops: 2*M*N*K
YAML
# kernel.c for ORDER (up | down) and ROUND (a macro applied to each input).
gemm() {
	cat <<C
#include <stdint.h>
#include <string.h>
#include "atb/kernel.h"
static float keep(float x) { return x; }
/* to the nearest fp16 significand (10 bits, ties to even): a precision downgrade */
static float half(float x)
{
	uint32_t u;

	memcpy(&u, &x, 4);
	u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
	memcpy(&x, &u, 4);
	return x;
}
int atb_kernel(const struct atb_kernel_args *a)
{
	const float *A = a->buffers[0], *B = a->buffers[1];
	float *C = a->buffers[2];
	int64_t M = a->ints[0], N = a->ints[1], K = a->ints[2], i, j, k;

	(void)keep;
	(void)half;
	for (i = 0; i < M; i++)
		for (j = 0; j < N; j++) {
			float s = 0;

			for (k = 0; k < K; k++) {
				int64_t kk = $1;

				s += $2(A[i * K + kk]) * $2(B[kk * N + j]);
			}
			C[i * N + j] = s;
		}
	return 0;
}
C
}
gemm k keep >task/baseline.c
gemm "K - 1 - k" keep >honest/kernel.c
gemm k half >fp16/kernel.c

# A runner that keeps every job it is sent and every event it writes.
cat >runner.sh <<SH
#!/bin/bash
tee -a "$TRASH/jobs.jsonl" | "$REAL" "\$@" | tee -a "\$EVENTS"
SH
chmod +x runner.sh
# The wrapper (a test instrument that records what atb sends) lives outside
# any sandbox view: these runs are unsandboxed; t6300 and u-proc test the sandbox.
export ATB_RUNNER=$TRASH/runner.sh ATB_SANDBOX=off

# measure NAME: atb measure --json of candidate NAME into out.json, events
# into NAME.ev; the verdict is read from the output, whatever the exit.
measure() {
	EVENTS=$TRASH/$1.ev "$ATB" measure --json --seeds 2 --no-naive "$TRASH/task" "$TRASH/$1" >out.json 2>err ||
		true
	jq -e . out.json >/dev/null || { cat err; return 1; }
}

test_expect "the measured job carries the reduction of C" '
	measure honest &&
	jq -se ".[0].buffers[2].reduction == {\"operands\": [\"A\", \"B\"], \"accumulate\": \"fp32\"}
		and (.[0].buffers[0] | has(\"reduction\") | not)
		and (.[0].correctness.reduction_tolerance.factor > 0)" jobs.jsonl >/dev/null
'

test_expect "an honest summation order passes correctness on every input set" '
	jq -se "[.[] | select(.event==\"correctness\" and .arm==\"candidate\")]
		| length > 0 and all(.pass)
		and any(.buffers[0].reduction_length == 1024)" honest.ev >/dev/null &&
	jq -e ".gate != \"correctness\"" out.json >/dev/null
'

test_expect "inputs rounded to fp16 in the kernel fail correctness" '
	measure fp16 &&
	jq -e ".verdict == \"rejected\" and .gate == \"correctness\"" out.json >/dev/null &&
	jq -se "[.[] | select(.event==\"correctness\" and .arm==\"candidate\" and .set==\"M=16,N=16,K=1024\")]
		| length > 0 and any(.pass | not)" fp16.ev >/dev/null
'

test_done
