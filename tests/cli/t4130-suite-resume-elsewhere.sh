#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# ctest: lock timing -- an honest verdict from real timing (CMakeLists.txt)
# A calibration over a KernelBench-format suite (atb suite underneath) that
# survives a lost machine: started on two of the bundled torch tasks (01
# add/scale, 05 sum; sizes cut for a CPU) in folder A, killed with SIGKILL
# once the first task's row is in the store, then the store, its audit
# mirror, the runs folder (the copies) and the suite folder are copied to
# folder B and A is moved away, so no stored path exists any more.  From B:
# a resume without the suite folder is refused naming the missing folder; a
# changed task file is refused naming it, nothing stored; with the suite
# folder given again (its layout changed: the task is found by its
# content), the first task is not measured again (same row, same result
# id, one result for it), the second is measured from a clean folder, the
# resume is an audit entry with the new paths, and 'atb db check' and 'atb
# audit verify' pass on the copy.  Slow: each task is a full protocol job,
# a minute or more on a loaded 2-core box.  Skipped (77) without torch.
. "$(dirname "$0")/lib.sh"

command -v sqlite3 >/dev/null || skip_all "sqlite3 is needed to read the store"
command -v jq >/dev/null || skip_all "jq not installed"
[ -x "$ATB_BUILD_DIR/atb-runner" ] || skip_all "no atb-runner in $ATB_BUILD_DIR"
need_torch_cpu "$ATB_BUILD_DIR/atb-runner"
export ATB_PYTHON=$PY
KB="$ATB_HOME/tasks/kernelbench"

mkdir -p A/kb/level1
for f in "$KB"/level1/01_*.py "$KB"/level1/05_*.py; do
	sed 's/^ROWS = .*/ROWS = 128/; s/^COLS = .*/COLS = 256/' "$f" >A/kb/level1/"$(basename "$f")"
done

test_expect "started in A, killed (SIGKILL) after its first task" '
	"$ATB" --db A/c.db calibrate --suite A/kb --device cpu --quiet --json \
		>first.json 2>first.err &
	pid=$!
	for i in $(seq 6000); do
		n=$(sqlite3 A/c.db "SELECT count(*) FROM iteration" 2>/dev/null || echo 0)
		[ "${n:-0}" -ge 1 ] && break; sleep 0.2
	done
	kill -9 $pid; wait $pid; rc=$?
	test $rc -eq 137 &&
	test "$(sqlite3 A/c.db "SELECT count(*) FROM iteration")" = 1 &&
	sqlite3 A/c.db "SELECT id FROM run" >run_id &&
	sqlite3 A/c.db "SELECT k, outcome, job_uuid, result, rejection, created FROM iteration WHERE k = 0" >row0 &&
	sqlite3 A/c.db "SELECT outcome FROM iteration WHERE k = 0" >out0 &&
	sqlite3 A/c.db "SELECT IFNULL(result, 0) FROM iteration WHERE k = 0" >rid0 &&
	sqlite3 A/c.db "SELECT count(*) FROM audit WHERE payload LIKE '\''%level1/01_Add_Scale.py%'\''" >aud0 &&
	test "$(cat aud0)" -ge 2 &&
	echo "# first task: $(cat out0), result $(cat rid0), $(cat aud0) audit entries name it" &&
	ls A/c.db.audit.jsonl A/runs/calibrate-*/copies/level1/01_Add_Scale.py >/dev/null
'

# Another machine: everything under another path, the old one gone.
cp -a A B && mv A A.gone
run=$(cat run_id)

test_expect "resumed elsewhere without the suite folder: refused, naming it, nothing stored" '
	expect_exit 2 "$ATB" --db B/c.db calibrate --resume "$run" --quiet &&
	[ "$(head -1 "$TRASH/err")" = "atb: suite folder '\''$TRASH/A/kb'\'' of run '\''$run'\'' is not here; give it with --suite DIR" ] ||
		{ cat "$TRASH/err"; exit 1; }
	test "$(sqlite3 B/c.db "SELECT count(*) FROM iteration")" = 1 &&
	test "$(sqlite3 B/c.db "SELECT count(*) FROM audit WHERE kind = '\''suite.resume'\''")" = 0
'

test_expect "a task file changed since the plan: refused, naming it, nothing stored" '
	cp B/kb/level1/05_Sum_Dim.py orig05 &&
	echo "# edited" >>B/kb/level1/05_Sum_Dim.py &&
	expect_exit 2 "$ATB" --db B/c.db calibrate --resume "$run" --suite B/kb --quiet &&
	grep -q "^atb: task file '\''$TRASH/B/kb/level1/05_Sum_Dim.py'\'' changed since suite '\''$run'\'' was planned (sha256 [0-9a-f]\{12\}, planned [0-9a-f]\{12\}): restore it or start a new suite$" "$TRASH/err" ||
		{ cat "$TRASH/err"; exit 1; }
	test "$(sqlite3 B/c.db "SELECT count(*) FROM iteration")" = 1 &&
	cp orig05 B/kb/level1/05_Sum_Dim.py
'

test_expect "resumed from the copies: the done task kept, the killed one measured again" '
	mv B/kb/level1 B/kb/moved &&
	"$ATB" --db B/c.db --json calibrate --resume "$run" --suite B/kb --quiet \
		--min-admitted -1 --min-coverage -1 --max-median-dev -1 >r.json 2>r.err ||
		{ cat r.err; exit 1; }
	test "$(sqlite3 B/c.db "SELECT group_concat(k) FROM (SELECT k FROM iteration ORDER BY k)")" = "0,1" &&
	test "$(sqlite3 B/c.db "SELECT k, outcome, job_uuid, result, rejection, created FROM iteration WHERE k = 0")" = "$(cat row0)" &&
	test "$(jq -r ".tasks[0].outcome" r.json)" = "$(cat out0)" &&
	test "$(jq -r ".tasks[0].result_id // 0" r.json)" = "$(cat rid0)" &&
	jq -e --arg b "$TRASH/B" "
		.done == 2 and .planned == 2 and .interrupted == false
		and ([.tasks[].task] == [\"level1/01_Add_Scale.py\", \"level1/05_Sum_Dim.py\"])
		and (.copies | startswith(\$b + \"/runs/calibrate-\"))
		and .set == (\$b + \"/kb\") and (.boxes | length) == 1" r.json >/dev/null ||
		{ cat r.json; exit 1; }
	# the first task was not measured again: no audit entry names it since the
	# kill (a measurement, a gate decision, an ingest or a rejection would)
	test "$(sqlite3 B/c.db "SELECT count(*) FROM audit WHERE payload LIKE '\''%level1/01_Add_Scale.py%'\''")" = "$(cat aud0)" &&
	test "$(sqlite3 B/c.db "SELECT count(*) FROM audit WHERE payload LIKE '\''%level1/05_Sum_Dim.py%'\''")" -ge 3 &&
	sqlite3 B/c.db "SELECT payload FROM audit WHERE kind = '\''suite.resume'\''" >resume.json &&
	test "$(wc -l <resume.json)" = 1 &&
	jq -e --arg b "$TRASH/B" --arg run "$run" \
		".run == \$run and .k == 1 and .task == \"level1/05_Sum_Dim.py\"
		 and .suite == (\$b + \"/kb\") and .runs == (\$b + \"/runs\")
		 and (.candidates | startswith(\$b + \"/runs/calibrate-\")) and .other_box == false" \
		resume.json >/dev/null || { cat resume.json; exit 1; }
	"$ATB" --db B/c.db db check >/dev/null && "$ATB" --db B/c.db audit verify >/dev/null
'

test_expect "a done run resumed again measures nothing; atb suite --resume refuses a stray --suite to start" '
	"$ATB" --db B/c.db --json calibrate --resume "$run" --quiet \
		--min-admitted -1 --min-coverage -1 --max-median-dev -1 >again.json &&
	[ "$(jq -S "del(.wall_s, .set, .copies)" again.json)" = "$(jq -S "del(.wall_s, .set, .copies)" r.json)" ] &&
	test "$(sqlite3 B/c.db "SELECT count(*) FROM iteration")" = 2 &&
	expect_exit 2 "$ATB" suite B/kb --candidates B/kb --suite B/kb &&
	expect_grep "--suite and --allow-other-box are for --resume" "$TRASH/err"
'
test_done
