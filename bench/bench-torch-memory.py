#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""bench-torch-memory: how many input-sized tensors the torch runner holds at
its peak, for one or more atb trees, measured in the same run.

  bench/bench-torch-memory.py [--tree DIR]... [--python PY] [--device cpu|cuda]
                              [--elements N] [--small N] [--seeds K] [--json FILE]

For each tree (default: this checkout; give an older checkout's worktree,
built, to compare: DIR/build/dev/atb-runner, else DIR/build/release/, and
DIR/python), atb-runner runs one job of a ReLU task (fp32, N elements, the
candidate a copy of the reference) through correctness (every input set,
the result-reuse check) and timing, twice: at N elements and at SMALL.  The
peak memory of the runner process is read at its end (the CPU: ru_maxrss of
wait4; cuda: the largest used_memory nvidia-smi reports for the process,
polled every 20 ms), and the difference between the two runs, over the bytes
of one input set, is the figure: input sets alive at the peak.  The trees
are run alternately, so a drift of the box hits each alike.

Not a test: the figures depend on PyTorch's caching allocator and the
platform.  docs/torch.md ("Memory") has the ones seen.
"""
import argparse
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

TASK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


N = %d


def get_inputs():
    return [torch.rand(N)]


def get_init_inputs():
    return []
'''

CAND = TASK.replace("class Model(", "class ModelNew(")


def python_info(py):
    code = r'''
import sys, os, sysconfig, json
v = sysconfig.get_config_var
lib = [os.path.join(d, n) for n in (v("INSTSONAME"), v("LDLIBRARY")) if n and ".so" in n
       for d in (v("LIBDIR") or "", os.path.join(sys.base_prefix, "lib"))
       if os.path.exists(os.path.join(d, n))]
print(json.dumps({"library": lib[0] if lib else "", "home": sys.base_prefix,
                  "path": [p for p in sys.path if p]}))'''
    return json.loads(subprocess.run([py, "-c", code], check=True, capture_output=True,
                                     text=True).stdout)


def job(task, cand, modules, pyinfo, device, seeds):
    return {
        "id": "bench-torch-memory", "abi": 1, "backend": "torch",
        "arms": [{"name": "baseline", "py": task}, {"name": "candidate", "py": cand}],
        "reference": "baseline",
        "torch": {"python": pyinfo, "module_path": modules, "device": device},
        "seeds": list(range(1, seeds + 1)),
        "cache_bytes": 1 << 20,
        "timing": {"warmup_min_iterations": 3, "warmup_min_time_ms": 5,
                   "trials_min": 5, "trials_max": 10, "target_rel_halfwidth": 0.05,
                   "ci_level": 0.95, "max_time_per_seed_s": 1.0, "cache_flush": True,
                   "cache_flush_factor": 2, "cache_flush_min_bytes": 1 << 20,
                   "interleave": "randomized_pairs"},
        "correctness": {"poison": "nan", "input_sets_per_seed": 3,
                        "tolerances": {"fp32": {"atol": 1e-4, "rtol": 1e-4}},
                        "distributions": [
                            {"name": "signed_uniform", "kind": "uniform", "low": -1.0,
                             "high": 1.0},
                            {"name": "normal", "kind": "normal", "mean": 0.0,
                             "stddev": 1.0}]},
        "options": {"time_if_incorrect": False, "skip_timing": False, "pin_cpu": -1},
    }


def gpu_poll(pid, stop, peak):
    """The largest used_memory (MiB) nvidia-smi lists for pid, until stop."""
    while not stop.is_set():
        try:
            out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                                  "--format=csv,noheader,nounits"], capture_output=True,
                                 text=True, timeout=5).stdout
            for line in out.splitlines():
                p, _, m = line.partition(",")
                if p.strip() == str(pid):
                    peak[0] = max(peak[0], int(m.strip()))
        except (OSError, subprocess.SubprocessError, ValueError):
            pass
        time.sleep(0.02)


def run_once(runner, jobtext, device):
    """(peak bytes, exit status, seconds) of one runner on jobtext."""
    t0 = time.monotonic()
    p = subprocess.Popen([runner], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL)
    stop, peak = threading.Event(), [0]
    th = None
    if device == "cuda":
        th = threading.Thread(target=gpu_poll, args=(p.pid, stop, peak), daemon=True)
        th.start()
    out = []
    reader = threading.Thread(target=lambda: out.append(p.stdout.read()), daemon=True)
    reader.start()
    p.stdin.write(jobtext.encode())
    p.stdin.close()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    reader.join()
    stop.set()
    if th is not None:
        th.join()
    events = [json.loads(l) for l in out[0].decode().splitlines() if l.startswith("{")]
    done = [e for e in events if e.get("event") == "done"]
    err = [e for e in events if e.get("event") == "error"]
    if not done:
        raise RuntimeError("the runner did not finish: %s" % (err[:1] or p.returncode))
    used = peak[0] << 20 if device == "cuda" else ru.ru_maxrss << 10
    return used, p.returncode, time.monotonic() - t0


def tree_paths(d):
    for b in ("build/dev", "build/release", "build/gpu-check"):
        r = os.path.join(d, b, "atb-runner")
        if os.access(r, os.X_OK):
            return r, os.path.join(d, "python")
    raise SystemExit("bench-torch-memory: no atb-runner under %s/build/{dev,release}" % d)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", default=[])
    ap.add_argument("--python", default=os.environ.get(
        "ATB_PYTHON", os.path.join(ROOT, ".venv-torch", "bin", "python3")))
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--elements", type=int, default=64 << 20)
    ap.add_argument("--small", type=int, default=1 << 12)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--json")
    a = ap.parse_args()
    trees = a.tree or [ROOT]
    pyinfo = python_info(a.python)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-torch-memory.") as tmp:
        files = {}
        for n in (a.small, a.elements):
            t, c = os.path.join(tmp, "task%d.py" % n), os.path.join(tmp, "cand%d.py" % n)
            with open(t, "w") as f:
                f.write(TASK % n)
            with open(c, "w") as f:
                f.write(CAND % n)
            files[n] = (t, c)
        for r in range(a.rounds):
            order = trees if r % 2 == 0 else trees[::-1]
            for d in order:
                runner, modules = tree_paths(d)
                res = {}
                for n in (a.small, a.elements):
                    t, c = files[n]
                    text = json.dumps(job(t, c, modules, pyinfo, a.device, a.seeds))
                    res[n] = run_once(runner, text, a.device)
                extra = res[a.elements][0] - res[a.small][0]
                sets = extra / (4.0 * (a.elements - a.small))
                rows.append({"tree": d, "round": r, "device": a.device,
                             "elements": a.elements, "peak_bytes": res[a.elements][0],
                             "small_peak_bytes": res[a.small][0],
                             "input_sets_at_peak": round(sets, 2),
                             "seconds": round(res[a.elements][2], 1)})
                print("%-40s round %d  peak %8.1f MiB (small %7.1f)  input sets at peak %5.2f"
                      "  %5.1f s" % (d[-40:], r, res[a.elements][0] / 2**20,
                                     res[a.small][0] / 2**20, sets, res[a.elements][2]),
                      flush=True)
    if len(trees) > 1:
        by = {d: [x["input_sets_at_peak"] for x in rows if x["tree"] == d] for d in trees}
        ref = sum(by[trees[0]]) / len(by[trees[0]])
        for d in trees[1:]:
            m = sum(by[d]) / len(by[d])
            print("%s against %s: %.2f against %.2f input sets, ratio %.2f"
                  % (d, trees[0], m, ref, m / ref if ref else float("nan")))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
