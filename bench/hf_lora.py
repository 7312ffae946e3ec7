"""LoRA peer of bench/lora_bench.c: transformers' own model for MODEL_DIR on PyTorch 2 (CPU, fp32) with a
PEFT LoRA adapter of rank RANK on every linear layer (target_modules="all-linear", alpha = 2 RANK, no
dropout), the base frozen, torch.optim.AdamW on the adapter; the best of STEPS timed steps after a
warm-up. Prints one JSON object. DTYPE bf16: the frozen base loaded in bfloat16 (PEFT keeps the adapter
fp32: autocast_adapter_dtype), hyla's lora-bf16base peer.
usage: python hf_lora.py MODEL_DIR BATCH SEQ STEPS THREADS RANK [DTYPE=f32|bf16]
Runs with a Python that has torch, transformers and peft (bench/hf_peer.sh makes one)."""
import json
import sys
import time

import peft
import torch
import transformers


def main():
    model_dir, B, T, steps, threads, r = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]),
                                          int(sys.argv[5]), int(sys.argv[6]))
    dtype = sys.argv[7] if len(sys.argv) > 7 else "f32"
    if dtype not in ("f32", "bf16"):
        sys.exit(f"hf_lora.py: DTYPE {dtype!r}: must be f32 or bf16")
    torch.set_num_threads(threads)
    base = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.bfloat16 if dtype == "bf16" else torch.float32)
    model = peft.get_peft_model(base, peft.LoraConfig(r=r, lora_alpha=2 * r, lora_dropout=0.0,
                                                      target_modules="all-linear"))
    model.train()
    V = base.config.get_text_config().vocab_size
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    g = torch.Generator().manual_seed(3)
    times = []
    for s in range(steps + 1):  # step 0 is the warm-up
        ids = torch.randint(0, V, (B, T), generator=g)
        t0 = time.perf_counter()
        opt.zero_grad()
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step()
        if s > 0:
            times.append(time.perf_counter() - t0)
    best = min(times)
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(json.dumps({"engine": "transformers+peft-" + type(base).__name__, "torch": torch.__version__,
                      "transformers": transformers.__version__, "peft": peft.__version__, "rank": r, "base_dtype": dtype,
                      "trained_params": trained, "threads": threads, "batch": B, "seq": T, "steps": steps,
                      "best_step_seconds": best, "tokens_per_s": B * T / best}))


if __name__ == "__main__":
    main()
