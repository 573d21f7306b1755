#!/usr/bin/python3
"""Random Hugging Face decoder configs for a holdout set: cases nobody looked at while the
rules were written, measured once with the real code and compared as they come.

    /usr/bin/python3 tools/oracle/holdout.py --seed 4402 --count 16 --release 4.40.2 \
        > tools/oracle/cases/hf-4.40.2-holdout.json
    python3 tools/oracle/holdout.py --torch2 --seed 5701 --count 33 --release 5.18.0 \
        > tools/oracle/cases/hf-5.18.0-holdout.json          # every family, eager or sdpa

The same seed gives the same file. Shapes are small so the CPU oracle runs in seconds.
"""

import argparse
import json
import random
import sys

ACTS = ["silu", "silu", "silu", "gelu", "relu", "gelu_pytorch_tanh", "gelu_new", "quick_gelu"]
GPT2_ACTS = ["gelu_new", "gelu_new", "gelu", "relu", "gelu_pytorch_tanh", "quick_gelu"]
OPTS = ["sgd", "sgd_momentum", "adam", "adamw", "adam_foreach"]


def llama_family(rng, family):
    head_dim = rng.choice([8, 16, 32])
    heads = rng.choice([2, 4, 6, 8])
    kv = rng.choice([d for d in range(1, heads + 1) if heads % d == 0])
    cfg = {
        "model_type": family,
        "hidden_size": heads * head_dim,
        "intermediate_size": rng.choice([64, 96, 160, 200, 256]),
        "num_hidden_layers": rng.randint(1, 3),
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "vocab_size": rng.choice([128, 300, 512, 777]),
        "max_position_embeddings": rng.choice([128, 256, 1024, 4096]),
        "tie_word_embeddings": rng.random() < 0.4,
        "hidden_act": rng.choice(ACTS),
        "attention_dropout": rng.choice([0.0, 0.0, 0.1]),
        "rms_norm_eps": 1e-6,
    }
    if family == "llama":
        cfg["attention_bias"] = rng.random() < 0.3
    if family == "mistral":
        cfg["sliding_window"] = rng.choice([None, 8, 16, 4096])
    if family == "qwen2":
        cfg["use_sliding_window"] = rng.random() < 0.3
        cfg["sliding_window"] = rng.choice([8, 32, 4096])
    return cfg


def gpt2(rng):
    heads = rng.choice([2, 4])
    hidden = heads * rng.choice([16, 24, 32])
    return {
        "model_type": "gpt2",
        "n_embd": hidden,
        "n_layer": rng.randint(1, 3),
        "n_head": heads,
        "n_positions": rng.choice([64, 128, 256]),
        "n_inner": rng.choice([None, None, 3 * hidden]),
        "vocab_size": rng.choice([128, 300, 512]),
        "activation_function": rng.choice(GPT2_ACTS),
        "attn_pdrop": rng.choice([0.0, 0.1]),
        "resid_pdrop": rng.choice([0.0, 0.1]),
        "embd_pdrop": rng.choice([0.0, 0.1]),
        "tie_word_embeddings": rng.random() < 0.8,
    }


def variation(rng, family):
    """Qwen3, Gemma 1-3, Phi-3 (issue 22's holdout on torch 2): random heads, GQA, windows."""
    head_dim = rng.choice([8, 16, 24, 32])
    heads = rng.choice([2, 3, 4, 6, 8])
    kv = rng.choice([d for d in range(1, heads + 1) if heads % d == 0])
    cfg = {
        "model_type": family,
        # 5.x validates hidden_size % num_attention_heads == 0 (head_dim may still differ).
        "hidden_size": heads * rng.choice([8, 12, 16, 24]),
        "intermediate_size": rng.choice([64, 96, 160, 200]),
        "num_hidden_layers": rng.randint(1, 3),
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": head_dim,
        "vocab_size": rng.choice([128, 300, 512, 777]),
        "max_position_embeddings": rng.choice([128, 256, 1024]),
        "tie_word_embeddings": rng.random() < 0.5,
        "rms_norm_eps": 1e-6,
    }
    window = rng.choice([4, 8, 16, 32])
    if family == "qwen3":
        cfg["use_sliding_window"] = rng.random() < 0.4
        cfg["sliding_window"] = window
        cfg["max_window_layers"] = rng.randint(0, cfg["num_hidden_layers"])
    if family in ("gemma2", "gemma3_text"):
        cfg["query_pre_attn_scalar"] = head_dim
        cfg["sliding_window"] = window
    if family == "gemma2":
        cfg["attn_logit_softcapping"] = rng.choice([None, 50.0])
        cfg["final_logit_softcapping"] = rng.choice([None, 30.0])
    if family == "phi3":
        cfg["hidden_size"] = heads * head_dim
        del cfg["head_dim"]
        cfg["partial_rotary_factor"] = rng.choice([1.0, 0.5])
        cfg["sliding_window"] = rng.choice([None, window])
        cfg.update({"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2})
    return cfg


def mixture(rng, family):
    """Qwen3-MoE and Mixtral: experts, top-k, GQA."""
    heads = rng.choice([2, 4])
    kv = rng.choice([1, heads])
    cfg = {
        "model_type": family,
        "hidden_size": 64,
        "intermediate_size": rng.choice([64, 128]),
        "num_hidden_layers": rng.randint(1, 2),
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "vocab_size": rng.choice([128, 300, 512]),
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-6,
    }
    experts = rng.choice([3, 4, 6])
    k = rng.randint(1, 2)
    if family == "qwen3_moe":
        cfg.update({"head_dim": 16, "num_experts": experts, "num_experts_per_tok": k, "moe_intermediate_size": rng.choice([16, 32]), "decoder_sparse_step": 1})
    else:
        cfg.update({"num_local_experts": experts, "num_experts_per_tok": k})
    return cfg


TORCH2_FAMILIES = ["llama", "qwen2", "mistral", "gpt2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi3", "qwen3_moe", "mixtral"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--count", type=int, default=16)
    ap.add_argument("--release", default="4.40.2")
    ap.add_argument("--torch2", action="store_true", help="every family of the catalog, eager or sdpa (PyTorch 2)")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    cases = []
    families = TORCH2_FAMILIES if args.torch2 else ["llama", "qwen2", "mistral", "gpt2"]
    for i in range(args.count):
        family = families[i % len(families)]
        if family == "gpt2":
            cfg = gpt2(rng)
        elif family in ("llama", "qwen2", "mistral"):
            cfg = llama_family(rng, family)
        elif family in ("qwen3_moe", "mixtral"):
            cfg = mixture(rng, family)
        else:
            cfg = variation(rng, family)
        limit = cfg.get("n_positions", 10**9)
        seq = min(rng.choice([8, 16, 24, 40, 64, 96]), limit)
        batch = rng.randint(1, 3)
        case = {
            "id": f"hf{args.release.replace('.', '')}h{args.seed}_{i:02d}_{family}",
            "model": "hf",
            "transformers": args.release,
            "config": cfg,
            "input": [batch, seq],
            "mode": "train" if rng.random() < 0.75 else "eval",
            "optimizers": [rng.choice(OPTS)],
        }
        if rng.random() < 0.25:
            case["trainUseCache"] = False
        if args.torch2:
            case["attention"] = rng.choice(["eager", "sdpa"])
            if family in ("qwen3_moe", "mixtral") and args.release.startswith("5."):
                case["experts"] = rng.choice(["eager", "grouped_mm"])
        cases.append(case)
    json.dump(cases, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
