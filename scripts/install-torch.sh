#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Install PyTorch from PyPI into .venv-torch/ (gitignored) for the torch
# backend's tests (tests/cli/t40*-torch*.sh, tests/unit/u-torch.c), which
# find it through ATB_PYTHON or .venv-torch/bin/python3.  The tests use CPU
# tensors only.
#
# PyPI is the only index these machines reach, and PyPI's x86_64 torch is
# the CUDA build: libtorch_cuda.so is linked at `import torch` even for CPU
# tensors, so the CUDA libraries it needs must be found, from the system or
# from PyPI's nvidia-* wheels.  torch is installed with --no-deps and what it
# needs is added in two steps, each followed by the import check:
#   1. the pure-Python packages torch imports, and the four libraries a
#      CUDA 13 toolkit lacks (cuFile, cuSPARSELt, NVSHMEM and a NCCL that has
#      ncclCommResume), at torch's pins.  Enough where the toolkit's libraries
#      are on the loader's path (this project's c-kernels machines: about
#      4 minutes, 2.1 GB).
#   2. only where step 1's import fails: the rest of torch's CUDA libraries
#      (its cuda-toolkit[...] and cuDNN requirements, at its pins), as on a
#      Debian box without the toolkit.  Triton and cuda-bindings, which CPU
#      tensors and torch.compile on the CPU do not load, are left out.
# pip is told not to warn about the requirements left out on purpose; the
# import check at the end is the test that counts.
#
# Idempotent and quiet: a venv that already imports torch is kept and
# nothing is printed.  Otherwise one line when done.  Prerequisites (python
# >= 3.10 with venv and ensurepip, i.e. Debian's python3-venv; free disk) are
# checked first, with the fix in the message.
#
# usage: scripts/install-torch.sh [VENV_DIR]      (default .venv-torch)
# exit: 0 installed (or already there); 1 a prerequisite is missing, pip
# failed, or `import torch` fails at the end (its error is printed).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-.venv-torch}
py=${PYTHON:-python3}
TORCH_VERSION=2.15.0
# torch 2.15.0's Requires-Dist (its METADATA), split as above.
step1_libs=("nvidia-cusparselt-cu13==0.8.1" "nvidia-nvshmem-cu13==3.7.2"
	"nvidia-nccl-cu13==2.30.7" nvidia-cufile)
step2_libs=("cuda-toolkit[cublas,cudart,cufft,cufile,cupti,cusolver,cusparse,nvjitlink,nvrtc,nvtx]==13.2.2"
	"nvidia-cudnn-cu13==9.26.0.51")
pure=(filelock "typing-extensions>=4.13.0" "setuptools>=77.0.3" "sympy>=1.13.3"
	"networkx>=2.5.1" jinja2 "fsspec>=0.8.5" numpy)
check='import torch; x = torch.randn(3) @ torch.randn(3); assert float(x) == float(x); print(torch.__version__)'
pipq=(-m pip install -q --disable-pip-version-check --no-warn-conflicts)

die() {
	echo "install-torch: $*" >&2
	exit 1
}

# free_gb DIR: free space, in GiB, of the filesystem DIR is (or will be) on.
free_gb() {
	local d=$1
	while [ ! -d "$d" ]; do d=$(dirname "$d"); done
	df -Pk "$d" | awk 'NR == 2 { print int($4 / 1048576) }'
}

if [ -x "$venv/bin/python3" ] && "$venv/bin/python3" -c "$check" >/dev/null 2>&1; then
	exit 0
fi

# Prerequisites.
command -v "$py" >/dev/null || die "no '$py' on PATH (apt-get install -y python3 python3-venv; or PYTHON=/path/to/python3)"
"$py" -c 'import sys; sys.exit(sys.version_info < (3, 10))' ||
	die "'$py' is Python $("$py" -c 'import platform; print(platform.python_version())'); torch $TORCH_VERSION needs 3.10 or newer (PYTHON=/path/to/python3)"
"$py" -c 'import venv, ensurepip' 2>/dev/null ||
	die "'$py' cannot create a virtual environment: no venv/ensurepip module (Debian: apt-get install -y python3-venv)"
cache=${PIP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pip}
need=4   # GiB: the venv (2.1) and the wheels in pip's cache (1.5), step 1
[ "$(free_gb "$venv")" -ge "$need" ] ||
	die "$(free_gb "$venv") GiB free where '$venv' goes; step 1 needs about $need GiB (step 2 about 7 more)"
[ "$(free_gb "$cache")" -ge 2 ] || die "$(free_gb "$cache") GiB free in pip's cache '$cache'; 2 GiB needed (or PIP_NO_CACHE_DIR=1)"

start=$(date +%s)
"$py" -m venv "$venv" || die "'$py' -m venv '$venv' failed"
vpy=$venv/bin/python3
"$vpy" -m pip --version >/dev/null 2>&1 || die "the venv '$venv' has no pip (ensurepip failed; Debian: apt-get install -y python3-venv)"
"$vpy" "${pipq[@]}" "${pure[@]}" "${step1_libs[@]}" || die "pip install of torch's Python packages and libraries failed"
"$vpy" "${pipq[@]}" --no-deps "torch==$TORCH_VERSION" || die "pip install torch==$TORCH_VERSION failed"

step=1
if ! err=$("$vpy" -c "$check" 2>&1); then
	# The system lacks CUDA libraries libtorch_cuda.so links against.
	echo "install-torch: import torch fails with the system's libraries ($(printf '%s\n' "$err" | tail -n 1 | sed 's/ in the system path.*//'));" \
		"installing torch's CUDA libraries from PyPI (about 3 GB to download)" >&2
	[ "$(free_gb "$venv")" -ge 7 ] || die "$(free_gb "$venv") GiB free where '$venv' goes; torch's CUDA libraries need about 7 GiB"
	"$vpy" "${pipq[@]}" "${step2_libs[@]}" || die "pip install of torch's CUDA libraries failed"
	step=2
fi
if ! err=$("$vpy" -c "$check" 2>&1); then
	printf '%s\n' "$err" | tail -n 5 >&2
	die "import torch fails in '$venv' after the install (above); the venv is left as it is"
fi
echo "install-torch: torch $TORCH_VERSION in $venv ready in $(( $(date +%s) - start )) s," \
	"$(du -sh "$venv" | cut -f1)$([ "$step" = 2 ] && echo ", with torch's CUDA libraries from PyPI")"
