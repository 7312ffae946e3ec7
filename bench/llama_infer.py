"""llama.cpp peer of bench/infer_bench.c (llama-cpp-python): prefill of the same SEQ-token prompt
and DECODE_STEPS greedy decode steps on a GGUF export of the same weights, THREADS threads; the
best of 2 timed runs after a warm-up. usage: llama_infer.py MODEL.gguf SEQ DECODE_STEPS THREADS

llama.cpp's CPU "extra buffer types" (weights repacked at load into interleaved layouts for its
AVX-512 GEMMs, and AMX tiles) are turned off; "extra_bufts": false in the JSON says so. With them on,
the llama.cpp 0.3.36 build of scripts/pydeps.sh segfaulted on the Zen 5 VM for a prompt of more than
one token on quantized files, and on the Intel VM it dies of SIGILL at an AMX instruction (tilezero:
the CPU lists AMX, the VM does not run it). Built without AMX (-mno-amx-tile -mno-amx-int8
-mno-amx-bf16, stop 45) they run, and are llama.cpp's slower setting here (2 threads, 512-token
prompt, tokens/s with / without): 0.8B Q4_K_M prefill 170-205 / 233-277, decode 22.6-23.8 /
23.2-23.9; 0.8B Q8_0 prefill 116 / 115, decode 17.1 / 17.0; MoE Q4_K_M prefill 543 / 874, decode
66.5 / 94.3. Flash attention on: level (0.8B Q4_K_M prefill 234-241 / 238-248)."""
import json
import sys
import time

import llama_cpp
import numpy as np


def last_argmax(llm, V):
    return int(np.argmax(np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(V,))))


def main():
    path, T, steps, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    global QUIET  # the ctypes callback must outlive every llama.cpp call
    QUIET = llama_cpp.llama_log_callback(lambda level, text, data: None)
    llama_cpp.llama_log_set(QUIET, None)
    default_params = llama_cpp.llama_model_default_params

    def without_repack():
        p = default_params()
        p.use_extra_bufts = False
        return p
    llama_cpp.llama_model_default_params = without_repack
    llama_cpp.llama.llama_cpp.llama_model_default_params = without_repack
    # logits of the last position only, as hyla's prefill computes them (llama.cpp's default; read
    # straight from the context), and llama.cpp's default micro-batch of 512 tokens
    llm = llama_cpp.Llama(model_path=path, n_ctx=T + steps + 8, n_batch=T, n_ubatch=min(T, 512), n_threads=threads,
                          n_threads_batch=threads, logits_all=False, verbose=False)
    V = llm.n_vocab()
    prompt = [(i * 7919 + 13) % V for i in range(T)]
    best_p = best_d = float("inf")
    for rep in range(3):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(prompt)
        prefill = time.perf_counter() - t0
        tok = last_argmax(llm, V)
        t0 = time.perf_counter()
        for _ in range(steps - 1):
            llm.eval([tok])
            tok = last_argmax(llm, V)
        decode = time.perf_counter() - t0
        if rep > 0:
            best_p, best_d = min(best_p, prefill), min(best_d, decode)
    llm.close()  # free the context now, not during interpreter teardown
    print(json.dumps({"engine": f"llama.cpp (llama-cpp-python {llama_cpp.__version__})", "gguf": path,
                      "threads": threads, "extra_bufts": False, "prefill_tokens_per_s": T / best_p, "decode_tokens_per_s": (steps - 1) / best_d}))


if __name__ == "__main__":
    main()
