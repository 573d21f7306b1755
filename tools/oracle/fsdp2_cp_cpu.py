#!/usr/bin/env python3
"""One rank of FSDP2 x context parallelism laid out as torchtitan lays it out, measured on PyTorch
2.13 (CPU) with the fake process group, on a real transformers 4.40.2 Llama (sdpa attention).

Run from the repository root with the torch 2.13 CPU venv (cases run one at a time, each in its
own child process with one thread):

    /tmp/t213/bin/python tools/oracle/fsdp2_cp_cpu.py [--only ID,...] [--out test/fixtures/fsdp2-cp-cpu]
        [--transformers-src /work/hfenv/hf-4.40.2:/work/hfenv/stubs] [--hf-deps /usr/lib/python3/dist-packages]

Layout (torchtitan ``ParallelDims.build_mesh`` / ``apply_fsdp`` / ``create_context_parallel_ctx``):

* ``init_process_group("fake", store=FakeStore(), rank=R, world_size=dp*cp)``;
  ``mesh = init_device_mesh("cpu", (dp, cp), mesh_dim_names=("dp_shard", "cp"))``;
  ``fsdp_mesh = mesh["dp_shard", "cp"]._flatten("dp_shard_cp")`` (1-D, dp*cp ranks; torch 2.13 has
  ``DeviceMesh._flatten``); ``cp_mesh = mesh["cp"]``.  Case field ``fsdpMesh`` may instead say
  ``"dp_shard"`` (FSDP over the dp ranks only, parameters replicated across cp: a control, not
  torchtitan's layout).
* ``fully_shard(model.model.layers[i], mesh=fsdp_mesh, reshard_after_forward=..., mp_policy=...)``
  for every decoder layer, then ``fully_shard(model, mesh=fsdp_mesh, mp_policy=...)`` (root;
  reshard_after_forward default, which FSDP2 makes False for the root).
* Each step: ``zero_grad(set_to_none=True)``; inside a fresh ``context_parallel(cp_mesh,
  buffers=[input_ids, labels, position_ids], buffer_seq_dims=[1, 1, 1])``:
  ``model(input_ids=..., labels=..., position_ids=..., use_cache=False).loss`` and ``backward``;
  then SGD ``step`` (foreach=False, no state) outside the context.  Three steps, step 3 measured.
  With cp == 1 there is no context (plain FSDP2 on the same inputs).

The CPU flash SDPA op is routed through torch's own ring attention by ``cp_cpu.install_cpu_ring``
(imported, unchanged; see tools/oracle/cp_cpu.py and /work/notes/cp.md).  The measurement is
cp_cpu.py's (profiler ``profile_memory=True`` from before the model is built; ``aten::is_set_to``
marks for segment/phase/ring; ``savedBytes`` from a pack hook on a fourth forward inside a CP
context, excluding parameter storages: the sharded local shards AND the unsharded parameters FSDP
has all-gathered at pack time, reported separately, one per parameter, as ``savedUnshardedParams``
and ``savedUnshardedParamBytes``: what autograd references, whose storage FSDP frees on reshard
and re-gathers in backward) plus
fsdp2_cpu.py's FSDP introspection (``fsdp.groups``, ``fsdp.perGroup``, ``paramTable``,
``inventory``, ``fsdpBlocks``, ``scopes``, ``peakComposition``; each allocation carries its
innermost ``FSDP::...`` record_function scope).  Traced cases add ``train.sgd.events``: every
allocation and free of step 3 in order (phase, ring mark, op, top op, FSDP scope, input shapes,
allocation id, running live bytes).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections import OrderedDict

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import cp_cpu  # noqa: E402  (install_cpu_ring, CONFIG, ADJUSTMENT, _import_hf, _shape_str)
import fsdp2_cpu  # noqa: E402  (FSDP introspection and stream summaries)

GENERATED_BY = "tools/oracle/fsdp2_cp_cpu.py"
DEFAULT_OUT = os.path.join("test", "fixtures", "fsdp2-cp-cpu")
STEPS = 3
MEASURED_STEP = 3
MARK_OP = "aten::is_set_to"
CONFIG = dict(cp_cpu.CONFIG)


def _case(cid, dp, cp, rank, **kw):
    c = {
        "id": cid,
        "config": dict(CONFIG),
        "transformers": "4.40.2",
        "attention": "sdpa",
        "input": [2, 64],
        "dtype": "float32",
        "dp": dp,
        "cp": cp,
        "rank": rank,
        "fsdpMesh": "dp_shard_cp",
        "units": ["model.layers.0", "model.layers.1"],
        "reshardAfterForward": True,
        "mp": None,
        "loadBalance": cp > 1,
        "rotateMethod": "allgather" if cp > 1 else None,
        "optimizer": "sgd",
        "traceStep": False,
    }
    c.update(kw)
    return c


CASES = [
    _case("dp2cp2", 2, 2, 0, traceStep=True),
    _case("dp2cp2_r3", 2, 2, 3, traceStep=True),
    _case("dp2cp2_r1", 2, 2, 1),
    _case("dp1cp4", 1, 4, 0, traceStep=True),
    _case("dp1cp4_r3", 1, 4, 3),
    _case("dp1cp4_b1", 1, 4, 0, input=[1, 64], traceStep=True, note="input of test/fixtures/cp-cpu/cp4.json"),
    _case("dp3cp2", 3, 2, 0, note="shard world 6: dim-0 sizes not divisible (1000 rows -> 167 per rank, padded)"),
    _case("dp3cp2_r5", 3, 2, 5, note="last rank of the 6-way shard: short shards padded to 167 rows"),
    _case("dp2cp2_noraf", 2, 2, 0, reshardAfterForward=False, traceStep=True),
    _case("dp2cp2_bf16", 2, 2, 0, dtype="bfloat16", traceStep=True, note="parameters stored in bf16 (model.to(bfloat16)), no MixedPrecisionPolicy"),
    _case("dp2cp2_mp", 2, 2, 0, mp={"paramDtype": "bfloat16", "reduceDtype": "float32"}, traceStep=True, note="fp32 parameters, MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)"),
    _case("dp2cp2_fsdpdp", 2, 2, 0, fsdpMesh="dp_shard", note="control (not torchtitan): FSDP over mesh['dp_shard'] only, parameters replicated across cp"),
    _case("dp4cp1", 4, 1, 0, note="control: FSDP2 over 4 ranks, no context parallelism, same inputs"),
]


def _local(x):
    from torch.distributed.tensor import DTensor

    while True:
        if isinstance(x, DTensor):
            x = x._local_tensor
        elif type(x).__name__ == "AsyncCollectiveTensor":
            x = x.elem
        else:
            return x


def _storages(tensors):
    seen = {}
    logical = 0
    for x in tensors:
        if x is None:
            continue
        lt = _local(x)
        logical += lt.numel() * lt.element_size()
        st = lt.untyped_storage()
        if st.nbytes() and st.data_ptr():
            seen[st.data_ptr()] = st.nbytes()
    return seen, logical


def _fsdp_params(model):
    from torch.distributed.fsdp import FSDPModule

    out, seen = [], set()
    for _n, mod in model.named_modules():
        if not isinstance(mod, FSDPModule):
            continue
        state = mod._get_fsdp_state()
        if id(state) in seen:
            continue
        seen.add(id(state))
        pgs = getattr(state, "_fsdp_param_groups", None)
        if pgs is None:
            one = getattr(state, "_fsdp_param_group", None)
            pgs = [one] if one is not None else []
        for g in pgs:
            out.extend(g.fsdp_params)
    return out


def run_child(case: dict, args) -> dict:
    transformers = cp_cpu._import_hf(args)
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor
    from torch.profiler import ProfilerActivity, profile

    if transformers.__version__ != case["transformers"]:
        raise SystemExit(f"needs transformers {case['transformers']}, got {transformers.__version__}")
    torch.set_num_threads(1)
    dp, c, rank = int(case["dp"]), int(case["cp"]), int(case["rank"])
    world = dp * c
    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16}
    dtype = dtypes[case["dtype"]]
    trace = bool(case.get("traceStep"))
    notes = []

    labels_ = []
    mark_tensor = torch.zeros(1)

    def mark(kind, value):
        labels_.append((kind, value))
        mark_tensor.is_set_to(mark_tensor)

    A, ring_counter = None, {}
    mesh_info = {}
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=trace) as prof:
        mark("segment", "build")
        from torch.testing._internal.distributed.fake_pg import FakeStore
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        from torch.distributed.tensor.experimental import context_parallel

        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
        mesh = init_device_mesh("cpu", (dp, c), mesh_dim_names=("dp_shard", "cp"))
        if case["fsdpMesh"] == "dp_shard_cp":
            fsdp_mesh = mesh["dp_shard", "cp"]._flatten("dp_shard_cp")
        elif case["fsdpMesh"] == "dp_shard":
            fsdp_mesh = mesh["dp_shard"]
        else:
            raise ValueError(case["fsdpMesh"])
        cp_mesh = mesh["cp"]

        def ranks(m):
            try:
                return dist.get_process_group_ranks(m.get_group())
            except Exception as e:  # noqa: BLE001
                return f"unavailable: {type(e).__name__}: {e}"

        mesh_info = {
            "shape": [dp, c],
            "dimNames": ["dp_shard", "cp"],
            "coordinate": mesh.get_coordinate(),
            "fsdpMesh": case["fsdpMesh"],
            "fsdpMeshSize": fsdp_mesh.size(),
            "fsdpMeshLocalRank": fsdp_mesh.get_local_rank(),
            "fsdpGroupRanks": ranks(fsdp_mesh),
            "cpMeshSize": cp_mesh.size(),
            "cpLocalRank": cp_mesh.get_local_rank(),
            "cpGroupRanks": ranks(cp_mesh),
            "dpLocalRank": mesh["dp_shard"].get_local_rank(),
            "dpGroupRanks": ranks(mesh["dp_shard"]),
            "how": "init_device_mesh('cpu', (dp, cp), mesh_dim_names=('dp_shard','cp')); " + ("mesh['dp_shard','cp']._flatten('dp_shard_cp')" if case["fsdpMesh"] == "dp_shard_cp" else "mesh['dp_shard']"),
        }
        if c > 1:
            A, ring_counter = cp_cpu.install_cpu_ring(mark if trace else None)
            A._cp_options.enable_load_balance = bool(case["loadBalance"])
            A.set_rotate_method(case["rotateMethod"])
        torch.manual_seed(0)
        config = dict(case["config"])
        cfg = transformers.AutoConfig.for_model(config.pop("model_type"), **config)
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=case["attention"])
        if dtype != torch.float32:
            model.to(dtype)
        model.train()
        whole_params = sum(p.numel() for p in model.parameters())
        param_rows = [{"name": n, "shape": list(p.shape), "numel": p.numel(), "dtype": str(p.dtype).replace("torch.", "")} for n, p in model.named_parameters()]
        buffer_bytes_static = sum(b.numel() * b.element_size() for b in model.buffers())
        g = torch.Generator().manual_seed(1)
        b, s = case["input"]
        ids = torch.randint(0, cfg.vocab_size, (b, s), generator=g)
        lab = ids.clone()
        pos = torch.arange(s).unsqueeze(0).contiguous()
        bufs = [ids, lab, pos]
        names = ["input_ids", "labels", "position_ids"]

        mark("segment", "wrap")
        mp = case.get("mp")
        mp_policy = MixedPrecisionPolicy(param_dtype=dtypes[mp["paramDtype"]], reduce_dtype=dtypes[mp["reduceDtype"]]) if mp else MixedPrecisionPolicy()
        for key in case["units"]:
            fully_shard(model.get_submodule(key), mesh=fsdp_mesh, reshard_after_forward=case["reshardAfterForward"], mp_policy=mp_policy)
        fully_shard(model, mesh=fsdp_mesh, mp_policy=mp_policy)

        mark("segment", "optimizer")
        params = list(dict.fromkeys(model.parameters()))
        opt = torch.optim.SGD(params, lr=1e-3, foreach=False)

        hooks = [
            model.get_output_embeddings().register_forward_hook(lambda m, a, o: mark("phase", "loss")),
            # prepended: runs before FSDP's root post-forward hook, whose work stays in "forward-end"
            model.register_forward_hook(lambda m, a, o: mark("phase", "forward-end"), prepend=True),
        ]

        def cp_ctx():
            if c == 1:
                return contextlib.nullcontext()
            return context_parallel(cp_mesh, buffers=bufs, buffer_seq_dims=[1, 1, 1])

        buffer_record = {}

        def record_buffers(key):
            buffer_record[key] = [{"name": n, "shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""), "storageBytes": t.untyped_storage().nbytes(), "dataPtr": t.untyped_storage().data_ptr()} for n, t in zip(names, bufs)]

        def step(s_):
            ring_counter.update({k: 0 for k in ring_counter})
            mark("phase", "zero_grad")
            opt.zero_grad(set_to_none=True)
            mark("phase", "shard")
            if s_ == MEASURED_STEP:
                record_buffers("before")
            with cp_ctx():
                if s_ == MEASURED_STEP:
                    record_buffers("inside")
                mark("phase", "forward")
                loss = model(input_ids=ids, labels=lab, position_ids=pos, use_cache=False).loss
                mark("phase", "backward")
                loss.backward()
                mark("phase", "unshard")
            if s_ == MEASURED_STEP:
                record_buffers("after")
            mark("phase", "step")
            opt.step()
            mark("phase", "cleanup")
            lv = float(_local(loss.detach()).float())
            del loss
            mark("phase", "end")
            return lv

        def components():
            p_st, p_log = _storages(params)
            g_st, g_log = _storages([p.grad for p in params])
            b_st, _ = _storages(list(model.buffers()))
            i_st, _ = _storages(bufs)
            return {
                "paramBytes": sum(p_st.values()),
                "paramLogicalBytes": p_log,
                "gradBytes": sum(g_st.values()),
                "gradLogicalBytes": g_log,
                "gradStorages": len(g_st),
                "bufferBytes": sum(b_st.values()),
                "inputBytes": sum(i_st.values()),
                "optimizerStateBytes": 0,
                "_ptrs": {"param": p_st, "grad": g_st, "buffer": b_st, "input": i_st},
            }

        comps, losses = {}, {}
        for s_ in range(1, STEPS + 1):
            mark("segment", f"step{s_}")
            comps[s_] = components()
            losses[s_] = step(s_)
        mark("segment", "end")
        for h in hooks:
            h.remove()

    # ---- the allocation stream (cp_cpu's reader plus the FSDP scope and the pointer) ----
    nodes = []

    def walk(n):
        nodes.append(n)
        for ch in n.children:
            walk(ch)

    for root in prof.profiler.kineto_results.experimental_event_tree():
        walk(root)
    evs = []
    for i, n in enumerate(nodes):
        if "Allocation" in str(n.tag):
            evs.append((n.start_time_ns, i, "alloc", n))
        elif n.name == MARK_OP:
            evs.append((n.start_time_ns, i, "mark", n))
    evs.sort(key=lambda e: (e[0], e[1]))
    li = 0
    seg, phase, ring = "setup", "setup", None
    stream = []
    for _ts, _i, kind, n in evs:
        if kind == "mark":
            k, v = labels_[li]
            li += 1
            if k == "segment":
                seg, phase, ring = v, "setup", None
            elif k == "phase":
                phase = v
            else:
                ring = v
            continue
        anc = []
        p = n.parent
        while p is not None:
            anc.append(p)
            p = p.parent
        scope = next((a.name for a in anc if a.name.startswith("FSDP::")), None)
        ev = {
            "segment": seg,
            "phase": phase,
            "ring": ring,
            "op": anc[0].name if anc else None,
            "top": anc[-1].name if anc else None,
            "scope": scope,
            "bytes": int(n.extra_fields.alloc_size),
            "id": None if n.extra_fields.allocation_id is None else int(n.extra_fields.allocation_id),
            "ptr": int(n.extra_fields.ptr),
        }
        if trace and anc and ev["bytes"] > 0:
            try:
                ev["inputs"] = [x for x in (cp_cpu._shape_str(m) for m in anc[0].extra_fields.inputs) if x is not None]
            except Exception:  # noqa: BLE001
                pass
        stream.append(ev)
    del prof, nodes, evs
    if li != len(labels_):
        raise RuntimeError("marks missing from the profiler's events")

    steps = OrderedDict()
    measured = None
    for s_ in range(1, STEPS + 1):
        name = f"step{s_}"
        comp = dict(comps[s_])
        ptrs = comp.pop("_ptrs")
        baseline = comp["paramBytes"] + comp["gradBytes"] + comp["bufferBytes"] + comp["inputBytes"] + comp["optimizerStateBytes"]
        live = fsdp2_cpu.live_blocks_before(stream, name)
        st = fsdp2_cpu.segment_stats(stream, name)
        known = set()
        for grp in ptrs.values():
            known.update(grp)
        comp["baselineBytes"] = baseline
        comp["allocatedBefore"] = st["allocatedBefore"]
        comp["unattributedBytes"] = st["allocatedBefore"] - baseline
        comp["unattributedBlocks"] = [{"bytes": e["bytes"], "segment": e["segment"], "phase": e["phase"], "op": e["op"], "scope": e.get("scope")} for ptr, e in live.items() if ptr not in known][:20]
        comp["livePeakBytes"] = baseline + st["maxDelta"]
        comp["liveEndBytes"] = baseline + st["endDelta"]
        pk = st["peakIndex"]
        seg_evs = [e for e in stream if e["segment"] == name]
        comp["livePeakAt"] = {k: seg_evs[pk][k] for k in ("phase", "ring", "op", "top", "scope") if pk >= 0 and seg_evs[pk].get(k) is not None}
        comp["events"] = st["events"]
        comp["phases"] = st["phases"]
        if s_ == MEASURED_STEP:
            comp["peakComposition"] = fsdp2_cpu.peak_composition(stream, name, st, ptrs, live)
            comp["fsdpBlocks"] = fsdp2_cpu.fsdp_blocks(stream, name)
            comp["scopes"] = fsdp2_cpu.scope_summary(stream, name)
            if trace:
                cum = 0
                rows = []
                for e in seg_evs:
                    cum += e["bytes"]
                    d = {k: v for k, v in e.items() if k not in ("segment", "ptr") and v is not None}
                    d["live"] = cum
                    rows.append(d)
                comp["events"] = rows
                comp["stepEvents"] = [r for r in rows if r["phase"] == "step"]
            measured = comp
        steps[name] = comp
    for k_, s_ in steps.items():
        if k_ != f"step{MEASURED_STEP}":
            for k in ("phases", "unattributedBlocks"):
                s_.pop(k, None)

    # ---- FSDP introspection (after the steps; dtypes are set at lazy init) ----
    fsdp_groups = fsdp2_cpu._fsdp_groups(model)
    shard_world = fsdp_mesh.size()
    inventory = fsdp2_cpu._inventory(model, params, opt, _local, DTensor)
    paramTable = fsdp2_cpu._param_table(param_rows, inventory)

    # ---- saved tensors of a fourth forward (inside a CP context) ----
    param_ptrs = set(_storages(params)[0])
    fparams = _fsdp_params(model)
    saved, saved_params, saved_list = {}, {}, []

    def unsharded_ptrs():
        """data_ptr -> fqn of the unsharded parameters whose storage is allocated now (FSDP frees
        them with resize_(0) on reshard, and a later layer's may reuse the address: keyed by fqn)."""
        out = {}
        for fp in fparams:
            up = getattr(fp, "_unsharded_param", None)
            if up is not None:
                st_ = up.untyped_storage()
                if st_.nbytes() and st_.data_ptr():
                    out[st_.data_ptr()] = getattr(fp, "_param_fqn", None) or str(id(fp))
        return out

    def pack(x_):
        lt = _local(x_)
        st_ = lt.untyped_storage()
        ptr = st_.data_ptr()
        is_param = ptr in param_ptrs
        fqn = unsharded_ptrs().get(ptr)
        if ptr and st_.nbytes():
            entry = {"bytes": st_.nbytes(), "shape": list(lt.shape), "dtype": str(lt.dtype).replace("torch.", "")}
            if fqn is not None or is_param:
                saved_params.setdefault(fqn or f"sharded@{ptr}", dict(entry, fqn=fqn))
            elif ptr not in saved:
                saved[ptr] = entry
        saved_list.append(1)
        return x_.detach() if x_.grad_fn is not None else x_

    opt.zero_grad(set_to_none=True)
    sdpa_saved = []
    with cp_ctx():
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda p_: p_):
            out = model(input_ids=ids, labels=lab, position_ids=pos, use_cache=False)
            loss = out.loss
        seen_nodes = set()
        stack = [loss.grad_fn]
        while stack:
            fn = stack.pop()
            if fn is None or fn in seen_nodes:
                continue
            seen_nodes.add(fn)
            if "ScaledDotProduct" in type(fn).__name__:
                d = {"node": type(fn).__name__}
                for attr in ("_saved_query", "_saved_key", "_saved_value", "_saved_output", "_saved_logsumexp"):
                    t_ = getattr(fn, attr, None)
                    if torch.is_tensor(t_):
                        lt = _local(t_)
                        d[attr[len("_saved_"):]] = {"shape": list(lt.shape), "stride": list(lt.stride()), "dtype": str(lt.dtype).replace("torch.", ""), "storageBytes": lt.untyped_storage().nbytes(), "dtensor": isinstance(t_, DTensor)}
                d["is_causal"] = getattr(fn, "_saved_is_causal", None)
                sdpa_saved.append(d)
            for nf, _ in fn.next_functions:
                stack.append(nf)
        loss.backward()
    del loss, out

    result = OrderedDict()
    result["id"] = case["id"]
    result["case"] = case
    result["generatedBy"] = GENERATED_BY
    result["command"] = f"/tmp/t213/bin/python tools/oracle/fsdp2_cp_cpu.py --only {case['id']}"
    result["env"] = {"torch": torch.__version__, "transformers": transformers.__version__, "python": sys.version.split()[0], "device": "cpu", "threads": 1, "processGroup": "fake (torch.testing._internal.distributed.fake_pg.FakeStore)"}
    result["world"] = world
    result["rank"] = rank
    result["mesh"] = mesh_info
    result["adjustment"] = cp_cpu.ADJUSTMENT if c > 1 else None
    result["cpOptions"] = {"enable_load_balance": bool(A._cp_options.enable_load_balance), "rotate_method": A._cp_options.rotate_method.name, "convert_to_f32": bool(A._cp_options.convert_to_f32)} if A is not None else None
    result["cpBuffers"] = {k: [{kk: vv for kk, vv in e.items() if kk != "dataPtr"} | {"sameStorageAsBefore": e["dataPtr"] == buffer_record["before"][i]["dataPtr"]} for i, e in enumerate(v)] for k, v in buffer_record.items()}
    result["params"] = {"whole": whole_params, "local": sum(_local(p).numel() for p in params), "localStorageBytes": measured["paramBytes"], "localLogicalBytes": measured["paramLogicalBytes"]}
    result["bufferBytes"] = buffer_bytes_static
    result["paramTable"] = paramTable
    result["fsdp"] = {
        "units": list(case["units"]),
        "root": True,
        "meshDim": case["fsdpMesh"],
        "shardWorld": shard_world,
        "groups": fsdp_groups,
        "perGroup": fsdp2_cpu._per_group_figures(fsdp_groups, shard_world),
    }
    result["inventory"] = inventory
    result["lossesNote"] = "fake process group: all-gathered parameters and ring k/v are uninitialised memory; losses are not meaningful"
    result["losses"] = [losses[k] for k in sorted(losses)]
    result["savedBytes"] = sum(v["bytes"] for v in saved.values())
    result["savedUnshardedParamBytes"] = sum(v["bytes"] for v in saved_params.values())
    result["savedUnshardedParams"] = list(saved_params.values())
    result["saved"] = sorted(saved.values(), key=lambda v: -v["bytes"])
    result["sdpaNodes"] = sdpa_saved
    result["steps"] = {k: {kk: vv for kk, vv in v.items() if kk not in ("peakComposition", "fsdpBlocks", "scopes", "stepEvents") and not (kk == "events" and isinstance(vv, list))} for k, v in steps.items() if k != f"step{MEASURED_STEP}"}
    result["train"] = {case["optimizer"]: measured}
    result["notes"] = notes
    dist.destroy_process_group()
    return result


def dump_fixture(res: dict) -> str:
    """indent=1 JSON with each row of the long lists (fsdpBlocks, inventory params, events) on one line."""
    rows = []

    def compact(lst):
        out = []
        for r in lst:
            rows.append(json.dumps(r, separators=(",", ":")))
            out.append(f"@@ROW{len(rows) - 1}@@")
        return out

    doc = json.loads(json.dumps(res))
    for tr in (doc.get("train") or {}).values():
        for k in ("fsdpBlocks", "events", "stepEvents"):
            if isinstance(tr.get(k), list):
                tr[k] = compact(tr[k])
    inv = doc.get("inventory")
    if isinstance(inv, dict) and isinstance(inv.get("params"), list):
        inv["params"] = compact(inv["params"])
    if isinstance(doc.get("paramTable"), list):
        doc["paramTable"] = compact(doc["paramTable"])
    text = json.dumps(doc, indent=1)
    for i, r in enumerate(rows):
        text = text.replace(f'"@@ROW{i}@@"', r, 1)
    return text + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=None)
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--transformers-src", default=os.environ.get("ORACLE_TRANSFORMERS_SRC", "/work/hfenv/hf-4.40.2:/work/hfenv/stubs"))
    ap.add_argument("--hf-deps", default="/usr/lib/python3/dist-packages")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child-out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child is not None:
        case = next(c for c in CASES if c["id"] == args.child)
        try:
            res = run_child(case, args)
        except Exception as e:  # noqa: BLE001
            res = {"id": case["id"], "case": case, "generatedBy": GENERATED_BY, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        with open(args.child_out, "w") as f:
            json.dump(res, f)
        return 0
    if args.only:
        want = [w.strip() for w in args.only.split(",") if w.strip()]
        unknown = [w for w in want if w not in {c["id"] for c in CASES}]
        if unknown:
            raise SystemExit(f"unknown case ids: {unknown}")
        cases = [c for c in CASES if c["id"] in want]
    else:
        cases = CASES
    os.makedirs(args.out, exist_ok=True)
    failed = 0
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    for case in cases:  # one at a time
        t0 = time.time()
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
            out = tmp.name
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", case["id"], "--child-out", out, "--transformers-src", args.transformers_src, "--hf-deps", args.hf_deps], env=env, capture_output=True, text=True)
        try:
            with open(out) as f:
                res = json.load(f)
        except Exception:  # noqa: BLE001
            res = {"id": case["id"], "case": case, "generatedBy": GENERATED_BY, "error": f"child exited {proc.returncode}", "stderr": proc.stderr[-4000:]}
        os.unlink(out)
        with open(os.path.join(args.out, f"{case['id']}.json"), "w") as f:
            f.write(dump_fixture(res))
        if "error" in res:
            failed += 1
            print(f"{case['id']}: ERROR {res['error']}\n{res.get('traceback', res.get('stderr', ''))[-3000:]}", flush=True)
        else:
            tr = next(iter(res["train"].values()))
            print(f"{case['id']}: params local {res['params']['local']} ({tr['paramBytes']} B) grads {tr['gradBytes']} saved {res['savedBytes']} livePeak {tr['livePeakBytes']} baseline {tr['baselineBytes']} unattributed {tr['unattributedBytes']} ({time.time() - t0:.1f} s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
