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
# (sgemm, 192^3: the tunable template has blocking, unroll and loop-order
# knobs over a cache-blocked baseline; a call takes about 6 ms) and two
# iterations: the task's default knobs, then one seeded random proposal.
# Each iteration times 8 paired seeds, one fresh runner per seed for the
# paired arms and one for the baseline alone (baseline drift), with a 64 MiB
# cache flush before every call.  On the 2-core development box, quiet, an
# iteration took 86 s (every seed ran into the protocol's 5 s budget) and 174 s
# when the drift check re-ran it: docs/run.md has the figures.
# ATB_MAIN_ITERATIONS=N searches longer (about 1.5 minutes per iteration).
set -euo pipefail

build=${1:?usage: scripts/main-job.sh BUILD_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
atb="$build/atb"
[ -x "$atb" ] || atb="$here/$build/atb"
[ -x "$atb" ] || { echo "main-job: no atb in '$build'; run 'make build' first" >&2; exit 2; }
export ATB_HOME=${ATB_HOME:-$here}

task=${ATB_MAIN_TASK:-sgemm}
iterations=${ATB_MAIN_ITERATIONS:-2}
seed=${ATB_MAIN_SEED:-1}

# Other work on the box moves every timing: say how busy it was.
load=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)
echo "== atb run $task --iterations $iterations --seed $seed (store: ${ATB_DB:-./atb.db};" \
	"load average $load on $(nproc 2>/dev/null || echo ?) cores)"
start=$(date +%s)
"$atb" run "$task" --proposer random --iterations "$iterations" --seed "$seed"
echo
echo "== atb report --last"
"$atb" report --last
echo
echo "== atb audit verify"
"$atb" audit verify
echo "== main job: $(($(date +%s) - start)) s"
