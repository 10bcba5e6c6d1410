# SPDX-License-Identifier: GPL-3.0-or-later
"""What the reference depends on in the shared interpreter, and whether it changed.

The candidate (ModelNew) runs in the interpreter the reference (Model) runs
in: whatever it rebinds, registers or flips there, the reference's calls go
through too.  A Watch is taken after the task is imported and the reference
is built, before the candidate's module is imported, and compared (check)
after the candidate's import, after its construction, after every
correctness input set, around each seed's timing and before every timed
trial (runner/torch.c, outside the timed windows).  It records:

- identities (`is`, never `==`: a replacement may define __eq__) of every
  callable, class and module bound in torch's public namespaces and the
  modules the reference and the runner call through (torch,
  torch.nn.functional, torch._C and its function tables, torch.linalg,
  torch.fft, torch.special, torch.ops.aten's resolved packets, builtins,
  math, operator, json, sys, gc, atb_torch), of every attribute of
  torch.Tensor, TensorBase, nn.Module and every nn.Module class in torch.nn,
  and the code, defaults and keyword defaults of every Python function
  among them;
- the task module's globals and the reference's classes, every value
  (strict: the task's `torch`, `N` or `get_inputs` rebound is a change);
- the reference model: each submodule's class, its parameter, buffer and
  child dicts (every tensor's identity, storage address and version
  counter: an in-place write bumps it), its own hooks, and callables set on
  the instance (an instance-level `forward`);
- torch.nn.modules.module's global hooks (forward pre-hooks, forward hooks,
  backward hooks, registration hooks: every `_global_*` dict);
- the torch function and dispatch mode stacks, autocast, grad and
  inference mode;
- backend flags: threads, default dtype and device, float32 matmul
  precision, deterministic algorithms, cudnn (enabled, benchmark,
  deterministic, allow_tf32), cuda matmul reduced precision and tf32, the
  SDPA backends, preferred linalg and BLAS libraries, mkldnn, on cuda the
  current device and stream, the allocator backend and memory fraction;
  the allocator's environment variables;
- the interpreter: sys.modules entries of torch and atb_torch, trace and
  profile functions, the switch interval, gc's state and callbacks, the
  Python threads alive;
- the runner's own Session: its class, its models list, its instance
  attributes shadowing its methods.

Each change is reported once, with where it was first seen.  Facts, not
verdicts: the harness refuses the candidate (gate tamper, src/measure/).

Not covered (docs/internals/torch.md lists them): C-level changes (a type
slot rewritten through ctypes, an aten kernel overridden from C++ or by
torch.library outside the Python registry), a change made and undone
between two checks by a thread or a C extension, writes to this Watch
itself, and state no getter exposes (flush-denormal, audit hooks).

Cost: one pass of id() over every saved key per check (a list compare
per namespace); a namespace is walked key by key only when its list
differs.  Measured in bench/ and docs/internals/torch.md.
"""
import builtins
import gc
import hashlib
import json
import math
import operator
import os
import signal
import sys
import threading
import types
from itertools import repeat

_MISSING = object()
# taken when this module is imported, before any candidate code: the
# parameters' contents are hashed with it (Watch._contents)
_sha256 = hashlib.sha256
_DATA = (bool, int, float, complex, str, bytes, tuple, type(None))
_code = operator.attrgetter("__code__")
_defaults = operator.attrgetter("__defaults__")
_kwdefaults = operator.attrgetter("__kwdefaults__")
# Environment variables the allocator and the thread pools read lazily.
_ENV = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_NO_CUDA_MEMORY_CACHING",
        "CUDA_LAUNCH_BLOCKING", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUBLAS_WORKSPACE_CONFIG")
_SIGNALS = [s for s in (getattr(signal, n, None) for n in (
    "SIGALRM", "SIGPROF", "SIGVTALRM", "SIGUSR1", "SIGUSR2", "SIGCHLD", "SIGIO")) if s]
_HOOK_NAMES = {
    "_global_forward_pre_hooks": "a global forward pre-hook",
    "_global_forward_hooks": "a global forward hook",
    "_global_forward_hooks_with_kwargs": "a global forward hook (with kwargs)",
    "_global_forward_hooks_always_called": "a global forward hook (always called)",
    "_global_backward_pre_hooks": "a global backward pre-hook",
    "_global_backward_hooks": "a global backward hook",
    "_global_buffer_registration_hooks": "a global buffer registration hook",
    "_global_module_registration_hooks": "a global module registration hook",
    "_global_parameter_registration_hooks": "a global parameter registration hook",
}


_SCALARS = (type(None), bool, int, float, complex, str, bytes)


def _plain(v, depth=0):
    """A value snapshot of plain data (numbers, strings, None, and tuples,
    lists or str-keyed dicts of them), compared by value: repr keeps a float
    exact and a NaN equal to itself.  Exact types only: a subclass's repr is
    its own code (a float subclass whose repr lies would hide the change it
    stands for), so it is _MISSING, as anything else (not compared here; a
    plain value replaced by one is seen as deleted)."""
    if type(v) in _SCALARS:
        return (type(v).__name__, repr(v))
    if type(v) in (tuple, list) and depth < 4 and len(v) <= 64:
        items = tuple(_plain(x, depth + 1) for x in v)
        if all(x is not _MISSING for x in items):
            return (type(v).__name__, items)
    if type(v) is dict and depth < 4 and len(v) <= 64 and all(type(k) is str for k in v):
        items = tuple(sorted((k, _plain(x, depth + 1)) for k, x in v.items()))
        if all(x is not _MISSING for _, x in items):
            return ("dict", items)
    return _MISSING


def _plain_attrs(d):
    """{attribute: _plain(value)} of a module's instance dict d, its plain
    attributes but the training flag (compared apart)."""
    out = {}
    for k, v in d.items():
        p = _plain(v)
        if p is not _MISSING and k != "training":
            out[k] = p
    return out


# The collector's lists of objects: every object in the interpreter, the
# runner's Session and the reference among them.  Every door the static check
# missed (sys under another module's private name, builtins' eval, ...) led
# to one of these in the reviews of session 30; the runner never calls them.
_GC_EVENTS = frozenset(("gc.get_objects", "gc.get_referrers", "gc.get_referents"))


def guard_gc(watch):
    """PROTO: gates tamper -- an audit hook (it cannot be removed) that
    refuses the collector's object lists from now on: the call raises, so
    the caller never holds the objects, and the watch names it at its next
    check.  Installed after the snapshot, before the candidate's import."""
    seen = watch.gc_calls

    def hook(event, args, _events=_GC_EVENTS, _seen=seen):
        if event in _events:
            _seen.append(event)
            raise RuntimeError("%s is refused inside atb's runner" % event)

    sys.addaudithook(hook)


def _relevant(old, new, strict):
    """A rebinding the reference can feel: in a strict space any, elsewhere
    not plain data (numbers, strings, tuples) replaced by plain data:
    torch.cuda._initialized flips, torch.cuda.default_generators is set on
    cuda's lazy initialisation.  The flags torch reads are checked apart."""
    return strict or not (isinstance(old, _DATA) and isinstance(new, _DATA))


def _nested_codes(fn):
    return [c for c in getattr(getattr(fn, "__code__", None), "co_consts", ())
            if isinstance(c, types.CodeType)]


def _torch_own(old, new):
    """new is one of torch's own wrappers around old: torch.compile, when
    the candidate or the compiled reference uses it, wraps torch.manual_seed
    (torch._compile._disable_dynamo) and patches nn.Module.__init__ and
    __setstate__ (torch._dynamo.mutation_guard).  Known by its code object
    (torch's, not a copy of its text) and old in its closure: it calls the
    function it replaced."""
    if not isinstance(new, types.FunctionType) or not new.__closure__:
        return False
    codes = []
    c = sys.modules.get("torch._compile")
    if c is not None:
        codes += _nested_codes(getattr(c, "_disable_dynamo", None))
    g = sys.modules.get("torch._dynamo.mutation_guard")
    if g is not None:
        codes += _nested_codes(getattr(g, "install_generation_tagging_init", None))
    if not any(new.__code__ is k for k in codes):
        return False
    for cell in new.__closure__:
        try:
            if cell.cell_contents is old:
                return True
        except ValueError:  # an empty cell
            pass
    return False


def _pool_worker(ident):
    """A concurrent.futures pool thread (inductor's compile workers, when
    the candidate or the compiled reference uses torch.compile)."""
    t = getattr(threading, "_active", {}).get(ident)
    cf = sys.modules.get("concurrent.futures.thread")
    return t is not None and cf is not None and getattr(t, "_target", None) is getattr(
        cf, "_worker", False)


class _Space:
    """One namespace: its saved keys and their objects (held: an id cannot
    be reused while the object lives)."""
    __slots__ = ("label", "get", "keys", "objs", "ids", "n", "strict")

    def __init__(self, label, get, strict):
        # label: "torch" (its names read torch.relu) or a format with one %s
        self.label = label if "%s" in label else label + ".%s"
        self.get, self.strict = get, strict
        d = get()
        self.keys = list(d.keys())
        self.objs = [d[k] for k in self.keys]
        self.ids = list(map(id, self.objs))
        self.n = len(self.keys)

    def changed(self, out):
        d = self.get()
        # Fast: the saved objects first in the dict, in their order (new
        # keys come after them: torch.ops.aten resolves lazily).  The keys
        # are not compared here: a key deleted shifts every later object,
        # so a prefix that still matches can only hide the last saved key
        # renamed, holding the same object (nothing the reference calls
        # changed).
        v = list(map(id, d.values()))
        if (v if len(v) == self.n else v[:self.n]) == self.ids:
            return
        for i, k in enumerate(self.keys):
            cur = d.get(k, _MISSING)
            old = self.objs[i]
            if cur is old:
                continue
            if cur is _MISSING:
                out.append("%s removed" % (self.label % k))
            elif _relevant(old, cur, self.strict) and not _torch_own(old, cur):
                out.append("%s replaced" % (self.label % k))
        # Reported once (or accepted: plain data), or only the order moved
        # (a key deleted and set again): the dict as it is now is saved.
        self.keys = list(d.keys())
        self.objs = [d[k] for k in self.keys]
        self.ids = list(map(id, self.objs))
        self.n = len(self.keys)


class _Funcs:
    """Python functions among the saved objects: code, defaults, kwdefaults."""

    def __init__(self):
        self.names, self.fns = [], []
        self.seen = set()

    def add(self, label, obj):
        if isinstance(obj, (staticmethod, classmethod)):
            obj = obj.__func__
        if isinstance(obj, types.FunctionType) and id(obj) not in self.seen:
            self.seen.add(id(obj))
            self.names.append(label)
            self.fns.append(obj)

    def freeze(self):
        self.code = list(map(_code, self.fns))
        self.code_ids = list(map(id, self.code))
        self.dflt = list(map(_defaults, self.fns))
        self.dflt_ids = list(map(id, self.dflt))
        self.kw = list(map(_kwdefaults, self.fns))
        self.kw_ids = list(map(id, self.kw))

    def changed(self, out):
        for what, get, saved, ids in (("code", _code, self.code, self.code_ids),
                                      ("defaults", _defaults, self.dflt, self.dflt_ids),
                                      ("keyword defaults", _kwdefaults, self.kw, self.kw_ids)):
            if list(map(id, map(get, self.fns))) == ids:
                continue
            for i, f in enumerate(self.fns):
                cur = get(f)
                if cur is not saved[i]:
                    out.append("%s's %s replaced" % (self.names[i], what))
                    saved[i] = cur
                    ids[i] = id(cur)


def _try(fn):
    try:
        return fn()
    except BaseException as e:  # a getter the installed torch lacks
        return "<%s>" % type(e).__name__


class Watch:
    def __init__(self, torch, task, reference, session, device):
        self.torch = torch
        self.device = device
        self.spaces = []
        self.funcs = _Funcs()
        self.reported = set()
        self.findings = []  # [{"where", "what"}], not yet handed to C
        self.checks = 0
        nn = torch.nn
        mods = [("torch", torch), ("torch.nn", nn), ("torch.nn.functional", nn.functional),
                ("torch.functional", getattr(torch, "functional", None)),
                ("torch._C", torch._C), ("torch._C._nn", getattr(torch._C, "_nn", None)),
                ("torch._C._fft", getattr(torch._C, "_fft", None)),
                ("torch._C._linalg", getattr(torch._C, "_linalg", None)),
                ("torch._C._special", getattr(torch._C, "_special", None)),
                ("torch.linalg", getattr(torch, "linalg", None)),
                ("torch.fft", getattr(torch, "fft", None)),
                ("torch.special", getattr(torch, "special", None)),
                ("torch.nn.init", getattr(nn, "init", None)),
                ("torch.nn.modules.module", nn.modules.module),
                ("torch.overrides", getattr(torch, "overrides", None)),
                ("torch.autograd", getattr(torch, "autograd", None)),
                ("torch.autograd.grad_mode", getattr(torch.autograd, "grad_mode", None)),
                ("torch.random", getattr(torch, "random", None)),
                ("torch._tensor", getattr(torch, "_tensor", None)),
                ("torch.backends", torch.backends),
                ("torch.ops", torch.ops), ("torch.ops.aten", torch.ops.aten),
                ("torch.library", getattr(torch, "library", None)),
                ("builtins", builtins), ("math", math), ("operator", operator),
                ("json", json), ("sys", sys), ("gc", gc), ("threading", threading)]
        if device.type == "cuda":
            mods.append(("torch.cuda", torch.cuda))
        for name in sorted(sys.modules):
            if name.startswith("atb_torch"):
                mods.append((name, sys.modules[name]))
        for label, m in mods:
            if m is not None:
                self._space(label, m, strict=label.startswith("atb_torch"))
        classes = [("torch.Tensor", torch.Tensor), ("torch._C.TensorBase",
                   getattr(torch._C, "TensorBase", None) or getattr(torch._C, "_TensorBase")),
                   ("torch._C._VariableFunctions", type(torch._C._VariableFunctions)),
                   ("torch.nn.Module", nn.Module),
                   # a Parameter's own methods run in every reference call
                   # that reads a weight (and in its float64 twin's making)
                   ("torch.nn.Parameter", nn.Parameter)]
        if device.type == "cuda":
            classes += [("torch.cuda.Stream", torch.cuda.Stream),
                        ("torch.cuda.Event", torch.cuda.Event)]
        # every class in the reference's modules' MROs (nn.Conv2d, _ConvNd,
        # Module, the task's own: strict), not all of torch.nn: a class the
        # reference does not use cannot slow it
        own = set(c for _, c in classes)
        types_used = [type(sub) for _, sub in reference.named_modules()] if isinstance(
            reference, nn.Module) else [type(reference)]
        for t in types_used:
            for c in t.__mro__[:-1]:
                if c not in own:
                    own.add(c)
                    if c.__module__ == task.__name__:
                        self._space("the task's %s.%%s" % c.__name__, c, strict=True, cls=True)
                    else:
                        classes.append(("%s.%s" % (c.__module__, c.__qualname__), c))
        for label, c in classes:
            self._space(label, c, strict=False, cls=True)
        # strict: the task's globals, the reference's classes, the runner's Session
        self._space("the task module's global '%s'", task, strict=True)
        for c in type(session).__mro__[:-1] + (Watch, _Space, _Funcs):
            self._space("atb_torch's %s.%%s" % c.__name__, c, strict=True, cls=True)
        self.funcs.freeze()
        self.sysmods = [n for n in sys.modules
                        if n == "torch" or n.startswith("torch.") or n.startswith("atb_torch")
                        or n == task.__name__]
        self.sysmod_objs = [sys.modules[n] for n in self.sysmods]
        self.sysmod_ids = list(map(id, self.sysmod_objs))
        M = nn.modules.module
        self.hooks = [(n, getattr(M, n)) for n in sorted(dir(M))
                      if n.startswith("_global_") and isinstance(getattr(M, n), dict)]
        self.hook_state = [self._dict_state(d) for _, d in self.hooks]
        self.session = session
        self.models = session.models
        self.models_saved = list(session.models)
        self.reference = reference
        self.gc_paused = False  # Session._timed_begin .. timed_end
        # (submodule, "_parameters" or "_buffers", name) of the tensors the
        # reference writes in its own calls (ref_ran): their version counters
        # are not compared (BatchNorm in training mode updates its running
        # statistics in every forward: 33_BatchNorm's honest copy was refused)
        self.self_written = set()
        # (submodule, attribute) of the plain attributes the reference sets in
        # its own calls (ref_ran): their values are not compared
        self.attrs_written = set()
        self.ref_state = self._model_state(reference)
        # the task's init inputs by value: ref64 builds the float64 model
        # from them (an identity check left a rewritten scale unseen: the
        # twin off by 0.7%, a bfloat16 GEMM inside 4 times that; review of
        # session 30)
        self.gc_calls = []  # guard_gc's hook: the refused calls
        self.gc_reported = 0
        self.init_value = _plain(getattr(session, "init_inputs", None))
        # the protocol's input distributions by value (Session.dists, fixed by
        # identity, was rewritten in place to draw from [0, 1): the ReLU
        # identity passed every set; session 30's second review)
        self.dists_value = _plain(getattr(session, "dists", None))
        # the bytes of the reference's parameters and buffers (a write through
        # .data keeps the Parameter's version counter: its weights zeroed
        # unseen, a candidate returning zeros matched; session 30's second
        # review), compared at every check but the timed trials' own
        self.contents = self._contents()
        self.flags = self._flags()
        self.threads = set(sys._current_frames())
        lib = getattr(torch, "library", None)
        self.impls = getattr(lib, "_impls", None)
        self.impls_n = len(self.impls) if self.impls is not None else 0
        self.impls_saved = set(self.impls) if self.impls is not None else set()
        # the Session's attributes set before the snapshot and never again
        # (the reference's index, the arms, the distributions, the task...);
        # more after its construction (fix_session); timing inputs per seed
        self.fixed = {}
        self.fix_session(("reference", "arms", "dists", "task", "device", "stream",
                          "init_seed", "init_inputs", "torch", "ph", "ref_cls"))
        self.inputs = None

    def _space(self, label, obj, strict, cls=False):
        get = (lambda c=obj: c.__dict__) if cls else (lambda d=vars(obj): d)
        s = _Space(label, get, strict)
        self.spaces.append(s)
        for k, v in zip(s.keys, s.objs):
            self.funcs.add(s.label % k, v)

    @staticmethod
    def _dict_state(d):
        return (len(d), list(map(id, d.values())))

    def _model_state(self, m):
        """Per submodule of the reference: its class, its dicts of parameters,
        buffers and children (identities, storage, version), hooks,
        callables set on the instance, its training flag, and its plain
        attributes by value (a scale, an eps, a stride: rewritten, the
        reference computes something else -- its scaling_factor set to 0
        and a candidate returning zeros matched it; review of session 30)."""
        torch = self.torch
        if not isinstance(m, torch.nn.Module):
            return None
        st = []
        own = self.self_written
        for path, sub in m.named_modules():
            d = vars(sub)
            label = path or "(the model)"
            tens = []
            for k in ("_parameters", "_buffers"):
                for n, t in d.get(k, {}).items():
                    # its class too: a Parameter's __class__ set to a subclass
                    # runs its __torch_function__ in every op the reference
                    # makes on it (session 30's second review)
                    tens.append((k, n, id(t)) + (
                        (t.data_ptr(), None if (label, k, n) in own else t._version,
                         tuple(t.shape), id(type(t))) if t is not None else ()))
            hooks = tuple((k, len(v)) for k, v in sorted(d.items())
                          if "hook" in k and isinstance(v, dict))
            calls = tuple(sorted(k for k, v in d.items() if callable(v) and
                                 not isinstance(v, torch.nn.Module) and k != "_parameters"
                                 and not k.startswith("_")))
            data = tuple(sorted((k, p) for k, p in _plain_attrs(d).items()
                                if (label, k) not in self.attrs_written))
            st.append((label, id(type(sub)),
                       tuple(map(id, d.get("_modules", {}).values())), tuple(tens), hooks,
                       calls, sub.training, data))
        return st

    def _contents(self, kinds=("_parameters", "_buffers")):
        """{(submodule, "_parameters" or "_buffers", name): SHA-256 of the
        tensor's bytes} of the reference's parameters and buffers (kinds),
        but those the reference writes itself (self_written)."""
        torch = self.torch
        m = self.reference
        if not isinstance(m, torch.nn.Module):
            return {}
        out = {}
        for path, sub in m.named_modules():
            for k in kinds:
                for n, t in vars(sub).get(k, {}).items():
                    key = (path or "(the model)", k, n)
                    if t is None or key in self.self_written:
                        continue
                    # no __torch_function__ of a subclass runs here (the
                    # class is compared in _model_state)
                    with torch.no_grad(), torch._C.DisableTorchFunctionSubclass():
                        b = torch.Tensor.detach(t).reshape(-1)
                        if b.numel():
                            b = b.contiguous().view(torch.uint8).cpu()
                            out[key] = _sha256(b.numpy()).hexdigest()
                        else:
                            out[key] = ""
        return out

    def _ref_attrs(self):
        """{(submodule, attribute): value snapshot} of the reference's plain
        attributes now."""
        m = self.reference
        if not isinstance(m, self.torch.nn.Module):
            return {}
        return {(path or "(the model)", k): p for path, sub in m.named_modules()
                for k, p in _plain_attrs(vars(sub)).items()}

    def _flags(self):
        torch = self.torch
        b = torch.backends
        f = [("torch.get_num_threads()", torch.get_num_threads),
             ("torch.get_num_interop_threads()", torch.get_num_interop_threads),
             ("torch.get_default_dtype()", torch.get_default_dtype),
             ("torch.get_default_device()", lambda: torch.get_default_device()),
             ("torch.is_grad_enabled()", torch.is_grad_enabled),
             ("torch.is_inference_mode_enabled()", torch.is_inference_mode_enabled),
             ("torch.is_anomaly_enabled()", torch.is_anomaly_enabled),
             ("torch.get_float32_matmul_precision()", torch.get_float32_matmul_precision),
             ("torch.are_deterministic_algorithms_enabled()",
              torch.are_deterministic_algorithms_enabled),
             ("torch.is_deterministic_algorithms_warn_only_enabled()",
              torch.is_deterministic_algorithms_warn_only_enabled),
             ("autocast on cpu", lambda: torch.is_autocast_enabled("cpu")),
             ("autocast on cuda", lambda: torch.is_autocast_enabled("cuda")),
             ("the torch function mode stack", torch._C._len_torch_function_stack),
             ("the torch dispatch mode stack", torch._C._len_torch_dispatch_stack),
             ("torch.backends.cudnn.enabled", lambda: b.cudnn.enabled),
             ("torch.backends.cudnn.benchmark", lambda: b.cudnn.benchmark),
             ("torch.backends.cudnn.deterministic", lambda: b.cudnn.deterministic),
             ("torch.backends.cudnn.allow_tf32", lambda: b.cudnn.allow_tf32),
             ("torch.backends.cudnn.benchmark_limit", lambda: b.cudnn.benchmark_limit),
             ("torch.backends.cuda.matmul.allow_tf32", lambda: b.cuda.matmul.allow_tf32),
             ("torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
              lambda: b.cuda.matmul.allow_fp16_reduced_precision_reduction),
             ("torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
              lambda: b.cuda.matmul.allow_bf16_reduced_precision_reduction),
             ("torch.backends.cuda.flash_sdp_enabled()", b.cuda.flash_sdp_enabled),
             ("torch.backends.cuda.mem_efficient_sdp_enabled()", b.cuda.mem_efficient_sdp_enabled),
             ("torch.backends.cuda.math_sdp_enabled()", b.cuda.math_sdp_enabled),
             ("torch.backends.cuda.cudnn_sdp_enabled()",
              lambda: b.cuda.cudnn_sdp_enabled()),
             ("torch.backends.cuda.preferred_linalg_library()",
              b.cuda.preferred_linalg_library),
             ("torch.backends.cuda.preferred_blas_library()",
              lambda: b.cuda.preferred_blas_library()),
             ("torch.backends.mkldnn.enabled", lambda: b.mkldnn.enabled),
             ("torch.backends.opt_einsum.enabled", lambda: b.opt_einsum.enabled),
             ("torch.backends.cpu.get_cpu_capability()", lambda: b.cpu.get_cpu_capability()),
             ("sys.gettrace()", lambda: id(sys.gettrace())),
             ("sys.getprofile()", lambda: id(sys.getprofile())),
             ("threading's trace hook", lambda: id(getattr(threading, "_trace_hook", None))),
             ("threading's profile hook", lambda: id(getattr(threading, "_profile_hook", None))),
             ("sys.getswitchinterval()", sys.getswitchinterval),
             # the runner's own timed groups run with gc off (gc_paused)
             ("gc.isenabled()", lambda: gc.isenabled() or self.gc_paused),
             ("gc.get_threshold()", gc.get_threshold),
             ("gc.get_debug()", gc.get_debug),
             ("gc.callbacks", lambda: tuple(map(id, gc.callbacks))),
             ("torch function handling", torch._C._is_torch_function_enabled),
             ("the dispatcher's thread-local include set",
              lambda: repr(torch._C._dispatch_tls_local_include_set())),
             ("the dispatcher's thread-local exclude set",
              lambda: repr(torch._C._dispatch_tls_local_exclude_set())),
             ("the CPUs this process may run on", lambda: sorted(os.sched_getaffinity(0))),
             ("an interval timer (ITIMER_REAL, VIRTUAL, PROF) armed",
              lambda: [signal.getitimer(t) != (0.0, 0.0) for t in
                       (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF)]),
             ("a Python signal handler",
              lambda: [id(signal.getsignal(n)) for n in _SIGNALS])]
        mon = getattr(sys, "monitoring", None)  # 3.12: tools that see every call
        if mon is not None:
            f.append(("sys.monitoring's tools", lambda: [mon.get_tool(i) for i in range(6)]))
        f += [("os.environ['%s']" % k, (lambda k=k: os.environ.get(k))) for k in _ENV]
        if self.device.type == "cuda":
            c = torch.cuda
            f += [("torch.cuda.current_device()", c.current_device),
                  ("the current cuda stream", lambda: c.current_stream().cuda_stream),
                  ("torch.cuda.get_allocator_backend()", c.get_allocator_backend),
                  ("torch.cuda.get_per_process_memory_fraction()",
                   lambda: c.get_per_process_memory_fraction()),
                  ("torch.cuda.get_sync_debug_mode()", c.get_sync_debug_mode)]
        self.flag_fns = f
        return [_try(fn) for _, fn in f]

    def check(self, where, contents=True):
        """Compare with the snapshot; new changes go into self.findings."""
        self.checks += 1
        out = []
        for s in self.spaces:
            s.changed(out)
        self.funcs.changed(out)
        if list(map(id, map(sys.modules.get, self.sysmods, repeat(_MISSING)))) != self.sysmod_ids:
            for i, n in enumerate(self.sysmods):
                cur = sys.modules.get(n, _MISSING)
                if cur is not self.sysmod_objs[i]:
                    out.append("sys.modules['%s'] %s" % (n, "removed" if cur is _MISSING
                                                          else "replaced"))
                    self.sysmod_objs[i] = cur
                    self.sysmod_ids[i] = id(cur)
        for i, (n, d) in enumerate(self.hooks):
            st = self._dict_state(d)
            if st != self.hook_state[i]:
                what = _HOOK_NAMES.get(n, "a hook in torch.nn.modules.module.%s" % n)
                if st[0] > self.hook_state[i][0]:
                    out.append("%s was registered" % what)
                else:
                    out.append("%s was removed or replaced" % what)
                self.hook_state[i] = st
        cur = self.session.models
        if cur is not self.models or len(cur) != len(self.models_saved) or any(
                a is not b for a, b in zip(cur, self.models_saved)):
            out.append("atb_torch's Session.models replaced")
            self.models = cur
            self.models_saved = list(cur)
        sd = vars(self.session)
        for k in sd:
            if k in type(self.session).__dict__:
                out.append("atb_torch's Session.%s shadowed on the instance" % k)
        st = self._model_state(self.reference)
        if st != self.ref_state:
            out.extend(self._model_changes(self.ref_state, st))
            self.ref_state = st
        sd = vars(self.session)
        for n, v in self.fixed.items():
            if sd.get(n, _MISSING) is not v:
                out.append("atb_torch's Session.%s replaced" % n)
        cur_init = _plain(sd.get("init_inputs"))
        if cur_init != self.init_value:
            out.append("atb_torch's Session.init_inputs changed (the task's init inputs, "
                       "from which the float64 reference is built)")
            self.init_value = cur_init
        if len(self.gc_calls) > self.gc_reported:
            for ev in sorted(set(self.gc_calls[self.gc_reported:])):
                out.append("%s was called (refused: the collector's lists reach the "
                           "runner and the reference)" % ev)
            self.gc_reported = len(self.gc_calls)
        cur_dists = _plain(sd.get("dists"))
        if cur_dists != self.dists_value:
            out.append("atb_torch's Session.dists changed (the protocol's input "
                       "distributions)")
            self.dists_value = cur_dists
        if contents:
            cur_c = self._contents()
            if cur_c != self.contents:
                for key in sorted(set(cur_c) | set(self.contents)):
                    if key in self.contents and key in cur_c and \
                            cur_c[key] != self.contents[key]:
                        out.append("the reference's %s: the contents of %s changed (a "
                                   "write its version counter did not count)"
                                   % (key[0], key[2]))
                self.contents = cur_c
        if self.inputs is not None:
            xs, objs, vers = self.inputs
            cur_in = self.session.timing_inputs
            ref_in = cur_in[self.session.reference] if cur_in else None
            if ref_in is not xs or len(xs) != len(objs) or any(
                    a is not b for a, b in zip(xs, objs)):
                out.append("the reference's timing inputs replaced")
                self.inputs = None
            elif self._versions(xs) != vers:
                out.append("the reference's timing inputs written in place")
                self.inputs = (xs, objs, self._versions(xs))
        if self.impls is not None and len(self.impls) != self.impls_n:
            for k in sorted(set(self.impls) - self.impls_saved):
                ns, key = k.split("/", 1)[0], k.rsplit("/", 1)[-1]
                if ns == "aten" and key != "Meta":
                    out.append("an aten kernel registered through torch.library (%s)" % k)
            self.impls_n = len(self.impls)
            self.impls_saved = set(self.impls)
        cur = [_try(fn) for _, fn in self.flag_fns]
        if cur != self.flags:
            for (name, _), old, new in zip(self.flag_fns, self.flags, cur):
                if old != new:
                    if name.startswith(("sys.gettrace", "sys.getprofile", "threading's",
                                        "gc.callbacks", "a Python signal", "the dispatcher")):
                        out.append("%s changed" % name)
                    else:
                        out.append("%s is %r, was %r" % (name, new, old))
            self.flags = cur
        th = set(sys._current_frames())
        new = [t for t in th - self.threads if not _pool_worker(t)]
        if new:
            out.append("a Python thread was started (%d now, %d at the snapshot)"
                       % (len(th), len(self.threads)))
        self.threads |= th
        for what in out:
            self._note(where, what)

    def fix_session(self, names):
        """These Session attributes keep the objects they hold now."""
        sd = vars(self.session)
        for n in names:
            if n in sd:
                self.fixed[n] = sd[n]

    def inputs_set(self, xs):
        """The reference's timing inputs of this seed (Session.prepare):
        the same list, the same tensors, no write (version counters)."""
        self.inputs = (xs, list(xs), self._versions(xs)) if xs is not None else None

    def _versions(self, xs):
        return [x._version if self.torch.is_tensor(x) else None for x in xs]

    def models_set(self, where):
        """The runner put a model of its own into Session.models (an arm it
        built, the compiled reference): the models there before must be
        the same objects; the new ones are saved."""
        cur = self.session.models
        if cur is not self.models or any(
                old is not None and (i >= len(cur) or cur[i] is not old)
                for i, old in enumerate(self.models_saved)):
            self._note(where, "atb_torch's Session.models replaced")
        self.models = cur
        self.models_saved = list(cur)

    @staticmethod
    def _model_changes(was, st):
        out = []
        for old, new in zip(was or [], st or []):
            if old != new:
                part = ("class", "children", "parameters or buffers", "hooks",
                        "callables set on the instance", "training flag")
                for j in range(1, 7):
                    if old[j] != new[j]:
                        out.append("the reference's %s: %s changed" % (old[0], part[j - 1]))
                if old[7] != new[7]:
                    was, now = dict(old[7]), dict(new[7])
                    for k in sorted(set(was) | set(now)):
                        if was.get(k) != now.get(k):
                            out.append("the reference's %s: its attribute %s %s" % (
                                old[0], k, "set" if k not in was else
                                "deleted, or replaced by what is not plain data"
                                if k not in now else "changed"))
        if len(st or []) != len(was or []):
            out.append("the reference's submodules changed")
        return out

    def ref_versions(self):
        """The version counters of the reference's parameters and buffers,
        read right before one of the runner's own calls of the reference
        (Session.run; ref_ran after it)."""
        m = self.reference
        if not isinstance(m, self.torch.nn.Module):
            return None
        return ([((path or "(the model)", k, n), t._version)
                 for path, sub in m.named_modules()
                 for k in ("_parameters", "_buffers")
                 for n, t in vars(sub).get(k, {}).items() if t is not None],
                self._ref_attrs(), self._contents(("_buffers",)))

    def ref_ran(self, before):
        """After the runner's call of the reference (before: ref_versions()
        right before it, with no other arm's code between): a tensor whose
        version moved was written by the reference itself, and its version
        is compared no more (its identity, storage and shape still are).
        Only what moved inside the reference's own call is learned: the
        candidate cannot make a tensor its own write hides unless code of
        its runs inside that call (a hook, a patched function, a thread:
        each of those is a change of its own, reported)."""
        after = self.ref_versions()
        if before is None or after is None:
            return
        (before, attrs0, bufs0), (after, attrs1, bufs1) = before, after
        # plain attributes the reference sets itself (a call counter, a
        # cache of a shape): not compared from now on
        moved = {k for k in set(attrs0) | set(attrs1)
                 if attrs0.get(k, _MISSING) != attrs1.get(k, _MISSING)} - self.attrs_written
        if moved:
            self.attrs_written |= moved
            self.ref_state = [e[:7] + (tuple((k, p) for k, p in e[7]
                                             if (e[0], k) not in moved),) + e[8:]
                              for e in self.ref_state or []]
        old = dict(before)
        new = {key for key, v in after
               if key in old and old[key] != v and key not in self.self_written}
        # buffers written without a version bump (BatchNorm's running_mean
        # and running_var, updated inside the native kernel): by their bytes
        new |= {key for key, h in bufs1.items() if bufs0.get(key, h) != h} - self.self_written
        if not new:
            return
        self.self_written |= new
        st = []
        for e in self.ref_state or []:
            tens = tuple(t[:4] + (None,) + t[5:] if len(t) > 3 and (e[0], t[0], t[1]) in new
                         else t for t in e[3])
            st.append(e[:3] + (tens,) + e[4:])
        self.ref_state = st

    def model_state(self):
        """The reference model's state now (for params_moved)."""
        return self._model_state(self.reference)

    def params_moved(self, where, before):
        """The runner moved the reference's parameters and buffers to new
        storage (PROTO: timing.placement); before is model_state() taken
        just before.  What changed between the last check and the move is
        a finding, as check() would have said; the new storage is then
        the state to compare with."""
        for what in self._model_changes(self.ref_state, before):
            self._note(where, what)
        self.ref_state = self._model_state(self.reference)

    def _note(self, where, what):
        if what not in self.reported:
            self.reported.add(what)
            self.findings.append({"where": where, "what": what})

    def take(self):
        """The findings not yet handed over (and forget them)."""
        f, self.findings = self.findings, []
        return f
