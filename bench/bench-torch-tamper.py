#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""bench-torch-tamper: the cost of the torch backend's tamper watch
(python/atb_torch/tamper.py) in one run: the snapshot, one check (what
runs before each of the reference's timed trials), and one timed call of
each arm for scale, on a KernelBench-format task and candidate, through
the same Session atb-runner drives.

usage: bench-torch-tamper.py [--device cpu|cuda] [TASK.py CANDIDATE.py]
  (default: tests/fixtures/torch/relu01.py and relu01/honest; run with the
  python that has torch)

Prints the saved keys and functions, the snapshot's time (median of 5),
a check's time (the median and the best of 30 blocks of 20: on a loaded
box the best is the cost, the median the cost plus the load), a check's
between input sets (which hashes the reference's weights too), and the
calls' median times.  Exit 0, or 2 when it cannot run.
"""
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))


def main():
    args = sys.argv[1:]
    device = "cpu"
    if args[:1] == ["--device"]:
        device, args = args[1], args[2:]
    fix = os.path.join(ROOT, "tests", "fixtures", "torch")
    task, cand = args[:2] if len(args) >= 2 else (
        os.path.join(fix, "relu01.py"), os.path.join(fix, "relu01", "honest", "model_new.py"))
    from atb_torch import runner, tamper
    job = json.load(open(os.path.join(fix, "relu01-job.json")))
    job["arms"][0]["py"], job["arms"][1]["py"] = task, cand
    job["torch"]["python"]["path"] = []
    job["torch"]["device"] = device
    if device == "cuda":
        import torch
        if not torch.cuda.is_available():
            print("no cuda device")
            return 2
        job["torch"]["stream"] = torch.cuda.Stream().cuda_stream
    s = runner.open(json.dumps(job))
    if isinstance(s, str):
        print("cannot open the session:", s)
        return 2
    w = s.watch
    snaps = []
    for _ in range(5):
        t0 = time.perf_counter()
        tamper.Watch(s.torch, s.task, s.models[s.reference], s, s.device)
        snaps.append(time.perf_counter() - t0)
    s.prepare(1)
    blocks = []
    for _ in range(30):
        t0 = time.perf_counter()
        for _ in range(20):
            s.tamper_trial()
        blocks.append((time.perf_counter() - t0) / 20)
    # a check between input sets and around each seed's group, which also
    # hashes the reference's parameters and buffers (session 30)
    sets = []
    for _ in range(10):
        t0 = time.perf_counter()
        for _ in range(5):
            s.tamper_check("an input set (bench)")
        sets.append((time.perf_counter() - t0) / 5)
    nbytes = sum(t.numel() * t.element_size() for t in
                 list(s.models[s.reference].parameters()) + list(s.models[s.reference].buffers())) \
        if isinstance(s.models[s.reference], s.torch.nn.Module) else 0
    calls = {}
    for arm in (0, 1):
        ts = []
        for _ in range(50):
            t0 = time.perf_counter()
            s.call(arm)
            s.sync()
            ts.append(time.perf_counter() - t0)
        calls[arm] = statistics.median(ts)
    changes = json.loads(s.tamper("the end"))["changes"]
    print("device %s, torch %s, python %s" % (device, s.torch.__version__, sys.version.split()[0]))
    print("saved: %d keys in %d namespaces, %d functions, %d sys.modules entries" % (
        sum(x.n for x in w.spaces), len(w.spaces), len(w.funcs.fns), len(w.sysmods)))
    print("snapshot: %.2f ms (median of 5)" % (1e3 * statistics.median(snaps)))
    print("check: %.0f us median, %.0f us best (30 blocks of 20)" % (
        1e6 * statistics.median(blocks), 1e6 * min(blocks)))
    print("check between sets (the reference's %d bytes of weights hashed): %.0f us median, "
          "%.0f us best (10 blocks of 5)" % (nbytes, 1e6 * statistics.median(sets), 1e6 * min(sets)))
    print("one call (and sync): reference %.0f us, candidate %.0f us" % (
        1e6 * calls[0], 1e6 * calls[1]))
    print("changes seen: %s" % (changes or "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
