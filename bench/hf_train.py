"""Training peer of bench/train_bench.c: Hugging Face transformers' own modeling code for the
model in MODEL_DIR (Qwen3NextForCausalLM / Qwen3_5MoeForCausalLM from its config.json, the same
safetensors hyla trains) on PyTorch 2, CPU, fp32 or bf16 autocast (fp32 master weights, as hyla's
--act-dtype bf16), with torch.optim.AdamW + clip_grad_norm_; torch.compile when it works on this
CPU. Prints one JSON object.
usage: python hf_train.py MODEL_DIR BATCH SEQ STEPS THREADS f32|bf16 [compile]
Runs with a Python that has torch and transformers (HYLA_HF_PYTHON in bench/train.sh)."""
import json
import sys
import time

import torch
import transformers

from hf_compile import maybe_compile


def main():
    model_dir, B, T, steps, threads, dtype = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]),
                                              int(sys.argv[5]), sys.argv[6])
    want_compile = len(sys.argv) > 7 and sys.argv[7] == "compile"
    torch.set_num_threads(threads)
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.train()
    V = model.config.vocab_size
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    fwd, compiled = maybe_compile(model, want_compile)
    g = torch.Generator().manual_seed(3)
    times = []
    for s in range(steps + 1):  # step 0 is the warm-up (and compilation)
        ids = torch.randint(0, V, (B, T), generator=g)
        t0 = time.perf_counter()
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            out = fwd(input_ids=ids, labels=ids)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if s > 0:
            times.append(time.perf_counter() - t0)
    best = min(times)
    print(json.dumps({"engine": "transformers-" + type(model).__name__, "torch": torch.__version__,
                      "transformers": transformers.__version__, "dtype": dtype, "compiled": compiled,
                      "threads": threads, "batch": B, "seq": T, "steps": steps, "best_step_seconds": best,
                      "tokens_per_s": B * T / best}))


if __name__ == "__main__":
    main()
