# SPDX-License-Identifier: GPL-3.0-or-later
"""The session atb-runner's torch backend (runner/torch.c) drives.

The C runner calls, in order: open(job_json) -> Session; Session.env();
per seed and input set, Session.check(seed, dist, arm) for every checked arm
(and Session.reuse(arm, step) for steps -1, 0, 1, 2 once per seed on the
first right input set, each compared before the next); then
per seed Session.prepare(seed) and Session.call(arm) once per trial, timed
by the C timing core.  Every entry point except call() catches its own
exceptions and answers a JSON text ({"error": ..., "reason": ...} on
failure), so the C side never has to read a Python exception.

Facts, not verdicts: outputs are handed back as CPU tensors (their
addresses, kept alive until the next call) and compared in C by the same
tolerance rule every backend uses (runner/check.c).

Does not: time anything, print anything the harness reads (fd 1 is stderr
here), or write bytecode next to the task (the surface gate would see it).
"""
import gc
import hashlib
import importlib.util
import inspect
import json
import os
import sys
import traceback

from atb_torch import inputs, tamper
from atb_torch.phases import Phases

# PROTO: timing.placement -- the pads are drawn from (seed, model) under a
# key the candidate cannot know: BLAKE2b keyed with the job's placement_key
# (the harness draws one per atb process from the kernel's CSPRNG, so the
# paired and the baseline-alone runners of a measurement place alike), or
# with os.urandom's when the job has none.  Bound here, before any
# candidate is imported (the tamper watch holds this module's globals and
# these functions' code strictly), and builtins all: random.Random, used
# before, draws through Python methods of a class the candidate shares
# (random.Random.seed patched fixed every pad) and from a seed it knows.
_blake2b = hashlib.blake2b
_urandom = os.urandom
_from_bytes = int.from_bytes


def _task_ids():
    """This process's thread ids (Linux's /proc/self/task)."""
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return []


def _draw(key, seed, model, i, n):
    """Draw i of (seed, model): an integer in [0, n)."""
    d = _blake2b(b"%d/%d/%d" % (seed, model, i), key=key, digest_size=8).digest()
    return _from_bytes(d, "little") % n


STREAM_CHECK, STREAM_REUSE, STREAM_TIMING = 0, 1, 2
# torch dtypes the C comparison knows, by name; others are converted first.
DTYPE_NAMES = {"float32": "fp32", "float64": "fp64", "float16": "fp16",
               "bfloat16": "bf16", "int32": "int32", "int64": "int64"}


def load_module(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError("cannot load '%s'" % path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def flatten(out):
    """A model's output as a list of (name, value).  A tuple or list is read
    through tuple's and list's own __len__ and __getitem__, never the
    object's: a subclass's __iter__ or __getitem__ is the candidate's code,
    and it would run in the runner's check, after the timed call (a lazy
    output filled there: relu01/lazy_list)."""
    for base in (tuple, list):
        if issubclass(type(out), base):  # not isinstance: it may read out.__class__
            return [("output[%d]" % i, base.__getitem__(out, i))
                    for i in range(base.__len__(out))]
    return [("output", out)]


class Failure(Exception):
    def __init__(self, reason, message):
        Exception.__init__(self, message)
        self.reason = reason


def answer(fn, ph=None):
    """Run fn; its result, or the exception, as one JSON text (ph: the
    session's Phases, which know the phases an exception was raised in)."""
    try:
        return json.dumps(fn())
    except Failure as e:
        return json.dumps({"error": str(e), "reason": e.reason})
    except BaseException as e:  # the C side must get an answer whatever happened
        # what happened first: the stored message may be cut after a few
        # hundred characters, and the traceback's last line is the one that
        # says it (an out-of-memory on 36_RMSNorm read as its head alone)
        what = "".join(traceback.format_exception_only(type(e), e)).strip()
        last = ph.raised if ph is not None else None
        where = last[1] if last is not None and last[0] == id(e) else None
        if ph is not None:
            ph.raised = None
        if where:
            # the runner's phase first: the stored reason is cut after a few
            # hundred characters, and an out-of-memory's own text is long
            # (39_L2Norm's said how much, not where)
            what = "in phase %s: %s" % (" > ".join(where), what)
        return json.dumps({"error": what + "\n" + traceback.format_exc(limit=8),
                           "reason": "python"})


def answer_in(ph, fn):
    """answer(fn) for a session whose phases are ph."""
    return answer(fn, ph)


class Session:
    def __init__(self, job):
        self.ph = ph = Phases()
        with ph("imports"):
            import torch
        self.torch = torch
        sys.dont_write_bytecode = True
        torch.set_grad_enabled(False)
        # PROTO: gates.background -- PyTorch's intra-op pool made now (a
        # parallel op on every thread it has), before any candidate code:
        # the threads alive here are the runner's own, their CPU beside
        # the timed calls is not background work (runner/watch.c); what
        # other threads burn is.  A frozenset: the watch holds the object.
        with ph("imports"):
            torch.ones(1 << 20).add_(1.0).sum()
        self.trusted_threads = frozenset(_task_ids())
        t = job["torch"]
        self.device = torch.device(t.get("device", "cpu"))
        self.stream = None
        if self.device.type == "cuda":
            if not torch.cuda.is_available():
                raise Failure("no_cuda", "torch sees no cuda device (torch %s)" % torch.__version__)
            # PyTorch works on the runner's stream: the C timer's events and
            # flush are recorded on the very stream the models launch on.
            self.stream = torch.cuda.ExternalStream(int(t["stream"]), device=self.device)
            torch.cuda.set_stream(self.stream)
        # PROTO: timing.placement -- where each seed puts the arms' inputs
        self.placement = job.get("timing", {}).get("placement", "fixed")
        pk = job.get("timing", {}).get("placement_key")
        self.placement_key = bytes.fromhex(pk) if isinstance(pk, str) and pk else _urandom(16)
        self.placement_from = "job" if isinstance(pk, str) and pk else "runner"
        self.pads = None
        corr = job.get("correctness", {})
        self.dists = corr.get("distributions", [])
        # PROTO: correctness.reference_precision (version 14 on): the
        # factor (None: no rule); rp_state None until the runner's first
        # set is compared both ways, then True (rerun every set) or False
        # (its two runs were bit for bit equal: never again)
        rp = corr.get("reference_precision")
        self.rp_factor = float(rp["factor"]) if isinstance(rp, dict) and \
            rp.get("factor") else None
        self.rp_state = None
        self.rp_why = None
        self.arms = job["arms"]
        self.reference = [a["name"] for a in self.arms].index(job.get("reference", "baseline"))
        seeds = job.get("seeds", [0])
        self.init_seed = int(t.get("init_seed", seeds[0] if seeds else 0))
        # The reference's module first: the tamper watch is taken after it is
        # imported and every arm of the task file built (the reference, the
        # drift side's twin), before any other arm's module is imported
        # (tamper.py).
        mods = {}
        self.task = None
        self.models = [None] * len(self.arms)
        self.watch = None
        ref_py = self.arms[self.reference]["py"]
        twins = [i for i, a in enumerate(self.arms) if a["py"] == ref_py and i != self.reference]
        order = [self.reference] + twins + [i for i, a in enumerate(self.arms)
                                             if a["py"] != ref_py]
        last_of_task = order[len(twins)]
        for i in order:
            a = self.arms[i]
            path = a["py"]
            if path not in mods:
                try:
                    with ph("imports"):
                        mods[path] = load_module("atb_arm_%d" % i, path)
                except BaseException:
                    raise Failure("dlopen", "cannot import arm '%s' ('%s'): %s" % (
                        a["name"], path, traceback.format_exc(limit=4)))
                if i != self.reference:
                    self.tamper_check("the import of arm '%s'" % a["name"])
            if i == self.reference:
                self.task = mods[path]
                for name in ("get_inputs", "get_init_inputs", "Model"):
                    if not hasattr(self.task, name):
                        raise Failure("no_symbol", "no '%s' in the task '%s'" % (name, path))
                torch.manual_seed(self.init_seed)
                self.init_inputs = list(self.task.get_init_inputs())
            cls_name = "Model" if path == ref_py else "ModelNew"
            cls = getattr(mods[path], cls_name, None)
            if cls is None:
                raise Failure("no_symbol", "no class '%s' in arm '%s' ('%s')" % (
                    cls_name, a["name"], path))
            if i == self.reference:
                self.ref_cls = cls  # PROTO: correctness.reference_precision (watched)
            # PROTO: the same seeded initialisation for every arm
            torch.manual_seed(self.init_seed)
            with ph("models"):
                try:
                    m = cls(*self.init_inputs)
                except BaseException:
                    raise Failure("kernel_failed", "arm '%s' failed in its constructor: %s" % (
                        a["name"], traceback.format_exc(limit=4)))
                if isinstance(m, torch.nn.Module):
                    m = m.to(self.device)
            self.models[i] = m
            if i == last_of_task:
                with ph("tamper"):
                    self.watch = tamper.Watch(torch, self.task, self.models[self.reference],
                                              self, self.device)
                # PROTO: gates tamper -- before any candidate code: the
                # collector's lists refused for good ("torch": {"gc_guard":
                # true}, which atb measure sends)
                if t.get("gc_guard"):
                    tamper.guard_gc(self.watch)
                self.gc_guard = bool(t.get("gc_guard"))
            elif self.watch is not None:
                where = "the construction of arm '%s'" % a["name"]
                self.watch.models_set(where)
                self.tamper_check(where)
        # The compiled reference ("torch": {"compile": {"mode": ...}}): one more
        # model after the job's arms, timed in the same rounds, never judged.
        self.compile_mode = None
        self.compile_error = None
        if t.get("compile"):
            self.compile_mode = str(t["compile"].get("mode", "default"))
            with ph("models"):
                self.models.append(self.compiled_reference())
            # the runner's own model, after the candidate's checks above
            if self.watch is not None:
                self.watch.models_set("the construction of the compiled reference")
            self.tamper_check("the construction of the compiled reference")
        try:
            params = list(inspect.signature(self.task.Model.forward).parameters)[1:]
        except (TypeError, ValueError):
            params = []
        self.input_names = params
        # PROTO: correctness.distributions -- on cuda the inputs are born on
        # the device where the task allows (same seed, same distribution).
        with ph("inputs"):
            self.inputs_on_device, self.inputs_why = inputs.placement(
                self.task, self.device, inputs.mix(self.init_seed, 0, 0, STREAM_CHECK))
        self.keep = []
        self.cur = None
        self.out_facts = None  # the reference's outputs on the first timing draw
        self.last_out = None
        self.timing_inputs = None
        self.timing_seed = None
        self.timed = None    # the timed group's checks (timed_begin .. timed_end)
        self.bases = {}      # (seed, stream) -> get_inputs() draw (gen)
        self.pool = {}       # (slot, dtype, numel) -> host buffer (host)
        self.slot = 0        # the next host buffer slot of this entry point
        self.pending = False  # non_blocking copies issued, not yet synced
        # Host buffers for the outputs' copies: pinned on cuda (one
        # non_blocking copy each, one sync), allocated once per slot and
        # shape and reused; False when pinning failed (pageable then).
        self.pinned = self.device.type == "cuda"
        # PROTO: correctness.tolerances -- on cuda the C side compares on
        # the GPU when the driver took its kernel (runner/torch.c
        # compare_device): the outputs are handed over as dense device
        # copies, not copied to the host (68% of a 19_ReLU measurement's
        # wall on the H200 went to those host copies).
        self.compare_on_device = self.device.type == "cuda" and bool(t.get("compare_on_device"))
        if self.watch is not None:
            self.watch.fix_session(("watch", "input_names", "inputs_on_device", "compile_mode",
                                    "placement", "placement_key", "trusted_threads",
                                    "compare_on_device"))

    def compiled_reference(self):
        """torch.compile of a fresh Model built under the same seed, with the
        eager reference's weights loaded (the same weights by construction,
        and by copy).  None, with compile_error, when torch.compile refuses it."""
        torch = self.torch
        ref = self.models[self.reference]
        torch.manual_seed(self.init_seed)
        try:
            m = self.task.Model(*self.init_inputs)
            if isinstance(m, torch.nn.Module):
                m = m.to(self.device)
                if isinstance(ref, torch.nn.Module):
                    m.load_state_dict(ref.state_dict())
            return torch.compile(m, mode=self.compile_mode)
        except BaseException:
            self.compile_error = "torch.compile refused the model: %s" % inputs.last_line(
                traceback.format_exc(limit=4))
            return None

    # ---- inputs ------------------------------------------------------------
    def input_name(self, i):
        n = self.input_names[i] if i < len(self.input_names) else ""
        return n if n and not n.startswith("*") else "input%d" % i

    def gen(self, seed, dist, stream):
        """The task's get_inputs() under the seed; for dist >= 0 every floating
        tensor redrawn from the protocol's distribution, same shape and dtype.
        On a cuda job born on the GPU where the task allows (inputs.py)."""
        with self.ph("inputs"):
            # get_inputs() once per (seed, stream): every set of the seed
            # starts from the same draw (the adversarial ones keep only its
            # shapes, dtypes and non-floating entries), so it is drawn once
            # and read, never handed to a model (callers clone).
            if self.bases and next(iter(self.bases))[0] != seed:
                self.bases = {}
            b = self.bases.get((seed, stream))
            if b is None:
                b = self.bases[(seed, stream)] = inputs.base(
                    self.task, seed, stream, self.device, self.inputs_on_device)
            return inputs.generate(self.task, seed, dist, stream, self.dists, self.device,
                                   self.inputs_on_device, base=b)

    def pad(self, g, pages=16):
        """A device allocation of a size drawn from g, [seed, model, draws
        so far, sizes] (timing.placement): 0 to pages - 1 pages of 2 MiB and
        1 to 8192 x 256 bytes."""
        k = self.placement_key
        g[2] += 2
        size = (_draw(k, g[0], g[1], g[2] - 1, pages) * (2 << 20) +
                _draw(k, g[0], g[1], g[2], 8192) * 256 + 256)
        g[3].append(size)
        return self.torch.empty(size, dtype=self.torch.uint8, device=self.device)

    def rehome(self, m, g, pads):
        """Every parameter and buffer of model m on the device to fresh
        storage, each behind a drawn pad (timing.placement)."""
        torch = self.torch
        if not isinstance(m, torch.nn.Module):
            return
        with self.ph("placement"):
            for sub in m.modules():
                for d in (sub._parameters, sub._buffers):
                    for t in d.values():
                        if torch.is_tensor(t):
                            pads.append(self.pad(g, 4))
                            t.data = t.data.clone()

    def clone(self, xs):
        with self.ph("clones"):
            return [x.clone() if self.torch.is_tensor(x) else x for x in xs]

    def sync(self):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()

    # ---- one call ----------------------------------------------------------
    def poison(self, ref_out):
        """PROTO: correctness.poison -- fill free allocator blocks the size of
        each output with NaN (integers: the minimum) and free them, so an
        output the arm allocates but never writes reads poison, not a result
        left behind by an earlier call."""
        with self.ph("poison"):
            self._poison(ref_out)

    def _poison(self, ref_out):
        torch = self.torch
        held = []
        for _, r in flatten(ref_out):
            if torch.is_tensor(r):
                fill = float("nan") if (r.is_floating_point() or r.is_complex()) else (
                    False if r.dtype == torch.bool else torch.iinfo(r.dtype).min)
                held.append(torch.full(r.shape, fill, dtype=r.dtype, device=r.device))
        self.sync()
        del held

    def wipe(self, xs):
        """Fill the tensors of xs with the poison of their dtype, in place,
        before they are freed (PROTO: correctness.poison): a block freed
        with inputs in it would hand an identity those inputs as a result."""
        torch = self.torch
        with self.ph("poison"):
            for x in xs:
                if torch.is_tensor(x) and x.numel():
                    if x.is_floating_point() or x.is_complex():
                        x.detach().fill_(float("nan"))
                    elif x.dtype == torch.bool:
                        x.detach().fill_(False)
                    else:
                        x.detach().fill_(torch.iinfo(x.dtype).min)
            self.sync()

    def run(self, arm, xs, ref_out=None):
        """Call arm on xs; (output, None) or (None, error text)."""
        if ref_out is not None:
            self.poison(ref_out)
        name = "reference" if arm == self.reference else (
            "arms" if arm < len(self.arms) else "compiled")
        # the reference's own writes to its parameters and buffers
        # (BatchNorm's running statistics) are learned around its call
        w = self.watch if arm == self.reference else None
        before = w.ref_versions() if w is not None else None
        try:
            with self.ph(name):
                out = self.models[arm](*xs)
                self.sync()
            if w is not None:
                w.ref_ran(before)
            return out, None
        except BaseException:
            return None, traceback.format_exc(limit=4)

    def comparable(self, t):
        """t detached, as a dtype the C comparison knows, and that dtype's name."""
        torch = self.torch
        t = t.detach()
        if t.is_complex():
            t = torch.view_as_real(t)
        name = DTYPE_NAMES.get(str(t.dtype).replace("torch.", ""))
        if name is None:
            t = t.to(torch.float32) if t.is_floating_point() else t.to(torch.int64)
            name = "fp32" if t.dtype == torch.float32 else "int64"
        return t, name

    def dev(self, t, copy=True):
        """A dense copy of device tensor t on the device for the C side's
        comparison there (compare_on_device), and its dtype's name.  A copy,
        as host() makes one: the arm's tensor may be an input that a later
        step overwrites.  copy=False (a reference's output, kept alive by its
        set and never handed to an arm): t itself when it is already dense
        in a known dtype.  Alive until this entry point's next call (keep).
        Out of device memory: None (the pair goes to the host instead)."""
        with self.ph("device_copy"):
            c, name = self.comparable(t)
            if copy or not c.is_contiguous():
                try:
                    c = self.torch.empty(c.shape, dtype=c.dtype, device=c.device).copy_(c)
                except self.torch.cuda.OutOfMemoryError:
                    return None, name
            self.keep.append(c)
            self.pending = True
            return c, name

    def host(self, t, slot=None):
        """A CPU contiguous tensor in a dtype the C comparison knows, and its
        name: a copy in host buffer slot (None: this entry point's next)."""
        with self.ph("host_copy"):
            return self._host(t, slot)

    def _host(self, t, slot):
        t, name = self.comparable(t)
        # A copy into this entry point's next host buffer: the arm's tensor
        # may be an input that a later step overwrites (an identity "kernel"
        # returns its input).  The buffers are reused by the next entry point
        # (the C side has compared them by then).
        buf = self.host_buffer(t, slot)
        if t.device.type == "cuda":
            buf.copy_(t, non_blocking=True)
            self.pending = True
        else:
            buf.copy_(t)
        return buf, name

    def host_buffer(self, t, slot=None):
        """A host buffer for a copy of t (shape and dtype) in slot (None:
        this entry point's next), allocated on first use of (slot, dtype,
        numel) and kept."""
        torch = self.torch
        if slot is None:
            slot = self.slot
            self.slot += 1
        key = (slot, t.dtype, t.numel())
        buf = self.pool.get(key)
        if buf is None:
            for k in [k for k in self.pool if k[0] == key[0]]:
                del self.pool[k]  # the slot's old shape: freed before the new one
            if self.pinned:
                try:
                    buf = torch.empty(t.numel(), dtype=t.dtype, pin_memory=True)
                except RuntimeError:
                    self.pinned = False
            if buf is None:
                buf = torch.empty(t.numel(), dtype=t.dtype)
            self.pool[key] = buf
        return buf.view(t.shape)

    def begin(self):
        """A new entry point's call: host buffer slots from the first."""
        self.keep = []
        self.slot = 0

    def pairs(self, ref_out, out, ref_host=None):
        """The output pairs for the C comparison, or (None, why) on a structure
        mismatch.  ref_host: {"slot": prefix, "copies": [...]}, the
        reference's host copies for ref_out made by an earlier call (made
        here, in slots prefix0, prefix1, ..., when missing)."""
        res, why = self._pairs(ref_out, out, ref_host)
        if self.pending:
            with self.ph("host_copy"):
                self.sync()  # the non_blocking copies, before C reads them
            self.pending = False
        return res, why

    def _pairs(self, ref_out, out, ref_host):
        torch = self.torch
        # PROTO: gates correctness -- the reference's own container: a tensor
        # for a tensor, a tuple for a tuple (type(), not isinstance: a
        # subclass runs the candidate's code when the check reads it)
        if type(out) is not type(ref_out) and (issubclass(type(out), (tuple, list)) or
                                               issubclass(type(ref_out), (tuple, list))):
            return None, "the output is of type %s.%s, expected %s.%s" % (
                type(out).__module__, type(out).__qualname__,
                type(ref_out).__module__, type(ref_out).__qualname__)
        ref, got = flatten(ref_out), flatten(out)
        if len(ref) != len(got):
            return None, "%d outputs, expected %d" % (len(got), len(ref))
        # PROTO: gates correctness -- every output of the reference's own
        # type, all checked before anything touches one: a torch.Tensor
        # subclass's __torch_function__ runs on every torch call made on it
        # (shape, detach, copy_), so a forward that hands back an empty
        # subclass and fills it on first touch computes nothing in its
        # timed call and the right values in every check
        # (relu01/lazy_subclass: 0.29 ms against 35 ms for relu_big, every
        # check passed); another object's __eq__ or __class__ is its code
        # too.  type() reads the object's real class and runs nothing.
        for (name, r), (_, g) in zip(ref, got):
            if type(g) is not type(r):
                return None, "%s is of type %s.%s%s, expected %s.%s" % (
                    name, type(g).__module__, type(g).__qualname__,
                    " (a torch.Tensor subclass)" if issubclass(type(g), torch.Tensor) and
                    type(g) is not torch.Tensor else "",
                    type(r).__module__, type(r).__qualname__)
        res = []
        for (name, r), (_, g) in zip(ref, got):
            if not torch.is_tensor(r):
                if r != g:
                    return None, "%s is %r, expected %r" % (name, g, r)
                continue
            if g.layout != r.layout or g.device != r.device:
                return None, "%s is a %s tensor on %s, expected %s on %s" % (
                    name, g.layout, g.device, r.layout, r.device)
            if tuple(g.shape) != tuple(r.shape):
                return None, "%s has shape %s, expected %s" % (name, list(g.shape), list(r.shape))
            if g.dtype != r.dtype:
                return None, "%s has dtype %s, expected %s" % (name, g.dtype, r.dtype)
            k = len(res)
            gh = None
            on_dev = self.compare_on_device and r.is_cuda and g.is_cuda
            if on_dev:
                gh, _ = self.dev(g)
                on_dev = gh is not None
            # on the device the C side copies the reference into its own
            # memory the first time (ref_fresh) and reads that copy after
            slot = "%s%d" % (ref_host["slot"] if ref_host is not None else "tmp", k)
            fresh = True
            if ref_host is not None and k < len(ref_host["copies"]) and \
                    ref_host["copies"][k][2] == on_dev:
                rh, dt, _ = ref_host["copies"][k]
                fresh = False
            else:
                # the input set's reference, copied once for every arm (its
                # own slots: they live as long as the set); on the device
                # the reference's own dense output when it is one
                rh = None
                if on_dev:
                    rh, dt = self.dev(r, copy=False)
                    on_dev = rh is not None
                if rh is None:
                    rh, dt = self.host(r, None if ref_host is None else
                                       "%s%d" % (ref_host["slot"], k))
                if ref_host is not None:
                    del ref_host["copies"][k:]
                    ref_host["copies"].append((rh, dt, on_dev))
            if not on_dev:
                gh, _ = self.host(g)
            pair = {"name": name, "dtype": dt, "n": rh.numel(),
                    "ref": rh.data_ptr(), "got": gh.data_ptr(), "on_device": on_dev}
            if on_dev or not fresh and ref_host.get("owned"):
                # the C side's copy (made by reference(), or the first time
                # here): "ref" is not read then
                pair["ref_slot"], pair["ref_fresh"] = slot, fresh
            res.append(pair)
        return res, None

    def step(self, arm, xs, ref_out, ref_host=None):
        out, error = self.run(arm, xs, ref_out)
        self.last_out = out
        if error is not None:
            # "raised", not "error": an answer with "error" is the runner's own failure.
            last = error.strip().splitlines()[-1] if error.strip() else "an exception"
            return {"kernel_status": 1, "raised": last[:300], "outputs": [], "structure": None}
        pairs, why = self.pairs(ref_out, out, ref_host)
        return {"kernel_status": 0, "outputs": pairs or [], "structure": why}

    def all_finite(self, r):
        """Every element of r finite.  A finite sum (one pass, no mask)
        proves it: a NaN or an infinity makes the sum NaN or infinite.  A
        sum that is not finite (an element, or an overflow) is settled
        element by element."""
        torch = self.torch
        if bool(torch.isfinite(r.sum(dtype=torch.float64))):
            return True
        return bool(torch.isfinite(r).all())

    def bytes_of(self, x):
        return x.detach().contiguous().reshape(-1).view(self.torch.uint8)

    def storages(self, xs):
        torch = self.torch
        res = []
        for i, x in enumerate(xs):
            if torch.is_tensor(x) and x.numel():
                s = x.untyped_storage()
                res.append((self.input_name(i), x.device, s.data_ptr(), s.data_ptr() + s.nbytes()))
        return res

    def overlaps_itself(self, t):
        """True when some elements of t may share memory (a stride-0
        broadcast, an as_strided view): t then holds fewer distinct
        elements than its shape says.  Sufficient test for the contrary:
        sorted by stride, each dimension of size > 1 steps past all the
        smaller ones."""
        dims = sorted((st, sz) for st, sz in zip(t.stride(), t.shape) if sz > 1)
        span = 1
        for st, sz in dims:
            if st < span:
                return True
            span = st * sz
        return False

    def output_facts(self, out, xs):
        """PROTO: gates.physical_floor -- the bytes a correct candidate must
        write: every tensor output's elements, except outputs that share
        storage with an input (a view the reference returns) or overlap
        themselves (a broadcast: its distinct elements are not known here).
        Taken from the reference, on the seed's timing inputs."""
        torch = self.torch
        ins = self.storages(xs)
        facts = {"bytes": 0, "aliased_bytes": 0, "overlapping_bytes": 0, "tensors": 0}
        for _, o in flatten(out):
            if not torch.is_tensor(o) or not o.numel():
                continue
            n = o.numel() * o.element_size()
            facts["tensors"] += 1
            s = o.untyped_storage()
            lo, hi = s.data_ptr(), s.data_ptr() + s.nbytes()
            if any(dev == o.device and lo < ihi and ilo < hi for _, dev, ilo, ihi in ins):
                facts["aliased_bytes"] += n
            elif self.overlaps_itself(o):
                facts["overlapping_bytes"] += n
            else:
                facts["bytes"] += n
        return facts

    def aliases(self, out, xs):
        """(output, input) pairs whose storages overlap."""
        with self.ph("aliasing"):
            return self._aliases(out, xs)

    def _aliases(self, out, xs):
        torch = self.torch
        ins = self.storages(xs)
        res = set()
        for name, o in flatten(out):
            if torch.is_tensor(o) and o.numel():
                s = o.untyped_storage()
                lo, hi = s.data_ptr(), s.data_ptr() + s.nbytes()
                for iname, dev, ilo, ihi in ins:
                    if dev == o.device and lo < ihi and ilo < hi:
                        res.add((name, iname))
        return res

    # ---- entry points ------------------------------------------------------
    def env(self):
        return answer_in(self.ph, self._env)

    def _env(self):
        torch = self.torch
        e = {"torch_version": torch.__version__, "python_version": sys.version.split()[0],
             "device": str(self.device), "threads": torch.get_num_threads(),
             "init_seed": self.init_seed, "inputs": len(self.input_names),
             "inputs_on": self.device.type if self.inputs_on_device else "cpu",
             "inputs_why": self.inputs_why,
             "trusted_threads": sorted(self.trusted_threads),
             "gc_guard": getattr(self, "gc_guard", False)}
        if self.compile_mode is not None:
            e["compile_mode"] = self.compile_mode
        if self.device.type == "cuda":
            e["cuda_device"] = torch.cuda.get_device_name(self.device)
            e["torch_cuda"] = torch.version.cuda
            e["stream"] = self.stream.cuda_stream
        return e

    def _set_reference(self, seed, dist):
        """A new input set's reference, run before any arm: its outputs
        handed to the C side, which copies them into its own memory (host
        or device: runner/torch.c ref_slot) before the candidate runs, and
        compares every arm of the set with those copies.  A candidate that
        rewrites the reference's output while it runs (found through the
        allocator or the garbage collector: relu01/overwrite_ref) changes
        the reference's tensors, not the runner's copies."""
        self.begin()
        skip = self._set(seed, dist)
        if skip is not None:
            return skip
        c = self.cur
        twin = self.precise_twin(c["xs"], c["ref_out"], c["rng"])
        res = {"refs": self.own_copies(c["ref_out"], c["ref_host"], twin,
                                       "keep" if dist == -1 else None, seed)}
        if self.rp_why is not None:
            res["twin_unavailable"] = self.rp_why
        return res

    def own_copies(self, ref_out, ref_host, twin=None, task=None, seed=None):
        """The entries the C side copies into its own memory (ref_store) for
        the reference's outputs ref_out, one slot per tensor output
        (ref_host["slot"] + k), recorded in ref_host["copies"] so that pairs()
        sends the slots, not the tensors, from then on.  twin: the
        reference's tensor outputs computed in float64 (precise_twin), handed
        beside each floating output ("twin") for the C side's allowance (PROTO:
        correctness.reference_precision); task "keep": the set drawn from the
        task's own generator, whose allowance the timed checks of seed take
        ("take": theirs, seed the timing seed)."""
        refs = []
        ref_host["copies"] = []
        twins = twin or []
        for k, (name, r) in enumerate([e for e in flatten(ref_out)
                                       if self.torch.is_tensor(e[1])]):
            on_dev = self.compare_on_device and r.is_cuda
            rh = None
            if on_dev:
                rh, dt = self.dev(r, copy=False)
                on_dev = rh is not None
            if rh is None:
                rh, dt = self.host(r, "%s%d" % (ref_host["slot"], k))
            ref_host["copies"].append((rh, dt, on_dev))
            e = {"slot": "%s%d" % (ref_host["slot"], k), "dtype": dt,
                 "n": rh.numel(), "ptr": rh.data_ptr(), "on_device": on_dev}
            # PROTO: correctness.reference_precision -- the same output
            # computed in float64 (rounded to its dtype), in the same form and
            # on the same side as the copy
            t = twins[k] if k < len(twins) else None
            if t is not None and r.is_floating_point() and t.shape == r.shape and \
                    t.dtype == r.dtype:
                th = None
                if on_dev:
                    th, _ = self.dev(t, copy=False)
                if th is None and not on_dev:
                    th, _ = self.host(t)
                if th is not None:
                    # its largest magnitude (PROTO: .max_relative); NaN -> none
                    lo, hi = self.torch.aminmax(t.detach().reshape(-1)) \
                        if t.numel() else (t.new_zeros(()), t.new_zeros(()))
                    mx = max(-float(lo), float(hi))
                    e["twin"] = {"ptr": th.data_ptr(), "on_device": on_dev,
                                 "max_abs": mx if mx == mx and mx != float("inf") else None}
            if task == "keep":
                # the seed's timed checks take its allowance
                e["task"], e["seed"] = True, int(seed)
            elif task == "take":
                e["slack"], e["seed"] = "task", int(seed)
            refs.append(e)
        if self.pending:
            with self.ph("host_copy"):
                self.sync()
            self.pending = False
        ref_host["owned"] = True
        return refs

    def rng_state(self):
        """The global generators' state (CPU, and the job's cuda device):
        taken right before a reference call whose float64 twin must draw
        the same random numbers (dropout in training mode)."""
        torch = self.torch
        return (torch.get_rng_state(), torch.cuda.get_rng_state(self.device)
                if self.device.type == "cuda" else None)

    def ref64(self):
        """The reference model in float64, made afresh from the reference's
        class (kept before any candidate code was imported, and watched)
        with the task's init inputs, its parameters and buffers then copied
        from the reference itself (watched too) and its training flags set
        as the reference's.  No object outlives the call: nothing the
        candidate could find and change between two sets (an attribute, a
        hook, a weight), and no copy machinery of Python's (copy.deepcopy,
        Parameter.__deepcopy__: candidate code, a reviewer showed) runs."""
        torch = self.torch
        ref = self.models[self.reference]
        if not isinstance(ref, torch.nn.Module):
            raise TypeError("the reference is not a torch.nn.Module")
        m = self.ref_cls(*self.init_inputs).to(self.device).double()
        mine = dict(m.named_parameters())
        mine.update(m.named_buffers())
        theirs = list(ref.named_parameters()) + list(ref.named_buffers())
        if len(theirs) != len(mine):
            raise ValueError("%d parameters and buffers in float64, %d in the reference"
                             % (len(mine), len(theirs)))
        for name, t in theirs:
            d = mine.get(name)
            if d is None or tuple(d.shape) != tuple(t.shape):
                raise ValueError("the reference's '%s' has no float64 counterpart" % name)
            d.data.copy_(t.detach())
        for a, b in zip(m.modules(), ref.modules()):
            a.training = b.training
        return m

    def precise_twin(self, xs, ref_out, rng):
        """PROTO: correctness.reference_precision (version 14 on) -- the
        reference computed again in float64 (ref64), on float64 copies of
        the pristine inputs xs (the other inputs cloned), with float64 the
        default dtype and the global generators where they were before the
        reference's own call (rng: a dropout draws the same mask), the
        collector off; its outputs rounded to the reference's dtypes.  A
        list beside the reference's tensor outputs (None for one that is
        not floating), or None: no rule, no floating output, the float64
        run not possible (an error: no allowance for the rest of the
        runner; out of device memory, or too little free to start: none for
        this set), or the runner's first set matched the reference bit for
        bit (nothing it computes rounds: not run again); rp_why says why.
        The C side (ref_store) measures how far the reference is from it,
        output by output, and allows the protocol's factor times that on
        top of the dtype's tolerance: the reference's own error, where TF32
        (cuDNN's convolutions by PyTorch's default) or a long sum's rounding
        makes it large, is not held against a candidate that is as precise
        or more.  Only trusted code runs (the task's own class, torch's
        functions, both watched); its cost is one float64 run of the
        reference per compared set."""
        torch = self.torch
        if self.rp_factor is None or self.rp_state is False:
            return None
        refs = [r for _, r in flatten(ref_out) if torch.is_tensor(r)]
        if not any(r.is_floating_point() for r in refs):
            return None
        if self.device.type == "cuda":
            # float64 copies of the inputs, and the outputs in float64 with
            # a temporary each and their rounded copies: run only where the
            # card has that free (counting PyTorch's cached free blocks), so
            # that a large task is not pushed out of memory here (38_L1Norm:
            # 8 GiB an input and an output); this set only
            def nbytes(ts):
                return sum(t.numel() * t.element_size() for t in ts
                           if torch.is_tensor(t) and t.is_floating_point())
            need = int(1.1 * (2 * nbytes(xs) + 5 * nbytes(refs)))
            free, _ = torch.cuda.mem_get_info(self.device)
            avail = free + torch.cuda.memory_reserved(self.device) - \
                torch.cuda.memory_allocated(self.device)
            if need > avail:
                self.rp_why = ("the reference in float64 not run on a set: about %.1f GiB "
                               "needed, %.1f GiB free on the device"
                               % (need / 2**30, avail / 2**30))
                return None
        dd = torch.get_default_dtype()
        gc_was = gc.isenabled()
        devices = [self.device] if self.device.type == "cuda" else []
        try:
            gc.disable()
            with self.ph("reference_fp64"), torch.random.fork_rng(devices=devices):
                m = self.ref64()
                # a copy of every input, also one already in float64 (the
                # reference may write its inputs; xs is every arm's source)
                xin = [x.detach().to(torch.float64, copy=True) if torch.is_tensor(x) and
                       x.is_floating_point() else (x.clone() if torch.is_tensor(x) else x)
                       for x in xs]
                torch.set_rng_state(rng[0])
                if rng[1] is not None:
                    torch.cuda.set_rng_state(rng[1], self.device)
                torch.set_default_dtype(torch.float64)
                try:
                    out = m(*xin)
                finally:
                    torch.set_default_dtype(dd)
                del xin, m
                got = [g for _, g in flatten(out) if torch.is_tensor(g)]
                if len(got) != len(refs):
                    raise ValueError("%d tensor outputs in float64, %d in the reference"
                                     % (len(got), len(refs)))
                twins = [g.detach().to(r.dtype) if r.is_floating_point() and
                         g.is_floating_point() and g.shape == r.shape else None
                         for r, g in zip(refs, got)]
                del out, got
                self.sync()
        except (getattr(torch, "OutOfMemoryError", None) or
                torch.cuda.OutOfMemoryError) as e:
            # this set only: another may fit (fewer tensors alive)
            msg = str(e).strip()
            self.rp_why = "the reference in float64 ran out of memory on a set: %s" % (
                msg.splitlines()[0][:200] if msg else "")
            return None
        except Exception as e:
            # no allowance from here on: the dtype's tolerance alone, as
            # under version 13
            self.rp_state = False
            msg = str(e).strip()
            self.rp_why = "the reference in float64 failed: %s%s" % (
                type(e).__name__, ": " + msg.splitlines()[0][:200] if msg else "")
            return None
        finally:
            if gc_was:
                gc.enable()
        if self.rp_state is None:
            same = all(t is None or torch.equal(self.bytes_of(t), self.bytes_of(r))
                       for t, r in zip(twins, refs))
            self.rp_state = not same
            if same:
                return None
        return twins

    def set_reference(self, seed, dist):
        with self.ph("check_other"):
            return answer_in(self.ph, lambda: self._set_reference(seed, dist))

    def _set(self, seed, dist):
        """self.cur for input set (seed, dist): made (inputs, the reference's
        run and outputs) unless it is the current one; a skip answer when the
        reference is not defined on it, else None."""
        torch = self.torch
        key = (seed, dist)
        if self.cur is None or self.cur["key"] != key:
            self.cur = None  # the last set's tensors freed before the next is made
            if self.timing_inputs is not None and seed != self.timing_seed:
                # the last seed's timing inputs, one copy per model, are
                # dead once the next seed's checks begin: freed before
                # this seed's sets are made (36_RMSNorm's 7 GiB inputs ran
                # an 80 GB card out of memory in the result-reuse check
                # with them alive)
                self.timing_inputs = None
                if self.watch is not None:
                    self.watch.inputs_set(None)
            xs = self.gen(seed, dist, STREAM_CHECK)
            ref_in = self.clone(xs)
            rng = self.rng_state()  # PROTO: correctness.reference_precision
            ref_out, error = self.run(self.reference, ref_in)
            if error is not None:
                raise Failure("reference_failed", "the reference failed on input set %s: %s"
                              % (dist, error))
            # The reference is defined only where its outputs are finite: an
            # adversarial set it is not defined on is skipped, not judged.
            if dist >= 0:
                with self.ph("finite_check"):
                    bad = [r for _, r in flatten(ref_out)
                           if torch.is_tensor(r) and r.is_floating_point() and
                           not self.all_finite(r)]
                if bad:
                    self.cur = None
                    return {"skip": "the reference is not finite on '%s'"
                            % self.dists[dist].get("name", dist)}
            # ref_out stays alive: its blocks are not free while an arm
            # runs (PROTO: gates result_reuse, via the allocator).  ref_in
            # too where an output is a view of it; else it is poisoned and
            # freed (one input set less on the device: KernelBench
            # 38_L1Norm's 8.6 GB input ran an 80 GB card out of memory),
            # so an output allocated in its blocks reads poison, not inputs.
            # xs is never handed to a model: every arm gets a clone, and
            # xs is what each arm's inputs are compared with afterwards.
            aliased = self.aliases(ref_out, ref_in)
            if not aliased:
                self.wipe(ref_in)
                ref_in = None
            self.cur = {"key": key, "xs": xs, "ref_in": ref_in, "ref_out": ref_out, "rng": rng,
                        "aliased": aliased, "ref_host": {"slot": "ref", "copies": []}}
        return None

    def _check(self, seed, dist, arm):
        torch = self.torch
        self.begin()
        skip = self._set(seed, dist)
        if skip is not None:
            return skip
        c = self.cur
        c["reuse"] = None  # the last arm's result-reuse tensors freed first
        arm_in = self.clone(c["xs"])
        res = self.step(arm, arm_in, c["ref_out"], c["ref_host"])
        mutated = []
        # PROTO: gates input_mutation -- every input tensor byte for byte
        # against the set's pristine inputs it was cloned from.
        with self.ph("mutation"):
            for i, (x, b) in enumerate(zip(arm_in, c["xs"])):
                if torch.is_tensor(b) and not torch.equal(self.bytes_of(x), self.bytes_of(b)):
                    mutated.append(self.input_name(i))
        res["mutated"] = mutated
        # PROTO: gates output_aliasing -- an output sharing storage with an
        # input, where the reference's own output does not (a view is legal
        # only when the reference returns one too).
        overlaps = []
        if self.last_out is not None:
            overlaps = [list(p) for p in sorted(self.aliases(self.last_out, arm_in) - c["aliased"])]
            # PROTO: gates output_aliasing -- an output whose elements share
            # memory (a stride-0 broadcast of a few values) where the
            # reference's does not: it holds fewer values than it shows,
            # so it cannot be held to the floor of the bytes it must write
            if c.get("dense") is None:
                c["dense"] = {n for n, r in flatten(c["ref_out"])
                              if torch.is_tensor(r) and r.numel() > 1 and
                              not self.overlaps_itself(r)}
            for n, o in flatten(self.last_out):
                if n in c["dense"] and torch.is_tensor(o) and self.overlaps_itself(o):
                    overlaps.append([n, "itself (elements sharing memory, strides %s)"
                                     % list(o.stride())])
        res["aliasing"] = {"checked": True, "overlaps": overlaps,
                           "how": "storage ranges of every output against every input, "
                                  "where the reference's own outputs do not alias them; "
                                  "an output overlapping itself where the reference's "
                                  "does not"}
        self.keep.append(self.last_out)
        self.last_out = None
        return res

    def check(self, seed, dist, arm):
        with self.ph("check_other"):
            return answer_in(self.ph, lambda: self._check(seed, dist, arm))

    REUSE_STEPS = ("fresh_inputs_a", "same_buffers_new_inputs", "fresh_inputs_b")

    def _reuse(self, arm, step):
        """PROTO: gates result_reuse -- one step a call, compared by the C
        side before the next (runner/torch.c reuse_facts), so that no step's
        outputs are alive while the next runs.  Step -1 draws B and runs the
        reference on it, and hands B's reference outputs to the C side, which
        copies them into its own memory before the candidate runs on
        anything of this check (as set_reference does for a set: a candidate
        that rewrites the reference's tensor while it runs changes the
        tensor, not the runner's copy).  Step 0 runs A in fresh tensors;
        step 1 copies B's contents into A's tensors (old pointers, new
        contents) and runs them; step 2 runs B in its own fresh tensors,
        drawn before A's were made.  Holding every step's outputs until the
        end ran an 80 GB card to its limit on KernelBench 76_conv (8.6 GB
        inputs): cuDNN, short of workspace, most likely took another
        algorithm on the last step, whose TF32 result missed the
        reference's."""
        torch = self.torch
        self.begin()
        c = self.cur
        if c is None or step not in (-1, 0, 1, 2):
            raise Failure("python", "result-reuse step %r without its input set" % (step,))
        seed, dist = c["key"]
        if step == -1:
            c["reuse"] = None  # an earlier arm's step tensors freed first
            in_b = self.gen(seed, dist, STREAM_REUSE)
            # the reuse stream's get_inputs() draw is not kept for the seed's
            # later sets (on the device the task set's in_b is that draw: it
            # would outlive the check by the seed's other sets, one input
            # set more on the card)
            self.bases.pop((seed, STREAM_REUSE), None)
            rng = self.rng_state()  # PROTO: correctness.reference_precision
            ref_b, error = self.run(self.reference, self.clone(in_b))
            if error is not None:
                raise Failure("reference_failed",
                              "the reference failed on result-reuse inputs: %s" % error)
            twin = self.precise_twin(in_b, ref_b, rng)
            r = {"arm": arm, "in_b": in_b, "ref_b": ref_b, "a_buf": self.clone(c["xs"]),
                 "ref_b_host": {"slot": "refb", "copies": []}, "next": 0}
            c["reuse"] = r
            return {"refs": self.own_copies(ref_b, r["ref_b_host"], twin)}
        r = c.get("reuse")
        if r is None or r["arm"] != arm or step != r["next"]:
            raise Failure("python", "result-reuse step %d of arm %d out of order"
                          % (step, arm))
        r["next"] = step + 1
        if step == 0:
            res = self.step(arm, r["a_buf"], c["ref_out"], c["ref_host"])
        elif step == 1:
            for x, b in zip(r["a_buf"], r["in_b"]):
                if torch.is_tensor(x):
                    x.copy_(b)
            res = self.step(arm, r["a_buf"], r["ref_b"], r["ref_b_host"])
        else:
            # A's tensors hold B's contents: poisoned before they are
            # freed, so that an output allocated where they were reads
            # poison, not inputs an identity could pass for a result.
            # B's own tensors were drawn before A's: other addresses.
            self.wipe(r["a_buf"])
            r["a_buf"] = None
            # in_b itself: fresh tensors no arm has seen, and nothing reads
            # them after this (a clone was one more input set alive)
            b_buf, r["in_b"] = r["in_b"], None
            res = self.step(arm, b_buf, r["ref_b"], r["ref_b_host"])
            # B's tensors live until the next call (the C side compares
            # this step first); the reference's copies were made by then
            self.keep.append((b_buf, r))
            c["reuse"] = None
        # the step's outputs were copied for the comparison (step); their
        # own tensors are freed now, not while the next step runs
        self.last_out = None
        return dict(res, step=self.REUSE_STEPS[step])

    def reuse(self, arm, step):
        with self.ph("reuse"):
            return answer_in(self.ph, lambda: self._reuse(arm, step))

    def _prepare(self, seed, first=0):
        # PROTO: timing.placement -- the draws' key and functions as the
        # watch saw them at the last check: a change since is reported
        # before any pad is drawn (tamper() after prepare hands it over).
        self.tamper_check("seed %d's placement" % int(seed))
        self.begin()
        self.cur = None
        self.timing_inputs = None
        self.timing_seed = seed
        xs = self.gen(seed, -1, STREAM_TIMING)
        self.bases = {}  # the timing draw is used once: not kept
        self.pads = None
        if self.placement in ("shuffled", "keyed"):
            # PROTO: timing.placement (shuffled; keyed from version 9, which
            # is the same here: this backend's draws were always keyed) --
            # each arm's inputs, and its
            # parameters and buffers, behind pads drawn from (seed, arm),
            # kept for the seed.  With the same addresses on every seed a
            # copy read as a constant bias of one arm on the H200 (the cuda
            # backend's d_alloc_placed says what was seen); a model's
            # parameters live at one address per arm for the whole job
            # (40_LayerNorm's weight and bias: a copy read 1.0136x [1.0117,
            # 1.0158] with only the inputs moved).  Same values, same
            # Parameter objects, new storage.
            #
            # PROTO: timing.placement (keyed, version 10 on) -- the models
            # are rehomed, and their inputs cloned, in an order that turns by
            # one arm each seed from a start the C side draws under the job's
            # key (runner_arm_order; `first` is its first arm): in arm order,
            # the arm placed second read about 0.5% slower on every seed on
            # the cuda backend (cuda_transpose, docs/calibrate.md).  Models
            # past the arms (the compiled reference) come last.
            before = self.watch.model_state() if self.watch is not None else None
            narms = len(self.arms)
            first = int(first)
            if not 0 <= first < narms:
                raise ValueError("arm order starts at %d of %d arms" % (first, narms))
            order = [(first + k) % narms for k in range(narms)]
            order += list(range(narms, len(self.models)))
            pads, ins, sizes = [], [None] * len(self.models), [None] * len(self.models)
            for i in order:
                g = [int(seed), i, 0, []]
                sizes[i] = g[3]
                pads.append(self.pad(g))
                self.rehome(self.models[i], g, pads)
                pads.append(self.pad(g))
                ins[i] = self.clone(xs)
            del xs
            if self.watch is not None:
                self.watch.params_moved("before seed %d's timing" % int(seed), before)
            self.pads = pads
            self.timing_inputs = ins
            self.pad_sizes = sizes
        else:
            self.timing_inputs = [self.clone(xs) for _ in self.models[:-1]] + [xs]
        if self.watch is not None:
            self.watch.inputs_set(self.timing_inputs[self.reference])
        res = {"ok": True}
        if self.placement in ("shuffled", "keyed"):
            res["placement"] = {"pads_bytes": self.pad_sizes, "key_from": self.placement_from}
        if self.out_facts is None:
            # PROTO: gates.physical_floor -- once per runner, one call of the
            # reference on the first seed's timing inputs (a warm-up call;
            # the baseline-alone runner, which never imports the candidate,
            # is the one the harness believes)
            ref_in = self.timing_inputs[self.reference]
            out, error = self.run(self.reference, ref_in)
            if error is None:
                self.out_facts = self.output_facts(out, ref_in)
                res["outputs"] = self.out_facts
            del out
        self.sync()
        return res

    def prepare(self, seed, first=0):
        with self.ph("prepare"):
            return answer_in(self.ph, lambda: self._prepare(seed, first))

    def _compile_warm(self, seed):
        """The compiled reference's first call (torch.compile compiles there),
        on the seed's check inputs, before anything is checked or timed; the
        C side times this call as the compile time."""
        if self.compile_error is not None:
            return {"raised": self.compile_error}
        xs = self.clone(self.gen(seed, -1, STREAM_CHECK))
        try:
            self.models[len(self.arms)](*xs)
            self.sync()
        except BaseException as e:
            # the exception's own first line: torch's last lines are advice
            first = (str(e).strip().splitlines() or [""])[0][:300]
            return {"raised": "torch.compile failed on the first call: %s: %s"
                    % (type(e).__name__, first)}
        return {"ok": True, "mode": self.compile_mode}

    def compile_warm(self, seed):
        with self.ph("compile_warm"):
            return answer_in(self.ph, lambda: self._compile_warm(seed))

    # ---- the tamper watch (tamper.py) ---------------------------------------
    def tamper_check(self, where, contents=True):
        """Compare the interpreter with the watch taken before the candidate
        was imported; what changed is kept for tamper().  contents: the
        reference's weights' bytes too (not before each timed trial: cost)."""
        if self.watch is not None:
            with self.ph("tamper"):
                self.watch.check(where, contents)

    def tamper(self, where):
        """PROTO: gates tamper -- check now, then every change not yet
        handed over: {"changes": [{"where", "what"}], "checks"}."""
        return answer_in(self.ph, lambda: self._tamper(where))

    def _tamper(self, where):
        self.tamper_check(where)
        w = self.watch
        return {"changes": w.take() if w else [], "checks": w.checks if w else 0}

    def tamper_trial(self):
        """Before every timed trial, whatever the arm (the C timer's start
        hook, outside the window): check, keep what changed for the next
        tamper()."""
        self.tamper_check("a timed trial of seed %s" % self.timing_seed, contents=False)

    def phases(self):
        """Seconds per phase so far (phases.py), as JSON."""
        return answer_in(self.ph, self.ph.seconds)

    def call(self, arm):
        """One timed call: launch only (on cuda the C timer's stop event
        follows it on the same stream).  Raises on failure.  The output goes
        back to the C side, which drops it at once, or, with timed checks,
        keeps it until the arm's next timed call (inside that call's window,
        so every call still pays one output's release)."""
        return self.models[arm](*self.timing_inputs[arm])

    # ---- timed checks (PROTO: gates.timed_correctness) ------------------------
    def _timed_begin(self, models, ref):
        """One timed group: its models (a bit mask of model indices) and the
        reference's model index (-1: none in the group, nothing compared).
        Answers where the C side changes the inputs between rounds (it does
        that itself, with no Python between rounds: Python work there
        slowed the next timed call measurably): for every contiguous
        floating input, its element size, count and device, the address of
        a master copy (where the changed values are drawn from, the seed's
        inputs as prepared) and of every group model's own copy."""
        torch = self.torch
        group = [i for i in range(len(self.models)) if models >> i & 1]
        master = self.clone(self.timing_inputs[group[0]])
        where = []
        for i, m in enumerate(master):
            if not torch.is_tensor(m) or not m.is_floating_point() or m.numel() == 0 \
                    or not m.is_contiguous():
                continue
            xs = [self.timing_inputs[g][i] for g in group]
            if not all(torch.is_tensor(x) and x.is_contiguous() and x.shape == m.shape and
                       x.dtype == m.dtype and x.device == m.device for x in xs):
                continue
            where.append({"esize": m.element_size(), "numel": m.numel(),
                          "device": m.device.type, "master": m.data_ptr(),
                          "ptrs": [x.data_ptr() for x in xs]})
        self.timed = {"group": group, "ref": ref, "master": master}
        self.sync()
        # PROTO: gates.timed_correctness -- the collector off for the group,
        # as timeit does: a __del__ (or a weakref finalizer) of the
        # candidate's in a reference cycle, collected in the runner's own
        # code after its call, filled its output lazily there, before the
        # round's check read it (an attack on this runner, relu_big: 0.3 ms
        # against 110 ms, every check passed); a collection in a timed call
        # is also a pause of its own.  Restored after; not collected before
        # (a full collection with torch imported took 112 ms on a loaded
        # 2-core box, each group); runner/torch.c left_hooks sees a call
        # that turns it back on.
        self.timed["gc_was"] = gc.isenabled()
        gc.disable()
        if self.watch is not None:
            self.watch.gc_paused = True
        return {"ok": True, "inputs": where}

    def timed_begin(self, models, ref):
        with self.ph("timed_checks"):
            return answer_in(self.ph, lambda: self._timed_begin(models, ref))

    def _timed_ref(self, rnd, out):
        """Right after the reference's call in a checked round, before any
        other arm runs: its output handed to the C side, which copies it into
        its own memory (ref_store), as set_reference does for an input set.
        An arm that runs after the reference in the round and rewrites the
        reference's output (found through the garbage collector or the
        allocator: relu01/skip_timed_ref) changes the reference's tensor,
        not the runner's copy that _timed_after compares with."""
        self.begin()
        t = self.timed
        # PROTO: gates tamper -- the reference as it was in this call: its
        # weights' bytes (the checks before timed trials skip them), so that
        # a candidate cannot change them for the checked rounds' reference
        # calls alone and put them back before the group's end (a check
        # after the round would be too late: an arm after the reference in
        # the round can undo it)
        self.tamper_check("a timed check of seed %s" % self.timing_seed)
        t["ref_round"] = rnd
        t["ref_host"] = {"slot": "tref", "copies": []}
        # PROTO: correctness.reference_precision -- the seed's allowance from
        # its set drawn from the task's own generator (no rerun inside a
        # timed group)
        return {"refs": self.own_copies(out, t["ref_host"], None, "take",
                                        self.timing_seed)}

    def timed_ref(self, rnd, out):
        with self.ph("timed_checks"):
            return answer_in(self.ph, lambda: self._timed_ref(rnd, out))

    def _timed_after(self, rnd, outs):
        """After a checked round: outs, the round's outputs of the group's
        models in group order (the C side kept them), each against the
        runner's copy of the reference's output of the same round, taken
        right after the reference's call (_timed_ref)."""
        self.begin()
        t = self.timed
        got = dict(zip(t["group"], outs))
        ref_out = got.get(t["ref"])
        if t.get("ref_round") != rnd:
            raise Failure("python", "timed_after(%d): no copy of the reference's output "
                          "of that round" % rnd)
        ref_host = t["ref_host"]
        arms = []
        for g in t["group"]:
            if g == t["ref"]:
                continue
            pairs, why = self.pairs(ref_out, got.get(g), ref_host)
            arms.append({"model": g, "kernel_status": 0, "outputs": pairs or [],
                         "structure": why})
        return {"arms": arms}

    def timed_after(self, rnd, *outs):
        with self.ph("timed_checks"):
            return answer_in(self.ph, lambda: self._timed_after(rnd, outs))

    def timed_end(self):
        if self.timed is not None and self.timed.get("gc_was"):
            gc.enable()
        if self.watch is not None:
            self.watch.gc_paused = False
        self.timed = None
        self.keep = []
        return json.dumps({"ok": True})



def add_paths(paths):
    """The harness's interpreter's sys.path (its venv's site-packages
    included, with their .pth files) after the embedded one's own."""
    import site
    for p in paths:
        if p in sys.path:
            continue
        if p.endswith("site-packages") or p.endswith("dist-packages"):
            site.addsitedir(p)
        else:
            sys.path.append(p)


def open(job_json):
    """A Session for the job, or a JSON error text (a str) when it cannot be made."""
    try:
        job = json.loads(job_json)
        sys.dont_write_bytecode = True
        if not hasattr(sys, "argv"):
            sys.argv = ["atb-runner"]
        add_paths(job["torch"]["python"].get("path", []))
        return Session(job)
    except Failure as e:
        return json.dumps({"error": str(e), "reason": e.reason})
    except BaseException:
        return json.dumps({"error": traceback.format_exc(limit=8), "reason": "python"})
