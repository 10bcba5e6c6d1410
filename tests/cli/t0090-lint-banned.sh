#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Project lint (STYLE.md's safety habits), over the source tree $ATB_SOURCE_DIR:
#   banned-last  every .c under src/ cli/ runner/ has "banned.h" as its last #include
#   no-print     no file under src/ prints or exits: printf, puts, putchar, perror,
#                vprintf, exit, abort, _Exit, quick_exit, or any use of stdout or
#                stderr (the library never prints; cli/ and runner/ may).  _exit
#                stays allowed: a forked child must use it after a failed exec.
#   spdx         every .c and .h has an SPDX-License-Identifier in its first 2 lines
# Comments and string literals are ignored.  Each offence is printed as
# path:line: rule: detail.  The lint first proves itself on a planted tree.
. "$(dirname "$0")/lib.sh"

command -v python3 >/dev/null || skip_all "python3 is needed for the lint"

cat >"$TRASH/lint.py" <<'PY'
import os, re, sys

root = sys.argv[1]
SKIP_DIRS = {".git", "build", ".cache", "node_modules"}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"][^>"]*[>"])')
CALL = re.compile(r'\b(printf|vprintf|puts|putchar|perror|exit|abort|_Exit|quick_exit)\s*\(')
STREAM = re.compile(r'\b(stdout|stderr)\b')

def blank_comments_and_strings(text):
    """Replace comments, string and char literals by spaces, keeping newlines."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i)); i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:j - 1]) + c if j - i >= 2 else text[i:j])
            i = j
        else:
            out.append(c); i += 1
    return "".join(out)

def files(top, exts):
    base = os.path.join(root, top) if top else root
    for d, dirs, names in os.walk(base):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not x.startswith("."))
        for name in sorted(names):
            if name.endswith(exts):
                yield os.path.join(d, name)

offences = []
def offend(path, line, rule, detail):
    offences.append("%s:%d: %s: %s" % (os.path.relpath(path, root), line, rule, detail))

rules = sys.argv[2:] or ["banned-last", "no-print", "spdx"]

if "banned-last" in rules:
    for top in ("src", "cli", "runner"):
        for path in files(top, (".c",)):
            last = None
            with open(path, encoding="utf-8", errors="replace") as f:
                for no, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if m:
                        last = (no, m.group(1))
            if last is None:
                offend(path, 1, "banned-last", 'no #include "banned.h"')
            elif last[1] != '"banned.h"':
                offend(path, last[0], "banned-last",
                       'last #include is %s, not "banned.h"' % last[1])

if "no-print" in rules:
    for path in files("src", (".c", ".h")):
        with open(path, encoding="utf-8", errors="replace") as f:
            code = blank_comments_and_strings(f.read())
        for no, line in enumerate(code.split("\n"), 1):
            if line.lstrip().startswith("#"):
                continue
            for m in CALL.finditer(line):
                if line[:m.start()].rstrip().endswith(("->", ".")):
                    continue  # a member named exit, not the function
                offend(path, no, "no-print", "calls %s()" % m.group(1))
            for m in STREAM.finditer(line):
                offend(path, no, "no-print", "uses %s" % m.group(1))

if "spdx" in rules:
    for path in files("", (".c", ".h")):
        with open(path, encoding="utf-8", errors="replace") as f:
            head = [f.readline(), f.readline()]
        if not any("SPDX-License-Identifier:" in l for l in head):
            offend(path, 1, "spdx", "no SPDX-License-Identifier in the first 2 lines")

for o in offences:
    print(o)
sys.exit(1 if offences else 0)
PY

lint() { python3 "$TRASH/lint.py" "$@"; }

# A planted tree: one offence per rule and near-misses that must pass.
plant() {
	local t=$TRASH/planted
	mkdir -p "$t/src/x" "$t/cli" "$t/runner" "$t/include/atb" "$t/build/dev"
	printf '/* SPDX-License-Identifier: GPL-3.0-or-later */\n#include <stdio.h>\n#include "banned.h"\n#include <string.h>\n' >"$t/src/x/late.c"
	printf '/* SPDX-License-Identifier: GPL-3.0-or-later */\n#include <stdio.h>\n' >"$t/cli/none.c"
	printf '/* SPDX-License-Identifier: GPL-3.0-or-later */\n#include <stdlib.h>\n#include "banned.h"\nvoid f(void) { fprintf(stderr, "x"); }\nvoid g(void) { exit(1); }\n' >"$t/src/x/prints.c"
	printf '/* SPDX-License-Identifier: GPL-3.0-or-later */\n#include "banned.h"\n/* printf("in a comment"); exit(1) */\nstatic const char *s = "abort() stderr";\nvoid h(int (*fn)(void)) { snprintf(0, 0, "%%s", s); _exit(1); }\nstruct ops { void (*exit)(void); };\nvoid k(struct ops *o) { o->exit(); }\n' >"$t/src/x/clean.c"
	printf '#include <stdio.h>\n\n/* SPDX-License-Identifier: GPL-3.0-or-later */\n#include "banned.h"\n' >"$t/runner/late_spdx.c"
	printf '\n// SPDX-License-Identifier: GPL-3.0-or-later\n#include "banned.h"\n' >"$t/runner/line2.c"
	printf '// SPDX-License-Identifier: GPL-3.0-or-later\n#define X 1\n' >"$t/include/atb/ok.h"
	printf 'no spdx, but in build/\n' >"$t/build/dev/gen.c"
	echo "$t"
}

test_expect "the lint finds each planted offence and nothing else" '
	t=$(plant) &&
	{ lint "$t" >planted.out; test $? = 1; } &&
	cat planted.out &&
	expect_grep "src/x/late.c:4: banned-last: last #include is <string.h>" planted.out &&
	expect_grep "cli/none.c:2: banned-last: last #include is <stdio.h>" planted.out &&
	expect_grep "src/x/prints.c:4: no-print: uses stderr" planted.out &&
	expect_grep "src/x/prints.c:5: no-print: calls exit()" planted.out &&
	expect_grep "runner/late_spdx.c:1: spdx:" planted.out &&
	! grep -q "clean.c" planted.out &&
	! grep -q "ok.h" planted.out &&
	! grep -q "line2.c" planted.out &&
	! grep -q "build/" planted.out &&
	test "$(wc -l <planted.out)" = 5
'

test_expect "every .c under src/ cli/ runner/ includes \"banned.h\" last" '
	lint "$ATB_SOURCE_DIR" banned-last
'

test_expect "the library (src/) never prints or exits" '
	lint "$ATB_SOURCE_DIR" no-print
'

test_expect "every .c and .h starts with an SPDX line" '
	lint "$ATB_SOURCE_DIR" spdx
'

test_done
