# SPDX-License-Identifier: GPL-3.0-or-later
"""Seeded inputs of a KernelBench-format task, where the job's device allows.

A task's get_inputs() makes its tensors with torch's default device and
default generator.  On a cuda job, atb calls it with the job's device as
torch's default device (the torch.device context manager), after
torch.manual_seed(seed), which seeds the CPU generator and every CUDA
generator alike: the tensors are born on the GPU, from the same seed and
the same distribution as on the CPU, but not the same numbers (the CUDA
generator is another stream of random numbers).  A task that does not allow
it falls back to the CPU path (get_inputs() on the CPU, then moved), with
the reason kept: get_inputs() raises under the default device, or it
returns a tensor on another device anyway (device='cpu', torch.from_numpy).
On a cpu job nothing changes: the CPU path.

The same seed gives the same inputs in every process on the same device
(the paired arms and the baseline-alone runner see the same inputs).  The
protocol's adversarial sets redraw every floating tensor (same shape and
dtype) from a torch.Generator on the device the inputs were made on, in
the tensor's own dtype (float32, float64; narrower floats in float32).

Run as a script it prints what a runner would draw, for the tests:
    python -m atb_torch.inputs TASK.py --device cpu|cuda|meta [--seed S]
        [--on-device] [--dist JSON] [--stream N]
prints {"inputs_on", "inputs_why", "sha256": [per input, or null]}.
--on-device takes the device path even on the CPU (the seam the CPU tests
use); on "meta" only the placement is known (meta tensors have no bytes).

Does not: time anything, or import the task (the caller passes the module).
"""
import hashlib
import importlib.util
import json
import sys
import traceback

MASK64 = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    z = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def mix(*parts):
    """A 63-bit seed from (seed, set, input, stream): fixed forever."""
    h = 0
    for p in parts:
        h = splitmix64(h ^ (p & MASK64))
    return h & ((1 << 63) - 1)


def last_line(text):
    lines = text.strip().splitlines()
    return lines[-1][:300] if lines else "an exception"


def draw(task, seed_value, device, on_device):
    """get_inputs() after torch.manual_seed(seed_value): on device when
    on_device (born there), else on the CPU.  A list, not yet moved."""
    import torch
    torch.manual_seed(seed_value)
    if on_device:
        with torch.device(device):
            return list(task.get_inputs())
    return list(task.get_inputs())


def placement(task, device, seed_value, force=False):
    """(on_device, why): may this task's inputs be born on device?  Asked
    once per runner, by drawing one set there.  A cpu device answers no
    (the CPU path) unless force (the tests' seam)."""
    import torch
    if device.type == "cpu" and not force:
        return False, "cpu job"
    try:
        xs = draw(task, seed_value, device, True)
    except BaseException:
        return False, "get_inputs() raised with %s as the default device: %s" % (
            device, last_line(traceback.format_exc(limit=4)))
    for i, x in enumerate(xs):
        if torch.is_tensor(x) and x.device.type != device.type:
            return False, "get_inputs() returned input %d on %s with %s as the default device" % (
                i, x.device, device)
    return True, "born on %s" % device.type


# Drawn in their own dtype (one pass, in place); narrower floats in float32, then cast.
DRAW_DTYPES = ("float32", "float64")


def redraw(xs, d, gen_seed, device):
    """A new list: every floating tensor of xs redrawn from the protocol's
    distribution d (same shape and dtype; float32 and float64 drawn in
    their own dtype, narrower floats in float32 then cast) with a generator
    on device, filled in place (uniform_ / normal_: one pass, no float64
    temporaries).  Other entries are xs's own."""
    import torch
    g = torch.Generator(device=device).manual_seed(gen_seed)
    res = list(xs)
    for i, x in enumerate(xs):
        if torch.is_tensor(x) and x.is_floating_point():
            own = str(x.dtype).replace("torch.", "") in DRAW_DTYPES
            v = torch.empty(x.shape, dtype=x.dtype if own else torch.float32, device=device)
            if d.get("kind") == "normal":
                v.normal_(float(d.get("mean", 0.0)), float(d.get("stddev", 1.0)), generator=g)
            else:
                v.uniform_(float(d.get("low", 0.0)), float(d.get("high", 1.0)), generator=g)
            res[i] = v if own else v.to(x.dtype)
    return res


def generate(task, seed, dist, stream, dists, device, on_device, base=None):
    """The inputs of (seed, set dist, stream) on device: get_inputs() under
    the seed, and for dist >= 0 every floating tensor redrawn from
    dists[dist].  The CPU path draws on the CPU and moves the result.
    base: the get_inputs() draw of (seed, stream) made earlier (the same
    for every set of the seed; only read); None draws it here.  For
    dist < 0 on the device path the result shares base's tensors."""
    import torch
    born = device if on_device else torch.device("cpu")
    xs = base if base is not None else draw(task, mix(seed, 0, 0, stream), device, on_device)
    if dist >= 0:
        xs = redraw(xs, dists[dist], mix(seed, 0, dist + 1, stream), born)
    return [x.to(device) if torch.is_tensor(x) else x for x in xs]


def base(task, seed, stream, device, on_device):
    """The get_inputs() draw generate() starts from for (seed, stream)."""
    return draw(task, mix(seed, 0, 0, stream), device, on_device)


def digest(x):
    import torch
    if not torch.is_tensor(x):
        return hashlib.sha256(repr(x).encode()).hexdigest()
    if x.device.type == "meta":
        return None
    b = x.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
    return hashlib.sha256(b.numpy().tobytes()).hexdigest()


def main(argv):
    import argparse
    import torch
    ap = argparse.ArgumentParser(prog="python -m atb_torch.inputs")
    ap.add_argument("task")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--stream", type=int, default=0)
    ap.add_argument("--dist", default=None, help="a protocol distribution as JSON")
    ap.add_argument("--on-device", action="store_true")
    a = ap.parse_args(argv)
    spec = importlib.util.spec_from_file_location("atb_task", a.task)
    task = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(task)
    device = torch.device(a.device)
    on, why = placement(task, device, mix(a.seed, 0, 0, a.stream), force=a.on_device)
    dists = [json.loads(a.dist)] if a.dist else []
    xs = generate(task, a.seed, 0 if dists else -1, a.stream, dists, device, on)
    print(json.dumps({"inputs_on": device.type if on else "cpu", "inputs_why": why,
                      "sha256": [digest(x) for x in xs]}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
