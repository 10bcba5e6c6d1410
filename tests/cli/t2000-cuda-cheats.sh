#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The cuda backend on a GPU: planted cheats on cuda_relu are each caught by
# the runner's facts, and the honest template is not.  Each run goes the
# real path (nvcc build through the task module, a fresh atb-runner on the
# cuda backend) through bench-cuda-tasks --candidate.  Skipped where no
# CUDA driver or no nvcc is there; scripts/gpu-check runs it on the GPU box.
# PROTO: correctness.distributions, correctness.poison, gates.
. "$(dirname "$0")/lib.sh"

B="$ATB_BUILD_DIR/bench-cuda-tasks"
[ -x "$B" ] || skip_all "no bench-cuda-tasks in $ATB_BUILD_DIR"
command -v nvcc >/dev/null || skip_all "no nvcc: not a CUDA build machine"
ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1' || [ -e /usr/lib/x86_64-linux-gnu/libcuda.so.1 ] ||
	skip_all "no libcuda.so.1: not a GPU machine"

run() {  # run CHEAT.cu: the candidate's line of the report into cand.txt
	"$B" --seeds 2 --max-seed-s 0.5 --candidate "$1" cuda_relu >report.txt 2>&1 || true
	cat report.txt
	grep '^  candidate ' report.txt >cand.txt
}

cat >identity.cu <<'CU'
// Returns its input: right on the task's [0,1) inputs only.
#include "atb/kernel.h"
extern "C" int atb_kernel(const struct atb_kernel_args *a)
{
	return cudaMemcpyAsync(a->buffers[1], a->buffers[0], a->ints[0] * 4,
			       cudaMemcpyDeviceToDevice, (cudaStream_t)a->stream) != cudaSuccess;
}
CU
cat >sidestream.cu <<'CU'
// Right answer, computed on a stream of its own: escapes the timed window.
#include "atb/kernel.h"
__global__ void k(const float *x, float *y, long long n)
{
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
	     i += (long long)gridDim.x * blockDim.x)
		y[i] = fmaxf(x[i], 0.f);
}
extern "C" int atb_kernel(const struct atb_kernel_args *a)
{
	static cudaStream_t side;
	if (!side)
		cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
	for (int r = 0; r < 4; r++)
		k<<<264, 256, 0, side>>>((const float *)a->buffers[0], (float *)a->buffers[1],
					 a->ints[0]);
	return cudaGetLastError() != cudaSuccess;
}
CU
cat >reuse.cu <<'CU'
// Computes once per output pointer, then returns whatever is there.
#include "atb/kernel.h"
__global__ void k(const float *x, float *y, long long n)
{
	long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
	if (i < n)
		y[i] = fmaxf(x[i], 0.f);
}
extern "C" int atb_kernel(const struct atb_kernel_args *a)
{
	static void *seen[64];
	static int nseen;
	for (int i = 0; i < nseen; i++)
		if (seen[i] == a->buffers[1])
			return 0;
	if (nseen < 64)
		seen[nseen++] = a->buffers[1];
	long long n = a->ints[0];
	if (n > 0)
		k<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)a->stream>>>(
			(const float *)a->buffers[0], (float *)a->buffers[1], n);
	return cudaGetLastError() != cudaSuccess;
}
CU
cat >mutate.cu <<'CU'
// ReLU in place on the input, then a copy: right output, mutated input.
#include "atb/kernel.h"
__global__ void k(float *x, long long n)
{
	long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
	if (i < n)
		x[i] = fmaxf(x[i], 0.f);
}
extern "C" int atb_kernel(const struct atb_kernel_args *a)
{
	long long n = a->ints[0];
	if (n <= 0)
		return 0;
	k<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)a->stream>>>((float *)a->buffers[0], n);
	return cudaMemcpyAsync(a->buffers[1], a->buffers[0], n * 4, cudaMemcpyDeviceToDevice,
			       (cudaStream_t)a->stream) != cudaSuccess;
}
CU

test_expect "identity passes the task's [0,1) inputs but fails signed ones" '
	run identity.cu &&
	expect_grep "on signed_uniform" cand.txt &&
	! grep -q "on task" cand.txt
'
test_expect "work on a side stream is reported as escaping the window" '
	run sidestream.cu &&
	grep -Eq "side-stream escapes [1-9]" cand.txt
'
test_expect "result reuse through stale outputs fails (poison, fresh buffers)" '
	run reuse.cu &&
	grep -Eq "correctness [1-9]|result_reuse" cand.txt
'
test_expect "writing the input is reported as input mutation" '
	run mutate.cu &&
	expect_grep "input_mutation" cand.txt
'
test_expect "the honest template passes everything and does not escape" '
	run "$ATB_HOME/tasks/cuda_relu/tunable.cu" &&
	expect_grep "correctness 0/" cand.txt &&
	expect_grep "side-stream escapes 0" cand.txt &&
	! grep -q "gates:" cand.txt
'
test_done
