#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""bench-kb-eval: wall per verdict of `atb measure` on KernelBench-format
tasks against KernelBench's own eval protocol, re-implemented here as the
reference, in the same run (issue 15, item 6).

usage: bench-kb-eval.py [--atb PATH] [--suite DIR] [--device cpu|cuda]
                        [--python PY] [--filter GLOB] [--max-tasks N]
                        [--deadline SECONDS] [--rounds N] [--json FILE]

For each task of DIR (default: the bundled tasks/kernelbench/level1) whose
file name matches GLOB (fnmatch; default every task), two measurements of
the same reference copy (the task's file with every word `Model` renamed
`ModelNew`, as `atb calibrate` writes it; truth 1.00x):

  (a) KB: KernelBench's eval in a fresh process of PY (its import of torch
      counted, as atb's runners count theirs): Model and ModelNew built
      under the same seed; 5 correctness trials, each on fresh inputs from
      get_inputs() under a new seed, outputs compared with
      torch.allclose(atol=1e-2, rtol=1e-2); then ModelNew timed: 3 warm-up
      calls, 100 timed trials, each after an L2 flush (a 256 MiB write on
      cuda as KernelBench's clear_l2_cache does, 64 MiB on the CPU), timed
      with cuda events (cuda) or perf_counter (cpu).  A speedup needs the
      baseline's time too: Model is timed the same way (KernelBench keeps
      it in a precomputed table; its cost is printed apart: `kb` is the
      eval alone, `kb+ref` with the baseline's timing).
  (b) atb: `atb measure --json --device D TASK COPY` on a fresh store, its
      wall, verdict, speedup and 95% interval; the torch runners' phases
      ($ATB_RUNNER_PHASES_LOG) summed per phase over the runners.

Order: per round, task i runs KB then atb when i + round is even, else atb
then KB (ABAB), so a drift of the box's speed hits both.

Printed per task: both walls, atb / KB, atb's speedup and interval width
(ci_high - ci_low) / speedup, KB's std/mean of ModelNew's trials, and KB's
own 95% interval width for its speedup mean(ref)/mean(new) (delta method on
the two means, 100 trials each).  Totals: sum of atb walls / sum of KB
walls (target from issue 15: at most 0.5 at a narrower interval than KB's
spread), and the phases where atb's wall went, largest first.

Tasks run in the order of their leading number (1_, 2_, ..., 100_).  Leave
the tree alone while it runs: atb's surface gate watches its trusted files
(a file added under protocol/ mid-run refused a copy as `surface`).
--atb PATH: the atb to measure with (default $ATB, else build/dev/atb).

--deadline SECONDS: start no new measurement past that wall time from the
start (one in progress finishes; atb's job timeouts bound it).
--max-tasks N: at most N tasks.  --rounds N: N alternations (default 1).
--kb-only: KernelBench's side alone (no atb: checks the bench itself).
Exit 0 when every measurement ran (whatever the ratios), 1 when one failed
to run, 2 on bad usage.  Prints figures measured in this run only.
"""
import argparse
import fnmatch
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# KernelBench's eval, run as `PY -c KB_EVAL TASK COPY DEVICE` in a fresh
# process; prints one JSON line.  Kept close to KernelBench's src/eval.py
# protocol (not its code): seed 42 for both constructors, trial seeds from
# torch.randint, allclose at 1e-2, 3 warm-ups, 100 trials, L2 flush.
KB_EVAL = r'''
import sys, time, json
t_start = time.perf_counter()
import importlib.util
import torch
t_import = time.perf_counter()
task, cand, dev = sys.argv[1], sys.argv[2], sys.argv[3]
def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m
ref_mod, new_mod = load(task, "kb_ref"), load(cand, "kb_new")
device = torch.device(dev)
def seed(s):
    torch.manual_seed(s)
    if dev == "cuda":
        torch.cuda.manual_seed(s)
def to_dev(xs):
    return [x.to(device) if torch.is_tensor(x) else x for x in xs]
def sync():
    if dev == "cuda":
        torch.cuda.synchronize(device)
def same(a, b):
    if isinstance(a, (tuple, list)):
        return isinstance(b, (tuple, list)) and len(a) == len(b) and all(map(same, a, b))
    if not torch.is_tensor(a):
        return a == b
    return torch.is_tensor(b) and a.shape == b.shape and \
        torch.allclose(a, b.to(a.dtype), atol=1e-2, rtol=1e-2)
with torch.no_grad():
    seed(42)
    init = ref_mod.get_init_inputs()
    init = to_dev(init)
    seed(42)
    ref = ref_mod.Model(*init).to(device)
    seed(42)
    new = new_mod.ModelNew(*init).to(device)
    sync()
    t_build = time.perf_counter()
    seed(42)
    trial_seeds = [torch.randint(0, 2 ** 32 - 1, (1,)).item() for _ in range(5)]
    correct = 0
    for s in trial_seeds:
        seed(s)
        xs = to_dev(ref_mod.get_inputs())
        o = ref(*xs)
        o_new = new(*xs)
        sync()
        if same(o, o_new):
            correct += 1
    t_correct = time.perf_counter()
    xs = to_dev(ref_mod.get_inputs())
    flush = torch.empty((256 if dev == "cuda" else 64) << 20, dtype=torch.uint8, device=device)
    def timed(model):
        for _ in range(3):
            model(*xs)
            sync()
        out = []
        if dev == "cuda":
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
        for i in range(100):
            flush.fill_(i & 0xff)
            sync()
            if dev == "cuda":
                a.record()
                model(*xs)
                b.record()
                torch.cuda.synchronize(device)
                out.append(a.elapsed_time(b) * 1e6)
            else:
                t0 = time.perf_counter()
                model(*xs)
                out.append((time.perf_counter() - t0) * 1e9)
        return out
    new_ns = timed(new)
    t_new = time.perf_counter()
    ref_ns = timed(ref)
    t_ref = time.perf_counter()
print(json.dumps({"correct": correct, "new_ns": new_ns, "ref_ns": ref_ns,
    "s_import": t_import - t_start, "s_build": t_build - t_import,
    "s_correct": t_correct - t_build, "s_time_new": t_new - t_correct,
    "s_time_ref": t_ref - t_new}))
'''


def mean_sd(v):
    m = sum(v) / len(v)
    sd = math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else 0.0
    return m, sd


def copy_source(task):
    """The task with every word Model renamed ModelNew (atb calibrate's copy)."""
    with open(task) as f:
        text = f.read()
    return re.sub(r"\bModel\b", "ModelNew", text)


def run_kb(py, task, cand, device, timeout):
    t0 = time.monotonic()
    p = subprocess.run([py, "-c", KB_EVAL, task, cand, device], capture_output=True,
                       text=True, timeout=timeout)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1],
                "wall": wall}
    r = json.loads(p.stdout.strip().splitlines()[-1])
    r["wall_total"] = wall
    # the eval alone: everything but the baseline's timing
    r["wall"] = wall - r["s_time_ref"]
    mn, sn = mean_sd(r["new_ns"])
    mr, sr = mean_sd(r["ref_ns"])
    n = len(r["new_ns"])
    r["mean_ns"], r["std_ns"], r["cv"] = mn, sn, sn / mn if mn else 0.0
    r["speedup"] = mr / mn if mn else 0.0
    # 95% interval of mean(ref)/mean(new): delta method on the log ratio
    se = math.sqrt((sr / mr) ** 2 / n + (sn / mn) ** 2 / n) if mr and mn else 0.0
    r["ci_low"], r["ci_high"] = r["speedup"] * math.exp(-1.96 * se), r["speedup"] * math.exp(1.96 * se)
    r["rel_width"] = r["ci_high"] / r["speedup"] - r["ci_low"] / r["speedup"] if r["speedup"] else 0.0
    return r


def run_atb(atb, py, task, cand, device, work, timeout):
    # a fresh store (and its audit mirror) for every measurement
    shutil.rmtree(work, ignore_errors=True)
    store = os.path.join(work, "atb.db")
    os.makedirs(work, exist_ok=True)
    # the runner runs as nobody in its sandbox (src/proc/sandbox.c): the
    # folder of its phases log must be writable by everyone
    pdir = os.path.join(work, "phases")
    os.makedirs(pdir, exist_ok=True)
    os.chmod(pdir, 0o1777)
    phases = os.path.join(pdir, "phases.log")
    env = dict(os.environ, ATB_DB=store, ATB_RUNNER_PHASES_LOG=phases, ATB_PYTHON=py)
    env.setdefault("ATB_HOME", ROOT)
    t0 = time.monotonic()
    try:
        p = subprocess.run([atb, "measure", "--json", "--device", device, "--python", py,
                            task, cand],
                           capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": "killed after %d s" % timeout, "wall": time.monotonic() - t0}
    wall = time.monotonic() - t0
    try:
        r = json.loads(p.stdout)
    except ValueError:
        return {"error": (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1],
                "wall": wall}
    r["wall"] = wall
    ph, runs = {}, []
    nrun = 0
    if os.path.exists(phases):
        # a runner's last line is its total: partial lines precede it
        runs, open_at = [], {}  # every runner's last line; a job's runner still open
        with open(phases) as f:
            for line in f:
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                key = (ev.get("job"), ev.get("alone"))
                if key in open_at:
                    runs[open_at[key]] = ev
                else:
                    open_at[key] = len(runs)
                    runs.append(ev)
                if not ev.get("partial"):
                    del open_at[key]  # the runner's total: a re-run is another runner
        for ev in runs:
            nrun += 1
            for k, v in (ev.get("seconds") or {}).items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    ph[k] = ph.get(k, 0.0) + v
    r["phases"], r["runners"] = ph, nrun
    r["runner_phases"] = runs
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--atb", default=os.environ.get("ATB") or os.path.join(ROOT, "build", "dev", "atb"))
    ap.add_argument("--suite", default=os.path.join(ROOT, "tasks", "kernelbench", "level1"))
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--python", default=os.environ.get("ATB_PYTHON") or
                    os.path.join(ROOT, ".venv-torch", "bin", "python3"))
    ap.add_argument("--filter", default="*")
    ap.add_argument("--max-tasks", type=int, default=0)
    ap.add_argument("--deadline", type=float, default=0.0)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--timeout", type=int, default=900, help="per measurement, seconds")
    ap.add_argument("--json", default="")
    ap.add_argument("--kb-only", action="store_true",
                    help="only KernelBench's eval (checks the bench's own side, no atb needed)")
    a = ap.parse_args()
    if not a.kb_only and not os.access(a.atb, os.X_OK):
        ap.error("no atb at '%s' (--atb)" % a.atb)
    if not os.path.isdir(a.suite):
        ap.error("no task folder '%s' (--suite)" % a.suite)
    # by their number first (KernelBench's 1_, 2_, ..., 100_), then by name
    num = lambda f: (int(re.match(r"\d*", f).group() or 1 << 30), f)
    tasks = sorted((f for f in os.listdir(a.suite)
                    if f.endswith(".py") and fnmatch.fnmatch(f, a.filter)), key=num)
    if a.max_tasks > 0:
        tasks = tasks[:a.max_tasks]
    if not tasks:
        ap.error("no task in '%s' matches '%s'" % (a.suite, a.filter))
    t_begin = time.monotonic()
    work = tempfile.mkdtemp(prefix="bench-kb-eval.")
    rows, failed, stopped = [], 0, False
    try:
        for rnd in range(a.rounds):
            for i, name in enumerate(tasks):
                task = os.path.join(a.suite, name)
                cdir = os.path.join(work, "copies", os.path.splitext(name)[0])
                os.makedirs(cdir, exist_ok=True)
                cand = os.path.join(cdir, "model_new.py")
                with open(cand, "w") as f:
                    f.write(copy_source(task))
                order = ["kb", "atb"] if (i + rnd) % 2 == 0 else ["atb", "kb"]
                if a.kb_only:
                    order = ["kb"]
                row = {"task": name, "round": rnd, "order": order}
                for side in order:
                    if a.deadline and time.monotonic() - t_begin > a.deadline:
                        stopped = True
                        break
                    if side == "kb":
                        try:
                            row["kb"] = run_kb(a.python, task, cand, a.device, a.timeout)
                        except subprocess.TimeoutExpired:
                            row["kb"] = {"error": "killed after %d s" % a.timeout}
                    else:
                        row["atb"] = run_atb(a.atb, a.python, task, cand, a.device,
                                             os.path.join(work, "atb"), a.timeout)
                    print_side(name, side, row[side])
                if "kb" in row and ("atb" in row or a.kb_only):
                    rows.append(row)
                failed += sum(1 for s in ("kb", "atb") if "error" in row.get(s, {}))
                if stopped:
                    break
            if stopped:
                break
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(rows, a, stopped, time.monotonic() - t_begin)
    return 1 if failed else 0


def print_side(name, side, r):
    if "error" in r:
        print("  %-28s %-3s  failed: %s (%.1f s)" % (name, side, r["error"], r.get("wall", 0)),
              flush=True)
    elif side == "kb":
        print("  %-28s kb   %6.1f s (+%.1f s ref timing, import %.1f s)  correct %d/5  mean %.0f ns  std/mean %.4f"
              "  speedup %.4f [%.4f, %.4f]" % (name, r["wall"], r["s_time_ref"], r["s_import"], r["correct"],
                                              r["mean_ns"], r["cv"], r["speedup"], r["ci_low"],
                                              r["ci_high"]), flush=True)
    else:
        sp = r.get("speedup")
        print("  %-28s atb  %6.1f s  %s%s  %d attempt(s)" % (
            name, r["wall"], r.get("verdict"),
            "  speedup %.4f [%.4f, %.4f]" % (sp, r["ci_low"], r["ci_high"]) if sp else
            "  gate %s" % r.get("gate"), r.get("attempts", 0)), flush=True)


def report(rows, a, stopped, wall):
    print()
    print("bench-kb-eval: %s, device %s, %d task(s) x %d round(s)%s, bench wall %.0f s" % (
        a.suite, a.device, len({r["task"] for r in rows}), a.rounds,
        " (stopped at --deadline)" if stopped else "", wall))
    hdr = "%-24s %8s %8s %8s %7s  %-30s %8s %8s %8s" % (
        "task", "kb s", "kb+ref s", "atb s", "atb/kb", "atb speedup [95% CI]", "atb w",
        "kb cv", "kb w")
    print(hdr)
    print("-" * len(hdr))
    tk = tkr = ta = 0.0
    ws_atb, ws_kb, cvs = [], [], []
    phases = {}
    for r in rows:
        k, t = r["kb"], r.get("atb")
        if t is None:  # --kb-only
            if "error" not in k:
                print("%-24s %8.1f %8.1f %8s %7s  %-30s %8s %8.4f %8.4f" % (
                    r["task"][:24], k["wall"], k["wall_total"], "-", "-",
                    "kb %.4f [%.4f, %.4f]" % (k["speedup"], k["ci_low"], k["ci_high"]), "-",
                    k["cv"], k["rel_width"]))
            continue
        if "error" in k or "error" in t:
            print("%-24s %s" % (r["task"][:24], "failed: " + (k.get("error") or t.get("error"))))
            continue
        tk += k["wall"]
        tkr += k["wall_total"]
        ta += t["wall"]
        for p, v in t.get("phases", {}).items():
            phases[p] = phases.get(p, 0.0) + v
        sp = t.get("speedup")
        w = (t["ci_high"] - t["ci_low"]) / sp if sp else None
        if w is not None:
            ws_atb.append(w)
        ws_kb.append(k["rel_width"])
        cvs.append(k["cv"])
        print("%-24s %8.1f %8.1f %8.1f %7.2f  %-30s %8s %8.4f %8.4f" % (
            r["task"][:24], k["wall"], k["wall_total"], t["wall"], t["wall"] / k["wall"],
            ("%.4f [%.4f, %.4f]" % (sp, t["ci_low"], t["ci_high"])) if sp else
            "%s %s" % (t.get("verdict"), t.get("gate")),
            "%.4f" % w if w is not None else "-", k["cv"], k["rel_width"]))
    if tk > 0:
        med = lambda v: sorted(v)[len(v) // 2] if v else float("nan")
        ti = sum(r["kb"]["s_import"] for r in rows if "error" not in r["kb"] and
                 "error" not in r.get("atb", {}))
        print("total: atb %.1f s, kb %.1f s (kb+ref %.1f s): atb / kb %.2f, atb / (kb+ref) %.2f"
              % (ta, tk, tkr, ta / tk, ta / tkr))
        if tk > ti > 0:
            print("       kb without its process's import of torch (%.1f s): atb / kb %.2f"
                  % (ti, ta / (tk - ti)))
        print("interval: atb's 95%% width / speedup, median %.4f; kb's std/mean median %.4f; "
              "kb's 95%% width of mean(ref)/mean(new), median %.4f" % (
                  med(ws_atb), med(cvs), med(ws_kb)))
        tot = sum(phases.values())
        if tot > 0:
            print("atb's runners' phases (all tasks, %.1f s of %.1f s atb wall):" % (tot, ta))
            for p, v in sorted(phases.items(), key=lambda kv: -kv[1])[:12]:
                print("  %-16s %8.1f s  %5.1f%%" % (p, v, 100 * v / tot))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": a.device, "suite": a.suite, "rows": rows}, f)


if __name__ == "__main__":
    sys.exit(main())
