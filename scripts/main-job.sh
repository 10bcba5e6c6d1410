#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# What `make run` does: a real tuning loop on a bundled CPU task, measured
# under the frozen protocol with every gate live, then its report (the honest
# speedup beside the naive one) and a check of the audit chain.
#
#   scripts/main-job.sh BUILD_DIR
#
# Uses ./atb.db (created when absent; $ATB_DB overrides) and ./runs/.
# ATB_MAIN_TASK, ATB_MAIN_ITERATIONS and ATB_MAIN_SEED override the defaults.
set -euo pipefail

build=${1:?usage: scripts/main-job.sh BUILD_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
atb="$build/atb"
[ -x "$atb" ] || atb="$here/$build/atb"
[ -x "$atb" ] || { echo "main-job: no atb in '$build'; run 'make build' first" >&2; exit 2; }
export ATB_HOME=${ATB_HOME:-$here}

task=${ATB_MAIN_TASK:-sgemm}
iterations=${ATB_MAIN_ITERATIONS:-4}
seed=${ATB_MAIN_SEED:-1}

echo "== atb run $task --iterations $iterations --seed $seed (store: ${ATB_DB:-./atb.db})"
"$atb" run "$task" --proposer random --iterations "$iterations" --seed "$seed"
echo
echo "== atb report --last"
"$atb" report --last
echo
echo "== atb audit verify"
"$atb" audit verify
