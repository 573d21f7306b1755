#!/usr/bin/python3
"""Ground-truth memory figures from real PyTorch (CPU, fp32) for vram-ts.

Run from the repository root:

    /usr/bin/python3 tools/oracle/oracle.py [--cases tools/oracle/cases.json] [--only ID,...]
                                            [--out test/fixtures/pytorch]
                                            [--traces test/fixtures/pytorch-traces]

For each case it writes <out>/<id>.json.  What every field means and how it is measured is in
tools/oracle/README.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
try:  # mobilenet cases only; a venv made for transformers (torch 2.x) need not have it
    import torchvision  # noqa: E402
except ImportError:  # pragma: no cover
    torchvision = None
from torch import nn  # noqa: E402
from torch.multiprocessing.reductions import StorageWeakRef  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import hf_models  # noqa: E402

try:  # the layer language uses torchvision's SqueezeExcitation
    import layers  # noqa: E402
except ImportError:  # pragma: no cover
    layers = None
import ref_transformers  # noqa: E402

THREADS = 1
OPTIMIZERS = ("sgd", "sgd_momentum", "adam", "adamw", "adam_foreach")
TRANSFORMERS = ("llama", "gpt2", "hf")
# Where the real transformers release of "hf" cases is imported from (--transformers-src).
HF_SRC = {"path": None}
ARGS_DEFAULT = {"cases": os.path.join("tools", "oracle", "cases.json"), "out": os.path.join("test", "fixtures", "pytorch")}
ARGS = dict(ARGS_DEFAULT)
# Mixture-of-experts cases ("hf"): tokens per expert in the forwards measured (hf_models._Routing).
# ORACLE_NO_ROUTING=1 turns the hooks off (checked: the figures are the same either way).
ROUTING: Dict[str, Any] = {}
ROUTING_ON = os.environ.get("ORACLE_NO_ROUTING") is None


def routing_recorder(case: dict, model: nn.Module):
    if case["model"] != "hf" or not ROUTING_ON:
        return None
    return hf_models.routing_recorder(model)

# --------------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------------


def storage_key(t: torch.Tensor) -> Tuple[int, int]:
    st = t.storage()
    return st.data_ptr(), st.nbytes()


def unique_storage_bytes(tensors) -> int:
    seen = {}
    for t in tensors:
        if t is None:
            continue
        ptr, nbytes = storage_key(t)
        if nbytes == 0:
            continue
        seen[ptr] = nbytes
    return sum(seen.values())


def dtype_name(dt: torch.dtype) -> str:
    return str(dt).replace("torch.", "")


def log(msg: str) -> None:
    print(msg, flush=True)


# A marker is an aten op that allocates nothing; its calls show up in the profiler's event
# tree in order, so a Python-side list of labels tells which phase / module every allocation
# event belongs to.  (torch.profiler.record_function would itself allocate small tensors.)
_MARK_TENSOR = torch.zeros(1)
MARK_OP = "aten::_has_compatible_shallow_copy_type"


class Marks:
    def __init__(self):
        self.labels: List[Tuple[str, str]] = []
        self.enabled = False

    def mark(self, kind: str, value: str) -> None:
        if self.enabled:
            self.labels.append((kind, value))
            torch._has_compatible_shallow_copy_type(_MARK_TENSOR, _MARK_TENSOR)


MARKS = Marks()


class _LossMark:
    def __enter__(self):
        MARKS.mark("phase-push", "loss")
        LOSS_STATE["active"] += 1
        return self

    def __exit__(self, *a):
        LOSS_STATE["active"] -= 1
        MARKS.mark("phase-pop", "loss")
        return False


LOSS_STATE = {"active": 0}
ref_transformers._LOSS_MARK = _LossMark


# --------------------------------------------------------------------------------------------
# building cases
# --------------------------------------------------------------------------------------------


def family(case: dict) -> str:
    return "transformer" if case["model"] in TRANSFORMERS else "classifier"


VISION = tuple(
    ["resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "resnext50_32x4d", "resnext101_32x8d", "wide_resnet50_2", "wide_resnet101_2"]
    + [f"efficientnet_b{i}" for i in range(8)]
    + ["vit_b_16", "vit_b_32", "vit_l_16", "vit_l_32", "vit_h_14"]
    + ["efficientnet_v2_s", "efficientnet_v2_m", "efficientnet_v2_l", "convnext_tiny", "convnext_small", "convnext_base", "convnext_large"]
    + ["mobilenet_v2", "squeezenet1_1", "vgg11_bn", "vgg13_bn", "vgg16_bn", "vgg19_bn", "densenet121", "regnet_y_400mf", "regnet_y_800mf", "regnet_y_1_6gf", "regnet_y_3_2gf", "regnet_y_8gf", "regnet_y_16gf"]
    + ["swin_t"]
)


def build_model(case: dict) -> nn.Module:
    torch.manual_seed(0)
    kind = case["model"]
    if kind in ("mobilenet_v3_small", "mobilenet_v3_large"):
        fn = getattr(torchvision.models, kind)
        return fn(
            weights=None,
            num_classes=case.get("numClasses", 1000),
            width_mult=case.get("widthMult", 1.0),
            dropout=case.get("dropout", 0.2),
        )
    if kind in VISION:
        # torchvision's own classifiers (vram-ts: vision(name) in src/catalog/vision.ts)
        extra = {"image_size": case["imageSize"]} if "imageSize" in case else {}  # ViTs only
        return getattr(torchvision.models, kind)(weights=None, num_classes=case.get("numClasses", 1000), **extra)
    if kind == "sequential":
        return layers.build_model(case)
    if kind == "unet":
        return layers.build_unet(case)
    if kind == "hf":
        return hf_models.build_model(case, HF_SRC["path"])
    if kind in TRANSFORMERS:
        return ref_transformers.build_model(case)
    raise ValueError(f"unknown model {kind!r}")


def make_inputs(case: dict, model: nn.Module) -> Tuple[torch.Tensor, torch.Tensor]:
    """(input, target).  Transformers: target is the same tensor object as the input ids."""
    torch.manual_seed(1)
    if family(case) == "transformer":
        vocab = hf_models.vocab_size(model) if case["model"] == "hf" else model.config["vocab_size"]
        ids = torch.randint(0, vocab, tuple(case["input"]), dtype=torch.int64)
        return ids, ids
    x = torch.randn(tuple(case["input"]), dtype=torch.float32)
    was = model.training
    model.eval()
    with torch.no_grad():
        out = model(x)
    model.train(was)
    n_classes = out.shape[1]
    target_shape = (out.shape[0],) + tuple(out.shape[2:])
    torch.manual_seed(2)
    y = torch.randint(0, n_classes, target_shape, dtype=torch.int64)
    del out
    return x, y


def set_mode(model: nn.Module, case: dict) -> None:
    if case.get("mode", "train") == "train":
        model.train()
    else:
        model.eval()


def run_forward(case: dict, model: nn.Module, x, y, with_loss: bool, use_cache: Optional[bool] = None):
    """Returns (loss or None, outputs).  For transformers the loss is computed inside forward.

    Real Hugging Face models return a ModelOutput (loss, logits, past_key_values): the caller
    drops it after the forward, as a training loop that keeps only the loss does. ``use_cache``
    None leaves the model's default; training uses the case's ``trainUseCache``.
    """
    if case["model"] == "hf":
        if not with_loss:
            return None, hf_models.forward(case, model, x, None, use_cache)
        handles = _loss_marks(model)
        try:
            out = hf_models.forward(case, model, x, y, case.get("trainUseCache"))
        finally:
            for h in handles:
                h.remove()
        return out.loss, out
    if family(case) == "transformer":
        if with_loss:
            loss, logits = model(x, labels=y)
            return loss, logits
        return None, model(x)
    out = model(x)
    if not with_loss:
        return None, out
    MARKS.mark("phase", "loss")
    LOSS_STATE["active"] += 1
    try:
        loss = F.cross_entropy(out, y)
    finally:
        LOSS_STATE["active"] -= 1
    return loss, out


def _loss_marks(model: nn.Module) -> list:
    """For real HF models: everything after lm_head inside forward is the loss phase."""
    head = model.get_output_embeddings()

    def start(mod, args, out):
        MARKS.mark("phase-push", "loss")
        LOSS_STATE["active"] += 1

    def stop(mod, args, out):
        if LOSS_STATE["active"] > 0:
            LOSS_STATE["active"] -= 1
            MARKS.mark("phase-pop", "loss")

    return [head.register_forward_hook(start), model.register_forward_hook(stop)]


def make_optimizer(name: str, params) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.01, foreach=False)
    if name == "sgd_momentum":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9, foreach=False)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-3, foreach=False)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-3, foreach=False)
    if name == "adam_foreach":
        return torch.optim.Adam(params, lr=1e-3, foreach=True)
    raise ValueError(f"unknown optimizer {name!r}; expected one of {OPTIMIZERS}")


def json_safe(v: Any) -> Any:
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [json_safe(i) for i in v]
    if isinstance(v, dict):
        return {str(k): json_safe(i) for k, i in v.items()}
    return str(v)


# --------------------------------------------------------------------------------------------
# static facts: parameters, buffers, module tree
# --------------------------------------------------------------------------------------------


def unique_params(model: nn.Module) -> List[nn.Parameter]:
    seen, out = set(), []
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            out.append(p)
    return out


def static_facts(model: nn.Module) -> dict:
    params = unique_params(model)
    bufs = list(model.buffers())
    return {
        "params": {
            "total": sum(p.numel() for p in params),
            "trainable": sum(p.numel() for p in params if p.requires_grad),
            "tensors": len(params),
        },
        "bufferElements": sum(b.numel() for b in bufs),
        "bufferBytes": sum(b.numel() * b.element_size() for b in bufs),
        "buffers": [
            {"name": n, "dtype": dtype_name(b.dtype), "shape": list(b.shape)} for n, b in model.named_buffers()
        ],
    }


def module_param_info(model: nn.Module) -> Dict[str, Tuple[int, int]]:
    """path -> (own params, of which already owned by a module registered earlier)."""
    seen = set()
    info = {}
    for path, m in model.named_modules(remove_duplicate=False):
        own = list(m.parameters(recurse=False))
        n = sum(p.numel() for p in own)
        shared = sum(p.numel() for p in own if id(p) in seen)
        for p in own:
            seen.add(id(p))
        info[path] = (n, shared)
    return info


def shape_of(out: Any):
    if isinstance(out, torch.Tensor):
        return list(out.shape)
    return None


def shapes_of(out: Any):
    if isinstance(out, torch.Tensor):
        return list(out.shape)
    if isinstance(out, (tuple, list)):
        return [shapes_of(o) for o in out]
    return None


# --------------------------------------------------------------------------------------------
# saved tensors
# --------------------------------------------------------------------------------------------


class ModuleStack:
    """Tracks the innermost running module with forward pre-hooks and forward hooks."""

    def __init__(self, model: nn.Module, on_finish: Optional[Callable] = None, marks: bool = False):
        self.stack: List[str] = []
        self.handles = []
        self.on_finish = on_finish
        for path, m in model.named_modules(remove_duplicate=False):
            self.handles.append(m.register_forward_pre_hook(self._pre(path)))
            self.handles.append(m.register_forward_hook(self._post(path, m)))
        self.use_marks = marks

    def _pre(self, path):
        def hook(mod, args):
            self.stack.append(path)
            if self.use_marks:
                MARKS.mark("enter", path)

        return hook

    def _post(self, path, m):
        def hook(mod, args, out):
            if self.use_marks:
                MARKS.mark("exit", path)
            self.stack.pop()
            if self.on_finish:
                self.on_finish(path, m, out)

        return hook

    def current(self) -> Optional[str]:
        return self.stack[-1] if self.stack else None

    def remove(self):
        for h in self.handles:
            h.remove()


def _storage_ptrs(obj) -> set:
    from torch.utils._pytree import tree_flatten

    out = set()
    for leaf in tree_flatten(obj)[0]:
        if isinstance(leaf, torch.Tensor):
            try:
                out.add(leaf.storage().data_ptr())
            except Exception:  # pragma: no cover - tensors without storage
                pass
    return out


def _aten_name(func) -> Optional[str]:
    if func is None:
        return None
    name = getattr(func, "__name__", None) or str(func)
    # OpOverload names look like "convolution.default"
    base = name.split(".")[0]
    return "aten::" + base


OP_NAMES = os.environ.get("ORACLE_NO_OP_NAMES") is None


class _NullMode:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def measure_saved(case: dict, model: nn.Module, x, y) -> Tuple[dict, list]:
    from torch.utils._python_dispatch import TorchDispatchMode

    param_ptrs = {p.storage().data_ptr() for p in unique_params(model)}
    info = module_param_info(model)
    rows: List[dict] = []

    def on_finish(path, m, out):
        n, shared = info.get(path, (0, 0))
        row = {"path": path, "className": type(m).__name__, "params": n, "outputShape": shape_of(out)}
        if shared:
            row["paramsShared"] = shared
        if not isinstance(out, torch.Tensor):
            row["outputShapes"] = shapes_of(out)
        rows.append(row)

    mstack = ModuleStack(model, on_finish=on_finish)
    routing = routing_recorder(case, model)
    # Which op saved a tensor: autograd saves an op's inputs *before* the op reaches the Python
    # dispatch mode and its outputs *after*.  So every pack is recorded with the number of
    # top-level ops dispatched so far (k); the autograd node that holds the tensor tells its
    # role (attributes named result* are outputs -> op k, anything else is an input -> op k+1).
    funcs: List[Any] = []
    depth = {"n": 0}
    packing = {"on": False}

    class RecordOp(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if packing["on"]:  # the pack hook's own detach: not an op of the model
                return func(*args, **(kwargs or {}))
            depth["n"] += 1
            top = depth["n"] == 1
            if top:
                entry = [func, _storage_ptrs((args, kwargs)), set()]
                funcs.append(entry)
            try:
                out = func(*args, **(kwargs or {}))
                if top:
                    entry[2] = _storage_ptrs(out)
                return out
            finally:
                depth["n"] -= 1

    records: "OrderedDict[int, dict]" = OrderedDict()
    calls: List[Tuple[int, int]] = []  # pack call -> (storage ptr, top-level ops dispatched so far)
    unpacked = {"call": None}
    empty = {"count": 0}
    in_loss_phase = {"cnn": False}

    # A storage saved by a branch of the graph that dies during the forward (e.g. a router's
    # top-k over scores that require grad: the indices need no grad, so that branch and what it
    # saved are freed at once) is not held at backward, and its address can be reused by a later
    # storage. Weak references tell the two apart: such storages go to saved.freedBeforeBackward.
    weak: Dict[int, Any] = {}
    dead: List[dict] = []

    def pack(t: torch.Tensor):
        ptr, nbytes = storage_key(t)
        if ptr in param_ptrs:
            return t
        if nbytes == 0:
            empty["count"] += 1
            return t
        call = len(calls)
        calls.append((ptr, len(funcs)))
        if ptr in records and weak[ptr].expired():
            dead.append(records.pop(ptr))
        if ptr not in records:
            weak[ptr] = StorageWeakRef(t.storage())
            module = mstack.current()
            loss = LOSS_STATE["active"] > 0
            rec = {
                "bytes": nbytes,
                "dtype": dtype_name(t.dtype),
                "shape": list(t.shape),
                "module": "<loss>" if (module is None and in_loss_phase["cnn"]) else module,
                "op": None,
                "savedBy": None,
                "packs": 0,
                "_first": call,
            }
            if t.numel() * t.element_size() != nbytes:
                rec["tensorBytes"] = t.numel() * t.element_size()
            if loss:
                rec["inLoss"] = True
            records[ptr] = rec
        records[ptr]["packs"] += 1
        if t.grad_fn is None:
            return (call, t)
        # Detached: a saved output returned as itself would hold its own grad_fn, a reference
        # cycle through C++ that Python's gc cannot see (the graph and every saved tensor leak).
        packing["on"] = True
        try:
            return (call, t.detach())
        finally:
            packing["on"] = False

    def unpack(packed):
        if isinstance(packed, tuple):
            unpacked["call"] = packed[0]
            return packed[1]
        unpacked["call"] = None
        return packed

    set_mode(model, case)
    is_tf = family(case) == "transformer"
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        with (RecordOp() if OP_NAMES else _NullMode()):
            if is_tf:
                loss, out = run_forward(case, model, x, y, with_loss=True)
            else:
                _, out = run_forward(case, model, x, y, with_loss=False)
                in_loss_phase["cnn"] = True
                LOSS_STATE["active"] += 1
                loss = F.cross_entropy(out, y)
                LOSS_STATE["active"] -= 1
    mstack.remove()
    if routing is not None:
        ROUTING["savedForward"] = routing.snapshot()
        routing.remove()
    # only the loss is held from here on, as in a training step
    del out
    for ptr in [p for p in records if weak[p].expired()]:
        dead.append(records.pop(ptr))
    weak.clear()

    # walk the autograd graph: which node (and which of its saved attributes) holds each pack
    holder: Dict[int, Tuple[str, str]] = {}
    seen_nodes = set()
    stack = [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen_nodes:
            continue
        seen_nodes.add(node)
        for attr in dir(node):
            if not attr.startswith("_saved_"):
                continue
            unpacked["call"] = None
            try:
                val = getattr(node, attr)
            except Exception:  # pragma: no cover - e.g. freed buffers
                continue
            c = unpacked["call"]
            # (a saved list of tensors would report only its last pack; none of the cases
            # saves one, and such storages keep savedBy/op null)
            if c is not None and c not in holder and isinstance(val, torch.Tensor):
                holder[c] = (node.name(), attr[len("_saved_"):])
        for nf, _ in node.next_functions:
            stack.append(nf)
    dead.sort(key=lambda r: r["_first"])
    for rec in list(records.values()) + dead:
        first = rec.pop("_first")
        h = holder.get(first)
        if h is None:
            continue
        rec["savedBy"] = f"{h[0]}.{h[1]}"
        ptr, k = calls[first]
        # k ops were dispatched when it was packed: an input of op k (0-based) or an output of k-1
        nxt = funcs[k] if k < len(funcs) else None
        prev = funcs[k - 1] if k >= 1 else None
        as_output = prev is not None and (ptr in prev[2])
        as_input = nxt is not None and (ptr in nxt[1])
        if h[1].startswith("result"):
            pick = prev if as_output or not as_input else nxt
        else:
            pick = nxt if as_input or not as_output else prev
        if OP_NAMES and pick is not None:
            rec["op"] = _aten_name(pick[0])
    del calls, holder, seen_nodes, stack

    storages = list(records.values())
    fwd = [s for s in storages if is_tf or not s.get("inLoss")]
    by_top: Dict[str, int] = {}
    for s in fwd:
        top = (s["module"] or "").split(".")[0]
        by_top[top] = by_top.get(top, 0) + s["bytes"]
    saved = {
        "bytes": sum(s["bytes"] for s in fwd),
        "includesLoss": is_tf,
        "lossBytes": sum(s["bytes"] for s in storages if s.get("inLoss")),
        "byTopModule": by_top,
        "emptyStoragesSaved": empty["count"],
        "storages": fwd,
    }
    if not is_tf:
        saved["lossStorages"] = [s for s in storages if s.get("inLoss")]
    if dead:
        saved["freedBeforeBackward"] = {
            "about": "storages saved during the forward but freed before it ended (a graph branch that died); not in bytes",
            "bytes": sum(s["bytes"] for s in dead),
            "storages": dead,
        }
    del loss
    gc.collect()
    return saved, rows


# --------------------------------------------------------------------------------------------
# allocator events
# --------------------------------------------------------------------------------------------


def _walk(n, out):
    out.append(n)
    for c in n.children:
        _walk(c, out)


def profiler_events(prof) -> list:
    """Allocation and marker events of the profiler's event tree, in time order."""
    nodes: list = []
    for root in prof.profiler.kineto_results.experimental_event_tree():
        _walk(root, nodes)
    keep = []
    for i, n in enumerate(nodes):
        tag = str(n.tag)
        if "Allocation" in tag:
            keep.append(("alloc", n.start_time_ns, i, n))
        elif n.name == MARK_OP:
            keep.append(("mark", n.start_time_ns, i, n))
    keep.sort(key=lambda e: (e[1], e[2]))
    return keep


def cumulative(deltas: List[int]) -> Tuple[int, int]:
    c, mx = 0, 0
    for d in deltas:
        c += d
        if c > mx:
            mx = c
    return mx, c


def _ancestry(n) -> List[str]:
    names = []
    p = n.parent
    while p is not None:
        names.append(p.name)
        p = p.parent
    return names  # innermost first


def build_trace(events: list, labels: List[Tuple[str, str]]) -> Tuple[list, dict]:
    """Allocation events with phase, innermost op, top-level op, module (forward only)."""
    out = []
    phase_stack: List[str] = ["setup"]
    mod_stack: List[str] = []
    li = 0
    alloc_op: Dict[int, str] = {}
    cur = 0
    per_phase: Dict[str, dict] = {}
    for kind, _t, _i, n in events:
        if kind == "mark":
            if li >= len(labels):
                continue
            k, v = labels[li]
            li += 1
            if k == "phase":
                phase_stack = [v]
            elif k == "phase-push":
                phase_stack.append(v)
            elif k == "phase-pop":
                if len(phase_stack) > 1:
                    phase_stack.pop()
            elif k == "enter":
                mod_stack.append(v)
            elif k == "exit":
                if mod_stack:
                    mod_stack.pop()
            continue
        ef = n.extra_fields
        delta = int(ef.alloc_size)
        anc = _ancestry(n)
        op = anc[0] if anc else None
        top = anc[-1] if anc else None
        phase = phase_stack[-1]
        ev = {"op": op, "bytes": delta, "phase": phase}
        if top is not None and top != op:
            ev["top"] = top
        if phase in ("forward", "loss") and mod_stack:
            ev["module"] = mod_stack[-1]
        if delta > 0:
            alloc_op[ef.ptr] = op
        elif delta < 0:
            ev["of"] = alloc_op.pop(ef.ptr, "<before>")
        cur += delta
        pp = per_phase.setdefault(phase, {"allocated": 0, "freed": 0, "events": 0, "maxCumulative": None})
        pp["events"] += 1
        if delta > 0:
            pp["allocated"] += delta
        else:
            pp["freed"] += -delta
        if pp["maxCumulative"] is None or cur > pp["maxCumulative"]:
            pp["maxCumulative"] = cur
        out.append(ev)
    return out, per_phase


# --------------------------------------------------------------------------------------------
# inference and training
# --------------------------------------------------------------------------------------------


def measure_inference(case: dict, model: nn.Module, x, use_cache: Optional[bool] = None, events_out: Optional[list] = None) -> dict:
    set_mode(model, case)
    param_bytes = sum(p.numel() * p.element_size() for p in unique_params(model))
    buf_bytes = sum(b.numel() * b.element_size() for b in model.buffers())
    in_bytes = x.numel() * x.element_size()
    with torch.no_grad():
        routing = routing_recorder(case, model)  # on the warm-up forward only (same routing)
        out = run_forward(case, model, x, None, with_loss=False, use_cache=use_cache)
        del out
        if routing is not None:
            ROUTING["inference" if use_cache is None else "inferenceNoCache"] = routing.snapshot()
            routing.remove()
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            out = run_forward(case, model, x, None, with_loss=False, use_cache=use_cache)
            del out
    trace_events, _ = build_trace(profiler_events(prof), [])
    # frees of blocks allocated before the profiled forward would only come from stale entries
    # of the CPU memory reporter (nothing alive before the forward is freed by it): dropped
    deltas = [e["bytes"] for e in trace_events if not (e["bytes"] < 0 and e.get("of") == "<before>")]
    mx, end = cumulative(deltas)
    base = param_bytes + buf_bytes + in_bytes
    if events_out is not None:
        events_out.extend(e for e in trace_events if not (e["bytes"] < 0 and e.get("of") == "<before>"))
    return {
        "paramBytes": param_bytes,
        "bufferBytes": buf_bytes,
        "inputBytes": in_bytes,
        "baselineBytes": base,
        "peakBytes": base + mx,
        "endBytes": base + end,
        "events": len(deltas),
    }


def _train_step(case, model, opt, x, y, marks: bool):
    MARKS.enabled = marks
    MARKS.mark("phase", "zero_grad")
    opt.zero_grad(set_to_none=True)
    MARKS.mark("phase", "forward")
    loss, out = run_forward(case, model, x, y, with_loss=True)
    # Only the loss is held from here on (as in `loss = criterion(model(x), y)` or HF Trainer's
    # compute_loss): the logits are freed unless autograd saved them.
    del out
    MARKS.mark("phase", "backward")
    loss.backward()
    MARKS.mark("phase", "step")
    opt.step()
    MARKS.mark("phase", "cleanup")
    del loss
    MARKS.mark("phase", "end")
    MARKS.enabled = False


def measure_train(case: dict, opt_name: str, want_trace: bool) -> Tuple[dict, Optional[dict]]:
    model = build_model(case)
    x, y = make_inputs(case, model)
    set_mode(model, case)
    params = unique_params(model)
    opt = make_optimizer(opt_name, params)

    # step 1: creates .grad and the optimizer state (not profiled)
    _train_step(case, model, opt, x, y, marks=False)

    def components() -> dict:
        param_bytes = sum(p.numel() * p.element_size() for p in params)
        buf_bytes = sum(b.numel() * b.element_size() for b in model.buffers())
        grad_bytes = unique_storage_bytes(p.grad for p in params)
        state_tensors = [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
        step_tensors = [v for s in opt.state.values() for k, v in s.items() if k == "step" and torch.is_tensor(v)]
        state_bytes = unique_storage_bytes(state_tensors)
        step_bytes = unique_storage_bytes(step_tensors)
        in_bytes = x.numel() * x.element_size()
        tgt_bytes = 0 if storage_key(y)[0] == storage_key(x)[0] else y.numel() * y.element_size()
        base = param_bytes + buf_bytes + grad_bytes + state_bytes + in_bytes + tgt_bytes
        return {
            "paramBytes": param_bytes,
            "bufferBytes": buf_bytes,
            "gradBytes": grad_bytes,
            "optimizerStateBytes": state_bytes,
            "optimizerStepTensorBytes": step_bytes,
            "inputBytes": in_bytes,
            "targetBytes": tgt_bytes,
            "baselineBytes": base,
        }

    # step 2: profiled only so that the CPU memory reporter learns the size of every block this
    # step allocates (it reports no free for a block allocated while profiling was off)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        _train_step(case, model, opt, x, y, marks=False)
    del prof

    # step 3: the measured step.  Every block it frees was allocated under the profiler in step 2
    # or in this step, so its event stream is complete (live bytes).  The figure of
    # pytorch_reference.json (profiler started right before the measured step of a fresh
    # process) is the same stream without the frees of blocks allocated before the step.
    comp2 = components()
    mstack = ModuleStack(model, marks=True) if want_trace else None
    MARKS.labels = []
    routing = routing_recorder(case, model)  # the weights changed in steps 1-2: step 3's own routing
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        _train_step(case, model, opt, x, y, marks=True)
    labels = MARKS.labels
    MARKS.labels = []
    if routing is not None:
        ROUTING.setdefault("trainStep3", {})[opt_name] = routing.snapshot()
        routing.remove()
    if mstack:
        mstack.remove()
    events = profiler_events(prof)
    del prof
    trace_events, per_phase = build_trace(events, labels)
    live = [e["bytes"] for e in trace_events]
    ref = [e["bytes"] for e in trace_events if not (e["bytes"] < 0 and e.get("of") == "<before>")]
    mx3, end3 = cumulative(live)
    peak_at = None
    c = 0
    best = 0
    for e in trace_events:
        c += e["bytes"]
        if c > best:
            best = c
            peak_at = {k: e[k] for k in ("phase", "op", "top", "module") if e.get(k) is not None}
    mx, end = cumulative(ref)
    unseen = sum(-e["bytes"] for e in trace_events if e["bytes"] < 0 and e.get("of") == "<before>")

    res = dict(comp2)
    res.update(
        {
            "peakBytes": comp2["baselineBytes"] + mx,
            "endBytes": comp2["baselineBytes"] + end,
            "livePeakBytes": comp2["baselineBytes"] + mx3,
            "liveEndBytes": comp2["baselineBytes"] + end3,
            "freedBlocksFromBeforeStepBytes": unseen,
            "livePeakAt": peak_at,
            "events": len(live),
            "phases": per_phase,
            "optimizer": {
                "class": type(opt).__name__,
                "defaults": json_safe(opt.defaults),
            },
        }
    )
    trace = None
    if want_trace:
        trace = {
            "baseline": comp2,
            "livePeakBytes": res["livePeakBytes"],
            "phases": per_phase,
            "events": trace_events,
        }
    del opt, model, x, y, params
    gc.collect()
    return res, trace


# --------------------------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------------------------


def env_info() -> dict:
    return {
        **hf_models.env_info(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__ if torchvision is not None else None,
        "python": platform.python_version(),
        "device": "cpu",
        "threads": torch.get_num_threads(),
        "mkldnnEnabled": bool(torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled),
        "dtype": "float32",
    }


def run_case(case: dict, traces_dir: Optional[str]) -> dict:
    t0 = time.time()
    cid = case["id"]
    ROUTING.clear()
    model = build_model(case)
    x, y = make_inputs(case, model)
    facts = static_facts(model)
    impl = hf_models.implementation(model) if case["model"] == "hf" else {}
    saved, rows = measure_saved(case, model, x, y)
    del model
    gc.collect()

    model = build_model(case)
    want_inference_trace = traces_dir is not None and case.get("trace", False) is not False and case["model"] == "hf"
    inference_events: Optional[list] = [] if want_inference_trace else None
    inference = measure_inference(case, model, x, events_out=inference_events)
    # Real HF models: the same forward with use_cache=False (the default above keeps every
    # layer's keys and values until the output is dropped).
    no_cache = measure_inference(case, model, x, use_cache=False) if case["model"] == "hf" else None
    del model
    gc.collect()
    if inference_events is not None:
        os.makedirs(traces_dir, exist_ok=True)
        doc = OrderedDict()
        doc["id"] = cid
        doc["case"] = case
        doc["env"] = env_info()
        doc["about"] = (
            "Allocator events of a no-grad forward with the model's default use_cache (the second "
            "such forward). bytes: signed delta; op: innermost profiler op; top: outermost op."
        )
        doc["baselineBytes"] = inference["baselineBytes"]
        doc["peakBytes"] = inference["peakBytes"]
        doc["events"] = inference_events
        with open(os.path.join(traces_dir, f"{cid}.inference.json"), "w") as f:
            json.dump(doc, f, separators=(",", ":"))
            f.write("\n")

    result = OrderedDict()
    result["id"] = cid
    result["case"] = case
    result["generatedBy"] = "tools/oracle/oracle.py"
    where = ""
    if ARGS["cases"] != ARGS_DEFAULT["cases"]:
        where += f" --cases {ARGS['cases']}"
    if ARGS["out"] != ARGS_DEFAULT["out"]:
        where += f" --out {ARGS['out']}"
    result["command"] = f"{sys.executable} tools/oracle/oracle.py{where} --only {cid}" + (
        f" --transformers-src <transformers {case['transformers']} tree>" if case["model"] == "hf" else ""
    )
    result["env"] = env_info()
    if impl:
        result["hfImplementation"] = impl
    result["params"] = facts["params"]
    result["bufferElements"] = facts["bufferElements"]
    result["bufferBytes"] = facts["bufferBytes"]
    result["buffers"] = facts["buffers"]
    result["input"] = {"shape": list(x.shape), "dtype": dtype_name(x.dtype)}
    result["target"] = {
        "shape": list(y.shape),
        "dtype": dtype_name(y.dtype),
        "sameTensorAsInput": y is x,
    }
    result["modules"] = rows
    result["saved"] = saved
    train = OrderedDict()
    for opt_name in case.get("optimizers", []):
        tr = case.get("trace", False)
        want_trace = traces_dir is not None and (tr is True or (isinstance(tr, list) and opt_name in tr))
        res, trace = measure_train(case, opt_name, want_trace)
        train[opt_name] = res
        if trace is not None:
            os.makedirs(traces_dir, exist_ok=True)
            doc = OrderedDict()
            doc["id"] = cid
            doc["optimizer"] = opt_name
            doc["case"] = case
            doc["env"] = env_info()
            doc["about"] = (
                "Allocator events of the third training step (all blocks it frees were allocated "
                "under the profiler, so frees are complete). bytes: signed delta; op: innermost "
                "profiler op running (null: freed by Python outside any op); top: outermost op when "
                "different; of: the op that allocated a freed block; module: innermost module "
                "(forward/loss only); phase: zero_grad|forward|loss|backward|step|cleanup."
            )
            doc.update(trace)
            with open(os.path.join(traces_dir, f"{cid}.{opt_name}.json"), "w") as f:
                json.dump(doc, f, separators=(",", ":"))
                f.write("\n")
    if train:
        result["train"] = train
    result["inference"] = inference
    if no_cache is not None:
        result["inferenceNoCache"] = no_cache
    if ROUTING:
        result["routing"] = {
            "about": (
                "tokens each expert received per MoE layer (per (token, top-k) pair) in the forwards "
                "measured: savedForward (saved bytes), inference / inferenceNoCache (same weights), "
                "trainStep3.<optimizer> (the profiled step, after two optimizer steps)"
            ),
            **json_safe(dict(ROUTING)),
        }
    return result, round(time.time() - t0, 2)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=os.path.join("tools", "oracle", "cases.json"))
    ap.add_argument("--only", default=None, help="comma-separated case ids")
    ap.add_argument("--out", default=os.path.join("test", "fixtures", "pytorch"))
    ap.add_argument("--traces", default=os.path.join("test", "fixtures", "pytorch-traces"))
    ap.add_argument("--no-traces", action="store_true")
    ap.add_argument(
        "--transformers-src",
        default=os.environ.get("ORACLE_TRANSFORMERS_SRC"),
        help="directories (':'-separated) holding the transformers release that 'hf' cases name",
    )
    args = ap.parse_args(argv)
    HF_SRC["path"] = args.transformers_src
    ARGS["cases"] = args.cases
    ARGS["out"] = args.out

    torch.set_num_threads(THREADS)
    torch.manual_seed(0)
    with open(args.cases) as f:
        cases = json.load(f)
    if isinstance(cases, dict):
        cases = cases["cases"]
    ids = [c["id"] for c in cases]
    if len(set(ids)) != len(ids):
        raise SystemExit("duplicate case ids in " + args.cases)
    if args.only:
        want = [s.strip() for s in args.only.split(",") if s.strip()]
        missing = [w for w in want if w not in ids]
        if missing:
            raise SystemExit(f"unknown case ids: {missing}")
        cases = [c for c in cases if c["id"] in want]
    os.makedirs(args.out, exist_ok=True)
    traces = None if args.no_traces else args.traces
    t_all = time.time()
    for case in cases:
        res, seconds = run_case(case, traces)
        path = os.path.join(args.out, f"{case['id']}.json")
        with open(path, "w") as f:
            json.dump(res, f, indent=1)
            f.write("\n")
        tr = res.get("train", {})
        summary = ", ".join(f"{k}: peak {v['peakBytes']} live {v['livePeakBytes']}" for k, v in tr.items())
        log(
            f"{case['id']}: params {res['params']['total']} saved {res['saved']['bytes']} "
            f"inference peak {res['inference']['peakBytes']}"
            + (f"; {summary}" if summary else "")
            + f" ({seconds} s)"
        )
    log(f"done: {len(cases)} cases in {time.time() - t_all:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
