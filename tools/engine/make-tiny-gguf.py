#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Write a tiny, deterministic llama-architecture GGUF for the real-engine tests.

The model is constructed, not trained.  Its vocabulary is 3 control tokens
(<unk> <s> </s>), the 256 SentencePiece byte tokens and N single CJK
characters (U+4E00 on), so any text of those characters tokenizes one
character to one token with no merges.  Token embeddings are seeded random
vectors; the transformer blocks have small weights, so the residual stream
still carries the input token's embedding after them; the output matrix
maps the embedding of token t onto the logit of perm(t), where perm is a
seeded permutation of the CJK tokens with one cycle through all of them.
Greedy decoding therefore continues any prompt with t, perm(t), perm^2(t),
... from its last token t: a prompt that already holds that chain lets
prompt-lookup (n-gram) speculation predict the continuation; a prompt of
random characters gives it nothing to find.  The blocks still cost their
full compute per token (several layers, hidden size a few hundred), so
per-token work dominates HTTP overhead.

Does not: train anything, download anything, or write any text workload
(tools/engine/make-workload.py does).  Same seed and sizes -> same bytes.

Usage: make-tiny-gguf.py OUT.gguf [--seed N] [--vocab N] [--dim N]
       [--layers N] [--ffn N] [--heads N] [--ctx N] [--print-chain K]
"""
import argparse
import sys

import numpy as np

try:
    import gguf
except ImportError:  # pragma: no cover - reported, not hidden
    sys.exit("make-tiny-gguf: the 'gguf' package is not installed "
             "(run scripts/install-engine-deps.sh)")

N_SPECIAL = 3          # <unk>=0 <s>=1 </s>=2
N_BYTES = 256          # <0x00>..<0xFF>
FIRST_CHAR = 0x4E00    # CJK unified ideographs: one character, one token
BLOCK_SCALE = 0.02     # keeps the blocks' contribution to the residual small
OUTPUT_SCALE = 0.5     # margin of the greedy choice in logits


def chain_order(seed, n):
    """The CJK token ids in cycle order: perm(order[i]) = order[i+1 mod n]."""
    rng = np.random.default_rng([seed, 1])
    return rng.permutation(n) + N_SPECIAL + N_BYTES


def build(args):
    n_chars = args.vocab - N_SPECIAL - N_BYTES
    if n_chars < 16:
        sys.exit("make-tiny-gguf: --vocab %d too small: need at least %d"
                 % (args.vocab, N_SPECIAL + N_BYTES + 16))
    if args.dim % args.heads:
        sys.exit("make-tiny-gguf: --dim %d is not a multiple of --heads %d"
                 % (args.dim, args.heads))
    rng = np.random.default_rng([args.seed, 0])
    d, v, ff = args.dim, args.vocab, args.ffn

    tokens = ["<unk>", "<s>", "</s>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    tokens += ["<0x%02X>" % b for b in range(N_BYTES)]
    types += [gguf.TokenType.BYTE] * N_BYTES
    tokens += [chr(FIRST_CHAR + i) for i in range(n_chars)]
    types += [gguf.TokenType.NORMAL] * n_chars
    scores = [0.0] * v

    w = gguf.GGUFWriter(args.out, "llama")
    w.add_name("atb-tiny-chain-s%d" % args.seed)
    w.add_context_length(args.ctx)
    w.add_embedding_length(d)
    w.add_block_count(args.layers)
    w.add_feed_forward_length(ff)
    w.add_head_count(args.heads)
    w.add_head_count_kv(args.heads)
    w.add_rope_dimension_count(d // args.heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(v)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(False)

    # Unit-RMS embeddings: after the final RMS norm the residual is ~emb[t].
    emb = rng.standard_normal((v, d)).astype(np.float32)
    emb /= np.sqrt((emb ** 2).mean(axis=1, keepdims=True))
    w.add_tensor("token_embd.weight", emb.astype(np.float16))

    def small(rows, cols):
        return (rng.standard_normal((rows, cols)) * (BLOCK_SCALE / np.sqrt(cols))
                ).astype(np.float16)

    ones = np.ones(d, dtype=np.float32)
    for i in range(args.layers):
        p = "blk.%d." % i
        w.add_tensor(p + "attn_norm.weight", ones)
        w.add_tensor(p + "attn_q.weight", small(d, d))
        w.add_tensor(p + "attn_k.weight", small(d, d))
        w.add_tensor(p + "attn_v.weight", small(d, d))
        w.add_tensor(p + "attn_output.weight", small(d, d))
        w.add_tensor(p + "ffn_norm.weight", ones)
        w.add_tensor(p + "ffn_gate.weight", small(ff, d))
        w.add_tensor(p + "ffn_up.weight", small(ff, d))
        w.add_tensor(p + "ffn_down.weight", small(d, ff))
    w.add_tensor("output_norm.weight", ones)

    # logit[perm(t)] = OUTPUT_SCALE * d for input t; any other logit is a
    # random projection of about OUTPUT_SCALE * sqrt(d): a wide margin.
    order = chain_order(args.seed, n_chars)
    out = np.zeros((v, d), dtype=np.float32)
    out[np.roll(order, -1)] = emb[order] * OUTPUT_SCALE
    w.add_tensor("output.weight", out.astype(np.float16))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=768)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--print-chain", type=int, metavar="K", default=0,
                    help="print the first K characters of the greedy cycle and exit")
    args = ap.parse_args()
    if args.print_chain:
        order = chain_order(args.seed, args.vocab - N_SPECIAL - N_BYTES)
        sys.stdout.write("".join(chr(FIRST_CHAR + int(t) - N_SPECIAL - N_BYTES)
                                 for t in order[:args.print_chain]) + "\n")
        return
    build(args)


if __name__ == "__main__":
    main()
