# SPDX-License-Identifier: GPL-3.0-or-later
"""Where a torch runner's time goes: exclusive seconds per phase.

The runner's Python side wraps each piece of work in `with ph("name"):`;
a phase entered inside another pauses the outer one, so every second is
counted once, in the innermost phase (the reuse check's own calls count as
"arms", "reference", "inputs", ...; "reuse" keeps only what is left).
The C side adds its own phases (interpreter start, comparison, warm-up,
timed trials, flushes) and emits them all in one "phases" event before
"done" (runner/torch.c), which the harness ignores and bench-suite reads.

Clock: time.monotonic (CLOCK_MONOTONIC on Linux, as the C side).

Does not: time the timed calls (the C timing core does), or judge anything.
"""
import time


class Phases:
    def __init__(self):
        self.s = {}
        self.stack = []  # [name, started]
        # (id of the exception, [phase names, innermost last]) of the last
        # exception that left a phase; answer() reads it for the one it caught
        self.raised = None

    def _add(self, name, dt):
        self.s[name] = self.s.get(name, 0.0) + dt

    def __call__(self, name):
        return _Phase(self, name)

    def enter(self, name):
        now = time.monotonic()
        if self.stack:
            top = self.stack[-1]
            self._add(top[0], now - top[1])
        self.stack.append([name, now])

    def leave(self):
        now = time.monotonic()
        name, t0 = self.stack.pop()
        self._add(name, now - t0)
        if self.stack:
            self.stack[-1][1] = now

    def seconds(self):
        return dict(self.s)


class _Phase:
    __slots__ = ("p", "name")

    def __init__(self, p, name):
        self.p, self.name = p, name

    def __enter__(self):
        self.p.enter(self.name)

    def __exit__(self, etype, e, tb):
        # the phases an exception was raised in, innermost last, recorded on
        # the way out of the innermost one (answer() names them: an
        # out-of-memory says where the memory was asked for).  Kept here,
        # not on the exception (its attributes may be a candidate's code),
        # and by id: holding the exception would hold its traceback's
        # frames, and the tensors in them, after run() caught it.
        p = self.p
        if e is not None and (p.raised is None or p.raised[0] != id(e)):
            p.raised = (id(e), [n for n, _ in p.stack])
        self.p.leave()
        return False
