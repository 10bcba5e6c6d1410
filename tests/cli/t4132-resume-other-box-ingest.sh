#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# A suite or calibration resumed with --allow-other-box really records the
# task it measures on the other box (on the H200, box 509a3f6e5f13 became
# d526916df2ba and the ingest was refused: "the iteration's result is not of
# its job, its run's protocol and box", store schema 3).  Three runs, each
# started here on box A, stopped by SIGINT, and resumed on "box B" (a cc on
# PATH that reports another version: the compiler's version is part of the
# box fingerprint, as in t4131):
#   atb suite          01 has no candidate (its row is stored at once), 02
#                      a copy: stopped while 02 runs, 02 measured on B;
#   atb calibrate --suite  one KernelBench task, stopped before it ends,
#                      measured on B (atb suite underneath: 'suite.resume');
#   atb calibrate TASK TASK  two copies of relu-work, the first on A, the
#                      second on B ('calibrate.resume'; CPATH names the
#                      planted cc's folder, so that atb's build sandbox,
#                      which binds the folders CPATH names, can run it).
# Each time the resume ends well (exit 0 or 1, never 3: "record the
# iteration refused"), every task has its row, the resume entry names B
# with other_box true, the report lists both boxes (and the table says the
# run spans them), and 'atb db check' and 'atb audit verify' pass; the task
# measured on B, when the box let it be judged (admitted or quarantined),
# has its result on B's box while its run is on A's: the ingest v3 refused.
# When the box refused it for noise there is no result to record: that is
# noted ('# ...'), not failed -- the rule itself is proved without timing by
# u-store (allowed, refused, found by db check) and t5030 (a forged
# iteration on a box no resume allowed, by SQL).  One try each, a few
# minutes on a loaded 2-core box; needs the torch venv and a C compiler.
. "$(dirname "$0")/lib.sh"

have_sql || skip_all "the sqlite3 shell or python3 is needed to read the store"
command -v jq >/dev/null || skip_all "jq not installed"
command -v cc >/dev/null || skip_all "no C compiler"
[ -x "$ATB_BUILD_DIR/atb-runner" ] || skip_all "no atb-runner in $ATB_BUILD_DIR"
need_torch_cpu "$ATB_BUILD_DIR/atb-runner"
KB="$ATB_HOME/tasks/kernelbench"
WORK=$ATB_SOURCE_DIR/tests/fixtures/cheats/tasks/relu-work

mkdir -p fakebin
printf '#!/bin/sh\n[ "$1" = --version ] && { echo "cc (atb-test other box) 99.1"; exit 0; }\nexec %s "$@"\n' \
	"$(command -v cc)" >fakebin/cc
chmod +x fakebin/cc
ON_B="$TRASH/fakebin:$PATH"
# The compiler runs in atb's build sandbox, which binds the folders CPATH
# names (and /usr, where the real cc is): so the planted cc is found there.
export CPATH="$TRASH/fakebin${CPATH:+:$CPATH}"
NOTARGETS="--min-admitted -1 --min-coverage -1 --max-median-dev -1"

# A task of 512 x 512 floats: seconds on a CPU.
small() { sed 's/^ROWS = .*/ROWS = 512/; s/^COLS = .*/COLS = 512/' "$1"; }

# stop_when COND PID: SIGINT PID once the shell snippet COND holds; exit 130 wanted.
stop_when() {
	local i rc
	for i in $(seq 3000); do   # 10 minutes: a loaded box
		eval "$1" && break
		kill -0 "$2" 2>/dev/null || break
		sleep 0.2
	done
	kill -INT "$2"
	wait "$2" && rc=0 || rc=$?
	[ "$rc" = 130 ] || { echo "stopped run exited $rc, wanted 130"; return 1; }
}

# resumed_on_b DB RUN K KIND REPORT: RUN, resumed on B by a KIND entry
# naming B (other_box true), has all its rows and REPORT (--json) lists
# both boxes; iteration K's result, when it has one, is on B and the run on
# A; db check and audit verify pass.  Leaves "A B" in ./boxes.
resumed_on_b() {
	local db=$1 run=$2 k=$3 kind=$4 rep=$5 a b x
	a=$(sql "$db" "SELECT box_fingerprint FROM run WHERE id = '$run'")
	b=$(sql "$db" "SELECT json_extract(payload, '$.box') FROM audit WHERE kind = '$kind' AND
		json_extract(payload, '$.run') = '$run' AND json_extract(payload, '$.other_box') IS 1")
	[ -n "$b" ] && [ "$b" != "$a" ] || { echo "no $kind entry of $run names another box"; return 1; }
	test "$(sql "$db" "SELECT count(*) FROM iteration WHERE run = '$run'")" = \
		"$(sql "$db" "SELECT iterations FROM run WHERE id = '$run'")" ||
		{ echo "run $run is missing rows"; return 1; }
	jq -e --arg a "$a" --arg b "$b" '.boxes == [$a, $b]' "$rep" >/dev/null ||
		{ echo "report boxes:"; jq .boxes "$rep"; return 1; }
	x=$(sql "$db" "SELECT x.box_fingerprint FROM iteration i JOIN result x ON x.id = i.result
		WHERE i.run = '$run' AND i.k = $k")
	if [ -n "$x" ]; then
		[ "$x" = "$b" ] || { echo "iteration $k's result is on box $x, not B $b"; return 1; }
		echo "# iteration $k ($(cat outcome)): its result recorded on box B ${b:0:12}, the run's box ${a:0:12}"
	else
		case "$(cat outcome)" in
		noise | baseline_drift | client_lag | clock)
			echo "# iteration $k: the box refused it ($(cat outcome)): no result on B to record this time" ;;
		*) echo "iteration $k: no result, outcome $(cat outcome)"; jq -c ".tasks[$k]" "$rep"; return 1 ;;
		esac
	fi
	"$ATB" --db "$db" db check >/dev/null && "$ATB" --db "$db" audit verify >/dev/null &&
	echo "$a $b" >boxes
}

# resume ARGS...: atb ARGS on box B; exit 0 or 1 (a target missed) wanted.
resume() {
	PATH="$ON_B" "$ATB" "$@" >r.json 2>r.err && rc=0 || rc=$?
	[ "$rc" = 0 ] || [ "$rc" = 1 ] || { echo "exit $rc"; cat r.err; return 1; }
}

mkdir -p S/s S/c
small "$KB/level1/01_Add_Scale.py" >S/s/01_Add_Scale.py
small "$KB/level1/02_ReLU.py" >S/s/02_ReLU.py
cp "$KB/candidates/copy/02_ReLU.py" S/c/

test_expect "atb suite --resume --allow-other-box: the task it measures on the other box is recorded there" '
	"$ATB" --db S/s.db suite S/s --candidates S/c --device cpu --python "$PY" --quiet \
		>first.out 2>first.err &
	stop_when "[ \"\$(sql S/s.db \"SELECT count(*) FROM iteration\" 2>/dev/null)\" = 1 ]" $! &&
	test "$(sql S/s.db "SELECT group_concat(outcome) FROM iteration")" = no_candidate &&
	run=$(sql S/s.db "SELECT id FROM run") &&
	resume --db S/s.db --json suite --resume "$run" --allow-other-box --quiet &&
	sql S/s.db "SELECT outcome FROM iteration WHERE k = 1" >outcome &&
	resumed_on_b S/s.db "$run" 1 suite.resume r.json &&
	jq -e ".done == 2" r.json >/dev/null || { cat r.json; exit 1; }
	read -r a b <boxes &&
	PATH="$ON_B" "$ATB" --db S/s.db suite --resume "$run" --quiet >table &&
	expect_grep "the run spans 2 boxes: ${a:0:12} ${b:0:12}" table
'

mkdir -p K/kb
small "$KB/level1/02_ReLU.py" >K/kb/02_ReLU.py

test_expect "atb calibrate --resume --allow-other-box of a KernelBench folder: its copy is recorded on the other box" '
	"$ATB" --db K/c.db calibrate --suite K/kb --device cpu --python "$PY" --quiet \
		>first.out 2>first.err &
	# stopped while its only task runs: nothing recorded on A
	stop_when "ls -d K/runs/*/task-0 >/dev/null 2>&1" $! &&
	test "$(sql K/c.db "SELECT count(*) FROM iteration")" = 0 &&
	run=$(sql K/c.db "SELECT id FROM run") &&
	resume --db K/c.db --json calibrate --resume "$run" --allow-other-box --python "$PY" \
		--quiet $NOTARGETS &&
	sql K/c.db "SELECT outcome FROM iteration WHERE k = 0" >outcome &&
	resumed_on_b K/c.db "$run" 0 suite.resume r.json &&
	jq -e ".done == 1 and .interrupted == false" r.json >/dev/null || { cat r.json; exit 1; }
'

test_expect "atb calibrate --resume --allow-other-box of bundled tasks: the second copy is recorded on the other box" '
	mkdir -p T
	"$ATB" --db T/c.db --json calibrate "$WORK" "$WORK" --runs-dir T/runs --quiet \
		>first.json 2>first.err &
	# the first copy has begun once its folder exists: the stop waits for it
	stop_when "ls -d T/runs/*/task-0 >/dev/null 2>&1" $! &&
	test "$(sql T/c.db "SELECT count(*) FROM iteration")" = 1 &&
	run=$(jq -r .run first.json) &&
	resume --db T/c.db --json calibrate --resume "$run" --allow-other-box --runs-dir T/runs \
		--quiet $NOTARGETS &&
	sql T/c.db "SELECT outcome FROM iteration WHERE k = 1" >outcome &&
	resumed_on_b T/c.db "$run" 1 calibrate.resume r.json &&
	jq -e ".done == 2 and .interrupted == false" r.json >/dev/null || { cat r.json; exit 1; }
	read -r a b <boxes &&
	PATH="$ON_B" "$ATB" --db T/c.db calibrate --resume "$run" --quiet $NOTARGETS >table &&
	expect_grep "the run spans 2 boxes: ${a:0:12} ${b:0:12}" table
'
test_done
