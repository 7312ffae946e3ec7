# Golden files for the LoRA adapter tests, made ONCE with the real libraries: Hugging Face
# transformers' own Qwen3-Next / Qwen3.5 model classes and the PEFT library (PyTorch 2; a multi-GB
# install, so CI compares against the committed output instead of running this).
#
#   python make_golden.py OUT_DIR        (torch 2, transformers 5, peft; CPU)
#
# For each architecture: a tiny randomly initialised model saved by save_pretrained (float32), a
# LoRA adapter made by peft (init_lora_weights=False: A and B both random, so the adapter matters)
# on the targets below and saved by PeftModel.save_pretrained, a token sequence, and the logits of
# the PEFT model (adapter NOT merged: W x + scaling B (A x)) and of the base model, float32.
import json, os, sys

import torch
import transformers
import peft

OUT = sys.argv[1]
TOKENS = [(i * 37 + 5) % 200 for i in range(40)]

ARCHS = {
    "qwen3_next": (transformers.Qwen3NextConfig, transformers.Qwen3NextForCausalLM, dict(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_conv_kernel_dim=4, num_experts=4,
        num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48,
        decoder_sparse_step=1, norm_topk_prob=True, full_attention_interval=4, partial_rotary_factor=0.25,
        rope_theta=10000.0, rms_norm_eps=1e-6, max_position_embeddings=512, tie_word_embeddings=False),
     # attention and GDN projections only: asked for the shared expert's gate/up/down (by name or regex), PEFT
     # 0.21 with transformers 5 instead writes adapters for the fused routed experts as parameters
     # (mlp.experts.base_layer.lora_*, a layout hyla refuses by name), so the MLPs are covered by qwen3_5
     ["q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkvz", "in_proj_ba", "out_proj"]),
    "qwen3_5": (transformers.Qwen3_5TextConfig, transformers.Qwen3_5ForCausalLM, dict(
        vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_conv_kernel_dim=4, full_attention_interval=4,
        partial_rotary_factor=0.25, rms_norm_eps=1e-6, max_position_embeddings=512, tie_word_embeddings=True),
     ["q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj",
      "gate_proj", "up_proj", "down_proj"]),
}


def main():
    torch.manual_seed(0)
    for name, (cfg_cls, model_cls, kw, targets) in ARCHS.items():
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        cfg = cfg_cls(**kw)
        model = model_cls(cfg).float().eval()
        with torch.no_grad():  # norms away from their init (zero-centred RMSNorm weights start at 0 / 1)
            for n, p in model.named_parameters():
                if p.dim() == 1:
                    p.add_(0.1 * torch.randn_like(p))
        model.save_pretrained(os.path.join(d, "base"), safe_serialization=True)
        lcfg = peft.LoraConfig(r=4, lora_alpha=8, target_modules=targets, lora_dropout=0.0, bias="none",
                               task_type="CAUSAL_LM", init_lora_weights=False)
        pm = peft.get_peft_model(model, lcfg).eval()
        pm.save_pretrained(os.path.join(d, "adapter"))
        ids = torch.tensor([TOKENS])
        with torch.no_grad():
            logits = pm(ids).logits[0].float().contiguous()
            with pm.disable_adapter():
                base = pm(ids).logits[0].float().contiguous()
        logits.numpy().tofile(os.path.join(d, "logits_adapter.f32"))
        base.numpy().tofile(os.path.join(d, "logits_base.f32"))
        json.dump({"tokens": TOKENS, "vocab": cfg.vocab_size, "targets": targets, "torch": torch.__version__,
                   "transformers": transformers.__version__, "peft": peft.__version__},
                  open(os.path.join(d, "golden.json"), "w"), indent=1)
        keys = json.load(open(os.path.join(d, "adapter", "adapter_config.json")))["target_modules"]
        print(name, "adapter targets", keys, "logits", tuple(logits.shape))


if __name__ == "__main__":
    main()
