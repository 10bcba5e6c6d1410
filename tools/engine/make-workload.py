#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Write a JSONL prompt set ({"prompt", "output_len"} per line) for the tiny
chain model of make-tiny-gguf.py, for atb's load generator (dataset prompts).

repetitive: each prompt is a segment of the model's greedy cycle
  c[s], c[s+1], ..., c[s+L-1] followed by its own first K characters again;
  greedy decoding then continues with c[s+K], c[s+K+1], ..., which the prompt
  already holds, so prompt-lookup (n-gram) speculation can draft them.
  output_len is at most L - K, so the whole answer is inside the prompt.
random: each prompt is L+K characters drawn uniformly from the model's
  vocabulary; the greedy continuation (a chain segment) is not in it, so
  n-gram lookup finds nothing.

Both kinds have the same prompt and output lengths, so the two workloads cost
the same without speculation.  Deterministic from --seed; the model's --seed
and --vocab must match the GGUF's.

Usage: make-workload.py {repetitive|random} OUT.jsonl [--model-seed N]
       [--vocab N] [--seed N] [--count N] [--len L] [--repeat K] [--output N]
"""
import argparse
import importlib.util
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def load_model_module():
    spec = importlib.util.spec_from_file_location(
        "make_tiny_gguf", os.path.join(HERE, "make-tiny-gguf.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kind", choices=["repetitive", "random"])
    ap.add_argument("out")
    ap.add_argument("--model-seed", type=int, default=1)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--count", type=int, default=16)
    ap.add_argument("--len", type=int, default=48, dest="length")
    ap.add_argument("--repeat", type=int, default=8)
    ap.add_argument("--output", type=int, default=32)
    a = ap.parse_args()
    if a.output > a.length - a.repeat:
        sys.exit("make-workload: --output %d over --len - --repeat = %d: the answer "
                 "would leave the prompt" % (a.output, a.length - a.repeat))
    m = load_model_module()
    n_chars = a.vocab - m.N_SPECIAL - m.N_BYTES
    order = m.chain_order(a.model_seed, n_chars) - m.N_SPECIAL - m.N_BYTES
    rng = np.random.default_rng([a.seed, 2 if a.kind == "random" else 3])

    def text(ids):
        return "".join(chr(m.FIRST_CHAR + int(i)) for i in ids)

    with open(a.out + ".tmp", "w", encoding="utf-8") as f:
        for _ in range(a.count):
            if a.kind == "repetitive":
                s = int(rng.integers(n_chars))
                seg = [order[(s + i) % n_chars] for i in range(a.length)]
                ids = seg + seg[:a.repeat]
            else:
                ids = list(rng.integers(n_chars, size=a.length + a.repeat))
            f.write(json.dumps({"prompt": text(ids), "output_len": a.output},
                               ensure_ascii=False) + "\n")
    os.replace(a.out + ".tmp", a.out)


if __name__ == "__main__":
    main()
