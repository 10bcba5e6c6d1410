#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# atb-runner's paired timing on real processes: reproducible randomized pair
# order per seed, trials.min / trials.max / time budget stopping, the
# baseline_alone arm timed by itself, raw samples out.
# PROTO: timing.interleave, timing.trials, timing.stopping, timing.warmup,
# timing.cache_flush.
. "$(dirname "$0")/lib.sh"

RUNNER=${ATB_RUNNER:-$ATB_BUILD_DIR/atb-runner}
FIX=$ATB_SOURCE_DIR/tests/fixtures/runner
[ -x "$RUNNER" ] || skip_all "no atb-runner at $RUNNER"
command -v jq >/dev/null || skip_all "jq not installed"
command -v cc >/dev/null || skip_all "no C compiler"

for f in relu_ref relu_good; do
	cc -shared -fPIC -O2 -I"$ATB_SOURCE_DIR/include" -o "$f.so" "$FIX/$f.c" ||
		skip_all "cannot build fixture $f"
done

# run OUT FILTER: the honest relu job, correctness trimmed to one set, changed by FILTER.
run() {
	jq -c --arg b "$PWD/relu_ref.so" --arg c "$PWD/relu_good.so" \
		".arms[0].so=\$b | .arms[1].so=\$c | .sets=[.sets[0]] | .correctness.distributions=[] | $2" \
		"$FIX/relu-job.json" | "$RUNNER" >"$1" 2>"$1.err"
}

# ev_check FILE SELECT TEST: some event matches SELECT, and every one that does passes TEST.
ev_check() {
	jq -se "[.[] | select($2)] | length > 0 and all($3)" "$1" >/dev/null ||
		{ echo "no event in $1 with ($2) satisfies ($3):"; jq -c "select($2)" "$1" | head -5; return 1; }
}

ORDER='select(.event=="samples") | [.seed, .arm, .round, .position]'

test_expect "the pair order is the same for the same seed" '
	run a.ev ".timing.trials_min=20 | .timing.trials_max=20" &&
	run b.ev ".timing.trials_min=20 | .timing.trials_max=20" &&
	diff <(jq -c "$ORDER" a.ev) <(jq -c "$ORDER" b.ev)
'

test_expect "each round runs both arms once, in opposite positions" '
	jq -se "[.[] | select(.event==\"samples\" and .seed==1)] as \$s
		| (\$s|length)==2 and (\$s[0].round==\$s[1].round)
		and ([\$s[0].position, \$s[1].position] | transpose | all(.[0]+.[1]==1))" a.ev
'

test_expect "the order is randomized: both orders occur, and seeds differ" '
	jq -se "[.[] | select(.event==\"samples\" and .seed==1 and .arm==\"baseline\")][0].position
		| (index(0) != null) and (index(1) != null)" a.ev &&
	[ "$(jq -c "select(.event==\"samples\" and .seed==1 and .arm==\"baseline\") | .position" a.ev)" != \
	  "$(jq -c "select(.event==\"samples\" and .seed==2 and .arm==\"baseline\") | .position" a.ev)" ]
'

test_expect "trials.max bounds the rounds when the target is out of reach" '
	run max.ev ".timing.trials_min=5 | .timing.trials_max=7 | .timing.target_rel_halfwidth=1e-12" &&
	ev_check max.ev ".event==\"samples\"" ".trials==7 and .stop==\"trials_max\" and (.times_ns|length)==7"
'

test_expect "a met target stops at trials.min, never before" '
	run min.ev ".timing.trials_min=12 | .timing.trials_max=50 | .timing.target_rel_halfwidth=100" &&
	ev_check min.ev ".event==\"samples\"" ".trials==12 and .stop==\"target\""
'

test_expect "the per-seed time budget stops a seed" '
	run budget.ev ".timing.trials_min=100000 | .timing.trials_max=100000 | .timing.max_time_per_seed_s=0.05 | .seeds=[1]" &&
	ev_check budget.ev ".event==\"samples\"" ".stop==\"time_budget\" and .trials<100000 and .seed_elapsed_ns>=50000000"
'

test_expect "warm-up runs at least its minimum iterations and time" '
	run warm.ev ".timing.warmup_min_iterations=7 | .timing.warmup_min_time_ms=5 | .seeds=[1]" &&
	ev_check warm.ev ".event==\"samples\"" ".warmup_iterations>=7 and .warmup_ns>=5000000"
'

test_expect "baseline_alone is timed by itself, after the pairs" '
	jq -c --arg b "$PWD/relu_ref.so" --arg c "$PWD/relu_good.so" \
		".arms=[{name:\"baseline\",so:\$b},{name:\"candidate\",so:\$c},{name:\"baseline_alone\",so:\$b}]
		 | .sets=[.sets[0]] | .correctness.distributions=[] | .seeds=[4]" \
		"$FIX/relu-job.json" | "$RUNNER" >alone.ev &&
	ev_check alone.ev ".event==\"samples\" and .arm==\"baseline_alone\"" ".group==\"alone\" and .paired_with==[] and all(.position[]; .==0)" &&
	ev_check alone.ev ".event==\"samples\" and .arm==\"candidate\"" ".group==\"paired\" and .paired_with==[\"baseline\"]" &&
	[ "$(jq -s "map(select(.event==\"correctness\")) | length" alone.ev)" = 1 ]
'

test_expect "raw samples are positive nanoseconds and the flush is on" '
	ev_check a.ev ".event==\"samples\"" "all(.times_ns[]; . > 0)" &&
	ev_check a.ev ".event==\"env\"" ".flush_enabled==true and .flush_bytes==262144"
'

# PROTO: timing.cache_flush.cpu_max_bytes (version 6 on): a box whose
# largest cache is 1 GiB (a VM showing its host's L3) flushes the bound.
test_expect "a cpu timer flushes at most cache_flush_cpu_max_bytes" '
	run cap.ev ".cache_bytes=1073741824 | .timing.cache_flush_cpu_max_bytes=524288 | .seeds=[1]" &&
	ev_check cap.ev ".event==\"env\"" ".flush_enabled==true and .flush_bytes==524288" &&
	run nocap.ev ".cache_bytes=1048576 | .seeds=[1]" &&
	ev_check nocap.ev ".event==\"env\"" ".flush_bytes==2097152"
'

test_expect "cache flush off: no flush buffer" '
	run noflush.ev ".timing.cache_flush=false | .seeds=[1]" &&
	ev_check noflush.ev ".event==\"env\"" ".flush_enabled==false and .flush_bytes==0"
'

test_expect "skip_timing runs correctness only" '
	run skip.ev ".options={skip_timing:true}" &&
	ev_check skip.ev ".event==\"done\"" ".timing==\"skipped\"" &&
	! grep -q "\"event\":\"samples\"" skip.ev
'

test_expect "skip_correctness times without checking: no correctness event, samples out" '
	run nocheck.ev ".options={skip_correctness:true} | .seeds=[1]" &&
	ev_check nocheck.ev ".event==\"done\"" ".timing==\"done\" and .correctness_events==0" &&
	! grep -q "\"event\":\"correctness\"" nocheck.ev &&
	grep -q "\"event\":\"samples\"" nocheck.ev
'

test_expect "skip_correctness that is not a boolean is refused, naming the field" '
	! run badnc.ev ".options={skip_correctness:\"yes\"}" &&
	grep -q "skip_correctness" badnc.ev badnc.ev.err
'

test_done
