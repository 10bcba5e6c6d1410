#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# atb task list and atb task show with engine tasks (kind engine) beside the
# kernel tasks: a bundled engine task folder (engine.yaml), a task.yaml of
# kind engine, one that does not load (listed with its error, the list goes
# on), show of the spec, model, workload, probes and search space, text and
# JSON; check refuses an engine task with a pointer to 'atb engine show'.
. "$(dirname "$0")/lib.sh"

home=$TRASH/home
mkdir -p "$home/tasks/eng-a" "$home/tasks/eng-b" "$home/tasks/eng-bad" "$home/engines" &&
	cp -r "$ATB_SOURCE_DIR/tasks/relu" "$home/tasks/" &&
	cp -r "$ATB_SOURCE_DIR/protocol" "$home/" &&
	cp "$ATB_SOURCE_DIR/tests/fixtures/engine/double.yaml" "$home/engines/double.yaml" &&
	sed -e 's/^name: engine-double/name: eng-a\ndescription: the double, closed loop/' \
	    -e 's/^engine: double.yaml/engine: double/' \
		"$ATB_SOURCE_DIR/tests/fixtures/engine/task.yaml" >"$home/tasks/eng-a/engine.yaml" &&
	sed -e 's/^name: engine-double/name: eng-b/' -e 's/^engine: double.yaml/engine: double/' \
		"$ATB_SOURCE_DIR/tests/fixtures/engine/task.yaml" >"$home/tasks/eng-b/task.yaml" &&
	sed -e 's/^name: engine-double/name: eng-bad/' -e 's/^engine: double.yaml/engine: nosuch/' \
		"$ATB_SOURCE_DIR/tests/fixtures/engine/task.yaml" >"$home/tasks/eng-bad/engine.yaml" ||
	exit 1
export ATB_HOME=$home

test_expect "list shows engine tasks beside kernel tasks, sorted, kind engine" '
	expect_exit 0 "$ATB" task list &&
	cut -d" " -f1 "$TRASH/out" >names &&
	printf "eng-a\neng-b\neng-bad\nrelu\n" | diff - names &&
	grep -q "^eng-a  *engine  *the double, closed loop$" "$TRASH/out" &&
	grep -q "^eng-b  *engine  *$" "$TRASH/out" &&
	grep -q "^relu  *cpu " "$TRASH/out" &&
	expect_grep "(does not load: " "$TRASH/out" &&
	expect_grep "nosuch" "$TRASH/out"
'

test_expect "list --json: kind, path, and the error of one that does not load" '
	expect_exit 0 "$ATB" task list --json &&
	python3 -c "
import json; d = json.load(open(\"$TRASH/out\"))[\"tasks\"]
k = {t[\"name\"]: t for t in d}
assert [t[\"name\"] for t in d] == [\"eng-a\", \"eng-b\", \"eng-bad\", \"relu\"], d
assert k[\"eng-a\"][\"kind\"] == \"engine\" and k[\"eng-a\"][\"path\"].endswith(\"eng-a/engine.yaml\")
assert k[\"eng-b\"][\"path\"].endswith(\"eng-b/task.yaml\")
assert \"nosuch\" in k[\"eng-bad\"][\"error\"] and \"error\" not in k[\"eng-a\"]
assert k[\"relu\"][\"kind\"] == \"cpu\""
'

test_expect "show an engine task: spec, model, workload, probes, search space" '
	expect_exit 0 "$ATB" task show eng-a &&
	expect_grep "task         eng-a (engine)" "$TRASH/out" &&
	expect_grep "description  the double, closed loop" "$TRASH/out" &&
	expect_grep "engine       double ($home/engines/double.yaml)" "$TRASH/out" &&
	expect_grep "model        double-model" "$TRASH/out" &&
	expect_grep "workload     {\"api\":\"completions\",\"concurrency\":4," "$TRASH/out" &&
	expect_grep "probes       5 prompts, completions, max_tokens 24, greedy" "$TRASH/out" &&
	expect_grep "search       1 flags" "$TRASH/out" &&
	grep -q "^  speedup  *float  {1.0|1.5|2.0}  default 1.0  (value --speedup)$" "$TRASH/out"
'

test_expect "show --json of an engine task, by name or by path" '
	expect_exit 0 "$ATB" --json task show "$home/tasks/eng-b/task.yaml" &&
	python3 -c "
import json; d = json.load(open(\"$TRASH/out\"))
assert d[\"kind\"] == \"engine\" and d[\"name\"] == \"eng-b\", d
assert d[\"engine\"][\"name\"] == \"double\" and d[\"engine\"][\"run_here\"] is True
assert d[\"workload\"][\"requests\"] == 32 and d[\"probes\"][\"prompts\"][0] == \"the cat sat on\"
assert d[\"search\"] == [{\"name\": \"speedup\", \"type\": \"float\", \"domain\": \"{1.0|1.5|2.0}\",
  \"render\": \"value\", \"cli\": \"--speedup\", \"default\": \"1.0\"}], d[\"search\"]"
'

test_expect "show of an engine task that does not load names file, field and value" '
	expect_exit 2 "$ATB" task show eng-bad &&
	expect_grep "eng-bad/engine.yaml" "$TRASH/err" &&
	expect_grep "nosuch" "$TRASH/err"
'

test_expect "check refuses an engine task and says what checks one" '
	expect_exit 2 "$ATB" task check eng-a &&
	expect_grep "is an engine task" "$TRASH/err" &&
	expect_grep "atb engine show eng-a" "$TRASH/err"
'

test_expect "engine show takes a bundled spec by its bare name; an unknown name is refused" '
	expect_exit 0 "$ATB" engine show double && expect_grep "engines/double.yaml" "$TRASH/out" &&
	expect_exit 2 "$ATB" engine show no-such-engine &&
	expect_grep "no-such-engine" "$TRASH/err"
'

test_expect "task list: every row has its kind in one column (the longest name sets the width)" '
	"$ATB" task list >tl &&
	awk "{ print index(\$0, \$2) }" tl | sort -u >cols && [ "$(wc -l <cols)" = 1 ]
'

test_done
