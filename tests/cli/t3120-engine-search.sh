#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# atb run ENGINE_TASK: a seeded random flag search on the TEST DOUBLE engine
# (tests/fixtures/engine/double_engine.py, a fake server, not an engine).
# Seed 6 draws {}, speedup=2.0, speedup=1.0, bad_flag=true: the refused
# configuration stays in the space as an unusable iteration with the
# engine's own message, keep-best picks the 2x, and the report shows
# requests/s and latency ratios against the default with their CIs.
. "$(dirname "$0")/lib.sh"

command -v python3 >/dev/null || skip_all "python3 is needed for the test double engine"
TASK=$ATB_SOURCE_DIR/tests/fixtures/engine/search.yaml

test_expect "the plan is seeded: the same seed gives the same configurations" '
	"$ATB" run "$TASK" --plan --iterations 4 --seed 6 >p1 &&
	"$ATB" run "$TASK" --plan --iterations 4 --seed 6 >p2 && cmp p1 p2 &&
	expect_grep "0 {}" p1 && expect_grep "1 {\"speedup\":\"2.0\"}" p1 &&
	expect_grep "3 {\"bad_flag\":\"true\"}" p1
'

test_expect "a search runs, counts the refused configuration as unusable, keeps the best" '
	"$ATB" --json run "$TASK" --iterations 4 --seed 6 --quiet >sum &&
	python3 -c "
import json; d=json.load(open(\"sum\"))
assert d[\"done\"]==4 and d[\"usable\"]==3, d
assert d[\"best\"][\"iteration\"]==1 and d[\"best\"][\"ci_low\"] > 1.3, d" &&
	python3 -c "import json; print(json.load(open(\"sum\"))[\"run\"])" >run_id
'

test_expect "the report shows ratios vs the default, latency with CIs, the engine message" '
	"$ATB" report "$(cat run_id)" >rep &&
	expect_grep "the engine'"'"'s default configuration, requests/s" rep &&
	expect_grep "engine_start" rep &&
	expect_grep "unrecognized arguments: --no-such-flag" rep &&
	expect_grep "latency vs default (> 1: faster): ttft_median_ms" rep &&
	"$ATB" report "$(cat run_id)" --json >rj &&
	python3 -c "
import json; d=json.load(open(\"rj\"))
assert d[\"engine\"] is True
it=d[\"trajectory\"][1]; lat=it[\"latency\"][\"e2e_median_ms\"]
assert lat[\"ratio\"] > 1.3 and lat[\"ci_low\"] <= lat[\"ratio\"] <= lat[\"ci_high\"], lat
assert d[\"trajectory\"][3][\"outcome\"]==\"engine_start\" and not d[\"trajectory\"][3][\"usable\"]"
'

test_expect "the report reads requests/s and latency ratios from the stored result's stats" '
	"$ATB" report "$(cat run_id)" >rep &&
	grep -q "^engine    iteration 1: requests/s [0-9.]*x \[.*(medians: candidate [0-9.]*, default [0-9.]* req/s); ttft_median_ms [0-9.]*x \[.*; e2e_p99_ms" rep &&
	"$ATB" report "$(cat run_id)" --json >rj &&
	python3 -c "
import json, sqlite3
d=json.load(open(\"rj\"))
db=sqlite3.connect(\"atb.db\")
n=0
for it in d[\"trajectory\"]:
    if not it[\"result_id\"]:
        assert \"requests_per_s\" not in it, it
        continue
    sp, lo, hi, st = db.execute(\"select speedup, ci_low, ci_high, stats from result where id=?\", (it[\"result_id\"],)).fetchone()
    st = json.loads(st)
    r = it[\"requests_per_s\"]
    # exactly the stored numbers, not the note rounded to 4 digits
    assert (r[\"ratio\"], r[\"ci_low\"], r[\"ci_high\"]) == (sp, lo, hi), (r, sp, lo, hi)
    assert r[\"baseline_median\"] == st[\"requests_per_s\"][\"baseline_median\"] > 0, r
    assert it[\"latency\"] == st[\"latency\"] and len(st[\"latency\"]) >= 3, (it, st)
    n += 1
assert n == 3, n"
'

test_expect "the engine logs are in the run's folder" '
	ls runs/$(cat run_id)/iter-3/seed-6-candidate/engine.stderr &&
	expect_grep "unrecognized arguments" runs/$(cat run_id)/iter-3/seed-6-candidate/engine.stderr
'

test_done
