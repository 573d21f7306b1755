#!/usr/bin/python3
"""Random Hugging Face decoder configs for a holdout set: cases nobody looked at while the
rules were written, measured once with the real code and compared as they come.

    /usr/bin/python3 tools/oracle/holdout.py --seed 4402 --count 16 --release 4.40.2 \
        > tools/oracle/cases/hf-4.40.2-holdout.json

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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--count", type=int, default=16)
    ap.add_argument("--release", default="4.40.2")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    cases = []
    for i in range(args.count):
        family = ["llama", "qwen2", "mistral", "gpt2"][i % 4]
        cfg = gpt2(rng) if family == "gpt2" else llama_family(rng, family)
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
        cases.append(case)
    json.dump(cases, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
