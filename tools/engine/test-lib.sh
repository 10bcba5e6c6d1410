# SPDX-License-Identifier: GPL-3.0-or-later
# Shared set-up of the real-engine tests tests/cli/t32*-llama*.sh, sourced
# after tests/cli/lib.sh.  Finds llama-server and the gguf python
# (tools/engine/env.sh); where they are missing the test is skipped with the
# reason, except under CI (CI=true), where .ci/run installs them and a missing
# engine is a failure, never a skip.  Then writes the tiny chain model
# (tools/engine/make-tiny-gguf.py, seed 1) once per version of the generator
# into $ATB_ENGINE_HOME/models/ and exports its path as ATB_TINY_GGUF, which
# the engine tasks tasks/engine-llamacpp-*/engine.yaml name as their model.
. "$ATB_SOURCE_DIR/tools/engine/env.sh"

if [ -n "$ENGINE_MISSING" ]; then
	if [ "${CI:-}" = true ]; then
		echo "not ok - real engine missing under CI: $ENGINE_MISSING"
		exit 1
	fi
	skip_all "$ENGINE_MISSING"
fi

LLAMA_TASKS=$ATB_SOURCE_DIR/tasks
llama_model() { # SEED: path of the tiny model of that seed, written once
	local gen=$ATB_SOURCE_DIR/tools/engine/make-tiny-gguf.py key out
	key=$(sha256sum "$gen" | cut -c1-12)
	out=$ATB_ENGINE_HOME/models/tiny-s$1-$key.gguf
	if [ ! -s "$out" ]; then
		mkdir -p "$ATB_ENGINE_HOME/models" &&
			"$ENGINE_PY" "$gen" "$out.$$" --seed "$1" && mv -f "$out.$$" "$out" || return 1
	fi
	echo "$out"
}
ATB_TINY_GGUF=$(llama_model 1) || { echo "not ok - cannot write the tiny model"; exit 1; }
export ATB_TINY_GGUF

# One real-engine test at a time (ctest -j runs scripts side by side): two
# servers on two cores would time each other.  Released when the test exits.
exec 8>"$ATB_ENGINE_HOME/.test.lock"
flock 8
