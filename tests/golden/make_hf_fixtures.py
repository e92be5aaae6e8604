#!/usr/bin/env python3
"""make_hf_fixtures.py: tiny random-weight Gemma 3 / 3n / 4 models built with Hugging Face transformers
(>= 5.5; written against 5.17), saved as checkpoint directories (config.json + model.safetensors) with
reference float32 logits, for the checks of the Gemma 4 / 3n issue. Every weight is random, norms included;
sliding windows are shorter than the test sequence. Runs where transformers + torch are installed (the GPU
machine; CPU is enough) and writes tests/golden/hf/<variant>/{config.json, model.safetensors, ref.bin}.

ref.bin (little-endian): b"GMHF01\\0\\0", u32 n_tokens, i32 tokens[n], u32 n_vocab,
f32 logits[n][n_vocab] (every position, eager attention, float32), u32 n_gen, i32 gen[n_gen] (greedy,
no stop tokens).

Usage: python3 tests/golden/make_hf_fixtures.py [OUT_DIR] [VARIANT ...]
"""
import json
import math
import struct
import sys
import traceback
from pathlib import Path

import torch
import transformers

SEQ = [2, 17, 250, 33, 99, 4, 401, 77, 123, 8, 300, 51, 19, 260]  # 14 tokens; windows are 4 or 5
N_GEN = 8
VOCAB = 512


def randomize(model, raw_norms, seed):
    """Every parameter random: norms around 1 (raw weight) or around 0 (Gemma 3's 1+w), matrices
    ~ N(0, 1/fan_in), embeddings ~ N(0, 0.1) (larger tied embeddings make greedy decoding repeat one token),
    scalars around their typical values."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            low = name.lower()
            if "layer_scalar" in low:
                v = 0.3 + 0.7 * torch.rand(p.shape, generator=g)
            elif "norm" in low and p.ndim == 1:
                v = (1.0 + 0.2 * r) if raw_norms else 0.2 * r
            elif p.ndim == 1:  # scales (router scale, per-expert scale, altup correct scale, ...)
                v = 1.0 + 0.2 * r
            elif "embed" in low and p.ndim == 2:
                v = 0.1 * r
            else:
                v = r / math.sqrt(p.shape[-1])
            p.copy_(v.to(p.dtype))


def write_ref(path, tokens, logits, gen):
    n, v = logits.shape
    out = bytearray(b"GMHF01\0\0")
    out += struct.pack("<I", n) + struct.pack(f"<{n}i", *tokens)
    out += struct.pack("<I", v) + logits.astype("<f4").tobytes()
    out += struct.pack("<I", len(gen)) + struct.pack(f"<{len(gen)}i", *gen)
    path.write_bytes(bytes(out))


def run_variant(name, build, out_dir, dtype=torch.float32, raw_norms=True, seed=1):
    model = build()
    model.eval()
    randomize(model, raw_norms, seed)
    model = model.to(dtype)
    d = out_dir / name
    d.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(d, safe_serialization=True)
    # The reference computes in float32 on the stored weights, loaded as a user would load them: buffers that
    # are not saved (RoPE inverse frequencies, the embedding scale) are made afresh in float32, as
    # from_pretrained makes them, not round-tripped through the storage dtype.
    ref = type(model).from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    ref.eval()
    ids = torch.tensor([SEQ])
    with torch.no_grad():
        logits = ref(ids).logits[0].float().numpy()
        gen, cur = [], ids
        for _ in range(N_GEN):
            nxt = int(ref(cur).logits[0, -1].argmax())
            gen.append(nxt)
            cur = torch.cat([cur, torch.tensor([[nxt]])], dim=1)
    write_ref(d / "ref.bin", SEQ, logits, gen)
    names = [k for k, _ in model.named_parameters()]
    cfg = json.loads((d / "config.json").read_text())
    print(f"== {name}: {sum(p.numel() for p in model.parameters())} params, {len(names)} tensors, "
          f"max|logit| {abs(logits).max():.3f}, greedy {gen}")
    print("   architectures", cfg.get("architectures"), "model_type", cfg.get("model_type"))
    return names


def g4_text_kwargs(**over):
    kw = dict(
        vocab_size=VOCAB, vocab_size_per_layer_input=VOCAB, hidden_size=64, intermediate_size=96,
        num_hidden_layers=6, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
        global_head_dim=64, num_global_key_value_heads=1, hidden_size_per_layer_input=16,
        num_kv_shared_layers=2, sliding_window=4, max_position_embeddings=256,
        layer_types=["sliding_attention", "sliding_attention", "full_attention",
                     "sliding_attention", "sliding_attention", "full_attention"],
        final_logit_softcapping=30.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
        attention_k_eq_v=False, use_double_wide_mlp=False, enable_moe_block=False,
        pad_token_id=0, eos_token_id=1, bos_token_id=2,
    )
    kw.update(over)
    return kw


def build_g4(**over):
    cfg = transformers.Gemma4TextConfig(**g4_text_kwargs(**over))
    cfg._attn_implementation = "eager"
    return transformers.Gemma4ForCausalLM(cfg)


def build_g4_unified(**over):
    cls_cfg = getattr(transformers, "Gemma4UnifiedTextConfig")
    cls = getattr(transformers, "Gemma4UnifiedForCausalLM")
    kw = g4_text_kwargs(hidden_size_per_layer_input=0, num_kv_shared_layers=0, attention_k_eq_v=True, **over)
    cfg = cls_cfg(**kw)
    cfg._attn_implementation = "eager"
    return cls(cfg)


def build_g3n():
    cfg = transformers.Gemma3nTextConfig(
        vocab_size=VOCAB, vocab_size_per_layer_input=VOCAB, hidden_size=64, intermediate_size=96,
        num_hidden_layers=6, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
        hidden_size_per_layer_input=16, num_kv_shared_layers=2, sliding_window=4,
        max_position_embeddings=256, layer_types=["sliding_attention"] * 2 + ["full_attention"] +
        ["sliding_attention"] * 2 + ["full_attention"],
        activation_sparsity_pattern=[0.95, 0.95, 0.0, 0.0, 0.0, 0.0], laurel_rank=8, altup_num_inputs=4,
        altup_active_idx=0, altup_coef_clip=120.0, altup_correct_scale=True, final_logit_softcapping=30.0,
        rms_norm_eps=1e-6, pad_token_id=0, eos_token_id=1, bos_token_id=2)
    cfg._attn_implementation = "eager"
    return transformers.Gemma3nForCausalLM(cfg)


def build_g3(rope_scaling=None):
    kw = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=7,
              num_attention_heads=4, num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16,
              sliding_window=5, max_position_embeddings=256, rms_norm_eps=1e-6,
              pad_token_id=0, eos_token_id=1, bos_token_id=2)
    if rope_scaling:
        kw["rope_scaling"] = rope_scaling
    cfg = transformers.Gemma3TextConfig(**kw)
    cfg._attn_implementation = "eager"
    return transformers.Gemma3ForCausalLM(cfg)


VARIANTS = {
    # Gemma 4 dense with per-layer embeddings and KV sharing (E2B/E4B layout)
    "gemma4_ple_kvshare": (lambda: build_g4(), {}),
    # E2B's double-wide MLP on the KV-shared layers
    "gemma4_double_wide": (lambda: build_g4(use_double_wide_mlp=True), {}),
    # K-equals-V on full layers (12B/26B/31B), no PLE, no sharing
    "gemma4_k_eq_v": (lambda: build_g4(attention_k_eq_v=True, hidden_size_per_layer_input=0,
                                       num_kv_shared_layers=0, num_global_key_value_heads=2,
                                       num_key_value_heads=2), {}),
    # 26B-A4B: MoE beside the always-on MLP
    "gemma4_moe": (lambda: build_g4(enable_moe_block=True, num_experts=4, top_k_experts=2,
                                    moe_intermediate_size=32, attention_k_eq_v=True,
                                    hidden_size_per_layer_input=0, num_kv_shared_layers=0), {}),
    # the 12B's gemma4_unified text model
    "gemma4_unified": (lambda: build_g4_unified(), {}),
    # weights stored as bf16
    "gemma4_bf16": (lambda: build_g4(), {"dtype": torch.bfloat16}),
    "gemma3n": (lambda: build_g3n(), {}),
    "gemma3": (lambda: build_g3(), {"raw_norms": False}),
    "gemma3_linear_rope": (lambda: build_g3({"rope_type": "linear", "factor": 8.0}), {"raw_norms": False}),
}


def main():
    out_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("hf")
    wanted = sys.argv[2:] or list(VARIANTS)
    print("transformers", transformers.__version__, "torch", torch.__version__)
    failed = []
    for name in wanted:
        build, opts = VARIANTS[name]
        try:
            # each variant's seed is fixed by its place in VARIANTS, so one can be remade alone
            names = run_variant(name, build, out_dir, seed=100 + list(VARIANTS).index(name), **opts)
            print("   tensors:", ", ".join(n for n in names if ".layers." not in n or ".layers.0." in n
                                         or ".layers.2." in n or ".layers.5." in n)[:1500])
        except Exception:
            failed.append(name)
            traceback.print_exc(limit=4)
    print("failed:", failed)


if __name__ == "__main__":
    main()
