#!/usr/bin/python3
"""The PyTorch peer of bench/forward_bench.c: the reference model (tests/reference/hyla_ref.py)
in float32 on the same weights and tokens, same thread count. Prints one JSON object.
usage: torch_forward.py MODEL_DIR SEQ REPS THREADS"""
import json
import sys
import time

import torch

from torch_peer import load_fp32


def main():
    model_dir, T, reps, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    m = load_fp32(model_dir, threads)
    V = m.cfg["vocab_size"]
    tokens = [(i * 7919 + 13) % V for i in range(T)]
    with torch.no_grad():
        out = m.forward(tokens)  # warm-up
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            out = m.forward(tokens)
            times.append(time.perf_counter() - t0)
    best = min(times)
    print(json.dumps({"engine": "pytorch-reference-fp32", "torch": torch.__version__, "threads": threads, "seq": T,
                      "reps": reps, "best_seconds": best, "mean_seconds": sum(times) / len(times),
                      "tokens_per_s": T / best, "loss": out["ce_loss"]}))


if __name__ == "__main__":
    main()
