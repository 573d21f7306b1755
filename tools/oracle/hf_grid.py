#!/usr/bin/python3
"""The development grid of real-code cases for one transformers release on PyTorch 2 (issue 22):
every family of the catalog x eager/sdpa x sequences below and above any sliding window x GQA
ratios (MHA, GQA, MQA) x odd sizes (head dims, vocabularies, sequence lengths that are not powers
of two). Deterministic: the same release gives the same file.

    python3 tools/oracle/hf_grid.py --release 5.18.0 > tools/oracle/cases/hf-5.18.0-grid.json
    python3 tools/oracle/hf_grid.py --release 4.57.6 > tools/oracle/cases/hf-4.57.6-grid.json

Shapes are small so the CPU oracle runs each case in seconds. Holdout sets come from holdout.py
with other seeds, measured once after the rules are done.
"""

import argparse
import json
import sys


def base(model_type, hidden, heads, kv, head_dim=None, layers=2, vocab=512, inter=None, positions=256, tied=False):
    cfg = {
        "model_type": model_type,
        "hidden_size": hidden,
        "intermediate_size": inter if inter is not None else 2 * hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "vocab_size": vocab,
        "max_position_embeddings": positions,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": tied,
    }
    if head_dim is not None:
        cfg["head_dim"] = head_dim
    return cfg


def shapes():
    """(name, config, batch, seq) of every dense and MoE shape; each runs under eager and sdpa."""
    out = []
    # Llama: GQA 4:2; MHA of odd head dim and vocabulary; MQA at an odd sequence length.
    out.append(("llama_gqa", base("llama", 64, 4, 2), 2, 16))
    out.append(("llama_mha_hd24", base("llama", 72, 3, 3, inter=100, vocab=300), 1, 20))
    out.append(("llama_mqa_s33", {**base("llama", 64, 4, 1), "attention_bias": True}, 2, 33))
    # Qwen2: GQA 6:2 with q/k/v bias; a sliding window (use_sliding_window) below and above it.
    out.append(("qwen2_gqa3", base("qwen2", 96, 6, 2), 1, 24))
    for seq in (6, 32):
        cfg = {**base("qwen2", 64, 4, 2, layers=2), "use_sliding_window": True, "sliding_window": 8, "max_window_layers": 1}
        out.append((f"qwen2_swa8_s{seq}", cfg, 2, seq))
    # Mistral: a window below and above the sequence; GQA 8:2.
    for seq in (8, 24):
        out.append((f"mistral_swa12_s{seq}", {**base("mistral", 64, 8, 2, head_dim=8), "sliding_window": 12}, 2, seq))
    # Qwen3: q/k norms, GQA; an odd head dim not hidden / heads.
    out.append(("qwen3_gqa", base("qwen3", 64, 4, 2, head_dim=16), 2, 16))
    out.append(("qwen3_hd24", base("qwen3", 80, 6, 3, head_dim=24, vocab=777), 1, 19))
    # Gemma: MQA; Gemma 2 and 3 with their windows below and above the sequence.
    out.append(("gemma_mqa", {**base("gemma", 64, 4, 1, head_dim=16)}, 2, 16))
    for seq in (6, 24):
        cfg = {
            **base("gemma2", 64, 4, 2, head_dim=16, layers=2),
            "query_pre_attn_scalar": 16,
            "sliding_window": 8,
            "attn_logit_softcapping": 50.0,
            "final_logit_softcapping": 30.0,
        }
        out.append((f"gemma2_swa8_s{seq}", cfg, 2, seq))
    for seq in (6, 24):
        cfg = {
            **base("gemma3_text", 64, 4, 1, head_dim=16, layers=2),
            "query_pre_attn_scalar": 16,
            "sliding_window": 8,
            "layer_types": ["sliding_attention", "full_attention"],
        }
        out.append((f"gemma3_swa8_s{seq}", cfg, 1, seq))
    # Phi-3: fused qkv and gate_up, GQA and partial rotary; its window below and above.
    for seq in (12, 40):
        cfg = {**base("phi3", 96, 6, 2), "partial_rotary_factor": 0.5, "sliding_window": 16, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
        out.append((f"phi3_swa16_s{seq}", cfg, 1, seq))
    # GPT-2: the causal bias buffers.
    out.append(("gpt2", {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 128, "vocab_size": 300}, 2, 17))
    # Mixtures of experts.
    moe = {**base("qwen3_moe", 64, 4, 2, head_dim=16), "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "decoder_sparse_step": 1}
    out.append(("qwen3moe_e4k2", moe, 2, 16))
    out.append(("mixtral_e4k2", {**base("mixtral", 64, 4, 2), "num_local_experts": 4, "num_experts_per_tok": 2}, 2, 16))
    # DeepSeek-V3's MLA: q/k head 24 (16 + 8 rope), v head 16.
    dsv3 = {
        **base("deepseek_v3", 64, 4, 4, layers=2),
        "q_lora_rank": 32,
        "kv_lora_rank": 16,
        "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 8,
        "v_head_dim": 16,
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "n_shared_experts": 1,
        "first_k_dense_replace": 1,
        "n_group": 1,
        "topk_group": 1,
    }
    out.append(("dsv3_mla", dsv3, 2, 16))
    # More GQA ratios and odd sizes.
    out.append(("llama_tied_gqa84_hd8", base("llama", 64, 8, 4, tied=True), 1, 48))
    out.append(("qwen2_tied_gqa71_hd8", base("qwen2", 56, 7, 1, tied=True, vocab=333), 2, 15))
    out.append(("qwen2_mha_s64", base("qwen2", 64, 4, 4), 1, 64))
    out.append(("mistral_mqa_swa4_s10", {**base("mistral", 64, 4, 1, head_dim=16), "sliding_window": 4}, 2, 10))
    qwen3_swa = {**base("qwen3", 64, 4, 2, head_dim=16, layers=2), "use_sliding_window": True, "sliding_window": 8, "max_window_layers": 1}
    out.append(("qwen3_swa8_s24", qwen3_swa, 1, 24))
    gemma2_odd = {
        **base("gemma2", 72, 3, 1, head_dim=24, layers=2, vocab=300),
        "query_pre_attn_scalar": 24,
        "sliding_window": 8,
        "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0,
    }
    out.append(("gemma2_mqa_hd24_s20", gemma2_odd, 1, 20))
    out.append(("phi3_mha_s17", {**base("phi3", 64, 4, 4), "sliding_window": None, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}, 2, 17))
    out.append(("gpt2_h72_s9", {"model_type": "gpt2", "n_embd": 72, "n_layer": 1, "n_head": 3, "n_positions": 64, "vocab_size": 128}, 1, 9))
    moe3 = {**base("qwen3_moe", 48, 3, 1, head_dim=16, vocab=300), "num_experts": 3, "num_experts_per_tok": 1, "moe_intermediate_size": 24, "decoder_sparse_step": 1}
    out.append(("qwen3moe_e3k1_mqa", moe3, 1, 21))
    out.append(("mixtral_e4k2_s33", {**base("mixtral", 64, 4, 1), "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": None}, 1, 33))
    return out


def cases(release):
    tag = release.replace(".", "")
    out = []
    for name, cfg, batch, seq in shapes():
        for attention in ("eager", "sdpa"):
            case = {
                "id": f"hf{tag}g_{name}_{attention}_b{batch}_s{seq}",
                "model": "hf",
                "transformers": release,
                "attention": attention,
                "config": cfg,
                "input": [batch, seq],
                "mode": "train",
                "optimizers": ["adamw"],
            }
            if cfg["model_type"] in ("qwen3_moe", "mixtral", "deepseek_v3") and release.startswith("5."):
                case["experts"] = "eager"
            out.append(case)
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--release", required=True)
    args = parser.parse_args()
    json.dump(cases(args.release), sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
