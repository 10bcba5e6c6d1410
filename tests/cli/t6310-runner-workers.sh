#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Arm workers (runner/worker.c, issue 11): with options.isolation "process"
# ($ATB_ISOLATION=process for atb measure) each cpu arm runs in a process of
# its own, so no candidate code shares the runner's address space.  The
# clock cheat that rewrites atb-runner's GOT (relu/clock), which reads 2x on
# the runner's own clock in process, then changes nothing the runner reads:
# its trials read as long as the baseline's.  What a worker could use
# against the runner is refused (relu/worker-escape): signals to it, a new
# process, its /proc/PID/mem, its event channel and its environ, and
# (relu/worker-sched) another process's priority, class, CPU or limits.  A
# crashing kernel still ends the job by its signal, and no worker outlives
# the runner.
. "$(dirname "$0")/lib.sh"

CHEATS=$ATB_SOURCE_DIR/tests/fixtures/cheats
RUNNER=$ATB_BUILD_DIR/atb-runner
[ -x "$RUNNER" ] || skip_all "no atb-runner"
command -v cc >/dev/null || skip_all "no C compiler"
command -v jq >/dev/null || skip_all "jq not installed"
export ATB_DB=$TRASH/m.db

build() {  # build OUT.so SOURCE...
	local out=$1; shift
	cc -shared -fPIC -O2 -I"$ATB_SOURCE_DIR/include" -o "$out" "$@"
}
job() {  # job BASE.so CAND.so ISOLATION
	jq -c --arg b "$PWD/$1" --arg c "$PWD/$2" --arg i "$3" \
		".arms[0].so=\$b | .arms[1].so=\$c | .options.isolation=\$i" \
		"$ATB_SOURCE_DIR/tests/fixtures/runner/relu-job.json"
}
# candidate / baseline of seed 1's medians
ratio() {
	jq -s "[.[] | select(.event==\"samples\" and .seed==1)] | map({(.arm): .median_ns}) | add
		| .candidate / .baseline" "$1"
}

test_expect "each arm runs in a worker of its own, gone when the runner is" '
	build spin.so "$CHEATS/tasks/relu-spin/baseline.c" &&
	job spin.so spin.so process | "$RUNNER" >h.ev &&
	jq -se "map(select(.event==\"env\"))[0] | .isolation == \"process\" and .pinned" h.ev \
		>/dev/null &&
	jq -se "map(select(.event==\"workers\"))[0].pids | length == 2" h.ev >/dev/null &&
	jq -se "map(select(.event==\"done\")) | length == 1" h.ev >/dev/null &&
	for p in $(jq -r "select(.event==\"workers\") | .pids[]" h.ev); do
		for i in $(seq 1 50); do
			[ "$(ps -o stat= -p "$p" 2>/dev/null | cut -c1)" = T ] || break
			sleep 0.1
		done
		[ "$(ps -o stat= -p "$p" 2>/dev/null | cut -c1)" != T ] ||
			{ echo "worker $p still there, stopped"; exit 1; }
	done
'

test_expect "a bad isolation is refused as a bad job" '
	job spin.so spin.so sometimes | expect_exit 2 "$RUNNER" &&
	jq -se "map(select(.event==\"error\"))[0] | .reason == \"bad_job\" and
		(.message | contains(\"bad '\''options.isolation'\'': expected \\\"process\\\" or \\\"none\\\"\"))" \
		"$TRASH/out" >/dev/null || { cat "$TRASH/out"; exit 1; }
'

# PROTO: timing.round_trip (version 12) -- one more worker, which loads
# nothing, answers an empty call through the arms' path after every round,
# timed as an arm's trial; with subtract a low quantile of them is taken out
# of every trial: each arm's median is then the raw one (the timing core's
# median_ns) less that figure.
test_expect "the round trip is timed by a worker of its own and taken out of the trials" '
	job spin.so spin.so process |
		jq -c ".options.round_trip = {\"every_rounds\": 1, \"subtract\": true, \"quantile\": 0.1}" |
		"$RUNNER" >rt.ev &&
	jq -se "map(select(.event==\"workers\"))[0].pids | length == 3" rt.ev >/dev/null &&
	jq -se "map(select(.event==\"env\"))[0].round_trip ==
		{\"every_rounds\": 1, \"subtract\": true, \"quantile\": 0.1, \"position\": \"after\"}" \
		rt.ev >/dev/null &&
	jq -se "[.[] | select(.event==\"samples\")] | all(.round_trip.slots | all(. == 2))" rt.ev \
		>/dev/null &&
	jq -se "[.[] | select(.event==\"samples\")] | length > 0 and all(
		.round_trip.median_ns > 1000 and .round_trip.calls == .rounds and .round_trip.subtracted
		and .round_trip.quantile == 0.1 and .round_trip.quantile_ns <= .round_trip.median_ns
		and .round_trip.subtracted_ns == (.round_trip.quantile_ns | round)
		and (.times_ns | sort | (if length % 2 == 1 then .[length / 2 | floor]
			else (.[length / 2 - 1] + .[length / 2]) / 2 end)) as \$m
		| ((\$m - (.median_ns - .round_trip.subtracted_ns)) | fabs) <= 1
		and (.times_ns | min) >= 1)" rt.ev >/dev/null || { jq -c "select(.event==\"samples\")
			| {arm, median_ns, round_trip, rounds}" rt.ev; exit 1; }
'

# PROTO: timing.round_trip.position (after_reference, version 13 on) -- each
# round's empty call comes right after the reference arm's call (the
# baseline's position in the round, plus one), never after the candidate's;
# the env says where.
test_expect "the round trip comes right after the reference arm's call" '
	job spin.so spin.so process |
		jq -c ".options.round_trip = {\"every_rounds\": 1, \"subtract\": true, \"quantile\": 0.5,
			\"position\": \"after_reference\"}" |
		"$RUNNER" >ref.ev &&
	jq -se "map(select(.event==\"env\"))[0].round_trip.position == \"after_reference\"" ref.ev \
		>/dev/null &&
	jq -se "[.[] | select(.event==\"samples\")] | length > 0 and (group_by(.seed) | all(
		(map(select(.arm==\"baseline\"))[0]) as \$b | \$b.round_trip.slots as \$s |
		(\$s | length) == (\$b.position | length) and (\$s | length) > 0 and
		([range(0; \$s | length)] | all(\$s[.] == \$b.position[.] + 1))))" ref.ev >/dev/null &&
	jq -s "[.[] | select(.event==\"samples\") | .round_trip.slots[]] | unique" ref.ev |
		jq -e ". == [1, 2]" >/dev/null ||
		{ jq -c "select(.event==\"samples\") | {arm, seed, position, round_trip}" ref.ev; exit 1; }
'

# PROTO: timing.round_trip.position (keyed, version 13 on) -- each round's
# empty call goes where the job's placement key puts it: before the first
# arm (0), between the arms (1) or after both (2), the values of
# hmac.new(key, b"atb-placement" + struct.pack("<QQQ", seed, round,
# 0x10000), "sha256") mod 3 (python3's hmac); with the median taken out,
# each group says how many of an arm's trials it left at 1 ns.
test_expect "the round trip's place in each round is drawn under the job's key" '
	job spin.so spin.so process |
		jq -c ".options.round_trip = {\"every_rounds\": 1, \"subtract\": true, \"quantile\": 0.5,
			\"position\": \"keyed\"} | .timing.placement = \"keyed\"
			| .timing.placement_key = \"000102030405060708090a0b0c0d0e0f\"" |
		"$RUNNER" >key.ev &&
	jq -se "map(select(.event==\"env\"))[0].round_trip.position == \"keyed\"" key.ev >/dev/null &&
	jq -c "select(.event==\"samples\" and .arm==\"candidate\") | [.seed, .round_trip.slots]" \
		key.ev >slots &&
	[ -s slots ] &&
	python3 -c "
import hmac, json, struct, sys
k = bytes(range(16))
for line in open(\"slots\"):
    seed, slots = json.loads(line)
    want = [(lambda md: (((md[0] & 15) << 13) | ((md[1] | md[2] << 8) & 8191)) % 3)(
        hmac.new(k, b\"atb-placement\" + struct.pack(\"<QQQ\", seed, r, 0x10000), \"sha256\").digest())
        for r in range(len(slots))]
    if slots != want:
        sys.exit(\"seed %d: slots %s, want %s\" % (seed, slots, want))
" &&
	jq -s "[.[] | select(.event==\"samples\") | .round_trip.slots[]] | unique" key.ev | jq -e ". == [0, 1, 2]" \
		>/dev/null &&
	jq -se "[.[] | select(.event==\"samples\")] | length > 0 and all(.round_trip.quantile == 0.5
		and .round_trip.under == (.times_ns | map(select(. == 1)) | length))" key.ev >/dev/null ||
		{ jq -c "select(.event==\"samples\") | {arm, seed, round_trip}" key.ev; exit 1; }
'

# relu/rt-burst armed a timerfd with 200 epoll waiters before each reply:
# it expired while its worker was stopped, in interrupt context on the
# runner's CPU, inside the next window -- the round trip's empty call when
# the candidate was last in its round -- and the subtracted round trip grew
# with it (19.5-39.8x against the honest 18.3-23.2x, session 26).  A worker
# may arm no timer.
test_expect "a worker cannot arm a timer to fire while it is stopped (relu/rt-burst)" '
	build base.so "$CHEATS/tasks/relu-slowbase/baseline.c" &&
	build burst.so "$CHEATS/relu/rt-burst/kernel.c" &&
	job base.so burst.so process |
		jq -c ".options.round_trip = {\"every_rounds\": 1, \"subtract\": true, \"quantile\": 0.1}" |
		"$RUNNER" >burst.ev 2>burst.err &&
	expect_grep "rt-burst: timerfd_create: Operation not permitted" burst.err &&
	jq -se "map(select(.event==\"done\")) | length == 1" burst.ev >/dev/null
'

test_expect "a round trip without workers, or a bad one, is refused as a bad job" '
	job spin.so spin.so none |
		jq -c ".options.round_trip = {\"every_rounds\": 1, \"subtract\": true, \"quantile\": 0.1}" |
		expect_exit 2 "$RUNNER" &&
	jq -se "map(select(.event==\"error\"))[0] | .reason == \"bad_job\" and
		.message == \"options.round_trip: bad '\''options.round_trip'\'': only with options.isolation \\\"process\\\"\"" \
		"$TRASH/out" >/dev/null &&
	job spin.so spin.so process |
		jq -c ".options.round_trip = {\"every_rounds\": 1, \"subtract\": true, \"quantile\": 0.9}" |
		expect_exit 2 "$RUNNER" &&
	jq -se "map(select(.event==\"error\"))[0] | .reason == \"bad_job\" and
		.message == \"options.round_trip: bad '\''options.round_trip'\'': expected {\\\"every_rounds\\\": 1 to 1000, \\\"subtract\\\": true or false, \\\"quantile\\\": above 0, at most 0.5, optionally \\\"position\\\": \\\"after\\\", \\\"after_reference\\\" or \\\"keyed\\\"}\"" \
		"$TRASH/out" >/dev/null &&
	job spin.so spin.so process |
		jq -c ".options.round_trip = {\"every_rounds\": 1, \"subtract\": true, \"quantile\": 0.5,
			\"position\": \"first\"}" |
		expect_exit 2 "$RUNNER" &&
	jq -se "map(select(.event==\"error\"))[0] | .reason == \"bad_job\" and
		(.message | endswith(\"optionally \\\"position\\\": \\\"after\\\", \\\"after_reference\\\" or \\\"keyed\\\"}\"))" \
		"$TRASH/out" >/dev/null
'

# In process the cheat reads about half (t6010, caught there by the clock
# gate); in a worker it rewrites only its own process's GOT.
test_expect "the clock cheat changes nothing the runner reads from a worker" '
	build clk.so "$CHEATS/relu/clock/kernel.c" &&
	job spin.so clk.so none | "$RUNNER" >in.ev &&
	job spin.so clk.so process | "$RUNNER" >out.ev &&
	r_in=$(ratio in.ev) && r_out=$(ratio out.ev) &&
	echo "# in process $r_in, in a worker $r_out" &&
	jq -ne "$r_in < 0.7 and $r_out > 0.95 and $r_out < 1.05" >/dev/null
'

test_expect "a worker cannot signal the runner, fork, open its memory, events or environ, or arm a timer" '
	build esc.so "$CHEATS/relu/honest-spin/kernel.c" "$CHEATS/relu/worker-escape/escape.c" &&
	job spin.so esc.so process | "$RUNNER" >esc.ev 2>esc.err &&
	cat esc.err &&
	expect_grep "worker-escape: kill=" esc.err &&
	expect_grep " timerfd=Operation not permitted timer=Operation not permitted itimer=Operation not permitted alarm=Operation not permitted" esc.err &&
	! grep -q "=open" esc.err &&
	jq -se "map(select(.event==\"done\")) | length == 1" esc.ev >/dev/null
'

# A worker runs only inside its own trials, but a priority, class, CPU or
# limit it set on another process would stay: the baseline's worker at nice
# 19 or SCHED_IDLE waits for the CPU on a loaded box.  Every such call on
# another pid (or a group, or the user) is refused; on itself it works.
test_expect "a worker cannot change another process's priority, class, CPU or limits" '
	build sch.so "$CHEATS/relu/honest-spin/kernel.c" "$CHEATS/relu/worker-sched/sched.c" &&
	job spin.so sch.so process | "$RUNNER" >sch.ev 2>sch.err &&
	cat sch.err &&
	expect_grep "worker-sched: others=2 " sch.err &&
	n=$(grep -o "=Operation not permitted" sch.err | wc -l) && [ "$n" -eq 7 ] &&
	expect_grep " own=done" sch.err &&
	jq -se "map(select(.event==\"done\")) | length == 1" sch.ev >/dev/null
'

# Under AddressSanitizer the worker's SEGV handler would turn the signal into
# exit 1 (worker_exited); handle_segv=0 leaves it a signal, as in a normal build.
test_expect "a kernel that crashes in its worker ends the runner by its signal" '
	build crash.so "$CHEATS/relu/crash/kernel.c" &&
	{ job spin.so crash.so process |
		ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_segv=0 "$RUNNER" >crash.ev 2>/dev/null
		rc=$?; } ;
	echo "# exit $rc" && [ "$rc" -gt 128 ]
'

# timing.preemption run_delay reads the timer's own thread's waits; the
# arms' threads are the workers', so it is not applied and the env says so.
test_expect "preemption subtraction is not applied with workers, and the env says why" '
	job spin.so spin.so process | jq -c ".timing.preemption = \"run_delay\"" | "$RUNNER" >p.ev &&
	jq -se "map(select(.event==\"env\"))[0].preemption == \"not with arm workers: the waits of the arms'\'' threads, in other processes, are not read\"" \
		p.ev >/dev/null || { grep "\"env\"" p.ev; exit 1; } &&
	jq -se "[.[] | select(.event==\"samples\") | .preempted_ns // 0] | all(. == 0)" p.ev >/dev/null
'

# A kernel that ends its process: the worker's end is the job's error.
test_expect "a kernel that exits in its worker is the error worker_exited" '
	printf "%s\n" "#include <unistd.h>" "#include \"atb/kernel.h\"" \
		"int atb_kernel(const struct atb_kernel_args *a) { (void)a; _exit(3); }" >quit.c &&
	build quit.so quit.c &&
	job spin.so quit.so process | expect_exit 3 "$RUNNER" &&
	jq -se "map(select(.event==\"error\"))[0] | .reason == \"worker_exited\" and
		.message == \"the worker of arm '\''candidate'\'' exited with status 3\"" \
		"$TRASH/out" >/dev/null || { cat "$TRASH/out"; exit 1; }
'

test_expect "atb measure with ATB_ISOLATION=process: the honest template is admitted" '
	ATB_ISOLATION=process expect_exit_past_box 0 "$ATB" measure --json \
		"$CHEATS/tasks/relu-spin" "$CHEATS/relu/honest-spin" &&
	jq -e ".verdict == \"admitted\"" "$TRASH/out" >/dev/null
'

test_expect "atb measure with ATB_ISOLATION=process: the clock cheat is no faster" '
	ATB_ISOLATION=process "$ATB" measure --json --seeds 4 "$CHEATS/tasks/relu-spin" \
		"$CHEATS/relu/clock" >clk.out 2>clk.err
	jq -e "(.speedup == null or .speedup < 1.1)" clk.out >/dev/null ||
		{ cat clk.out clk.err; exit 1; }
'

# PROTO: timing.round_trip.max_share_under (version 13 on) -- a relu over
# 16 elements takes tens of ns, the round trip tens of us with a spread of
# us: the median taken out leaves about half of each arm's trials at 1 ns.
# That is not resolved: re-run, then refused noise, never a speedup read
# through the round trip nor a physical-floor refusal.  Where an arm's call
# costs more over the empty call than the round trip's spread (under ASan:
# about 8.5 us, session 27) the calls are resolved instead, and then no
# group may be over the rule: each group's Wilson 95% lower bound of its
# share under, from the runner's own events, must be at most 25%.
test_expect "a kernel shorter than the round trip's spread is refused noise, not measured" '
	mkdir -p tiny && cp "$CHEATS/tasks/relu-tiny/baseline.c" tiny/kernel.c &&
	ATB_ISOLATION=process ATB_RUNNER_EVENTS_LOG=$TRASH/tiny.ev "$ATB" measure --json --seeds 2 \
		"$CHEATS/tasks/relu-tiny" tiny >tiny.out 2>tiny.err
	if jq -e ".gate == \"noise\" and (.reason | test(\"round trip\"))" tiny.out >/dev/null; then
		jq -e ".verdict == \"rejected\" and .attempts == 3 and (.reason | test(
		\"^the round trip.s subtraction \\\\([0-9]+ ns\\\\) left [0-9]+ of the (baseline|candidate|baseline_alone).s [0-9]+ trials on seed [0-9]+ \\\\([0-9.]+%, at least [0-9.]+% at 95%\\\\) at or under 0 ns \\\\(at most 25%\\\\) in job (1|2, baseline alone) after 3 runs: the calls are not resolved against the workers. round trip \\\\(they are shorter than its spread; measure larger inputs\\\\)$\"))" \
			tiny.out >/dev/null || { cat tiny.out tiny.err; exit 1; }
		[ "$(sqlite3 "$ATB_DB" "SELECT json_extract(detail, '\''$.cause'\'') FROM rejection
			ORDER BY id DESC LIMIT 1")" = round_trip_unresolved ] || exit 1
	else
		echo "# resolved here: $(jq -c "{verdict, gate, candidate_median_ns}" tiny.out)"
		jq -e ".gate != \"physical_floor\"" tiny.out >/dev/null &&
		jq -c "select(.event == \"samples\" and .round_trip != null and .arm != \"naive\")
			| [.round_trip.under, .trials]" tiny.ev | tail -4 | python3 -c "
import json, math, sys
for line in sys.stdin:
    k, n = json.loads(line)
    z = 1.959963984540054
    p = k / n
    lo = (p + z * z / (2 * n) - z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))) / (1 + z * z / n)
    if lo > 0.25:
        sys.exit(\"a group over the rule in the last runner: %d of %d under\" % (k, n))
" || { cat tiny.out; exit 1; }
	fi &&
	"$ATB" db check >/dev/null && "$ATB" audit verify >/dev/null
'

test_expect "a bad ATB_ISOLATION is refused" '
	ATB_ISOLATION=maybe expect_exit 2 "$ATB" measure --json "$CHEATS/tasks/relu-spin" \
		"$CHEATS/relu/honest-spin" &&
	expect_grep "bad ATB_ISOLATION '\''maybe'\'': expected process or none" "$TRASH/err"
'

test_done
