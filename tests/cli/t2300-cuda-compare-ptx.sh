#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The GPU comparison's PTX (src/cuda/compare_ptx.inc, committed so the build
# needs no nvcc) is what src/cuda/compare.cu compiles to: an edit of the
# kernel without scripts/gen-cuda-ptx fails here, wherever nvcc is
# installed (this box has the CUDA toolkit; the kernel itself runs in
# u-compare's gpu tests on the GPU machine).  The PTX holds no fused
# multiply-add (the host rule rounds every product and sum on its own).
. "$(dirname "$0")/lib.sh"

nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null) ||
	skip_all "no nvcc here (the CUDA toolkit): the PTX cannot be regenerated to compare"

test_expect "the committed PTX is what the kernel's source compiles to" '
	NVCC=$nvcc "$ATB_SOURCE_DIR/scripts/gen-cuda-ptx" --check
'

test_expect "the PTX rounds every double operation on its own (no fma), one entry per dtype" '
	! grep -q "fma" "$ATB_SOURCE_DIR/src/cuda/compare_ptx.inc" &&
	for d in fp32 fp64 int32 int64 fp16 bf16; do
		grep -q "\.visible \.entry atb_dcmp_$d(" "$ATB_SOURCE_DIR/src/cuda/compare_ptx.inc" || exit 1
	done
'

test_done
