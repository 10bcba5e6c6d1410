#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# atb suite --resume on "another machine", fast: a suite of two tasks (01
# has no candidate, 02's candidate is the planted forward that never
# returns) is killed with SIGKILL once the first row is stored; the store,
# its audit mirror, the runs folder, the suite and the candidates are
# copied to B and A is moved away.  From B, each stored path that is gone
# is refused naming it and the option that gives it, a changed candidate
# is refused naming it (nothing stored each time); with --suite,
# --candidates and --python the suite goes on: the first row is kept, the
# second task runs again from a clean folder (and is killed at its
# --timeout-per-task: the planted hang), the resume is an audit entry with
# the new paths, and db check and audit verify pass.  "Another box" is
# planted with a cc on PATH that reports another version (the compiler's
# version is part of the box fingerprint): refused, nothing stored, unless
# --allow-other-box, when the new box is registered, the resume entry
# names it and the report lists both boxes.  Seconds plus the 15 s timeout; needs the
# torch venv (the runner loads the task).
. "$(dirname "$0")/lib.sh"

command -v sqlite3 >/dev/null || skip_all "sqlite3 is needed to read the store"
command -v jq >/dev/null || skip_all "jq not installed"
[ -x "$ATB_BUILD_DIR/atb-runner" ] || skip_all "no atb-runner in $ATB_BUILD_DIR"
need_torch_cpu "$ATB_BUILD_DIR/atb-runner"
KB="$ATB_HOME/tasks/kernelbench"

mkdir -p A/s A/c
sed 's/^ROWS = .*/ROWS = 64/; s/^COLS = .*/COLS = 64/' "$KB/level1/01_Add_Scale.py" >A/s/01_Add_Scale.py
sed 's/^ROWS = .*/ROWS = 64/; s/^COLS = .*/COLS = 64/' "$KB/level1/02_ReLU.py" >A/s/02_ReLU.py
cp "$ATB_SOURCE_DIR/tests/fixtures/suite/hang/02_ReLU.py" A/c/

test_expect "started in A, killed (SIGKILL) with its first row stored" '
	"$ATB" --db A/s.db suite A/s --candidates A/c --device cpu --python "$PY" \
		--timeout-per-task 15 --quiet >first.out 2>first.err &
	pid=$!
	for i in $(seq 3000); do
		n=$(sqlite3 A/s.db "SELECT count(*) FROM iteration" 2>/dev/null || echo 0)
		[ "${n:-0}" -ge 1 ] && break; sleep 0.1
	done
	kill -9 $pid; wait $pid; rc=$?
	test $rc -eq 137 &&
	test "$(sqlite3 A/s.db "SELECT count(*) FROM iteration")" = 1 &&
	test "$(sqlite3 A/s.db "SELECT outcome FROM iteration WHERE k = 0")" = no_candidate &&
	sqlite3 A/s.db "SELECT id FROM run" >run_id
'

sleep 1   # the killed suite's task process dies with it (its death signal)
cp -a A B && mv A A.gone
run=$(cat run_id)

# gone CODE MESSAGE ARGS...: the resume exits CODE with MESSAGE, storing nothing.
gone() {
	local code=$1 msg=$2; shift 2
	expect_exit "$code" "$ATB" --db B/s.db suite --resume "$run" --quiet "$@" &&
	[ "$(head -1 "$TRASH/err")" = "$msg" ] ||
		{ echo "stderr:"; cat "$TRASH/err"; echo "wanted: $msg"; return 1; }
	test "$(sqlite3 B/s.db "SELECT count(*) FROM iteration")" = 1 &&
	test "$(sqlite3 B/s.db "SELECT count(*) FROM audit WHERE kind = 'suite.resume'")" = 0
}

test_expect "a stored folder that is not here, or a changed candidate: refused, naming it" '
	gone 2 "atb: suite folder '\''$TRASH/A/s'\'' of run '\''$run'\'' is not here; give it with --suite DIR" &&
	gone 2 "atb: candidates folder '\''$TRASH/A/c'\'' of run '\''$run'\'' is not here; give it with --candidates DIR" \
		--suite B/s &&
	gone 2 "atb: no such folder '\''B/nowhere'\''" --suite B/nowhere &&
	cp B/c/02_ReLU.py orig &&
	echo "# edited" >>B/c/02_ReLU.py &&
	expect_exit 2 "$ATB" --db B/s.db suite --resume "$run" --suite B/s --candidates B/c &&
	grep -q "^atb: candidate file '\''$TRASH/B/c/02_ReLU.py'\'' of task '\''02_ReLU.py'\'' changed since suite '\''$run'\'' was planned (sha256 [0-9a-f]\{12\}, planned [0-9a-f]\{12\}): restore it or start a new suite$" "$TRASH/err" ||
		{ cat "$TRASH/err"; exit 1; }
	cp orig B/c/02_ReLU.py &&
	test "$(sqlite3 B/s.db "SELECT count(*) FROM iteration")" = 1
'

# Another box: the same machine with a compiler that says it is another one.
mkdir -p fakebin
real_cc=$(command -v cc)
printf '#!/bin/sh\n[ "$1" = --version ] && { echo "cc (atb-test other box) 99.1"; exit 0; }\nexec %s "$@"\n' \
	"$real_cc" >fakebin/cc
chmod +x fakebin/cc

test_expect "another box: refused without --allow-other-box, naming both, nothing stored" '
	nbox=$(sqlite3 B/s.db "SELECT count(*) FROM box") &&
	PATH="$TRASH/fakebin:$PATH" expect_exit 2 "$ATB" --db B/s.db suite --resume "$run" \
		--suite B/s --candidates B/c --quiet &&
	grep -q "^atb: suite '\''$run'\'' was started on box [0-9a-f]\{12\}, this is box [0-9a-f]\{12\}; resume it on its own box, or give --allow-other-box" "$TRASH/err" ||
		{ cat "$TRASH/err"; exit 1; }
	test "$(sqlite3 B/s.db "SELECT count(*) FROM box")" = "$nbox" &&
	test "$(sqlite3 B/s.db "SELECT count(*) FROM iteration")" = 1 &&
	test "$(sqlite3 B/s.db "SELECT count(*) FROM audit WHERE kind = '\''suite.resume'\''")" = 0
'

test_expect "resumed with the new paths on the other box: the first row kept, the second task run again" '
	mkdir -p B/runs/"$run"/task-1 && echo stale >B/runs/"$run"/task-1/stale &&
	PATH="$TRASH/fakebin:$PATH" "$ATB" --db B/s.db --json suite --resume "$run" --suite B/s \
		--candidates B/c --python "$PY" --allow-other-box --quiet >r.json 2>r.err ||
		{ cat r.err; exit 1; }
	test "$(sqlite3 B/s.db "SELECT group_concat(k || \":\" || outcome) FROM (SELECT * FROM iteration ORDER BY k)")" = "0:no_candidate,1:timeout" &&
	[ ! -e B/runs/"$run"/task-1/stale ] &&
	first=$(sqlite3 B/s.db "SELECT box_fingerprint FROM run") &&
	jq -e --arg b "$TRASH/B" --arg first "$first" ".done == 2 and .suite == (\$b + \"/s\")
		and .candidates == (\$b + \"/c\") and (.boxes | length) == 2 and .boxes[0] == \$first
		and .tasks[1].candidate == (\$b + \"/c/02_ReLU.py\")" r.json >/dev/null ||
		{ cat r.json; exit 1; }
	sqlite3 B/s.db "SELECT payload FROM audit WHERE kind = '\''suite.resume'\''" >resume.json &&
	test "$(wc -l <resume.json)" = 1 &&
	jq -e --arg b "$TRASH/B" --arg run "$run" --arg py "$PY" \
		".run == \$run and .k == 1 and .task == \"02_ReLU.py\" and .suite == (\$b + \"/s\")
		 and .candidates == (\$b + \"/c\") and .runs == (\$b + \"/runs\") and .python == \$py
		 and .other_box == true and .box == \"$(jq -r ".boxes[1]" r.json)\"" resume.json >/dev/null ||
		{ cat resume.json; exit 1; }
	# the other box is registered (its jobs name it; the planted hang leaves none)
	test "$(sqlite3 B/s.db "SELECT count(*) FROM box WHERE fingerprint = '\''$(jq -r ".boxes[1]" r.json)'\''")" = 1 &&
	PATH="$TRASH/fakebin:$PATH" "$ATB" --db B/s.db suite --resume "$run" --quiet >table &&
	expect_grep "the run spans 2 boxes: ${first:0:12} $(jq -r ".boxes[1][:12]" r.json)" table &&
	"$ATB" --db B/s.db db check >/dev/null && "$ATB" --db B/s.db audit verify >/dev/null
'

test_expect "--suite and --allow-other-box are for --resume" '
	expect_exit 2 "$ATB" --db B/s.db suite B/s --candidates B/c --allow-other-box &&
	expect_grep "--suite and --allow-other-box are for --resume" "$TRASH/err"
'
test_done
