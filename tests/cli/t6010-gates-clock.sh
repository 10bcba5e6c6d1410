#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Gate clock: the runner's clock checked from outside its address space.
# atb-runner is linked with full RELRO and bind-now (the floor); a planted
# cheat that makes its GOT slot for clock_gettime writable again and points
# it at a clock that loses half of every candidate call (honest work at
# the template's speed, admitted at about 2x without the gate) is refused
# `clock` with both spans in the reason; the honest template still passes.
# The cheat's lag is about 26 ms a paired group of 160 ms on relu-spin:
# summed over 2 seeds it is 51 ms against 1% + 25 ms (28 ms), over 3 and
# more it grows by 26 ms a seed against 8 ms, so noise cannot save it.
# PROTO: gates.clock.rel_tolerance, gates.clock.abs_slack_ms.
. "$(dirname "$0")/lib.sh"

CHEATS=$ATB_SOURCE_DIR/tests/fixtures/cheats
RUNNER=$ATB_BUILD_DIR/atb-runner
[ -x "$RUNNER" ] || skip_all "no atb-runner"
command -v cc >/dev/null || skip_all "no C compiler"
command -v jq >/dev/null || skip_all "jq not installed"
export ATB_DB=$TRASH/m.db
# The gate, for arms that share the runner (cuda, torch, a cpu job with
# isolation none): from an arm's worker (protocol v11's default for cpu) the
# cheat rewrites only its own process's GOT and reads no faster (t6310).
export ATB_ISOLATION=none

if command -v readelf >/dev/null; then
	test_expect "atb-runner is linked with full RELRO and bind-now" '
		readelf -d "$RUNNER" >dyn && readelf -lW "$RUNNER" >seg &&
		grep -Eq "\(FLAGS\).*BIND_NOW|\(FLAGS_1\).*NOW" dyn &&
		expect_grep GNU_RELRO seg
	'
else
	echo "# skipped the RELRO check: no readelf"
fi

test_expect "the runner marks each timed group and reports its span" '
	cc -shared -fPIC -O2 -I"$ATB_SOURCE_DIR/include" -o ref.so \
		"$ATB_SOURCE_DIR/tests/fixtures/runner/relu_ref.c" &&
	jq -c --arg b "$PWD/ref.so" ".arms[0].so=\$b | .arms[1].so=\$b" \
		"$ATB_SOURCE_DIR/tests/fixtures/runner/relu-job.json" | "$RUNNER" >a.ev &&
	n=$(jq -s "map(select(.event==\"timed_begin\")) | length" a.ev) && [ "$n" -ge 1 ] &&
	jq -se "[.[] | select(.event==\"samples\")] | all(.span_ns >= .seed_elapsed_ns)" a.ev \
		>/dev/null &&
	jq -se "[.[] | select(.event==\"samples\" or .event==\"timed_begin\") | .event]
		| .[0] == \"timed_begin\"" a.ev >/dev/null
'

# The harness answers each timed_begin with one byte once it has stamped it;
# the runner starts the group's span on that byte, so the harness's span
# holds the runner's even when the harness is late (a harness busy storing
# events read the marker 73 ms late in CI and an honest job was refused).
# Here a harness of the test's own waits 0.4 s before answering: each
# runner span must then be at least 0.3 s shorter than the harness's.
cat >slowharness.py <<'PY'
import json, socket, subprocess, sys, time
a, b = socket.socketpair()
p = subprocess.Popen([sys.argv[1]], stdin=b, stdout=b)
b.close()
a.sendall(open(sys.argv[2], "rb").read().rstrip(b"\n") + b"\n")
buf, mark, groups = b"", None, []
while True:
    d = a.recv(65536)
    if not d:
        break
    now = time.monotonic_ns()
    buf += d
    while b"\n" in buf:
        line, buf = buf.split(b"\n", 1)
        ev = json.loads(line)
        if ev["event"] == "timed_begin":
            mark = now
            time.sleep(0.4)
            a.sendall(b"\n")
        elif ev["event"] == "samples" and mark is not None:
            groups.append((ev["span_ns"], now - mark))
            mark = None
        elif ev["event"] == "done":
            a.shutdown(socket.SHUT_WR)
p.wait()
print(json.dumps(groups))
sys.exit(p.returncode)
PY
test_expect "the runner starts a group's span on the harness's answer to timed_begin" '
	cc -shared -fPIC -O2 -I"$ATB_SOURCE_DIR/include" -o ref1.so \
		"$ATB_SOURCE_DIR/tests/fixtures/runner/relu_ref.c" &&
	jq -c --arg b "$PWD/ref1.so" ".arms[0].so=\$b | .arms[1].so=\$b" \
		"$ATB_SOURCE_DIR/tests/fixtures/runner/relu-job.json" >slow.json &&
	python3 slowharness.py "$RUNNER" slow.json >spans.json &&
	echo "# runner, harness spans: $(cat spans.json)" &&
	jq -e "length >= 1 and all(.[0] <= .[1] - 300000000)" spans.json >/dev/null
'

# The runner stays after "done" until the harness closes its end (so the
# harness's /proc reading of the last group is of a live process; at most
# 10 s), and only then: a runner that failed exits at once.  Its stdin is a
# fifo this script holds open (fd 3), so it never ends by itself.  The
# failed one must be gone within 8 s (it takes milliseconds; lingering
# would be 10 s); the good one must be alive as its done arrives (looked
# at every 0.1 s) and gone once fd 3 is closed.
wait_gone() {  # wait_gone PID TENTHS: 0 when PID exited within TENTHS/10 s
	local i
	for ((i = 0; i < $2; i++)); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
	return 1
}
test_expect "after done the runner waits for the channel to close; a failed one does not" '
	jq -c --arg b "$PWD/ref.so" ".arms[0].so=\$b | .arms[1].so=\$b" \
		"$ATB_SOURCE_DIR/tests/fixtures/runner/relu-job.json" >good.json &&
	jq -c ".arms[1].so=\"$PWD/no-such.so\"" good.json >bad.json &&
	mkfifo in.fifo && exec 3<>in.fifo &&
	cat bad.json >&3 && { "$RUNNER" <in.fifo >bad.ev 2>/dev/null & pid=$!; } &&
	wait_gone $pid 80 && { wait $pid; echo "failed runner: exit $?"; } &&
	jq -se "map(select(.event==\"error\")) | length >= 1" bad.ev >/dev/null &&
	cat good.json >&3 && { "$RUNNER" <in.fifo >good.ev 2>/dev/null & pid=$!; } &&
	for i in $(seq 1 600); do grep -q "\"event\": *\"done\"" good.ev && break; sleep 0.1; done &&
	kill -0 $pid && exec 3>&- && wait_gone $pid 300 && wait $pid
'

# Without the gate the cheat would pass as 2x: on the runner's own clock
# its calls read half the baseline's (the same relu and 1 ms busy wait).
test_expect "the planted cheat works: on the runner's clock its trials read half" '
	cc -shared -fPIC -O2 -I"$ATB_SOURCE_DIR/include" -o spin.so \
		"$CHEATS/tasks/relu-spin/baseline.c" &&
	cc -shared -fPIC -O2 -I"$ATB_SOURCE_DIR/include" -o clk.so "$CHEATS/relu/clock/kernel.c" &&
	jq -c --arg b "$PWD/spin.so" --arg c "$PWD/clk.so" ".arms[0].so=\$b | .arms[1].so=\$c" \
		"$ATB_SOURCE_DIR/tests/fixtures/runner/relu-job.json" | "$RUNNER" >clk.ev &&
	jq -se "[.[] | select(.event==\"samples\" and .seed==1)] | map({(.arm): .median_ns}) | add
		| .candidate < 0.7 * .baseline" clk.ev >/dev/null
'

test_expect "clock: a candidate that forges the runner's clock_gettime is refused" '
	expect_exit 2 "$ATB" measure --json "$CHEATS/tasks/relu-spin" "$CHEATS/relu/clock" --seeds 4 &&
	jq -e ".verdict == \"rejected\" and .gate == \"clock\" and (.rejection_id > 0)
		and (.reason | test(\"[0-9.]+ ms by the runner.s clock and [0-9.]+ ms by the harness.s\"))" \
		"$TRASH/out" >/dev/null || { cat "$TRASH/out" "$TRASH/err"; exit 1; }
	sqlite3 "$ATB_DB" "SELECT detail FROM rejection WHERE rule = '\''gate:clock'\''" |
		jq -e ".runner_span_ns < .harness_span_ns and .rel_tolerance == 0.01" >/dev/null
'

test_expect "the honest template passes the clock gate" '
	expect_exit_past_box 0 "$ATB" measure --json "$CHEATS/tasks/relu-spin" "$CHEATS/relu/honest-spin" &&
	jq -e ".verdict == \"admitted\"" "$TRASH/out" >/dev/null
'

test_expect "the refusal is audited and the chain verifies" '
	"$ATB" audit verify >/dev/null
'

test_done
