#!/usr/bin/env python3
"""Per-rank memory of DeepSpeed ZeRO 1/2/3 training steps, measured by running DeepSpeed itself on
PyTorch 2.13 (CPU) with a real gloo process group (one process per rank, one thread each).

DeepSpeed is not installed: its source tree (deepspeedai/DeepSpeed, the commit is recorded in every
fixture) is put on PYTHONPATH with ``DS_BUILD_OPS=0 DS_ACCELERATOR=cpu``; nothing is compiled and
none of its code is in this repository.  Set-up (outside the repository):

    git -C /work/.mirror/deepspeedai+DeepSpeed/repo archive --format=tar HEAD -- deepspeed op_builder accelerator version.txt requirements \
        | tar -x -C /tmp/deepspeed-src
    /usr/bin/python3 -m venv /tmp/t213ds                       # torch from /tmp/t213 through a .pth file:
    echo /tmp/t213/lib/python3.11/site-packages > /tmp/t213ds/lib/python3.11/site-packages/zz_t213.pth
    /tmp/t213ds/bin/pip install --no-index --find-links /opt/pypi/files --find-links /opt/pypi-more/files \
        pydantic psutil py-cpuinfo ninja packaging tqdm msgpack einops
    # hjson (DeepSpeed's config reader) has no offline wheel: /tmp/dsstubs/hjson.py wraps json (load/loads/dump/dumps)

Run from the repository root:

    /tmp/t213ds/bin/python tools/oracle/deepspeed_cpu.py [--only ID,...] [--ds-src /tmp/deepspeed-src] [--stubs /tmp/dsstubs]
        [--cases tools/oracle/cases/deepspeed-cpu.json] [--out test/fixtures/deepspeed-cpu] [--traces DIR]

Adjustments (monkeypatches, recorded in each fixture's ``adjustments``): DeepSpeed's TorchBackend
JIT-builds its shared-memory all-reduce op (``ShareMemCommBuilder``, csrc/cpu/comm) when the CPU
accelerator is active; ``deepspeed.comm.torch.build_shm_op`` is replaced by ``lambda: None`` (the
op's own fallback when it is not compatible).  That op serves only ``inference_all_reduce``; ZeRO's
collectives go to torch.distributed (gloo) either way, so nothing ZeRO allocates changes.

Model: the oracle's "sequential" layer language (layers.py, seed 0; input at seed 1, target at
seed 2) or a transformers 4.40.2 causal LM (hf_models.py).  ``dtype: bfloat16`` sets
``bf16: {enabled: true}``: DeepSpeed casts the module to bf16 itself; the input is cast to bf16 by
the script (DeepSpeed casts inputs only under fp16 auto_cast).  Optimizer: ``torch.optim.Adam`` /
``AdamW`` (lr 1e-3, torch defaults: foreach None -> the for-loop implementation on CPU) built on
``model.parameters()`` and handed to ``deepspeed.initialize(optimizer=...)``: the client-optimizer
path.  ZeRO rebuilds its param_groups on the flat fp32 partition and steps that torch optimizer.

One step: ``loss = cross_entropy(engine(x), y)`` (hf: ``engine(ids, labels=ids).loss``),
``engine.backward(loss)``, ``engine.step()`` (gradient_accumulation_steps g: g forward/backward
pairs, each followed by ``engine.step()``, which only steps at the boundary), ``del loss``.
``engine.zero_grad()`` runs before the step's segment (ZeRO's step already frees the gradients).

Measurement (fsdp2_cpu.py / pipeline_cpu.py's method): the profiler (``profile_memory=True``)
runs from before the model is built (after the process group is up) to the end, so every free is
of a block whose allocation was seen; allocation events in time order, cumulated, give live
bytes.  Segments: build, init (deepspeed.initialize), step1 ... step4; step 3 is reported, step 4
checked equal.  Phases inside a step come from wrappers on the engine and ZeRO optimizer
instances (a stack: on return the outer label is marked again): fwd, bwd, step, and the ZeRO
methods listed in ``WRAP_OPT``.  Per rank: ``livePeakBytes`` (live bytes before the step + the
step's highest live delta), ``baselineBytes`` (live before step 3, from the stream), its
attribution by pointer to the engine's objects (``roles``: module parameter storages = the flat
bit16 groups at ZeRO 1/2 and the ds_tensor partitions at ZeRO 3, the fp32 master partitions,
torch optimizer state, ZeRO buffers found on the optimizer object, input/target; ``unattributed``
the rest), ``optimizerStateBytes`` (the wrapped torch optimizer's state tensors),
``livePeakWithoutBackendTempsBytes`` (the same step without the blocks gloo allocates inside its
collectives, ``c10d::*`` / ``gloo:*``: full-size staging copies NCCL does not make), ``peakPhase``,
``timeline`` (per phase of step 3: [label, live at entry, max, exit]) and the
composition of the peak (blocks live at the peak: before-step roles; step allocations by phase).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import time
from collections import OrderedDict
from typing import Dict, List, Tuple

from gloo_harness import drive, free_port

HERE = os.path.dirname(os.path.abspath(__file__))
GENERATED_BY = "tools/oracle/deepspeed_cpu.py"
DEFAULT_CASES = os.path.join("tools", "oracle", "cases", "deepspeed-cpu.json")
DEFAULT_OUT = os.path.join("test", "fixtures", "deepspeed-cpu")
DEFAULT_DS_SRC = "/tmp/deepspeed-src"
DEFAULT_STUBS = "/tmp/dsstubs"
DEFAULT_HF_DEPS = "/usr/lib/python3/dist-packages"
DS_MIRROR = "/work/.mirror/deepspeedai+DeepSpeed/repo"
STEPS = 4
MEASURED_STEP = 3

ADJUSTMENTS = [
    "deepspeed.comm.torch.build_shm_op = lambda: None: TorchBackend.__init__ (deepspeed/comm/torch.py:109) would JIT-compile "
    "csrc/cpu/comm/shm_interface.cpp (ShareMemCommBuilder) under the CPU accelerator; the op backs only inference_all_reduce, "
    "ZeRO's collectives go through torch.distributed (gloo) either way",
    "torch._C._distributed_c10d.Work.wait sleeps 2 ms after returning (--work-wait-sleep): a gloo Work keeps its tensors until its "
    "worker thread drops it, just after wait() returns; when the main thread had dropped its references first, the free happened on "
    "the gloo thread, which the profiler does not record (a lost free, seen as a weight gradient live across steps on one rank only, "
    "nondeterministically). Timing only: nothing is allocated differently, frees land on the main thread right after the wait",
    "hjson (DeepSpeed's config reader, no offline wheel) is a local json-backed stand-in outside the repository (/tmp/dsstubs/hjson.py); "
    "the config is passed as a dict, so it is not used to parse anything",
]

# ZeRO optimizer methods wrapped to label phases (those that exist on the instance)
WRAP_OPT = [
    # stage 1/2 (deepspeed/runtime/zero/stage_1_and_2.py)
    "reduce_independent_p_g_buckets_and_remove_grads", "reduce_ipg_grads", "average_tensor", "independent_gradient_partition_epilogue",
    "overlapping_partition_gradients_reduce_epilogue", "get_flat_partition", "free_grad_in_param_list", "reduce_gradients", "backward_epilogue",
    "allreduce_bucket", "allreduce_and_copy", "allreduce_no_retain", "zero_grad", "step", "backward",
    # stage 3 (deepspeed/runtime/zero/stage3.py)
    "_DeepSpeedZeroOptimizer_Stage3__reduce_and_partition_ipg_grads", "_DeepSpeedZeroOptimizer_Stage3__avg_scatter_grads",
    "_DeepSpeedZeroOptimizer_Stage3__avg_scatter_contiguous_grads", "partition_grads", "_pre_step", "_prepare_sub_group", "_optimizer_step",
    "_release_sub_group", "_unflatten_partitioned_parameters", "_post_step", "_reassign_or_swap_out_partitioned_parameters", "unscale_and_clip_grads",
    "backward_prologue",
]
WRAP_COORD = ["fetch_sub_module", "release_sub_module"]


def ds_commit(src: str) -> dict:
    out = {"tree": src}
    try:
        out["commit"] = subprocess.run(["git", "-C", DS_MIRROR, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        out["mirror"] = DS_MIRROR
    except Exception:  # noqa: BLE001
        out["commit"] = None
    vt = os.path.join(src, "version.txt")
    if os.path.exists(vt):
        out["version"] = open(vt).read().strip()
    return out


def ds_config(case: dict, world: int) -> dict:
    z = OrderedDict([("stage", int(case["stage"]))])
    z.update(case.get("zero", {}))
    cfg = OrderedDict(
        [
            ("train_micro_batch_size_per_gpu", int(case["input"][0])),
            ("gradient_accumulation_steps", int(case.get("gradientAccumulation", 1))),
            ("zero_optimization", z),
            ("steps_per_print", 1 << 30),
            ("wall_clock_breakdown", False),
        ]
    )
    if case.get("dtype") == "bfloat16":
        cfg["bf16"] = {"enabled": True}
    cfg.update(case.get("extraConfig", {}))
    cfg["train_batch_size"] = cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * world
    return cfg


# --------------------------------------------------------------------------------------------
# child: one rank of one case
# --------------------------------------------------------------------------------------------


def run_child(case: dict, rank: int, port: int, args) -> dict:
    import gc

    if args.hf_deps and os.path.isdir(args.hf_deps) and args.hf_deps not in sys.path:
        sys.path.append(args.hf_deps)
    sys.path.insert(0, HERE)
    import fsdp2_cpu  # noqa: E402  (torchvision stub, stream reader)

    fsdp2_cpu._stub_torchvision()
    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile

    import oracle  # noqa: E402

    torch.set_num_threads(1)
    oracle.HF_SRC["path"] = args.transformers_src
    world = int(case["world"])
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import deepspeed

    dct = importlib.import_module("deepspeed.comm.torch")
    dct.build_shm_op = lambda: None  # see ADJUSTMENTS
    if args.work_wait_sleep > 0:  # see ADJUSTMENTS: gloo worker threads must drop their Work before the main thread does
        Work = torch._C._distributed_c10d.Work
        orig_wait = Work.wait

        def wait_then_settle(self, *a, **k):
            r = orig_wait(self, *a, **k)
            time.sleep(args.work_wait_sleep)
            return r

        Work.wait = wait_then_settle
    deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
    import deepspeed.comm as dscomm

    assert dscomm.get_world_size() == world and dscomm.get_rank() == rank

    bf16 = case.get("dtype") == "bfloat16"
    is_hf = case["model"] == "hf"
    gas = int(case.get("gradientAccumulation", 1))
    cfg = ds_config(case, world)

    labels: List[Tuple[str, str]] = []
    mark_tensor = torch.zeros(1)
    oracle.MARK_OP = "aten::is_set_to"
    marks_on = {"on": False}
    stack: List[str] = []

    def mark(kind: str, value: str) -> None:
        if marks_on["on"]:
            labels.append((kind, value))
            mark_tensor.is_set_to(mark_tensor)

    def segment(name: str) -> None:
        stack.clear()
        mark("segment", name)

    def enter(lab: str) -> None:
        stack.append(lab)
        mark("phase", "/".join(stack))

    def leave() -> None:
        stack.pop()
        mark("phase", "/".join(stack) if stack else "-")

    def wrap(obj, meth: str, label: str) -> bool:
        orig = getattr(obj, meth, None)
        if orig is None or not callable(orig):
            return False

        def wrapped(*a, **k):
            enter(label)
            try:
                return orig(*a, **k)
            finally:
                leave()

        setattr(obj, meth, wrapped)
        return True

    def storages(tensors) -> Dict[int, int]:
        seen: Dict[int, int] = {}
        for t in tensors:
            if t is None or not torch.is_tensor(t):
                continue
            st = t.untyped_storage()
            if st.nbytes() and st.data_ptr():
                seen[st.data_ptr()] = st.nbytes()
        return seen

    marks_on["on"] = True
    comps = {}
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        segment("build")
        model = oracle.build_model(case)  # seed 0
        x, y = oracle.make_inputs(case, model)  # seeds 1, 2 (hf: y is x)
        if bf16 and not is_hf:
            x = x.to(torch.bfloat16)
        model.train()
        param_count = sum(p.numel() for p in model.parameters())
        opt_cls = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[case.get("optimizer", "adam")]
        client_opt = opt_cls(model.parameters(), lr=1e-3)
        gc.collect()

        segment("init")
        engine, zopt, _, _ = deepspeed.initialize(model=model, optimizer=client_opt, config=dict(cfg))
        del client_opt
        gc.collect()
        wrapped = []
        wrap(engine, "forward", "fwd")
        wrap(engine, "backward", "bwd")
        wrap(engine, "step", "step")
        for name in WRAP_OPT:
            if wrap(zopt, name, "opt." + name.replace("_DeepSpeedZeroOptimizer_Stage3__", "__")):
                wrapped.append(name)
        coord = None
        if hasattr(zopt, "parameter_offload") and zopt.parameter_offload is not None:
            try:
                coord = zopt.parameter_offload.get_param_coordinator()
            except TypeError:
                coord = None
        if coord is not None:
            for name in WRAP_COORD:
                if wrap(coord, name, "coord." + name):
                    wrapped.append("coordinator." + name)

        def one_step() -> None:
            for _ in range(gas):
                if is_hf:
                    loss = engine(x, labels=x).loss
                else:
                    out = engine(x)
                    loss = F.cross_entropy(out, y)
                    del out
                engine.backward(loss)
                engine.step()
                del loss

        def inventory() -> dict:
            params = list(model.parameters())
            roles = OrderedDict()
            roles["moduleParams"] = storages(params)
            ds_tensors = [getattr(p, "ds_tensor", None) for p in params]
            roles["paramPartitions"] = storages(ds_tensors)
            roles["grads"] = storages([p.grad for p in params])
            master = []
            for attr in ("single_partition_of_fp32_groups", "fp32_partitioned_groups_flat"):
                master += list(getattr(zopt, attr, []) or [])
            roles["fp32Master"] = storages(master)
            flat16 = []
            for attr in ("bit16_groups_flat", "fp16_partitioned_groups_flat"):
                flat16 += [t for t in (getattr(zopt, attr, []) or []) if torch.is_tensor(t)]
            roles["flatBit16"] = storages(flat16)
            inner = getattr(zopt, "optimizer", None)
            st_t = []
            if inner is not None:
                for s in inner.state.values():
                    st_t += [v for v in s.values() if torch.is_tensor(v)]
            roles["optimizerState"] = storages(st_t)
            other = []
            for attr in ("ipg_buffer", "averaged_gradients", "grads_in_partition", "grad_partitions_flat_buffer", "_DeepSpeedZeroOptimizer_Stage3__ipg_bucket_flat_buffer",
                         "fp32_partitioned_groups_flat_grad", "lp_param_buffer", "param_groups_fp16_flat_cpu_memory"):
                v = getattr(zopt, attr, None)
                if torch.is_tensor(v):
                    other.append(v)
                elif isinstance(v, (list, tuple)):
                    for w in v:
                        if torch.is_tensor(w):
                            other.append(w)
                        elif isinstance(w, (list, tuple)):
                            other += [u for u in w if torch.is_tensor(u)]
                elif isinstance(v, dict):
                    other += [u for u in v.values() if torch.is_tensor(u)]
            for b in (getattr(zopt, "ipg_buckets", None) or {}).values():  # stage 3: one IPG bucket per dtype (stage3.py:731-735)
                other.append(getattr(b, "buffer", None))
            roles["zeroBuffers"] = storages(other)
            roles["buffers"] = storages(list(model.buffers()))
            roles["inputs"] = storages([x, y])
            # first role wins for a storage seen twice
            seen = set()
            for k in list(roles):
                roles[k] = {p: n for p, n in roles[k].items() if p not in seen}
                seen.update(roles[k])
            return roles

        for s in range(1, STEPS + 1):
            engine.zero_grad()
            gc.collect()
            comps[s] = inventory()
            segment(f"step{s}")
            one_step()
            gc.collect()
            segment(f"after{s}")
        st_inner = getattr(zopt, "optimizer", None)
        state_example = {}
        if st_inner is not None and st_inner.state:
            state_example = {k: [list(v.shape), str(v.dtype).replace("torch.", ""), v.numel() * v.element_size()] for k, v in next(iter(st_inner.state.values())).items() if torch.is_tensor(v)}
        groups = []
        for attr in ("single_partition_of_fp32_groups", "fp32_partitioned_groups_flat"):
            for t in getattr(zopt, attr, []) or []:
                groups.append({"attr": attr, "numel": t.numel(), "dtype": str(t.dtype).replace("torch.", "")})
        flat16_rows = []
        for attr in ("bit16_groups_flat", "fp16_partitioned_groups_flat"):
            for t in getattr(zopt, attr, []) or []:
                if torch.is_tensor(t):
                    flat16_rows.append({"attr": attr, "numel": t.numel(), "dtype": str(t.dtype).replace("torch.", "")})
        persistent = None
        if int(case["stage"]) == 3:
            persistent = sum(1 for p in model.parameters() if getattr(p, "ds_persist", False))
        zinfo = {
            "optimizerClass": f"{type(zopt).__module__}.{type(zopt).__name__}",
            "innerOptimizer": type(getattr(zopt, "optimizer", None)).__name__,
            "reduceBucketSize": getattr(zopt, "reduce_bucket_size", None),
            "overlapComm": getattr(zopt, "overlap_comm", None),
            "partitionGradients": getattr(zopt, "partition_gradients", None),
            "contiguousGradients": getattr(zopt, "contiguous_gradients", None),
            "cpuOffload": getattr(zopt, "cpu_offload", getattr(zopt, "offload_optimizer", None)),
            "fp32Groups": groups,
            "flatBit16Groups": flat16_rows,
            "persistentParams": persistent,
            "stateExample": state_example,
            "wrapped": wrapped,
        }
        segment("end")
        marks_on["on"] = False

    stream = fsdp2_cpu.read_stream(oracle, prof, labels)
    del prof
    # a block allocated at an address that is still live lost its free (freed on a thread the profiler does not see)
    lost = []
    lv_: Dict[int, dict] = {}
    for e in stream:
        if e["bytes"] > 0:
            if e["ptr"] in lv_:
                old = lv_[e["ptr"]]
                lost.append({"bytes": old["bytes"], "allocated": f"{old['segment']}|{old['phase']}|{old['op']}", "reallocated": f"{e['segment']}|{e['phase']}|{e['op']}"})
            lv_[e["ptr"]] = e
        elif e["bytes"] < 0:
            lv_.pop(e["ptr"], None)
    steps = OrderedDict()
    for s in range(1, STEPS + 1):
        name = f"step{s}"
        roles = comps[s]
        live = fsdp2_cpu.live_blocks_before(stream, name)
        st_ = fsdp2_cpu.segment_stats(stream, name)
        role_bytes = OrderedDict()
        role_of = {}
        for k, d in roles.items():
            # only storages that are live CPU-allocator blocks seen in the stream count
            role_bytes[k] = sum(live[p]["bytes"] for p in d if p in live)
            for p in d:
                role_of[p] = k
        unattr = [e for p, e in live.items() if p not in role_of]
        c = OrderedDict()
        c["baselineBytes"] = st_["allocatedBefore"]
        c["roles"] = role_bytes
        c["unattributedBytes"] = sum(e["bytes"] for e in unattr)
        agg = OrderedDict()
        for e in unattr:
            key = f"{e['segment']}|{e['phase']}|{e['op']}"
            a = agg.setdefault(key, {"bytes": 0, "blocks": 0})
            a["bytes"] += e["bytes"]
            a["blocks"] += 1
        c["unattributed"] = [dict(where=k, **v) for k, v in sorted(agg.items(), key=lambda kv: -kv[1]["bytes"])][:12]
        c["livePeakBytes"] = st_["allocatedBefore"] + st_["maxDelta"]
        c["liveEndBytes"] = st_["allocatedBefore"] + st_["endDelta"]
        c["peakPhase"] = st_["peakAt"]
        c["events"] = st_["events"]
        if s == MEASURED_STEP:
            evs = [e for e in stream if e["segment"] == name]
            rows = []
            cur = c["baselineBytes"]
            for e in evs:
                lab = e["phase"]
                if not rows or rows[-1][0] != lab:
                    rows.append([lab, cur, cur, cur])
                cur += e["bytes"]
                rows[-1][2] = max(rows[-1][2], cur)
                rows[-1][3] = cur
            c["timeline"] = rows
            # composition at the peak
            lv = dict(live)
            for e in evs[: st_["peakIndex"] + 1]:
                if e["bytes"] > 0:
                    lv[e["ptr"]] = e
                elif e["bytes"] < 0:
                    lv.pop(e["ptr"], None)
            before = OrderedDict()
            inst = OrderedDict()
            for p, e in lv.items():
                if e["segment"] != name:
                    k = role_of.get(p, "unattributed")
                    before[k] = before.get(k, 0) + e["bytes"]
                else:
                    k = f"{e['phase']} :: {e['op']}"
                    a = inst.setdefault(k, {"bytes": 0, "blocks": 0})
                    a["bytes"] += e["bytes"]
                    a["blocks"] += 1
            c["peakComposition"] = {"fromBeforeStep": before, "allocatedInStep": [dict(at=k, **v) for k, v in sorted(inst.items(), key=lambda kv: -kv[1]["bytes"])]}
            if args.traces:
                os.makedirs(args.traces, exist_ok=True)
                with open(os.path.join(args.traces, f"{case['id']}.r{rank}.json"), "w") as fh:
                    json.dump({"id": case["id"], "rank": rank, "baselineBytes": c["baselineBytes"],
                               "events": [{k: e[k] for k in ("phase", "op", "top", "bytes", "ptr") if e.get(k) is not None} for e in evs]}, fh, separators=(",", ":"))
        steps[name] = c

    # the same peak without the process-group backend's own temporaries: blocks allocated inside a
    # c10d:: / gloo: op (gloo's all-gather and reduce-scatter stage full-size copies on CPU; NCCL
    # writes into the caller's buffers), and their frees
    backend_ptrs_live: Dict[int, bool] = {}
    cur = mx = 0
    started = False
    for e in stream:
        if e["segment"] == f"step{MEASURED_STEP}":
            started = True
        elif started:
            break
        top = e.get("top") or ""
        if e["bytes"] > 0 and (top.startswith("c10d::") or top.startswith("gloo:")):
            backend_ptrs_live[e["ptr"]] = True
            continue
        if e["bytes"] < 0 and backend_ptrs_live.pop(e["ptr"], False):
            continue
        if started:
            cur += e["bytes"]
            mx = max(mx, cur)
    steps[f"step{MEASURED_STEP}"]["livePeakWithoutBackendTempsBytes"] = steps[f"step{MEASURED_STEP}"]["baselineBytes"] + mx

    meas = steps[f"step{MEASURED_STEP}"]
    s4 = steps[f"step{STEPS}"]
    res = OrderedDict()
    res["rank"] = rank
    for k in ("livePeakBytes", "livePeakWithoutBackendTempsBytes", "baselineBytes", "roles", "unattributedBytes", "unattributed", "liveEndBytes", "peakPhase"):
        res[k] = meas[k]
    res["parametersBytes"] = meas["roles"]["moduleParams"] + meas["roles"]["paramPartitions"]
    res["optimizerStateBytes"] = meas["roles"]["optimizerState"]
    res["fp32MasterBytes"] = meas["roles"]["fp32Master"]
    res["zero"] = zinfo
    res["lostFrees"] = lost
    res["steadyCheck"] = {"step": STEPS, "livePeakBytes": s4["livePeakBytes"], "baselineBytes": s4["baselineBytes"],
                          "same": s4["livePeakBytes"] == meas["livePeakBytes"] and s4["baselineBytes"] == meas["baselineBytes"]}
    res["peakComposition"] = meas["peakComposition"]
    res["timeline"] = meas["timeline"]
    res["steps"] = OrderedDict((k, {kk: v[kk] for kk in ("livePeakBytes", "baselineBytes", "liveEndBytes", "unattributedBytes", "events")}) for k, v in steps.items())
    res["_env"] = {"torch": torch.__version__, "python": sys.version.split()[0], "device": "cpu", "threads": torch.get_num_threads(),
                   "processGroup": f"gloo, {world} local processes (env://127.0.0.1, deepspeed.init_distributed)",
                   "deepspeedImportedFrom": os.path.dirname(deepspeed.__file__), "accelerator": type(deepspeed.get_accelerator()).__name__,
                   "transformers": fsdp2_cpu._transformers_version() if is_hf else None}
    res["_meta"] = {"input": {"shape": list(x.shape), "dtype": str(x.dtype).replace("torch.", "")},
                    "target": {"shape": list(y.shape), "dtype": str(y.dtype).replace("torch.", "")}, "paramCount": param_count, "config": cfg}
    try:
        dscomm.barrier()
        torch.distributed.destroy_process_group()
    except Exception:  # noqa: BLE001
        pass
    return res


# --------------------------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------------------------


def command_for(args, cid: str) -> str:
    extra = ""
    if args.cases != DEFAULT_CASES:
        extra += f" --cases {args.cases}"
    if args.out != DEFAULT_OUT:
        extra += f" --out {args.out}"
    return f"/tmp/t213ds/bin/python tools/oracle/deepspeed_cpu.py{extra} --only {cid}"


def dump_fixture(doc: dict) -> str:
    def one(v) -> str:
        return json.dumps(v, separators=(",", ":"))

    def fmt(v, ind: int, key=None) -> str:
        flat = one(v)
        if not isinstance(v, (dict, list)) or len(flat) <= 160 or not v:
            return flat
        pad = " " * (ind + 1)
        if isinstance(v, list):
            if key in ("timeline", "allocatedInStep", "unattributed", "layers"):
                items = [one(x) for x in v]
            else:
                items = [fmt(x, ind + 1) for x in v]
            return "[\n" + ",\n".join(pad + i for i in items) + "\n" + " " * ind + "]"
        items = [f"{json.dumps(k)}: {fmt(x, ind + 1, k)}" for k, x in v.items()]
        return "{\n" + ",\n".join(pad + i for i in items) + "\n" + " " * ind + "}"

    return fmt(json.loads(json.dumps(doc)), 0) + "\n"


def run_case(case: dict, args, tmp: str) -> dict:
    world = int(case["world"])
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONWARNINGS="ignore", DS_BUILD_OPS="0", DS_ACCELERATOR="cpu")
    pp = [args.ds_src, args.stubs] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    env["PYTHONPATH"] = ":".join(p for p in pp if p)
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    procs = []
    for r in range(world):
        out = os.path.join(tmp, f"{case['id']}.r{r}.json")
        cmd = [sys.executable, os.path.abspath(__file__), "--cases", args.cases, "--work-wait-sleep", str(args.work_wait_sleep), "--child", case["id"], "--rank", str(r), "--port", str(port),
               "--child-out", out, "--transformers-src", args.transformers_src or "", "--hf-deps", args.hf_deps or ""]
        if args.traces:
            cmd += ["--traces", args.traces]
        err = open(out + ".err", "w+")
        procs.append((r, out, err, subprocess.Popen(cmd, stdout=err, stderr=subprocess.STDOUT, env=env)))
    t0 = time.time()
    for r, out, err, p in procs:
        try:
            p.wait(timeout=max(1, args.timeout - (time.time() - t0)))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    ranks, errors = [], []
    for r, out, err, p in procs:
        err.seek(0)
        tail = err.read()[-3000:]
        err.close()
        if os.path.exists(out):
            with open(out) as f:
                res = json.load(f)
        else:
            res = {"error": f"rank {r}: child exited with {p.returncode}", "stderr": tail}
        if "error" in res:
            errors.append(dict(res, rank=r))
        ranks.append(res)
    doc = OrderedDict()
    doc["id"] = case["id"]
    doc["case"] = case
    doc["generatedBy"] = GENERATED_BY
    doc["command"] = command_for(args, case["id"])
    doc["deepspeed"] = ds_commit(args.ds_src)
    doc["adjustments"] = ADJUSTMENTS
    if errors:
        doc["error"] = errors[0].get("error")
        doc["errors"] = errors
        return doc
    env0 = ranks[0].pop("_env")
    meta = ranks[0].pop("_meta")
    for r in ranks[1:]:
        r.pop("_env", None)
        r.pop("_meta", None)
    doc["env"] = env0
    doc["world"] = world
    doc["config"] = meta["config"]
    doc["input"] = meta["input"]
    doc["target"] = meta["target"]
    doc["paramCount"] = meta["paramCount"]
    doc["ranks"] = ranks
    return doc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=DEFAULT_CASES)
    ap.add_argument("--only", default=None, help="comma-separated case ids")
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--traces", default=None, help="also write each rank's step-3 allocation events to DIR/<id>.r<rank>.json")
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds per case")
    ap.add_argument("--ds-src", default=os.environ.get("DEEPSPEED_SRC", DEFAULT_DS_SRC))
    ap.add_argument("--stubs", default=DEFAULT_STUBS)
    ap.add_argument("--transformers-src", default=os.environ.get("ORACLE_TRANSFORMERS_SRC", "/work/hfenv/hf-4.40.2:/work/hfenv/stubs"))
    ap.add_argument("--hf-deps", default=DEFAULT_HF_DEPS)
    ap.add_argument("--work-wait-sleep", type=float, default=0.002, help="seconds Work.wait() sleeps after returning (0: off)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child-out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    return drive(args, run_child, run_case, dump_fixture, 'deepspeed_cpu_', lambda r: f"r{r['rank']} peak {r['livePeakBytes']} (no gloo temps {r['livePeakWithoutBackendTempsBytes']}) base {r['baselineBytes']} opt {r['optimizerStateBytes']} unattr {r['unattributedBytes']} steady {r['steadyCheck']['same']}")


if __name__ == "__main__":
    sys.exit(main())
