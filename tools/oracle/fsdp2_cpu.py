#!/usr/bin/env python3
"""Per-rank memory of FSDP2 (``fully_shard``) and DDP training, measured on real PyTorch 2.13 (CPU).

One process runs rank R of a world of W on PyTorch's own fake process group
(``init_process_group("fake", store=FakeStore())``, torch.testing._internal.distributed.fake_pg):
every collective completes at once and touches no memory, so FSDP2's all-gathers, copy-outs,
reduce-scatters and DDP's Reducer run their real code and the CPU allocator sees every block
rank R of a real run allocates (less what a real backend allocates outside PyTorch's allocator).
Collective outputs hold uninitialised memory (losses may be NaN); memory does not depend on values.

Run from the repository root with PyTorch 2.13 (CPU build), e.g. the venv /tmp/t213:

    /tmp/t213/bin/python tools/oracle/fsdp2_cpu.py [--cases tools/oracle/cases/fsdp2-cpu.json]
        [--only ID,...] [--out test/fixtures/fsdp2-cpu] [--jobs 2] [--traces DIR]
        [--transformers-src /work/hfenv/hf-4.40.2:/work/hfenv/stubs] [--hf-deps /usr/lib/python3/dist-packages]

Each case runs in a fresh child process (one process group per process; ``--jobs`` children at a
time, one thread each) and writes <out>/<id>.json; a failing case writes ``error``/``traceback``
and the run exits 1.  ``"model": "hf"`` cases are built by the real transformers release named
by the case (4.40.2), imported from ``--transformers-src`` ($ORACLE_TRANSFORMERS_SRC, else the
tree and stubs under /work/hfenv);
its pure-Python dependencies (regex, yaml, requests, tqdm, packaging, six ...) come from
``--hf-deps``, appended to the *end* of sys.path so that torch and numpy still come from the venv.

accelerate FSDP2 (``fsdp.accelerate``; cases tools/oracle/cases/accelerate-fsdp2-cpu.json, fixtures
test/fixtures/accelerate-fsdp2-cpu/): the wrapping is accelerate's own code.  A real
``accelerate.utils.FullyShardedDataParallelPlugin(fsdp_version=2, ...)`` is built from the case's
settings (the FSDP_* / ACCELERATE_* variables ``accelerate launch`` would export are set too);
``plugin.set_mixed_precision(mixedPrecision)`` is called only when it is not "no", as
AcceleratorState.__init__ does; then ``plugin.set_auto_wrap_policy(model)`` and the real
``accelerate.utils.fsdp_utils.fsdp2_prepare_model(acc, model)``, as Accelerator._prepare_fsdp2
calls them.  ``acc`` is NOT an Accelerator: it is a stand-in namespace holding only what
fsdp2_prepare_model reads (state.fsdp_plugin, torch_device_mesh=None as without a
ParallelismConfig, parallelism_config=None, mixed_precision, is_main_process, device=cpu).  Each
``fully_shard`` call it makes is recorded by a pass-through (``fsdp.accelerate.fullyShardCalls``:
module keys -- a call may take a list, e.g. [model.norm, lm_head] -- reshard_after_forward, mp
policy, the parameters it takes over).  accelerate 1.15.0 applies no forward wrapping under FSDP2:
prepare() sends FSDP2 to _prepare_fsdp2, whose first pass skips nn.Modules, so prepare_model's
native-AMP ``convert_outputs_to_fp32(autocast(forward))`` never runs (prepare_model raises for
FSDP2); bf16 is FSDP2's MixedPrecisionPolicy(bf16, bf16, output_dtype=bf16) only, and the harness
adds nothing.  The optimizer is still built by the harness after wrapping (accelerate swaps the
optimizer's parameters for the sharded ones; its state is made lazily either way).  Everything
else (steps, profiler, phases) is the harness's.  Case fields ``fsdp.accelerate``:
``reshardAfterForward``, ``autoWrap`` (TRANSFORMER_BASED_WRAP), ``layerCls``, ``mixedPrecision``
(no | bf16 | fp16).  hf cases naming a release other than 4.40.2 (5.18.0) import the venv's
transformers (no --transformers-src needed), e.g. in /tmp/trl (torch 2.13.0+cpu, transformers
5.18.0, accelerate 1.15.0), 9 cases in ~21 s:

    /tmp/trl/bin/python tools/oracle/fsdp2_cpu.py --cases tools/oracle/cases/accelerate-fsdp2-cpu.json
        --out test/fixtures/accelerate-fsdp2-cpu --jobs 2

Measurement (tools/oracle/oracle.py's method, whose builders, inputs, optimizers and profiler
reader it imports; tools/oracle/distributed_cpu.py's whole-program session): torch.profiler with
``profile_memory=True`` runs from before the model is built to the end, so every block freed is
one whose allocation was seen.  Allocation events in time order, cumulated, give the live bytes.
Phases are marked with ``aten::is_set_to`` calls on a 1-element tensor (an op that allocates
nothing and that nothing in FSDP2/DTensor/DDP calls; the count of marks is checked).
Segments: build (model at seed 0, inputs at seeds 1/2, module mode), wrap (fully_shard / DDP),
optimizer, step1 (lazy init, optimizer state), step2, step3 (the steady step reported under
``train``), step4 (``steadyCheck``).  A step is: zero_grad(set_to_none=True); per micro-batch
forward, loss (sequential: ``F.cross_entropy(model(x), y)`` outside the model; HF: inside forward
after lm_head; only the loss is kept), backward; optimizer.step(); ``del loss``.  With
``microBatches`` 2 and ``gradientSync`` "every" both backwards reduce(-scatter); with "last" the
first runs under ``set_requires_gradient_sync(False)`` (FSDP2) / ``no_sync()`` (DDP).

Every allocation event carries its innermost op, its outermost op, and its innermost FSDP
``record_function`` scope (``FSDP::all_gather (model.layers.0)``, ``FSDP::post_backward_reduce``
...), which the fixture uses to list FSDP's own blocks with their lifetimes.

Case fields: ``id``; the model as tools/oracle/oracle.py builds it (``model`` "sequential" with
``layers`` and ``input`` [B, F]; or "hf" with ``transformers``, ``config``, ``input`` [B, S] and
``trainUseCache``); ``mode``; ``dtype`` (float32 | bfloat16: the parameters' storage dtype,
``model.to(dtype)`` before wrapping); ``world``, ``rank``; ``parallel`` (fsdp2 | ddp | null: one
process, no group); ``fsdp`` {``units``: module keys given to ``fully_shard`` first, in order
(e.g. "0", "2" or "model.layers.0"), then the root is always ``fully_shard(model)``;
``reshardAfterForward`` of the units; ``rootReshardAfterForward`` (null: the default, which FSDP2
turns into False for the root); ``mp`` null or {``paramDtype``, ``reduceDtype``}:
MixedPrecisionPolicy}; ``ddp`` {``gradientAsBucketView``, ``bucketCapMb``, ``broadcastBuffers``,
``findUnusedParameters``}; ``optimizer`` (oracle.py's names, all ``foreach=False``);
``microBatches`` (default 1) and ``gradientSync`` ("every" | "last"); ``note``.

Fixture fields (bytes throughout):

* ``env`` (torch, python, threads, process group, transformers, DDP comm hook), ``world``, ``rank``,
  ``params`` (global elements), ``bufferBytes``, ``input``, ``target``, ``paramTable`` (global and
  local shape per parameter, local storage bytes).
* ``fsdp``: ``units`` (accelerate cases: a list of module-key lists, one per fully_shard call
  before the root's), ``groups`` (per FSDP parameter group, read after the steps: ``modules``
  the fully_shard call was given, per parameter orig/sharded/padded-sharded sizes, dtypes and the
  sharded storage dtype, effective reshard_after_forward, the group's ``mpPolicy``),
  ``accelerate`` (accelerate cases: plugin settings, fully_shard calls, dtypes of parameters and
  gradients after wrapping / after the steps, the logits' and loss's dtypes),
  ``perGroup`` (the buffer sizes the 2.13 sources predict: sharded parameter storage, all-gather
  input cast, all-gather output, unsharded parameter blocks, reduce-scatter input/output, grad
  cast), which the measured ``fsdpBlocks`` match.  ``ddp``: bucket sizes, comm hook.
* ``inventory.params``: per parameter after the last step, the local (rank's) shape, bytes,
  storage bytes (FSDP2 pads every shard to the padded shard size), the gradient's and each
  optimizer state tensor's local shape and bytes.
* ``train.<optimizer>`` = the steady step 3: ``paramBytes`` (distinct local parameter storages,
  padding included), ``paramLogicalBytes`` (local numel x size), ``gradBytes`` (distinct gradient
  storages: FSDP2's gradients are views of one flat reduce-scatter output per group),
  ``optimizerStateBytes`` (``optimizerStepTensorBytes`` of it), ``bufferBytes``, ``inputBytes``,
  ``targetBytes``, DDP: ``ddpHeldBytes`` (buckets not shared with the grads) and
  ``gradsAreBucketViews``; ``baselineBytes`` = their sum; ``allocatedBeforeStep`` (from the
  stream) and ``unattributedBytes`` (the difference: 0 in every case); ``livePeakBytes`` =
  baseline + the highest live-bytes delta of the step, ``liveEndBytes``, ``livePeakAt`` (phase,
  op, top op, FSDP scope), ``phases`` (per phase: allocated, freed, events, maxCumulative relative
  to the step's start; micro-batches are ``forward@1`` ...; HF cases have ``loss`` from lm_head's
  output to the end of the model's forward and ``forward-end`` for the FSDP root post-forward
  hook that runs after it), ``peakComposition`` (what is live at the peak: blocks from before
  the step by role, the step's own live blocks by kind and phase), ``fsdpBlocks`` (every block
  the step allocated or freed inside an FSDP scope: size, where allocated and freed — event
  index in the step, phase, FSDP scope, op — and whether live at the peak), ``scopes`` (bytes
  allocated and freed per FSDP scope), ``steadyCheck`` (step 4 has the same figures).
* ``steps.stepN``: the headline figures of each of the four steps (step 1 makes the optimizer
  state and runs FSDP's lazy init).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import types
from collections import OrderedDict
from typing import Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
GENERATED_BY = "tools/oracle/fsdp2_cpu.py"
DEFAULT_CASES = os.path.join("tools", "oracle", "cases", "fsdp2-cpu.json")
DEFAULT_OUT = os.path.join("test", "fixtures", "fsdp2-cpu")
DEFAULT_HF_DEPS = "/usr/lib/python3/dist-packages"
STEPS = 4
MEASURED_STEP = 3
DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "fp32": "float32", "bf16": "bfloat16"}


# --------------------------------------------------------------------------------------------
# imports for the child (torch, oracle.py under torch 2.x)
# --------------------------------------------------------------------------------------------


def _stub_torchvision() -> bool:
    """oracle.py and layers.py import torchvision (mobilenets; layers.py's ``se`` layer).  The
    torch 2.13 venv has none, and the Debian one that ``--hf-deps`` may put on the path is built
    for torch 1.13 (loading its extension aborts the process).  The cases here use neither: a
    stub that fails on use stands in, always.  Returns True."""
    import importlib.machinery

    def missing(*a, **k):
        raise RuntimeError("torchvision is not installed in this environment (stub for tools/oracle/fsdp2_cpu.py)")

    tv = types.ModuleType("torchvision")
    tv.__version__ = "absent (stub)"
    tv.__spec__ = importlib.machinery.ModuleSpec("torchvision", None)
    ops = types.ModuleType("torchvision.ops")
    misc = types.ModuleType("torchvision.ops.misc")
    misc.SqueezeExcitation = missing
    models = types.ModuleType("torchvision.models")
    models.mobilenet_v3_small = missing
    models.mobilenet_v3_large = missing
    tv.ops, ops.misc, tv.models = ops, misc, models
    sys.modules.update({"torchvision": tv, "torchvision.ops": ops, "torchvision.ops.misc": misc, "torchvision.models": models})
    # layers.py imports more of torchvision at module level (its vision blocks): any further
    # torchvision.* module is made on import, each attribute a stub that fails on use.
    import importlib.abc

    class StubModule(types.ModuleType):
        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return missing

    class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, fullname, path=None, target=None):
            if fullname.startswith("torchvision.") and fullname not in sys.modules:
                return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
            return None

        def create_module(self, spec):
            m = StubModule(spec.name)
            m.__path__ = []
            return m

        def exec_module(self, module):
            pass

    for mod in (tv, ops, misc, models):
        mod.__path__ = []
    sys.meta_path.insert(0, Finder())
    return True


# --------------------------------------------------------------------------------------------
# child: one case
# --------------------------------------------------------------------------------------------


def run_child(case: dict, args) -> dict:
    import gc
    import contextlib

    if args.hf_deps and os.path.isdir(args.hf_deps) and args.hf_deps not in sys.path:
        sys.path.append(args.hf_deps)  # last: the venv's torch and numpy win
    stubbed = _stub_torchvision()
    sys.path.insert(0, HERE)
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile

    import oracle  # noqa: E402

    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover
        from torch.distributed._tensor import DTensor

    torch.set_num_threads(oracle.THREADS)
    torch.manual_seed(0)
    oracle.HF_SRC["path"] = args.transformers_src
    world, rank = int(case["world"]), int(case["rank"])
    par = case.get("parallel")  # "fsdp2" | "ddp" | None
    notes: List[str] = []
    if stubbed:
        notes.append("torchvision stubbed (tools/oracle/fsdp2_cpu.py _stub_torchvision; no case here uses it)")

    # ---------------- markers ----------------
    labels: List[Tuple[str, str]] = []
    mark_tensor = torch.zeros(1)
    oracle.MARK_OP = "aten::is_set_to"
    marks_on = {"on": False}

    def mark(kind: str, value: str) -> None:
        if marks_on["on"]:
            labels.append((kind, value))
            mark_tensor.is_set_to(mark_tensor)

    seg_name = {"name": "setup"}

    def segment(name: str) -> None:
        seg_name["name"] = name
        mark("segment", name)

    # ---------------- process group ----------------
    if world > 1 or par is not None:
        from torch.testing._internal.distributed.fake_pg import FakeStore

        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    mesh = None
    if par == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (world,))

    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16}
    param_dtype = dtypes[DTYPES[case.get("dtype", "float32")]]

    def local(t):
        return t._local_tensor if isinstance(t, DTensor) else t

    def storages(tensors) -> Tuple[Dict[int, int], int, int]:
        """(data_ptr -> storage nbytes of the distinct non-empty local storages, logical bytes, count)."""
        seen: Dict[int, int] = {}
        logical = 0
        n = 0
        for t in tensors:
            if t is None:
                continue
            lt = local(t)
            n += 1
            logical += lt.numel() * lt.element_size()
            st = lt.untyped_storage()
            if st.nbytes() and st.data_ptr():
                seen[st.data_ptr()] = st.nbytes()
        return seen, logical, n

    # ---------------- build ----------------
    marks_on["on"] = True
    ddp = None
    accelerate_info = None
    output_dtypes: Dict[str, str] = {}
    fsdp_units: List[str] = []
    comm_hook = None
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        segment("build")
        model = oracle.build_model(case)  # seed 0
        x, y = oracle.make_inputs(case, model)  # seeds 1, 2 (sequential: a no-grad eval forward)
        if param_dtype != torch.float32:
            model = model.to(param_dtype)
            if x.is_floating_point():
                x = x.to(param_dtype)
        oracle.set_mode(model, case)
        static = oracle.static_facts(model)
        param_rows = [
            {"name": n, "shape": list(p.shape), "numel": p.numel(), "dtype": oracle.dtype_name(p.dtype)}
            for n, p in model.named_parameters()
        ]
        segment("wrap")
        if par == "fsdp2":
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

            f = case.get("fsdp", {})
            mp = f.get("mp")
            mp_policy = (
                MixedPrecisionPolicy(param_dtype=dtypes[DTYPES[mp["paramDtype"]]], reduce_dtype=dtypes[DTYPES[mp["reduceDtype"]]])
                if mp
                else MixedPrecisionPolicy()
            )
            unit_kw = {"mesh": mesh, "mp_policy": mp_policy}
            if f.get("reshardAfterForward") is not None:
                unit_kw["reshard_after_forward"] = f["reshardAfterForward"]
            if f.get("accelerate") is not None:
                model, accelerate_info = _accelerate_fsdp2(model, f["accelerate"], rank)
                # each fully_shard call before the root's, in order, as the list of modules it was given
                fsdp_units = [c["modules"] for c in accelerate_info["fullyShardCalls"] if c["modules"] != [""]]
            else:
                for key in f.get("units", []):
                    fully_shard(model.get_submodule(key), **unit_kw)
                    fsdp_units.append(key)
                root_kw = {"mesh": mesh, "mp_policy": mp_policy}
                if f.get("rootReshardAfterForward") is not None:
                    root_kw["reshard_after_forward"] = f["rootReshardAfterForward"]
                fully_shard(model, **root_kw)
            fwd = model
        elif par == "ddp":
            o = case.get("ddp", {})
            ddp = torch.nn.parallel.DistributedDataParallel(
                model,
                bucket_cap_mb=o.get("bucketCapMb", 25),
                gradient_as_bucket_view=o.get("gradientAsBucketView", False),
                broadcast_buffers=o.get("broadcastBuffers", True),
                find_unused_parameters=o.get("findUnusedParameters", False),
            )
            # The fake group's works have futures holding None; DDP's built-in C++ all-reduce hook
            # reads the bucket back from the future ("expected the hook result is either a Tensor
            # or a TensorList found None").  This hook does the built-in's work (divide the bucket
            # in place by the world size, all-reduce it in place) and returns the bucket itself.
            probe = torch.zeros(1)
            value = dist.all_reduce(probe, async_op=True).get_future().wait()
            if not (isinstance(value, (list, tuple)) and value and torch.is_tensor(value[0])):

                def inplace_allreduce_hook(state, bucket):
                    buf = bucket.buffer()
                    buf.div_(world)
                    dist.all_reduce(buf, async_op=True).wait()
                    fut = torch.futures.Future()
                    fut.set_result(buf)
                    return fut

                ddp.register_comm_hook(None, inplace_allreduce_hook)
                comm_hook = "python in-place all-reduce hook (bucket.div_(world); all_reduce in place; returns the bucket)"
            del probe, value
            fwd = ddp
        else:
            fwd = model
        segment("optimizer")
        params = oracle.unique_params(model)
        opt = oracle.make_optimizer(case["optimizer"], params)

        # ---------------- the training step ----------------
        n_micro = int(case.get("microBatches", 1))
        sync_mode = case.get("gradientSync", "every")
        is_hf = case["model"] in ("hf",)
        is_ref_tf = case["model"] in ("llama", "gpt2")
        hooks = []
        loss_state = {"suffix": ""}
        if is_hf:
            head = model.get_output_embeddings()
            hooks.append(head.register_forward_hook(lambda m, a, o: mark("phase", "loss" + loss_state["suffix"])))
            # prepend: runs before FSDP's root post-forward hook, whose work stays in "forward"
            hooks.append(model.register_forward_hook(lambda m, a, o: mark("phase", "forward-end" + loss_state["suffix"]), prepend=True))

        def forward_loss(suffix: str):
            loss_state["suffix"] = suffix
            if is_hf:
                kw = {}
                if case.get("trainUseCache") is not None:
                    kw["use_cache"] = case["trainUseCache"]
                out = fwd(input_ids=x, labels=y, **kw)
                loss = out.loss
                if not output_dtypes and getattr(out, "logits", None) is not None:
                    output_dtypes["logits"] = oracle.dtype_name(out.logits.dtype)
                    output_dtypes["loss"] = oracle.dtype_name(loss.dtype)
                del out
                return loss
            if is_ref_tf:
                loss, logits = fwd(x, labels=y)
                del logits
                return loss
            out = fwd(x)
            mark("phase", "loss" + suffix)
            loss = F.cross_entropy(out, y)
            del out
            return loss

        def train_step():
            mark("phase", "zero_grad")
            opt.zero_grad(set_to_none=True)
            loss = None
            for i in range(n_micro):
                suffix = "" if n_micro == 1 else f"@{i + 1}"
                last = i == n_micro - 1
                ctx = contextlib.nullcontext()
                if sync_mode == "last" and n_micro > 1:
                    if par == "fsdp2":
                        model.set_requires_gradient_sync(last)
                    elif par == "ddp" and not last:
                        ctx = ddp.no_sync()
                with ctx:
                    mark("phase", "forward" + suffix)
                    loss = forward_loss(suffix)
                    mark("phase", "backward" + suffix)
                    loss.backward()
            mark("phase", "step")
            opt.step()
            mark("phase", "cleanup")
            del loss
            mark("phase", "end")

        def components() -> dict:
            """What is live before a step, read from the objects (allocates nothing)."""
            p_st, p_log, p_n = storages(params)
            grads = [p.grad for p in params if p.grad is not None]
            g_st, g_log, g_n = storages(grads)
            state = [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
            steps_t = [v for s in opt.state.values() for k, v in s.items() if k == "step" and torch.is_tensor(v)]
            s_st, s_log, _ = storages(state)
            st_st, _, _ = storages(steps_t)
            b_st, b_log, _ = storages(list(model.buffers()))
            in_bytes = x.numel() * x.element_size()
            tgt = 0 if (y is x or y.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()) else y.numel() * y.element_size()
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
                "optimizerStepTensorBytes": sum(st_st.values()),
                "optimizerStateParams": len(opt.state),
                "bufferBytes": sum(b_st.values()),
                "inputBytes": in_bytes,
                "targetBytes": tgt,
                "_ptrs": {"param": p_st, "grad": g_st, "state": s_st, "buffer": b_st, "input": storages([x, y])[0]},
            }

        comps = {}
        for s in range(1, STEPS + 1):
            segment(f"step{s}")
            comps[s] = components()
            train_step()
        segment("introspect-end")
        inventory = _inventory(model, params, opt, local, DTensor)
        fsdp_groups = _fsdp_groups(model) if par == "fsdp2" else None  # dtypes are set at lazy init
        segment("end")
        marks_on["on"] = False
        for h in hooks:
            h.remove()

    # ---------------- reading the stream ----------------
    stream = read_stream(oracle, prof, labels)
    del prof
    leaks = {}
    for e in stream:
        if e["segment"].startswith("introspect"):
            leaks[e["segment"]] = leaks.get(e["segment"], 0) + e["bytes"]
    leaks = {k: v for k, v in leaks.items() if v}
    if leaks:
        notes.append(f"introspection segments left blocks allocated: {leaks}")

    steps = OrderedDict()
    for s in range(1, STEPS + 1):
        name = f"step{s}"
        c = dict(comps[s])
        ptrs = c.pop("_ptrs")
        live = live_blocks_before(stream, name)
        baseline = (
            c["paramBytes"] + c["gradBytes"] + c["optimizerStateBytes"] + c["bufferBytes"] + c["inputBytes"] + c["targetBytes"]
        )
        known = set()
        for group in ptrs.values():
            known.update(group)
        other = {ptr: e for ptr, e in live.items() if ptr not in known}
        if par == "ddp":
            held = {ptr: e["bytes"] for ptr, e in other.items() if e["segment"] == "wrap" or (e["segment"].startswith("step") and e["phase"].startswith("forward"))}
            c["ddpHeldBytes"] = sum(held.values())
            c["gradsAreBucketViews"] = bool(ptrs["grad"]) and all(p not in live or live[p]["segment"] == "wrap" or live[p]["phase"].startswith("forward") for p in ptrs["grad"])
            baseline += c["ddpHeldBytes"]
        st = segment_stats(stream, name)
        c["baselineBytes"] = baseline
        c["allocatedBeforeStep"] = st["allocatedBefore"]
        c["unattributedBytes"] = st["allocatedBefore"] - baseline
        c["unattributedBlocks"] = [
            {"bytes": e["bytes"], "segment": e["segment"], "phase": e["phase"], "op": e["op"], "scope": e.get("scope")}
            for ptr, e in other.items()
            if not (par == "ddp" and ptr in held)
        ][:20]
        c["livePeakBytes"] = baseline + st["maxDelta"]
        c["liveEndBytes"] = baseline + st["endDelta"]
        c["allocatorPeakBytes"] = st["allocatedBefore"] + st["maxDelta"]
        c["livePeakAt"] = st["peakAt"]
        c["events"] = st["events"]
        c["phases"] = st["phases"]
        if s == MEASURED_STEP:
            c["peakComposition"] = peak_composition(stream, name, st, ptrs, live)
            c["fsdpBlocks"] = fsdp_blocks(stream, name) if par == "fsdp2" else None
            c["scopes"] = scope_summary(stream, name)
        steps[name] = c

    measured = OrderedDict(steps[f"step{MEASURED_STEP}"])
    measured["optimizer"] = {"class": type(opt).__name__, "defaults": oracle.json_safe(opt.defaults)}
    s4 = steps[f"step{STEPS}"]
    measured["steadyCheck"] = {
        "step": STEPS,
        "livePeakBytes": s4["livePeakBytes"],
        "baselineBytes": s4["baselineBytes"],
        "same": s4["livePeakBytes"] == measured["livePeakBytes"] and s4["baselineBytes"] == measured["baselineBytes"],
    }
    if args.traces:
        os.makedirs(args.traces, exist_ok=True)
        with open(os.path.join(args.traces, f"{case['id']}.json"), "w") as fh:
            json.dump(
                {
                    "id": case["id"],
                    "baselineBytes": measured["baselineBytes"],
                    "events": [
                        {k: e[k] for k in ("phase", "op", "top", "scope", "bytes", "ptr") if e.get(k) is not None}
                        for e in stream
                        if e["segment"] == f"step{MEASURED_STEP}"
                    ],
                },
                fh,
                separators=(",", ":"),
            )

    for s in steps.values():  # the per-step summaries keep only the headline figures (step 3's detail is under train)
        for k in ("phases", "unattributedBlocks", "peakComposition", "fsdpBlocks", "scopes"):
            s.pop(k, None)

    result = OrderedDict()
    result["id"] = case["id"]
    result["case"] = case
    result["generatedBy"] = GENERATED_BY
    result["env"] = {
        "torch": torch.__version__,
        "torchGit": getattr(torch.version, "git_version", None),
        "python": sys.version.split()[0],
        "device": "cpu",
        "threads": torch.get_num_threads(),
        "processGroup": "fake (torch.testing._internal.distributed.fake_pg.FakeStore, backend 'fake')",
        "transformers": _transformers_version(),
        "ddpCommHook": comm_hook,
    }
    result["world"] = world
    result["rank"] = rank
    result["params"] = static["params"]
    result["bufferBytes"] = static["bufferBytes"]
    result["buffers"] = static["buffers"]
    result["input"] = {"shape": list(x.shape), "dtype": oracle.dtype_name(x.dtype)}
    result["target"] = {"shape": list(y.shape), "dtype": oracle.dtype_name(y.dtype), "sameTensorAsInput": y is x}
    result["paramTable"] = _param_table(param_rows, inventory)
    if par == "fsdp2":
        result["fsdp"] = {
            "units": fsdp_units,
            "root": True,
            "groups": fsdp_groups,
            "perGroup": _per_group_figures(fsdp_groups, world),
        }
        if accelerate_info is not None:
            result["fsdp"]["root"] = None  # accelerate's own last fully_shard(model) is the root
            notes.append(
                "unattributedBytes: one 4 x world-byte block per FSDP parameter group, allocated in wrap by aten::resize_ "
                "outside FSDP scopes: the DeviceMesh that fully_shard(mesh=None) builds on each call (torch "
                "_init_default_mesh -> init_device_mesh); accelerate passes mesh=None without a ParallelismConfig"
            )
            accelerate_info["paramDtypesAfterSteps"] = sorted({r["dtype"] for r in inventory["params"]})
            accelerate_info["gradDtypesAfterSteps"] = sorted({r["grad"]["dtype"] for r in inventory["params"] if r["grad"]})
            accelerate_info["outputDtypes"] = dict(output_dtypes)
            result["fsdp"]["accelerate"] = accelerate_info
    if par == "ddp":
        log = ddp._get_ddp_logging_data()
        result["ddp"] = {
            "options": case.get("ddp", {}),
            "bucketSizes": log.get("bucket_sizes"),
            "rebuiltBucketSizes": log.get("rebuilt_bucket_sizes"),
            "hasRebuiltBuckets": log.get("has_rebuilt_buckets"),
            "commHook": comm_hook,
        }
    result["inventory"] = inventory
    result["steps"] = steps
    result["train"] = {case["optimizer"]: measured}
    result["notes"] = notes
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        pass
    gc.collect()
    return result


def _transformers_version() -> Optional[str]:
    mod = sys.modules.get("transformers")
    return getattr(mod, "__version__", None) if mod else None


# --------------------------------------------------------------------------------------------
# FSDP2 introspection (private attributes, read only)
# --------------------------------------------------------------------------------------------


def _fsdp_groups(root) -> list:
    """Each FSDP2 parameter group: padded sharded sizes, dtypes, effective reshard_after_forward."""
    from torch.distributed.fsdp import FSDPModule

    groups = []
    seen = set()
    module_names = {id(m): n for n, m in root.named_modules()}
    for name, mod in root.named_modules():
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
            rows = []
            for fp in g.fsdp_params:
                rows.append(
                    {
                        "fqn": getattr(fp, "_param_fqn", None),
                        "origSize": list(fp._orig_size),
                        "shardedSize": list(fp.sharded_size),
                        "paddedShardedSize": list(fp.padded_sharded_param_size),
                        "origDtype": str(fp.orig_dtype).replace("torch.", "") if getattr(fp, "orig_dtype", None) is not None else None,
                        "paramDtype": str(fp.param_dtype).replace("torch.", "") if getattr(fp, "param_dtype", None) is not None else None,
                        "reduceDtype": str(fp.reduce_dtype).replace("torch.", "") if getattr(fp, "reduce_dtype", None) is not None else None,
                        "storageDtype": str(fp.sharded_param.dtype).replace("torch.", ""),
                    }
                )
            mods = [module_names.get(id(m), "?") for m in getattr(state, "_modules", ())]
            groups.append(
                {
                    "module": name,
                    "modules": mods,
                    "isRoot": name == "",
                    "shardWorld": int(g.mesh_info.shard_mesh_size),
                    "shardRank": int(g.mesh_info.shard_mesh_rank),
                    "reshardAfterForward": bool(g._reshard_after_forward),
                    "mpPolicy": _mp_fields(getattr(g, "mp_policy", None)),
                    "params": rows,
                }
            )
    return groups


def _mp_fields(mp) -> Optional[dict]:
    """A MixedPrecisionPolicy's fields (dtypes as names)."""
    if mp is None:
        return None
    name = lambda d: None if d is None else str(d).replace("torch.", "")  # noqa: E731
    return {
        "paramDtype": name(getattr(mp, "param_dtype", None)),
        "reduceDtype": name(getattr(mp, "reduce_dtype", None)),
        "outputDtype": name(getattr(mp, "output_dtype", None)),
        "castForwardInputs": getattr(mp, "cast_forward_inputs", None),
    }


def _accelerate_fsdp2(model, cfg: dict, rank: int):
    """Wraps ``model`` with accelerate's own FSDP2 code: a real ``FullyShardedDataParallelPlugin``
    (fsdp_version 2) and the real ``accelerate.utils.fsdp_utils.fsdp2_prepare_model``, called as
    ``Accelerator._prepare_fsdp2`` calls it (``set_auto_wrap_policy(model)`` first).  The
    Accelerator is a stand-in namespace with only the attributes ``fsdp2_prepare_model`` reads.
    Every ``fully_shard`` call it makes is recorded (modules, keyword arguments) by a pass-through
    around ``torch.distributed.fsdp.fully_shard`` (which fsdp2_prepare_model imports at call time).
    Returns (model, info)."""
    import torch
    import torch.distributed.fsdp as tfsdp
    import accelerate
    from accelerate.utils import FullyShardedDataParallelPlugin
    from accelerate.utils import fsdp_utils
    from torch.distributed.tensor import DTensor

    mixed = cfg.get("mixedPrecision", "no")
    # What `accelerate launch` puts in the environment for an FSDP2 config; the plugin below also
    # gets every setting explicitly, so these only fill fields left at None.
    launch_env = {
        "ACCELERATE_USE_FSDP": "true",
        "ACCELERATE_MIXED_PRECISION": mixed,
        "FSDP_VERSION": "2",
        "FSDP_AUTO_WRAP_POLICY": cfg.get("autoWrap", "TRANSFORMER_BASED_WRAP"),
        "FSDP_RESHARD_AFTER_FORWARD": str(bool(cfg.get("reshardAfterForward", True))).lower(),
        "FSDP_OFFLOAD_PARAMS": "false",
        "FSDP_CPU_RAM_EFFICIENT_LOADING": "false",
        "FSDP_ACTIVATION_CHECKPOINTING": "false",
    }
    if cfg.get("layerCls"):
        launch_env["FSDP_TRANSFORMER_CLS_TO_WRAP"] = cfg["layerCls"]
    for k in list(os.environ):
        if k.startswith("FSDP_") and k not in launch_env:
            del os.environ[k]
    os.environ.update(launch_env)
    layer_cls = cfg.get("layerCls")
    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2,
        auto_wrap_policy=cfg.get("autoWrap", "TRANSFORMER_BASED_WRAP").lower(),
        transformer_cls_names_to_wrap=([layer_cls] if isinstance(layer_cls, str) else layer_cls),
        reshard_after_forward=bool(cfg.get("reshardAfterForward", True)),
        cpu_offload=False,
        cpu_ram_efficient_loading=False,
        activation_checkpointing=False,
    )
    # AcceleratorState.__init__ (state.py): `if self._mixed_precision != "no" and fsdp_plugin is not
    # None: fsdp_plugin.set_mixed_precision(self._mixed_precision)`; with "no" nothing is called
    # and fsdp2_prepare_model falls back to MixedPrecisionPolicy().
    if mixed != "no":
        plugin.set_mixed_precision(mixed)
    acc = types.SimpleNamespace(
        state=types.SimpleNamespace(fsdp_plugin=plugin),
        torch_device_mesh=None,  # Accelerator.torch_device_mesh: state.device_mesh, None without a ParallelismConfig
        parallelism_config=None,
        mixed_precision=mixed,
        is_main_process=rank == 0,
        device=torch.device("cpu"),
    )
    names = {id(m): n for n, m in model.named_modules()}
    pnames = {id(q): n for n, q in model.named_parameters()}  # a tied weight: its first name
    calls = []
    real = tfsdp.fully_shard

    def recording_fully_shard(module, **kw):
        mods = list(module) if isinstance(module, (list, tuple)) else [module]
        calls.append(
            {
                "modules": [names.get(id(m), "?") for m in mods],
                "classes": [type(m).__name__ for m in mods],
                "reshardAfterForward": kw.get("reshard_after_forward", "default (None)"),
                "mpPolicy": _mp_fields(kw.get("mp_policy")),
                "offloadPolicy": type(kw.get("offload_policy")).__name__ if "offload_policy" in kw else None,
                "mesh": None if kw.get("mesh") is None else str(kw.get("mesh")),
                # parameters this call takes over (those of earlier units are DTensors by now)
                "params": list(dict.fromkeys(pnames.get(id(q), "?") for m in mods for q in m.parameters() if not isinstance(q, DTensor))),
            }
        )
        return real(module, **kw)

    # Accelerator._prepare_fsdp2: "Needs to be done first" -- set_auto_wrap_policy(model) before AC /
    # compile / fsdp2_prepare_model (which calls it again; the second call is a no-op).
    plugin.set_auto_wrap_policy(model)
    tfsdp.fully_shard = recording_fully_shard
    try:
        model = fsdp_utils.fsdp2_prepare_model(acc, model)
    finally:
        tfsdp.fully_shard = real
    info = {
        "accelerate": accelerate.__version__,
        "function": "accelerate.utils.fsdp_utils.fsdp2_prepare_model (real), after plugin.set_auto_wrap_policy(model) as Accelerator._prepare_fsdp2 does",
        "acceleratorStandIn": "types.SimpleNamespace(state.fsdp_plugin, torch_device_mesh=None, parallelism_config=None, mixed_precision, is_main_process, device=cpu): the attributes fsdp2_prepare_model reads",
        "launchEnv": launch_env,
        "plugin": {
            "fsdpVersion": plugin.fsdp_version,
            "reshardAfterForward": plugin.reshard_after_forward,
            "autoWrapPolicy": getattr(getattr(plugin.auto_wrap_policy, "func", plugin.auto_wrap_policy), "__name__", None),
            "transformerClsNamesToWrap": plugin.transformer_cls_names_to_wrap,
            "cpuOffload": repr(plugin.cpu_offload),
            "cpuRamEfficientLoading": plugin.cpu_ram_efficient_loading,
            "mixedPrecisionPolicy": _mp_fields(plugin.mixed_precision_policy),
        },
        "mixedPrecision": mixed,
        "forwardWrap": None,
        "forwardWrapNote": (
            "accelerate 1.15.0 Accelerator.prepare() routes FSDP2 to _prepare_fsdp2, which never passes the "
            "model to prepare_model (its first pass skips nn.Modules), so the native-AMP forward wrapping "
            "(convert_outputs_to_fp32(autocast(...)), accelerator.py prepare_model) is not applied; "
            "prepare_model itself raises for FSDP2. Mixed precision is FSDP2's MixedPrecisionPolicy only."
        ),
        "fullyShardCalls": calls,
        "paramDtypesAfterWrap": sorted({str(p.dtype).replace("torch.", "") for p in model.parameters()}),
    }
    return model, info


def _per_group_figures(groups: Optional[list], world: int) -> Optional[list]:
    """Sizes the sources predict for each group's buffers (bytes), for reading fsdpBlocks."""
    if groups is None:
        return None
    size = {"float32": 4, "bfloat16": 2, "float16": 2}
    out = []
    for g in groups:
        padded = 0
        orig = None
        pdt = rdt = None
        per_param_unsharded = []
        sharded = 0
        for p in g["params"]:
            n = 1
            for d in p["paddedShardedSize"]:
                n *= d
            k = 1
            for d in p["shardedSize"]:
                k *= d
            padded += n
            sharded += k
            orig = p["origDtype"]
            pdt = p["paramDtype"] or p["origDtype"]
            rdt = p["reduceDtype"] or pdt
            per_param_unsharded.append(n * world * size[pdt])
        out.append(
            {
                "module": g["module"],
                "paddedShardedNumel": padded,
                "shardedNumel": sharded,
                "origDtype": orig,
                "computeDtype": pdt,
                "reduceDtype": rdt,
                "shardedParamBytes": padded * size[orig],
                "allGatherInputCastBytes": padded * size[pdt] if pdt != orig else 0,
                "allGatherOutputBytes": padded * world * size[pdt],
                "unshardedParamBytes": sum(per_param_unsharded),
                "unshardedParamBlocks": per_param_unsharded,
                "reduceScatterInputBytes": padded * world * size[rdt],
                "reduceScatterOutputBytes": padded * size[rdt],
                "gradCastBytes": padded * size[orig] if rdt != orig else 0,
            }
        )
    return out


def _inventory(model, params, opt, local, DTensor) -> dict:
    """Per parameter: local shape, local storage bytes (padding included), grad and state bytes."""
    import torch

    names = {}
    for n, p in model.named_parameters():
        names.setdefault(id(p), n)
    rows = []
    for p in params:
        lt = local(p)
        g = p.grad
        st = opt.state.get(p, {})
        state_bytes = {}
        for k, v in st.items():
            if torch.is_tensor(v):
                lv = local(v)
                state_bytes[k] = {"shape": list(lv.shape), "bytes": lv.numel() * lv.element_size(), "storageBytes": lv.untyped_storage().nbytes(), "dtensor": isinstance(v, DTensor)}
        rows.append(
            {
                "name": names.get(id(p)),
                "dtensor": isinstance(p, DTensor),
                "localShape": list(lt.shape),
                "localBytes": lt.numel() * lt.element_size(),
                "localStorageBytes": lt.untyped_storage().nbytes(),
                "dtype": str(lt.dtype).replace("torch.", ""),
                "grad": None
                if g is None
                else {
                    "localShape": list(local(g).shape),
                    "dtype": str(local(g).dtype).replace("torch.", ""),
                    "localBytes": local(g).numel() * local(g).element_size(),
                    "storageBytes": local(g).untyped_storage().nbytes(),
                },
                "state": state_bytes,
            }
        )
    return {"afterSteps": STEPS, "params": rows}


def _param_table(rows: list, inventory: dict) -> list:
    by = {r["name"]: r for r in inventory["params"]}
    out = []
    for r in rows:
        inv = by.get(r["name"], {})
        out.append(dict(r, localShape=inv.get("localShape"), localStorageBytes=inv.get("localStorageBytes")))
    return out


# --------------------------------------------------------------------------------------------
# the event stream
# --------------------------------------------------------------------------------------------


def read_stream(oracle, prof, labels) -> List[dict]:
    """Allocation events in time order with segment, phase, innermost op, outermost op and the
    innermost FSDP record_function scope."""
    events = oracle.profiler_events(prof)
    out = []
    li = 0
    seg, phase = "setup", "setup"
    for kind, _t, _i, n in events:
        if kind == "mark":
            if li >= len(labels):
                raise RuntimeError("more marker ops in the profiler's events than marks made")
            k, v = labels[li]
            li += 1
            if k == "segment":
                seg, phase = v, "setup"
            elif k == "phase":
                phase = v
            continue
        anc = oracle._ancestry(n)
        scope = next((a for a in anc if a.startswith("FSDP::")), None)
        out.append(
            {
                "segment": seg,
                "phase": phase,
                "op": anc[0] if anc else None,
                "top": anc[-1] if anc else None,
                "scope": scope,
                "bytes": int(n.extra_fields.alloc_size),
                "ptr": int(n.extra_fields.ptr),
            }
        )
    if li != len(labels):
        raise RuntimeError(f"{len(labels) - li} of {len(labels)} marks not found in the profiler's events")
    return out


def live_blocks_before(stream: List[dict], name: str) -> Dict[int, dict]:
    live: Dict[int, dict] = {}
    for e in stream:
        if e["segment"] == name:
            break
        if e["bytes"] > 0:
            live[e["ptr"]] = e
        elif e["bytes"] < 0:
            live.pop(e["ptr"], None)
    return live


def segment_stats(stream: List[dict], name: str) -> dict:
    before = 0
    idx0 = None
    for i, e in enumerate(stream):
        if e["segment"] == name:
            idx0 = i
            break
        before += e["bytes"]
    evs = [e for e in stream if e["segment"] == name]
    c = mx = 0
    peak_at = None
    peak_index = -1
    phases: "OrderedDict[str, dict]" = OrderedDict()
    for i, e in enumerate(evs):
        d = e["bytes"]
        c += d
        if c > mx:
            mx = c
            peak_index = i
            peak_at = {k: e[k] for k in ("phase", "op", "top", "scope") if e.get(k) is not None}
        p = phases.setdefault(e["phase"], {"allocated": 0, "freed": 0, "events": 0, "maxCumulative": None})
        p["events"] += 1
        if d > 0:
            p["allocated"] += d
        else:
            p["freed"] += -d
        if p["maxCumulative"] is None or c > p["maxCumulative"]:
            p["maxCumulative"] = c
    return {
        "events": len(evs),
        "maxDelta": mx,
        "endDelta": c,
        "allocatedBefore": before,
        "peakAt": peak_at,
        "peakIndex": peak_index,
        "firstIndex": idx0,
        "phases": phases,
    }


def _kind(e: dict) -> str:
    """A short label for where a block came from: the FSDP scope without its unit, or the top op."""
    if e.get("scope"):
        s = e["scope"]
        return s.split(" (")[0]
    top = e.get("top") or "?"
    if top.startswith("autograd::engine::evaluate_function"):
        return "autograd"
    if top.startswith("Optimizer."):
        return "optimizer"
    return "other"


def peak_composition(stream: List[dict], name: str, st: dict, ptrs: dict, live_before: Dict[int, dict]) -> dict:
    """What is live at the step's live peak: the blocks live before the step (by role) that are
    still live, and the step's own live blocks grouped by kind and phase of allocation."""
    evs = [e for e in stream if e["segment"] == name]
    live = dict(live_before)
    for e in evs[: st["peakIndex"] + 1]:
        if e["bytes"] > 0:
            live[e["ptr"]] = e
        elif e["bytes"] < 0:
            live.pop(e["ptr"], None)
    role_of = {}
    for role, d in ptrs.items():
        for p in d:
            role_of[p] = role
    before = {}
    rows: "OrderedDict[Tuple[str, str], dict]" = OrderedDict()
    for ptr, e in live.items():
        if e["segment"] != name:
            role = role_of.get(ptr, "other")
            before[role] = before.get(role, 0) + e["bytes"]
            continue
        key = (_kind(e), e["phase"])
        r = rows.setdefault(key, {"kind": key[0], "phase": key[1], "bytes": 0, "blocks": 0, "scopes": []})
        r["bytes"] += e["bytes"]
        r["blocks"] += 1
        if e.get("scope") and e["scope"] not in r["scopes"]:
            r["scopes"].append(e["scope"])
    return {"fromBeforeStep": before, "allocatedInStep": list(rows.values())}


def fsdp_blocks(stream: List[dict], name: str) -> List[dict]:
    """Every block the step allocated inside an FSDP scope, or freed inside one, with where it
    was allocated and freed (event indices within the step) and whether it is live at the step's
    peak."""
    evs = [e for e in stream if e["segment"] == name]
    st_peak = None
    c = mx = 0
    for i, e in enumerate(evs):
        c += e["bytes"]
        if c > mx:
            mx, st_peak = c, i
    open_: Dict[int, dict] = {}
    rows = []
    for i, e in enumerate(evs):
        if e["bytes"] > 0:
            r = {
                "bytes": e["bytes"],
                "alloc": {"i": i, "phase": e["phase"], "scope": e.get("scope"), "op": e["op"]},
                "free": None,
            }
            open_[e["ptr"]] = r
            rows.append(r)
        elif e["bytes"] < 0:
            r = open_.pop(e["ptr"], None)
            if r is None:
                r = {"bytes": -e["bytes"], "alloc": None, "free": None}
                rows.append(r)
            r["free"] = {"i": i, "phase": e["phase"], "scope": e.get("scope"), "op": e["op"]}
    keep = []
    for r in rows:
        a, f = r["alloc"], r["free"]
        if not ((a and a["scope"]) or (f and f["scope"])):
            continue
        ai = a["i"] if a else -1
        fi = f["i"] if f else len(evs)
        r["liveAtPeak"] = st_peak is not None and ai <= st_peak < fi
        keep.append(r)
    return keep


def scope_summary(stream: List[dict], name: str) -> List[dict]:
    rows: "OrderedDict[str, dict]" = OrderedDict()
    for e in stream:
        if e["segment"] != name or not e.get("scope"):
            continue
        r = rows.setdefault(e["scope"], {"scope": e["scope"], "allocated": 0, "freed": 0, "events": 0, "phases": []})
        r["events"] += 1
        if e["bytes"] > 0:
            r["allocated"] += e["bytes"]
        else:
            r["freed"] += -e["bytes"]
        if e["phase"] not in r["phases"]:
            r["phases"].append(e["phase"])
    return list(rows.values())


# --------------------------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------------------------

KEY_ORDER = ["id", "case", "generatedBy", "command", "env", "world", "rank", "error", "traceback", "stderr"]


def dump_fixture(res: dict) -> str:
    """indent=1 JSON, except that each row of the long per-block lists (fsdpBlocks, inventory
    params) is written on one line."""
    rows: List[str] = []

    def compact(lst):
        out = []
        for r in lst:
            rows.append(json.dumps(r, separators=(",", ":")))
            out.append(f"@@ROW{len(rows) - 1}@@")
        return out

    doc = json.loads(json.dumps(res))
    for tr in (doc.get("train") or {}).values():
        if isinstance(tr.get("fsdpBlocks"), list):
            tr["fsdpBlocks"] = compact(tr["fsdpBlocks"])
    inv = doc.get("inventory")
    if isinstance(inv, dict) and isinstance(inv.get("params"), list):
        inv["params"] = compact(inv["params"])
    text = json.dumps(doc, indent=1)
    for i, r in enumerate(rows):
        text = text.replace(f'"@@ROW{i}@@"', r, 1)
    return text + "\n"


def command_for(args, cid: str) -> str:
    extra = ""
    if args.cases != DEFAULT_CASES:
        extra += f" --cases {args.cases}"
    if args.out != DEFAULT_OUT:
        extra += f" --out {args.out}"
    py = "/tmp/t213/bin/python" if args.cases == DEFAULT_CASES else sys.executable
    return f"{py} tools/oracle/fsdp2_cpu.py{extra} --only {cid}"


def _resolve_transformers(args, cases) -> None:
    """--transformers-src / --hf-deps defaults: hf cases naming 4.40.2 (tools/oracle/cases/fsdp2-cpu.json)
    import the source tree under /work/hfenv as before; other releases (5.18.0 in the /tmp/trl venv)
    import the venv's own transformers (hf_models.load checks the version either way)."""
    if args.transformers_src is None:
        old = any(c.get("model") == "hf" and c.get("transformers") == "4.40.2" for c in cases)
        args.transformers_src = "/work/hfenv/hf-4.40.2:/work/hfenv/stubs" if old or not any(c.get("model") == "hf" for c in cases) else ""
    if args.hf_deps is None:
        args.hf_deps = DEFAULT_HF_DEPS if args.transformers_src else ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=DEFAULT_CASES)
    ap.add_argument("--only", default=None, help="comma-separated case ids")
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--jobs", type=int, default=2, help="cases run at once, each its own one-thread process")
    ap.add_argument("--traces", default=None, help="also write each measured step's allocation events to DIR/<id>.json")
    ap.add_argument(
        "--transformers-src",
        default=os.environ.get("ORACLE_TRANSFORMERS_SRC"),
        help="directories (':'-separated) holding the transformers release of 'hf' cases; '' imports the venv's "
        "transformers. Default: the 4.40.2 tree under /work/hfenv when a selected hf case names 4.40.2, else the venv's",
    )
    ap.add_argument("--hf-deps", default=None, help="appended to sys.path (transformers' pure-Python dependencies); "
                    f"default {DEFAULT_HF_DEPS}, or none when the venv's transformers is used")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child-out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    with open(args.cases) as f:
        cases = json.load(f)
    ids = [c["id"] for c in cases]
    if len(set(ids)) != len(ids):
        raise SystemExit("duplicate case ids in " + args.cases)

    if args.child is not None:
        case = next(c for c in cases if c["id"] == args.child)
        _resolve_transformers(args, [case])
        try:
            res = run_child(case, args)
        except Exception as e:  # recorded by the parent
            res = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        with open(args.child_out, "w") as f:
            json.dump(res, f)
        return 0

    if args.only:
        want = [s.strip() for s in args.only.split(",") if s.strip()]
        missing = [w for w in want if w not in ids]
        if missing:
            raise SystemExit(f"unknown case ids: {missing}")
        cases = [c for c in cases if c["id"] in want]
    _resolve_transformers(args, cases)
    os.makedirs(args.out, exist_ok=True)
    t_all = time.time()
    failed = 0
    tmp = tempfile.mkdtemp(prefix="fsdp2_cpu_")
    queue = list(cases)
    running = []
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONWARNINGS="ignore")

    def start(case):
        out = os.path.join(tmp, f"{case['id']}.json")
        cmd = [sys.executable, os.path.abspath(__file__), "--cases", args.cases, "--child", case["id"], "--child-out", out,
               "--transformers-src", args.transformers_src or "", "--hf-deps", args.hf_deps or ""]
        if args.traces:
            cmd += ["--traces", args.traces]
        err = open(out + ".err", "w+")
        return {"case": case, "out": out, "err": err, "proc": subprocess.Popen(cmd, stdout=err, stderr=subprocess.STDOUT, env=env), "t0": time.time()}

    while queue or running:
        while queue and len(running) < max(1, args.jobs):
            running.append(start(queue.pop(0)))
        time.sleep(0.1)
        for job in list(running):
            if job["proc"].poll() is None:
                continue
            running.remove(job)
            case = job["case"]
            job["err"].seek(0)
            tail = job["err"].read()[-4000:]
            job["err"].close()
            if os.path.exists(job["out"]):
                with open(job["out"]) as f:
                    res = json.load(f)
            else:
                res = {"error": f"child exited with {job['proc'].returncode}", "stderr": tail}
            if "error" in res:
                failed += 1
                res = OrderedDict([("id", case["id"]), ("case", case), ("generatedBy", GENERATED_BY)] + list(res.items()))
            res["command"] = command_for(args, case["id"])
            res = OrderedDict(sorted(res.items(), key=lambda kv: KEY_ORDER.index(kv[0]) if kv[0] in KEY_ORDER else len(KEY_ORDER)))
            with open(os.path.join(args.out, f"{case['id']}.json"), "w") as f:
                f.write(dump_fixture(res))
            secs = time.time() - job["t0"]
            if "error" in res:
                print(f"{case['id']}: ERROR {res['error']} ({secs:.1f} s)", flush=True)
            else:
                tr = next(iter(res["train"].values()))
                print(
                    f"{case['id']}: W={res['world']} r={res['rank']} baseline {tr['baselineBytes']} livePeak {tr['livePeakBytes']} "
                    f"params {tr['paramBytes']} grads {tr['gradBytes']} state {tr['optimizerStateBytes']} "
                    f"unattributed {tr['unattributedBytes']} steady {tr['steadyCheck']['same']} ({secs:.1f} s)",
                    flush=True,
                )
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"done: {len(cases)} cases, {failed} failed, in {time.time() - t_all:.1f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
