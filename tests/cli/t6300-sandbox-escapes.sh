#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The sandbox against a candidate that tries every way out issue 11 found
# open (tests/fixtures/cheats/escape/): forged ingests, writes to the store,
# ATB_HOME's headers, the task, the folder above, /tmp and /etc, processes
# that outlive the job, a loopback connection, and an #include of a file
# outside the candidate.  Each attempt must change nothing outside the
# sandbox; the stored result says the sandbox was full.  A fork bomb
# (escape/fork-bomb.c) is held by the job's process limit, a pids cgroup
# of its own (RLIMIT_NPROC does not bind uid 0), and the job is refused
# as it reaches it (the runner's error process_limit); where no limit can
# be enforced the stored facts say why and the bomb is not run.
# PROTO: sandbox.
. "$(dirname "$0")/lib.sh"

ESC=$ATB_SOURCE_DIR/tests/fixtures/cheats/escape
[ -x "$ATB_BUILD_DIR/atb-runner" ] || skip_all "no atb-runner"
command -v cc >/dev/null || skip_all "no C compiler"
command -v jq >/dev/null || skip_all "jq not installed"
command -v bwrap >/dev/null || skip_all "no bwrap (scripts/install-deps.sh installs bubblewrap)"

# A home of our own, so an escape that worked could not harm the source tree.
mkdir home && cp -r "$ATB_SOURCE_DIR/include" "$ATB_SOURCE_DIR/protocol" "$ATB_SOURCE_DIR/tasks" \
	"$ATB_SOURCE_DIR/python" "$ATB_SOURCE_DIR/engines" home/ && find home -name __pycache__ -prune -exec rm -rf {} + &&
	cp -r "$ATB_SOURCE_DIR/tests/fixtures/cheats/tasks/relu-spin" task
export ATB_HOME=$TRASH/home ATB_DB=$TRASH/m.db
# The sandbox alone: with arm workers (protocol v11's default) the worker's
# own filter refuses the forks before the sandbox is reached (t6310).
export ATB_ISOLATION=none
PID=$$
PORT=$((20000 + PID % 20000))

# A loopback listener that records any connection (and stops by itself).
python3 - "$PORT" "$TRASH/connected" <<'PY' &
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(8); s.settimeout(120)
try:
    c, _ = s.accept(); open(sys.argv[2], "w").write("connected\n")
except OSError:
    pass
PY
LISTENER=$!
trap 'kill $LISTENER 2>/dev/null; rm -rf "$TRASH"' EXIT

subst() {
	sed -e "s|@ATB@|$ATB|g" -e "s|@DB@|${ATB_DB}|g" -e "s|@HOME@|$ATB_HOME|g" \
	    -e "s|@TRASH@|$TRASH|g" -e "s|@PID@|$PID|g" -e "s|@PORT@|$PORT|g" "$1"
}
mkdir escape && subst "$ESC/kernel.c.in" >escape/kernel.c
mkdir secret include-secret && echo 'static const char leak[] = "T6300-TOPSECRET";' >secret/secret.h &&
	subst "$ESC/include-secret.c.in" >include-secret/kernel.c
echo '{"results": []}' >forged.json
sha() { sha256sum "$1" | cut -d' ' -f1; }
kernel_h=$(sha home/include/atb/kernel.h)
baseline_c=$(sha task/baseline.c)

test_expect "the escaping candidate is measured (its kernel is honest)" '
	expect_exit_past_box 0 "$ATB" measure --json "$TRASH/task" "$TRASH/escape" &&
	jq -e ".verdict == \"admitted\"" "$TRASH/out" >/dev/null
'

test_expect "the stored result says the sandbox was full" '
	sqlite3 "$ATB_DB" "SELECT stats FROM result ORDER BY id DESC LIMIT 1" >stats &&
	[ -s stats ] && jq -e ".runner.sandbox.level == \"full\" and
		(.runner.sandbox.enforced | index(\"pid_namespace\")) and
		(.runner.sandbox.enforced | index(\"filesystem_view\"))" stats >/dev/null
'

test_expect "the stored result says which process limit held the job, or why none did" '
	jq -e ".runner.sandbox.process_limit.max_tasks == 4096 and
		((.runner.sandbox.process_limit.how | type) == \"string\" and
		 (.runner.sandbox.enforced | index(\"nproc_limit\")) or
		 (.runner.sandbox.process_limit.why | length > 0) and
		 ([.runner.sandbox.not_enforced[] | select(.rule == \"nproc_limit\")] | length == 1))" \
		stats >/dev/null || { jq .runner.sandbox stats; exit 1; }
'

test_expect "no forged row reached the store, and the store file is intact" '
	[ "$(sqlite3 "$ATB_DB" "SELECT count(*) FROM result")" = 1 ] &&
	"$ATB" db check >check 2>&1 && ! grep -q "garbage rows" "$ATB_DB"
'

test_expect "ATB_HOME include/atb/kernel.h and the task are unchanged" '
	[ "$(sha home/include/atb/kernel.h)" = "$kernel_h" ] &&
	[ "$(sha task/baseline.c)" = "$baseline_c" ]
'

test_expect "nothing was written above the scratch folder, to /tmp or /etc" '
	[ ! -e "$TRASH/escape-trash" ] && [ ! -e "/tmp/atb-t6300-escape-$PID" ] &&
	[ ! -e /etc/atb-t6300-escape ] && [ ! -e "$TRASH/escape-parent" ] &&
	[ -z "$(find /tmp -maxdepth 2 -name escape-parent -newer forged.json 2>/dev/null)" ]
'

test_expect "no process the candidate started outlived the job (setsid included)" '
	sleep 0.5 && ! pgrep -f "sleep 63.$PID" >/dev/null
'

test_expect "the loopback listener saw no connection" '
	[ ! -e "$TRASH/connected" ]
'

# A folder the job would be shown (here: named by LD_LIBRARY_PATH) that holds
# the store is refused, whatever names it: the store opened registers it.
test_expect "a store in a folder the job would see is not shown (refused_paths)" '
	mkdir libdir escape2 &&
	ATB_DB=$TRASH/libdir/s.db subst "$ESC/kernel.c.in" >escape2/kernel.c &&
	LD_LIBRARY_PATH=$TRASH/libdir expect_exit_past_box 0 \
		"$ATB" --db "$TRASH/libdir/s.db" measure --json "$TRASH/task" "$TRASH/escape2" &&
	sqlite3 libdir/s.db "SELECT stats FROM result" >stats2 &&
	jq -e --arg d "$TRASH/libdir" ".runner.sandbox.refused_paths | index(\$d)" stats2 >/dev/null &&
	! grep -q "garbage rows" libdir/s.db &&
	ATB_DB=$TRASH/libdir/s.db "$ATB" db check >/dev/null
'

if jq -e ".runner.sandbox.process_limit.how | type == \"string\"" stats >/dev/null 2>&1; then
	test_expect "a fork bomb is held by the process limit and refused as it reaches it" '
		mkdir bomb && cp "$ESC/fork-bomb.c" bomb/kernel.c &&
		ATB_SANDBOX_MAX_TASKS=200 expect_exit 2 "$ATB" measure --json "$TRASH/task" "$TRASH/bomb" \
			--seeds 2 &&
		jq -e ".verdict == \"rejected\" and .gate == \"runner\" and .result_id == null and
			(.reason | test(\"reported .process_limit.: the job reached its process limit \\\\(200 tasks at once, PROTO: sandbox\\\\): [0-9]+ forks? refused\"))" \
			"$TRASH/out" >/dev/null || { cat "$TRASH/out"; exit 1; }
	'
	test_expect "nothing of the bomb is left; the rejection keeps the runner's reason" '
		sleep 0.5 && ! pgrep -x atb-fork-bomb >/dev/null &&
		sqlite3 "$ATB_DB" "SELECT detail FROM rejection WHERE rule = '\''gate:runner'\''" >bd &&
		jq -e ".reason == \"process_limit\"" bd >/dev/null
	'
else
	echo "# skipped the fork bomb: no process limit here ($(jq -r .runner.sandbox.process_limit.why stats))"
fi

test_expect "an #include of a file outside the candidate finds nothing" '
	expect_exit 2 "$ATB" measure --json "$TRASH/task" "$TRASH/include-secret" --seeds 2 &&
	jq -e ".gate == \"build\"" "$TRASH/out" >/dev/null &&
	sqlite3 "$ATB_DB" "SELECT detail FROM rejection WHERE rule = '\''gate:build'\''" >detail &&
	expect_grep "secret/secret.h: No such file or directory" detail &&
	! grep -q T6300-TOPSECRET "$TRASH/out" detail
'

test_done
