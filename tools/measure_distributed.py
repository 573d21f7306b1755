#!/usr/bin/env python3
"""Per-rank CUDA memory of distributed training on ONE GPU, through PyTorch's fake process group.

One process plays rank R of a world of W: ``init_process_group("fake")`` (PyTorch >= 2.1,
``torch.testing._internal.distributed.fake_pg``) completes every collective at once and
allocates nothing itself, so DDP's Reducer, ZeroRedundancyOptimizer, FSDP2 (``fully_shard``),
DTensor tensor/sequence parallelism and ``torch.distributed.pipelining`` run their real code and
the caching allocator sees what rank R of a real run allocates (less NCCL's own memory, which
lives outside the allocator). The model is tools/oracle/ref_transformers.py's Llama (HF eager
paths), the optimizer AdamW(foreach=False) as in tools/oracle/oracle.py.

Run on a CUDA machine with PyTorch 2.x, from the repository root:

    PYTHONUNBUFFERED=1 python3 tools/measure_distributed.py --out "$OUT" [--only ID,...]
        [--max-seconds 300] [--case-timeout 120] [--jobs 3] [--trace-ids A,B]

    python3 tools/measure_distributed.py --list       # the cases, one a line
    python3 tools/measure_distributed.py --dry-run    # validate the case table, print the plan
    python3 tools/measure_distributed.py --device cpu --model tiny --out /tmp/d   # plumbing on a CPU

The parent imports no torch: it runs one child process per case (a fresh caching allocator, one
default process group, no hooks left over), ``--jobs`` at a time (allocator statistics are per
process, so concurrent children on one GPU do not disturb each other's figures; the runtime
probe's contextBytes, read from cudaMemGetInfo, does, so it is taken once, alone, first). A case
that fails records status "error" with its message and the run goes on; a case that outlives
``--case-timeout`` is killed and recorded as "timeout". No case starts after ``--max-seconds``;
those are listed as skipped. The merged result is rewritten after every case, so a run that is
cut short still leaves everything finished so far:

  <out>/distributed.json   {generatedBy, command, argv, env, runtime, model, input, notes,
                            cases: [...], skipped: [...], seconds}
  <out>/distributed.log    progress lines
  <out>/trace_<id>.json    the caching allocator's event history of the measured step of at most
                           two cases (--trace-ids), the format of tools/measure_cuda.py's traces

Each case (child), following tools/measure_cuda.py's conventions:
  runtime warm-up (CUDA context, cuBLAS workspaces of both threads), process group and device
  mesh; allocatedBeforeBuild = what is allocated after gc + empty_cache just before the model is
  built; build + wrap (marks in ``build``); two warm-up training steps (the first makes the
  optimizer state and the FSDP/pipeline buffers, the second lets DDP rebuild its buckets); then
  baselineAllocated, reset_peak_memory_stats, and the measured third step:
  zero_grad(set_to_none=True), per micro-batch forward (+ loss) and backward, optimizer step.
  ``marks`` holds, after each phase, the allocated/active/reserved bytes and their peaks over that
  phase (the peak counters are reset at every mark; maxAllocated/maxActive/maxReserved are the
  maxima over the phases, i.e. the peaks over the whole step). ``inventory`` holds the local
  (per-rank) bytes of parameters, gradients (taken after the last backward, before the step),
  optimizer state and buffers, by device, as logical bytes (numel x element size of the local
  tensors) and as storage bytes (distinct storages: FSDP's padded shards, DDP bucket views);
  ``paramTable`` each parameter's global and local shape. ``fsdpGroups``: each FSDP2 parameter
  group with its padded sharded/unsharded numel, dtypes and effective reshard_after_forward;
  ``ddp``: bucket facts; ``pp``: stages and schedule.

Private APIs used (each guarded; failure makes the case an error or drops one field, never the run):
  torch.testing._internal.distributed.fake_pg (the fake backend itself); FSDP2 state
  (``_get_fsdp_state``, ``_fsdp_param_groups``/``_fsdp_param_group``, FSDPParam attributes) for
  ``fsdpGroups`` only; DDP ``_get_ddp_logging_data`` for ``ddp`` only;
  torch.distributed._tools.fsdp2_mem_tracker for the one tracker case; the pipelining stage's
  P2P warm-up vote (newer PyTorch; see ``_pp_static_vote``); torch.cuda.memory._record_memory_history
  for traces.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
GENERATED_BY = "tools/measure_distributed.py"

# --------------------------------------------------------------------------------------------
# model, inputs, cases
# --------------------------------------------------------------------------------------------

MODELS = {
    # ~128M parameters: 8 layers x 11.8M + 2 x 16.8M (embedding, untied lm_head). 512 MB fp32.
    "default": dict(
        model_type="llama",
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=8,
        vocab_size=16384,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
    ),
    # for --device cpu plumbing checks only (same structure, every divisibility rule still holds)
    "tiny": dict(
        model_type="llama",
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        vocab_size=512,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    ),
}
# batch, seq: per-rank micro-batch of the DP/TP cases; pp_batch: the pipeline's batch per step,
# split into the case's m micro-batches (m=8 -> micro-batches of 1 sequence).
INPUTS = {"default": dict(batch=2, seq=1024, pp_batch=8), "tiny": dict(batch=2, seq=32, pp_batch=8)}

MP = ["bf16", "fp32"]  # MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)

# In priority order: a run cut short by --max-seconds keeps the first ones. Keys: see CASE_KEYS.
CASES = [
    dict(id="single_fp32", world=1, note="no process group; sanity check against test/fixtures/cuda"),
    dict(id="single_bf16", world=1, dtype="bf16", note="no process group; pure bf16 params and AdamW state"),
    dict(id="ddp8_fp32", world=8, dp="ddp", repeat=2),
    dict(id="ddp8_fp32_bucketview", world=8, dp="ddp", bucket_view=True),
    dict(id="ddp8_zero1", world=8, dp="ddp", zero1=True, note="ZeroRedundancyOptimizer(AdamW), greedy whole-parameter partition"),
    dict(id="ddp8_accum4_sync", world=8, dp="ddp", micro=4),
    dict(id="ddp8_accum4_nosync", world=8, dp="ddp", micro=4, nosync=True),
    dict(id="fsdp8_fp32_raf", world=8, dp="fsdp", raf=True),
    dict(id="fsdp8_fp32_noraf", world=8, dp="fsdp", raf=False),
    dict(id="fsdp8_mp_r32_raf", world=8, dp="fsdp", mp=MP, raf=True, repeat=2),
    dict(id="fsdp8_mp_r16_raf", world=8, dp="fsdp", mp=["bf16", "bf16"], raf=True),
    dict(id="fsdp8_mp_noraf", world=8, dp="fsdp", mp=MP, raf=False),
    dict(id="fsdp8_mp_raf4", world=8, dp="fsdp", mp=MP, raf=4, note="reshard to a 4-way shard after forward"),
    dict(id="fsdp8_mp_titanwrap", world=8, dp="fsdp", mp=MP, raf=True, wrap="titan",
         note="torchtitan: embed unit, layer units, [norm, lm_head] unit with reshard_after_forward=False, root"),
    dict(id="fsdp2_mp_raf", world=2, dp="fsdp", mp=MP, raf=True),
    dict(id="fsdp4_mp_raf", world=4, dp="fsdp", mp=MP, raf=True),
    dict(id="fsdp6_mp_raf_r0", world=6, rank=0, dp="fsdp", mp=MP, raf=True, note="dims not divisible by 6: padded shards"),
    dict(id="fsdp6_mp_raf_r5", world=6, rank=5, dp="fsdp", mp=MP, raf=True, note="last rank of 6: shorter unpadded shards, smaller optimizer state"),
    dict(id="fsdp8_mp_accum4_sync", world=8, dp="fsdp", mp=MP, raf=True, micro=4),
    dict(id="fsdp8_mp_accum4_nosync", world=8, dp="fsdp", mp=MP, raf=True, micro=4, nosync=True),
    dict(id="fsdp8_mp_ac", world=8, dp="fsdp", mp=MP, raf=True, ac="layer", note="non-reentrant torch.utils.checkpoint per decoder layer"),
    dict(id="fsdp8_mp_cpuoffload", world=8, dp="fsdp", mp=MP, raf=True, offload=True, note="CPUOffloadPolicy(pin_memory=True); AdamW runs on the CPU"),
    dict(id="tp4_bf16", world=4, tp=4, dtype="bf16", repeat=2),
    dict(id="tp4_bf16_lossparallel", world=4, tp=4, dtype="bf16", loss_parallel=True),
    dict(id="tp4_bf16_sp", world=4, tp=4, dtype="bf16", sp=True, stretch=True, note="DTensor sequence parallel (torchtitan plan)"),
    dict(id="tp4_bf16_sp_lossparallel", world=4, tp=4, dtype="bf16", sp=True, loss_parallel=True, stretch=True),
    dict(id="fsdp2x_tp4_mp", world=8, mesh=[2, 4], dp="fsdp", tp=4, mp=MP, raf=True),
    dict(id="pp4_1f1b_m8_r0", world=4, rank=0, pp=4, sched="1F1B", m=8, dtype="bf16"),
    dict(id="pp4_1f1b_m8_r1", world=4, rank=1, pp=4, sched="1F1B", m=8, dtype="bf16", note="middle stage: receive buffers"),
    dict(id="pp4_1f1b_m8_r3", world=4, rank=3, pp=4, sched="1F1B", m=8, dtype="bf16"),
    dict(id="pp4_gpipe_m8_r0", world=4, rank=0, pp=4, sched="GPipe", m=8, dtype="bf16"),
    dict(id="pp4_gpipe_m8_r3", world=4, rank=3, pp=4, sched="GPipe", m=8, dtype="bf16"),
    dict(id="pp4_interleaved_v2_m8_r0", world=4, rank=0, pp=4, v=2, sched="Interleaved1F1B", m=8, dtype="bf16"),
    dict(id="pp4_interleaved_v2_m8_r3", world=4, rank=3, pp=4, v=2, sched="Interleaved1F1B", m=8, dtype="bf16"),
    dict(id="fsdp8_mp_r32_raf_tracker", world=8, dp="fsdp", mp=MP, raf=True, tracker=True, stretch=True,
         note="as fsdp8_mp_r32_raf, plus a 4th step under torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker"),
]

DEFAULT_TRACE_IDS = "fsdp8_mp_r32_raf,pp4_1f1b_m8_r1"
MAX_TRACES = 2

CASE_KEYS = {
    "id": "case id (letters, digits, '_')",
    "world": "world size of the fake process group (1: no process group)",
    "rank": "the rank this process plays (default 0)",
    "dtype": "fp32|bf16: the dtype the parameters are stored in (default fp32)",
    "dp": "ddp|fsdp",
    "bucket_view": "DDP gradient_as_bucket_view",
    "zero1": "DDP + torch.distributed.optim.ZeroRedundancyOptimizer",
    "raf": "FSDP2 reshard_after_forward of the decoder-layer units: true|false|int (the root keeps the default)",
    "mp": "FSDP2 MixedPrecisionPolicy [param_dtype, reduce_dtype]",
    "wrap": "FSDP2 units: layers (each decoder layer + root; default) | titan",
    "micro": "micro-batches per optimizer step (gradient accumulation; default 1)",
    "nosync": "no gradient sync but on the last micro-batch (DDP no_sync / FSDP2 set_requires_gradient_sync)",
    "offload": "FSDP2 CPUOffloadPolicy()",
    "ac": "layer: activation checkpointing of every decoder layer",
    "tp": "tensor-parallel degree (DTensor ColwiseParallel/RowwiseParallel)",
    "loss_parallel": "lm_head output sharded on the vocabulary + torch.distributed.tensor.parallel.loss_parallel()",
    "sp": "sequence parallel (SequenceParallel norms, Shard(1) residual stream)",
    "mesh": "[dp, tp] 2-D device mesh",
    "pp": "pipeline stages over ranks",
    "v": "virtual stages per rank (interleaved)",
    "sched": "1F1B|GPipe|Interleaved1F1B",
    "m": "pipeline micro-batches per step",
    "repeat": "run the case this many times (each in its own process); the extra runs go to `repeats`",
    "tracker": "add a step under FSDPMemTracker and record its categories",
    "stretch": "expected to be fragile (recorded as such; an error here is information)",
    "note": "free text",
}

NOTES = [
    "Allocator figures only: NCCL communicators and buffers live outside PyTorch's caching allocator "
    "and are absent here (as they are from torch.cuda.max_memory_allocated in a real run).",
    "The fake process group completes every collective at once; outputs are allocated by the caller, "
    "so per-rank allocations match a real run, but anything NCCL would keep until wait() is freed at "
    "the program point where PyTorch drops its reference.",
    "Data are garbage on non-first pipeline stages and after fake collectives (losses may be NaN); "
    "no GradScaler, no data-dependent shapes, so memory is unaffected.",
    "Each case is one process; --jobs children share the GPU, so runtime.contextBytes is taken from the "
    "solo probe run first; per-case runtime.contextBytes is only meaningful with --jobs 1.",
    "FSDP2 root units keep reshard_after_forward=None (the default: False for the root since PyTorch 2.8); "
    "fsdpGroups records each group's effective setting.",
    "PipelineStage gets explicit input_args/output_args (meta tensors): no runtime shape inference, which "
    "would need other ranks' values.",
]


def describe(case: dict) -> str:
    bits = [f"W={case.get('world', 1)}", f"r={case.get('rank', 0)}", case.get("dtype", "fp32")]
    if case.get("dp") == "ddp":
        bits.append("DDP" + (" bucket_view" if case.get("bucket_view") else "") + (" +ZeRO-1" if case.get("zero1") else ""))
    if case.get("dp") == "fsdp":
        s = f"FSDP2 raf={case.get('raf')}"
        if case.get("mp"):
            s += f" mp={case['mp'][0]}/{case['mp'][1]}"
        if case.get("wrap"):
            s += f" wrap={case['wrap']}"
        if case.get("offload"):
            s += " cpu-offload"
        bits.append(s)
    if case.get("tp"):
        bits.append(f"TP{case['tp']}" + (" SP" if case.get("sp") else "") + (" loss-parallel" if case.get("loss_parallel") else ""))
    if case.get("mesh"):
        bits.append(f"mesh={case['mesh']}")
    if case.get("pp"):
        bits.append(f"PP{case['pp']} {case.get('sched')} v={case.get('v', 1)} m={case.get('m')}")
    if case.get("micro", 1) > 1:
        bits.append(f"accum={case['micro']}" + (" no-sync" if case.get("nosync") else " sync"))
    if case.get("ac"):
        bits.append(f"AC={case['ac']}")
    if case.get("tracker"):
        bits.append("FSDPMemTracker")
    if case.get("repeat", 1) > 1:
        bits.append(f"x{case['repeat']}")
    if case.get("stretch"):
        bits.append("(stretch)")
    return " ".join(bits)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def validate_cases(cases: list, model_name: str = "default") -> list:
    """Every problem of the case table, as messages (empty: valid). Needs no torch."""
    errors = []
    cfg = MODELS[model_name]
    inp = INPUTS[model_name]
    layers = cfg["num_hidden_layers"]
    seen = set()
    for case in cases:
        cid = case.get("id")
        where = f"case {cid!r}"
        if not isinstance(cid, str) or not cid or not all(ch.isalnum() or ch == "_" for ch in cid):
            errors.append(f"{where}: id must be letters, digits and '_'")
        if cid in seen:
            errors.append(f"{where}: duplicate id")
        seen.add(cid)
        for key in case:
            if key not in CASE_KEYS:
                errors.append(f"{where}: unknown key {key!r}")
        world = case.get("world", 1)
        rank = case.get("rank", 0)
        if not _is_int(world) or world < 1:
            errors.append(f"{where}: world must be an int >= 1")
            continue
        if not _is_int(rank) or not 0 <= rank < world:
            errors.append(f"{where}: rank must be in [0, world)")
        if case.get("dtype", "fp32") not in ("fp32", "bf16"):
            errors.append(f"{where}: dtype must be fp32|bf16")
        dp, tp, pp = case.get("dp"), case.get("tp"), case.get("pp")
        if dp not in (None, "ddp", "fsdp"):
            errors.append(f"{where}: dp must be ddp|fsdp")
        if world == 1 and (dp or tp or pp):
            errors.append(f"{where}: a parallelism needs world > 1")
        if world > 1 and not (dp or tp or pp):
            errors.append(f"{where}: world > 1 without dp/tp/pp")
        if pp and (dp or tp):
            errors.append(f"{where}: pp is not combined with dp/tp here")
        mesh = case.get("mesh")
        if mesh is not None:
            if not (isinstance(mesh, list) and len(mesh) == 2 and all(_is_int(x) and x >= 1 for x in mesh)):
                errors.append(f"{where}: mesh must be [dp, tp]")
            elif mesh[0] * mesh[1] != world:
                errors.append(f"{where}: mesh {mesh} does not multiply to world {world}")
            elif dp != "fsdp" or tp != mesh[1]:
                errors.append(f"{where}: a 2-D mesh is FSDP (dim 0) x TP (dim 1) with tp == mesh[1]")
        dp_size = world if not mesh else mesh[0]
        if tp is not None:
            if not _is_int(tp) or tp < 2:
                errors.append(f"{where}: tp must be an int >= 2")
            else:
                if mesh is None and tp != world:
                    errors.append(f"{where}: 1-D TP needs tp == world")
                for name in ("num_attention_heads", "num_key_value_heads", "intermediate_size", "vocab_size", "hidden_size"):
                    if cfg[name] % tp:
                        errors.append(f"{where}: {name}={cfg[name]} not divisible by tp={tp}")
                if case.get("sp") and inp["seq"] % tp:
                    errors.append(f"{where}: seq {inp['seq']} not divisible by tp={tp} (sequence parallel)")
        for flag in ("loss_parallel", "sp"):
            if case.get(flag) and not tp:
                errors.append(f"{where}: {flag} needs tp")
        for flag in ("bucket_view", "zero1"):
            if case.get(flag) and dp != "ddp":
                errors.append(f"{where}: {flag} needs dp=ddp")
        for flag in ("mp", "raf", "wrap", "offload", "tracker"):
            if flag in case and dp != "fsdp":
                errors.append(f"{where}: {flag} needs dp=fsdp")
        if dp == "fsdp":
            raf = case.get("raf")
            if raf is not None and not isinstance(raf, bool):
                if not _is_int(raf) or raf <= 1 or raf >= dp_size or dp_size % raf:
                    errors.append(f"{where}: int raf must be a divisor of the shard size {dp_size}, not 1 nor itself")
            mp = case.get("mp")
            if mp is not None and not (isinstance(mp, list) and len(mp) == 2 and all(x in ("fp32", "bf16") for x in mp)):
                errors.append(f"{where}: mp must be [param_dtype, reduce_dtype] of fp32|bf16")
            if case.get("wrap", "layers") not in ("layers", "titan"):
                errors.append(f"{where}: wrap must be layers|titan")
            if case.get("offload") and mesh:
                errors.append(f"{where}: offload with a 2-D mesh is not a case here")
        if case.get("ac") not in (None, "layer"):
            errors.append(f"{where}: ac must be 'layer'")
        micro = case.get("micro", 1)
        if not _is_int(micro) or micro < 1:
            errors.append(f"{where}: micro must be an int >= 1")
        if case.get("nosync") and (micro < 2 or dp not in ("ddp", "fsdp")):
            errors.append(f"{where}: nosync needs micro > 1 and dp")
        if pp:
            v, m, sched = case.get("v", 1), case.get("m"), case.get("sched")
            if pp != world:
                errors.append(f"{where}: pp must equal world")
            if sched not in ("1F1B", "GPipe", "Interleaved1F1B"):
                errors.append(f"{where}: sched must be 1F1B|GPipe|Interleaved1F1B")
            if not _is_int(v) or v < 1 or (v > 1) != (sched == "Interleaved1F1B"):
                errors.append(f"{where}: v > 1 exactly for Interleaved1F1B")
            elif layers % (pp * v):
                errors.append(f"{where}: {layers} layers do not split into {pp * v} stages")
            if not _is_int(m) or m < pp or inp["pp_batch"] % m:
                errors.append(f"{where}: m must be >= pp and divide the pipeline batch {inp['pp_batch']}")
            elif sched == "Interleaved1F1B" and m % pp:
                errors.append(f"{where}: interleaved needs m divisible by pp")
            if micro != 1:
                errors.append(f"{where}: pipeline micro-batches are m, not micro")
        else:
            for key in ("v", "sched", "m"):
                if key in case:
                    errors.append(f"{where}: {key} needs pp")
        rep = case.get("repeat", 1)
        if not _is_int(rep) or not 1 <= rep <= 3:
            errors.append(f"{where}: repeat must be 1..3")
    return errors


def select(ids_arg: str) -> list:
    ids = [s for s in (ids_arg or "").split(",") if s]
    known = {c["id"] for c in CASES}
    missing = [i for i in ids if i not in known]
    if missing:
        raise SystemExit(f"unknown case id(s): {', '.join(missing)}; see --list")
    return [c for c in CASES if not ids or c["id"] in ids]


# --------------------------------------------------------------------------------------------
# child: one case in this process (imports torch)
# --------------------------------------------------------------------------------------------


def _child(case_id: str, opts) -> dict:
    import gc
    import contextlib

    import torch
    import torch.distributed as dist
    from torch import nn

    sys.path.insert(0, os.path.join(HERE, "oracle"))
    import ref_transformers as ref  # noqa: E402

    case = next(c for c in CASES if c["id"] == case_id) if case_id != "__runtime__" else {"id": "__runtime__", "world": 1}
    cfg = ref.llama_defaults(dict(MODELS[opts.model]))
    inp = INPUTS[opts.model]
    dev = torch.device("cuda", 0) if opts.device == "cuda" else torch.device("cpu")
    cuda = dev.type == "cuda"
    out: dict = {"id": case_id, "status": "running", "case": case, "describe": describe(case) if case_id != "__runtime__" else ""}
    notes: list = []
    out["notes"] = notes

    # ---------------- helpers ----------------
    def sync():
        if cuda:
            torch.cuda.synchronize(dev)

    def clean() -> int:
        gc.collect()
        if not cuda:
            return 0
        torch.cuda.synchronize(dev)
        torch.cuda.empty_cache()
        return torch.cuda.memory_allocated(dev)

    def now() -> dict:
        if not cuda:
            return {}
        return {"allocated": torch.cuda.memory_allocated(dev), "reserved": torch.cuda.memory_reserved(dev)}

    def mark(marks, phase):
        if marks is None:
            return
        sync()
        entry = {"phase": phase}
        if cuda:
            st = torch.cuda.memory_stats(dev)
            entry.update(
                allocated=st.get("allocated_bytes.all.current", 0),
                active=st.get("active_bytes.all.current", 0),
                reserved=st.get("reserved_bytes.all.current", 0),
                peakAllocated=st.get("allocated_bytes.all.peak", 0),
                peakActive=st.get("active_bytes.all.peak", 0),
                peakReserved=st.get("reserved_bytes.all.peak", 0),
            )
            torch.cuda.reset_peak_memory_stats(dev)
        marks.append(entry)

    def env_info() -> dict:
        info = {"torch": torch.__version__, "python": sys.version.split()[0], "device": str(dev),
                "allocConf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF")}
        try:
            info["torchGit"] = torch.version.git_version
        except Exception:  # noqa: BLE001
            pass
        if cuda:
            props = torch.cuda.get_device_properties(dev)
            info.update(gpu=props.name, totalMemory=props.total_memory, cuda=torch.version.cuda,
                        cudnn=torch.backends.cudnn.version(), capability=f"{props.major}.{props.minor}")
        return info

    def probe_runtime() -> dict:
        """Same as tools/measure_cuda.py probe_runtime: CUDA context, cuBLAS workspace, and a
        conv+linear training step so the backward thread's handles exist before the build."""
        torch.cuda.init()
        probe = torch.zeros(1, device=dev)
        torch.cuda.synchronize(dev)
        free, total = torch.cuda.mem_get_info(dev)
        context = total - free - torch.cuda.memory_reserved(dev)
        a = torch.ones(64, 64, device=dev)
        before = torch.cuda.memory_allocated(dev)
        c = a @ a
        torch.cuda.synchronize(dev)
        workspace = torch.cuda.memory_allocated(dev) - before - c.numel() * c.element_size()
        del a, c, probe
        warm = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Flatten(), nn.LazyLinear(4)).to(dev)
        x = torch.randn(2, 3, 8, 8, device=dev)
        warm(x).sum().backward()
        torch.cuda.synchronize(dev)
        del warm, x
        persistent = clean()
        return {"contextBytes": int(context), "cublasWorkspaceAllocated": int(workspace),
                "persistentAfterWarmup": int(persistent), "total": int(total), "concurrentJobs": opts.jobs}

    try:
        from torch.distributed.tensor import DTensor  # public since 2.5
    except Exception:  # noqa: BLE001
        try:
            from torch.distributed._tensor import DTensor  # older 2.x
        except Exception:  # noqa: BLE001
            DTensor = None

    def local(t):
        if DTensor is not None and isinstance(t, DTensor):
            return t.to_local()
        return t

    def account(tensors) -> dict:
        """Per device: count, logical bytes (numel x itemsize of the local tensors), storage bytes
        (distinct storages, so padding and shared bucket storages are counted once), by dtype."""
        res: dict = {}
        seen = set()
        with torch.no_grad():
            for t in tensors:
                if t is None:
                    continue
                lt = local(t)
                d = res.setdefault(lt.device.type, {"count": 0, "logicalBytes": 0, "storageBytes": 0, "byDtype": {}})
                n = lt.numel() * lt.element_size()
                d["count"] += 1
                d["logicalBytes"] += n
                key = str(lt.dtype).replace("torch.", "")
                d["byDtype"][key] = d["byDtype"].get(key, 0) + n
                try:
                    st = lt.untyped_storage() if hasattr(lt, "untyped_storage") else lt.storage()  # 1.13: typed
                    ptr = st.data_ptr()
                    if ptr and (lt.device.type, ptr) not in seen:
                        seen.add((lt.device.type, ptr))
                        d["storageBytes"] += st.nbytes()
                except Exception:  # noqa: BLE001
                    pass
        return res

    def unique_params(modules):
        """(name, parameter) once each; pipeline stage modules are named stage<i>.<name>."""
        seen, res = set(), []
        for k, mod in enumerate(modules):
            prefix = f"stage{stage_ids[k]}." if stage_ids else ""
            for name, p in mod.named_parameters():
                if id(p) not in seen:
                    seen.add(id(p))
                    res.append((prefix + name, p))
        return res

    def _tensor_row(t):
        if t is None:
            return None
        lt = local(t)
        return {"shape": list(t.shape), "local": list(lt.shape), "dtype": str(lt.dtype).replace("torch.", ""),
                "device": lt.device.type,
                "placements": [str(x) for x in t.placements] if DTensor is not None and isinstance(t, DTensor) else None}

    def param_table(modules, grads):
        rows = []
        for name, p in unique_params(modules):
            rows.append(dict(name=name, **_tensor_row(p), grad=grads.get(name)))
        return rows

    def opt_state_tensors(opt):
        inner = getattr(opt, "optim", opt)  # ZeroRedundancyOptimizer keeps the local optimizer in .optim
        res = []
        for st in inner.state.values():
            for v in st.values():
                if torch.is_tensor(v):
                    res.append(v)
        return res

    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}

    # ---------------- runtime, process group ----------------
    t_start = time.time()
    out["env"] = env_info()
    if cuda:
        torch.cuda.set_device(dev)
        out["runtime"] = probe_runtime()
    if case_id == "__runtime__":
        out["status"] = "ok"
        return out

    world, rank = case.get("world", 1), case.get("rank", 0)
    fake_futures_carry_tensors = True
    build: dict = {}
    out["build"] = build
    if world > 1:
        # Private test utility (stable since 2.1): importing it registers the "fake" backend.
        from torch.testing._internal.distributed.fake_pg import FakeStore

        # No device_id: a bound device would make DeviceMesh split groups, which older fake PGs lack.
        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
        # Do the fake works' futures carry the tensors (DDP's built-in hook needs them)?
        probe_t = torch.zeros(1, device=dev)
        try:
            probe_v = dist.all_reduce(probe_t, async_op=True).get_future().wait()
            fake_futures_carry_tensors = isinstance(probe_v, (list, tuple)) and len(probe_v) > 0 and torch.is_tensor(probe_v[0])
            build["fakeWorkFutureValue"] = type(probe_v).__name__
            del probe_v
        except Exception as error:  # noqa: BLE001 (a work without a future)
            fake_futures_carry_tensors = False
            build["fakeWorkFutureValue"] = f"error: {error}"
        del probe_t
    mesh = dp_mesh = tp_mesh = None
    if case.get("dp") == "fsdp" or case.get("tp"):
        from torch.distributed.device_mesh import init_device_mesh

        if case.get("mesh"):
            mesh = init_device_mesh(dev.type, tuple(case["mesh"]), mesh_dim_names=("dp", "tp"))
            dp_mesh, tp_mesh = mesh["dp"], mesh["tp"]
        elif case.get("tp"):
            tp_mesh = mesh = init_device_mesh(dev.type, (world,), mesh_dim_names=("tp",))
        else:
            dp_mesh = mesh = init_device_mesh(dev.type, (world,), mesh_dim_names=("dp",))
    torch.manual_seed(0)
    out["allocatedBeforeBuild"] = clean()

    # ---------------- model and its parallelization ----------------
    model = ref.LlamaForCausalLM(dict(MODELS[opts.model]))  # on the CPU, fp32, seed 0
    dt = dtypes[case.get("dtype", "fp32")]
    if dt != torch.float32:
        model = model.to(dt)
    V, S, H, B = cfg["vocab_size"], inp["seq"], cfg["hidden_size"], inp["batch"]
    build["modelParams"] = sum(p.numel() for p in model.parameters())

    modules = [model]  # what the inventory walks
    stage_ids: list = []  # pipeline stage index of each entry of modules
    fwd = model  # what a micro-batch calls
    loss_ctx = contextlib.nullcontext
    ddp = fsdp_root = sched = None
    pp_info = None

    if case.get("ac"):
        class Checkpointed(nn.Module):
            """Non-reentrant torch.utils.checkpoint around one decoder layer (public API; the
            same program as checkpoint_wrapper(CheckpointImpl.NO_REENTRANT), as torchtitan uses)."""

            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, *args, **kwargs):
                import torch.utils.checkpoint as ckpt

                return ckpt.checkpoint(self.inner, *args, use_reentrant=False, **kwargs)

        for i in range(len(model.model.layers)):
            model.model.layers[i] = Checkpointed(model.model.layers[i])

    if case.get("tp"):
        from torch.distributed.tensor import Replicate, Shard
        from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                       SequenceParallel, parallelize_module)

        sp, lp = bool(case.get("sp")), bool(case.get("loss_parallel"))
        if not case.get("mesh"):
            model = model.to(dev)  # norms and rotary buffers are not touched by the plan
            build["allocatedAfterToDevice"] = now()
        head_out = Shard(-1) if lp else Replicate()
        if sp:
            root_plan = {
                # DTensor output (use_local_output=False): the causal mask and rotary tables are
                # built from the global sequence length, as torchtitan's do.
                "model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1), use_local_output=False),
                "model.norm": SequenceParallel(),
                "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=head_out, use_local_output=not lp),
            }
        else:
            root_plan = {
                "model.embed_tokens": RowwiseParallel(input_layouts=Replicate()),
                "lm_head": ColwiseParallel(output_layouts=head_out, use_local_output=not lp),
            }
        parallelize_module(model, tp_mesh, root_plan)
        for layer in model.model.layers:
            plan = {
                "self_attn.q_proj": ColwiseParallel(),
                "self_attn.k_proj": ColwiseParallel(),
                "self_attn.v_proj": ColwiseParallel(),
                "self_attn.o_proj": RowwiseParallel(),
                "mlp.gate_proj": ColwiseParallel(),
                "mlp.up_proj": ColwiseParallel(),
                "mlp.down_proj": RowwiseParallel(),
            }
            if sp:
                plan.update({
                    "input_layernorm": SequenceParallel(),
                    "post_attention_layernorm": SequenceParallel(),
                    # the decoder layer calls self_attn with keyword arguments, mlp positionally
                    "self_attn": PrepareModuleInput(input_kwarg_layouts={"hidden_states": Shard(1)},
                                                    desired_input_kwarg_layouts={"hidden_states": Replicate()}),
                    "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
                    "self_attn.o_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
                    "mlp.down_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
                })
            parallelize_module(layer, tp_mesh, plan)
        if lp:
            from torch.distributed.tensor.parallel import loss_parallel

            loss_ctx = loss_parallel
        build["allocatedAfterTP"] = now()

    if case.get("dp") == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = model.to(dev)
        build["allocatedBeforeWrap"] = clean() if cuda else 0
        ddp = DDP(model, device_ids=[dev.index] if cuda else None, bucket_cap_mb=25,
                  gradient_as_bucket_view=bool(case.get("bucket_view")))
        if not fake_futures_carry_tensors:
            # DDP's built-in C++ all-reduce hook divides the bucket in place, all-reduces it in
            # place and reads the tensors back from the work's future; the fake PG's future holds
            # None ("expected the hook result is either a Tensor or a TensorList found None").
            # This Python hook does the same in-place work and returns the bucket itself, so the
            # allocations are those of the built-in hook (public API: register_comm_hook).
            def inplace_allreduce_hook(state, bucket):
                buf = bucket.buffer()
                buf.div_(world)
                dist.all_reduce(buf, async_op=True).wait()
                fut = torch.futures.Future()
                fut.set_result(buf)
                return fut

            ddp.register_comm_hook(None, inplace_allreduce_hook)
            notes.append("DDP comm hook: in-place Python all-reduce hook (the fake PG's work futures hold no tensors)")
        build["allocatedAfterWrap"] = clean() if cuda else 0
        build["ddpBucketsAtConstruction"] = build["allocatedAfterWrap"] - build["allocatedBeforeWrap"]
        fwd = ddp

    if case.get("dp") == "fsdp":
        try:
            from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard
        except ImportError:  # 2.4/2.5
            from torch.distributed._composable.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard
        mp = case.get("mp")
        mp_policy = MixedPrecisionPolicy(param_dtype=dtypes[mp[0]], reduce_dtype=dtypes[mp[1]]) if mp else MixedPrecisionPolicy()
        kw = dict(mesh=dp_mesh, mp_policy=mp_policy, offload_policy=CPUOffloadPolicy() if case.get("offload") else OffloadPolicy())
        raf = case.get("raf")
        layer_kw = dict(kw, reshard_after_forward=raf) if raf is not None else dict(kw)
        if case.get("wrap") == "titan":
            fully_shard(model.model.embed_tokens, **layer_kw)
        for layer in model.model.layers:
            fully_shard(layer, **layer_kw)
        if case.get("wrap") == "titan":
            try:
                fully_shard([model.model.norm, model.lm_head], **dict(kw, reshard_after_forward=False))
                build["titanTailUnit"] = "[model.norm, lm_head]"
            except Exception as error:  # noqa: BLE001 (list form missing: fall back to lm_head alone)
                notes.append(f"fully_shard([norm, lm_head]) unsupported ({error}); lm_head alone")
                fully_shard(model.lm_head, **dict(kw, reshard_after_forward=False))
                build["titanTailUnit"] = "lm_head"
        fully_shard(model, **kw)  # root: reshard_after_forward left at its default
        fsdp_root = model
        build["allocatedAfterWrap"] = clean() if cuda else 0

    if case.get("pp"):
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

        p, v, m = case["pp"], case.get("v", 1), case["m"]
        n_stages = p * v
        per = cfg["num_hidden_layers"] // n_stages
        mb = inp["pp_batch"] // m

        class StageModule(nn.Module):
            """Layers [lo, hi) of the reference model; embedding on stage 0, norm + lm_head on the
            last. Rotary tables and the causal mask are remade on every stage, as the whole
            model makes them once."""

            def __init__(self, full, index):
                super().__init__()
                lo, hi = index * per, (index + 1) * per
                self.first, self.last = index == 0, index == n_stages - 1
                self.embed_tokens = full.model.embed_tokens if self.first else None
                self.layers = nn.ModuleDict({str(i): full.model.layers[i] for i in range(lo, hi)})
                self.norm = full.model.norm if self.last else None
                self.lm_head = full.lm_head if self.last else None
                self.rotary_emb = full.model.rotary_emb

            def forward(self, x):
                if self.embed_tokens is not None:
                    x = self.embed_tokens(x)
                position_ids = torch.arange(0, x.shape[1], device=x.device).unsqueeze(0)
                mask = ref.create_causal_mask_eager(x, position_ids)
                pos = self.rotary_emb(x, position_ids)
                for layer in self.layers.values():
                    x = layer(x, attention_mask=mask, position_embeddings=pos)
                if self.norm is not None:
                    x = self.lm_head(self.norm(x))
                return x

        indices = [rank + k * p for k in range(v)]
        stage_mods = [StageModule(model, i).to(dev) for i in indices]
        del model
        gc.collect()
        modules = stage_mods
        stage_ids = indices

        def meta_hidden():
            # requires_grad as in a real forward: newer PipelineStage derives the gradient
            # buffers' metadata from it (None for tensors that need no gradient)
            return torch.empty(mb, S, H, dtype=dt, device="meta").requires_grad_(True)

        stages = []
        for i, smod in zip(indices, stage_mods):
            in_args = torch.empty(mb, S, dtype=torch.long, device="meta") if smod.first else meta_hidden()
            out_args = torch.empty(mb, S, V, dtype=dt, device="meta").requires_grad_(True) if smod.last else meta_hidden()
            stage = PipelineStage(smod, i, n_stages, dev, input_args=in_args, output_args=out_args)
            if _pp_static_vote(stage, torch) and not any(n.startswith("pipelining P2P") for n in notes):
                notes.append("pipelining P2P warm-up vote answered STATIC locally (fake PG carries no values)")
            stages.append(stage)

        def pp_loss(logits, target):
            return ref.for_causal_lm_loss(logits, target, V)

        cls = {"1F1B": Schedule1F1B, "GPipe": ScheduleGPipe, "Interleaved1F1B": ScheduleInterleaved1F1B}[case["sched"]]
        sched = cls(stages if v > 1 else stages[0], n_microbatches=m, loss_fn=pp_loss)
        has_first = any(s.first for s in stage_mods)
        has_last = any(s.last for s in stage_mods)
        pp_info = {"stages": indices, "numStages": n_stages, "layersPerStage": per, "microBatch": [mb, S], "m": m,
                   "schedule": cls.__name__, "hasFirst": has_first, "hasLast": has_last}
        build["allocatedAfterStages"] = clean() if cuda else 0

    if not case.get("dp") and not case.get("tp") and not case.get("pp"):
        model = model.to(dev)
    if not case.get("pp"):
        modules = [model]
    named_params = unique_params(modules)
    params = [p for _, p in named_params]
    if case.get("zero1"):
        from torch.distributed.optim import ZeroRedundancyOptimizer

        opt = ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.AdamW, lr=1e-4, foreach=False)
    else:
        opt = torch.optim.AdamW(params, lr=1e-4, foreach=False)
    build["allocatedAfterBuild"] = clean() if cuda else 0
    build["reservedAfterBuild"] = torch.cuda.memory_reserved(dev) if cuda else 0

    # ---------------- inputs and the training step ----------------
    g = torch.Generator().manual_seed(1)
    if case.get("pp"):
        ids = torch.randint(0, V, (inp["pp_batch"], S), generator=g).to(dev)
    else:
        ids = torch.randint(0, V, (B, S), generator=g).to(dev)
    labels = ids
    micro = case.get("micro", 1)
    grads_seen: dict = {}

    def step(marks=None):
        opt.zero_grad(set_to_none=True)
        mark(marks, "zero_grad")
        if sched is not None:
            kwargs = {"target": labels, "losses": []} if has_last else {}
            if has_first:
                sched.step(ids, **kwargs)
            else:
                sched.step(**kwargs)
            mark(marks, "pipeline")
        else:
            for i in range(micro):
                last = i == micro - 1
                tag = "" if micro == 1 else f"m{i}."
                sync_ctx = contextlib.nullcontext()
                if case.get("nosync"):
                    if ddp is not None and not last:
                        sync_ctx = ddp.no_sync()
                    if fsdp_root is not None:
                        fsdp_root.set_requires_gradient_sync(last)
                with sync_ctx, loss_ctx():
                    loss, logits = fwd(ids, labels)
                    del logits
                    mark(marks, tag + "forward")
                    loss.backward()
                    del loss
                    mark(marks, tag + "backward")
        if marks is not None:
            grads_seen["grads"] = account(p.grad for p in params)
            grads_seen["table"] = {name: _tensor_row(p.grad) for name, p in named_params}
        opt.step()
        mark(marks, "optimizer")

    step()
    build["allocatedAfterStep1"] = now()
    step()
    build["allocatedAfterStep2"] = now()
    sync()
    gc.collect()
    out["baselineAllocated"] = torch.cuda.memory_allocated(dev) if cuda else 0
    out["baselineReserved"] = torch.cuda.memory_reserved(dev) if cuda else 0
    if cuda:
        torch.cuda.reset_peak_memory_stats(dev)
    recording = bool(opts.trace_out) and cuda and _start_history(torch)
    marks: list = []
    step(marks)
    sync()
    if recording:
        trace = _stop_history(torch, dev)
        _write_trace(opts.trace_out, {"id": case_id, "env": out["env"], "steps": {"adamw": trace}})
        out["trace"] = os.path.basename(opts.trace_out)
    out["marks"] = marks
    if cuda:
        out["maxAllocated"] = max(mk["peakAllocated"] for mk in marks)
        out["maxActive"] = max(mk["peakActive"] for mk in marks)
        out["maxReserved"] = max(mk["peakReserved"] for mk in marks)
        out["endAllocated"] = torch.cuda.memory_allocated(dev)
        out["peakOverBuild"] = out["maxAllocated"] - out["allocatedBeforeBuild"]
        peak_phase = max(marks, key=lambda mk: mk["peakAllocated"])
        out["peakPhase"] = peak_phase["phase"]

    # ---------------- inventory ----------------
    out["inventory"] = {
        "params": account(p for p in params),
        "grads": grads_seen.get("grads", {}),
        "optimizer": account(opt_state_tensors(opt)),
        "buffers": account(b for mod in modules for b in mod.buffers()),
    }
    out["paramTable"] = param_table(modules, grads_seen.get("table", {}))
    if fsdp_root is not None:
        try:
            out["fsdpGroups"] = _fsdp_groups(fsdp_root)
        except Exception as error:  # noqa: BLE001 (private attributes moved)
            out["fsdpGroups"] = None
            notes.append(f"fsdpGroups unavailable: {type(error).__name__}: {error}")
    if ddp is not None:
        try:
            data = ddp._get_ddp_logging_data()  # private, "prototype interface"
            keep = ("bucket_sizes", "num_buckets_reduced", "bucket_cap_bytes", "gradient_as_bucket_view",
                    "has_rebuilt_buckets", "rebuilt_bucket_sizes", "rebuilt_per_bucket_param_indices", "total_parameter_size_bytes",
                    "num_parameter_tensors", "dtypes")
            out["ddp"] = {k: data[k] for k in keep if k in data}
        except Exception as error:  # noqa: BLE001
            notes.append(f"ddp logging data unavailable: {error}")
    if case.get("zero1"):
        try:
            out["zero1"] = {"localParams": sum(1 for grp in opt.optim.param_groups for _ in grp["params"]),
                            "localNumel": sum(q.numel() for grp in opt.optim.param_groups for q in grp["params"])}
        except Exception as error:  # noqa: BLE001
            notes.append(f"zero1 partition unavailable: {error}")
    if pp_info is not None:
        out["pp"] = pp_info

    # ---------------- optional: FSDPMemTracker step ----------------
    if case.get("tracker"):
        try:
            from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker  # private

            tracker = FSDPMemTracker(fsdp_root, opt)
            tracker.track_inputs((ids, labels))
            if cuda:
                torch.cuda.reset_peak_memory_stats(dev)
            before = torch.cuda.memory_stats(dev) if cuda else {}
            with tracker:
                step()
            sync()
            after = torch.cuda.memory_stats(dev) if cuda else {}
            peak = tracker.get_tracker_snapshot("peak")
            cur = tracker.get_tracker_snapshot("current")
            out["tracker"] = {
                "peak": {str(k): dict(val) for k, val in peak.items()},
                "current": {str(k): dict(val) for k, val in cur.items()},
                "cudaActivePeak": after.get("active_bytes.all.peak"),
                "cudaAllocatedPeak": after.get("allocated_bytes.all.peak"),
                "cudaActiveBefore": before.get("active_bytes.all.current"),
            }
        except Exception as error:  # noqa: BLE001
            out["tracker"] = {"error": f"{type(error).__name__}: {error}"}

    out["childSeconds"] = round(time.time() - t_start, 2)
    out["status"] = "ok"
    return out


def _pp_static_vote(stage, torch) -> bool:
    """Newer PipelineStage (after 2.11, e.g. 2.13) runs a P2P warm-up vote on whether every stage
    has static metadata; with a fake PG the received votes are zeros, so it would fall back to
    dynamic inference, which receives pickled objects the fake PG cannot carry. Every stage here
    is given complete static metadata, so a real run votes STATIC: answer that locally. Private
    methods; does nothing where they do not exist (the released 2.11 path skips inference when
    input_args/output_args are given)."""
    if not (hasattr(stage, "_warmup_forward_vote") and hasattr(stage, "_warmup_backward_result")):
        return False

    def static(*args, **kwargs):
        return torch.ones(1, dtype=torch.int32, device=stage.device)

    stage._warmup_forward_vote = static
    stage._warmup_backward_result = static
    return True


def _fsdp_groups(root) -> list:
    """Each FSDP2 parameter group: private state (guarded by the caller)."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:
        from torch.distributed._composable.fsdp import FSDPModule
    groups = []
    by_state: dict = {}
    for name, mod in root.named_modules():
        if not isinstance(mod, FSDPModule):
            continue
        state = mod._get_fsdp_state()
        if id(state) in by_state:  # fully_shard([a, b]): one state, one group, several modules
            for entry in by_state[id(state)]:
                entry["modules"].append(name)
            continue
        by_state[id(state)] = []
        pgs = getattr(state, "_fsdp_param_groups", None)
        if pgs is None:
            one = getattr(state, "_fsdp_param_group", None)
            pgs = [one] if one is not None else []
        for g in pgs:
            shard = int(g.mesh_info.shard_mesh_size)
            rows = []
            padded = unsharded = 0
            for fp in g.fsdp_params:
                pn = int(fp.padded_sharded_param_size.numel())
                padded += pn
                unsharded += int(fp._orig_size.numel())
                rows.append({
                    "fqn": getattr(fp, "_param_fqn", None),
                    "origSize": list(fp._orig_size),
                    "shardedSize": list(fp.sharded_size),
                    "paddedShardedSize": list(fp.padded_sharded_param_size),
                    "origDtype": str(fp.orig_dtype).replace("torch.", ""),
                    "paramDtype": str(fp.param_dtype).replace("torch.", "") if fp.param_dtype is not None else None,
                    "reduceDtype": str(fp.reduce_dtype).replace("torch.", "") if fp.reduce_dtype is not None else None,
                })
            pf = g.post_forward_mesh_info
            mp = g.mp_policy
            entry = {
                "module": name or "<root>",
                "modules": [name or "<root>"],
                "groupFqn": getattr(g, "_module_fqn", None),
                "isRoot": bool(getattr(state, "_is_root", False)),
                "shardWorld": shard,
                "numParams": len(rows),
                "unshardedNumel": unsharded,
                "paddedShardedNumel": padded,
                "paddedUnshardedNumel": padded * shard,
                "mpParamDtype": str(mp.param_dtype).replace("torch.", "") if mp.param_dtype is not None else None,
                "mpReduceDtype": str(mp.reduce_dtype).replace("torch.", "") if mp.reduce_dtype is not None else None,
                "reshardAfterForward": bool(g._reshard_after_forward),
                "postForwardShardWorld": int(pf.shard_mesh_size) if pf is not None else None,
                "offload": type(g.offload_policy).__name__,
                "params": rows,
            }
            by_state[id(state)].append(entry)
            groups.append(entry)
    return groups


def _frames_of(entry) -> list:
    res = []
    for frame in entry.get("frames", []) or []:
        name = frame.get("filename", "")
        if "/torch/" in name and "/torch/nn/modules/" not in name and "/torch/optim/" not in name \
                and "/torch/distributed/" not in name:
            continue
        res.append(f"{frame.get('name')}@{os.path.basename(name)}:{frame.get('line')}")
        if len(res) == 3:
            break
    return res


def _start_history(torch) -> bool:
    try:
        torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python", max_entries=100_000)
        return True
    except Exception as error:  # noqa: BLE001
        print(f"memory history unavailable: {error}", file=sys.stderr)
        return False


def _stop_history(torch, dev) -> list:
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    traces = snapshot.get("device_traces", [])
    index = dev.index if dev.index is not None else 0
    events = traces[index] if index < len(traces) else []
    return [{"action": e.get("action"), "addr": e.get("addr"), "size": e.get("size"), "stream": e.get("stream"),
             "frames": _frames_of(e)} for e in events]


def _write_trace(path: str, data: dict) -> None:
    text = json.dumps(data)
    limit = 15 * 1024 * 1024  # the device tool returns files of at most 16 MiB
    if len(text) > limit:
        events = data["steps"]["adamw"]
        keep = int(len(events) * limit / len(text) * 0.95)
        data["steps"]["adamw"] = events[:keep]
        data["truncated"] = {"kept": keep, "of": len(events)}
        text = json.dumps(data)
    with open(path, "w") as f:
        f.write(text)


def child_main(args) -> int:
    try:
        result = _child(args.child, args)
    except BaseException as error:  # noqa: BLE001 (recorded, the parent goes on)
        result = {"id": args.child, "status": "error", "error": f"{type(error).__name__}: {error}",
                  "traceback": traceback.format_exc()[-4000:]}
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        pass
    with open(args.result, "w") as f:
        json.dump(result, f, indent=1, default=str)
    return 0 if result.get("status") == "ok" else 1


# --------------------------------------------------------------------------------------------
# parent: schedule the children, merge
# --------------------------------------------------------------------------------------------


class Runner:
    def __init__(self, args, argv):
        self.args = args
        self.out_dir = args.out
        self.json_path = os.path.join(args.out, "distributed.json")
        self.log_path = os.path.join(args.out, "distributed.log")
        self.tmp = tempfile.mkdtemp(prefix="measure_distributed_")
        self.start = time.time()
        self.results: dict = {}
        self.skipped: list = []
        self.runtime = None
        cmd = [os.path.relpath(os.path.abspath(__file__)) if os.path.isabs(__file__) else __file__] + list(argv)
        self.doc = {
            "generatedBy": GENERATED_BY,
            "command": "python3 " + " ".join(shlex.quote(a) for a in cmd),
            "argv": list(argv),
            "startedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "env": {"python": sys.version.split()[0], "executable": sys.executable, "platform": sys.platform,
                    "cpuCount": os.cpu_count(), "device": args.device, "jobs": args.jobs},
            "model": MODELS[args.model],
            "modelName": args.model,
            "input": INPUTS[args.model],
            "optimizer": "AdamW(lr=1e-4, foreach=False)",
            "measuredStep": 3,
            "notes": NOTES,
        }

    def log(self, line: str) -> None:
        stamp = f"[{time.time() - self.start:6.1f}s] {line}"
        print(stamp, flush=True)
        with open(self.log_path, "a") as f:
            f.write(stamp + "\n")

    def write(self) -> None:
        order = [c["id"] for c in CASES]
        doc = dict(self.doc)
        doc["runtime"] = self.runtime
        doc["cases"] = [self.results[i] for i in order if i in self.results]
        doc["skipped"] = self.skipped
        doc["seconds"] = round(time.time() - self.start, 1)
        tmp = self.json_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1, default=str)
        os.replace(tmp, self.json_path)

    def spawn(self, case_id: str, run_index: int, trace_out):
        result = os.path.join(self.tmp, f"{case_id}.{run_index}.json")
        err = open(os.path.join(self.tmp, f"{case_id}.{run_index}.err"), "w+")
        cmd = [sys.executable, os.path.abspath(__file__), "--child", case_id, "--result", result,
               "--device", self.args.device, "--model", self.args.model, "--jobs", str(self.args.jobs)]
        if trace_out:
            cmd += ["--trace-out", trace_out]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if "OMP_NUM_THREADS" not in os.environ:
            env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 2) // max(1, self.args.jobs)))
        proc = subprocess.Popen(cmd, stdout=err, stderr=subprocess.STDOUT, env=env, cwd=os.getcwd(),
                                start_new_session=True)
        return {"id": case_id, "run": run_index, "proc": proc, "result": result, "err": err, "t0": time.time(), "trace": trace_out}

    def finish(self, job, timed_out: bool = False) -> dict:
        proc = job["proc"]
        seconds = round(time.time() - job["t0"], 2)
        job["err"].flush()
        job["err"].seek(0)
        tail = job["err"].read()[-3000:]
        job["err"].close()
        res = None
        if not timed_out and os.path.exists(job["result"]):
            try:
                with open(job["result"]) as f:
                    res = json.load(f)
            except Exception as error:  # noqa: BLE001
                res = {"id": job["id"], "status": "error", "error": f"unreadable result: {error}"}
        if res is None:
            status = "timeout" if timed_out else "error"
            res = {"id": job["id"], "status": status,
                   "error": (f"killed after {seconds} s" if timed_out else f"child exited {proc.returncode} without a result")}
        res["seconds"] = seconds
        res["exitCode"] = proc.returncode
        if res.get("status") != "ok" and tail:
            res["stderrTail"] = tail
        if job["trace"] and not os.path.exists(job["trace"]):
            res.setdefault("notes", []).append("trace requested but not written")
        return res

    def kill(self, job) -> None:
        try:
            os.killpg(job["proc"].pid, 9)  # the child's own session only (start_new_session=True)
        except Exception:  # noqa: BLE001
            try:
                job["proc"].kill()
            except Exception:  # noqa: BLE001
                pass
        job["proc"].wait()

    def run(self, cases: list, trace_ids: set) -> int:
        os.makedirs(self.out_dir, exist_ok=True)
        self.log(f"{len(cases)} case(s), device={self.args.device}, model={self.args.model}, jobs={self.args.jobs}, "
                 f"max-seconds={self.args.max_seconds}, case-timeout={self.args.case_timeout}")
        # 1. the runtime probe, alone (its contextBytes reads cudaMemGetInfo)
        if self.args.device == "cuda":
            job = self.spawn("__runtime__", 0, None)
            try:
                job["proc"].wait(timeout=self.args.case_timeout)
                self.runtime = self.finish(job)
            except subprocess.TimeoutExpired:
                self.kill(job)
                self.runtime = self.finish(job, timed_out=True)
            self.log(f"runtime: {self.runtime.get('status')} {self.runtime.get('runtime') or self.runtime.get('error')}")
            if self.runtime.get("status") != "ok":
                self.log("runtime probe failed; going on with the cases")
            self.write()
        # 2. the cases, --jobs at a time
        queue = []
        for case in cases:
            for k in range(case.get("repeat", 1) if not self.args.no_repeat else 1):
                queue.append((case["id"], k))
        running: list = []
        hard_limit = self.args.max_seconds + self.args.grace_seconds
        failures = 0
        while queue or running:
            elapsed = time.time() - self.start
            while queue and len(running) < self.args.jobs:
                if elapsed > self.args.max_seconds:
                    self.skipped.extend(f"{cid}#{k}" if k else cid for cid, k in queue)
                    self.log(f"time bound reached: {len(queue)} run(s) not started")
                    queue = []
                    break
                cid, k = queue.pop(0)
                trace = os.path.join(self.out_dir, f"trace_{cid}.json") if (cid in trace_ids and k == 0) else None
                running.append(self.spawn(cid, k, trace))
                self.log(f"start {cid}" + (f" (repeat {k})" if k else ""))
            time.sleep(0.2)
            for job in list(running):
                over = time.time() - job["t0"] > self.args.case_timeout or time.time() - self.start > hard_limit
                if job["proc"].poll() is None and not over:
                    continue
                timed_out = job["proc"].poll() is None
                if timed_out:
                    self.kill(job)
                running.remove(job)
                res = self.finish(job, timed_out=timed_out)
                cid = job["id"]
                if job["run"] == 0:
                    earlier = self.results.get(cid, {}).get("repeats")  # a repeat may finish first
                    self.results[cid] = res
                    if earlier:
                        res["repeats"] = earlier
                else:
                    base = self.results.setdefault(cid, {"id": cid, "status": "pending"})
                    keep = ("status", "error", "maxAllocated", "maxActive", "maxReserved", "baselineAllocated",
                            "baselineReserved", "allocatedBeforeBuild", "endAllocated", "seconds")
                    base.setdefault("repeats", []).append({k2: res.get(k2) for k2 in keep if k2 in res})
                if res.get("status") != "ok":
                    failures += 1
                peak = res.get("maxAllocated")
                self.log(f"done  {cid}{' (repeat %d)' % job['run'] if job['run'] else ''}: {res.get('status')} "
                         f"{res.get('seconds')} s" + (f" maxAllocated={peak / 2**20:.1f} MiB" if peak else "")
                         + (f" [{res.get('error')}]" if res.get("status") != "ok" else ""))
                self.write()
        self.write()
        ok = sum(1 for r in self.results.values() if r.get("status") == "ok")
        self.log(f"{ok}/{len(self.results)} case(s) ok, {failures} failed run(s), {len(self.skipped)} skipped; "
                 f"wrote {self.json_path}")
        shutil.rmtree(self.tmp, ignore_errors=True)
        return 0


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT") or "distributed-out",
                    help="folder for distributed.json, distributed.log and traces (default: $OUT)")
    ap.add_argument("--only", default="", help="comma-separated case ids")
    ap.add_argument("--max-seconds", type=float, default=300.0, help="start no case after this many seconds")
    ap.add_argument("--grace-seconds", type=float, default=60.0,
                    help="kill what still runs at max-seconds + this (partial results are kept)")
    ap.add_argument("--case-timeout", type=float, default=120.0, help="kill one case after this many seconds")
    ap.add_argument("--jobs", type=int, default=3, help="cases run at once (each its own process)")
    ap.add_argument("--trace-ids", default=DEFAULT_TRACE_IDS,
                    help=f"at most {MAX_TRACES} cases whose measured step's allocator history is written ('' for none)")
    ap.add_argument("--no-repeat", action="store_true", help="run every case once")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cpu: run the plumbing on the CPU (no memory figures; use with --model tiny)")
    ap.add_argument("--model", choices=sorted(MODELS), default="default")
    ap.add_argument("--list", action="store_true", help="print the case ids and exit")
    ap.add_argument("--dry-run", action="store_true", help="validate the case table, print the plan, run nothing")
    # internal (child)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--trace-out", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.child:
        return child_main(args)

    errors = validate_cases(CASES, "default") + validate_cases(CASES, "tiny")
    if args.list:
        for case in CASES:
            print(f"{case['id']:30s} {describe(case)}")
        for e in errors:
            print("invalid: " + e, file=sys.stderr)
        return 1 if errors else 0
    cases = select(args.only)
    trace_ids = {s for s in (args.trace_ids or "").split(",") if s}
    unknown = trace_ids - {c["id"] for c in CASES}
    if unknown:
        errors.append(f"--trace-ids: unknown case(s) {sorted(unknown)}")
    if len(trace_ids) > MAX_TRACES:
        errors.append(f"--trace-ids: at most {MAX_TRACES} traces (the device returns at most 8 files)")
    if args.jobs < 1:
        errors.append("--jobs must be >= 1")
    if args.dry_run:
        runs = sum(c.get("repeat", 1) if not args.no_repeat else 1 for c in cases)
        print(f"{len(cases)} case(s), {runs} run(s); model {args.model} {MODELS[args.model]}; input {INPUTS[args.model]}")
        for case in cases:
            mark = " [trace]" if case["id"] in trace_ids else ""
            print(f"  {case['id']:30s} {describe(case)}{mark}")
        print(f"output: {os.path.join(args.out, 'distributed.json')}, distributed.log, "
              f"{len(trace_ids & {c['id'] for c in cases})} trace file(s)")
        if errors:
            print("case table INVALID:", file=sys.stderr)
            for e in errors:
                print("  " + e, file=sys.stderr)
            return 1
        print("case table valid")
        return 0
    if errors:
        for e in errors:
            print(e, file=sys.stderr)
        return 2
    if args.device == "cpu" and args.model == "default":
        print("note: --device cpu with the default model is slow; --model tiny is meant for CPU checks", file=sys.stderr)
    return Runner(args, argv).run(cases, trace_ids & {c["id"] for c in cases})


if __name__ == "__main__":
    sys.exit(main())
