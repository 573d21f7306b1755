"""Causal LMs built by the real, unmodified Hugging Face transformers code, for the oracle.

Cases with ``"model": "hf"`` name the transformers release they are measured on
(``"transformers": "4.40.2"``) and a config.json-style ``config``. The model is
``AutoModelForCausalLM.from_config(AutoConfig.for_model(**config), attn_implementation=...)``
with random weights (seed 0); nothing is downloaded.

transformers 4.x is not installed system-wide: the oracle is given the directories that hold a
release's ``transformers`` package (and its pure-Python dependencies) with
``--transformers-src DIR[:DIR...]``. How such a tree was made on this machine (a fork that
carries the release tags, huggingface_hub, a stub for the safetensors extension) is in
``shared/research/real-transformers.md``; nothing of transformers is committed here. transformers 5.18.0
runs from its own venv on PyTorch 2.13 CPU (README, "Newer transformers"); there no ``--transformers-src``
is needed, the venv's release is imported.
"""

from __future__ import annotations

import sys
from typing import Any, Optional

import torch
from torch import nn

_LOADED: dict = {}


def load(src: Optional[str], version: str):
    """Imports transformers from ``src`` (an os.pathsep-separated list) and checks its version."""
    if "module" in _LOADED:
        mod = _LOADED["module"]
    else:
        if src:
            for path in reversed(src.split(":")):
                if path and path not in sys.path:
                    sys.path.insert(0, path)
        import transformers  # noqa: E402  (imported only when an hf case runs)

        transformers.logging.set_verbosity_error()
        _LOADED["module"] = transformers
        mod = transformers
    if mod.__version__ != version:
        raise SystemExit(
            f"case needs transformers {version}, but {mod.__version__} was imported from {mod.__file__}; "
            "run the cases of one release per process (--transformers-src for that release)"
        )
    return mod


def build_model(case: dict, src: Optional[str]) -> nn.Module:
    """The case's model from the real modeling code (the caller seeds torch first)."""
    transformers = load(src, case["transformers"])
    config = dict(case["config"])
    model_type = config.pop("model_type")
    cfg = transformers.AutoConfig.for_model(model_type, **config)
    attn = case.get("attention", "eager")
    kwargs = {}
    if "experts" in case:  # transformers >= 5: "eager" (loop over experts) or "grouped_mm" (5.x default)
        kwargs["experts_implementation"] = case["experts"]
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=attn, **kwargs)
    bad = {str(p.dtype) for p in model.parameters() if p.dtype != torch.float32}
    if bad:
        raise SystemExit(f"{case['id']}: parameters are {sorted(bad)}, not float32 (set the config's dtype)")
    return model


def implementation(model: nn.Module) -> dict:
    """What transformers >= 5 resolved the attention and experts implementations to ({} on 4.x)."""
    cfg = model.config
    if not hasattr(cfg, "_experts_implementation"):
        return {}
    out = {"attention": cfg._attn_implementation}
    if routing_recorder(model, probe=True):
        out["experts"] = cfg._experts_implementation
    return out


class _Routing:
    """Tokens each expert received in the forwards run while attached.

    4.x: ``experts`` is an ``nn.ModuleList`` looped over in order; each expert is called (even with
    no token in 4.40.2) with ``[n, hidden]``: a forward pre-hook reads ``n`` (no tensor op).
    5.x: ``experts`` is one module with 3-D weights called as ``experts(hidden, top_k_index,
    top_k_weights)``; a forward pre-hook counts ``top_k_index`` with ``tolist()`` (no allocation,
    no aten op). Counts are per (token, k) pair: a token routed to an expert once counts 1.
    """

    def __init__(self, model: nn.Module):
        self.handles = []
        self.layers: dict = {}
        self.order: list = []
        for path, m in model.named_modules():
            if not path.endswith("experts"):
                continue
            if isinstance(m, nn.ModuleList):
                self.order.append(path)
                for i, e in enumerate(m):
                    self.handles.append(e.register_forward_pre_hook(self._per_expert(path, i, len(m))))
            elif hasattr(m, "num_experts") and (hasattr(m, "gate_up_proj") or hasattr(m, "up_proj")):
                self.order.append(path)
                self.handles.append(m.register_forward_pre_hook(self._fused(path, int(m.num_experts)), with_kwargs=True))

    def _row(self, path, n):
        row = self.layers.get(path)
        if row is None:
            row = self.layers[path] = {"calls": 0, "perExpert": [0] * n}
        return row

    def _per_expert(self, path, i, n):
        def hook(mod, args):
            row = self._row(path, n)
            if i == 0:
                row["calls"] += 1
            row["perExpert"][i] += int(args[0].shape[0])

        return hook

    def _fused(self, path, n):
        def hook(mod, args, kwargs):
            idx = args[1] if len(args) > 1 else kwargs["top_k_index"]
            row = self._row(path, n)
            row["calls"] += 1
            row["tokens"] = row.get("tokens", 0) + int(idx.shape[0])
            row["topK"] = int(idx.shape[-1])
            counts = row["perExpert"]
            for tok in idx.tolist():
                for e in tok:
                    if 0 <= e < n:
                        counts[e] += 1

        return hook

    def reset(self):
        self.layers = {}

    def snapshot(self) -> dict:
        return {p: dict(self.layers[p]) for p in self.order if p in self.layers}

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []


def routing_recorder(model: nn.Module, probe: bool = False):
    """A ``_Routing`` attached to the model's MoE layers, or None for a dense model."""
    rec = _Routing(model)
    if not rec.order:
        rec.remove()
        return None
    if probe:
        rec.remove()
        return True
    return rec


def vocab_size(model: nn.Module) -> int:
    return int(model.config.vocab_size)


def forward(case: dict, model: nn.Module, ids: torch.Tensor, labels: Optional[torch.Tensor], use_cache: Optional[bool]) -> Any:
    """``model(input_ids=ids, labels=labels)``: the ModelOutput (loss, logits, past_key_values).

    ``use_cache`` None leaves the model's own default (``config.use_cache``), as a user's call does.
    """
    kwargs = {}
    if use_cache is not None:
        kwargs["use_cache"] = use_cache
    if labels is not None:
        kwargs["labels"] = labels
    return model(input_ids=ids, **kwargs)


def env_info() -> dict:
    transformers = _LOADED.get("module")
    if transformers is None:
        return {}
    return {"transformers": transformers.__version__}
