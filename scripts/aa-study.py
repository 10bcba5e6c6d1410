# SPDX-License-Identifier: GPL-3.0-or-later
"""scripts/aa-study.py OUT: the analysis of scripts/aa-study's runs.

For every OUT/<task>-<placement>.events (the runner's raw events of one
`atb measure` of a copy against the baseline), per seed of the paired job:
the ratio of medians (baseline over copy: >1 reads the copy faster), the
same ratio from the rounds where the copy ran first and from those where
it ran second, each arm's mean SM clock, and which arm's buffers the runner
allocated first (its `placement` event's `order`, under `keyed` from protocol
v10 on).  Then, per run, the geometric means over seeds (also over the seeds
whose copy was allocated first and over the others) and the verdict atb
stored (OUT/<task>-<placement>.json).
"""
import glob
import json
import math
import os
import statistics
import sys


def gmean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def jobs_of(path):
    """[(label, {seed: {arm: event}})]: the paired groups of each runner
    merged by role.  "job1" holds each seed's first runner with both arms,
    "job2" its second (atb's job 2: a copy of the baseline's own object in
    the candidate's slot, itself an A/A of one binary)."""
    runners, cur = [], None
    for line in open(path):
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if ev.get("event") == "env":
            cur = {}
            runners.append(cur)
        if ev.get("event") == "samples" and ev.get("group") == "paired" and cur is not None:
            cur.setdefault(ev["seed"], {})[ev["arm"]] = ev
        if ev.get("event") == "placement" and "order" in ev and cur is not None:
            cur.setdefault(ev["seed"], {})["_order"] = ev["order"]
    seen, jobs = {}, {"job1": {}, "job2": {}}
    for r in runners:
        for seed, arms in r.items():
            if not {"baseline", "candidate"} <= set(arms):
                continue
            n = seen.get(seed, 0)
            seen[seed] = n + 1
            if n < 2:
                jobs["job1" if n == 0 else "job2"][seed] = arms
    return [(k, v) for k, v in jobs.items() if v]


def per_round(b, c):
    """Per round: (candidate position, baseline time / candidate time)."""
    bt = {r: t for r, t in zip(b["round"], b["times_ns"])}
    out = []
    for r, t, p in zip(c["round"], c["times_ns"], c["position"]):
        if r in bt and t > 0:
            out.append((p, bt[r] / t))
    return out


def main(out):
    rows = []
    for ev_path in sorted(glob.glob(os.path.join(out, "*.events"))):
        name = os.path.basename(ev_path)[: -len(".events")]
        verdict, speedup, ci = "?", None, None
        try:
            j = json.load(open(os.path.join(out, name + ".json")))
            verdict = j.get("verdict", "?")
            speedup = j.get("speedup")
            ci = j.get("ci") or [j.get("ci_low"), j.get("ci_high")]
        except (OSError, ValueError):
            pass
        print(f"== {name}: verdict {verdict} speedup {speedup} ci {ci}")
        for label, seeds in jobs_of(ev_path):
            ratios, first, second, cb, cc = [], [], [], [], []
            afirst, asecond = [], []
            print(f" {label}:")
            for k, (seed, arms) in enumerate(sorted(seeds.items())):
                b, c = arms["baseline"], arms["candidate"]
                r = statistics.median(b["times_ns"]) / statistics.median(c["times_ns"])
                pr = per_round(b, c)
                f = [x for p, x in pr if p == 0]
                s = [x for p, x in pr if p != 0]
                mb = [m for m in b.get("sm_mhz", []) if m]
                mc = [m for m in c.get("sm_mhz", []) if m]
                ratios.append(r)
                order = arms.get("_order") or []
                alloc = "-"
                if "candidate" in order and "baseline" in order:
                    cfirst = order.index("candidate") < order.index("baseline")
                    (afirst if cfirst else asecond).append(r)
                    alloc = "copy" if cfirst else "base"
                first.append(statistics.median(f) if f else float("nan"))
                second.append(statistics.median(s) if s else float("nan"))
                cb.append(statistics.mean(mb) if mb else float("nan"))
                cc.append(statistics.mean(mc) if mc else float("nan"))
                print(f"  seed {seed} (#{k}): ratio {r:.4f}  copy first {first[-1]:.4f}"
                      f" second {second[-1]:.4f}  clock base {cb[-1]:.0f} copy {cc[-1]:.0f}"
                      f" MHz  base median {statistics.median(b['times_ns'])/1e3:.2f} us"
                      f" trials {len(b['times_ns'])}  allocated first {alloc}")
            even = [r for k, r in enumerate(ratios) if k % 2 == 0]
            odd = [r for k, r in enumerate(ratios) if k % 2 == 1]
            clk = statistics.mean(cb) / statistics.mean(cc) if cc else float("nan")
            print(f"  gmean ratio {gmean(ratios):.4f}  even seeds {gmean(even):.4f}"
                  f" odd seeds {gmean(odd):.4f}  copy first {gmean(first):.4f}"
                  f" second {gmean(second):.4f}  clock base/copy {clk:.4f}"
                  f"  copy allocated first {gmean(afirst):.4f} ({len(afirst)} seeds)"
                  f" second {gmean(asecond):.4f} ({len(asecond)} seeds)")
            rows.append((name + " " + label, gmean(ratios), gmean(even), gmean(odd),
                         gmean(first), gmean(second), gmean(afirst), gmean(asecond)))
    print("\nrun                                  gmean   even    odd     first   second"
          "  alloc1  alloc2")
    for r in rows:
        print(f"{r[0]:<36} " + " ".join(f"{x:.4f}" for x in r[1:]))


if __name__ == "__main__":
    main(sys.argv[1])
