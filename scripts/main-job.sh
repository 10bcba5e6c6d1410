#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# What `make run` does: a real tuning loop on a bundled CPU task, measured
# under the frozen protocol with every gate live, then its report (the honest
# speedup beside the naive one) and a check of the audit chain.
#
#   scripts/main-job.sh BUILD_DIR
#
# Uses ./atb.db (created when absent; $ATB_DB overrides) and ./runs/.
# ATB_MAIN_TASK, ATB_MAIN_ITERATIONS and ATB_MAIN_SEED override the defaults
# (sgemm: the tunable template has blocking, unroll and loop-order knobs over
# a cache-blocked baseline).  Measured on the 2-core development box: about
# 160 s per sgemm iteration (0.2 s build, the rest paired timing on 8 seeds
# with a 64 MiB cache flush per trial), so 3 iterations take about 8 minutes.
set -euo pipefail

build=${1:?usage: scripts/main-job.sh BUILD_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
atb="$build/atb"
[ -x "$atb" ] || atb="$here/$build/atb"
[ -x "$atb" ] || { echo "main-job: no atb in '$build'; run 'make build' first" >&2; exit 2; }
export ATB_HOME=${ATB_HOME:-$here}

task=${ATB_MAIN_TASK:-sgemm}
iterations=${ATB_MAIN_ITERATIONS:-3}
seed=${ATB_MAIN_SEED:-1}

echo "== atb run $task --iterations $iterations --seed $seed (store: ${ATB_DB:-./atb.db})"
"$atb" run "$task" --proposer random --iterations "$iterations" --seed "$seed"
echo
echo "== atb report --last"
"$atb" report --last
echo
echo "== atb audit verify"
"$atb" audit verify
