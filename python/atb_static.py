# SPDX-License-Identifier: GPL-3.0-or-later
"""atb's static checks of a KernelBench-format candidate (atb suite).

Run by the harness with the configured interpreter, as
    python3 atb_static.py --reference TASK.py CANDIDATE.py
it reads both files with the standard `ast` module (nothing is imported or
executed, torch is not needed) and prints one JSON object on stdout:
    {"version": 1, "reference_ops": [...], "findings": [
        {"kind": K, "line": N, "detail": "..."}, ...]}
Finding kinds (docs/suite.md says which refuse and which annotate):
  syntax_error           the candidate does not parse
  no_modelnew            no module-level class (or name) ModelNew
  fallback_to_reference  ModelNew subclasses Model, the file names Model, or
                         a try/except whose except clause calls torch (or
                         whose try body calls torch and whose handler does
                         not re-raise)
  dynamic_code           code this checker cannot read: exec, eval, compile,
                         __import__, importlib, runpy, marshal, pickle,
                         ctypes, ..., or a C++ source string that calls into
                         the interpreter (PyImport_, py::module_::import, ...)
  reflection             reaching objects the candidate did not make: gc,
                         inspect, builtins, sys.modules, sys._getframe,
                         frames and tracebacks, __subclasses__, __dict__,
                         __globals__ and like attributes, globals(), vars(),
                         locals(), getattr/setattr/delattr/hasattr with a
                         name that is not a string literal, atb's own
                         modules, or an assignment into torch (torch.X = ...);
                         such a module reached as another's attribute
                         (os.sys, from os import sys); signal, weakref,
                         atexit and faulthandler, whose hooks run code after
                         the candidate's call has returned
  unanalysable           the candidate parses but is too deep to walk
  calls_replaced_op      the candidate calls a torch op that the reference's
                         forward uses (torch.relu, F.softmax, torch.matmul,
                         the @ operator, nn.Conv2d, x.sum(), ...)
The first three and the next three refuse; calls_replaced_op annotates.
Exit status: 0 when the candidate was analysed (findings or not), 2 when
the arguments are wrong or the reference cannot be read or parsed (a task
bug, not the candidate's).

It does not decide anything: the harness stores the findings and applies
the policy.
"""
import ast
import json
import sys

TORCH_ROOTS = {"torch", "F", "nn", "functional"}

# Module classes and their functional op names.
MODULE_OPS = {
    "relu": "relu", "gelu": "gelu", "silu": "silu", "softmax": "softmax",
    "layernorm": "layer_norm", "rmsnorm": "rms_norm", "conv1d": "conv1d",
    "conv2d": "conv2d", "conv3d": "conv3d", "linear": "linear",
    "logsoftmax": "log_softmax", "sigmoid": "sigmoid", "tanh": "tanh",
    "batchnorm2d": "batch_norm", "groupnorm": "group_norm",
}

# Names that are different spellings of one op.
ALIASES = {
    "relu_": "relu", "mm": "matmul", "bmm": "matmul", "matmul": "matmul",
    "__matmul__": "matmul", "add_": "add", "mul_": "mul", "silu_": "silu",
    "gelu_": "gelu", "softmax_": "softmax",
}

# Calls that are bookkeeping, never "the op a task replaces".
NOT_OPS = {
    "no_grad", "manual_seed", "empty", "empty_like", "zeros", "zeros_like",
    "ones", "ones_like", "rand", "randn", "tensor", "uniform_", "normal_",
    "parameter", "module", "contiguous", "view", "reshape", "size", "to",
    "cuda", "cpu", "float", "half", "dim", "numel", "data_ptr", "stride",
    "is_contiguous", "sequential", "modulelist", "super", "__init__",
}


# PROTO: gates static -- what hides code from this checker, or reaches the
# reference (or the runner) without naming it.
DYNAMIC_NAMES = {"exec", "eval", "compile", "__import__", "execfile"}
DYNAMIC_MODULES = {"importlib", "runpy", "marshal", "pickle", "cPickle", "dill",
                   "cloudpickle", "code", "codeop", "ctypes", "_ctypes", "cffi", "imp",
                   "zipimport", "pkgutil", "_imp"}
REFLECTION_NAMES = {"globals", "locals", "vars", "__builtins__", "__loader__", "__spec__",
                    "attrgetter", "methodcaller"}
# (threading: work left running outside the timed call)
REFLECTION_MODULES = {"gc", "inspect", "builtins", "__builtin__", "__main__", "traceback",
                      "_thread", "threading", "sys"}
# Modules whose hooks run the candidate's code after its call has returned,
# in the runner's own checks or in the next arm's call: a signal handler
# on a timer, a weak reference's callback or finalizer, an exit handler.
HOOK_MODULES = {"signal", "_signal", "weakref", "_weakref", "_weakrefset", "atexit",
                "faulthandler"}
# module-level names of sys that reach other modules or frames
SYS_REFLECTION = {"modules", "_getframe", "_current_frames", "meta_path", "path_hooks",
                  "settrace", "setprofile", "exc_info", "exception", "last_traceback",
                  "last_value", "_current_exceptions", "monitoring", "audit",
                  "addaudithook"}
REFLECTION_ATTRS = {"__subclasses__", "__bases__", "__base__", "__mro__", "mro",
                    "__globals__", "__builtins__", "__dict__", "__code__", "__closure__",
                    "__getattribute__", "__self__", "__func__", "__wrapped__", "__loader__",
                    "__spec__", "__traceback__", "__import__", "__reduce__", "__reduce_ex__",
                    "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "gi_frame",
                    "cr_frame", "ag_frame", "tb_frame", "tb_next", "func_globals",
                    "attrgetter", "methodcaller",
                    # the caching allocator's list of every block: the
                    # reference's tensors by address (relu01/overwrite_ref)
                    "memory_snapshot", "_snapshot", "_record_memory_history"}
ATTR_BUILTINS = {"getattr", "setattr", "delattr", "hasattr"}
# C++ (load_inline) reaching back into the interpreter
CXX_INTO_PYTHON = ("PyImport_", "PyRun_", "PyEval_", "Py_CompileString", "PyObject_GetAttr",
                   "PySys_GetObject", "PyDict_GetItem", "PyModule_GetDict", "module_::import",
                   "module::import", "py::eval", "py::exec", "pybind11::eval",
                   "pybind11::exec", "py::globals", "pybind11::globals", "Py_Initialize",
                   "PyGILState_Ensure", "dlsym")
# the start of every module atb itself puts in the runner (atb_torch, atb_arm_N)
ATB_MODULE_PREFIX = "atb"


def normalise(name):
    low = name.lower()
    low = MODULE_OPS.get(low, low)
    return ALIASES.get(low, low)


def root_name(node):
    """The leftmost name of an attribute chain (torch.nn.functional.relu -> torch)."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def call_ops(tree, methods_count):
    """(op, line, spelling) for every torch-looking call and @ under tree.

    A call counts when its callee is an attribute chain rooted at torch, F,
    nn or functional; with methods_count, a method call on anything else
    (x.sum()) counts too, by its attribute name.
    """
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            out.append(("matmul", node.lineno, "@"))
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        name = node.func.attr
        if normalise(name) in NOT_OPS:
            continue
        root = root_name(node.func)
        spelled = ast.unparse(node.func) if hasattr(ast, "unparse") else name
        if root in TORCH_ROOTS:
            out.append((normalise(name), node.lineno, spelled))
        elif methods_count and root not in (None, "self"):
            out.append((normalise(name), node.lineno, spelled))
    return out


def find_class(tree, name):
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    return None


def method(cls, name):
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


def reference_ops(tree):
    """The ops the reference Model's forward uses, by normalised name."""
    cls = find_class(tree, "Model")
    if cls is None:
        raise ValueError("the reference defines no class Model")
    fwd = method(cls, "forward")
    if fwd is None:
        raise ValueError("the reference's Model has no forward")
    ops = {op for op, _, _ in call_ops(fwd, True)}
    # self.x = nn.Conv2d(...) in __init__, then self.x(...) in forward.
    init = method(cls, "__init__")
    modules = {}
    if init is not None:
        for node in ast.walk(init):
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Attribute)
                    and isinstance(node.value, ast.Call)
                    and isinstance(node.value.func, ast.Attribute)
                    and root_name(node.value.func) in TORCH_ROOTS):
                modules[node.targets[0].attr] = normalise(node.value.func.attr)
    for node in ast.walk(fwd):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "self"
                and node.func.attr in modules):
            ops.add(modules[node.func.attr])
    return {op for op in ops if op not in NOT_OPS}


def calls_torch(nodes, ops):
    for n in nodes:
        for op, _, _ in call_ops(n, False):
            return True
        for op, _, _ in call_ops(n, True):
            if op in ops:
                return True
    return False


def reraises(handler):
    return any(isinstance(n, ast.Raise) for n in ast.walk(handler))


def module_root(name):
    return (name or "").split(".")[0]


# modules that other modules keep under a private name
MODULE_ALIASES = {"bltns": "builtins"}


def module_alias(name):
    """The reflective, hook or code-running module NAME stands for (gc,
    _sys -> sys, bltns -> builtins, pickle), or None.  Not "code": an
    attribute of that name is common and means something else."""
    root = module_root(name)
    root = MODULE_ALIASES.get(root, root)
    for cand in (root, root.lstrip("_")):
        if cand in REFLECTION_MODULES or cand in HOOK_MODULES or \
                (cand in DYNAMIC_MODULES and cand not in ("code", "imp")):
            return cand
    return None


def literal_modules(call):
    """The modules a call's string-literal arguments name (module_alias)."""
    return [m for m in (module_alias(a.value) for a in call.args
                        if isinstance(a, ast.Constant) and isinstance(a.value, str)) if m]


def hidden_code_findings(tree):
    """dynamic_code and reflection findings: (kind, line, detail)."""
    out = []
    # names bound to the sys module (import sys [as s]), wherever the import
    # is (a function's import is deeper in the walk than a use elsewhere)
    sys_names = {(a.asname or a.name).split(".")[0] for n in ast.walk(tree)
                 if isinstance(n, ast.Import) for a in n.names if module_root(a.name) == "sys"}
    # the sys module may only be read as sys.NAME: taken as a value (an
    # alias, a list, an argument) its attributes are out of the rule below's
    # sight ([sys][0].modules["gc"] reached the runner's Session through the
    # collector, past this checker: review of session 30)
    sys_reads = {id(n.value) for n in ast.walk(tree)
                 if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)}
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 1)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if isinstance(node, ast.ImportFrom):
                mods = [node.module or ""]
                if node.level:
                    out.append(("reflection", line, "a relative import (from . import ...)"))
            else:
                mods = [a.name for a in node.names]
            for mod in mods:
                root = module_root(mod)
                if root in DYNAMIC_MODULES:
                    out.append(("dynamic_code", line, "imports %s, which runs code this "
                                "checker cannot read" % mod))
                elif root.startswith(ATB_MODULE_PREFIX):
                    out.append(("reflection", line, "imports %s, one of atb's own "
                                "modules in the runner" % mod))
                elif root == "sys":
                    if isinstance(node, ast.ImportFrom):
                        for a in node.names:
                            if a.name in SYS_REFLECTION or a.name == "*":
                                out.append(("reflection", line, "imports sys.%s" % a.name))
                elif root in REFLECTION_MODULES:
                    out.append(("reflection", line, "imports %s, which reaches objects the "
                                "candidate did not make" % mod))
                elif root in HOOK_MODULES:
                    out.append(("reflection", line, "imports %s, whose hooks run code after "
                                "the candidate's call has returned" % mod))
            if isinstance(node, ast.ImportFrom):
                # from os import sys: a module reached as another's attribute
                for a in node.names:
                    if a.name in REFLECTION_MODULES or a.name in HOOK_MODULES:
                        out.append(("reflection", line, "imports %s from %s" %
                                    (a.name, node.module or ".")))
        elif isinstance(node, ast.Name):
            if node.id in DYNAMIC_NAMES:
                out.append(("dynamic_code", line, "uses %s" % node.id))
            elif node.id in REFLECTION_NAMES:
                out.append(("reflection", line, "uses %s" % node.id))
            elif node.id in ATTR_BUILTINS and not isinstance(node.ctx, ast.Load):
                out.append(("reflection", line, "rebinds %s" % node.id))
            elif node.id in sys_names and id(node) not in sys_reads:
                out.append(("reflection", line, "uses the module sys as a value (only "
                            "sys.NAME is read)"))
        elif isinstance(node, ast.Attribute):
            if node.attr in REFLECTION_ATTRS:
                out.append(("reflection", line, "reads the attribute %s" % node.attr))
            elif module_alias(node.attr):
                # os.sys.setprofile, torch.x.gc.callbacks: the module through
                # another module that imported it, under its name or a private
                # alias (collections._sys, argparse._sys, enum.bltns,
                # torch.serialization.pickle: session 30's second review)
                out.append(("reflection", line, "reads the attribute %s (the module %s "
                            "through another module)" % (node.attr,
                                                         module_alias(node.attr))))
            elif node.attr in DYNAMIC_NAMES and isinstance(node.value, ast.Name) and \
                    node.value.id in ("builtins", "__builtins__"):
                out.append(("dynamic_code", line, "uses builtins.%s" % node.attr))
            if isinstance(node.value, ast.Name) and node.value.id in sys_names and \
                    node.attr in SYS_REFLECTION:
                out.append(("reflection", line, "reads sys.%s" % node.attr))
            if isinstance(node.ctx, (ast.Store, ast.Del)) and root_name(node) in TORCH_ROOTS:
                out.append(("reflection", line, "assigns to %s: it patches what the "
                            "reference runs on" % (ast.unparse(node) if hasattr(ast, "unparse")
                                                   else node.attr)))
        elif isinstance(node, ast.Call) and literal_modules(node) and not (
                isinstance(node.func, ast.Name) and node.func.id in ATTR_BUILTINS):
            # modules.get("gc"), sys.modules.pop("inspect"): a module looked
            # up by its name in a table of modules however it was reached
            out.append(("reflection", line, "passes the name of the module %s" %
                        literal_modules(node)[0]))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in ATTR_BUILTINS:
            name = node.args[1] if len(node.args) > 1 else None
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                out.append(("reflection", line, "calls %s with a name that is not a string "
                            "literal" % node.func.id))
            elif name.value in REFLECTION_ATTRS or name.value == "Model" or \
                    module_alias(name.value) or name.value in DYNAMIC_MODULES or \
                    name.value in SYS_REFLECTION:
                out.append(("reflection", line, "calls %s(..., %r)" % (node.func.id,
                                                                      name.value)))
            elif node.func.id in ("setattr", "delattr") and node.args and \
                    root_name(node.args[0]) in TORCH_ROOTS:
                out.append(("reflection", line, "calls %s on %s: it patches what the "
                            "reference runs on" % (node.func.id, root_name(node.args[0]))))
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and \
                isinstance(node.slice.value, str) and module_alias(node.slice.value):
            # x["gc"]: a module looked up by its name in some table of
            # modules (sys.modules however it was reached)
            out.append(("reflection", line, "looks up %r by name" % node.slice.value))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for tok in CXX_INTO_PYTHON:
                if tok in node.value:
                    out.append(("dynamic_code", line, "a source string calls into the "
                                "interpreter (%s)" % tok))
                    break
    # getattr and the like taken as a value (g = getattr), out of sight of the rule above
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in ATTR_BUILTINS and \
                isinstance(node.ctx, ast.Load) and id(node) not in called:
            out.append(("reflection", node.lineno, "takes %s as a value" % node.id))
    return out


def candidate_findings(tree, ops):
    findings = []
    body = [n for n in tree.body if not (isinstance(n, ast.ClassDef) and n.name == "Model")]

    has_new = False
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "ModelNew":
            has_new = True
            for base in node.bases:
                if (isinstance(base, ast.Name) and base.id == "Model") or \
                   (isinstance(base, ast.Attribute) and base.attr == "Model"):
                    findings.append({"kind": "fallback_to_reference", "line": node.lineno,
                                     "detail": "class ModelNew subclasses the reference Model"})
        elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "ModelNew" for t in node.targets):
            has_new = True
    if not has_new:
        findings.append({"kind": "no_modelnew", "line": 1,
                         "detail": "the candidate defines no module-level ModelNew"})

    seen_model = set()
    for top in body:
        for node in ast.walk(top):
            line = getattr(node, "lineno", 1)
            named = ((isinstance(node, ast.Name) and node.id == "Model") or
                     (isinstance(node, ast.Attribute) and node.attr == "Model") or
                     (isinstance(node, ast.alias) and node.name.split(".")[-1] == "Model"))
            if named and line not in seen_model:
                seen_model.add(line)
                if not any(f["kind"] == "fallback_to_reference" and f["line"] == line
                           for f in findings):
                    findings.append({"kind": "fallback_to_reference", "line": line,
                                     "detail": "the candidate refers to the reference Model"})
            if isinstance(node, ast.Try) and node.handlers:
                fallback = calls_torch(node.handlers, ops)
                swallowed = calls_torch(node.body, ops) and not all(
                    reraises(h) for h in node.handlers)
                if fallback or swallowed:
                    what = ("its except clause calls torch" if fallback else
                            "it wraps a torch call and its except clause does not re-raise")
                    findings.append({"kind": "fallback_to_reference", "line": node.lineno,
                                     "detail": "try/except falls back: " + what})

    seen_hidden = set()
    for kind, line, detail in hidden_code_findings(tree):
        if (kind, line) not in seen_hidden:
            seen_hidden.add((kind, line))
            findings.append({"kind": kind, "line": line, "detail": detail})

    reported = set()
    for top in body:
        for op, line, spelled in call_ops(top, True):
            if op in ops and (op, line) not in reported:
                reported.add((op, line))
                findings.append({"kind": "calls_replaced_op", "line": line,
                                 "detail": "calls %s, the op '%s' that the reference's "
                                           "forward uses" % (spelled, op)})
    findings.sort(key=lambda f: (f["line"], f["kind"]))
    return findings


def main(argv):
    if len(argv) != 4 or argv[1] != "--reference":
        sys.stderr.write("usage: atb_static.py --reference TASK.py CANDIDATE.py\n")
        return 2
    ref_path, cand_path = argv[2], argv[3]
    try:
        with open(ref_path, encoding="utf-8") as f:
            ref_tree = ast.parse(f.read(), filename=ref_path)
        ops = reference_ops(ref_tree)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError) as e:
        sys.stderr.write("cannot analyse reference '%s': %s\n" % (ref_path, e))
        return 2
    out = {"version": 1, "reference_ops": sorted(ops), "findings": []}
    try:
        with open(cand_path, encoding="utf-8") as f:
            src = f.read()
    except (OSError, UnicodeDecodeError) as e:
        sys.stderr.write("cannot read candidate '%s': %s\n" % (cand_path, e))
        return 2
    try:
        tree = ast.parse(src, filename=cand_path)
    except (RecursionError, MemoryError, ValueError) as e:
        # too deep for the parser, or a NUL byte: nothing can be said of it
        out["findings"].append({"kind": "unanalysable", "line": 1,
                                "detail": "the candidate cannot be parsed: %s" % type(e).__name__})
        sys.stdout.write(json.dumps(out, sort_keys=True) + "\n")
        return 0
    except SyntaxError as e:
        out["findings"].append({"kind": "syntax_error", "line": e.lineno or 1,
                                "detail": "the candidate does not parse: %s" % e.msg})
    else:
        try:
            out["findings"] = candidate_findings(tree, ops)
        except (RecursionError, MemoryError) as e:
            out["findings"] = [{"kind": "unanalysable", "line": 1,
                                "detail": "the candidate is too deep to analyse: %s"
                                          % type(e).__name__}]
    sys.stdout.write(json.dumps(out, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
