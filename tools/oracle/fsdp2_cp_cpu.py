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

import os
import sys
from collections import OrderedDict

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import cp_cpu  # noqa: E402  (install_cpu_ring, CONFIG, ADJUSTMENT, cp_inputs, CPTrainer, cp_options)
import fsdp2_cpu  # noqa: E402  (FSDP introspection and stream summaries)
from fake_pg_harness import FAKE_PG, Marker, arg_parser, baseline_bytes, drive, dump_rows, fixture_head, fsdp_param_groups, hf_child_args, import_hf, init_fake_pg, live_rows, local, read_stream, start_child, storage_stats, unattributed_blocks, unsharded_param_ptrs  # noqa: E402

GENERATED_BY = "tools/oracle/fsdp2_cp_cpu.py"
DEFAULT_OUT = os.path.join("test", "fixtures", "fsdp2-cp-cpu")
STEPS = 3
MEASURED_STEP = 3
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


def run_child(case: dict, args) -> dict:
    transformers = import_hf(args)
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor
    from torch.profiler import ProfilerActivity, profile

    start_child(transformers, case)
    dp, c, rank = int(case["dp"]), int(case["cp"]), int(case["rank"])
    world = dp * c
    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16}
    dtype = dtypes[case["dtype"]]
    trace = bool(case.get("traceStep"))
    notes = []
    mark = Marker()

    A, ring_counter = None, {}
    mesh_info = {}
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=trace) as prof:
        mark("segment", "build")
        init_fake_pg(rank, world)
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

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
        bufs = cp_cpu.cp_inputs(cfg.vocab_size, case["input"])

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

        trainer = cp_cpu.CPTrainer(mark, model, opt, bufs, cp_mesh if c > 1 else None, ring_counter, MEASURED_STEP)

        def components():
            p_st, p_log, _ = storage_stats(params)
            g_st, g_log, _ = storage_stats([p.grad for p in params])
            b_st, _, _ = storage_stats(list(model.buffers()))
            i_st, _, _ = storage_stats(bufs)
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
            losses[s_] = trainer.step(s_)
        mark("segment", "end")
        for h in hooks:
            h.remove()

    # ---- the allocation stream (cp_cpu's reader plus the FSDP scope and the pointer) ----
    stream = read_stream(prof, mark.labels, ring=True, scope=True, alloc_id=True, ptr=True, inputs=trace)
    del prof

    steps = OrderedDict()
    measured = None
    for s_ in range(1, STEPS + 1):
        name = f"step{s_}"
        comp = dict(comps[s_])
        ptrs = comp.pop("_ptrs")
        baseline = baseline_bytes(comp)
        live = fsdp2_cpu.live_blocks_before(stream, name)
        st = fsdp2_cpu.segment_stats(stream, name)
        comp["baselineBytes"] = baseline
        comp["allocatedBefore"] = st["allocatedBefore"]
        comp["unattributedBytes"] = st["allocatedBefore"] - baseline
        comp["unattributedBlocks"] = unattributed_blocks(live, ptrs)
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
                rows = live_rows(seg_evs, drop=("segment", "ptr"))
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
    inventory = fsdp2_cpu._inventory(model, params, opt, local, DTensor)
    paramTable = fsdp2_cpu._param_table(param_rows, inventory)

    # ---- saved tensors of a fourth forward (inside a CP context) ----
    param_ptrs = set(storage_stats(params)[0])
    fparams = [fp for grp in fsdp_param_groups(model) for fp in grp.fsdp_params]
    saved, saved_params = {}, {}

    def pack(x_):
        lt = local(x_)
        st_ = lt.untyped_storage()
        ptr = st_.data_ptr()
        is_param = ptr in param_ptrs
        fqn = unsharded_param_ptrs(fparams).get(ptr)
        if ptr and st_.nbytes():
            entry = {"bytes": st_.nbytes(), "shape": list(lt.shape), "dtype": str(lt.dtype).replace("torch.", "")}
            if fqn is not None or is_param:
                saved_params.setdefault(fqn or f"sharded@{ptr}", dict(entry, fqn=fqn))
            elif ptr not in saved:
                saved[ptr] = entry
        return x_.detach() if x_.grad_fn is not None else x_

    sdpa_saved = trainer.saved_forward(pack)

    result = fixture_head(case, GENERATED_BY)
    result["env"] = {"torch": torch.__version__, "transformers": transformers.__version__, "python": sys.version.split()[0], "device": "cpu", "threads": 1, "processGroup": FAKE_PG}
    result["world"] = world
    result["rank"] = rank
    result["mesh"] = mesh_info
    result["adjustment"] = cp_cpu.ADJUSTMENT if c > 1 else None
    result["cpOptions"] = cp_cpu.cp_options(A)
    result["cpBuffers"] = trainer.cp_buffers()
    result["params"] = {"whole": whole_params, "local": sum(local(p).numel() for p in params), "localStorageBytes": measured["paramBytes"], "localLogicalBytes": measured["paramLogicalBytes"]}
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

    def pick(doc, compact):
        for tr in (doc.get("train") or {}).values():
            for k in ("fsdpBlocks", "events", "stepEvents"):
                if isinstance(tr.get(k), list):
                    tr[k] = compact(tr[k])
        inv = doc.get("inventory")
        if isinstance(inv, dict) and isinstance(inv.get("params"), list):
            inv["params"] = compact(inv["params"])
        if isinstance(doc.get("paramTable"), list):
            doc["paramTable"] = compact(doc["paramTable"])

    return dump_rows(res, pick)


def main(argv=None) -> int:
    args = arg_parser(__doc__, DEFAULT_OUT).parse_args(argv)

    def summary(res):
        tr = next(iter(res["train"].values()))
        return f"params local {res['params']['local']} ({tr['paramBytes']} B) grads {tr['gradBytes']} saved {res['savedBytes']} livePeak {tr['livePeakBytes']} baseline {tr['baselineBytes']} unattributed {tr['unattributedBytes']}"

    return drive(args, CASES, run_child, script=__file__, child_args=hf_child_args(args), summary=summary, dump=dump_fixture, generated_by=GENERATED_BY, strict_only=True)


if __name__ == "__main__":
    sys.exit(main())
