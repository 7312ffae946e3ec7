#!/usr/bin/python3
"""The PyTorch peer of bench/forward_bench.c: the reference model (tests/reference/hyla_ref.py)
in float32 on the same weights and tokens, same thread count. Prints one JSON object.
usage: torch_forward.py MODEL_DIR SEQ REPS THREADS"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import torch  # noqa: E402

import hyla_ref  # noqa: E402


def main():
    model_dir, T, reps, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(threads)
    hyla_ref.DT = torch.float32
    torch.set_default_dtype(torch.float32)
    m = hyla_ref.HylaRef(model_dir, check_delta=False, dtype=torch.float32)
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
