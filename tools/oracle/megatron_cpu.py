#!/usr/bin/env python3
"""Per-rank memory of Megatron-core data parallelism (megatron.core.distributed.DistributedDataParallel
with its contiguous param/grad buffers, and the optimizers get_megatron_optimizer builds:
FP32Optimizer, Float16OptimizerWithFloat16Params, DistributedOptimizer), measured by running
Megatron-core itself on PyTorch 2.13 (CPU) with a real gloo process group (one process per rank).

Megatron-LM is not installed: its pure-Python ``megatron/core`` package (NVIDIA/Megatron-LM, the
commit is recorded in every fixture) is exported outside the repository and put on PYTHONPATH;
none of its code is in this repository.  Set-up:

    mkdir -p /tmp/mcore-src && git --git-dir=/work/.mirror/NVIDIA+Megatron-LM/repo archive HEAD megatron/core | tar -x -C /tmp/mcore-src
    # python: /tmp/t213ds (torch 2.13 CPU from /tmp/t213 via a .pth, plus packaging/einops/pydantic;
    # see deepspeed_cpu.py).  transformer_engine, apex and triton are absent.

Run from the repository root:

    /tmp/t213ds/bin/python tools/oracle/megatron_cpu.py [--only ID,...] [--mcore-src /tmp/mcore-src] [--out test/fixtures/megatron-cpu]

Cases are defined in this file (CASES).  Model: the oracle's "sequential" layer language
(layers.py, seed 0; input seed 1, target seed 2).  bf16 cases wrap it in Megatron's
``Float16Module`` (casts the module to bf16, inputs to bf16, output back to fp32), as Megatron's
training loop does.  DDP: ``DistributedDataParallel(TransformerConfig, DistributedDataParallelConfig,
module)``; optimizer: ``get_megatron_optimizer(OptimizerConfig(optimizer='adam', lr=1e-3, bf16=...,
use_distributed_optimizer=..., clip_grad=1.0), [ddp])``.  Without TE/apex the inner optimizer is
``torch.optim.AdamW`` (megatron/core/optimizer/__init__.py:24-33, :556-560), which on CPU runs the
for-loop implementation and keeps a 0-d fp32 ``step`` tensor per param besides exp_avg/exp_avg_sq.

One step, as megatron/training/training.py's train_step does it for one microbatch:
``ddp.zero_grad_buffer(); opt.zero_grad(); loss = cross_entropy(ddp(x), y); loss.backward();
ddp.finish_grad_sync(); opt.step()`` (finish_grad_sync is what finalize_model_grads does for DP).

Measurement: deepspeed_cpu.py's method (profiler allocation events from before the model is built,
segments build/init/step1..4, step 3 reported, step 4 checked equal, roles attributed by storage
pointer).  Roles here: gradBuffer (DDP grad_data), paramBuffer (DDP param_data, distributed
optimizer only; module params are views into it), moduleParams (own storages), fp32Main (fp32
main params: full copies (Float16Optimizer) or shards (DistributedOptimizer)), optimizerState,
inputs.

Adjustments (run-time monkeypatches, recorded in each fixture): see ADJUSTMENTS.
"""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
import types
from collections import OrderedDict
from typing import List

from gloo_harness import Marks, case_args, case_doc, child_args, child_env, child_setup, drive, first_role_wins, lost_frees, marked_steps, peak_without_backend_temps, role_steps, run_ranks, settle_work_wait, steady_check, steps_summary, storages, take_env_meta
from gloo_harness import dump_fixture as _dump_fixture

GENERATED_BY = "tools/oracle/megatron_cpu.py"
DEFAULT_OUT = os.path.join("test", "fixtures", "megatron-cpu")
DEFAULT_SRC = "/tmp/mcore-src"
MIRROR = "/work/.mirror/NVIDIA+Megatron-LM/repo"
STEPS = 4
MEASURED_STEP = 3

MLP = [["linear", {"out": 256}], ["relu", {}], ["linear", {"out": 256}], ["relu", {}], ["linear", {"out": 256}], ["relu", {}],
       ["linear", {"out": 256}], ["relu", {}], ["linear", {"out": 10}]]


def _case(cid, world, dtype, distopt, grad_fp32=False, overlap=False, bucket=None, **extra):
    c = {"id": cid, "model": "sequential", "input": [8, 256], "mode": "train", "layers": MLP, "dtype": dtype, "optimizer": "adam",
         "world": world, "useDistributedOptimizer": distopt, "gradReduceInFp32": grad_fp32, "overlapGradReduce": overlap, "bucketSize": bucket}
    c.update(extra)
    return c


CASES = [
    _case("ddp_fp32_w2", 2, "float32", False),
    _case("distopt_fp32_w2", 2, "float32", True),
    _case("ddp_bf16_w2", 2, "bfloat16", False),
    _case("ddp_bf16_gfp32_w2", 2, "bfloat16", False, grad_fp32=True),
    _case("distopt_bf16_w2", 2, "bfloat16", True),
    _case("distopt_bf16_gfp32_w2", 2, "bfloat16", True, grad_fp32=True),
    _case("distopt_bf16_gfp32_w4", 4, "bfloat16", True, grad_fp32=True),
    _case("distopt_bf16_gfp32_w2_b20k_overlap", 2, "bfloat16", True, grad_fp32=True, overlap=True, bucket=20000),
    _case("ddp_bf16_gfp32_w2_b20k_overlap", 2, "bfloat16", False, grad_fp32=True, overlap=True, bucket=20000),
    _case("distopt_fp32_w4", 4, "float32", True),
]

ADJUSTMENTS = [
    "sys.modules['megatron.core.transformer.moe.ops.paged_stash'] is a stand-in module (GLOBAL_BLOCK_SIZE and two kernels that raise): "
    "the real file does a top-level `import triton` (not installed) and is only reached through megatron.core's import chain "
    "(pipeline_parallel.schedules -> moe.paged_stash); MoE paged stash is not used here",
    "torch.cuda.current_device = lambda: torch.device('cpu'): _ParamAndGradBuffer allocates param_data/grad_data with "
    "device=torch.cuda.current_device() (param_and_grad_buffer.py:1184-1195); the buffers land on the CPU allocator instead",
    "torch.tensor/zeros/ones/empty/full(..., device='cuda') -> device='cpu' (wrappers that rewrite only device='cuda'): MixedPrecisionOptimizer/"
    "FP32Optimizer make 1-element tensors (found_inf, _scale_one, _scale; optimizer.py:690-702, :1281) and clip_grads.py the grad-norm "
    "accumulators (clip_grads.py:96-112, :180, :231) on 'cuda'; all are 1-element",
    "torch.Tensor.type() with no argument reports a CPU tensor as 'torch.cuda.<T>Tensor' (a wrapper; with an argument it is unchanged): "
    "Float16OptimizerWithFloat16Params (optimizer.py:1009,1028) and DistributedOptimizer (distrib_optimizer.py:401,466,758) "
    "classify params by the CUDA type strings and raise TypeError otherwise",
    "torch.cuda.current_stream returns a stand-in with no-op wait_event/wait_stream: start_grad_sync (param_and_grad_buffer.py:638) "
    "asks for it to wait on CUDA-graph wgrad events (none here)",
    "torch._C._distributed_c10d.Work.wait sleeps 2 ms after returning (deepspeed_cpu.py's adjustment): a gloo Work frees its "
    "tensors on its worker thread otherwise, which the profiler does not record. Timing only",
]


def read_stream(oracle, prof, labels) -> List[dict]:
    """fsdp2_cpu.read_stream plus ``backend``: whether any enclosing op is a c10d:: / gloo: collective
    (an async reduce-scatter started from a backward hook has autograd's op as its outermost op)."""
    events = oracle.profiler_events(prof)
    out = []
    li = 0
    seg, phase = "setup", "setup"
    for kind, _t, _i, n in events:
        if kind == "mark":
            k, v = labels[li]
            li += 1
            if k == "segment":
                seg, phase = v, "setup"
            elif k == "phase":
                phase = v
            continue
        anc = oracle._ancestry(n)
        out.append({"segment": seg, "phase": phase, "op": anc[0] if anc else None, "top": anc[-1] if anc else None,
                    "collective": next((a for a in anc if a.startswith("c10d::") or a.startswith("gloo:")), None),
                    "backend": any(a.startswith("c10d::") or a.startswith("gloo:") for a in anc),
                    "bytes": int(n.extra_fields.alloc_size), "ptr": int(n.extra_fields.ptr)})
    if li != len(labels):
        raise RuntimeError(f"{len(labels) - li} of {len(labels)} marks not found in the profiler's events")
    return out


# --------------------------------------------------------------------------------------------
# child: one rank of one case
# --------------------------------------------------------------------------------------------


def _patch_torch_for_cpu(torch):
    class _Stream:
        def wait_event(self, *a, **k):
            pass

        def wait_stream(self, *a, **k):
            pass

        def synchronize(self):
            pass

    torch.cuda.current_device = lambda: torch.device("cpu")
    torch.cuda.current_stream = lambda *a, **k: _Stream()
    def to_cpu(fn):
        def f(*a, **k):
            d = k.get("device")
            if d == "cuda" or (isinstance(d, torch.device) and d.type == "cuda"):
                k["device"] = "cpu"
            return fn(*a, **k)

        return f

    for name in ("tensor", "zeros", "ones", "empty", "full"):
        setattr(torch, name, to_cpu(getattr(torch, name)))
    orig_type = torch.Tensor.type

    def type_as_cuda(self, dtype=None, non_blocking=False, **kw):
        if dtype is None and not kw:
            s = orig_type(self)
            if s.startswith("torch.") and not s.startswith("torch.cuda."):
                return "torch.cuda." + s[len("torch."):]
            return s
        return orig_type(self, dtype, non_blocking, **kw)

    torch.Tensor.type = type_as_cuda


def _stub_paged_stash():
    m = types.ModuleType("megatron.core.transformer.moe.ops.paged_stash")
    m.GLOBAL_BLOCK_SIZE = 1024

    def _no(*a, **k):
        raise RuntimeError("paged_stash triton kernel: stand-in (triton is not installed)")

    m.paged_stash_copy_kernel = _no
    m.paged_stash_pop_kernel = _no
    m.__all__ = ["GLOBAL_BLOCK_SIZE", "paged_stash_copy_kernel", "paged_stash_pop_kernel"]
    sys.modules[m.__name__] = m


def _dt(d) -> str:
    return str(d).replace("torch.", "")


def run_child(case: dict, rank: int, port: int, args) -> dict:
    import gc

    fsdp2_cpu, torch, oracle = child_setup(front=[args.mcore_src])
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile

    world = int(case["world"])
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    _patch_torch_for_cpu(torch)
    settle_work_wait(torch, args.work_wait_sleep)
    _stub_paged_stash()
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    import megatron.core  # noqa: F401
    from megatron.core import parallel_state
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.module import Float16Module

    parallel_state.initialize_model_parallel(1, 1)
    assert parallel_state.get_data_parallel_world_size() == world

    bf16 = case["dtype"] == "bfloat16"
    tcfg = TransformerConfig(num_layers=1, hidden_size=256, num_attention_heads=1, bf16=bf16, params_dtype=torch.bfloat16 if bf16 else torch.float32)
    ddp_cfg = DistributedDataParallelConfig(
        grad_reduce_in_fp32=bool(case.get("gradReduceInFp32")),
        overlap_grad_reduce=bool(case.get("overlapGradReduce")),
        use_distributed_optimizer=bool(case.get("useDistributedOptimizer")),
        bucket_size=case.get("bucketSize"),
    )
    ocfg = OptimizerConfig(optimizer="adam", lr=1e-3, bf16=bf16, use_distributed_optimizer=bool(case.get("useDistributedOptimizer")), clip_grad=float(case.get("clipGrad", 1.0)))

    marks = Marks(torch, oracle)
    segment, enter, leave, wrap = marks.segment, marks.enter, marks.leave, marks.wrap

    marks.on = True
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        segment("build")
        inner = oracle.build_model(case)  # seed 0, fp32
        x, y = oracle.make_inputs(case, inner)
        param_count = sum(p.numel() for p in inner.parameters())
        module = Float16Module(tcfg, inner) if bf16 else inner
        module.train()
        gc.collect()

        segment("init")
        ddp = DistributedDataParallel(tcfg, ddp_cfg, module)
        opt = get_megatron_optimizer(ocfg, [ddp])
        gc.collect()
        wrap(ddp, "forward", "fwd")
        wrap(ddp, "finish_grad_sync", "finish_grad_sync")
        wrap(ddp, "zero_grad_buffer", "zero_grad_buffer")
        wrap(opt, "step", "opt.step")
        mopt = opt.chained_optimizers[0] if hasattr(opt, "chained_optimizers") else opt
        assert not hasattr(opt, "chained_optimizers") or len(opt.chained_optimizers) == 1
        for name in ("prepare_grads", "_copy_model_grads_to_main_grads", "clip_grad_norm", "step_with_ready_grads", "_copy_main_params_to_model_params",
                     "start_param_sync_for_bucket_group_subset"):
            wrap(mopt, name, "opt." + name)
        wrap(mopt.optimizer, "step", "inner.step")
        for bg in ddp.bucket_groups:
            wrap(bg, "start_grad_sync", "bucket.start_grad_sync")

        def one_step() -> None:
            ddp.zero_grad_buffer()
            opt.zero_grad()
            out = ddp(x)
            loss = F.cross_entropy(out, y)
            del out
            enter("bwd")
            loss.backward()
            leave()
            ddp.finish_grad_sync()
            opt.step()
            del loss

        def inventory() -> dict:
            params = list(ddp.module.parameters())
            roles = OrderedDict()
            roles["gradBuffer"] = storages([b.grad_data for b in ddp.buffers])
            roles["paramBuffer"] = storages([b.param_data for b in ddp.buffers])
            roles["moduleParams"] = storages(params)
            main = []
            for attr in ("fp32_from_float16_groups", "shard_fp32_from_float16_groups"):
                for g in getattr(mopt, attr, []) or []:
                    main += list(g)
            roles["fp32Main"] = storages(main)
            st_t = []
            for s in mopt.optimizer.state.values():
                st_t += [v for v in s.values() if torch.is_tensor(v)]
            roles["optimizerState"] = storages(st_t)
            mg = []
            for g in mopt.optimizer.param_groups:
                mg += [p.grad for p in g["params"]]
            roles["mainParamGrads"] = storages(mg)
            roles["inputs"] = storages([x, y])
            return first_role_wins(roles)

        comps = marked_steps(marks, STEPS, inventory, one_step)
        segment("end")
        marks.on = False

    # what Megatron itself reports about its buffers
    name_of = {p: n for n, p in ddp.module.named_parameters()}
    bufs = []
    for b in ddp.buffers:
        bufs.append({
            "paramDtype": _dt(b.param_dtype), "gradDtype": _dt(b.grad_dtype), "numel": b.numel, "numelUnpadded": b.numel_unpadded,
            "gradDataBytes": b.grad_data.numel() * b.grad_data.element_size(),
            "paramDataBytes": None if b.param_data is None else b.param_data.numel() * b.param_data.element_size(),
            "buckets": [{"start": bk.offset, "numel": bk.grad_data.numel(), "numelUnpadded": bk.numel_unpadded, "params": [name_of.get(p) for p in bk.params_list]} for bk in b.buckets],
            "paramIndexMap": {name_of.get(p): list(v) for p, v in b.param_index_map.items()},
        })
    optinfo = {"class": type(opt).__name__ + ("[" + type(mopt).__name__ + "]" if mopt is not opt else ""), "inner": type(mopt.optimizer).__name__, "bucketGroups": len(ddp.bucket_groups), "bucketSize": ddp.bucket_size}
    if hasattr(mopt, "gbuf_ranges"):
        shard = []
        tot = 0
        for gi, gr in enumerate(mopt.gbuf_ranges):
            for key, per_bucket in gr.items():
                for bi, br in enumerate(per_bucket):
                    for p, rm in br["param_map"].items():
                        n = rm["param"].size
                        tot += n
                        shard.append({"param": name_of.get(p), "bucket": bi, "gbufWorld": [rm["gbuf_world"].start, rm["gbuf_world"].end], "numel": n})
        optinfo["shardParamRanges"] = shard
        optinfo["shardNumel"] = tot
    state_example = {}
    if mopt.optimizer.state:
        state_example = {k: [list(v.shape), _dt(v.dtype), v.numel() * v.element_size()] for k, v in next(iter(mopt.optimizer.state.values())).items() if torch.is_tensor(v)}
    optinfo["stateExample"] = state_example
    optinfo["mainParamNumel"] = sum(p.numel() for g in mopt.optimizer.param_groups for p in g["params"])
    optinfo["mainParamDtypes"] = sorted({_dt(p.dtype) for g in mopt.optimizer.param_groups for p in g["params"]})

    stream = read_stream(oracle, prof, marks.labels)
    del prof
    lost = lost_frees(stream)
    init_stats = fsdp2_cpu.segment_stats(stream, "init")
    steps = role_steps(stream, comps, STEPS, MEASURED_STEP)
    # peak without gloo's own temporaries (c10d::/gloo: ops)
    steps[f"step{MEASURED_STEP}"]["livePeakWithoutBackendTempsBytes"] = (
        steps[f"step{MEASURED_STEP}"]["baselineBytes"] + peak_without_backend_temps(stream, f"step{MEASURED_STEP}", lambda e: e["backend"]))

    meas = steps[f"step{MEASURED_STEP}"]
    res = OrderedDict()
    res["rank"] = rank
    for k in ("livePeakBytes", "livePeakWithoutBackendTempsBytes", "baselineBytes", "roles", "unattributedBytes", "unattributed", "liveEndBytes", "peakPhase"):
        res[k] = meas[k]
    res["initDeltaBytes"] = init_stats["endDelta"]
    res["megatron"] = {"buffers": bufs, "optimizer": optinfo}
    res["lostFrees"] = lost
    res["steadyCheck"] = steady_check(steps, STEPS, MEASURED_STEP)
    res["peakComposition"] = meas["peakComposition"]
    res["timeline"] = meas["timeline"]
    res["steps"] = steps_summary(steps, ("livePeakBytes", "baselineBytes", "liveEndBytes", "unattributedBytes", "events"))
    res["_env"] = {"torch": torch.__version__, "python": sys.version.split()[0], "device": "cpu", "threads": torch.get_num_threads(),
                   "processGroup": f"gloo, {world} local processes (env://127.0.0.1)", "megatronImportedFrom": os.path.dirname(megatron.core.__file__)}
    res["_meta"] = {"input": {"shape": list(x.shape), "dtype": _dt(x.dtype)}, "target": {"shape": list(y.shape), "dtype": _dt(y.dtype)}, "paramCount": param_count,
                    "ddpConfig": {"grad_reduce_in_fp32": ddp_cfg.grad_reduce_in_fp32, "overlap_grad_reduce": ddp_cfg.overlap_grad_reduce,
                                  "use_distributed_optimizer": ddp_cfg.use_distributed_optimizer, "bucket_size": ddp_cfg.bucket_size,
                                  "average_in_collective": ddp_cfg.average_in_collective, "pad_buckets_for_high_nccl_busbw": ddp_cfg.pad_buckets_for_high_nccl_busbw},
                    "optimizerConfig": {"optimizer": ocfg.optimizer, "lr": ocfg.lr, "bf16": ocfg.bf16, "use_distributed_optimizer": ocfg.use_distributed_optimizer,
                                        "clip_grad": ocfg.clip_grad, "decoupled_weight_decay": ocfg.decoupled_weight_decay}}
    try:
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    except Exception:  # noqa: BLE001
        pass
    return res


# --------------------------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------------------------


def mcore_commit() -> dict:
    out = {"mirror": MIRROR}
    try:
        out["commit"] = subprocess.run(["git", "--git-dir", MIRROR, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except Exception:  # noqa: BLE001
        out["commit"] = None
    return out


dump_fixture = functools.partial(_dump_fixture, one_line_keys=("timeline", "allocatedInStep", "unattributed", "layers", "shardParamRanges", "buckets"))


def run_case(case: dict, args, tmp: str) -> dict:
    world = int(case["world"])
    env = child_env(NO_VCS_VERSION="1")
    ranks, errors = run_ranks(case, world, tmp, env, args.timeout, lambda r, port, out: [
        sys.executable, os.path.abspath(__file__), "--mcore-src", args.mcore_src, "--work-wait-sleep", str(args.work_wait_sleep), "--child", case["id"],
        "--rank", str(r), "--port", str(port), "--child-out", out])
    doc = case_doc(case, GENERATED_BY, f"/tmp/t213ds/bin/python tools/oracle/megatron_cpu.py --only {case['id']}")
    doc["megatron"] = mcore_commit()
    doc["adjustments"] = ADJUSTMENTS
    got = take_env_meta(doc, ranks, errors)
    if got is None:
        return doc
    env0, metas = got
    doc["env"] = env0
    doc["world"] = world
    doc.update(metas[0])
    doc["ranks"] = ranks
    return doc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    case_args(ap, DEFAULT_OUT)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--mcore-src", default=os.environ.get("MCORE_SRC", DEFAULT_SRC))
    ap.add_argument("--work-wait-sleep", type=float, default=0.002)
    child_args(ap)
    args = ap.parse_args(argv)
    return drive(args, run_child, run_case, dump_fixture, "megatron_cpu_",
                 lambda r: f"r{r['rank']} peak {r['livePeakBytes']} (no gloo {r['livePeakWithoutBackendTempsBytes']}) base {r['baselineBytes']} "
                           f"roles {dict(r['roles'])} unattr {r['unattributedBytes']} steady {r['steadyCheck']['same']}",
                 cases=CASES, show_traceback=True)


if __name__ == "__main__":
    sys.exit(main())
