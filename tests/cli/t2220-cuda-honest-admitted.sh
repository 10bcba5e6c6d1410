#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# No honest candidate is refused on the GPU: for every bundled CUDA task, a
# copy of its honest baseline handed in as the candidate goes through every
# gate of `atb measure` (at a sixteenth of the bundled leading dimension by
# default: T2220_SHRINK), on the protocol's paired seeds, and is admitted
# (exit 0, verdict admitted, a result stored).  The naive kernel is timed
# beside it, so each outcome also carries the honest baseline's speedup over
# the naive one with its CI (labelled, never the verdict).  Skipped where there is no CUDA driver or no nvcc;
# scripts/gpu-check runs it on the GPU box and reads the outcomes.
#
# Environment: T2220_TASKS (default every bundled task of kind cuda),
# T2220_SEEDS (default: the protocol's min_paired_seeds), T2220_SHRINK (F:
# each task's first integer parameter, its leading dimension, divided by F,
# so that the host's share of the work, generating and comparing the
# correctness inputs, is F times smaller; default 16: about 40 s a task on
# the H200, where F = 4 took 125-152 s and 1, the bundled shapes, longer
# still; the outcome's "task" still names the task), T2220_OUT (a
# folder that keeps each outcome as TASK.json, the progress as TASK.err and
# the store as atb.db; default: thrown away with the test's folder).
# PROTO: stats.min_paired_seeds, gates (every one), stats.cv_cap.
. "$(dirname "$0")/lib.sh"
. "$ATB_HOME/tests/fixtures/cheats/cuda_common.sh"
cuda_require
keep=${T2220_OUT:-$TRASH/keep}
mkdir -p "$keep"
export ATB_DB=$keep/atb.db
tasks=${T2220_TASKS:-$(grep -l '^kind: cuda' "$ATB_HOME"/tasks/*/task.yaml |
	xargs -n1 dirname | xargs -n1 basename)}
seeds=()
[ -n "${T2220_SEEDS:-}" ] && seeds=(--seeds "$T2220_SEEDS")

# The candidate is the baseline with its local includes inlined (cuda_common.sh's
# inline_local: cuda_merge_attn_states' baseline includes the task's common.cuh).
# admitted TASK: the baseline copied as the candidate is admitted.
admitted() {
	local surf base
	expect_exit 0 "$ATB" --json task show "$1" || return 1
	surf=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["surface"][0])' <"$TRASH/out")
	base=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["baseline"]["path"])' <"$TRASH/out")
	mkdir -p "cand-$1" && inline_local "$base" >"cand-$1/$surf" &&
	cuda_task_shrink "$1" "task-$1" "${T2220_SHRINK:-16}" &&
	"$ATB" measure --json "$TRASH/task-$1" "cand-$1" --naive "${seeds[@]}" \
		>"$keep/$1.json" 2>"$keep/$1.err" && rc=0 || rc=$?
	cat "$keep/$1.json"
	tail -3 "$keep/$1.err"
	test "$rc" = 0 && grep -q '"verdict": "admitted"' "$keep/$1.json" &&
		grep -Eq '"result_id": [1-9]' "$keep/$1.json"
}

for t in $tasks; do
	test_expect "$t: a copy of the honest baseline is admitted" "admitted $t"
done
test_done
