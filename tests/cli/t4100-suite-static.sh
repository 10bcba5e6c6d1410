#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# atb suite without PyTorch: usage errors, the static checks on the planted
# candidates (tests/fixtures/suite/) refused as gate:static with their
# findings in the audit chain, a task without a candidate counted incorrect,
# the totals over all tasks, a task killed at --timeout-per-task with every
# process under it, a suite killed with SIGKILL and resumed, and a
# consistent store after each.  Only the
# static checker runs here (python3's ast module), so no torch is needed.
. "$(dirname "$0")/lib.sh"

command -v python3 >/dev/null || skip_all "python3 is needed for the static checker"
KB="$ATB_HOME/tasks/kernelbench"
FX="$ATB_HOME/tests/fixtures/suite"
export ATB_PYTHON=python3

# outcome_of FILE K: the outcome of task k in a --json report
outcome_of() {
	python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tasks"][int(sys.argv[2])]["outcome"])' "$1" "$2"
}

test_expect "--help documents every option and the outcomes" '
	"$ATB" suite --help >help.out &&
	for w in --candidates --filter --python --device --baseline --seeds --seed \
		--timeout-per-task --resume --runs-dir --runner --quiet --json fast_p \
		correct_rate_bar median_speedup_bar gate:static calls_replaced_op \
		fallback_to_reference no_modelnew syntax_error no_candidate timeout; do
		expect_grep "$w" help.out || exit 1
	done
'

test_expect "usage errors exit 2 with the reason, and create no store" '
	expect_exit 2 "$ATB" suite "$KB" && expect_grep "missing --candidates" err &&
	expect_exit 2 "$ATB" suite && expect_grep "missing DIR" err &&
	expect_exit 2 "$ATB" suite "$KB" --candidates "$FX/hang" --device tpu &&
	expect_grep "bad --device '"'"'tpu'"'"'" err &&
	expect_exit 2 "$ATB" suite "$KB" --candidates "$FX/hang" --baseline jit &&
	expect_exit 2 "$ATB" suite "$KB" --candidates "$FX/hang" --seeds 0 &&
	expect_exit 2 "$ATB" suite "$KB" --candidates "$FX/hang" --timeout-per-task -1 &&
	expect_exit 2 "$ATB" suite "$KB" --candidates "$FX/hang" --bogus &&
	expect_exit 2 "$ATB" suite "$KB" --candidates "$FX/hang" --filter "nothing*" &&
	expect_grep "no task in suite" err && expect_grep "nothing*" err &&
	expect_exit 2 "$ATB" suite /no/such/dir --candidates "$FX/hang" &&
	expect_grep "/no/such/dir" err &&
	expect_exit 2 "$ATB" suite "$KB" --candidates "$FX/hang" --seeds 3 &&
	expect_grep "stats.min_paired_seeds" err &&
	test ! -e atb.db
'

for fx in subclass:fallback_to_reference fallback:fallback_to_reference \
	  syntax_error:syntax_error no_modelnew:no_modelnew; do
	dir=${fx%%:*} kind=${fx#*:}
	test_expect "planted '$dir' is refused by the static check $kind (gate:static)" '
		"$ATB" --db s.db suite "$KB" --candidates "$FX/'"$dir"'" --filter "level1/02_*" \
			--device cpu --json >'"$dir"'.json 2>'"$dir"'.err &&
		test "$(outcome_of '"$dir"'.json 0)" = static &&
		expect_grep "\"findings\": \"" '"$dir"'.json &&
		expect_grep "'"$kind"'" '"$dir"'.json &&
		expect_grep "\"correct\": 0" '"$dir"'.json &&
		sqlite3 s.db "SELECT rule FROM rejection ORDER BY id DESC LIMIT 1" >rule.out &&
		expect_grep "gate:static" rule.out &&
		"$ATB" --db s.db audit show --json >audit.json &&
		expect_grep "measure.static" audit.json && expect_grep "'"$kind"'" audit.json
	'
done

test_expect "a task without a candidate counts as incorrect; the suite goes on" '
	mkdir -p cands && cp "$FX/subclass/02_ReLU.py" cands/ &&
	"$ATB" --db s.db suite "$KB" --candidates cands --filter "level1/0[125]_*" \
		--device cpu --json >missing.json 2>missing.err &&
	test "$(outcome_of missing.json 0)" = no_candidate &&
	test "$(outcome_of missing.json 1)" = static &&
	test "$(outcome_of missing.json 2)" = no_candidate &&
	python3 - <<"PY"
import json
r = json.load(open("missing.json"))
t = r["totals"]
assert r["planned"] == 3 and r["done"] == 3, r
assert t["tasks"] == 3 and t["correct"] == 0 and t["no_candidate"] == 2, t
assert t["static_refused"] == 1, t
assert t["correct_rate"]["value"] == 0 and t["correct_rate"]["bar"] == 0.5, t
assert [f["p"] for f in t["fast_p"]] == [0, 1, 1.2, 2], t["fast_p"]
assert all(f["count"] == 0 for f in t["fast_p"]), t["fast_p"]
assert t["median_speedup"] is None, t
PY
'

test_expect "the table names every task, the totals and the bars" '
	"$ATB" --db t.db suite "$KB" --candidates cands --filter "level1/0[12]_*" \
		--device cpu >table.out 2>table.err &&
	expect_grep "level1/01_Add_Scale.py" table.out &&
	expect_grep "no_candidate" table.out && expect_grep "static" table.out &&
	expect_grep "correct rate" table.out && expect_grep "bar 50%" table.out &&
	expect_grep "fast_1.2" table.out && expect_grep "median speedup" table.out &&
	expect_grep "task 2/2" table.err && expect_grep "eta" table.err
'

test_expect "the store stays consistent and the suite is a run atb report reads" '
	"$ATB" --db s.db db check >check.out && "$ATB" --db s.db audit verify >verify.out &&
	"$ATB" --db s.db report --last >report.out && expect_grep "proposer suite" report.out &&
	expect_grep "findings=fallback_to_reference" report.out &&
	expect_grep "findings=none" report.out && ! grep -q "findings=?" report.out
'

test_expect "--resume of a finished suite reports it again without running anything" '
	id=$(python3 -c "import json; print(json.load(open(\"missing.json\"))[\"run\"])") &&
	n=$(sqlite3 s.db "SELECT count(*) FROM audit") &&
	"$ATB" --db s.db suite --resume "$id" --json >again.json &&
	test "$(sqlite3 s.db "SELECT count(*) FROM audit")" = "$n" &&
	test "$(outcome_of again.json 2)" = no_candidate &&
	expect_exit 2 "$ATB" --db s.db suite --resume nosuchrun && expect_grep "nosuchrun" err
'

# The bound (2 minutes) is far under the double's 300 s sleep, with room for
# a loaded box; the kill itself is the outcome and the reason asserted.
test_expect "a task over --timeout-per-task is killed with every process under it (test double: an interpreter that hangs)" '
	printf "#!/bin/bash\nsetsid sleep 300 &\necho \$! >\"%s/escaped.pid\"\nexec sleep 300\n" "$PWD" >slowpy &&
	chmod +x slowpy &&
	start=$(date +%s) &&
	"$ATB" --db h.db suite "$KB" --candidates "$FX/hang" --filter "level1/0[12]_*" \
		--python "$PWD/slowpy" --timeout-per-task 2 --json >h.json 2>h.err &&
	test $(( $(date +%s) - start )) -lt 120 &&
	test "$(outcome_of h.json 0)" = no_candidate &&
	test "$(outcome_of h.json 1)" = timeout &&
	expect_grep "timed out after 2 s" h.json &&
	test "$(sqlite3 h.db "SELECT rule FROM rejection")" = gate:runner &&
	test -s escaped.pid && ! kill -0 "$(cat escaped.pid)" 2>/dev/null &&
	"$ATB" --db h.db db check >/dev/null && "$ATB" --db h.db audit verify >/dev/null
'

test_expect "a suite killed with SIGKILL mid-task resumes: done tasks are skipped, the rest run once" '
	printf "#!/bin/bash\nsleep 1\nexec python3 \"\$@\"\n" >slow1 && chmod +x slow1 &&
	mkdir -p three && for t in 01_Add_Scale 02_ReLU 05_Sum_Dim 06_Softmax; do
		cp "$FX/subclass/02_ReLU.py" three/$t.py; done
	"$ATB" --db r.db suite "$KB" --candidates three --filter "level1/0[1256]_*" \
		--python "$PWD/slow1" --quiet >r1.out 2>r1.err &
	pid=$! &&
	# up to 2 minutes for the first row (a python start on a loaded box);
	# each later task sleeps 1 s first, so the kill lands before the fourth
	for i in $(seq 1200); do
		n=$(sqlite3 r.db "SELECT count(*) FROM iteration" 2>/dev/null || echo 0)
		[ "${n:-0}" -ge 1 ] && break; sleep 0.1
	done &&
	kill -9 $pid && { wait $pid || true; } &&
	done1=$(sqlite3 r.db "SELECT count(*) FROM iteration") &&
	test "$done1" -ge 1 && test "$done1" -lt 4 &&
	"$ATB" --db r.db db check >/dev/null && "$ATB" --db r.db audit verify >/dev/null &&
	id=$(sqlite3 r.db "SELECT id FROM run") &&
	"$ATB" --db r.db suite --resume "$id" --json >r2.json 2>r2.err &&
	test "$(sqlite3 r.db "SELECT group_concat(k) FROM (SELECT k FROM iteration ORDER BY k)")" = "0,1,2,3" &&
	test "$(sqlite3 r.db "SELECT count(*) FROM run")" = 1 &&
	expect_grep "\"done\": 4" r2.json &&
	for k in 0 1 2 3; do test "$(outcome_of r2.json $k)" = static || exit 1; done &&
	"$ATB" --db r.db db check >/dev/null && "$ATB" --db r.db audit verify >/dev/null
'

test_done
