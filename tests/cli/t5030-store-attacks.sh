#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Issue 12, tried as an attacker with write access to the store's folder
# would: a forged ingest is refused at ingest; every edit made with the
# triggers dropped and recreated from their own SQL is found by db check or
# audit verify, naming the row; a truncated tail and a chain rewritten
# consistently in both copies are found by the head and the witness kept
# outside the store's folder.
. "$(dirname "$0")/lib.sh"

"$ATB" protocol verify >/dev/null 2>&1 || skip_all "atb protocol verify fails: no frozen protocol to sync"
command -v sqlite3 >/dev/null || skip_all "the sqlite3 shell is not installed"
command -v python3 >/dev/null || skip_all "python3 is not installed"
FX=$ATB_SOURCE_DIR/tests/fixtures/store
REWRITE="python3 $FX/rewrite-chain.py"
mkdir -p store anchors
W=$TRASH/anchors/witness
export ATB_AUDIT_WITNESS=$W
export ATB_DB=$TRASH/store/base.db
"$ATB" db init >/dev/null &&
	"$ATB" db ingest-json "$FX/ok-kernel.json" >/dev/null &&
	{ "$ATB" db ingest-json "$FX/rejected-cv-over-cap.json" >/dev/null 2>&1; test $? = 2; } &&
	"$ATB" db ingest-json "$FX/anomaly-quarantined.json" >/dev/null &&
	"$ATB" review 2 --reject --reason "identity kernel" --reviewer t >/dev/null &&
	"$ATB" db ingest-json "$FX/ok-engine.json" >/dev/null || exit 1
HEAD=$("$ATB" audit head) || exit 1
# The head's seq: one entry per frozen protocol, then the six above
# (box, ingest, rejection, ingest, review, ingest).
N=${HEAD%%:*}
JOB1=$((N - 4)) REJ=$((N - 3)) PREV=$((N - 1))
unset ATB_AUDIT_WITNESS
cp "$W" witness.base
export ATB_DB=$TRASH/store/a.db

# A fresh copy of the base store (and its witness) for each attack.
fresh() {
	rm -f store/a.db store/a.db-wal store/a.db-shm store/a.db.audit.jsonl
	cp store/base.db store/a.db && cp store/base.db.audit.jsonl store/a.db.audit.jsonl &&
		cp witness.base "$W"
}

# check_finds WHAT...: db check exits 1 and every WHAT is in its output.
check_finds() {
	expect_exit 1 "$ATB" db check || return 1
	for w in "$@"; do expect_grep "$w" "$TRASH/out" || return 1; done
}

test_expect "the base store checks clean, with every entry's rows re-hashed" '
	fresh &&
	expect_exit 0 "$ATB" db check &&
	expect_exit 0 "$ATB" audit verify --witness "$W" --head "$HEAD" &&
	expect_grep "rows of $N entries re-hashed; head $N matches; $N witness lines match" "$TRASH/out"
'

test_expect "audit head prints SEQ:HASH of the last entry" '
	fresh &&
	test "$HEAD" = "$N:$(sqlite3 store/a.db "SELECT hash FROM audit WHERE seq = $N")" &&
	expect_exit 0 "$ATB" audit head --json &&
	expect_grep "\"seq\": $N" "$TRASH/out"
'

test_expect "a forged ingest (per-seed ratios 1.5, speedup 9.5) is refused at ingest" '
	fresh &&
	python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
for s in d[\"seeds\"]:
    s[\"baseline_median\"] = 1000.5; s[\"candidate_median\"] = 667.0; s[\"ratio\"] = 1.5
d[\"speedup\"] = 9.5; d[\"ci_low\"] = 9.0; d[\"ci_high\"] = 9.9; d[\"cv\"] = 0.0
for x in d[\"samples\"]:
    x[\"value\"] = 1000.0 + x[\"trial\"] if x[\"arm\"] == \"baseline\" else 666.5 + x[\"trial\"]
json.dump(d, open(\"forged.json\", \"w\"))
" "$FX/ok-kernel.json" &&
	jobs=$(sqlite3 store/a.db "SELECT count(*) FROM job") &&
	expect_exit 2 "$ATB" db ingest-json forged.json &&
	expect_grep "atb-rule:not_derived: the speedup is not the geometric mean of the per-seed ratios" "$TRASH/err" &&
	test "$(sqlite3 store/a.db "SELECT count(*) FROM job")" = "$jobs" &&
	test "$(sqlite3 store/a.db "SELECT count(*) FROM result WHERE speedup = 9.5")" = 0 &&
	test "$(sqlite3 store/a.db "SELECT rule FROM rejection ORDER BY id DESC LIMIT 1")" = store:not_derived
'

test_expect "a forged median or ratio is refused at ingest" '
	fresh &&
	python3 -c "
import json, sys
d = json.load(open(sys.argv[1])); d[\"seeds\"][3][\"ratio\"] *= 1.01
json.dump(d, open(\"ratio.json\", \"w\"))
d = json.load(open(sys.argv[1])); d[\"seeds\"][0][\"candidate_median\"] *= 0.5
json.dump(d, open(\"median.json\", \"w\"))
" "$FX/ok-kernel.json" &&
	expect_exit 2 "$ATB" db ingest-json ratio.json &&
	expect_grep "atb-rule:not_derived: the per-seed ratio does not follow" "$TRASH/err" &&
	expect_exit 2 "$ATB" db ingest-json median.json &&
	expect_grep "atb-rule:not_derived: the candidate median is not the median" "$TRASH/err"
'

test_expect "a forged interval on honest samples is refused at ingest by the judge" '
	fresh &&
	python3 -c "
import json, sys
d = json.load(open(sys.argv[1])); d[\"ci_low\"] = d[\"speedup\"] * 0.999
json.dump(d, open(\"interval.json\", \"w\"))
d = json.load(open(sys.argv[1]))
for k in (\"seeds\", \"speedup\", \"ci_low\", \"ci_high\", \"cv\"): del d[k]
json.dump(d, open(\"samples.json\", \"w\"))
" "$FX/ok-kernel.json" &&
	jobs=$(sqlite3 store/a.db "SELECT count(*) FROM job") &&
	expect_exit 2 "$ATB" db ingest-json interval.json &&
	expect_grep "atb-rule:not_derived: the interval [" "$TRASH/err" &&
	expect_grep "the bootstrap of its samples" "$TRASH/err" &&
	test "$(sqlite3 store/a.db "SELECT count(*) FROM job")" = "$jobs" &&
	test "$(sqlite3 store/a.db "SELECT rule FROM rejection ORDER BY id DESC LIMIT 1")" = gate:derived &&
	expect_exit 0 "$ATB" db ingest-json samples.json &&
	expect_grep "admitted, speedup 1.5x over 10 paired seeds" "$TRASH/out" &&
	expect_exit 0 "$ATB" db check
'

# PROTO: stats.resolution_rel (version 10 on): the interval is the bootstrap's
# widened by (1 + r) each side; a result claiming the bootstrap's own, narrower
# interval claims a confidence its protocol does not give.
test_expect "an interval without the protocol resolution is refused at ingest" '
	fresh &&
	r=$("$ATB" protocol show --json | python3 -c "import json,sys; print(json.load(sys.stdin)[\"protocol\"][\"stats\"][\"resolution_rel\"])") &&
	test "$r" = 0.002 &&
	python3 -c "
import json, sys
d = json.load(open(sys.argv[1])); d[\"ci_low\"] *= 1.002; d[\"ci_high\"] /= 1.002
json.dump(d, open(\"narrow.json\", \"w\"))
" "$FX/ok-kernel.json" &&
	expect_exit 2 "$ATB" db ingest-json narrow.json &&
	expect_grep "atb-rule:not_derived: the interval [" "$TRASH/err" &&
	test "$(sqlite3 store/a.db "SELECT rule FROM rejection ORDER BY id DESC LIMIT 1")" = gate:derived
'

test_expect "an interval narrowed to the bootstrap interval in the store is found" '
	fresh &&
	$REWRITE store/a.db "UPDATE result SET ci_low = ci_low * 1.002, ci_high = ci_high / 1.002 WHERE id = 1" &&
	check_finds "atb-rule:not_derived: result 1: interval [" "job 1: its rows differ"
'

test_expect "a changed interval is found" '
	fresh &&
	$REWRITE store/a.db "UPDATE result SET ci_low = 1.0 WHERE id = 1" &&
	check_finds "job 1: its rows differ from the hash this ingest entry recorded"
'

test_expect "halved candidate samples are found (medians re-derived, rows re-hashed)" '
	fresh &&
	$REWRITE store/a.db "UPDATE sample SET value = value / 2 WHERE job = 1 AND arm = '"'"'candidate'"'"'" &&
	check_finds "atb-rule:not_derived: result 1 seed 1: candidate median" \
		"job 1: its rows differ"
'

test_expect "a consistent 2x rewrite of samples, medians, ratios, speedup and interval is found" '
	fresh &&
	$REWRITE store/a.db "UPDATE sample SET value = value / 2 WHERE job = 1 AND arm = '"'"'candidate'"'"';
		UPDATE seed_result SET candidate_median = candidate_median / 2, ratio = ratio * 2 WHERE job = 1;
		UPDATE result SET speedup = speedup * 2, ci_low = ci_low * 2, ci_high = ci_high * 2 WHERE id = 1" &&
	expect_exit 1 "$ATB" db check &&
	expect_grep "job 1: its rows differ" "$TRASH/out" &&
	! grep -q not_derived "$TRASH/out"
'

test_expect "a renamed task is found" '
	fresh &&
	$REWRITE store/a.db "UPDATE job SET task = '"'"'softmax'"'"' WHERE id = 1" &&
	check_finds "job 1: its rows differ" &&
	expect_exit 1 "$ATB" audit verify &&
	expect_grep "audit entry $JOB1 (store): job 1: its rows differ" "$TRASH/err"
'

test_expect "edited stats are found" '
	fresh &&
	$REWRITE store/a.db "UPDATE result SET stats = '"'"'{\"method\":\"measured\"}'"'"' WHERE id = 1" &&
	check_finds "job 1: its rows differ"
'

test_expect "an edited rejection is found" '
	fresh &&
	$REWRITE store/a.db "UPDATE rejection SET reason = '"'"'fine'"'"', rule = '"'"'gate:none'"'"'" &&
	check_finds "rejection 1: its rows differ from the hash this rejection entry recorded"
'

test_expect "a deleted rejection is found" '
	fresh &&
	$REWRITE store/a.db "DELETE FROM rejection" &&
	check_finds "rejection 1: its rows differ"
'

test_expect "an edited review is found" '
	fresh &&
	$REWRITE store/a.db "UPDATE review SET decision = '"'"'admit'"'"'" &&
	check_finds "review 1: its rows differ"
'

test_expect "a deleted result with its tail entry, in both copies, is found" '
	fresh &&
	$REWRITE store/a.db "DELETE FROM result WHERE id = 3; DELETE FROM seed_result WHERE job = 3" --truncate $PREV &&
	check_finds "audit chain (store): job " "has no audit entry" &&
	expect_exit 1 "$ATB" audit verify --witness "$W" &&
	expect_grep "the chain ends at entry $PREV but the witness saw entry $N (truncated)" "$TRASH/err"
'

test_expect "a whole job deleted with its tail entry in both copies: only the anchors find it" '
	fresh &&
	$REWRITE store/a.db "DELETE FROM result WHERE id = 3; DELETE FROM seed_result WHERE job = 3;
		DELETE FROM sample WHERE job = 3; DELETE FROM job WHERE id = 3" --truncate $PREV &&
	expect_exit 0 "$ATB" audit verify &&
	expect_exit 1 "$ATB" audit verify --head "$HEAD" &&
	expect_grep "the chain ends at entry $PREV, before the published head $N (truncated)" "$TRASH/err" &&
	expect_exit 1 "$ATB" audit verify --witness "$W" &&
	expect_grep "witness saw entry $N (truncated)" "$TRASH/err" &&
	ATB_AUDIT_WITNESS=$W expect_exit 1 "$ATB" db check &&
	expect_grep "truncated" "$TRASH/out"
'

test_expect "the last audit row deleted from the store while its job stays is found" '
	fresh &&
	$REWRITE store/a.db "DELETE FROM audit WHERE seq = $N" &&
	check_finds "audit entry $N (db): entry missing from the store though its subject is there"
'

test_expect "a chain rewritten consistently in both copies passes alone, fails the head and the witness" '
	fresh &&
	$REWRITE store/a.db "UPDATE rejection SET reason = '"'"'fine'"'"'" \
		--sub "atb-rule:cv_over_cap: the cross-run cv is over the protocol'"'"'s stats.cv_cap" fine --rechain &&
	expect_exit 0 "$ATB" db check &&
	expect_exit 1 "$ATB" audit verify --witness "$W" &&
	expect_grep "audit entry $REJ (witness): hash " "$TRASH/err" &&
	expect_grep "(the chain was rewritten)" "$TRASH/err" &&
	expect_exit 1 "$ATB" audit verify --head "$HEAD" &&
	expect_grep "audit entry $N (db): hash " "$TRASH/err" &&
	expect_grep "is not the published head $N:" "$TRASH/err"
'

test_expect "a box inserted by SQL is found" '
	fresh &&
	$REWRITE store/a.db "INSERT INTO box VALUES (printf('"'"'%064d'"'"', 7), '"'"'{}'"'"', '"'"'now'"'"')" &&
	check_finds "box '"'"'0000000000000000000000000000000000000000000000000000000000000007'"'"' has no audit entry"
'

test_expect "a box capability inserted by SQL is found" '
	fresh &&
	$REWRITE store/a.db "INSERT INTO box_capability (fingerprint, kind, value, method, measured_at)
		SELECT fingerprint, '"'"'cpu_mem_bw_bytes_per_s'"'"', 1e15, '"'"'x'"'"', '"'"'now'"'"' FROM box" &&
	check_finds "box capability '"'"'1'"'"' has no audit entry"
'

# An iteration of a run (on the fixtures' box) naming a result measured on
# another box B that no resume of the run allowed (schema 4: only a
# 'suite.resume' or 'calibrate.resume' entry of the run naming B with
# other_box true does).  The run is inserted by SQL, as its trigger allows.
B=$(printf 'b%.0s' $(seq 64))
iteration_on_b() {
	echo "INSERT INTO iteration (run, k, knobs, outcome, usable, job_uuid, result, speedup, ci_low,
		ci_high, reason, wall_s, created) SELECT 'r1', 0, '{}', 'usable', 1, j.uuid, x.id,
		x.speedup, x.ci_low, x.ci_high, '', 1.0, 'now' FROM result x JOIN job j ON j.id = x.job
		WHERE x.box_fingerprint = '$B'"
}
test_expect "an iteration whose result is on a box its run never allowed: refused, found when forced in" '
	fresh &&
	jq --arg b "$B" ".box_fingerprint = \$b | .box_description = {cpu: \"other\"}" \
		"$FX/ok-kernel.json" >on-b.json &&
	"$ATB" db ingest-json on-b.json >/dev/null &&
	sqlite3 store/a.db "INSERT INTO run (id, task, proposer, seed, iterations, paired_seeds, naive,
		protocol_digest, box_fingerprint, created) SELECT '"'"'r1'"'"', '"'"'relu'"'"',
		'"'"'suite'"'"', 0, 2, 5, 0, protocol_digest, box_fingerprint, '"'"'now'"'"'
		FROM job WHERE id = 1" &&
	! sqlite3 store/a.db "$(iteration_on_b)" 2>"$TRASH/err" &&
	expect_grep "atb-rule:malformed: the iteration'"'"'s result is on a box its run was neither started on nor resumed on with --allow-other-box" "$TRASH/err" &&
	test "$(sqlite3 store/a.db "SELECT count(*) FROM iteration")" = 0 &&
	$REWRITE store/a.db "$(iteration_on_b)" &&
	check_finds "iteration 0 of run r1: its result is on box bbbbbbbbbbbb, which its run was neither started on nor resumed on with --allow-other-box"
'

test_expect "a witness in the store's folder is refused" '
	fresh &&
	expect_exit 2 "$ATB" audit verify --witness store/w &&
	expect_grep "is in the store'"'"'s folder" "$TRASH/err" &&
	ATB_AUDIT_WITNESS=$TRASH/store/w expect_exit 2 "$ATB" db ingest-json "$FX/ok-kernel.json" &&
	test ! -e store/w
'

test_expect "a deleted witness is found" '
	fresh &&
	expect_exit 1 "$ATB" audit verify --witness anchors/gone &&
	expect_grep "witness '"'"'anchors/gone'"'"' does not exist" "$TRASH/err"
'

test_expect "a malformed head is refused" '
	fresh &&
	expect_exit 2 "$ATB" audit verify --head 11:abc &&
	expect_grep "is not SEQ:HASH" "$TRASH/err"
'

test_done
