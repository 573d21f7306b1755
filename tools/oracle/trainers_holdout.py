"""Random holdout cases for trainers_cpu.py (HF Trainer, TRL SFTTrainer, TRL GRPOTrainer).

    python3 tools/oracle/trainers_holdout.py --seed 2013 --count 16 > tools/oracle/cases/trainers-holdout.json

The space (documented in TRAINERS.md, "Holdout"); a field drawn as "default" is left out of the case, so the
trainer's own default applies:

* trainer: trainer / sft / grpo in turn (count/3 each), then the order shuffled.
* model: model_type qwen2 | llama | qwen3; hidden 32, 48, 64, 96, 128; head_dim 8, 16, 32 (hidden divisible,
  at most 8 heads); num_key_value_heads a divisor of the heads; layers 1-3; intermediate 2-4 x hidden;
  vocab = hidden x ratio, ratio log-uniform in [10, 300], rounded to a multiple of 8; tied or untied.
* lora: none (half the cases) or r 4 | 8 | 16, lora_alpha r or 2r, lora_dropout 0 | 0.05 | 0.1, target_modules
  [q_proj, v_proj] | [q_proj, k_proj, v_proj, o_proj] | [gate_proj, up_proj, down_proj] | "all-linear".
* trainer: optim default (adamw_torch_fused) | adamw_torch | sgd; bf16 default (off) | on; gradient_checkpointing
  default (off) | on; gradient_accumulation_steps 1-4; max_grad_norm default (1.0) | 0; batch 1-4; sequence 8-64.
* sft: loss_type default (chunked_nll) | nll; gradient_checkpointing default (on) | off; bf16 default (on) | off;
  optim as above; gradient_accumulation_steps 1-2; batch 1-4; sequence 8-300 (over 255 tokens: several chunks).
* grpo: beta default (0) | 0.04; num_generations 2 | 4 | 6 | 8; batch num_generations x 1 | 2 (at most 16);
  max_completion_length 8-48; prompt 8-32; temperature default (1.0) | 0.7; num_iterations default (1) | 2;
  steps_per_generation default | 2 | 4; gradient_accumulation_steps 1-2; bf16 default (on) | off;
  gradient_checkpointing default (on) | off; optim as above.
* steps: 3 for trainer / sft; for grpo the generation period in optimizer steps + 2 (so the run holds two
  generations and, where the period is over one step, steps without generation).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys


def draw_model(rng: random.Random) -> dict:
    mt = rng.choice(["qwen2", "llama", "qwen3"])
    h = rng.choice([32, 48, 64, 96, 128])
    head_dims = [d for d in (8, 16, 32) if h % d == 0 and h // d <= 8]
    hd = rng.choice(head_dims)
    heads = h // hd
    kv = rng.choice([d for d in range(1, heads + 1) if heads % d == 0])
    ratio = math.exp(rng.uniform(math.log(10), math.log(300)))
    vocab = max(64, int(round(h * ratio / 8.0)) * 8)
    cfg = {
        "model_type": mt,
        "hidden_size": h,
        "intermediate_size": h * rng.choice([2, 3, 4]),
        "num_hidden_layers": rng.randint(1, 3),
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "vocab_size": vocab,
        "tie_word_embeddings": rng.random() < 0.5,
    }
    if mt == "qwen3" or rng.random() < 0.3:
        cfg["head_dim"] = hd
    return cfg


def draw_lora(rng: random.Random):
    if rng.random() < 0.5:
        return None
    r = rng.choice([4, 8, 16])
    return {
        "r": r,
        "lora_alpha": r * rng.choice([1, 2]),
        "lora_dropout": rng.choice([0.0, 0.05, 0.1]),
        "target_modules": rng.choice(
            [["q_proj", "v_proj"], ["q_proj", "k_proj", "v_proj", "o_proj"], ["gate_proj", "up_proj", "down_proj"], "all-linear"]
        ),
    }


def maybe(rng: random.Random, args: dict, key: str, values: list) -> None:
    """values[0] is 'default' (the field left out); the others are set."""
    v = rng.choice(values)
    if v != "default":
        args[key] = v


def draw_case(rng: random.Random, kind: str, i: int) -> dict:
    cfg = draw_model(rng)
    lora = draw_lora(rng)
    args: dict = {}
    if kind == "trainer":
        args["per_device_train_batch_size"] = rng.randint(1, 4)
        maybe(rng, args, "optim", ["default", "adamw_torch", "sgd"])
        maybe(rng, args, "bf16", ["default", True])
        maybe(rng, args, "gradient_checkpointing", ["default", True])
        args["gradient_accumulation_steps"] = rng.randint(1, 4)
        maybe(rng, args, "max_grad_norm", ["default", 0])
        data = {"sequence": rng.randint(8, 64)}
        steps = 3
    elif kind == "sft":
        args["per_device_train_batch_size"] = rng.randint(1, 4)
        maybe(rng, args, "loss_type", ["default", "nll"])
        maybe(rng, args, "gradient_checkpointing", ["default", False])
        maybe(rng, args, "bf16", ["default", False])
        maybe(rng, args, "optim", ["default", "adamw_torch", "sgd"])
        args["gradient_accumulation_steps"] = rng.randint(1, 2)
        data = {"sequence": rng.randint(8, 300)}
        steps = 3
    else:
        g = rng.choice([2, 4, 6, 8])
        args["num_generations"] = g
        args["per_device_train_batch_size"] = min(16, g * rng.choice([1, 2]))
        args["max_completion_length"] = rng.randint(8, 48)
        maybe(rng, args, "beta", ["default", 0.04])
        maybe(rng, args, "temperature", ["default", 0.7])
        maybe(rng, args, "num_iterations", ["default", 2])
        maybe(rng, args, "steps_per_generation", ["default", 2, 4])
        ga = rng.randint(1, 2)
        args["gradient_accumulation_steps"] = ga
        maybe(rng, args, "bf16", ["default", False])
        maybe(rng, args, "gradient_checkpointing", ["default", False])
        maybe(rng, args, "optim", ["default", "adamw_torch", "sgd"])
        data = {"prompt": rng.randint(8, 32)}
        spg = args.get("steps_per_generation", ga)
        every = spg * args.get("num_iterations", 1)  # micro-steps between generations
        period = max(1, every // ga)
        steps = period + 2
    c = cfg
    name = (
        f"ho{i:02d}_{kind}_{c['model_type']}_h{c['hidden_size']}_l{c['num_hidden_layers']}_v{c['vocab_size']}"
        + ("_lora" if lora else "")
    )
    return {"id": name, "trainer": kind, "config": cfg, "lora": lora, "args": args, "data": data, "steps": steps}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--count", type=int, default=16)
    ap.add_argument("--out", default=None, help="write here instead of stdout")
    a = ap.parse_args(argv)
    rng = random.Random(a.seed)
    kinds = [("trainer", "sft", "grpo")[i % 3] for i in range(a.count)]
    rng.shuffle(kinds)
    cases = [draw_case(rng, k, i) for i, k in enumerate(kinds)]
    text = json.dumps(cases, indent=1) + "\n"
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
