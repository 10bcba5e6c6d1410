#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# ctest: lock timing -- an honest verdict from real timing (CMakeLists.txt)
# atb calibrate, the A/A self-test, on the CPU: bad input is refused with
# exact messages (exit 2) before anything is stored; a calibration of two
# copies of the fixture task relu-work (fixed CPU work, a measurement in
# about 25 s on a loaded box; named twice: two copies, two measurements)
# is interrupted after its first task (exit 130), resumed, and its report's
# structure and arithmetic are checked against its own rows and the store
# (the run, its plan, one iteration and one labelled job per copy).  What a
# copy reads is the box's business: no assertion needs it to read 1.000;
# the exit code must agree with the verdict the report prints.  The math
# itself (Wilson bounds, median, refusals by reason) is u-calibrate's.
# PROTO: stats.min_paired_seeds, stats.ci_level.
. "$(dirname "$0")/lib.sh"

CHEATS=$ATB_SOURCE_DIR/tests/fixtures/cheats
[ -x "$ATB_BUILD_DIR/atb-runner" ] || skip_all "no atb-runner"
command -v cc >/dev/null || skip_all "no C compiler"
command -v jq >/dev/null || skip_all "jq not installed"
command -v sqlite3 >/dev/null || skip_all "sqlite3 not installed"
export ATB_DB=$TRASH/c.db
WORK=$CHEATS/tasks/relu-work

# refused CODE MESSAGE ARGS...: atb calibrate ARGS exits CODE with MESSAGE
# as its first stderr line, and leaves no store behind.
refused() {
	local code=$1 msg=$2; shift 2
	expect_exit "$code" "$ATB" calibrate "$@" &&
	[ "$(head -1 "$TRASH/err")" = "$msg" ] ||
		{ echo "stderr:"; cat "$TRASH/err"; echo "wanted: $msg"; return 1; }
	[ ! -e "$ATB_DB" ] || { echo "a store was created"; return 1; }
}

test_expect "--help documents the task sets, totals, targets and exit codes" '
	"$ATB" calibrate --help >h &&
	for w in "--kind cpu|cuda" "--suite DIR" "coverage" "false refusals" "--min-admitted" \
		"--max-median-dev" "calibrate copy" "1 it ran and a target is missed"; do
		expect_grep "$w" h || exit 1
	done &&
	"$ATB" --help >g && expect_grep "calibrate" g
'

test_expect "bad input: exit 2 with exact messages, nothing stored" '
	refused 2 "atb: no task named '\''nosuch'\'' in '\''$ATB_HOME/tasks'\'' and no task folder '\''nosuch'\'' here (see '\''atb task list'\'')" nosuch &&
	refused 2 "atb calibrate: bad --kind '\''gpu'\'': cpu or cuda" --kind gpu &&
	refused 2 "atb calibrate: no task set: give --kind cpu|cuda, TASK... or --suite DIR" &&
	refused 2 "atb calibrate: give one task set: --kind, TASK... or --suite, not several" \
		relu --kind cpu &&
	refused 2 "atb calibrate: --filter, --python, --device and --timeout-per-task are for --suite" \
		relu --filter "x*" &&
	refused 2 "atb calibrate: bad --min-coverage '\''1.5'\'': expected a number from -1 to 1" \
		relu --min-coverage 1.5 &&
	refused 2 "atb calibrate: unknown option '\''--bogus'\''" relu --bogus &&
	refused 2 "atb: task '\''engine-llamacpp-random'\'' is an engine task: calibrate copies kernel tasks (kinds cpu and cuda)" \
		engine-llamacpp-random &&
	refused 2 "atb: task '\''$ATB_HOME/tasks/kernelbench/level1/02_ReLU.py'\'' is of kind torch: give a KernelBench-format folder with --suite" \
		"$ATB_HOME/tasks/kernelbench/level1/02_ReLU.py" &&
	refused 2 "atb: no suite folder '\''$TRASH/none'\''" --suite "$TRASH/none"
'

test_expect "a calibration stopped by SIGINT after its first copy exits 130, resumable" '
	"$ATB" --json calibrate "$WORK" "$WORK" --runs-dir "$TRASH/runs" >first.json 2>first.err &
	pid=$!
	# the first task has begun once its folder exists: the stop waits for it
	for i in $(seq 3000); do   # 5 minutes: a loaded box
		ls -d "$TRASH"/runs/*/task-0 >/dev/null 2>&1 && break
		kill -0 $pid 2>/dev/null || break
		sleep 0.1
	done
	kill -INT $pid
	wait $pid && rc=0 || rc=$?
	[ "$rc" = 130 ] || { echo "exit $rc"; cat first.err; exit 1; }
	jq -e ".interrupted == true and .planned == 2 and .done == 1 and (.tasks | length) == 1
		and .mode == \"tasks\" and (.run | length) == 12" first.json >/dev/null &&
	expect_grep "continue it with '\''atb calibrate --resume" first.err &&
	expect_grep "task 1/2 $WORK  outcome" first.err &&
	jq -r .run first.json >run_id
'

test_expect "--resume measures the second copy; the report is its rows" '
	run=$(cat run_id) &&
	"$ATB" --json calibrate --resume "$run" --runs-dir "$TRASH/runs" >r.json 2>r.err &&
	rc=0 || rc=$?
	[ "$rc" = 0 ] || [ "$rc" = 1 ] || { echo "exit $rc"; cat r.err; exit 1; }
	expect_grep "task 2/2 $WORK  outcome" r.err &&
	jq -e --arg run "$run" --arg w "$WORK" "
		.run == \$run and .interrupted == false and .planned == 2 and .done == 2
		and .paired_seeds >= 2 and .protocol_version >= 2 and .copies == null
		and .set == \"tasks \" + \$w + \" \" + \$w
		and ([.tasks[].k] == [0, 1]) and all(.tasks[]; .task == \$w and .kind == \"cpu\")
		and all(.tasks[]; if .admitted then
			.outcome == \"usable\" and .ci_low <= .speedup and .speedup <= .ci_high
			and .covers_1 == (.ci_low <= 1 and 1 <= .ci_high) and .reason == null
			and .result_id > 0
			and (.bootstrap_interval | length) == 2
			and .ci_low < .bootstrap_interval[0] and .bootstrap_interval[1] < .ci_high
		else
			.outcome != \"usable\" and .speedup == null and .covers_1 == null
			and (.reason | type) == \"string\"
		end)
		and .totals.tasks == 2
		and .totals.admitted == ([.tasks[] | select(.admitted)] | length)
		and .totals.covered == ([.tasks[] | select(.covers_1 == true)] | length)
		and .totals.refused == 2 - .totals.admitted
		and .totals.admitted_rate == .totals.admitted / 2
		and .totals.false_refusal_rate == .totals.refused / 2
		and ([.totals.refusals[].count] | add // 0) == .totals.refused
		and .totals.admitted_ci_low <= .totals.admitted_rate
		and .totals.admitted_rate <= .totals.admitted_ci_high
		and .totals.ci_level > 0 and .totals.ci_level < 1
		and (if .totals.admitted > 0 then
			.totals.coverage == .totals.covered / .totals.admitted
			and .totals.covered_bootstrap == ([.tasks[] | select(.admitted)
				| select(.bootstrap_interval[0] <= 1 and 1 <= .bootstrap_interval[1])] | length)
			and .totals.coverage_bootstrap == .totals.covered_bootstrap / .totals.admitted
			and .totals.coverage_ci_low <= .totals.coverage
			and .totals.coverage <= .totals.coverage_ci_high
			and .totals.median_abs_dev <= .totals.max_abs_dev
			and .totals.max_abs_dev == ([.tasks[] | select(.admitted) | (.speedup - 1) | fabs] | max)
		else .totals.coverage == null and .totals.median_abs_dev == null end)
		and .targets == {min_admitted: 0.98, min_coverage: 0.9, max_median_dev: 0.003}
		and .verdict.pass == (.verdict.admitted_ok and .verdict.coverage_ok and .verdict.median_ok)
		and (.verdict.pass as \$p | .verdict.line
			| startswith(if \$p then \"pass: \" else \"fail: \" end))
		" r.json >/dev/null &&
	want=$(jq -r "if .verdict.pass then 0 else 1 end" r.json) &&
	[ "$rc" = "$want" ] || { echo "exit $rc, verdict wants $want"; exit 1; }
'

# A copy the box refused (noise: a loaded box, e.g. under ASan beside other
# tests) has a labelled rejection and no job row; either names the copy.
test_expect "the store holds the run, its plan, a row and a labelled job or refusal per copy" '
	run=$(cat run_id) &&
	[ "$(sqlite3 "$ATB_DB" "SELECT proposer || \" \" || iterations FROM run WHERE id = '\''$run'\''")" = "calibrate 2" ] &&
	[ "$(sqlite3 "$ATB_DB" "SELECT count(*) FROM iteration WHERE run = '\''$run'\''")" = 2 ] &&
	[ "$(sqlite3 "$ATB_DB" "SELECT count(*) FROM audit WHERE kind = '\''calibrate.plan'\''")" = 1 ] &&
	n=$(sqlite3 "$ATB_DB" "SELECT count(*) FROM (SELECT uuid FROM job
		WHERE candidate = '\''calibrate copy $run relu-work'\'' UNION SELECT job_uuid FROM rejection
		WHERE json_extract(detail, '\''\$.candidate'\'') = '\''calibrate copy $run relu-work'\'')") &&
	{ [ "$n" -ge 2 ] || { echo "# $n labelled measurements"; sqlite3 "$ATB_DB" "SELECT rule, reason FROM rejection"; exit 1; }; } &&
	"$ATB" audit verify >/dev/null
'

test_expect "a done calibration resumed measures nothing and reports the same" '
	run=$(cat run_id) &&
	n=$(sqlite3 "$ATB_DB" "SELECT count(*) FROM job") &&
	"$ATB" --json calibrate --resume "$run" >again.json 2>/dev/null; rc=$?
	[ "$rc" = 0 ] || [ "$rc" = 1 ] &&
	[ "$(sqlite3 "$ATB_DB" "SELECT count(*) FROM job")" = "$n" ] &&
	[ "$(jq -S "del(.wall_s)" again.json)" = "$(jq -S "del(.wall_s)" r.json)" ]
'

test_expect "targets decide the exit code; the table prints the verdict line" '
	run=$(cat run_id) &&
	expect_exit 0 "$ATB" calibrate --resume "$run" --min-admitted -1 --min-coverage -1 \
		--max-median-dev -1 &&
	expect_grep "pass: no target checked" "$TRASH/out" &&
	expect_grep "totals over 2 tasks:" "$TRASH/out" &&
	expect_grep "false refusals" "$TRASH/out" &&
	# a rate above what it admitted, or a median deviation of 0, cannot be met
	adm=$(jq -r .totals.admitted_rate r.json) &&
	med=$(jq -r .totals.median_abs_dev r.json) &&
	if [ "$adm" != 1 ]; then
		expect_exit 1 "$ATB" calibrate --resume "$run" --min-admitted 1
	elif [ "$med" != 0 ]; then
		expect_exit 1 "$ATB" calibrate --resume "$run" --max-median-dev 0
	else
		echo "# every copy read exactly 1: nothing can fail"; exit 0
	fi &&
	expect_grep "fail: " "$TRASH/out"
'

# A KernelBench-format folder goes through atb suite: one task whose copy is
# written but can never run (it imports a module that does not exist: a
# refusal with or without torch), one without the reference class (no copy:
# no_candidate).  Seconds, no torch needed.
SUITE=$ATB_SOURCE_DIR/tests/fixtures/calibrate/suite
test_expect "--suite: copies with ModelNew, every refusal counted by reason, exit 1" '
	expect_exit 1 "$ATB" --json calibrate --suite "$SUITE" --runs-dir "$TRASH/sruns" &&
	cp "$TRASH/out" s.json &&
	jq -e ".mode == \"suite\" and .planned == 2 and .done == 2 and .interrupted == false
		and (.copies | test(\"/sruns/calibrate-[0-9a-f]{12}/copies$\"))
		and ([.tasks[].task] == [\"01_Unloadable.py\", \"02_NoModel.py\"])
		and all(.tasks[]; .kind == \"torch\" and .admitted == false and .speedup == null
			and (.reason | type) == \"string\")
		and .tasks[1].outcome == \"no_candidate\" and .tasks[0].outcome != \"usable\"
		and .totals.tasks == 2 and .totals.admitted == 0 and .totals.refused == 2
		and .totals.admitted_rate == 0 and .totals.false_refusal_rate == 1
		and .totals.coverage == null and .totals.median_abs_dev == null
		and .totals.refusals.no_candidate == {count: 1, rate: 0.5}
		and ([.totals.refusals[].count] | add) == 2
		and .verdict.pass == false and .verdict.admitted_ok == false
		and .verdict.coverage_ok == false and .verdict.median_ok == false" s.json >/dev/null &&
	c=$(jq -r .copies s.json) &&
	[ -f "$c/01_Unloadable.py" ] && [ ! -e "$c/02_NoModel.py" ] &&
	grep -q "^class ModelNew(torch.nn.Module):" "$c/01_Unloadable.py" &&
	grep -q "super(ModelNew, self)" "$c/01_Unloadable.py" &&
	! grep -qw Model "$c/01_Unloadable.py" &&
	[ "$(sed "s/ModelNew/Model/g" "$c/01_Unloadable.py")" = "$(cat "$SUITE/01_Unloadable.py")" ] &&
	[ "$(sqlite3 "$ATB_DB" "SELECT proposer FROM run WHERE id = '\''$(jq -r .run s.json)'\''")" = suite ]
'

test_expect "--suite: resumed, the same report; a suite of other candidates is not a calibration" '
	expect_exit 1 "$ATB" --json calibrate --resume "$(jq -r .run s.json)" &&
	[ "$(jq -S "del(.wall_s)" "$TRASH/out")" = "$(jq -S "del(.wall_s)" s.json)" ] &&
	mkdir -p other &&
	"$ATB" --json suite "$SUITE" --candidates other --quiet >o.json &&
	run=$(jq -r .run o.json) &&
	expect_exit 2 "$ATB" calibrate --resume "$run" &&
	[ "$(head -1 "$TRASH/err")" = "atb: run '\''$run'\'' is a suite of candidates '\''$TRASH/other'\'', not a calibration; resume it with '\''atb suite --resume'\''" ]
'

test_expect "--resume of another run's kind or of no run is refused" '
	expect_exit 2 "$ATB" calibrate --resume nope &&
	[ "$(head -1 "$TRASH/err")" = "atb: no run '\''nope'\'' in store '\''$ATB_DB'\''" ] &&
	expect_exit 2 "$ATB" calibrate --resume "$(cat run_id)" relu &&
	[ "$(head -1 "$TRASH/err")" = "atb calibrate: give a task set or --resume RUN_ID, not both" ] &&
	expect_exit 2 "$ATB" calibrate --resume "$(cat run_id)" --suite "$TRASH" &&
	[ "$(head -1 "$TRASH/err")" = "atb: calibration '\''$(cat run_id)'\'' is of bundled or named tasks: --suite and --python are for a calibration of a KernelBench-format folder" ] &&
	expect_exit 2 "$ATB" calibrate relu --allow-other-box &&
	[ "$(head -1 "$TRASH/err")" = "atb calibrate: --allow-other-box is for --resume" ]
'
test_done
