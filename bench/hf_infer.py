"""Inference peer of bench/infer_bench.c: Hugging Face transformers' own modeling code for the model
in MODEL_DIR (Qwen3.5 / Qwen3-Next from its config.json, the same safetensors hyla reads) on PyTorch 2,
CPU: prefill of the same SEQ-token prompt with logits_to_keep=1 (the last position's logits only, as
hyla computes them) and DECODE_STEPS greedy steps on its cache; fp32 (or bf16 weights), eager or
torch.compile; the best of 2 timed runs after a warm-up. Prints one JSON object.
usage: python hf_infer.py MODEL_DIR SEQ DECODE_STEPS THREADS f32|bf16 [compile]
Runs with a Python that has torch and transformers (bench/hf_peer.sh makes one)."""
import json
import sys
import time

import torch
import transformers

from hf_compile import maybe_compile


def main():
    model_dir, T, steps, threads, dtype = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    want_compile = len(sys.argv) > 6 and sys.argv[6] == "compile"
    torch.set_num_threads(threads)
    dt = torch.bfloat16 if dtype == "bf16" else torch.float32
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=dt)
    model.eval()
    fwd, compiled = maybe_compile(model, want_compile)
    V = model.config.get_text_config().vocab_size
    prompt = torch.tensor([[(i * 7919 + 13) % V for i in range(T)]])
    best_p = best_d = float("inf")
    with torch.no_grad():
        for rep in range(3):
            t0 = time.perf_counter()
            out = fwd(input_ids=prompt, use_cache=True, logits_to_keep=1)
            prefill = time.perf_counter() - t0
            cache, tok = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
            t0 = time.perf_counter()
            for _ in range(steps - 1):
                out = fwd(input_ids=tok, past_key_values=cache, use_cache=True, logits_to_keep=1)
                cache, tok = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
            decode = time.perf_counter() - t0
            if rep > 0:
                best_p, best_d = min(best_p, prefill), min(best_d, decode)
    print(json.dumps({"engine": f"transformers-{type(model).__name__}", "torch": torch.__version__,
                      "transformers": transformers.__version__, "dtype": dtype, "compiled": compiled, "threads": threads,
                      "seq": T, "prefill_tokens_per_s": T / best_p, "decode_tokens_per_s": (steps - 1) / best_d}))


if __name__ == "__main__":
    main()
