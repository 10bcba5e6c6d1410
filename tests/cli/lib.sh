# SPDX-License-Identifier: GPL-3.0-or-later
# Shared helpers for tests/cli/tNNNN-*.sh (git's test-lib, much smaller).
# Each script: `. "$(dirname "$0")/lib.sh"`, then test_expect ... , then test_done.
# Environment from ctest: ATB (the atb binary), ATB_HOME, ATB_BUILD_DIR, ATB_SOURCE_DIR.
set -u
: "${ATB_SOURCE_DIR:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
: "${ATB_HOME:=$ATB_SOURCE_DIR}"
: "${ATB_BUILD_DIR:=$ATB_SOURCE_DIR/build/dev}"
: "${ATB:=$ATB_BUILD_DIR/atb}"
export ATB ATB_HOME ATB_BUILD_DIR ATB_SOURCE_DIR
unset ATB_DB

TEST_NAME=$(basename "$0" .sh)
TRASH=$(mktemp -d "${TMPDIR:-/tmp}/atb-$TEST_NAME.XXXXXX")
trap 'rm -rf "$TRASH"' EXIT
cd "$TRASH" || exit 1

tests_run=0
tests_failed=0

# jq -e as jq 1.7 means it: no value read at all is a failure (exit 4).
# Debian 12's jq 1.6 exits 0 there, so `jq -e FILTER out.json` passed on
# an empty out.json -- a command that failed before printing its JSON (t4015's
# static refusals passed while atb refused to start on a stale manifest,
# session 30).  With -e (alone or among short flags: -se, -ne) the output
# is read here first; a run that printed nothing and exited 0 exits 4.
jq() {
	local a e=0 out rc
	for a in "$@"; do
		case $a in
		--exit-status) e=1 ;;
		--*) ;;
		-*e*) [[ $a =~ ^-[a-zA-Z]+$ ]] && e=1 ;;
		esac
	done
	[ $e = 1 ] || { command jq "$@"; return; }
	out=$(command jq "$@") && rc=0 || rc=$?
	[ -z "$out" ] || printf '%s\n' "$out"
	[ $rc = 0 ] && [ -z "$out" ] && return 4
	return $rc
}

# test_expect NAME CMD...: run CMD (a shell snippet) and count failures.
test_expect() {
	local name=$1; shift
	tests_run=$((tests_run + 1))
	if (set -e; eval "$@") >"$TRASH/.out" 2>&1; then
		echo "ok $tests_run - $name"
		# its "# ..." notes (a try the box refused, a check not run) stay
		# in the log of a passing test too: how often the box got in the way
		grep '^# ' "$TRASH/.out" | sed 's/^/#   /' || true
	else
		tests_failed=$((tests_failed + 1))
		echo "not ok $tests_run - $name"
		sed 's/^/#   /' "$TRASH/.out"
	fi
}

# stop_server PID URL: stop a server the script started and wait until URL
# answers no more.  test_expect runs its snippet in a subshell, where `wait`
# on the script's child returns at once (not a child of that shell): on a
# busy box the server still answered the next curl (t5108 under ASan, CI).
stop_server() {
	local i
	kill "$1" 2>/dev/null || true
	for i in $(seq 1 300); do
		# not kill -0: from a subshell a dead server stays a zombie until the
		# script reaps it, and kill -0 on a zombie succeeds
		curl -sf --max-time 1 "$2" >/dev/null || return 0
		sleep 0.1
	done
	echo "the server (pid $1) still answers $2 30 s after it was stopped"
	return 1
}

# llm_double [PYTHON]: start the TEST DOUBLE model server (llm-double.py) on
# ./script.json, logging to ./d.log, killed when the script exits; waits up to
# 30 s (a loaded box) for its port and sets DOUBLE (its pid) and URL.
llm_double() {
	local i
	"${1:-python3}" "${ATB_SOURCE_DIR:-$ATB_HOME}/tests/cli/llm-double.py" script.json d.log d.port &
	DOUBLE=$!
	trap 'kill $DOUBLE 2>/dev/null; rm -rf "$TRASH"' EXIT
	for i in $(seq 1 600); do [ -s d.port ] && break; sleep 0.05; done
	[ -s d.port ] || { echo "the test double model server did not start"; exit 1; }
	URL=http://127.0.0.1:$(cat d.port)
}

# expect_exit CODE CMD...: CMD must exit with CODE; its stderr is kept in $TRASH/err.
expect_exit() {
	local want=$1 got; shift
	"$@" >"$TRASH/out" 2>"$TRASH/err" && got=0 || got=$?
	if [ "$got" != "$want" ]; then
		echo "expected exit $want, got $got from: $*"
		echo "--- stdout"; cat "$TRASH/out"; echo "--- stderr"; cat "$TRASH/err"
		return 1
	fi
}

# A real timing verdict on a shared 2-core box: the gates a loaded box can
# trip for an honest candidate (BOX_GATES), and how many independent tries
# a test gets before a refusal by them counts (ATB_TEST_BOX_TRIES, 3).  A
# defect of atb or of the candidate fails every try; a refusal by load alone
# (t4010 and t6100 were refused twice in a row at load 10 and above) fails
# three in a row far more rarely.
BOX_GATES='.gate == "baseline_drift" or .gate == "noise" or .gate == "client_lag" or .gate == "clock"'
: "${ATB_TEST_BOX_TRIES:=3}"

# verdict_line FILE: one line with a --json verdict's numbers, for the log.
verdict_line() {
	[ -s "$1" ] && jq -c '{verdict, gate, speedup, ci_low, ci_high, cv, reason}' "$1" 2>/dev/null ||
		echo "(no JSON verdict; stderr: $(tail -c 300 "$TRASH/err" 2>/dev/null))"
}

# expect_exit_past_box WANT atb measure|engine ab --json ...: expect_exit,
# but a run the box refused (exit 2 by one of BOX_GATES) is tried again, up
# to ATB_TEST_BOX_TRIES runs in all.  Needs jq.
expect_exit_past_box() {
	local want=$1 got try; shift
	for ((try = 1; try <= ATB_TEST_BOX_TRIES; try++)); do
		"$@" >"$TRASH/out" 2>"$TRASH/err" && got=0 || got=$?
		[ "$got" = "$want" ] && return 0
		[ "$got" = 2 ] && [ "$want" != 2 ] && jq -e "$BOX_GATES" "$TRASH/out" >/dev/null 2>&1 ||
			break
		echo "# try $try of $ATB_TEST_BOX_TRIES refused by the box: $(verdict_line "$TRASH/out")"
	done
	echo "expected exit $want, got $got from: $*"
	echo "--- stdout"; cat "$TRASH/out"; echo "--- stderr"; tail -40 "$TRASH/err"
	return 1
}

# expect_verdict FILTER atb ... --json ...: the run exits 0 and its JSON
# verdict satisfies the jq FILTER.  For the statistical claims on an honest
# candidate (a copy's 95% interval covers 1: it misses 1 time in 20 by
# design, however right atb is), a try that was admitted but misses FILTER,
# or that the box refused, is followed by an independent one, up to
# ATB_TEST_BOX_TRIES in all; any other outcome (another gate, a crash)
# fails at once.  Every try's numbers are printed.  Needs jq.
expect_verdict() {
	local filter=$1 got try; shift
	for ((try = 1; try <= ATB_TEST_BOX_TRIES; try++)); do
		"$@" >"$TRASH/out" 2>"$TRASH/err" && got=0 || got=$?
		if [ "$got" = 0 ] && jq -e "$filter" "$TRASH/out" >/dev/null 2>&1; then
			return 0
		fi
		echo "# try $try of $ATB_TEST_BOX_TRIES: exit $got: $(verdict_line "$TRASH/out")"
		if [ "$got" = 0 ] && jq -e '.verdict == "admitted"' "$TRASH/out" >/dev/null 2>&1; then
			continue
		fi
		[ "$got" = 2 ] && jq -e "$BOX_GATES" "$TRASH/out" >/dev/null 2>&1 || break
	done
	echo "not satisfied: $filter"
	echo "from: $*"
	echo "--- stdout"; cat "$TRASH/out"; echo "--- stderr"; tail -40 "$TRASH/err"
	return 1
}

# expect_gate_past_box GATE atb measure --json ...: the run exits 2 refused
# by GATE (e.g. "validator": an honest candidate on too few seeds passed every
# gate before the store).  For honest candidates only: a refusal by one of
# BOX_GATES instead comes before GATE was judged, so the try tells nothing
# and an independent one follows, up to ATB_TEST_BOX_TRIES in all; any other
# outcome fails at once.  Every refused try's numbers are printed.  Needs jq.
expect_gate_past_box() {
	local gate=$1 got try; shift
	for ((try = 1; try <= ATB_TEST_BOX_TRIES; try++)); do
		"$@" >"$TRASH/out" 2>"$TRASH/err" && got=0 || got=$?
		[ "$got" = 2 ] && jq -e --arg g "$gate" '.gate == $g' "$TRASH/out" >/dev/null 2>&1 &&
			return 0
		[ "$got" = 2 ] && jq -e "$BOX_GATES" "$TRASH/out" >/dev/null 2>&1 || break
		echo "# try $try of $ATB_TEST_BOX_TRIES refused by the box: $(verdict_line "$TRASH/out")"
	done
	echo "expected exit 2 by gate $gate, got $got from: $*"
	echo "--- stdout"; cat "$TRASH/out"; echo "--- stderr"; tail -40 "$TRASH/err"
	return 1
}

# need_torch_cpu RUNNER: the torch tests' preconditions on CPU tensors; sets
# PY ($ATB_PYTHON, else .venv-torch's python).  Skips the whole script when
# RUNNER is a sanitizer build (every allocation of the uninstrumented torch
# goes through ASan's allocator: one correctness-only job took 5 minutes;
# docs/internals/torch.md) or when PY cannot import torch.
need_torch_cpu() {
	PY=${ATB_PYTHON:-$ATB_SOURCE_DIR/.venv-torch/bin/python3}
	ldd "$1" 2>/dev/null | grep -q libasan &&
		skip_all "sanitizer build: torch in an ASan runner is too slow to test (see docs/internals/torch.md)"
	[ -x "$PY" ] && "$PY" -c "import torch" 2>/dev/null ||
		skip_all "no python with torch at '$PY' (scripts/install-torch.sh installs one)"
}

# python_json FILE: into FILE, what atb_task_load_kernelbench asks $PY about
# itself (its libpython, home and sys.path) as the torch runner's job JSON
# wants it under "torch": {"python": ...}; skip_all where $PY cannot say.
python_json() {
	"$PY" -c '
import sys, os, sysconfig, json
v = sysconfig.get_config_var
lib = [os.path.join(d, n) for n in (v("INSTSONAME"), v("LDLIBRARY")) if n and ".so" in n
       for d in (v("LIBDIR") or "", os.path.join(sys.base_prefix, "lib")) if os.path.exists(os.path.join(d, n))]
print(json.dumps({"library": lib[0] if lib else "", "home": sys.base_prefix,
                  "path": [p for p in sys.path if p]}))' >"$1" ||
		skip_all "cannot ask '$PY' about itself"
}

# sql DB QUERY: QUERY's rows on the store DB as the sqlite3 shell prints
# them in its default list mode (columns joined by '|', NULL as nothing,
# one row a line; several statements run in turn), waiting up to 10 s for
# a writer's lock (the shell's '.timeout 10000'); on a failure, 'Error: ...'
# on stderr and exit 1.  The sqlite3 shell when it is on PATH, else python3
# with its sqlite3 module: the GPU machine has no shell ('sqlite3: command
# not found' failed t4015 there).  have_sql: can sql run here at all?
sql() {
	if command -v sqlite3 >/dev/null 2>&1; then
		sqlite3 -cmd ".timeout 10000" "$1" "$2"
	else
		python3 -c "$_SQL_PY" "$1" "$2"
	fi
}
have_sql() {
	command -v sqlite3 >/dev/null 2>&1 || python3 -c "import sqlite3" 2>/dev/null
}
# A real as the shell prints it (%!.15g: 15 significant digits, '.0' on a
# whole number), a blob as its bytes, autocommit as the shell does.
_SQL_PY='
import sqlite3, sys

def cell(v):
    if v is None:
        return ""
    if isinstance(v, float):
        t = "%.15g" % v
        m, e, x = t.partition("e")
        return t if "." in m or not m.lstrip("-").isdigit() else m + ".0" + e + x
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return str(v)

try:
    db = sqlite3.connect(sys.argv[1], timeout=10.0, isolation_level=None)
    stmt = ""
    for piece in sys.argv[2].split(";"):
        stmt += piece + ";"
        if not sqlite3.complete_statement(stmt):
            continue
        if stmt.strip(" \t\n;"):
            for row in db.execute(stmt):
                print("|".join(cell(v) for v in row))
        stmt = ""
    if stmt.strip(" \t\n;"):
        for row in db.execute(stmt):
            print("|".join(cell(v) for v in row))
except sqlite3.Error as e:
    sys.stdout.flush()
    print("Error: %s" % e, file=sys.stderr)
    sys.exit(1)
'

# expect_grep PATTERN FILE: FILE must contain PATTERN (fixed string).
expect_grep() {
	grep -qF -- "$1" "$2" || { echo "missing '$1' in $2:"; cat "$2"; return 1; }
}

# skip_all REASON: skip the whole script (ctest counts exit 77 as skipped).
skip_all() {
	echo "1..0 # SKIP $*"
	exit 77
}

test_done() {
	echo "1..$tests_run"
	echo "$((tests_run - tests_failed)) passed, $tests_failed failed"
	[ "$tests_failed" -eq 0 ]
}
