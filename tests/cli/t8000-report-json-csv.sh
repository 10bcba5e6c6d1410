#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# atb report on a small real run of the relu task (2 iterations): the text
# shows the honest and naive speedups side by side with their labels, the
# best, usable count, gates, box and protocol; --json has the same content;
# --csv the trajectory.  On the fixture task relu-steady: seconds per
# iteration.
. "$(dirname "$0")/lib.sh"

command -v python3 >/dev/null || skip_all "python3 is needed to read JSON and CSV"
[ -x "$ATB_BUILD_DIR/atb-runner" ] || skip_all "no atb-runner in $ATB_BUILD_DIR"

# relu-steady: the bundled relu's knobs and labels with fixed busy waits, so
# the stopping target is met after the protocol's minimum trials.
cp -r "$ATB_SOURCE_DIR/tests/fixtures/task/relu-steady" relu

test_expect "a small real run of relu finishes" '
	"$ATB" run ./relu --iterations 2 --seed 5 >run.out 2>run.err &&
	expect_grep "2 of 2 iterations" run.out &&
	expect_grep "iter 2/2" run.err
'

test_expect "report --json has the run, both baselines, trajectory, best, usable, gates" '
	"$ATB" report --last --json >r.json &&
	python3 - <<"PY"
import json
r = json.load(open("r.json"))
run = r["run"]
assert run["iterations"] == 2 and run["done"] == 2 and run["complete"], run
assert run["seed"] == 5 and run["proposer"] == "random" and run["naive"], run
assert run["paired_seeds"] == 8, run
assert len(r["protocol"]["digest"]) == 64 and r["protocol"]["version"] >= 1, r["protocol"]
assert len(r["box"]["fingerprint"]) == 64 and "cores" in r["box"]["summary"], r["box"]
assert r["box"]["description"]["identity"]["logical_cores"] >= 1
assert r["baselines"]["honest"]["label"] == "branch-free select", r["baselines"]
assert r["baselines"]["naive"]["label"] == "naive", r["baselines"]
t = r["trajectory"]
assert [x["iteration"] for x in t] == [0, 1]
usable = 0
for x in t:
    assert set(x["knobs"]) == {"SELECT", "UNROLL", "ALIGN_HINT", "cflags"}, x["knobs"]
    assert x["usable"] == (x["outcome"] == "usable"), x
    if x["usable"]:
        usable += 1
        h, n = x["honest"], x["naive"]
        assert h["ci_low"] <= h["speedup"] <= h["ci_high"], h
        assert h["label"] == "branch-free select" and n["label"] == "naive", x
        assert n["ci_low"] <= n["speedup"] <= n["ci_high"], n
    else:
        assert x["reason"], x
assert r["usable"] == {"count": usable, "of": 2, "rate": usable / 2}, r["usable"]
assert sum(r["gate_firings"].values()) == 2 - usable, r["gate_firings"]
if usable:
    b = r["best"]
    best = max((x for x in t if x["usable"]), key=lambda x: (x["honest"]["ci_low"], x["honest"]["speedup"]))
    assert b["iteration"] == best["iteration"], (b, best)
else:
    assert r["best"] is None
PY
'

test_expect "the text report puts honest and naive side by side, labelled" '
	"$ATB" report --last >r.txt &&
	expect_grep "honest:   speedup vs the honest baseline '"'"'branch-free select'"'"' (the claim)" r.txt &&
	expect_grep "naive:    speedup vs the naive baseline '"'"'naive'"'"' (for reference only)" r.txt &&
	expect_grep "usable    " r.txt && expect_grep "gates     " r.txt &&
	expect_grep "protocol  v" r.txt && expect_grep "box       " r.txt &&
	expect_grep "best      " r.txt
'

test_expect "--csv writes the trajectory with the same numbers" '
	"$ATB" report --last --csv t.csv >/dev/null &&
	"$ATB" report --last --csv - >t2.csv &&
	cmp t.csv t2.csv &&
	python3 - <<"PY"
import csv, json
r = json.load(open("r.json"))
rows = list(csv.DictReader(open("t.csv", newline="")))
assert list(rows[0].keys()) == ["iteration", "outcome", "usable", "honest_speedup",
    "honest_ci_low", "honest_ci_high", "naive_speedup", "naive_ci_low", "naive_ci_high",
    "knobs", "job_uuid", "wall_s", "reason"], rows[0].keys()
assert len(rows) == 2
for row, x in zip(rows, r["trajectory"]):
    assert int(row["iteration"]) == x["iteration"] and row["outcome"] == x["outcome"]
    assert json.loads(row["knobs"]) == x["knobs"]
    if x["honest"]:
        assert abs(float(row["honest_speedup"]) - x["honest"]["speedup"]) < 1e-9
        assert abs(float(row["naive_speedup"]) - x["naive"]["speedup"]) < 1e-9
    else:
        assert row["honest_speedup"] == "" and row["naive_speedup"] == ""
PY
'

test_expect "report --list shows the run" '
	"$ATB" report --list >l.txt &&
	expect_grep "2/2" l.txt && expect_grep "random" l.txt
'

test_done
