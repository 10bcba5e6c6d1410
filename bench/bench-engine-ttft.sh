#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Agreement of atb's TTFT with the server-side time to first token, on the
# REAL engine (llama.cpp's llama-server, scripts/install-engine-deps.sh) and
# the tiny chain model (tools/engine/make-tiny-gguf.py).
#
# The server is started by hand on loopback with one slot; `atb loadgen`
# sends one streamed request at a time (closed loop, concurrency 1, so no
# request waits in the server's queue) with prompt lengths drawn from
# uniform:LO:HI tokens, and writes every request's record.  llama-server
# logs, for each request in order, "prompt eval time = X ms": the time from
# the start of prompt processing to the logits of the first token, i.e. its
# own time to first token without the HTTP, parsing and tokenizing around
# it.  --no-keepalive: llama-server drops reused connections, so every
# request opens its own.  Requests are matched by order (warm-up requests dropped from both).
# Printed: per request the client TTFT (first token chunk - send), the
# server's prompt eval time, their difference and ratio; then the median,
# p90 and max of the difference and the median ratio.  No absolute time is a
# claim: the difference is the client-plus-HTTP overhead on this box, the
# ratio says how much of atb's TTFT the server accounts for.
#
# Usage: bench/bench-engine-ttft.sh [ATB] [REQUESTS] [LO:HI]
set -euo pipefail
cd "$(dirname "$0")/.."
ATB=${1:-${ATB:-build/release/atb}}
N=${2:-40}
LEN=${3:-8:256}
. tools/engine/env.sh
if [ -n "$ENGINE_MISSING" ]; then
	echo "bench-engine-ttft: not measured: $ENGINE_MISSING"
	exit 0
fi
[ -x "$ATB" ] || { echo "bench-engine-ttft: no atb binary at $ATB" >&2; exit 2; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/atb-ttft.XXXXXX")
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

"$ENGINE_PY" tools/engine/make-tiny-gguf.py "$tmp/tiny.gguf"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$LLAMA_SERVER" --model "$tmp/tiny.gguf" --host 127.0.0.1 --port "$port" --parallel 1 \
	--threads 2 --no-cache-prompt >"$tmp/server.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do
	curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
	sleep 0.1
done
curl -sf "http://127.0.0.1:$port/health" >/dev/null ||
	{ echo "bench-engine-ttft: server not ready" >&2; tail "$tmp/server.log" >&2; exit 3; }

WARM=3
"$ATB" loadgen --url "http://127.0.0.1:$port" --seed 1 --requests "$N" --warmup "$WARM" \
	--concurrency 1 --prompts synthetic --input-len "uniform:$LEN" --output-len 4 \
	--no-keepalive --records "$tmp/records.jsonl" --json >"$tmp/summary.json"
kill "$pid"; wait "$pid" 2>/dev/null || true; pid=

python3 - "$tmp/records.jsonl" "$tmp/server.log" "$WARM" <<'EOF'
import json, re, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
recs.sort(key=lambda r: r["index"])
server = [(float(m.group(1)), int(m.group(2))) for m in
          re.finditer(r"prompt eval time =\s*([0-9.]+) ms /\s*(\d+) tokens", open(sys.argv[2]).read())]
warm = int(sys.argv[3])
# a request that failed before reaching the server (connection reset) has no
# server line: match the successful records in order, checking token counts
ok = [r for r in recs if r["failure"] == "ok" and r["first_token_ns"] >= 0]
if len(ok) != len(server):
    sys.exit("bench-engine-ttft: %d successful records but %d server timings" % (len(ok), len(server)))
rows, mismatched = [], 0
for r, (s, n) in zip(ok, server):
    if r["warmup"]:
        continue
    if r["tokens_in"] != n:
        mismatched += 1
        continue
    c = (r["first_token_ns"] - r["sent_ns"]) / 1e6
    rows.append((r["tokens_in"], c, s, c - s, s / c))
print("failed requests (not matched): %d; token-count mismatches: %d"
      % (len(recs) - len(ok), mismatched))
print("%8s %12s %12s %10s %8s" % ("tok_in", "atb_ttft_ms", "server_ms", "diff_ms", "ratio"))
for t, c, s, d, q in rows:
    print("%8d %12.3f %12.3f %10.3f %8.4f" % (t, c, s, d, q))
d = sorted(x[3] for x in rows)
q = [x[4] for x in rows]
def pct(v, p):
    return v[min(len(v) - 1, int(round(p * (len(v) - 1))))]
print("requests %d  diff_ms median %.3f p90 %.3f max %.3f  ratio(server/atb) median %.4f min %.4f"
      % (len(rows), statistics.median(d), pct(d, 0.9), d[-1], statistics.median(q), min(q)))
EOF
