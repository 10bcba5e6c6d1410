#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# bench/kernelbench-large.sh OUTDIR: write a copy of five of atb's own
# KernelBench-format tasks (tasks/kernelbench/level1) at multi-gigabyte
# shapes, the sizes KernelBench's own level-1 problems use, for
# bench-suite's wall-per-verdict / timed-time ratio on a GPU box:
#
#   OUTDIR/level1/02_ReLU.py       4096 x 131072 fp32 (2 GiB in, 2 GiB out)
#   OUTDIR/level1/03_GELU.py       4096 x 131072 fp32 (2 GiB in, 2 GiB out)
#   OUTDIR/level1/06_Softmax.py    8192 x 32768 fp32 (1 GiB in, 1 GiB out)
#   OUTDIR/level1/07_LayerNorm.py  16384 x 16384 fp32 (1 GiB in, 1 GiB out)
#   OUTDIR/level1/09_Matmul.py     8192 x 8192 fp32 (three 256 MiB matrices)
#
# Only the shape constants change; the copy candidates in
# tasks/kernelbench/candidates/copy fit them unchanged:
#   bench-suite --device cuda --suite OUTDIR
# (these shapes need a GPU with tens of GiB free; on a CPU they take hours).
set -euo pipefail
out=${1:?usage: bench/kernelbench-large.sh OUTDIR}
src=$(cd "$(dirname "$0")/.." && pwd)/tasks/kernelbench/level1
mkdir -p "$out/level1"
scale() { # FILE NAME=VALUE...
	local f=$1; shift
	cp "$src/$f" "$out/level1/$f"
	for kv in "$@"; do
		grep -q "^${kv%%=*} = " "$out/level1/$f" ||
			{ echo "kernelbench-large: no '${kv%%=*} = ' in $f" >&2; exit 2; }
		sed -i "s/^${kv%%=*} = .*/${kv%%=*} = ${kv#*=}/" "$out/level1/$f"
	done
}
scale 02_ReLU.py ROWS=4096 COLS=131072
scale 03_GELU.py ROWS=4096 COLS=131072
scale 06_Softmax.py ROWS=8192 COLS=32768
scale 07_LayerNorm.py ROWS=16384 HIDDEN=16384
scale 09_Matmul.py N=8192
echo "kernelbench-large: 5 tasks in $out/level1"
