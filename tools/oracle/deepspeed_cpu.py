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
import functools
import importlib
import os
import subprocess
import sys
from collections import OrderedDict

from gloo_harness import Marks, case_args, case_doc, child_args, child_env, child_setup, command_for, drive, first_role_wins, lost_frees, marked_steps, peak_without_backend_temps, role_steps, run_ranks, settle_work_wait, steady_check, steps_summary, storages, take_env_meta
from gloo_harness import dump_fixture as _dump_fixture

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

    fsdp2_cpu, torch, oracle = child_setup(args.hf_deps, args.transformers_src)
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile

    world = int(case["world"])
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import deepspeed

    dct = importlib.import_module("deepspeed.comm.torch")
    dct.build_shm_op = lambda: None  # see ADJUSTMENTS
    settle_work_wait(torch, args.work_wait_sleep)  # see ADJUSTMENTS: gloo worker threads must drop their Work before the main thread does
    deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
    import deepspeed.comm as dscomm

    assert dscomm.get_world_size() == world and dscomm.get_rank() == rank

    bf16 = case.get("dtype") == "bfloat16"
    is_hf = case["model"] == "hf"
    gas = int(case.get("gradientAccumulation", 1))
    cfg = ds_config(case, world)

    marks = Marks(torch, oracle)
    segment, wrap = marks.segment, marks.wrap

    marks.on = True
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
            return first_role_wins(roles)

        comps = marked_steps(marks, STEPS, inventory, one_step, before=engine.zero_grad)
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
        marks.on = False

    stream = fsdp2_cpu.read_stream(oracle, prof, marks.labels)
    del prof
    # a block allocated at an address that is still live lost its free (freed on a thread the profiler does not see)
    lost = lost_frees(stream)
    steps = role_steps(stream, comps, STEPS, MEASURED_STEP, traces=args.traces, case_id=case["id"], rank=rank)

    # the same peak without the process-group backend's own temporaries: blocks allocated inside an
    # op whose outermost op is a c10d:: / gloo: one
    steps[f"step{MEASURED_STEP}"]["livePeakWithoutBackendTempsBytes"] = steps[f"step{MEASURED_STEP}"]["baselineBytes"] + peak_without_backend_temps(
        stream, f"step{MEASURED_STEP}", lambda e: (e.get("top") or "").startswith(("c10d::", "gloo:")))

    meas = steps[f"step{MEASURED_STEP}"]
    res = OrderedDict()
    res["rank"] = rank
    for k in ("livePeakBytes", "livePeakWithoutBackendTempsBytes", "baselineBytes", "roles", "unattributedBytes", "unattributed", "liveEndBytes", "peakPhase"):
        res[k] = meas[k]
    res["parametersBytes"] = meas["roles"]["moduleParams"] + meas["roles"]["paramPartitions"]
    res["optimizerStateBytes"] = meas["roles"]["optimizerState"]
    res["fp32MasterBytes"] = meas["roles"]["fp32Master"]
    res["zero"] = zinfo
    res["lostFrees"] = lost
    res["steadyCheck"] = steady_check(steps, STEPS, MEASURED_STEP)
    res["peakComposition"] = meas["peakComposition"]
    res["timeline"] = meas["timeline"]
    res["steps"] = steps_summary(steps, ("livePeakBytes", "baselineBytes", "liveEndBytes", "unattributedBytes", "events"))
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


dump_fixture = functools.partial(_dump_fixture, one_line_keys=("timeline", "allocatedInStep", "unattributed", "layers"))


def run_case(case: dict, args, tmp: str) -> dict:
    world = int(case["world"])
    env = child_env(DS_BUILD_OPS="0", DS_ACCELERATOR="cpu")
    pp = [args.ds_src, args.stubs] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    env["PYTHONPATH"] = ":".join(p for p in pp if p)

    def child_cmd(r, port, out):
        cmd = [sys.executable, os.path.abspath(__file__), "--cases", args.cases, "--work-wait-sleep", str(args.work_wait_sleep), "--child", case["id"], "--rank", str(r), "--port", str(port),
               "--child-out", out, "--transformers-src", args.transformers_src or "", "--hf-deps", args.hf_deps or ""]
        if args.traces:
            cmd += ["--traces", args.traces]
        return cmd

    ranks, errors = run_ranks(case, world, tmp, env, args.timeout, child_cmd)
    doc = case_doc(case, GENERATED_BY, command_for(args, case["id"], "/tmp/t213ds/bin/python tools/oracle/deepspeed_cpu.py", DEFAULT_CASES, DEFAULT_OUT))
    doc["deepspeed"] = ds_commit(args.ds_src)
    doc["adjustments"] = ADJUSTMENTS
    got = take_env_meta(doc, ranks, errors)
    if got is None:
        return doc
    env0, metas = got
    meta = metas[0]
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
    case_args(ap, DEFAULT_OUT, DEFAULT_CASES, traces=True)
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds per case")
    ap.add_argument("--ds-src", default=os.environ.get("DEEPSPEED_SRC", DEFAULT_DS_SRC))
    ap.add_argument("--stubs", default=DEFAULT_STUBS)
    ap.add_argument("--transformers-src", default=os.environ.get("ORACLE_TRANSFORMERS_SRC", "/work/hfenv/hf-4.40.2:/work/hfenv/stubs"))
    ap.add_argument("--hf-deps", default=DEFAULT_HF_DEPS)
    ap.add_argument("--work-wait-sleep", type=float, default=0.002, help="seconds Work.wait() sleeps after returning (0: off)")
    child_args(ap)
    args = ap.parse_args(argv)
    return drive(args, run_child, run_case, dump_fixture, 'deepspeed_cpu_', lambda r: f"r{r['rank']} peak {r['livePeakBytes']} (no gloo temps {r['livePeakWithoutBackendTempsBytes']}) base {r['baselineBytes']} opt {r['optimizerStateBytes']} unattr {r['unattributedBytes']} steady {r['steadyCheck']['same']}")


if __name__ == "__main__":
    sys.exit(main())
