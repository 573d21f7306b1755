#!/usr/bin/python3
"""Parameter counts of the reference transformers for real Hugging Face configs, built on the
meta device (no memory, nothing run), checked against the totals of the published checkpoints.

    /usr/bin/python3 tools/oracle/param_counts.py [--out tools/oracle/param_counts.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault("GLOG_minloglevel", "2")

import torch  # noqa: E402

import ref_transformers  # noqa: E402

# Totals of the Hugging Face checkpoints (tied embeddings counted once), as in
# shared/reference/pytorch_reference.json "llm_param_counts".
CHECKS = [
    {
        "name": "Qwen/Qwen2.5-0.5B",
        "case": {
            "model": "llama",
            "config": {
                "model_type": "qwen2",
                "hidden_size": 896,
                "intermediate_size": 4864,
                "num_hidden_layers": 24,
                "num_attention_heads": 14,
                "num_key_value_heads": 2,
                "vocab_size": 151936,
                "tie_word_embeddings": True,
                "max_position_embeddings": 32768,
                "rope_theta": 1000000.0,
                "rms_norm_eps": 1e-6,
            },
        },
        "expected": 494032768,
    },
    {
        "name": "meta-llama/Meta-Llama-3-8B",
        "case": {
            "model": "llama",
            "config": {
                "model_type": "llama",
                "hidden_size": 4096,
                "intermediate_size": 14336,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "vocab_size": 128256,
                "tie_word_embeddings": False,
                "max_position_embeddings": 8192,
                "rope_theta": 500000.0,
                "rms_norm_eps": 1e-5,
            },
        },
        "expected": 8030261248,
    },
    {
        "name": "openai-community/gpt2",
        "case": {
            "model": "gpt2",
            "config": {"n_embd": 768, "n_layer": 12, "n_head": 12, "n_positions": 1024, "vocab_size": 50257},
        },
        "expected": 124439808,
    },
]


def count(case: dict) -> dict:
    model = ref_transformers.build_model(case, device="meta")
    seen, total = set(), 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    buffers = sum(b.numel() for b in model.buffers())
    return {"params": total, "bufferElements": buffers}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join("tools", "oracle", "param_counts.json"))
    args = ap.parse_args(argv)
    rows = []
    ok = True
    for c in CHECKS:
        got = count(c["case"])
        match = got["params"] == c["expected"]
        ok &= match
        rows.append({"name": c["name"], "case": c["case"], "expected": c["expected"], **got, "match": match})
        print(f"{c['name']}: {got['params']} (expected {c['expected']}) {'OK' if match else 'MISMATCH'}")
    with open(args.out, "w") as f:
        json.dump({"torch": torch.__version__, "device": "meta", "rows": rows}, f, indent=1)
        f.write("\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
