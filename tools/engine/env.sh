# SPDX-License-Identifier: GPL-3.0-or-later
# Source this to find the real engine that scripts/install-engine-deps.sh
# installed.  Sets, without printing anything:
#   ATB_ENGINE_HOME   where it lives (default ~/.cache/atb-engine)
#   LLAMA_SERVER      path of llama-server ($LLAMA_SERVER if already set)
#   ENGINE_PY         python with gguf and numpy
#   ENGINE_MISSING    "" when both are there, else why not (for a skip line)
# and puts $ATB_ENGINE_HOME/bin first on PATH, so an engine spec's argv
# "llama-server" resolves to it.
: "${ATB_ENGINE_HOME:=${XDG_CACHE_HOME:-$HOME/.cache}/atb-engine}"
: "${LLAMA_SERVER:=$ATB_ENGINE_HOME/bin/llama-server}"
ENGINE_PY=$ATB_ENGINE_HOME/venv/bin/python
ENGINE_MISSING=
if [ ! -x "$LLAMA_SERVER" ]; then
	ENGINE_MISSING="llama-server not installed at $LLAMA_SERVER (run scripts/install-engine-deps.sh)"
elif ! "$ENGINE_PY" -c 'import gguf, numpy' 2>/dev/null; then
	ENGINE_MISSING="python with gguf not installed at $ENGINE_PY (run scripts/install-engine-deps.sh)"
fi
case ":$PATH:" in
*":$(dirname "$LLAMA_SERVER"):"*) ;;
*) PATH=$(dirname "$LLAMA_SERVER"):$PATH ;;
esac
export ATB_ENGINE_HOME LLAMA_SERVER ENGINE_PY ENGINE_MISSING PATH
