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
  calls_replaced_op      the candidate calls a torch op that the reference's
                         forward uses (torch.relu, F.softmax, torch.matmul,
                         the @ operator, nn.Conv2d, x.sum(), ...)
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
    except SyntaxError as e:
        out["findings"].append({"kind": "syntax_error", "line": e.lineno or 1,
                                "detail": "the candidate does not parse: %s" % e.msg})
    else:
        out["findings"] = candidate_findings(tree, ops)
    sys.stdout.write(json.dumps(out, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
