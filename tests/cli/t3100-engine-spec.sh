#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# atb engine show / render: the bundled specs load; a bad spec or task is
# refused with file:line:column, field and value and exit 2; settings
# outside a flag's domain are refused; rendering of every kind of flag.
. "$(dirname "$0")/lib.sh"

for e in vllm sglang; do
	test_expect "the $e spec loads and says it was not run here" '
		"$ATB" engine show "$ATB_HOME/engines/'$e'.yaml" >out &&
		expect_grep "written from its documentation, not run here" out &&
		"$ATB" --json engine show "$ATB_HOME/engines/'$e'.yaml" >j &&
		python3 -c "import json,sys; d=json.load(open(\"j\")); assert d[\"engine\"]==\"'$e'\" and len(d[\"flags\"])>=10"
	'
done

cat >v.yaml <<'Y'
kind: engine
name: v
engine: vllm
model: org/m
workload: {requests: 8}
probes: {max_tokens: 8, prompts: [a]}
Y

test_expect "vLLM's ngram speculative config renders as one JSON argument" '
	"$ATB" engine render v.yaml --candidate "num_speculative_tokens=4,prompt_lookup_max=3,enable_prefix_caching=false" --port 9000 >out &&
	expect_grep "--no-enable-prefix-caching" out &&
	expect_grep "{\"method\":\"ngram\",\"num_speculative_tokens\":4,\"prompt_lookup_max\":3}" out &&
	expect_grep "9000" out
'

test_expect "SGLang's NGRAM flags and cuda-graph batch sizes render" '
	sed "s/engine: vllm/engine: sglang/" v.yaml >s.yaml &&
	"$ATB" --json engine render s.yaml --candidate "speculative_algorithm=NGRAM,speculative_num_draft_tokens=8,cuda_graph_bs=1 2 4 8" >j &&
	python3 -c "
import json; a=json.load(open(\"j\"))
i=a.index(\"--cuda-graph-bs\"); assert a[i+1:i+5]==[\"1\",\"2\",\"4\",\"8\"], a
assert a[a.index(\"--speculative-algorithm\")+1]==\"NGRAM\"
assert a[a.index(\"--speculative-num-draft-tokens\")+1]==\"8\""
'

while IFS='|' read -r cand msg; do
	test_expect "setting '$cand' is refused" '
		expect_exit 2 "$ATB" engine render v.yaml --candidate "'"$cand"'" &&
		expect_grep "'"$msg"'" "$TRASH/err"
	'
done <<'CASES'
warp_speed=9|engine 'vllm' has no flag 'warp_speed'
max_num_seqs=7|flag 'max_num_seqs': '7' is not one of its 6 values
gpu_memory_utilization=2|flag 'gpu_memory_utilization': 2 is outside its domain [0.5, 0.95]
enforce_eager=perhaps|flag 'enforce_eager' is a bool: 'perhaps' is not true or false
max_num_seqs|setting 'max_num_seqs' is not name=value
CASES

test_expect "a spec with an unknown key is refused at its line and column" '
	sed "s/^name: vllm/name: vllm\ncolour: red/" "$ATB_HOME/engines/vllm.yaml" >bad.yaml &&
	expect_exit 2 "$ATB" engine show bad.yaml &&
	expect_grep "bad.yaml:7:1: colour: unknown key '"'"'colour'"'"'" "$TRASH/err"
'

test_expect "a flag with a bad type is refused with its field path and value" '
	sed "0,/type: int/s//type: integr/" "$ATB_HOME/engines/vllm.yaml" >bad.yaml &&
	expect_exit 2 "$ATB" engine show bad.yaml &&
	expect_grep "flags[0].type: unknown type '"'"'integr'"'"'" "$TRASH/err"
'

test_expect "a task with a bad workload value is refused with file, line and field" '
	sed "s/workload: {requests: 8}/workload: {requests: 8, arrival: sometimes}/" v.yaml >t.yaml &&
	expect_exit 2 "$ATB" engine show t.yaml &&
	expect_grep "t.yaml:5:" "$TRASH/err" && expect_grep "workload.arrival" "$TRASH/err" &&
	expect_grep "sometimes" "$TRASH/err"
'

test_expect "ab refuses a bad setting or task before the store is created" '
	expect_exit 2 "$ATB" engine ab v.yaml --candidate warp_speed=9 &&
	expect_grep "engine '"'"'vllm'"'"' has no flag '"'"'warp_speed'"'"'" "$TRASH/err" &&
	expect_exit 2 "$ATB" engine ab bad.yaml --candidate max_num_seqs=64 &&
	expect_exit 2 "$ATB" engine ab v.yaml &&
	expect_grep "ab needs --candidate SETTINGS" "$TRASH/err" &&
	test ! -e atb.db && ! ls -d engine-ab.* 2>/dev/null
'

test_expect "show prints a task's pinned CPUs (cpus), or that it is not pinned" '
	"$ATB" engine show "$ATB_HOME/tasks/engine-llamacpp-repeat/engine.yaml" >out &&
	grep -Eq "^  cpus +1$" out &&
	"$ATB" --json engine show "$ATB_HOME/tasks/engine-llamacpp-repeat/engine.yaml" >j &&
	python3 -c "import json; assert json.load(open(\"j\"))[\"cpus\"] == [1]" &&
	"$ATB" engine show v.yaml >out2 &&
	expect_grep "any (not pinned)" out2 &&
	"$ATB" --json engine show v.yaml >j2 &&
	python3 -c "import json; assert json.load(open(\"j2\"))[\"cpus\"] is None"
'

test_expect "render and ab given the name of a spec say so and name a task to give" '
	for sub in render ab; do
		expect_exit 2 "$ATB" engine $sub llamacpp --candidate default &&
		expect_grep "is an engine spec (engines/llamacpp.yaml); $sub takes an engine task" "$TRASH/err" &&
		expect_grep "engine-llamacpp-repeat" "$TRASH/err" || exit 1
	done &&
	test ! -e atb.db
'

test_expect "engine with no subcommand is a usage error; --help documents the gates" '
	expect_exit 2 "$ATB" engine &&
	"$ATB" engine --help >h &&
	for g in engine_start output_equivalence engine_died engine_errors client_lag noise engine_baseline; do
		expect_grep "$g" h || exit 1; done
'

test_done
