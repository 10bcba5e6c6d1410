#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# scripts/aa-study.py, the A/A study's analysis, on planted runner events
# (no GPU): per seed which arm's buffers the runner allocated first (the
# placement event's order), and the copy's ratio split by it.  The seeds
# whose copy was allocated first read 1.01, the others 0.99; even and odd
# seeds are mixed so that the split is by the order, not the seed
# (1.01 x 0.99: the geometric mean over all four is 0.9999).
. "$(dirname "$0")/lib.sh"

test_expect "the copy's ratio split by the allocation order" '
	mkdir out &&
	python3 - <<-PY &&
	import json
	with open("out/t-keyed.events", "w") as f:
	    for seed, cfirst in ((1, True), (2, True), (3, False), (4, False)):
	        order = ["candidate", "baseline"] if cfirst else ["baseline", "candidate"]
	        r = 1.01 if cfirst else 0.99
	        ev = [{"event": "env", "backend": "cuda"},
	              {"event": "placement", "seed": seed, "order": order}]
	        for arm, t in (("baseline", 1000.0 * r), ("candidate", 1000.0)):
	            ev.append({"event": "samples", "seed": seed, "arm": arm, "group": "paired",
	                       "times_ns": [t] * 4, "round": [0, 1, 2, 3],
	                       "position": [0, 1, 0, 1] if arm == "candidate" else [1, 0, 1, 0]})
	        f.write("".join(json.dumps(e) + "\n" for e in ev))
	json.dump({"verdict": "admitted", "speedup": 1.0, "ci_low": 0.99, "ci_high": 1.01},
	          open("out/t-keyed.json", "w"))
	PY
	python3 "$ATB_SOURCE_DIR/scripts/aa-study.py" out >report.txt &&
	grep -q "copy allocated first 1.0100 (2 seeds) second 0.9900 (2 seeds)" report.txt &&
	grep -q "seed 1 (#0): ratio 1.0100 .* allocated first copy" report.txt &&
	grep -q "seed 3 (#2): ratio 0.9900 .* allocated first base" report.txt &&
	grep -Eq "^t-keyed job1 +0\.9999 +0\.9999 +0\.9999 .* 1\.0100 0\.9900$" report.txt
'

test_expect "events without an order (fixed, or before v10): no split" '
	grep -v placement out/t-keyed.events >out/t-fixed.events &&
	cp out/t-keyed.json out/t-fixed.json &&
	python3 "$ATB_SOURCE_DIR/scripts/aa-study.py" out >report2.txt &&
	grep -q "allocated first -" report2.txt &&
	grep -Eq "^t-fixed job1 .* nan nan$" report2.txt
'

test_done
