#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""bench-torch-timing: atb's time for an eager PyTorch model (atb-runner's
torch backend: the C timing core, CUDA events on PyTorch's stream, L2 flush)
against a plain torch.cuda.Event loop with the same L2 flush, in one run.

usage: bench-torch-timing.py ATB_RUNNER [TASK.py ...]
  (default tasks: tests/fixtures/torch/matmul.py and softmax.py; run on a
  GPU machine with the python that has torch: ATB_PYTHON or this one)

For each task, in this order: the plain loop (block 1), one atb-runner job
(baseline and a copy of it as candidate, interleaved on 3 seeds), the plain
loop again (block 2).  Prints the medians, atb's median over the plain
loop's (target: within 2%), and each side's wall time per timed trial (the
runner's per-trial overhead over the loop).  Exit 0 when every ratio is
within 2%, 1 otherwise, 2 when it cannot run (no GPU).  Prints ratios
measured in this run only.

Reading the wall per trial: the timing core's warm-up runs for a host time
(timing.warmup.min_time_ms) without waiting for the device, so an eager
model's asynchronous launches pile up (on the H200, 1169 warm-up calls of
a 343 us GEMM in 50 ms) and the first timed trials wait for that backlog.
The runner's wall per trial therefore includes the backlog: it bounds the
per-trial overhead from above, it does not measure it.  The per-seed lines
show the warm-up counts to judge it by.
"""
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FIX = os.path.join(ROOT, "tests", "fixtures", "torch")
FLUSH_MIN_BYTES = 64 << 20   # the protocol's timing.cache_flush.min_bytes (v2)
FLUSH_FACTOR = 2


def load(path):
    import importlib.util
    spec = importlib.util.spec_from_file_location("task", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def plain_loop(task, flush_bytes, trials):
    """The reference loop: flush L2 (a memset of flush_bytes), event, call,
    event, wait -- per trial; medians of the event times, wall per trial."""
    import torch
    torch.manual_seed(1)
    mod = load(task)
    model = mod.Model(*mod.get_init_inputs()).cuda()
    xs = [x.cuda() if torch.is_tensor(x) else x for x in mod.get_inputs()]
    flush = torch.empty(flush_bytes, dtype=torch.uint8, device="cuda")
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    times = []
    with torch.no_grad():
        for _ in range(20):
            model(*xs)
        torch.cuda.synchronize()
        t0 = time.monotonic_ns()
        for i in range(trials):
            flush.fill_(i & 0xff)
            start.record()
            model(*xs)
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) * 1e6)
        wall = (time.monotonic_ns() - t0) / trials
    return statistics.median(times), wall


def runner_job(runner, task, cand, python):
    import torch
    info = subprocess.run([python, "-c", (
        "import sys, os, sysconfig, json\n"
        "v = sysconfig.get_config_var\n"
        "c = [os.path.join(d, n) for n in (v('INSTSONAME'), v('LDLIBRARY')) if n and '.so' in n"
        " for d in (v('LIBDIR') or '', os.path.join(sys.base_prefix, 'lib'))"
        " if os.path.exists(os.path.join(d, n))]\n"
        "print(json.dumps({'library': c[0] if c else '', 'home': sys.base_prefix,"
        " 'path': [p for p in sys.path if p]}))")], capture_output=True, text=True,
        check=True).stdout
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    job = {
        "id": "bench-torch-timing", "abi": 1, "backend": "torch",
        "arms": [{"name": "baseline", "py": task}, {"name": "candidate", "py": cand}],
        "reference": "baseline", "seeds": [1, 2, 3], "cache_bytes": l2,
        "torch": {"python": json.loads(info), "module_path": os.path.join(ROOT, "python"),
                  "device": "cuda"},
        "timing": {"warmup_min_iterations": 10, "warmup_min_time_ms": 50, "trials_min": 50,
                   "trials_max": 200, "target_rel_halfwidth": 0.002, "ci_level": 0.95,
                   "max_time_per_seed_s": 5.0, "cache_flush": True,
                   "cache_flush_factor": FLUSH_FACTOR, "cache_flush_min_bytes": FLUSH_MIN_BYTES,
                   "interleave": "randomized_pairs"},
        "correctness": {"poison": "nan", "tolerances": {"fp32": {"atol": 1e-4, "rtol": 1e-4}},
                        "distributions": []},
        "options": {"time_if_incorrect": True, "skip_timing": False, "pin_cpu": -1}}
    p = subprocess.run([runner], input=json.dumps(job) + "\n", capture_output=True, text=True)
    events = [json.loads(line) for line in p.stdout.splitlines() if line.strip()]
    bad = [e for e in events if e["event"] == "error"]
    if bad or p.returncode:
        raise RuntimeError("runner failed (%d): %s %s" % (p.returncode, bad, p.stderr[-800:]))
    env = next(e for e in events if e["event"] == "env")
    samples = [e for e in events if e["event"] == "samples"]
    base = [t for e in samples if e["arm"] == "baseline" for t in e["times_ns"]]
    trials = sum(len(e["times_ns"]) for e in samples)
    # Wall per timed trial: each seed's time less its warm-up, over its trials.
    per_seed = {}
    for e in samples:
        s = per_seed.setdefault(e["seed"], [e["seed_elapsed_ns"], 0])
        s[0] -= e["warmup_ns"]
    wall = sum(v[0] for v in per_seed.values()) / trials
    for e in samples:
        print("  runner seed %d %s: %d trials, stop %s, warm-up %d calls %.1f ms, seed %.1f ms, "
              "median %.0f ns" % (e["seed"], e["arm"], e["trials"], e["stop"],
                                  e["warmup_iterations"], e["warmup_ns"] / 1e6,
                                  e["seed_elapsed_ns"] / 1e6, e["median_ns"]))
    return statistics.median(base), wall, env


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    import torch
    if not torch.cuda.is_available():
        print("bench-torch-timing: no cuda device: not measured")
        return 2
    runner = sys.argv[1]
    tasks = sys.argv[2:] or [os.path.join(FIX, "matmul.py"), os.path.join(FIX, "softmax.py")]
    python = os.environ.get("ATB_PYTHON", sys.executable)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush_bytes = max(int(FLUSH_FACTOR * l2), FLUSH_MIN_BYTES)
    print("device %s, L2 %d bytes, flush %d bytes, torch %s" % (
        torch.cuda.get_device_name(0), l2, flush_bytes, torch.__version__))
    ok = True
    for task in tasks:
        stem = os.path.splitext(os.path.basename(task))[0]
        cand = os.path.join(os.path.dirname(task), stem, "copy", "model_new.py")
        p1, w1 = plain_loop(task, flush_bytes, 300)
        atb, aw, env = runner_job(runner, task, cand, python)
        p2, w2 = plain_loop(task, flush_bytes, 300)
        plain = statistics.median([p1, p2])
        ratio = atb / plain
        ok = ok and abs(ratio - 1) <= 0.02
        print("%s: plain loop median %.1f ns (blocks %.1f, %.1f), atb median %.1f ns: "
              "atb/plain %.4f (target within 2%%); flush %d bytes in atb's env" % (
                  stem, plain, p1, p2, atb, ratio, env["flush_bytes"]))
        print("%s: wall per timed trial: plain loop %.0f ns, atb-runner %.0f ns "
              "(its spin kernel %d ns included): overhead %.0f ns/trial" % (
                  stem, statistics.median([w1, w2]), aw, env.get("spin_ns", 0),
                  aw - statistics.median([w1, w2])))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
