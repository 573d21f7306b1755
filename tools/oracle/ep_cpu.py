#!/usr/bin/env python3
"""One rank of Hugging Face transformers 5.18.0's own expert parallelism (EP), measured on
PyTorch 2.13 (CPU) with the fake process group.

Run from the repository root with the transformers 5.18.0 venv:

    /tmp/t213hf/bin/python tools/oracle/ep_cpu.py [--only ID,...] [--out test/fixtures/ep-cpu]
        [--extra-site /tmp/ep-accelerate]
    /tmp/t213hf/bin/python tools/oracle/ep_cpu.py --gloo-check   # real gloo groups → gloo_check.json

``from_pretrained`` with a ``distributed_config`` needs ``accelerate`` importable
(transformers/integrations/accelerate.py ``check_and_set_device_map`` refuses the CPU device_map
that ``initialize_distributed_mesh`` returns without it); it is not in the venv, so it is installed
beside it, without touching the venv, and put on ``sys.path`` by ``--extra-site``:

    /tmp/t213hf/bin/python -m pip install --target /tmp/ep-accelerate --no-deps accelerate==1.15.0 psutil==7.2.2

Each case runs in its own child process: the model is built with the real modeling code
(``AutoModelForCausalLM.from_config``, float32, seed 0, as tools/oracle/hf_models.py does) and saved
to a temporary directory; then, for an EP size e > 1, ``init_process_group("fake",
store=FakeStore(), rank=r, world_size=e)`` and the real loading path:

    AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32, attn_implementation="eager",
        experts_implementation=..., distributed_config=DistributedConfig(tp_size=e,
        enable_expert_parallel=True))

which makes the ("tp",) device mesh of size e, swaps the model's ``tp_plan`` for the config's
``base_model_ep_plan`` and applies it (transformers/distributed/mixin.py, tensor_parallel.py).
Nothing of transformers is changed. e = 1 is the same load without ``distributed_config`` (the
single-device model, for comparison). Then three training steps as tools/oracle/tp_cpu.py:
``zero_grad(set_to_none=True)``; ``model(input_ids=x, labels=x, use_cache=False).loss``;
``backward``; SGD ``step`` (lr 0.01, foreach=False, no state); step 3 is measured. The input is
tools/oracle/oracle.py's (``manual_seed(1)``; ``randint(0, vocab, shape)``), so an e = 1 case is
the hf-5.18.0 fixture of the same config.

Every collective of the fake group returns at once and allocates nothing (the all-reduces are
in place): the CPU allocator sees what rank r allocates, a real backend's buffers aside. The
all-reduce does not sum, so the hidden states after the first MoE layer differ from a real run
(rank r only adds its own experts' outputs), and so do the gradients and the weights after
steps 1-2: step 3's routing is the fake group's, not a real run's (``--gloo-check`` runs real
gloo groups and checks loss and gradients against the single-device model). Memory does not
depend on routing except the eager experts loop's split.

Measured, per case (bytes, as tools/oracle/tp_cpu.py): ``params`` whole / local; ``savedBytes``
(distinct local storages autograd saved in a fourth forward, parameters excluded; each with its
module, autograd node and attribute, shape and dtype); ``livePeakBytes`` of step 3 (params +
grads + buffers + input before the step + the highest rise of the allocator's live bytes during
it, torch.profiler ``profile_memory=True``); ``routing`` of step 3's forward: per MoE layer the
(token, k) pairs each of this rank's experts got (tools/oracle/hf_models.py ``routing_recorder``
on the experts module: it sees the EP router's remapped local indices), the sentinel pairs, and
the global routing (top-k of the router logits, which the EP router passes unchanged);
``moeLayer0``: the allocator events of the first MoE block in step 3's forward and backward, op by
op with the op's input shapes; with ``traceStep`` the whole step's events.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
from collections import OrderedDict

from fake_pg_harness import FAKE_PG, Marker, ancestors, arg_parser, drive, fixture_head, graph_nodes, init_fake_pg, live_peak, local, marked_allocations, marked_step, start_child, step_profile, storages

GENERATED_BY = "tools/oracle/ep_cpu.py"
DEFAULT_OUT = os.path.join("test", "fixtures", "ep-cpu")
DEFAULT_SITE = os.environ.get("EP_ORACLE_SITE", "/tmp/ep-accelerate")
STEPS = 3
MEASURED_STEP = 3
LR = 0.01

# the configs of test/fixtures/hf-5.18.0/hf518_qwen3moe_e8k2_* and hf518_mixtral_e4k2_*
QWEN3MOE = {
    "rms_norm_eps": 1e-06,
    "max_position_embeddings": 256,
    "vocab_size": 512,
    "model_type": "qwen3_moe",
    "hidden_size": 64,
    "intermediate_size": 128,
    "moe_intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "norm_topk_prob": True,
    "tie_word_embeddings": False,
}
MIXTRAL = {
    "rms_norm_eps": 1e-06,
    "max_position_embeddings": 256,
    "vocab_size": 512,
    "model_type": "mixtral",
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "tie_word_embeddings": False,
}
SHORT = {"grouped_mm": "gmm", "eager": "eager", "batched_mm": "bmm"}


def _case(name, config, experts, ep, rank, inp=(2, 16), trace=False):
    e = config.get("num_experts", config.get("num_local_experts"))
    k = config["num_experts_per_tok"]
    cid = f"ep_{name}_e{e}k{k}_{SHORT[experts]}_ep{ep}" + (f"_r{rank}" if ep > 1 else "") + f"_b{inp[0]}_s{inp[1]}"
    return {"id": cid, "config": config, "transformers": "5.18.0", "attention": "eager", "experts": experts, "input": list(inp), "dtype": "float32", "ep": ep, "rank": rank, "optimizer": "sgd", "traceStep": trace}


def _cases():
    out = []
    for ep, rank in ((1, 0), (2, 0), (2, 1), (4, 0), (4, 3)):
        out.append(_case("qwen3moe", QWEN3MOE, "grouped_mm", ep, rank, trace=(ep, rank) in ((1, 0), (2, 0))))
    for ep, rank in ((1, 0), (2, 0), (2, 1), (4, 3)):
        out.append(_case("qwen3moe", QWEN3MOE, "eager", ep, rank, trace=(ep, rank) == (2, 0)))
    for ep, rank in ((1, 0), (2, 1)):
        out.append(_case("qwen3moe", QWEN3MOE, "batched_mm", ep, rank))
    for ep, rank in ((1, 0), (2, 0), (4, 3)):
        out.append(_case("qwen3moe", QWEN3MOE, "grouped_mm", ep, rank, inp=(2, 32)))
    for ep, rank in ((1, 0), (2, 0), (2, 1), (4, 0), (4, 3)):
        out.append(_case("mixtral", MIXTRAL, "grouped_mm", ep, rank))
    return out


CASES = _cases()


def _shapes(op_node):
    """The op's tensor inputs as 'f32[32,64]' strings (torch.profiler record_shapes)."""
    out = []
    try:
        inputs = op_node.extra_fields.inputs
    except Exception:  # noqa: BLE001
        return None
    for v in inputs:
        if hasattr(v, "sizes") and hasattr(v, "dtype"):
            dt = str(v.dtype).replace("torch.", "")
            dt = {"float32": "f32", "int64": "i64", "bool": "b8", "int32": "i32", "bfloat16": "bf16", "float16": "f16"}.get(dt, dt)
            out.append(f"{dt}{list(v.sizes)}".replace(" ", ""))
        elif isinstance(v, list) and v and all(hasattr(x, "sizes") for x in v):
            out.append("[" + ",".join(f"{list(x.sizes)}".replace(" ", "") for x in v) + "]")
    return out


def run_child(case: dict, args) -> dict:
    if args.extra_site and os.path.isdir(args.extra_site) and args.extra_site not in sys.path:
        sys.path.insert(0, args.extra_site)
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    import torch
    import torch.distributed as dist
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.profiler import ProfilerActivity, profile
    from torch.distributed.tensor import DTensor

    import transformers
    from transformers import DistributedConfig

    import hf_models  # tools/oracle/hf_models.py: routing_recorder

    if int(case["ep"]) > 1:
        try:
            import accelerate  # noqa: F401
        except ImportError:
            raise SystemExit(f"accelerate is not importable (--extra-site {args.extra_site}): /tmp/t213hf/bin/python -m pip install --target {args.extra_site} --no-deps accelerate==1.15.0 psutil==7.2.2")

    transformers.logging.set_verbosity_error()
    start_child(transformers, case)
    e, rank = int(case["ep"]), int(case["rank"])
    traced = bool(case.get("traceStep"))
    mark = Marker()

    # ---- the checkpoint: the real modeling code, seed 0 (hf_models.build_model) ----
    tmp = tempfile.mkdtemp(prefix="ep_cpu_")
    torch.manual_seed(0)
    config = dict(case["config"])
    cfg = transformers.AutoConfig.for_model(config.pop("model_type"), **config)
    src = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=case["attention"])
    whole_params = sum(p.numel() for p in src.parameters())
    whole_named = {n: list(p.shape) for n, p in src.named_parameters()}
    src.save_pretrained(tmp)
    del src
    gc.collect()

    moe_paths = []
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True) as prof:
        mark("segment", "build")
        if e > 1:
            init_fake_pg(rank, e)
        kwargs = {"dtype": torch.float32, "attn_implementation": case["attention"], "experts_implementation": case["experts"]}
        if e > 1:
            kwargs["distributed_config"] = DistributedConfig(tp_size=e, enable_expert_parallel=True)
        model = transformers.AutoModelForCausalLM.from_pretrained(tmp, **kwargs)
        model.train()
        torch.manual_seed(1)  # tools/oracle/oracle.py make_inputs
        x = torch.randint(0, cfg.vocab_size, tuple(case["input"]), dtype=torch.int64)
        params = list(dict.fromkeys(model.parameters()))
        opt = torch.optim.SGD(params, lr=LR, foreach=False)

        # module marks (forward: pre/post hooks; backward: tensor hooks at each MoE block's output
        # (its backward starts) and input (its backward is done)). No tensor op, no allocation.
        handles = []
        for path, m in model.named_modules():
            if not path:
                continue

            def pre(mod, a, path=path):
                mark("enter", path)
                if path.endswith(".mlp") and torch.is_grad_enabled() and a and torch.is_tensor(a[0]) and a[0].requires_grad:
                    a[0].register_hook(lambda g, path=path: mark("bwdexit", path))

            def post(mod, a, out, path=path):
                mark("exit", path)
                if path.endswith(".mlp") and torch.is_tensor(out) and out.requires_grad:
                    out.register_hook(lambda g, path=path: mark("bwdenter", path))

            handles.append(m.register_forward_pre_hook(pre))
            handles.append(m.register_forward_hook(post))
            if path.endswith(".mlp.experts"):
                moe_paths.append(path[: -len(".experts")])

        def end_routing():
            # after step 3's forward: the routing seen, the recorders removed
            routing["local"] = routing["rec"].snapshot()
            routing["rec"].remove()
            for h in routing["gateHandles"]:
                h.remove()

        comps = {}
        routing = None
        for s in range(1, STEPS + 1):
            mark("segment", f"step{s}")
            comps[s] = {
                "paramBytes": sum(storages(params).values()),
                "gradBytes": sum(storages([p.grad for p in params]).values()),
                "bufferBytes": sum(storages(list(model.buffers())).values()),
                "inputBytes": x.numel() * x.element_size(),
                "optimizerStateBytes": 0,
            }
            if s == MEASURED_STEP:
                # tolist() only: no tensor op, no allocation
                routing = {"rec": hf_models.routing_recorder(model), "global": {}, "gateHandles": []}
                for p in moe_paths:
                    gate = model.get_submodule(p + ".gate")

                    def gate_hook(mod, a, out, p=p):
                        logits = out[0].tolist()
                        k = int(getattr(mod, "top_k", cfg.num_experts_per_tok))
                        counts = [0] * len(logits[0])
                        for row in logits:
                            for j in sorted(range(len(row)), key=lambda j: -row[j])[:k]:
                                counts[j] += 1
                        routing["global"][p + ".experts"] = counts

                    routing["gateHandles"].append(gate.register_forward_hook(gate_hook))
            marked_step(mark, opt, lambda: model(input_ids=x, labels=x, use_cache=False).loss, after_forward=end_routing if s == MEASURED_STEP else None)
        mark("segment", "end")
    for h in handles:
        h.remove()
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)

    # ---- the allocation stream, with the innermost module (forward) or MoE block (backward) ----
    seg, phase = "setup", "setup"
    mstack = []
    bwd_region = None
    stream = []
    for label, n in marked_allocations(prof, mark.labels):
        if n is None:
            k, v = label
            if k == "segment":
                seg, phase, mstack, bwd_region = v, "setup", [], None
            elif k == "phase":
                phase = v
            elif k == "enter":
                mstack.append(v)
            elif k == "exit":
                if mstack and mstack[-1] == v:
                    mstack.pop()
            elif k == "bwdenter":
                bwd_region = v
            elif k == "bwdexit":
                if bwd_region == v:
                    bwd_region = None
            continue
        anc = ancestors(n)
        module = mstack[-1] if mstack else None
        if phase == "backward":
            module = bwd_region
        ev = {"segment": seg, "phase": phase, "module": module, "op": anc[0].name if anc else None, "top": anc[-1].name if anc else None, "bytes": int(n.extra_fields.alloc_size)}
        if anc:
            ev["_node"] = anc[0]
        stream.append(ev)
    name = f"step{MEASURED_STEP}"
    measured = step_profile(stream, name, ("phase", "module", "op", "top"))
    for ev, cum in measured["running"]:
        ev["cumulative"] = cum

    EVENT_COLUMNS = ["phase", "module", "op", "top", "bytes", "cumulative", "inputs"]

    def compact(ev):
        # one row per allocator event: module is the innermost module in the forward (null in
        # the backward, where top names the autograd node), inputs the op's tensor inputs
        node = ev.get("_node")
        return [ev["phase"], ev["module"] if ev["phase"] != "backward" else None, ev["op"], ev["top"] if ev["phase"] == "backward" else None, ev["bytes"], ev.get("cumulative"), _shapes(node) if node is not None else None]

    moe0 = moe_paths[0] if moe_paths else None
    moe_layer0 = None
    if moe0:
        moe_layer0 = {
            "about": f"allocator events of {moe0} in step {MEASURED_STEP}: forward (between its forward pre-hook and forward hook) and backward (from the gradient of its output to the gradient of its input); bytes > 0 allocate, < 0 free; cumulative is the step's running total; inputs are the op's tensor inputs",
            "columns": EVENT_COLUMNS,
            "forward": [compact(ev) for ev in stream if ev["segment"] == name and ev["phase"] == "forward" and ev["module"] and (ev["module"] == moe0 or ev["module"].startswith(moe0 + "."))],
            "backward": [compact(ev) for ev in stream if ev["segment"] == name and ev["phase"] == "backward" and ev["module"] == moe0],
        }

    # parameters and their gradients after step 3
    param_table = []
    for n_, p_ in model.named_parameters():
        gr = p_.grad
        param_table.append({"name": n_, "whole": whole_named.get(n_), "local": list(local(p_).shape), "placements": str(getattr(p_, "placements", None)) if isinstance(p_, DTensor) else None, "grad": list(local(gr).shape) if gr is not None else None, "gradIsDTensor": isinstance(gr, DTensor)})
    experts_info = []
    for p in moe_paths:
        m = model.get_submodule(p + ".experts")
        experts_info.append({"path": p + ".experts", "className": type(m).__name__, "numExpertsAttr": int(m.num_experts), "isExpertParallel": bool(getattr(m, "_is_expert_parallel", False))})

    # ---- saved tensors of a fourth forward ----
    param_ptrs = set(storages(params))
    fstack = []
    shandles = []

    def spre(mod, a, path):
        fstack.append(path)

    def spost(mod, a, o):
        fstack.pop()

    for path, m in model.named_modules():
        shandles.append(m.register_forward_pre_hook(lambda mod, a, path=path: spre(mod, a, path)))
        shandles.append(m.register_forward_hook(spost))
    records = OrderedDict()
    weak = {}
    dead = []
    calls = []
    unpacked = {"calls": []}
    packing = {"on": False}

    def pack(x_):
        t = local(x_)
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if not ptr or ptr in param_ptrs or not st.nbytes():
            return x_
        call = len(calls)
        calls.append(ptr)
        if ptr in records and weak[ptr].expired():
            dead.append(records.pop(ptr))
        if ptr not in records:
            weak[ptr] = StorageWeakRef(st)
            records[ptr] = {"bytes": st.nbytes(), "shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""), "module": fstack[-1] if fstack else None, "savedBy": None, "_first": call}
            if isinstance(x_, DTensor):
                records[ptr]["dtensor"] = True
        if x_.grad_fn is None:
            return (call, x_)
        packing["on"] = True
        try:
            return (call, x_.detach())
        finally:
            packing["on"] = False

    def unpack(packed):
        if isinstance(packed, tuple):
            unpacked["calls"].append(packed[0])
            return packed[1]
        return packed

    opt.zero_grad(set_to_none=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        loss = model(input_ids=x, labels=x, use_cache=False).loss
    for h in shandles:
        h.remove()
    for ptr in [p for p in records if weak[p].expired()]:
        dead.append(records.pop(ptr))
    holder = {}
    for node in graph_nodes(loss.grad_fn):
        for attr in dir(node):
            if not attr.startswith("_saved_"):
                continue
            unpacked["calls"] = []
            try:
                getattr(node, attr)  # unpacks: a saved list of tensors (index's indices) unpacks each
            except Exception:  # noqa: BLE001
                continue
            for cc in unpacked["calls"]:
                holder.setdefault(cc, f"{node.name()}.{attr[len('_saved_'):]}")
    for rec in list(records.values()) + dead:
        rec["savedBy"] = holder.get(rec.pop("_first"))
    del holder
    loss.backward()
    del loss
    saved = list(records.values())
    saved_moe0 = [s for s in saved if moe0 and s["module"] and (s["module"] == moe0 or s["module"].startswith(moe0 + "."))]

    # ---- routing of step 3 ----
    rout = OrderedDict()
    for p in moe_paths:
        path = p + ".experts"
        row = (routing["local"] or {}).get(path, {})
        nl = len(row.get("perExpert", []))
        tokens, k = row.get("tokens", 0), row.get("topK", cfg.num_experts_per_tok)
        glob = routing["global"].get(path)
        rout[path] = {
            "localExperts": [rank * nl, rank * nl + nl - 1] if e > 1 else [0, nl - 1],
            "perLocalExpert": row.get("perExpert"),
            "tokens": tokens,
            "topK": k,
            "localPairs": sum(row.get("perExpert", [])),
            "sentinelPairs": tokens * k - sum(row.get("perExpert", [])),
            "globalPerExpert": glob,
        }

    result = fixture_head(case, GENERATED_BY, python="/tmp/t213hf/bin/python")
    try:
        import accelerate

        acc = accelerate.__version__
    except Exception:  # noqa: BLE001
        acc = None
    result["env"] = {"torch": torch.__version__, "transformers": transformers.__version__, "accelerate": acc, "device": "cpu", "threads": 1, "processGroup": FAKE_PG if e > 1 else None}
    result["load"] = (
        f"from_pretrained(checkpoint of from_config seed 0, dtype=float32, attn_implementation={case['attention']!r}, experts_implementation={case['experts']!r}"
        + (f", distributed_config=DistributedConfig(tp_size={e}, enable_expert_parallel=True))" if e > 1 else ")")
    )
    result["adjustment"] = None
    result["hfImplementation"] = {"attention": model.config._attn_implementation, "experts": model.config._experts_implementation}
    result["tpPlan"] = dict(model.tp_plan) if e > 1 else None
    result["params"] = {"whole": whole_params, "local": sum(local(p).numel() for p in params)}
    result["experts"] = experts_info
    result["paramTable"] = param_table
    result["savedBytes"] = sum(v["bytes"] for v in saved)
    result["savedMoeLayer0Bytes"] = sum(v["bytes"] for v in saved_moe0)
    result["saved"] = saved
    if dead:
        result["savedFreedBeforeBackward"] = dead
    result["routing"] = {"about": f"step {MEASURED_STEP}'s forward, per MoE layer: (token, k) pairs each local expert received on this rank (the EP router's remapped indices; sentinel = non-local), and over all experts (top-k of the router logits). With the fake group the MoE outputs are not summed over the ranks: the routing is the fake run's, not a real one's.", "layers": rout}
    result["train"] = {case["optimizer"]: live_peak(comps[MEASURED_STEP], measured)}
    result["moeLayer0"] = moe_layer0
    if traced:
        result["stepEvents"] = {"columns": EVENT_COLUMNS, "events": [compact(ev) for ev in stream if ev["segment"] == name]}
    if e > 1:
        dist.destroy_process_group()
    return result


GLOO_CHECKS = [
    {"id": "gloo_qwen3moe_e8k2_gmm_ep2", "config": QWEN3MOE, "experts": "grouped_mm", "ep": 2, "input": [2, 16]},
    {"id": "gloo_qwen3moe_e8k2_eager_ep4", "config": QWEN3MOE, "experts": "eager", "ep": 4, "input": [2, 16]},
    {"id": "gloo_mixtral_e4k2_gmm_ep2", "config": MIXTRAL, "experts": "grouped_mm", "ep": 2, "input": [2, 16]},
]


def gloo_child(check: dict, ckpt: str, out: str, args) -> None:
    """One rank of a real (gloo) EP group: transformers initializes the group itself from RANK /
    WORLD_SIZE / LOCAL_RANK (distributed/utils.py _ensure_torch_distributed). The rank compares its
    loss and gradients with the single-device model's on the same input."""
    if args.extra_site and os.path.isdir(args.extra_site) and args.extra_site not in sys.path:
        sys.path.insert(0, args.extra_site)
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    import transformers
    from transformers import DistributedConfig

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(1)
    e = int(check["ep"])
    kw = {"dtype": torch.float32, "attn_implementation": "eager", "experts_implementation": check["experts"]}
    ref = transformers.AutoModelForCausalLM.from_pretrained(ckpt, **kw)
    model = transformers.AutoModelForCausalLM.from_pretrained(ckpt, distributed_config=DistributedConfig(tp_size=e, enable_expert_parallel=True), **kw)
    rank = dist.get_rank()
    ref.train()
    model.train()
    torch.manual_seed(1)
    x = torch.randint(0, ref.config.vocab_size, tuple(check["input"]), dtype=torch.int64)
    lr = ref(input_ids=x, labels=x, use_cache=False).loss
    lr.backward()
    le = model(input_ids=x, labels=x, use_cache=False).loss
    le.backward()
    refp = dict(ref.named_parameters())
    worst = {"param": 0.0, "grad": 0.0}
    where = {}
    for n, p in model.named_parameters():
        r, rg = refp[n].detach(), refp[n].grad
        lp, lg = p.detach(), p.grad
        if isinstance(p, DTensor):
            nl = p.to_local().shape[0]
            r, rg = r[rank * nl:(rank + 1) * nl], rg[rank * nl:(rank + 1) * nl]
            lp, lg = p.to_local().detach(), p.grad.to_local()
        for key, a, b in (("param", lp, r), ("grad", lg, rg)):
            d = float((a - b).abs().max())
            if d > worst[key]:
                worst[key], where[key] = d, n
    res = {"rank": rank, "world": dist.get_world_size(), "backend": dist.get_backend(), "lossRef": float(lr), "lossEp": float(le), "maxAbsDiff": worst, "at": where}
    with open(out, "w") as f:
        json.dump(res, f)
    dist.destroy_process_group()


def gloo_checks(args) -> int:
    """Real multi-process EP (gloo): loss and gradients equal the single-device model's."""
    import socket

    here = os.path.abspath(__file__)
    results = []
    bad = 0
    for check in GLOO_CHECKS:
        tmp = tempfile.mkdtemp(prefix="ep_gloo_")
        subprocess.run([sys.executable, here, "--save-ckpt", check["id"], "--child-out", tmp, "--extra-site", args.extra_site], check=True, capture_output=True)
        with socket.socket() as sk:
            sk.bind(("127.0.0.1", 0))
            port = sk.getsockname()[1]
        procs, outs = [], []
        for r in range(int(check["ep"])):
            out = os.path.join(tmp, f"rank{r}.json")
            outs.append(out)
            env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", HF_HUB_OFFLINE="1", TQDM_DISABLE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(check["ep"]))
            procs.append(subprocess.Popen([sys.executable, here, "--gloo-child", check["id"], "--child-out", out, "--ckpt", tmp, "--extra-site", args.extra_site], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        errs = [p.communicate(timeout=600)[1] for p in procs]
        ranks = []
        for r, out in enumerate(outs):
            try:
                with open(out) as f:
                    ranks.append(json.load(f))
            except Exception:  # noqa: BLE001
                ranks.append({"rank": r, "error": errs[r][-3000:]})
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
        ok = all("error" not in x and abs(x["lossRef"] - x["lossEp"]) < 1e-5 and x["maxAbsDiff"]["grad"] < 1e-5 for x in ranks)
        bad += not ok
        results.append({"id": check["id"], "experts": check["experts"], "ep": check["ep"], "ok": ok, "ranks": ranks})
        print(f"{check['id']}: {'ok' if ok else 'MISMATCH'} " + " | ".join(f"r{x.get('rank')} loss {x.get('lossEp')} vs {x.get('lossRef')} max|dgrad| {x.get('maxAbsDiff', {}).get('grad')}" for x in ranks), flush=True)
    doc = {
        "about": "real multi-process expert parallelism (gloo, one process per rank, the group made by transformers from RANK/WORLD_SIZE): each rank's loss and gradients (expert gradients: its Shard(0) slice) against the single-device model on the same input, after one forward and backward",
        "generatedBy": GENERATED_BY,
        "command": "/tmp/t213hf/bin/python tools/oracle/ep_cpu.py --gloo-check",
        "checks": results,
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "gloo_check.json"), "w") as f:
        f.write(_dump(doc) + "\n")
    return 1 if bad else 0


def save_ckpt(check: dict, out: str, args) -> None:
    import torch
    import transformers

    torch.manual_seed(0)
    config = dict(check["config"])
    cfg = transformers.AutoConfig.for_model(config.pop("model_type"), **config)
    transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(out)


def _dump(obj, indent=0) -> str:
    """JSON indented like json.dumps(indent=1), but a list that holds no object (an allocator
    event, a shape) on one line."""
    pad = " " * (indent + 1)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f"{pad}{json.dumps(k)}: {_dump(v, indent + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    if isinstance(obj, list):
        def scalar_list(v):
            return isinstance(v, list) and not any(isinstance(w, (dict, list)) for w in v)

        # an event row: scalars and lists of scalars, at least one scalar
        flat = all(not isinstance(v, (dict, list)) or scalar_list(v) for v in obj) and any(not isinstance(v, (dict, list)) for v in obj)
        if flat or not obj:
            return json.dumps(obj)
        return "[\n" + ",\n".join(pad + _dump(v, indent + 1) for v in obj) + "\n" + " " * indent + "]"
    return json.dumps(obj)


def main(argv=None) -> int:
    ap = arg_parser(__doc__, DEFAULT_OUT, hf_paths=False)
    ap.add_argument("--extra-site", default=DEFAULT_SITE, help="a directory holding accelerate (pip install --target)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--gloo-check", action="store_true", help="real gloo EP groups: loss and gradients against the single-device model")
    ap.add_argument("--gloo-child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--save-ckpt", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--ckpt", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.list:
        for c in CASES:
            print(c["id"])
        return 0
    if args.save_ckpt is not None:
        save_ckpt(next(c for c in GLOO_CHECKS if c["id"] == args.save_ckpt), args.child_out, args)
        return 0
    if args.gloo_child is not None:
        gloo_child(next(c for c in GLOO_CHECKS if c["id"] == args.gloo_child), args.ckpt, args.child_out, args)
        return 0
    if args.gloo_check:
        return gloo_checks(args)

    def summary(res):
        tr = next(iter(res["train"].values()))
        return f"params {res['params']['local']}/{res['params']['whole']} saved {res['savedBytes']} (moe0 {res['savedMoeLayer0Bytes']}) livePeak {tr['livePeakBytes']} unattributed {tr['unattributedBytes']}"

    return drive(args, CASES, run_child, script=__file__, child_args=["--extra-site", args.extra_site], summary=summary, dump=lambda res: _dump(res) + "\n", extra_env={"HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1"})


if __name__ == "__main__":
    sys.exit(main())
