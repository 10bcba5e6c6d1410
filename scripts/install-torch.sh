#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Install CPU PyTorch from PyPI into .venv-torch/ (gitignored) for the torch
# backend's tests (tests/cli/t40*-torch*.sh, tests/unit/u-torch.c), which
# find it through ATB_PYTHON or .venv-torch/bin/python3.
#
# PyPI's x86_64 torch wheel is the CUDA build and its declared dependencies
# pull several GiB of nvidia-* wheels (cuda-toolkit, cudnn, triton, ...).
# libtorch_cuda.so is linked at import even on CPU tensors, but this
# machine kind (c-kernels) has the CUDA 13 toolkit's libraries in
# /usr/local/cuda, so torch is installed with --no-deps and only what the
# toolkit lacks is added: cuFile, cuSPARSELt, NVSHMEM and a newer NCCL
# (the toolkit's has no ncclCommResume), at the versions torch pins, plus
# the pure-Python packages torch imports.  The script then checks that
# `import torch; torch.randn(3) @ torch.randn(3)` works.  Seen here: about
# 4 minutes (the 1.3 GB torch wheel is most of it) and 2.1 GB on disk.
# Idempotent: an existing venv that already imports torch is kept.  No
# network but PyPI.
#
# usage: scripts/install-torch.sh [VENV_DIR]      (default .venv-torch)
# exit: 0 installed (or already there); 1 the install or the check failed.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-.venv-torch}
py=${PYTHON:-python3}
check='import torch; x = torch.randn(3) @ torch.randn(3); print("torch", torch.__version__, "ok", float(x) == float(x))'

if [ -x "$venv/bin/python3" ] && "$venv/bin/python3" -c "$check" 2>/dev/null; then
	echo "install-torch: $venv already has torch"
	exit 0
fi
start=$(date +%s)
"$py" -m venv "$venv"
"$venv/bin/python3" -m pip install -q --no-deps "torch==2.15.0"
# The shared objects libtorch_cuda.so needs that the CUDA toolkit here lacks,
# at torch 2.15's pins (Requires-Dist), then what torch imports in Python.
"$venv/bin/python3" -m pip install -q --no-deps "nvidia-cusparselt-cu13==0.8.1" \
	"nvidia-nvshmem-cu13==3.7.2" "nvidia-nccl-cu13==2.30.7" nvidia-cufile
"$venv/bin/python3" -m pip install -q filelock typing-extensions sympy networkx jinja2 fsspec numpy
"$venv/bin/python3" -c "$check"
echo "install-torch: $venv ready in $(( $(date +%s) - start )) s, $(du -sh "$venv" | cut -f1)"
