#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# atb run --proposer llm-code: the model writes the kernel itself.  The model
# here is a TEST DOUBLE (tests/cli/llm-double.py), scripted call by call with
# content only a script can guarantee:
#   iteration 0   call 1: a known-good relu (a fenced ```c kernel.c block)
#                 -> built, correct, measured
#   iteration 1   calls 2-5: a path traversal, an absolute path, a folder, a
#                 file off the surface -> refused, nothing written anywhere,
#                 the iteration unusable ("proposal")
#   iteration 2   call 6: the relu cheat (returns X unchanged; JSON reply)
#                 -> built, refused by the correctness gate
# Then 'atb run --replay' with the double stopped reproduces every proposal
# (the candidate files' SHA-256) from the recorded calls; a request the run
# did not record is an error naming it.  Timing verdicts on this loaded box
# may be refused by a box gate (noise, baseline_drift, clock): the built and
# correct steps and the hashes are asserted strictly, the timing outcome as
# usable or a box refusal.
. "$(dirname "$0")/lib.sh"
command -v jq >/dev/null || skip_all "jq not installed"
command -v python3 >/dev/null || skip_all "python3 not installed"
command -v sqlite3 >/dev/null || skip_all "sqlite3 not installed"

cp -r "$ATB_SOURCE_DIR/tests/fixtures/task/relu-steady" relu
python3 - <<'PY'
import json
good = r'''#define _POSIX_C_SOURCE 199309L
#include <math.h>
#include <stdint.h>
#include <time.h>

#include "atb/kernel.h"

/* a known-good relu-steady candidate: fmaxf inside the task's 1 ms wait */
static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int atb_kernel(const struct atb_kernel_args *args)
{
	const float *X = args->buffers[0];
	float *Y = args->buffers[1];
	int64_t N = args->ints[0], i, start = now_ns();

	if (args->nbuffers != 2 || args->nints != 1)
		return 1;
	for (i = 0; i < N; i++)
		Y[i] = fmaxf(X[i], 0.0f);
	while (now_ns() - start < 1000000)
		;
	return 0;
}
'''
cheat = good.replace("fmaxf(X[i], 0.0f)", "X[i]").replace("#include <math.h>\n", "")
script = [
    {"content": "Here is a faster kernel.\n\n```c kernel.c\n" + good + "```\n"},
    {"content": json.dumps({"files": {"../../evil.c": "int x;\n"}})},
    {"content": json.dumps({"files": {"/tmp/atb-t5107-evil.c": "int x;\n"}})},
    {"content": json.dumps({"files": {"sub/kernel.c": "int x;\n"}})},
    {"content": json.dumps({"files": {"kernel.c": good, "evil.c": "int x;\n"}})},
    {"content": json.dumps({"files": {"kernel.c": cheat}})},
]
json.dump(script, open("script.json", "w"))
open("good.c", "w").write(good)
open("cheat.c", "w").write(cheat)
PY
llm_double
BUILT='.outcome != "surface" and .outcome != "static" and .outcome != "build"'
CORRECT='.outcome != "correctness" and .outcome != "runner" and .outcome != "input_mutation" and .outcome != "result_reuse"'
TIMED='.outcome == "usable" or .outcome == "noise" or .outcome == "baseline_drift" or .outcome == "clock"'
iters() { sqlite3 -cmd ".timeout 10000" -json atb.db "SELECT k, knobs, outcome, reason FROM iteration WHERE run = '$1' ORDER BY k"; }

test_expect "the model's code is written into the candidate folder only and measured" '
	"$ATB" run ./relu --proposer llm-code --model double --base-url "$URL" \
		--iterations 3 --seed 3 --no-naive --quiet --json >run.json &&
	RUN=$(jq -r .run run.json) && echo "$RUN" >run_id &&
	iters "$RUN" >it.json && cat it.json &&
	jq -e "length == 3" it.json &&
	C=runs/$RUN/iter-0/candidate && cmp good.c "$C/kernel.c" && test "$(ls -A "$C")" = kernel.c &&
	jq -e ".[0] | ($BUILT) and ($CORRECT) and ($TIMED)" it.json &&
	jq -e ".[0].knobs | fromjson | .files[\"kernel.c\"]" it.json | grep -q "$(sha256sum good.c | cut -c1-64)" &&
	jq -e ".[2].outcome == \"correctness\"" it.json && cmp cheat.c "runs/$RUN/iter-2/candidate/kernel.c"
'

test_expect "a traversal, an absolute path, a folder, a file off the surface: refused, nothing written" '
	RUN=$(cat run_id) && iters "$RUN" >it.json &&
	jq -e ".[1].outcome == \"proposal\" and .[1].knobs == \"{}\"" it.json &&
	jq -r ".[1].reason" it.json | grep -q "evil.c" &&
	test ! -e /tmp/atb-t5107-evil.c && test -z "$(find "$TRASH" -name evil.c | head -1)" &&
	test "$(ls -A runs/$RUN/iter-1/candidate)" = kernel.c &&
	cmp relu/tunable.c runs/$RUN/iter-1/candidate/kernel.c &&
	test -z "$(find runs -name ".atb-reply-*")"
'

test_expect "the prompts: the template digest, the reference, the surface and ABI, the history" '
	jq -s -e "length == 6" d.log &&
	jq -r .body d.log | sed -n 1p >b1.json &&
	jq -r ".messages[0].content" b1.json | head -1 |
		grep -q "^atb prompt template llm-code-kernel-1 sha256:$(sha256sum "$ATB_SOURCE_DIR/tasks/prompts/llm-code-kernel-1.txt" | cut -c1-64)$" &&
	jq -r ".messages[1].content" b1.json >p1 &&
	expect_grep "Surface (the only files a candidate may hold): kernel.c" p1 &&
	expect_grep "struct atb_kernel_args {" p1 &&
	expect_grep "relu-steady honest baseline" p1 &&
	expect_grep "(none yet)" p1 &&
	jq -e ".response_format.json_schema.schema.properties.files.required == [\"kernel.c\"]" b1.json &&
	jq -r .body d.log | sed -n 2p | jq -r ".messages[1].content" >p2 &&
	expect_grep "  0: kernel.c $(sha256sum good.c | cut -c1-12) -> " p2 &&
	expect_grep "The previous candidate (iteration 0), kernel.c:" p2 &&
	jq -r .body d.log | sed -n 6p | jq -r ".messages[1].content" >p6 &&
	expect_grep "  1: (no candidate) -> proposal (" p6 &&
	! grep -q "The previous candidate" p6 &&
	"$ATB" llm show "$(cat run_id)" --json | jq -e ".calls == 6 and .ok == 6 and (.halted | not)" &&
	"$ATB" audit verify >/dev/null && "$ATB" llm check >/dev/null
'

test_expect "replay without any server reproduces every proposal byte for byte" '
	RUN=$(cat run_id) && kill $DOUBLE && wait $DOUBLE 2>/dev/null; n=$(wc -l <d.log) &&
	"$ATB" run --replay "$RUN" --quiet --json >rep.json &&
	REP=$(jq -r .run rep.json) && echo "$REP" >rep_id &&
	jq -e ".replay_of == \"$RUN\" and .done == 3" rep.json &&
	iters "$RUN" | jq -c "[.[] | .knobs]" >k1 && iters "$REP" | jq -c "[.[] | .knobs]" >k2 &&
	cmp k1 k2 &&
	for k in 0 1 2; do cmp "runs/$RUN/iter-$k/candidate/kernel.c" "runs/$REP/iter-$k/candidate/kernel.c" || exit 1; done &&
	iters "$REP" >ir.json &&
	jq -e ".[0] | ($BUILT) and ($CORRECT) and ($TIMED)" ir.json &&
	jq -e ".[1].outcome == \"proposal\" and .[2].outcome == \"correctness\"" ir.json &&
	test "$(sqlite3 atb.db "SELECT count(*) FROM llm_call WHERE run = '\''$REP'\'' AND transport = '\''replay'\''")" = 6 &&
	test "$(wc -l <d.log)" = "$n" &&
	"$ATB" audit verify >/dev/null && "$ATB" llm check >/dev/null
'

test_expect "a request the run did not record is an error naming it; a random run has nothing to replay" '
	RUN=$(cat run_id) &&
	echo "/* the reference changed: the prompt is other bytes */" >>relu/baseline.c &&
	expect_exit 2 "$ATB" run --replay "$RUN" --quiet &&
	expect_grep "was not recorded in run '\''$RUN'\''" "$TRASH/err" &&
	grep -q "request [0-9a-f]\{16\}" "$TRASH/err" &&
	expect_exit 2 "$ATB" run --replay nosuchrun --quiet &&
	expect_exit 2 "$ATB" run --replay "$RUN" --proposer llm &&
	expect_grep "takes no TASK" "$TRASH/err"
'

test_done
