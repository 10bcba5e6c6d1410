#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Install the real serving engine the tests run here: llama.cpp's own
# `llama-server`, built from the llama.cpp source that the llama-cpp-python
# sdist on PyPI vendors (the server only: no Python bindings, no web UI, no
# downloads at build time), plus a Python virtual environment with `gguf`
# and `numpy` for tools/engine/make-tiny-gguf.py.  docs/engines-real.md says
# why this and not `pip install llama-cpp-python[server]`.
#
# Idempotent and quiet: when the stamp of this version is there it exits 0
# at once; otherwise it prints one line when done, and the log's tail on a
# failure (exit 1).  Where: $ATB_ENGINE_HOME, default ~/.cache/atb-engine
# (outside the work tree, so a fresh clone on the same box reuses it).
#   $ATB_ENGINE_HOME/bin/llama-server   the server
#   $ATB_ENGINE_HOME/venv/bin/python    python with gguf and numpy
# tools/engine/env.sh finds both for the tests.
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION=0.3.36   # its vendor/llama.cpp is the server we build
GGUF_VERSION=0.19.0
home=${ATB_ENGINE_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/atb-engine}
stamp="$home/.stamp-llama-cpp-python-$LLAMA_CPP_PYTHON_VERSION-gguf-$GGUF_VERSION"
log="$home/install.log"

ready() {
	[ -f "$stamp" ] && [ -x "$home/bin/llama-server" ] && [ -x "$home/venv/bin/python" ]
}
ready && exit 0

mkdir -p "$home"
exec 9>"$home/.lock"
flock 9              # another install of the same home: wait for it
ready && exit 0

here=$(cd "$(dirname "$0")" && pwd)
start=$(date +%s)
: >"$log"
fail() {
	echo "install-engine-deps: $1 (log: $log)" >&2
	tail -n 25 "$log" >&2 || true
	exit 1
}

# Build tools: Debian packages, installed only when missing and only as root.
need=()
for t in cmake:cmake ninja:ninja-build g++:g++ flock:util-linux; do
	command -v "${t%%:*}" >/dev/null || need+=("${t#*:}")
done
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
	[ "$(id -u)" -eq 0 ] || fail "missing packages: ${need[*]} (apt-get install -y ${need[*]})"
	export DEBIAN_FRONTEND=noninteractive
	{ apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}"; } \
		>>"$log" 2>&1 || fail "cannot install ${need[*]}"
fi

# Python side: gguf + numpy to write models; scikit-build-core only so that
# `pip download` of the sdist can read its metadata without an isolated
# build environment (which would install its build requirements again).
if [ ! -x "$home/venv/bin/python" ]; then
	python3 -m venv "$home/venv" >>"$log" 2>&1 || fail "cannot create $home/venv"
fi
"$home/venv/bin/pip" install -q --disable-pip-version-check "gguf==$GGUF_VERSION" numpy \
	"scikit-build-core>=0.9.2" >>"$log" 2>&1 || fail "pip install gguf numpy failed"

# The sdist (its llama.cpp source), kept for the next build.
src="$home/src"
sdist="$src/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz"
mkdir -p "$src"
if [ ! -f "$sdist" ]; then
	"$home/venv/bin/pip" download -q --disable-pip-version-check --no-deps \
		--no-binary :all: --no-build-isolation -d "$src" \
		"llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" >>"$log" 2>&1 ||
		fail "pip download llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION failed"
fi
tree="$src/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION"
if [ ! -f "$tree/.unpacked" ]; then
	rm -rf "$tree"
	tar -xzf "$sdist" -C "$src" "llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp" \
		>>"$log" 2>&1 || fail "cannot unpack $sdist"
	touch "$tree/.unpacked"
fi

# Only the server target; native CPU code (it runs on the box that built it);
# no BLAS, no OpenSSL, no libcurl, no web UI (the UI step would download);
# less optimisation outside the arithmetic (tools/engine/llama-build.cmake).
# An interrupted build resumes where it stopped.
bld="$home/build"
cmake -S "$tree/vendor/llama.cpp" -B "$bld" -G Ninja -DCMAKE_BUILD_TYPE=Release \
	-DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON -DGGML_BLAS=OFF \
	-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
	-DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF \
	-DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
	-DCMAKE_PROJECT_INCLUDE="$here/../tools/engine/llama-build.cmake" \
	>>"$log" 2>&1 || fail "cmake configure of llama.cpp failed"
ninja -C "$bld" -j "${ATB_ENGINE_JOBS:-2}" llama-server >>"$log" 2>&1 ||
	fail "building llama-server failed"
mkdir -p "$home/bin"
install -m 0755 "$bld/bin/llama-server" "$home/bin/llama-server.new"
mv -f "$home/bin/llama-server.new" "$home/bin/llama-server"
"$home/bin/llama-server" --version >>"$log" 2>&1 || fail "the built llama-server does not run"
rm -rf "$bld" "$tree"
touch "$stamp"
echo "install-engine-deps: llama-server (llama-cpp-python $LLAMA_CPP_PYTHON_VERSION's llama.cpp)" \
	"and gguf $GGUF_VERSION in $home, $(($(date +%s) - start)) s"
