#!/usr/bin/env python3
"""One rank of 2-D parallelism, FSDP2 x tensor parallelism (torchtitan's layout), applied to a real
transformers 4.40.2 Llama and measured on PyTorch 2.13 (CPU) with the fake process group.

Run from the repository root with the torch 2.13 CPU venv:

    /tmp/t213/bin/python tools/oracle/fsdp2_tp_cpu.py [--only ID,...] [--out test/fixtures/fsdp2-tp-cpu]
        [--transformers-src /work/hfenv/hf-4.40.2:/work/hfenv/stubs] [--hf-deps /usr/lib/python3/dist-packages]

Each case runs in its own child process (one at a time, one thread):
``init_process_group("fake", store=FakeStore(), rank=R, world_size=dp*tp)``,
``init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))`` (rank R is dp rank R // tp,
tp rank R % tp), the model from the real modeling code (``AutoModelForCausalLM.from_config``,
eager attention, seed 0; ``model.to(bfloat16)`` for ``dtype`` bfloat16), then

1. ``parallelize_module(model, mesh["tp"], plan)`` with tools/oracle/tp_cpu.py's plan
   (torchtitan's Llama plan with the Hugging Face names; SP and loss parallel as there), and the
   same adjustment of transformers 4.40.2's ``LlamaAttention`` (num_heads, num_key_value_heads,
   hidden_size set to the rank's local values);
2. ``fully_shard(layer, mesh=mesh["dp"], reshard_after_forward=...)`` for every decoder layer
   (case ``fsdp.units``: "layers", or "titan" = torchtitan's newer grouping: the embedding, each
   layer, ``[model.norm, lm_head]``), then ``fully_shard(model, mesh=mesh["dp"])`` (root);
   ``MixedPrecisionPolicy`` from ``fsdp.mp``;
3. four training steps of ``zero_grad(set_to_none=True)``; ``model(input_ids=x, labels=x,
   use_cache=False).loss`` (inside ``loss_parallel()`` with loss parallel, backward too);
   ``backward``; ``step`` (SGD or AdamW, ``foreach=False``). Step 3 is reported, step 4 checks it.

Every collective of the fake group completes at once and allocates nothing outside the caller's
tensors, so the CPU allocator sees what rank R allocates (a real backend's buffers aside).

Measurement: tools/oracle/fsdp2_cpu.py's (its segment statistics, peak composition, FSDP block
lifetimes and scope summary are imported from it; the stream reader, with the same fields, and
the driver are tools/oracle/fake_pg_harness.py's): torch.profiler with
``profile_memory=True`` from before the model is built; phases marked with ``aten::is_set_to``;
each allocation carries its innermost op, outermost op and innermost ``FSDP::`` record_function
scope. ``savedBytes`` as tools/oracle/tp_cpu.py (distinct local storages autograd saves in a fifth
forward, parameters excluded: here both the sharded parameters and FSDP's unsharded (all-gathered)
parameters; the latter are reported as ``savedParamBytes`` / ``savedParams``, by parameter name).

Fixture fields: tp_cpu.py's (params whole/local, paramTable with each parameter's local shape and
placements on the 2-D mesh and its gradient's, savedBytes, saved) and fsdp2_cpu.py's (``fsdp.groups``
with, per FSDP parameter, the TP-local size FSDP shards (``origSize``), the sharded size, the 2-D
placements; ``fsdp.perGroup``: buffer sizes the sources predict; ``train.<opt>``: paramBytes,
gradBytes, optimizerStateBytes, baselineBytes, allocatedBeforeStep, unattributedBytes,
livePeakBytes, livePeakAt, phases, peakComposition, fsdpBlocks, scopes, steadyCheck), plus
``embeddingGrad``: every block of step 3 whose size is the embedding's whole table [V, h], its TP
row shard [V/t, h] or its FSDP x TP shard [V/(t*dp), h] (allocation and free: phase, op, scope;
``liveAfterAlloc``: baseline + the step's running delta just after the allocation),
and for ``traceStep`` cases ``trace``: step 3's allocation events in order (phase, op, top op, FSDP
scope, bytes; a free names the index of its allocation in the step, or ``before`` for a block from
before the step).
"""

from __future__ import annotations

import os
import sys
from collections import OrderedDict

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import fsdp2_cpu  # noqa: E402  (stdlib-only at import time)
from fake_pg_harness import FAKE_PG, Marker, add_hf_paths, arg_parser, baseline_bytes, drive, dump_rows, fixture_head, fsdp_param_groups, hf_child_args, import_hf, init_fake_pg, local, marked_step, read_stream, saved_tensors_pass, start_child, storage_stats, unattributed_blocks, unsharded_param_ptrs  # noqa: E402
from tp_cpu import ADJUSTMENT, CONFIG, localize_attention, tp_plan  # noqa: E402

GENERATED_BY = "tools/oracle/fsdp2_tp_cpu.py"
DEFAULT_OUT = os.path.join("test", "fixtures", "fsdp2-tp-cpu")
STEPS = 4
MEASURED_STEP = 3


def _case(cid, dp, tp, rank, sp=False, lp=False, optimizer="sgd", dtype="float32", raf=True, units="layers", mp=None, trace=False, config=None, retie=False):
    return {
        "id": cid,
        "config": config or CONFIG,
        "transformers": "4.40.2",
        "attention": "eager",
        "input": [2, 32],
        "dtype": dtype,
        "dp": dp,
        "tp": tp,
        "rank": rank,
        "dpRank": rank // tp,
        "tpRank": rank % tp,
        "sequenceParallel": sp,
        "lossParallel": lp,
        "optimizer": optimizer,
        "fsdp": {"units": units, "reshardAfterForward": raf, "mp": mp},
        "retie": retie,
        "traceStep": trace,
    }


CASES = [
    _case("dp2tp2_r0", 2, 2, 0, trace=True),
    _case("dp2tp2_r3", 2, 2, 3),
    _case("dp2tp2_r0_sp", 2, 2, 0, sp=True, trace=True),
    _case("dp2tp2_r3_sp", 2, 2, 3, sp=True),
    _case("dp2tp2_r0_noraf", 2, 2, 0, raf=False, trace=True),
    _case("dp4tp2_r0", 4, 2, 0),
    _case("dp4tp2_r0_sp", 4, 2, 0, sp=True),
    _case("dp2tp2_r0_lp", 2, 2, 0, lp=True),
    _case("dp2tp2_r0_sp_lp", 2, 2, 0, sp=True, lp=True),
    _case("dp2tp2_r0_adamw", 2, 2, 0, optimizer="adamw", trace=True),
    _case("dp2tp2_r0_bf16", 2, 2, 0, dtype="bfloat16"),
    _case("dp2tp2_r0_mp", 2, 2, 0, mp={"paramDtype": "bfloat16", "reduceDtype": "float32"}),
    _case("dp2tp2_r0_titan", 2, 2, 0, units="titan", trace=True),
    _case("dp2tp2_r0_tied_sp", 2, 2, 0, sp=True, config={**CONFIG, "tie_word_embeddings": True}),
    _case("dp2tp2_r0_tied_sp_retied", 2, 2, 0, sp=True, config={**CONFIG, "tie_word_embeddings": True}, retie=True),
]


def run_child(case: dict, args) -> dict:
    import contextlib
    import gc

    add_hf_paths(args)
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.parallel import loss_parallel, parallelize_module
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.device_mesh import init_device_mesh

    transformers = import_hf(args)
    start_child(transformers, case)
    dp, tp, rank = int(case["dp"]), int(case["tp"]), int(case["rank"])
    sp, lp = bool(case["sequenceParallel"]), bool(case["lossParallel"])
    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16}
    notes = []
    mark = Marker()

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        mark("segment", "build")
        init_fake_pg(rank, dp * tp)
        mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
        dp_mesh, tp_mesh = mesh["dp"], mesh["tp"]
        torch.manual_seed(0)
        config = dict(case["config"])
        cfg = transformers.AutoConfig.for_model(config.pop("model_type"), **config)
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=case["attention"])
        if dtypes[case["dtype"]] != torch.float32:
            model = model.to(dtypes[case["dtype"]])
        model.train()
        whole_params = sum(p.numel() for p in dict.fromkeys(model.parameters()))
        tied_before = model.lm_head.weight is model.model.embed_tokens.weight
        param_rows = [{"name": n, "shape": list(p.shape), "dtype": str(p.dtype).replace("torch.", "")} for n, p in model.named_parameters()]
        g = torch.Generator().manual_seed(1)
        x = torch.randint(0, cfg.vocab_size, tuple(case["input"]), generator=g)

        mark("segment", "wrap")
        parallelize_module(model, tp_mesh, tp_plan(cfg, sp, lp))
        if case.get("retie"):
            model.lm_head.weight = model.model.embed_tokens.weight
        localize_attention(model, tp)  # transformers 4.40.2 reshapes with these
        tp_placements = {n: str(getattr(p, "placements", None)) for n, p in model.named_parameters()}
        f = case["fsdp"]
        mp = f.get("mp")
        mp_policy = MixedPrecisionPolicy(param_dtype=dtypes[mp["paramDtype"]], reduce_dtype=dtypes[mp["reduceDtype"]]) if mp else MixedPrecisionPolicy()
        kw = {"mesh": dp_mesh, "mp_policy": mp_policy, "reshard_after_forward": f["reshardAfterForward"]}
        units = []
        if f["units"] == "titan":
            fully_shard(model.model.embed_tokens, **kw)
            units.append("model.embed_tokens")
        for i, layer in enumerate(model.model.layers):
            fully_shard(layer, **kw)
            units.append(f"model.layers.{i}")
        if f["units"] == "titan":
            fully_shard([model.model.norm, model.lm_head], **kw)
            units.append("[model.norm, lm_head]")
        fully_shard(model, mesh=dp_mesh, mp_policy=mp_policy)  # root: FSDP2's default
        units.append("(root)")

        mark("segment", "optimizer")
        params = list(dict.fromkeys(model.parameters()))
        if case["optimizer"] == "adamw":
            opt = torch.optim.AdamW(params, lr=1e-3, foreach=False)
        else:
            opt = torch.optim.SGD(params, lr=1e-3, foreach=False)
        ctx = loss_parallel if lp else contextlib.nullcontext
        hooks = [
            model.lm_head.register_forward_hook(lambda m, a, o: mark("phase", "loss")),
            # prepend: before FSDP's root post-forward hook, whose work stays in "forward"
            model.register_forward_hook(lambda m, a, o: mark("phase", "forward-end"), prepend=True),
        ]

        def components():
            p_st, p_log, p_n = storage_stats(params)
            grads = [p.grad for p in params if p.grad is not None]
            g_st, g_log, g_n = storage_stats(grads)
            state = [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
            s_st, s_log, _ = storage_stats(state)
            b_st, _, _ = storage_stats(list(model.buffers()))
            return {
                "paramBytes": sum(p_st.values()),
                "paramLogicalBytes": p_log,
                "paramTensors": p_n,
                "gradBytes": sum(g_st.values()),
                "gradLogicalBytes": g_log,
                "gradTensors": g_n,
                "gradStorages": len(g_st),
                "optimizerStateBytes": sum(s_st.values()),
                "optimizerStateLogicalBytes": s_log,
                "bufferBytes": sum(b_st.values()),
                "inputBytes": x.numel() * x.element_size(),
                "_ptrs": {"param": p_st, "grad": g_st, "state": s_st, "buffer": b_st, "input": storage_stats([x])[0]},
            }

        comps = {}
        for s in range(1, STEPS + 1):
            mark("segment", f"step{s}")
            comps[s] = components()
            marked_step(mark, opt, lambda: model(input_ids=x, labels=x, use_cache=False).loss, ctx)
        mark("segment", "introspect-end")
        groups = fsdp_groups(model)
        mark("segment", "end")
        mark.on = False
        for h in hooks:
            h.remove()

    # ---------------- the stream ----------------
    stream = read_stream(prof, mark.labels, scope=True, ptr=True)  # fsdp2_cpu.read_stream's fields
    del prof
    steps = OrderedDict()
    for s in range(1, STEPS + 1):
        name = f"step{s}"
        c = dict(comps[s])
        ptrs = c.pop("_ptrs")
        live = fsdp2_cpu.live_blocks_before(stream, name)
        baseline = baseline_bytes(c)
        st = fsdp2_cpu.segment_stats(stream, name)
        c["baselineBytes"] = baseline
        c["allocatedBeforeStep"] = st["allocatedBefore"]
        c["unattributedBytes"] = st["allocatedBefore"] - baseline
        c["unattributedBlocks"] = unattributed_blocks(live, ptrs)
        c["livePeakBytes"] = baseline + st["maxDelta"]
        c["liveEndBytes"] = baseline + st["endDelta"]
        c["allocatorPeakBytes"] = st["allocatedBefore"] + st["maxDelta"]
        c["livePeakAt"] = st["peakAt"]
        c["events"] = st["events"]
        c["phases"] = st["phases"]
        if s == MEASURED_STEP:
            c["peakComposition"] = fsdp2_cpu.peak_composition(stream, name, st, ptrs, live)
            c["fsdpBlocks"] = fsdp2_cpu.fsdp_blocks(stream, name)
            c["scopes"] = fsdp2_cpu.scope_summary(stream, name)
        steps[name] = c
    measured = OrderedDict(steps[f"step{MEASURED_STEP}"])
    measured["optimizer"] = {"class": type(opt).__name__, "defaults": {k: v if isinstance(v, (int, float, bool, str, type(None))) else str(v) for k, v in opt.defaults.items()}}
    s4 = steps[f"step{STEPS}"]
    measured["steadyCheck"] = {"step": STEPS, "livePeakBytes": s4["livePeakBytes"], "baselineBytes": s4["baselineBytes"], "same": s4["livePeakBytes"] == measured["livePeakBytes"] and s4["baselineBytes"] == measured["baselineBytes"]}
    for s in steps.values():
        for k in ("phases", "unattributedBlocks", "peakComposition", "fsdpBlocks", "scopes"):
            s.pop(k, None)
    step_events = [e for e in stream if e["segment"] == f"step{MEASURED_STEP}"]
    blocks = step_blocks(step_events)

    # ---------------- the embedding's gradient ----------------
    emb = model.model.embed_tokens.weight
    V, h = cfg.vocab_size, cfg.hidden_size
    esize = torch.tensor([], dtype=local(emb).dtype).element_size()
    rdt = dtypes[mp["reduceDtype"]] if mp else local(emb).dtype
    rsize = torch.tensor([], dtype=rdt).element_size()
    sizes = {}
    for label, n in (("whole [V, h]", V * h), ("tp shard [V/t, h]", V // tp * h), ("fsdp x tp shard [V/(t dp), h]", V // tp // dp * h)):
        for dsz in sorted({esize, rsize, 4}):
            sizes.setdefault(n * dsz, []).append(f"{label} x {dsz} B")
    base3 = steps[f"step{MEASURED_STEP}"]["baselineBytes"]
    live_after, c_ = [], 0
    for e in step_events:
        c_ += e["bytes"]
        live_after.append(base3 + c_)
    emb_blocks = []
    for b in blocks:
        if b["bytes"] in sizes:
            # live bytes (baseline + the step's running delta) just after the block's allocation
            emb_blocks.append(dict(b, liveAfterAlloc=live_after[b["alloc"]["i"]] if b["alloc"] else None))
    emb_grad = {
        "vocab": V,
        "hidden": h,
        "sizes": {str(k): v for k, v in sizes.items()},
        "blocks": emb_blocks,
    }

    # ---------------- tables ----------------
    param_table = []
    by_name = dict(model.named_parameters())
    for r in param_rows:
        p_ = by_name.get(r["name"])
        if p_ is None:  # a tie broken or re-made
            param_table.append(dict(r, missing=True))
            continue
        gr = p_.grad
        lp_ = local(p_)
        param_table.append(
            {
                **r,
                "tpPlacements": tp_placements.get(r["name"]),
                "local": list(lp_.shape),
                "localStorageBytes": lp_.untyped_storage().nbytes(),
                "placements": str(getattr(p_, "placements", None)),
                "mesh": list(p_.device_mesh.mesh_dim_names or []) if isinstance(p_, DTensor) else None,
                "grad": list(local(gr).shape) if gr is not None else None,
                "gradDtype": str(local(gr).dtype).replace("torch.", "") if gr is not None else None,
                "gradPlacements": str(getattr(gr, "placements", None)) if gr is not None else None,
                "state": {k: list(local(v).shape) for k, v in opt.state.get(p_, {}).items() if torch.is_tensor(v) and v.dim() > 0},
            }
        )

    # ---------------- saved tensors of a fifth forward ----------------
    param_ptrs = set(storage_stats(params)[0])
    fsdp_params = [fp for grp in fsdp_param_groups(model) for fp in grp.fsdp_params]
    saved, saved_params = {}, {}

    def pack(x_):
        lt = local(x_)
        st_ = lt.untyped_storage()
        ptr = st_.data_ptr()
        if ptr and ptr not in param_ptrs:
            rec = {"bytes": st_.nbytes(), "shape": list(lt.shape), "dtype": str(lt.dtype).replace("torch.", "")}
            fqn = unsharded_param_ptrs(fsdp_params).get(ptr)
            if fqn is not None:
                saved_params.setdefault(fqn, dict(rec, param=fqn))
            elif ptr not in saved:
                saved[ptr] = rec
        return x_

    saved_tensors_pass(opt, lambda: model(input_ids=x, labels=x, use_cache=False).loss, pack, ctx)

    result = fixture_head(case, GENERATED_BY)
    result["env"] = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": "cpu",
        "threads": torch.get_num_threads(),
        "processGroup": FAKE_PG,
        "mesh": {"shape": [dp, tp], "names": ["dp", "tp"], "dpRank": dp_mesh.get_local_rank(), "tpRank": tp_mesh.get_local_rank()},
    }
    result["adjustment"] = ADJUSTMENT
    result["params"] = {"whole": whole_params, "local": sum(local(p).numel() for p in params)}
    result["tied"] = {"beforeParallelize": tied_before, "after": model.lm_head.weight is model.model.embed_tokens.weight}
    result["paramTable"] = param_table
    result["fsdp"] = {"units": units, "groups": groups, "perGroup": fsdp2_cpu._per_group_figures(groups, dp)}
    result["savedBytes"] = sum(v["bytes"] for v in saved.values())
    result["savedParamBytes"] = sum(v["bytes"] for v in saved_params.values())
    result["savedParams"] = list(saved_params.values())
    result["saved"] = sorted(saved.values(), key=lambda v: -v["bytes"])
    result["embeddingGrad"] = emb_grad
    result["steps"] = steps
    result["train"] = {case["optimizer"]: measured}
    if case.get("traceStep"):
        result["trace"] = [{k: b[k] for k in ("i", "phase", "op", "top", "scope", "bytes", "allocIndex") if b.get(k) is not None} for b in trace_rows(step_events)]
    result["notes"] = notes
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        pass
    gc.collect()
    return result


def fsdp_groups(root):
    """fsdp2_cpu._fsdp_groups plus, per parameter, the TP placements of the unsharded (TP-local)
    parameter and the 2-D placements of the sharded one."""
    groups = fsdp2_cpu._fsdp_groups(root)
    pgs = fsdp_param_groups(root)
    if len(pgs) != len(groups):
        return groups
    for gd, g in zip(groups, pgs):
        for row, fp in zip(gd["params"], g.fsdp_params):
            spec = getattr(fp, "_unsharded_dtensor_spec", None)
            row["tpPlacements"] = str(spec.placements) if spec is not None else None
            row["globalSize"] = list(spec.shape) if spec is not None else None
            row["spmdPlacements"] = str(getattr(fp, "_spmd_placements", None))
    return groups


def step_blocks(evs):
    """Every block the step allocated or freed: bytes, where allocated and freed (event index in
    the step, phase, op, FSDP scope)."""
    open_, rows = {}, []
    for i, e in enumerate(evs):
        where = {"i": i, "phase": e["phase"], "op": e["op"], "top": e["top"], "scope": e.get("scope")}
        if e["bytes"] > 0:
            r = {"bytes": e["bytes"], "alloc": where, "free": None}
            open_[e["ptr"]] = r
            rows.append(r)
        elif e["bytes"] < 0:
            r = open_.pop(e["ptr"], None)
            if r is None:
                r = {"bytes": -e["bytes"], "alloc": None, "free": None}
                rows.append(r)
            r["free"] = where
    return rows


def trace_rows(evs):
    open_, out = {}, []
    for i, e in enumerate(evs):
        r = {"i": i, "phase": e["phase"], "op": e["op"], "top": e["top"], "scope": e.get("scope"), "bytes": e["bytes"]}
        if e["bytes"] > 0:
            open_[e["ptr"]] = i
        elif e["bytes"] < 0:
            r["allocIndex"] = open_.pop(e["ptr"], "before")
        out.append(r)
    return out


KEY_ORDER = ["id", "case", "generatedBy", "command", "env", "error", "traceback", "stderr"]


def dump_fixture(res: dict) -> str:
    """The fixture's text, its fields in KEY_ORDER first and ``command`` the canonical one (no
    --out): indent=1 JSON; each row of the long lists (trace, fsdpBlocks, paramTable, embedding
    blocks) on one line."""
    res["command"] = f"/tmp/t213/bin/python {GENERATED_BY} --only {res['id']}"
    res = OrderedDict(sorted(res.items(), key=lambda kv: KEY_ORDER.index(kv[0]) if kv[0] in KEY_ORDER else len(KEY_ORDER)))

    def pick(doc, compact):
        for tr in (doc.get("train") or {}).values():
            if isinstance(tr.get("fsdpBlocks"), list):
                tr["fsdpBlocks"] = compact(tr["fsdpBlocks"])
        for k in ("trace", "paramTable", "saved", "savedParams"):
            if isinstance(doc.get(k), list):
                doc[k] = compact(doc[k])
        if isinstance(doc.get("embeddingGrad"), dict):
            doc["embeddingGrad"]["blocks"] = compact(doc["embeddingGrad"]["blocks"])
        for g in (doc.get("fsdp") or {}).get("groups") or []:
            g["params"] = compact(g["params"])

    return dump_rows(res, pick)


def main(argv=None) -> int:
    args = arg_parser(__doc__, DEFAULT_OUT).parse_args(argv)

    def summary(res):
        tr = next(iter(res["train"].values()))
        return (
            f"params {res['params']['local']} paramBytes {tr['paramBytes']} grads {tr['gradBytes']} state {tr['optimizerStateBytes']} "
            f"saved {res['savedBytes']} livePeak {tr['livePeakBytes']} unattributed {tr['unattributedBytes']} steady {tr['steadyCheck']['same']}"
        )

    return drive(args, CASES, run_child, script=__file__, child_args=hf_child_args(args), summary=summary, dump=dump_fixture, generated_by=GENERATED_BY, strict_only=True, timed_errors=True)


if __name__ == "__main__":
    sys.exit(main())
