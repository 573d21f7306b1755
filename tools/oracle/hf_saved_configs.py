#!/usr/bin/env python3
"""The config.json each transformers release writes (`save_pretrained`) for every family of the
catalog, with the real model's parameter count (built on the meta device): what vram-ts must read
as the release wrote it (issue 22: 5.x renames fields, e.g. qwen3_moe's num_experts).

    /tmp/trl/bin/python  tools/oracle/hf_saved_configs.py > test/fixtures/hf-saved-configs/5.18.0.json
    /tmp/t457/bin/python tools/oracle/hf_saved_configs.py > test/fixtures/hf-saved-configs/4.57.6.json

The shapes are the development grid's (hf_grid.py); nothing is downloaded.
"""

import json
import os
import sys
import tempfile

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(__file__))
from hf_grid import shapes  # noqa: E402


def main():
    out = []
    seen = set()
    for name, cfg, _batch, _seq in shapes():
        model_type = cfg["model_type"]
        fields = {k: v for k, v in cfg.items() if k != "model_type"}
        config = AutoConfig.for_model(model_type, **fields)
        with tempfile.TemporaryDirectory() as tmp:
            config.save_pretrained(tmp)
            with open(os.path.join(tmp, "config.json")) as f:
                saved = json.load(f)
        key = json.dumps(saved, sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        params = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
        out.append({"id": name, "saved": saved, "params": params})
    json.dump(
        {
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "command": f"{sys.executable} tools/oracle/hf_saved_configs.py",
            "configs": out,
        },
        sys.stdout,
        indent=1,
    )
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
