# Golden files for adapters WRITTEN by hyla, checked ONCE with the real libraries (PyTorch 2,
# transformers 5, peft; CPU): hyla trains a LoRA adapter on each golden base model, then
#   - peft.PeftModel.from_pretrained loads hyla's directory into transformers' own
#     Qwen3NextForCausalLM / Qwen3_5ForCausalLM with no missing and no unexpected adapter key;
#   - every tensor of hyla's adapter_model.safetensors equals the parameter PEFT put it in (so the
#     key names, shapes and row order are PEFT's), and r, lora_alpha, scaling and the adapted
#     modules are the ones hyla wrote;
#   - the PEFT model's logits (adapter unmerged) are stored for CI to compare with hyla's.
# The adapter is committed with them (trained/adapter), so CI checks hyla's forward on exactly what
# PEFT loaded, and that a fresh hyla run writes the same keys, shapes and config.
#
#   python make_trained_golden.py HYLA GOLDEN_DIR
import json, os, shutil, subprocess, sys

import numpy as np
import safetensors.torch
import torch
import transformers
import peft

HYLA, G = sys.argv[1], sys.argv[2]

# The training command per architecture (tests/peft/peft_test.sh runs it again). Qwen3-Next:
# attention + GDN projections (asked for the shared expert's gate/up/down by name, PEFT 0.21 with
# transformers 5 maps them onto the fused routed experts instead; see make_golden.py); Qwen3.5:
# all-linear (attention, GDN in_proj_qkv/z/b/a + out_proj, dense MLP).
TRAIN = {
    "qwen3_next": ["--lora-targets", "q_proj,k_proj,v_proj,o_proj,in_proj_qkvz,in_proj_ba,out_proj"],
    "qwen3_5": [],
}
COMMON = ["--lora-rank", "4", "--lora-alpha", "16", "--steps", "3", "--batch", "2", "--seq", "32", "--synthetic",
          "--lr", "1e-2", "--warmup", "1", "--seed", "3", "--threads", "1"]
CLASSES = {"qwen3_next": transformers.Qwen3NextForCausalLM, "qwen3_5": transformers.Qwen3_5ForCausalLM}


def main():
    out = {}
    for name, extra in TRAIN.items():
        d = os.path.join(G, name)
        tdir = os.path.join(d, "trained")
        shutil.rmtree(tdir, ignore_errors=True)
        os.makedirs(tdir)
        run = os.path.join(tdir, "run")
        cmd = [HYLA, "train", "--model", os.path.join(d, "base")] + COMMON + extra + ["--save", run]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        adir = os.path.join(tdir, "adapter")
        os.makedirs(adir)
        for f in ("adapter_config.json", "adapter_model.safetensors"):
            shutil.copy(os.path.join(run, f), adir)
        shutil.rmtree(run)
        cfg = json.load(open(os.path.join(adir, "adapter_config.json")))
        cfg["base_model_name_or_path"] = None  # the path of this machine; PEFT does not need it here
        json.dump(cfg, open(os.path.join(adir, "adapter_config.json"), "w"), indent=1)

        base = CLASSES[name].from_pretrained(os.path.join(d, "base"), dtype=torch.float32).eval()
        pm = peft.PeftModel.from_pretrained(base, adir).eval()
        written = safetensors.torch.load_file(os.path.join(adir, "adapter_model.safetensors"))
        state = {k: v for k, v in pm.state_dict().items() if "lora_" in k}
        # PEFT's in-memory names carry the adapter name: ...lora_A.default.weight
        loaded = {k.replace(".default.", "."): v for k, v in state.items()}
        missing = sorted(set(loaded) - set(written))
        unexpected = sorted(set(written) - set(loaded))
        assert not missing and not unexpected, (name, missing[:5], unexpected[:5])
        worst = max(float((loaded[k].float() - written[k].float()).abs().max()) for k in written)
        assert worst == 0.0, (name, worst)
        lcfg = pm.peft_config["default"]
        scal = {m.scaling["default"] for m in pm.modules() if isinstance(m, peft.tuners.lora.LoraLayer)}
        assert lcfg.r == 4 and lcfg.lora_alpha == 16 and scal == {4.0}, (lcfg.r, lcfg.lora_alpha, scal)
        tokens = json.load(open(os.path.join(d, "golden.json")))["tokens"]
        with torch.no_grad():
            logits = pm(torch.tensor([tokens])).logits[0].float().contiguous()
        logits.numpy().astype("<f4").tofile(os.path.join(tdir, "logits_trained.f32"))
        out[name] = {"command": ["hyla", "train", "--model", "BASE"] + COMMON + extra + ["--save", "DIR"],
                     "adapter_tensors": len(written), "missing_keys": missing, "unexpected_keys": unexpected,
                     "max_abs_tensor_diff_file_vs_loaded": worst, "r": lcfg.r, "lora_alpha": lcfg.lora_alpha,
                     "scaling": sorted(scal), "adapted_modules": sum(1 for k in written if k.endswith("lora_A.weight")),
                     "peft": peft.__version__, "transformers": transformers.__version__, "torch": torch.__version__,
                     "logits": "trained/logits_trained.f32 (PEFT model, adapter unmerged, [T, vocab] float32)"}
        json.dump(out[name], open(os.path.join(tdir, "golden.json"), "w"), indent=1)
        print(name, json.dumps({k: v for k, v in out[name].items() if k != "command"}))


if __name__ == "__main__":
    main()
