#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Closing lines of `make test`, read from ctest's JUnit file (--output-junit).

ctest's own summary says "100% tests passed" when tests were skipped, and
its LastTest.log writes "Test Passed." for a script that exited 77.  The
JUnit file keeps both the status (notrun + <skipped> for SKIP_RETURN_CODE)
and each test's output, where tests/cli/lib.sh's skip_all printed
"1..0 # SKIP <reason>".  Criterion executables run with --verbose, so their
skipped tests ("[SKIP] suite::name: reason") are listed too: one ctest test
u-cuda holds several Criterion tests and passes when they all skip.

usage: test-summary.py JUNIT.xml [WALL_SECONDS]
Prints a line per skipped or failed test, then, last, the plain closing line
"tests: N passed, N failed, N skipped".  Exit 0 (the caller keeps ctest's).
"""
import re
import sys
import xml.etree.ElementTree as ET

SKIP_TAP = re.compile(r"^1\.\.0 # SKIP (.*)$", re.M)
SKIP_CRITERION = re.compile(r"^\[SKIP\] (\S+?): (.*)$", re.M)


def main():
    if len(sys.argv) < 2:
        print("usage: test-summary.py JUNIT.xml [WALL_SECONDS]", file=sys.stderr)
        return 2
    try:
        root = ET.parse(sys.argv[1]).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"tests: no summary: cannot read ctest's JUnit file '{sys.argv[1]}': {e}")
        return 0
    passed, failed, skipped = [], [], []
    inner = []  # (ctest test, criterion test, reason)
    for case in root.iter("testcase"):
        name = case.get("name", "?")
        out = case.findtext("system-out") or ""
        status = case.get("status", "")
        if case.find("skipped") is not None or status in ("notrun", "disabled"):
            m = SKIP_TAP.search(out)
            if m:
                why = m.group(1).strip()
            elif status == "disabled":
                why = "disabled in CMakeLists.txt"
            else:
                sk = case.find("skipped")
                why = "no reason printed (" + (sk.get("message", "not run") if sk is not None else "not run") + ")"
            skipped.append((name, why))
        elif case.find("failure") is not None or status == "fail":
            failed.append(name)
        else:
            passed.append(name)
            for m in SKIP_CRITERION.finditer(out):
                inner.append((name, m.group(1), m.group(2).strip()))

    ran = len(passed) + len(failed) + len(skipped)
    wall = f" in {sys.argv[2]} s" if len(sys.argv) > 2 else ""
    print(f"test summary: {ran} tests{wall} ({sys.argv[1]})")
    for name, why in skipped:
        print(f"  skipped {name}: {why}")
    # One line per executable and reason: u-cuda's 5 skips share one.
    groups = {}
    for exe, test, why in inner:
        groups.setdefault((exe, why), []).append(test)
    for (exe, why), tests in groups.items():
        shown = ", ".join(t.split("::")[-1] for t in tests[:3]) + (", ..." if len(tests) > 3 else "")
        print(f"  skipped inside {exe} ({len(tests)} Criterion test{'s' if len(tests) > 1 else ''}: {shown}): {why}")
    for name in failed:
        print(f"  FAILED  {name} (its output is above)")
    print(f"tests: {len(passed)} passed, {len(failed)} failed, {len(skipped)} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
