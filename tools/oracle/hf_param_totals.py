#!/usr/bin/env python3
"""Parameter totals of real checkpoints from the REAL transformers code on the meta device.

Each ``test/fixtures/hf-configs/<name>.json`` holds ``name``, ``source`` (where its config.json
was found), ``config`` (the config.json fields; a multimodal config's ``text_config`` is measured
as its text model) and ``crossCheck`` (an independent figure and its source). This script builds
``AutoModelForCausalLM.from_config`` under ``torch.device("meta")`` (no memory, nothing run) and
writes back ``totalParams`` (every distinct parameter once: a tied lm_head counts once) and a
``breakdown``:

* ``embedding``: ``embed_tokens``; ``lmHead``: the untied output head (0 when tied);
* ``routedExperts``: the routed experts of every MoE layer (transformers >= 5 stores them as 3-D
  ``experts.gate_up_proj`` / ``experts.down_proj``); ``sharedExperts``: shared expert MLPs;
* ``moeLayers``, ``expertsPerLayer``, ``topK``; ``activePerToken`` = total - routed experts x
  (1 - topK / experts): the parameters a token runs through (embedding and head included);
* ``buffers``: persistent and non-persistent buffer elements (not parameters).

Run with the transformers >= 5 venv (see README, "transformers 5.18.0 on PyTorch 2.13"):

    /tmp/t213hf/bin/python tools/oracle/hf_param_totals.py [--dir test/fixtures/hf-configs] [--only NAME,...]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys

os.environ.setdefault("GLOG_minloglevel", "2")

import torch  # noqa: E402

DROP = {"quantization_config", "auto_map", "architectures", "torch_dtype", "dtype", "transformers_version"}


def text_config(config: dict) -> dict:
    cfg = dict(config)
    if "text_config" in cfg:  # e.g. gemma3 (Gemma3ForConditionalGeneration): its text model
        sub = dict(cfg["text_config"])
        sub.setdefault("model_type", cfg["model_type"] + "_text")
        cfg = sub
    return {k: v for k, v in cfg.items() if k not in DROP}


def count(config: dict) -> dict:
    import transformers

    transformers.logging.set_verbosity_error()
    cfg = text_config(config)
    model_type = cfg.pop("model_type")
    hf_cfg = transformers.AutoConfig.for_model(model_type, **cfg)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf_cfg, dtype=torch.bfloat16)
    seen, total = set(), 0
    routed = shared = embedding = head = 0
    moe_layers = set()
    n_experts = top_k = None
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in seen:
            continue
        seen.add(id(p))
        n = p.numel()
        total += n
        if name.endswith("embed_tokens.weight"):
            embedding += n
        elif name == "lm_head.weight":
            head += n
        elif ".experts." in name and "shared" not in name:
            routed += n
            moe_layers.add(name.split(".experts.")[0])
        elif "shared_expert" in name:
            shared += n
    for m in model.modules():
        if type(m).__name__.endswith(("Experts", "NaiveMoe")) and hasattr(m, "num_experts"):
            n_experts = int(m.num_experts)
    top_k = getattr(hf_cfg, "num_experts_per_tok", None)
    out = {
        "totalParams": total,
        "breakdown": {
            "embedding": embedding,
            "lmHead": head,
            "tiedEmbeddings": head == 0,
            "nonEmbedding": total - embedding - head,
            "buffers": sum(b.numel() for b in model.buffers()),
        },
        "computedWith": {
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "class": type(model).__name__,
            "how": "AutoModelForCausalLM.from_config(AutoConfig.for_model(**config)) under torch.device('meta'); distinct parameters summed once",
        },
    }
    if routed:
        active = total - routed + (routed * top_k) // n_experts
        out["breakdown"].update(
            {
                "routedExperts": routed,
                "sharedExperts": shared,
                "moeLayers": len(moe_layers),
                "expertsPerLayer": n_experts,
                "topK": top_k,
                "activePerToken": active,
            }
        )
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=os.path.join("test", "fixtures", "hf-configs"))
    ap.add_argument("--only", default=None)
    args = ap.parse_args(argv)
    files = sorted(glob.glob(os.path.join(args.dir, "*.json")))
    if args.only:
        want = {s.strip() for s in args.only.split(",")}
        files = [f for f in files if os.path.basename(f)[:-5] in want]
    for path in files:
        with open(path) as f:
            doc = json.load(f)
        res = count(doc["config"])
        keep = {k: v for k, v in doc.items() if k not in ("totalParams", "breakdown", "computedWith")}
        new = {}
        for k in ("name", "source", "config"):
            new[k] = keep.pop(k)
        new["totalParams"] = res["totalParams"]
        new["breakdown"] = res["breakdown"]
        new["computedWith"] = res["computedWith"]
        new.update(keep)  # crossCheck and anything else, as written
        cc = new.get("crossCheck") or {}
        exact = cc.get("totalParams")
        verdict = ""
        if isinstance(exact, int):
            verdict = "equal" if exact == res["totalParams"] else f"DIFF {res['totalParams'] - exact:+d}"
        with open(path, "w") as f:
            json.dump(new, f, indent=1)
            f.write("\n")
        b = res["breakdown"]
        extra = f" active {b['activePerToken']:,}" if "activePerToken" in b else ""
        print(f"{doc['name']}: {res['totalParams']:,}{extra} {verdict}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
