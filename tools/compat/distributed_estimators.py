#!/usr/bin/python3
"""Ground-truth fixtures for three published closed-form memory estimators.

This driver runs the *real* upstream functions and records what they return and
print. No DeepSpeed or Megatron-LM code lives in this repository: at run time
the script reads the source of each file with ``git --git-dir DIR show
COMMIT:PATH`` from a local mirror, keeps only the named top-level definitions
(selected with ``ast``), compiles them under their upstream file name (so line
numbers in tracebacks are upstream line numbers) and executes them in a small
namespace that stubs their imports.

Estimators covered:

* DeepSpeed ``deepspeed/runtime/zero/stage_1_and_2.py``:
  ``estimate_zero2_model_states_mem_needs`` and ``..._all_cold``.
* DeepSpeed ``deepspeed/runtime/zero/stage3.py``:
  ``estimate_zero3_model_states_mem_needs`` and ``..._all_cold``.
  (``OffloadDeviceEnum``, used in the printed tables, is taken from
  ``deepspeed/runtime/zero/offload_config.py``.)
* Megatron-LM ``megatron/training/theoretical_memory_usage.py``:
  ``compute_weight_and_optimizer_memory``, ``compute_activation_memory``,
  ``compute_activation_memory_without_sp``, ``report_theoretical_memory``
  (with ``is_hybrid_model`` / ``print_rank_0`` from
  ``megatron/training/utils/common_utils.py`` and ``vocab_size_with_padding``
  from ``megatron/core/tokenizers/utils/build_tokenizer.py``).
* The ZeRO paper's Figure 1 figures (arXiv 1910.02054): plain arithmetic of
  the paper's formulas, not code.

Usage (Debian ``/usr/bin/python3`` 3.11; nothing from PyPI is needed)::

    /usr/bin/python3 tools/compat/distributed_estimators.py \\
        --deepspeed-git /work/.mirror/deepspeedai+DeepSpeed/repo \\
        --megatron-git /work/.mirror/NVIDIA+Megatron-LM/repo

The mirrors come from ``fetch github:deepspeedai/DeepSpeed`` and
``fetch github:NVIDIA/Megatron-LM`` (or any clone: pass its ``.git``). The
environment variables ``DEEPSPEED_GIT`` and ``MEGATRON_GIT`` work instead of
the flags. The commits default to the pinned ones below; ``--check`` compares
with the file on disk instead of writing it.

Writes ``test/fixtures/distributed/estimators.json``. The formulas are
written up in ``/work/notes/estimators.md`` (outside the repository).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import enum
import hashlib
import io
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import types

DEEPSPEED_REPO = "deepspeedai/DeepSpeed"
MEGATRON_REPO = "NVIDIA/Megatron-LM"
# Commits the committed fixture was produced from (both 2026-08-22).
DEEPSPEED_COMMIT = "edaa7221267243c7be7fb49c5d5f5c4fb97b4641"
MEGATRON_COMMIT = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"

DS_STAGE12 = "deepspeed/runtime/zero/stage_1_and_2.py"
DS_STAGE3 = "deepspeed/runtime/zero/stage3.py"
DS_OFFLOAD_CONFIG = "deepspeed/runtime/zero/offload_config.py"
DS_MEMORY_DOCS = "docs/code-docs/source/memory.rst"
MG_TMU = "megatron/training/theoretical_memory_usage.py"
MG_COMMON_UTILS = "megatron/training/utils/common_utils.py"
MG_BUILD_TOKENIZER = "megatron/core/tokenizers/utils/build_tokenizer.py"

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUT = os.path.join(REPO_ROOT, "test", "fixtures", "distributed", "estimators.json")


# --------------------------------------------------------------------------
# Reading upstream source
# --------------------------------------------------------------------------

def git(gitdir: str, *args: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", gitdir, *args], check=True, capture_output=True, text=True
    ).stdout


def resolve_commit(gitdir: str, rev: str) -> str:
    return git(gitdir, "rev-parse", "--verify", rev + "^{commit}").strip()


class Upstream:
    """One file at one commit, and the definitions taken out of it."""

    def __init__(self, repo: str, gitdir: str, commit: str, path: str):
        self.repo, self.commit, self.path = repo, commit, path
        self.source = git(gitdir, "show", f"{commit}:{path}")
        self.tree = ast.parse(self.source, filename=path)
        self.extracted: list[dict] = []

    def _find(self, name: str) -> ast.stmt:
        for node in self.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if node.name == name:
                    return node
            elif isinstance(node, ast.Assign):
                if any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                    return node
        raise LookupError(f"{self.path}@{self.commit[:8]}: no top-level definition {name!r}")

    def load(self, names: list[str], namespace: dict) -> dict:
        """Compile only the named top-level definitions into ``namespace``."""
        nodes = [self._find(n) for n in names]
        for name, node in zip(names, nodes):
            segment = ast.get_source_segment(self.source, node)
            self.extracted.append({
                "name": name,
                "lines": [node.lineno, node.end_lineno],
                "sha256": hashlib.sha256(segment.encode()).hexdigest(),
            })
        module = ast.Module(body=nodes, type_ignores=[])
        code = compile(module, f"{self.repo}@{self.commit[:8]}:{self.path}", "exec")
        exec(code, namespace)
        return namespace

    def describe(self) -> dict:
        return {
            "repository": self.repo,
            "commit": self.commit,
            "path": self.path,
            "sha256": hashlib.sha256(self.source.encode()).hexdigest(),
            "definitions": self.extracted,
        }


# --------------------------------------------------------------------------
# Helpers for recording
# --------------------------------------------------------------------------

def pytype(v):
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if v is None:
        return "None"
    if isinstance(v, (list, tuple)):
        return [pytype(x) for x in v]
    return type(v).__name__


def jsonable(v):
    if isinstance(v, tuple):
        return [jsonable(x) for x in v]
    if isinstance(v, list):
        return [jsonable(x) for x in v]
    if isinstance(v, dict):
        return {k: jsonable(x) for k, x in v.items()}
    if isinstance(v, float) and not math.isfinite(v):
        raise ValueError(f"non-finite float {v!r}")
    return v


def capture(fn, *args, **kwargs):
    """Call fn, returning (result, stdout text)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        result = fn(*args, **kwargs)
    return result, buf.getvalue()


def printed_lines(stdout: str) -> list[str]:
    lines = stdout.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last print
    return lines


class CallRecorder:
    """Wraps a namespace function so the calls a wrapper makes are recorded."""

    def __init__(self, fn):
        self.fn, self.calls = fn, []

    def __call__(self, *args, **kwargs):
        result = self.fn(*args, **kwargs)
        self.calls.append({
            "inputs": jsonable(kwargs),
            "positional": jsonable(list(args)),
            "output": jsonable(result),
            "outputTypes": pytype(result),
        })
        return result


# --------------------------------------------------------------------------
# DeepSpeed
# --------------------------------------------------------------------------

def legacy_enum_format(enum_cls):
    """A copy of ``enum_cls`` whose format() acts as on Python <= 3.10.

    Python 3.11 changed ``Enum.__format__`` for mixed-in enums such as
    ``class OffloadDeviceEnum(str, Enum)``: ``f"{OffloadDeviceEnum.cpu:4}"`` is
    ``'OffloadDeviceEnum.cpu'`` on 3.11+, and was ``'cpu '`` (the str value,
    formatted with the spec) on 3.8-3.10, which is what DeepSpeed's docs show.
    This subclass-free copy reproduces the old rule: format the value.
    """
    members = {m.name: m.value for m in enum_cls}
    legacy = enum.Enum(enum_cls.__name__, members, type=str)
    legacy.__format__ = lambda self, spec: format(self.value, spec)
    return legacy


def load_deepspeed(gitdir: str, commit: str):
    offload = Upstream(DEEPSPEED_REPO, gitdir, commit, DS_OFFLOAD_CONFIG)
    enum_ns = offload.load(["OffloadDeviceEnum"], {"__name__": "deepspeed.runtime.zero.offload_config",
                                                  "Enum": enum.Enum})
    OffloadDeviceEnum = enum_ns["OffloadDeviceEnum"]

    s12 = Upstream(DEEPSPEED_REPO, gitdir, commit, DS_STAGE12)
    ns12 = s12.load(["estimate_zero2_model_states_mem_needs",
                     "estimate_zero2_model_states_mem_needs_all_cold"],
                    {"__name__": "deepspeed.runtime.zero.stage_1_and_2",
                     "OffloadDeviceEnum": OffloadDeviceEnum})
    s3 = Upstream(DEEPSPEED_REPO, gitdir, commit, DS_STAGE3)
    ns3 = s3.load(["estimate_zero3_model_states_mem_needs",
                   "estimate_zero3_model_states_mem_needs_all_cold"],
                  {"__name__": "deepspeed.runtime.zero.stage3",
                   "OffloadDeviceEnum": OffloadDeviceEnum})
    docs = git(gitdir, "show", f"{commit}:{DS_MEMORY_DOCS}")
    return {"offload": offload, "s12": s12, "s3": s3, "ns12": ns12, "ns3": ns3,
            "OffloadDeviceEnum": OffloadDeviceEnum, "docs": docs}


def run_all_cold(ns: dict, outer: str, inner: str, enum_cls, kwargs: dict) -> dict:
    """Run an _all_cold wrapper twice: with the real enum (this interpreter's
    format rules) and with the <=3.10 format rule. Returns the record."""
    out = {}
    for key, cls in (("current", enum_cls), ("legacy", legacy_enum_format(enum_cls))):
        saved_fn, saved_enum = ns[inner], ns["OffloadDeviceEnum"]
        rec = CallRecorder(saved_fn)
        ns[inner], ns["OffloadDeviceEnum"] = rec, cls
        try:
            result, stdout = capture(ns[outer], **kwargs)
        finally:
            ns[inner], ns["OffloadDeviceEnum"] = saved_fn, saved_enum
        out[key] = {"result": result, "stdout": stdout, "calls": rec.calls}
    assert out["current"]["calls"] == out["legacy"]["calls"]
    assert out["current"]["result"] is None
    return {
        "returns": None,
        "printed": printed_lines(out["current"]["stdout"]),
        "printedPython310": printed_lines(out["legacy"]["stdout"]),
        "innerCalls": out["current"]["calls"],
    }


def docs_blocks(docs: str) -> list[list[str]]:
    """The example outputs in memory.rst: each block starts at 'Estimated memory'
    and runs to the next blank line; the 4-space code indent is removed."""
    lines = docs.split("\n")
    blocks, i = [], 0
    while i < len(lines):
        if lines[i].strip().startswith("Estimated memory needed"):
            block = []
            while i < len(lines) and lines[i].strip():
                block.append(lines[i][4:] if lines[i].startswith("    ") else lines[i])
                i += 1
            blocks.append(block)
        i += 1
    return blocks


def t5_3b_param_counts():
    """t5-3b parameter counts from its architecture (our arithmetic, used to
    reproduce the docs' *_all_live* example without loading the model).
    Config: d_model 1024, d_ff 16384, num_heads 32, d_kv 128, 24 encoder and
    24 decoder layers, vocab 32128, 32 relative-attention buckets, tied LM head."""
    d, ff, heads, dkv, layers, vocab, buckets = 1024, 16384, 32, 128, 24, 32128, 32
    attn = 4 * d * heads * dkv          # q, k, v, o, no biases
    mlp = 2 * d * ff                    # wi, wo, no biases
    enc_layer = attn + mlp + 2 * d      # 2 RMS-style layer norms (weight only)
    dec_layer = 2 * attn + mlp + 3 * d
    shared = vocab * d
    rel_bias = buckets * heads          # once in the encoder, once in the decoder
    total = shared + layers * (enc_layer + dec_layer) + 2 * rel_bias + 2 * d
    largest = max(shared, d * ff, d * heads * dkv, rel_bias)
    return total, largest


ZERO2_CONFIGS = [
    # (id, kwargs for the estimator, note)
    ("t5-3b-docs-cold", dict(total_params=2851e6, num_gpus_per_node=8, num_nodes=1),
     "docs/code-docs/source/memory.rst example (_all_cold, total_params=2851e6)"),
    ("zero-paper-7.5B-8x8", dict(total_params=7.5e9, num_gpus_per_node=8, num_nodes=8),
     "the ZeRO paper's 7.5B model on 64 GPUs (8 nodes x 8)"),
    ("125M-1gpu-defaults", dict(total_params=125_000_000),
     "all defaults: 1 GPU, 1 node, factor 1.5"),
    ("1.3B-2gpu", dict(total_params=1_300_000_000, num_gpus_per_node=2, num_nodes=1),
     "4*total_gpus=8 < 16: the offload CPU max() picks 16"),
    ("odd-1234567891-4x3-factor1.25", dict(total_params=1_234_567_891, num_gpus_per_node=4,
                                          num_nodes=3, additional_buffer_factor=1.25),
     "params not divisible by GPUs (int() truncation), 3 nodes, non-default factor"),
    ("70B-16x8", dict(total_params=70_000_000_000, num_gpus_per_node=8, num_nodes=16),
     "large model, 128 GPUs"),
    ("format-ties-2^26", dict(total_params=2 ** 26),
     "GiB values 0.125 and 0.375 exactly: Python's '.2f' rounds exact ties half to even "
     "(0.12, 0.38), unlike JavaScript's toFixed (0.13, 0.38)"),
]

ZERO3_CONFIGS = [
    ("t5-3b-docs-cold", dict(total_params=2851e6, largest_layer_params=32e6,
                             num_gpus_per_node=8, num_nodes=1),
     "docs/code-docs/source/memory.rst example (_all_cold)"),
    ("zero-paper-7.5B-8x8", dict(total_params=7.5e9, largest_layer_params=4096 * 4 * 4096,
                                 num_gpus_per_node=8, num_nodes=8),
     "the ZeRO paper's 7.5B on 64 GPUs; largest layer = a 4096x16384 MLP weight (our choice)"),
    ("125M-1gpu-defaults", dict(total_params=125_000_000, largest_layer_params=38_597_376),
     "defaults (1 GPU, 1 node); largest layer = GPT-2 token embedding 50257x768"),
    ("odd-1234567891-4x3-factor1.25", dict(total_params=1_234_567_891, largest_layer_params=65_536_001,
                                          num_gpus_per_node=4, num_nodes=3,
                                          additional_buffer_factor=1.25),
     "int() truncation, 3 nodes (gpus_factor 1/3), non-default factor"),
    ("70B-16x8", dict(total_params=70_000_000_000, largest_layer_params=8192 * 128256,
                      num_gpus_per_node=8, num_nodes=16),
     "Llama-3-70B-like: largest layer = embedding 128256x8192; 16 nodes so 18/nodes < 4*gpus"),
    ("7B-1node-2gpus", dict(total_params=7_000_000_000, largest_layer_params=4096 * 32000,
                            num_gpus_per_node=2, num_nodes=1),
     "4*gpus_per_node=8 < 16 and < 18: the zero_init=0 max() picks 16/18"),
    ("format-ties-2^26", dict(total_params=2 ** 26, largest_layer_params=2 ** 25),
     "largest_layer_memory = 0.125 GiB exactly: printed 0.12 (round half to even)"),
]


def deepspeed_cases(ds) -> tuple[list, dict]:
    cases = []
    OffloadDeviceEnum = ds["OffloadDeviceEnum"]
    f2 = ds["ns12"]["estimate_zero2_model_states_mem_needs"]
    f3 = ds["ns3"]["estimate_zero3_model_states_mem_needs"]

    def direct(tool, fn, name, cid, kwargs, note):
        result, stdout = capture(fn, **kwargs)
        assert stdout == ""
        cases.append({
            "id": f"{tool}/{cid}/direct" + "".join(
                f"/{k}={int(kwargs[k])}"
                for k in ("cpu_offload", "cpu_offload_params", "zero_init") if k in kwargs),
            "tool": tool,
            "function": name,
            "note": note,
            "inputs": jsonable(kwargs),
            "inputsRepr": {k: repr(v) for k, v in kwargs.items()},
            "returns": jsonable(result),
            "returnTypes": pytype(result),
            "printed": [],
        })

    def cold(tool, ns, outer, inner, cid, kwargs, note):
        rec = run_all_cold(ns, outer, inner, OffloadDeviceEnum, kwargs)
        case = {
            "id": f"{tool}/{cid}/all_cold",
            "tool": tool,
            "function": outer,
            "note": note,
            "inputs": jsonable(kwargs),
            "inputsRepr": {k: repr(v) for k, v in kwargs.items()},
        }
        case.update(rec)
        cases.append(case)
        return case

    # ZeRO-2
    for cid, kw, note in ZERO2_CONFIGS:
        for off in (True, False):
            direct("deepspeed-zero2", f2, "estimate_zero2_model_states_mem_needs", cid,
                   dict(kw, cpu_offload=off), note)
        cold("deepspeed-zero2", ds["ns12"], "estimate_zero2_model_states_mem_needs_all_cold",
             "estimate_zero2_model_states_mem_needs", cid, kw, note)
    # ZeRO-3: every combination the function accepts (cpu_offload False with
    # cpu_offload_params True is skipped by _all_cold but accepted directly).
    for cid, kw, note in ZERO3_CONFIGS:
        for off in (True, False):
            for off_p in (True, False):
                for zi in (True, False):
                    direct("deepspeed-zero3", f3, "estimate_zero3_model_states_mem_needs", cid,
                           dict(kw, cpu_offload=off, cpu_offload_params=off_p, zero_init=zi), note)
        cold("deepspeed-zero3", ds["ns3"], "estimate_zero3_model_states_mem_needs_all_cold",
             "estimate_zero3_model_states_mem_needs", cid, kw, note)

    # The docs' *_all_live* examples, reproduced through _all_cold with the
    # t5-3b counts derived from its architecture.
    total, largest = t5_3b_param_counts()
    live_note = ("reproduces the docs' _all_live(t5-3b) example: total_params and "
                 "largest_layer_params derived by this script from the t5-3b architecture "
                 "(not by loading the model)")
    z2_live = cold("deepspeed-zero2", ds["ns12"], "estimate_zero2_model_states_mem_needs_all_cold",
                   "estimate_zero2_model_states_mem_needs", "t5-3b-docs-live",
                   dict(total_params=total, num_gpus_per_node=8, num_nodes=1), live_note)
    z3_live = cold("deepspeed-zero3", ds["ns3"], "estimate_zero3_model_states_mem_needs_all_cold",
                   "estimate_zero3_model_states_mem_needs", "t5-3b-docs-live",
                   dict(total_params=total, largest_layer_params=largest,
                        num_gpus_per_node=8, num_nodes=1), live_note)

    # Compare with the figures printed in memory.rst.
    blocks = docs_blocks(ds["docs"])
    assert len(blocks) == 4, f"expected 4 example outputs in {DS_MEMORY_DOCS}, got {len(blocks)}"
    by_id = {c["id"]: c for c in cases}
    targets = [
        ("ZeRO-2 _all_live(t5-3b)", z2_live),
        ("ZeRO-2 _all_cold(2851e6)", by_id["deepspeed-zero2/t5-3b-docs-cold/all_cold"]),
        ("ZeRO-3 _all_live(t5-3b)", z3_live),
        ("ZeRO-3 _all_cold(2851e6, 32e6)", by_id["deepspeed-zero3/t5-3b-docs-cold/all_cold"]),
    ]
    comparison = []
    for (label, case), block in zip(targets, blocks):
        rows = []
        for k, doc_line in enumerate(block):
            got = case["printedPython310"][k] if k < len(case["printedPython310"]) else None
            rows.append({
                "docs": doc_line,
                "code": got,
                "match": got is not None and got.rstrip() == doc_line.rstrip(),
            })
        comparison.append({
            "example": label,
            "caseId": case["id"],
            "allMatch": all(r["match"] for r in rows) and len(block) == len(case["printedPython310"]),
            "lines": rows,
        })
    return cases, {
        "file": DS_MEMORY_DOCS,
        "commit": ds["s12"].commit,
        "comparedWith": "printedPython310 (the docs were produced with the <=3.10 enum format); "
                        "trailing whitespace ignored",
        "examples": comparison,
    }


# --------------------------------------------------------------------------
# Megatron-LM
# --------------------------------------------------------------------------

class RecordingNamespace(types.SimpleNamespace):
    """SimpleNamespace that records every attribute read."""

    def __getattribute__(self, name):
        if not name.startswith("__"):
            object.__getattribute__(self, "__dict__").setdefault("_reads", [])
            reads = object.__getattribute__(self, "__dict__")["_reads"]
            if name != "_reads" and name not in reads:
                reads.append(name)
        return object.__getattribute__(self, name)


# Defaults that megatron/training/arguments.py (and the TransformerConfig /
# ModelParallelConfig dataclasses it turns into flags) give to every attribute
# the four functions read, at MEGATRON_COMMIT. None = derived in derive_args().
MEGATRON_DEFAULTS = {
    # TransformerConfig (megatron/core/transformer/transformer_config.py)
    "num_layers": None,             # required (argparse default None)
    "hidden_size": None,            # required
    "num_attention_heads": None,    # required
    "num_query_groups": 1,          # field metadata argparse default 1
    "ffn_hidden_size": None,        # derived (arguments.py l.1320-1329)
    "kv_channels": None,            # derived (arguments.py l.1331-1333)
    "normalization": "LayerNorm",
    "add_bias_linear": True,        # --disable-bias-linear stores False
    "multi_latent_attention": False,
    "moe_shared_expert_intermediate_size": None,
    "moe_shared_expert_gate": False,
    "moe_ffn_hidden_size": None,    # derived when num_experts is set (l.1650-1651)
    "moe_router_topk": 2,
    "moe_latent_size": None,
    "mtp_num_layers": None,
    "recompute_granularity": None,  # --recompute-activations sets 'selective' (l.607-608)
    # ModelParallelConfig (megatron/core/model_parallel_config.py)
    "tensor_model_parallel_size": 1,
    "pipeline_model_parallel_size": 1,
    "virtual_pipeline_model_parallel_size": None,  # derived (l.943-983)
    "sequence_parallel": False,     # forced False when TP == 1 (l.1432-1439)
    "expert_model_parallel_size": 1,
    "expert_tensor_parallel_size": None,  # None -> TP (l.587-588)
    # plain argparse flags in arguments.py
    "group_query_attention": False,
    "swiglu": False,
    "untie_embeddings_and_output_weights": False,
    "num_experts": None,
    "moe_layer_freq": 1,
    "q_lora_rank": None,
    "kv_lora_rank": 32,
    "qk_head_dim": 128,
    "qk_pos_emb_head_dim": 64,
    "v_head_dim": 128,
    "use_distributed_optimizer": False,
    "seq_length": None,
    "micro_batch_size": None,       # TrainingConfig
    "hybrid_layer_pattern": None,
    "make_vocab_size_divisible_by": 128,
    # environment
    "world_size": 1,                # WORLD_SIZE (l.145)
    "rank": 0,                      # RANK (l.144)
}

# Inputs that are CLI-level only (used to derive attributes, then dropped).
CLI_ONLY = ("vocab_size", "num_layers_per_virtual_pipeline_stage",
            "num_virtual_stages_per_pipeline_rank", "recompute_activations",
            "context_parallel_size")


def derive_args(cli: dict, vocab_size_with_padding) -> dict:
    """What arguments.py / the tokenizer builder leave in ``args`` for the
    attributes these functions read. Mirrors, at MEGATRON_COMMIT:
    data_parallel_size l.441-448, expert_tensor_parallel_size l.587-588,
    recompute_activations l.607-608, virtual pipeline l.960-983,
    ffn_hidden_size l.1320-1329, kv_channels l.1331-1333, sequence_parallel
    l.1432-1439, moe_ffn_hidden_size l.1650-1651, padded_vocab_size
    build_tokenizer.py l.133-152."""
    unknown = set(cli) - set(MEGATRON_DEFAULTS) - set(CLI_ONLY)
    assert not unknown, unknown
    a = dict(MEGATRON_DEFAULTS)
    a.update({k: v for k, v in cli.items() if k not in CLI_ONLY})
    tp, pp = a["tensor_model_parallel_size"], a["pipeline_model_parallel_size"]
    cp = cli.get("context_parallel_size", 1)
    assert a["world_size"] % (tp * pp * cp) == 0
    a["data_parallel_size"] = a["world_size"] // (tp * pp * cp)  # gtp_weight_remat_size = 1
    if a["expert_tensor_parallel_size"] is None:
        a["expert_tensor_parallel_size"] = tp
    if cli.get("recompute_activations"):
        a["recompute_granularity"] = "selective"
    if cli.get("num_layers_per_virtual_pipeline_stage") is not None:
        per_stage = a["num_layers"] // pp
        assert a["num_layers"] % pp == 0 and per_stage % cli["num_layers_per_virtual_pipeline_stage"] == 0
        a["virtual_pipeline_model_parallel_size"] = per_stage // cli["num_layers_per_virtual_pipeline_stage"]
    elif cli.get("num_virtual_stages_per_pipeline_rank") is not None:
        a["virtual_pipeline_model_parallel_size"] = cli["num_virtual_stages_per_pipeline_rank"]
    else:
        a["virtual_pipeline_model_parallel_size"] = None
    if a["virtual_pipeline_model_parallel_size"] == 1:
        a["virtual_pipeline_model_parallel_size"] = None
    if a["ffn_hidden_size"] is None:
        if a["swiglu"]:
            a["ffn_hidden_size"] = int((4 * a["hidden_size"] * 2 / 3) / 64) * 64
        else:
            a["ffn_hidden_size"] = 4 * a["hidden_size"]
    if a["kv_channels"] is None:
        assert a["hidden_size"] % a["num_attention_heads"] == 0
        a["kv_channels"] = a["hidden_size"] // a["num_attention_heads"]
    if tp == 1:
        a["sequence_parallel"] = False
    if a["num_experts"] is not None and a["moe_ffn_hidden_size"] is None:
        a["moe_ffn_hidden_size"] = a["ffn_hidden_size"]
    a["padded_vocab_size"] = vocab_size_with_padding(
        cli["vocab_size"], types.SimpleNamespace(**a), logging_enabled=False)
    return a


MEGATRON_CONFIGS = [
    # (id, cli, num_microbatches, note)
    ("gpt-1.3b-tp2-nosp", dict(
        num_layers=24, hidden_size=2048, num_attention_heads=16, seq_length=2048,
        micro_batch_size=4, vocab_size=50257, tensor_model_parallel_size=2, world_size=8),
     4, "TP only, no SP, no recompute, tied embeddings, LayerNorm + biases, "
        "no distributed optimizer -> without_sp path"),
    ("llama2-7b-like-tp4-sp-selective-distopt", dict(
        num_layers=32, hidden_size=4096, num_attention_heads=32, seq_length=4096,
        micro_batch_size=1, vocab_size=32000, tensor_model_parallel_size=4, world_size=32,
        sequence_parallel=True, recompute_activations=True, use_distributed_optimizer=True,
        swiglu=True, normalization="RMSNorm", add_bias_linear=False,
        untie_embeddings_and_output_weights=True),
     16, "TP+SP+selective (SP path), SwiGLU with derived ffn_hidden_size, RMSNorm, "
         "untied embeddings with PP=1, distributed optimizer"),
    ("gpt-20b-like-tp2-pp4-vpp5", dict(
        num_layers=40, hidden_size=5120, num_attention_heads=40, seq_length=2048,
        micro_batch_size=1, vocab_size=50257, tensor_model_parallel_size=2,
        pipeline_model_parallel_size=4, num_layers_per_virtual_pipeline_stage=2,
        world_size=64, sequence_parallel=True, recompute_granularity="selective",
        use_distributed_optimizer=True),
     32, "PP=4 interleaved (VPP=5 from --num-layers-per-virtual-pipeline-stage 2), "
         "TP+SP+selective, distributed optimizer"),
    ("gpt-pp8-m4-untied-nosp", dict(
        num_layers=48, hidden_size=6144, num_attention_heads=48, seq_length=2048,
        micro_batch_size=2, vocab_size=50257, tensor_model_parallel_size=4,
        pipeline_model_parallel_size=8, world_size=64,
        untie_embeddings_and_output_weights=True),
     4, "PP=8 non-interleaved with 4 micro-batches (min(1, m/p) = 0.5), no SP, "
        "untied embeddings with PP>1 (output layer not counted), no distributed optimizer"),
    ("llama3-8b-gqa-tp8-sp-full-recompute", dict(
        num_layers=32, hidden_size=4096, num_attention_heads=32, group_query_attention=True,
        num_query_groups=8, ffn_hidden_size=14336, seq_length=8192, micro_batch_size=1,
        vocab_size=128256, tensor_model_parallel_size=8, world_size=64,
        sequence_parallel=True, recompute_granularity="full", use_distributed_optimizer=True,
        swiglu=True, normalization="RMSNorm", add_bias_linear=False,
        untie_embeddings_and_output_weights=True),
     4, "GQA (8 groups), SwiGLU with explicit ffn, SP with *full* recompute -> "
        "without_sp path despite SP"),
    ("gpt2-small-tp1-sp-requested", dict(
        num_layers=12, hidden_size=768, num_attention_heads=12, seq_length=1024,
        micro_batch_size=8, vocab_size=50257, world_size=1, sequence_parallel=True,
        recompute_activations=True, use_distributed_optimizer=True),
     1, "TP=1: arguments.py turns SP off, so the without_sp path runs even with selective; "
        "distributed optimizer with DP=1 (6 + 12/1 = 18 bytes)"),
    ("gpt-350m-pp2-microbatches-none", dict(
        num_layers=24, hidden_size=1024, num_attention_heads=16, seq_length=1024,
        micro_batch_size=2, vocab_size=50257, pipeline_model_parallel_size=2, world_size=2),
     None, "num_microbatches=None as tools/report_theoretical_memory.py passes it: "
           "no min(1, m/p) discount"),
    ("mixtral-like-moe-ep8-tp2-sp", dict(
        num_layers=32, hidden_size=4096, num_attention_heads=32, group_query_attention=True,
        num_query_groups=8, ffn_hidden_size=14336, num_experts=8, moe_router_topk=2,
        expert_model_parallel_size=8, seq_length=4096, micro_batch_size=1, vocab_size=32000,
        tensor_model_parallel_size=2, world_size=64, sequence_parallel=True,
        recompute_granularity="selective", use_distributed_optimizer=True, swiglu=True,
        normalization="RMSNorm", add_bias_linear=False,
        untie_embeddings_and_output_weights=True),
     8, "MoE: 8 experts, top-2, EP=8, ETP defaults to TP=2 (expert DP = 64/(2*8) = 4)"),
    ("deepseek-v2-lite-like-mla-moe-mtp", dict(
        num_layers=27, hidden_size=2048, num_attention_heads=16, multi_latent_attention=True,
        kv_lora_rank=512, qk_head_dim=128, qk_pos_emb_head_dim=64, v_head_dim=128,
        ffn_hidden_size=10944, num_experts=64, moe_ffn_hidden_size=1408, moe_router_topk=6,
        moe_shared_expert_intermediate_size=2816, moe_layer_freq=[0] + [1] * 26,
        mtp_num_layers=1, expert_model_parallel_size=8, seq_length=4096, micro_batch_size=1,
        vocab_size=102400, world_size=8, swiglu=True, normalization="RMSNorm",
        add_bias_linear=False, untie_embeddings_and_output_weights=True,
        use_distributed_optimizer=True, recompute_activations=True),
     8, "MLA (q_lora_rank None), MoE with list moe_layer_freq and shared experts, MTP=1, TP=1"),
    ("tiny-format-tie", dict(
        num_layers=2, hidden_size=256, num_attention_heads=4, ffn_hidden_size=1152,
        seq_length=256, micro_batch_size=1, vocab_size=1000),
     1, "synthetic: SP-path per-layer print is exactly 2.25 MB -> '2.2' (round half to even); "
        "padded vocab 1000 -> 1024"),
    ("hybrid-mamba-unsupported", dict(
        num_layers=4, hidden_size=1024, num_attention_heads=16, seq_length=1024,
        micro_batch_size=1, vocab_size=50257, hybrid_layer_pattern="M*M*"),
     1, "hybrid_layer_pattern set: report_theoretical_memory prints a notice and returns None"),
]


def load_megatron(gitdir: str, commit: str):
    tmu = Upstream(MEGATRON_REPO, gitdir, commit, MG_TMU)
    utils = Upstream(MEGATRON_REPO, gitdir, commit, MG_COMMON_UTILS)
    tok = Upstream(MEGATRON_REPO, gitdir, commit, MG_BUILD_TOKENIZER)
    uns = utils.load(["print_rank_0", "is_hybrid_model"],
                     {"__name__": "megatron.training.utils.common_utils",
                      "_safe_get_rank": lambda: 0})  # not distributed: rank 0
    tns = tok.load(["vocab_size_with_padding"],
                   {"__name__": "megatron.core.tokenizers.utils.build_tokenizer",
                    "math": math, "logger": None})
    ns = tmu.load(["NUM_BYTES_IN_MEGABYTE", "compute_weight_and_optimizer_memory",
                   "compute_activation_memory", "compute_activation_memory_without_sp",
                   "report_theoretical_memory"],
                  {"__name__": "megatron.training.theoretical_memory_usage", "math": math,
                   "print_rank_0": uns["print_rank_0"], "is_hybrid_model": uns["is_hybrid_model"]})
    return {"tmu": tmu, "utils": utils, "tok": tok, "ns": ns,
            "vocab_size_with_padding": tns["vocab_size_with_padding"]}


def megatron_cases(mg) -> list:
    ns = mg["ns"]
    cases = []
    for cid, cli, m, note in MEGATRON_CONFIGS:
        args = derive_args(cli, mg["vocab_size_with_padding"])
        calls = []
        plan = [
            ("compute_weight_and_optimizer_memory", {"verbose": True}),
            ("compute_activation_memory", {"num_microbatches": m, "verbose": True}),
            ("compute_activation_memory_without_sp", {"num_microbatches": m, "verbose": True}),
            ("report_theoretical_memory", {"num_microbatches": m, "verbose": True}),
        ]
        if cli.get("hybrid_layer_pattern") is not None:
            plan = plan[-1:]
        for fname, kwargs in plan:
            ns_args = RecordingNamespace(**copy.deepcopy(args))
            result, stdout = capture(ns[fname], ns_args, **kwargs)
            after = {k: v for k, v in vars(ns_args).items() if k != "_reads"}
            mutated = {k: {"before": args[k], "after": after[k]}
                       for k in args if after[k] != args[k]}
            calls.append({
                "function": fname,
                "kwargs": jsonable(kwargs),
                "returns": jsonable(result),
                "returnTypes": pytype(result),
                "printed": printed_lines(stdout),
                "argsRead": sorted(vars(ns_args)["_reads"]),
                "argsMutated": jsonable(mutated),
            })
        report = calls[-1]
        case = {
            "id": f"megatron/{cid}",
            "tool": "megatron",
            "function": "report_theoretical_memory",
            "note": note,
            "cli": jsonable(cli),
            "numMicrobatches": m,
            "args": jsonable(args),
            "calls": calls,
        }
        if report["returns"] is not None:
            w, act, tot = report["returns"]
            case["summaryMB"] = {"weightAndOptimizer": w, "activation": act, "total": tot}
            by = {c["function"]: c["returns"] for c in calls}
            case["bytes"] = {
                "weightAndOptimizer": by["compute_weight_and_optimizer_memory"],
                "activationSP": by["compute_activation_memory"],
                "activationWithoutSP": by["compute_activation_memory_without_sp"],
                "reportUsesSPPath": bool(args["sequence_parallel"]
                                         and args["recompute_granularity"] == "selective"),
            }
        cases.append(case)
    return cases


# --------------------------------------------------------------------------
# ZeRO paper (not code)
# --------------------------------------------------------------------------

def zero_paper_case() -> dict:
    psi, n, k = 7_500_000_000, 64, 12
    stages = {
        "baseline": {"formula": "(2+2+K)*Psi", "bytes": (2 + 2 + k) * psi, "paperGB": 120},
        "stage1_Pos": {"formula": "(2+2)*Psi + K*Psi/Nd", "bytes": 4 * psi + k * psi // n,
                       "paperGB": 31.4},
        "stage2_Pos+g": {"formula": "2*Psi + (2+K)*Psi/Nd", "bytes": 2 * psi + (2 + k) * psi // n,
                         "paperGB": 16.6},
        "stage3_Pos+g+p": {"formula": "(2+2+K)*Psi/Nd", "bytes": (2 + 2 + k) * psi // n,
                           "paperGB": 1.9},
    }
    for name, s in stages.items():
        exact = {"baseline": (16 * psi, 1), "stage1_Pos": (4 * psi * n + k * psi, n),
                 "stage2_Pos+g": (2 * psi * n + (2 + k) * psi, n),
                 "stage3_Pos+g+p": (16 * psi, n)}[name]
        assert exact[0] % exact[1] == 0 and exact[0] // exact[1] == s["bytes"], name
        s["GB"] = s["bytes"] / 1e9
        s["matchesPaperToPrintedDigits"] = round(s["GB"], 1) == s["paperGB"]
    return {
        "id": "zero-paper/7.5B-64gpus-K12",
        "tool": "zero-paper",
        "function": None,
        "note": ("From the paper, not from code: Rajbhandari et al., 'ZeRO: Memory Optimizations "
                 "Toward Training Trillion Parameter Models', arXiv 1910.02054 (SC'20), Figure 1 "
                 "and section 5 (mixed-precision Adam, K=12). GB = 1e9 bytes. Bytes are exact "
                 "integers here because 7.5e9 is divisible by 64."),
        "inputs": {"Psi": psi, "Nd": n, "K": k},
        "stages": stages,
    }


# --------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--deepspeed-git", default=os.environ.get("DEEPSPEED_GIT"),
                    help="git dir of a DeepSpeed mirror/clone (env DEEPSPEED_GIT)")
    ap.add_argument("--megatron-git", default=os.environ.get("MEGATRON_GIT"),
                    help="git dir of a Megatron-LM mirror/clone (env MEGATRON_GIT)")
    ap.add_argument("--deepspeed-commit", default=DEEPSPEED_COMMIT)
    ap.add_argument("--megatron-commit", default=MEGATRON_COMMIT)
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--check", action="store_true",
                    help="compare with the existing file instead of writing it")
    opts = ap.parse_args(argv)
    if not opts.deepspeed_git or not opts.megatron_git:
        ap.error("--deepspeed-git and --megatron-git (or DEEPSPEED_GIT / MEGATRON_GIT) are required")

    ds_commit = resolve_commit(opts.deepspeed_git, opts.deepspeed_commit)
    mg_commit = resolve_commit(opts.megatron_git, opts.megatron_commit)
    ds = load_deepspeed(opts.deepspeed_git, ds_commit)
    mg = load_megatron(opts.megatron_git, mg_commit)

    ds_cases, docs_check = deepspeed_cases(ds)
    cases = ds_cases + megatron_cases(mg) + [zero_paper_case()]
    ids = [c["id"] for c in cases]
    assert len(ids) == len(set(ids)), "duplicate case ids"

    counts = {}
    for c in cases:
        counts[c["tool"]] = counts.get(c["tool"], 0) + 1

    cmd = [sys.executable, os.path.relpath(os.path.abspath(__file__), REPO_ROOT)]
    # --check leaves the recorded command line as the one that wrote the file.
    cmd += [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--check"]
    doc = {
        "generatedBy": shlex.join(cmd),
        "generatedIn": "the repository root",
        "python": platform.python_version(),
        "description": ("Outputs of the real upstream estimator functions, run unmodified by "
                        "tools/compat/distributed_estimators.py. Numbers are exactly what the "
                        "functions return (Python int -> JSON integer, Python float -> shortest "
                        "round-trip decimal, so JSON.parse gives the same double). 'printed' is "
                        "what the call printed, one string per line, under this interpreter; "
                        "'printedPython310' (DeepSpeed tables) is the same call with Python<=3.10 "
                        "Enum.__format__ semantics, which is what DeepSpeed's docs show."),
        "upstream": {
            "deepspeed": {"repository": DEEPSPEED_REPO, "commit": ds_commit,
                          "files": [ds["offload"].describe(), ds["s12"].describe(),
                                    ds["s3"].describe()]},
            "megatron": {"repository": MEGATRON_REPO, "commit": mg_commit,
                         "files": [mg["tmu"].describe(), mg["utils"].describe(),
                                   mg["tok"].describe()]},
            "zeroPaper": {"reference": "arXiv 1910.02054, Figure 1 / section 5"},
        },
        "megatronDefaults": MEGATRON_DEFAULTS,
        "deepspeedDocsCheck": docs_check,
        "caseCounts": counts,
        "cases": cases,
    }
    text = json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=False) + "\n"
    if opts.check:
        with open(opts.out, encoding="utf-8") as f:
            old = f.read()
        if old != text:
            print(f"DIFFERS: {opts.out}", file=sys.stderr)
            return 1
        print(f"identical: {opts.out} ({len(cases)} cases {counts})")
        return 0
    os.makedirs(os.path.dirname(opts.out), exist_ok=True)
    with open(opts.out, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {opts.out}: {len(cases)} cases {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
