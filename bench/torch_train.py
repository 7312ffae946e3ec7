#!/usr/bin/python3
"""PyTorch peer of bench/train_bench.c: the reference model (tests/reference/hyla_ref.py) in
float32 trained with autograd + torch.optim.AdamW + clip_grad_norm_, same model, batch shape and
thread count. Prints one JSON object. usage: torch_train.py MODEL_DIR BATCH SEQ STEPS THREADS"""
import json
import sys
import time

import torch

from torch_peer import load_fp32


def main():
    model_dir, B, T, steps, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    m = load_fp32(model_dir, threads)
    V = m.cfg["vocab_size"]
    P = {k: v.detach().clone().requires_grad_(True) for k, v in m.params().items()}
    decay = [p for p in P.values() if p.dim() >= 2]
    no_decay = [p for p in P.values() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    g = torch.Generator().manual_seed(3)
    times = []
    for s in range(steps + 1):  # step 0 is the warm-up
        seqs = torch.randint(0, V, (B, T), generator=g).tolist()
        t0 = time.perf_counter()
        m.set_params(P)
        opt.zero_grad()
        res = m.batch_loss(seqs)
        res["total"].backward()
        torch.nn.utils.clip_grad_norm_(list(P.values()), 1.0)
        opt.step()
        if s > 0:
            times.append(time.perf_counter() - t0)
    best = min(times)
    print(json.dumps({"engine": "pytorch-reference-fp32", "torch": torch.__version__, "threads": threads, "batch": B,
                      "seq": T, "steps": steps, "best_step_seconds": best, "mean_step_seconds": sum(times) / len(times),
                      "tokens_per_s": B * T / best}))


if __name__ == "__main__":
    main()
