#!/usr/bin/python3
"""PyTorch peer of bench/infer_bench.c: the reference model (tests/reference/hyla_ref.py) in
float32 on the same weights and prompt. It has no caches, so "decode" re-runs the forward over
the growing sequence (what the reference can do); prefill is one forward over the prompt.
usage: torch_infer.py MODEL_DIR SEQ DECODE_STEPS THREADS"""
import json
import sys
import time

import torch

from torch_peer import load_fp32


def main():
    model_dir, T, steps, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    m = load_fp32(model_dir, threads)
    V = m.cfg["vocab_size"]
    seq = [(i * 7919 + 13) % V for i in range(T)]
    with torch.no_grad():
        m.forward(seq[:16])
        t0 = time.perf_counter()
        out = m.forward(seq)
        prefill = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(steps):
            seq.append(int(out["logits"][-1].argmax()))
            out = m.forward(seq)
        decode = time.perf_counter() - t0
    print(json.dumps({"engine": "pytorch-reference-fp32 (no cache: decode recomputes the prefix)", "threads": threads,
                      "seq": T, "prefill_tokens_per_s": T / prefill, "decode_steps": steps,
                      "decode_tokens_per_s": steps / decode}))


if __name__ == "__main__":
    main()
