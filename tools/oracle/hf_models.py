"""Causal LMs built by the real, unmodified Hugging Face transformers code, for the oracle.

Cases with ``"model": "hf"`` name the transformers release they are measured on
(``"transformers": "4.40.2"``) and a config.json-style ``config``. The model is
``AutoModelForCausalLM.from_config(AutoConfig.for_model(**config), attn_implementation=...)``
with random weights (seed 0); nothing is downloaded.

transformers is not installed system-wide: the oracle is given the directories that hold a
release's ``transformers`` package (and its pure-Python dependencies) with
``--transformers-src DIR[:DIR...]``. How such a tree was made on this machine (a fork that
carries the release tags, huggingface_hub, a stub for the safetensors extension) is in
``shared/research/real-transformers.md``; nothing of transformers is committed here.
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
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=attn)
    return model


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
