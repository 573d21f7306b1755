#!/usr/bin/env python3
"""Per-rank memory of one Hugging Face ``Trainer`` step under FSDP2, measured on real PyTorch 2.13 (CPU).

The question: does a steady Trainer step (``TrainingArguments(fsdp="full_shard auto_wrap",
fsdp_config={"fsdp_version": 2, "transformer_layer_cls_to_wrap": [...], "reshard_after_forward": True})``)
on rank r of world W have the live peak of the plain loop that tools/oracle/fsdp2_cpu.py measures for
accelerate's FSDP2 wrapping (``fsdp.accelerate`` cases, fixtures test/fixtures/accelerate-fsdp2-cpu/)?

Run from the repository root in the /tmp/trl venv (torch 2.13.0+cpu, transformers 5.18.0,
accelerate 1.15.0), offline:

    /tmp/trl/bin/python tools/oracle/trainer_fsdp2_cpu.py [--cases tools/oracle/cases/trainer-fsdp2-cpu.json]
        [--only ID,...] [--out test/fixtures/trainer-fsdp2-cpu] [--traces DIR]

Each case runs in a fresh child process (one thread).  Everything that trains is the real code:
``transformers.TrainingArguments`` / ``Trainer.train()`` (its own dataloader, default collator,
``create_optimizer`` for ``optim="adamw_torch"``, linear scheduler, ``compute_loss`` with
``num_items_in_batch``, ``accelerator.backward``, ``_clip_grad_norm`` with the default
``max_grad_norm`` 1.0, ``optimizer.step()``, ``model.zero_grad()``), the real ``Accelerator``
(``_prepare_fsdp2`` -> ``fsdp2_prepare_model`` -> ``fully_shard``), PyTorch's FSDP2.  Rank r of W
runs alone on PyTorch's ``fake`` process group (``init_process_group("fake", store=FakeStore())``,
initialised before TrainingArguments; accelerate's PartialState finds it initialised and does not
init another), with the variables ``accelerate launch`` exports for an FSDP2 config
(ACCELERATE_USE_FSDP, FSDP_VERSION, FSDP_*; RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
MASTER_ADDR/PORT) and ``ACCELERATE_TORCH_DEVICE=cpu`` (PartialState takes its device from it,
state.py, and set_device() then returns early).

ONE PATCH, and why (the unpatched run is blocked on a CPU-only host; both blockers are recorded in
each fixture's ``blockers``):

* ``use_cpu=False`` (the default): ``PartialState._prepare_backend`` (accelerate/state.py) finds no
  accelerator (``torch.cuda.is_available()`` False) and returns ``(None, DistributedType.NO)``;
  PartialState then has num_processes 1, TrainingArguments.parallel_mode is NOT_PARALLEL and
  ``Trainer.__init__`` raises "Using fsdp only works in distributed training." (transformers/trainer.py:466).
* ``use_cpu=True``: ``_prepare_backend`` returns ``("gloo", MULTI_CPU)``, but
  ``AcceleratorState.__init__`` turns the distributed type into FSDP only for MULTI_GPU / MLU / SDAA /
  MUSA / NPU / XPU / HPU / NEURON (state.py ~986-1010): MULTI_CPU stays MULTI_CPU, the FSDP plugin is
  dropped (``Trainer.is_fsdp_enabled`` False), ``prepare()`` wraps the model in DDP instead -- a
  different path (and DDP's C++ all-reduce hook fails on the fake group's None futures).  So
  use_cpu=True changes the FSDP path and is not used.

The patch: ``PartialState._prepare_backend`` is wrapped to return ``(dist.get_backend() = "fake",
DistributedType.MULTI_GPU)`` -- what it returns on a GPU node, minus the backend name -- after
calling the original (whose answer is recorded).  Nothing else is replaced: from there on
PartialState (num_processes / process_index from the initialised group, device cpu from
ACCELERATE_TORCH_DEVICE), AcceleratorState (MULTI_GPU + fsdp plugin -> DistributedType.FSDP,
``fsdp_plugin.set_mixed_precision``), Accelerator and Trainer run unmodified.

bf16: ``TrainingArguments(bf16=True)`` is refused on a CPU-only build (training_args.py ~1746:
"Your setup doesn't support bf16/gpu", since use_cpu is False and is_torch_bf16_gpu_available() is
False).  bf16=True has one effect in TrainingArguments/Trainer 5.18.0 besides that check:
``self.mixed_precision = "bf16"`` (training_args.py ~1585), handed to ``Accelerator(mixed_precision=...)``
(trainer.py ~732).  The bf16 case therefore leaves ``bf16`` False and sets
``ACCELERATE_MIXED_PRECISION=bf16`` as ``accelerate launch --mixed_precision bf16`` does, which
TrainingArguments reads into the same ``mixed_precision`` (training_args.py ~1582); the fixture
checks ``args.mixed_precision == "bf16"``.

Instrumentation (pass-throughs only, none allocates): ``torch.distributed.fsdp.fully_shard`` is
wrapped by a recorder as in fsdp2_cpu.py's accelerate path; ``torch.optim.adam._single_tensor_adam`` /
``_multi_tensor_adam`` / ``_fused_adam`` by counters (which AdamW implementation ran);
``Trainer.get_batch_samples`` to note the data pointers of each batch; ``accelerator.backward``,
``Trainer._clip_grad_norm`` and ``model.zero_grad`` to mark phases; a ``TrainerCallback`` marks
on_epoch_begin / on_step_begin / on_pre_optimizer_step / on_optimizer_step / on_step_end, and
(from on_train_begin, after wrapping, as fsdp2_cpu.py) forward hooks on lm_head ("loss") and on the
root (prepend: "forward-end").

Measurement: fsdp2_cpu.py's (its stream reader and step statistics are imported).  torch.profiler with
``profile_memory=True`` runs from before the model is built to after ``train()`` returns; marks are
``aten::is_set_to`` calls on a 1-element tensor (the count is checked).  Segments: build (the model
as fsdp2_cpu.py builds it: tools/oracle/hf_models.py, seed 0), trainer-init (TrainingArguments +
Trainer()), train-setup (train() up to on_epoch_begin: dataloader, create_optimizer, prepare ->
fully_shard, scheduler), step1 (from on_epoch_begin to on_step_end of step 1), stepN (from
on_step_end of step N-1 to on_step_end of step N), end.  A Trainer step so cut is, in order:
``fetch`` (_maybe_log_save_evaluate of the previous step, get_batch_samples: the collated batch,
``num_items_in_batch`` = labels[..., 1:].ne(-100).sum() and its accelerator.gather), ``forward``
(from on_step_begin: training_step's model.train(), _prepare_inputs, compute_loss -> model forward
with labels and num_items_in_batch), ``loss`` (lm_head output to the end of the model's forward),
``forward-end`` (FSDP root post-forward, compute_loss's ``loss *= num_processes``), ``backward``
(accelerator.backward -> loss.backward()), ``post-backward`` (loss.detach(), _tr_loss +=, flos),
``clip`` (_clip_grad_norm -> accelerator.clip_grad_norm_ -> clip_grad_norm_ on the DTensor grads;
_get_grad_norm's .item()), ``step`` (optimizer.step()), ``post-step`` (lr_scheduler.step()),
``zero_grad`` (model.zero_grad(): Trainer frees the gradients at the END of the step, so they are
not live at a step's start, unlike the plain loop's zero_grad-first step), ``end``.

``train.livePeakBytes`` is defined as fsdp2_cpu.py's: baseline (local parameter storages, gradient
storages, optimizer state, buffers, and the batch tensors live at the step's start) + the step's
highest live-bytes delta; ``allocatorPeakBytes`` = everything live before the step (from the
stream) + the same delta; ``unattributedBlocks`` lists what is live before the step and in neither
(the DeviceMesh blocks, Trainer scalars ...).  ``comparison`` holds the plain-loop fixture's figures
(test/fixtures/accelerate-fsdp2-cpu/<compareWith>.json) and the per-phase and peak-composition
differences.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections import OrderedDict
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GENERATED_BY = "tools/oracle/trainer_fsdp2_cpu.py"
DEFAULT_CASES = os.path.join("tools", "oracle", "cases", "trainer-fsdp2-cpu.json")
DEFAULT_OUT = os.path.join("test", "fixtures", "trainer-fsdp2-cpu")
PLAIN_DIR = os.path.join("test", "fixtures", "accelerate-fsdp2-cpu")
STEPS = 4
MEASURED_STEP = 3
SCRATCH = os.path.join(".tmp", "trainer-fsdp")


def launch_env(case: dict) -> Dict[str, str]:
    t = case["trainer"]
    world, rank = int(case["world"]), int(case["rank"])
    env = {
        # torchrun / accelerate launch (one node, this process is `rank`)
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": str(world),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29500",
        # accelerate launch for an FSDP2 config (accelerate/utils/launch.py prepare_multi_gpu_env)
        "ACCELERATE_USE_FSDP": "true",
        "ACCELERATE_MIXED_PRECISION": t.get("mixedPrecision", "no"),
        "ACCELERATE_DYNAMO_BACKEND": "NO",
        "FSDP_VERSION": "2",
        "FSDP_SHARDING_STRATEGY": "FULL_SHARD",
        "FSDP_RESHARD_AFTER_FORWARD": str(bool(t.get("reshardAfterForward", True))).lower(),
        "FSDP_OFFLOAD_PARAMS": "false",
        "FSDP_MIN_NUM_PARAMS": "0",
        "FSDP_AUTO_WRAP_POLICY": "TRANSFORMER_BASED_WRAP",
        "FSDP_TRANSFORMER_CLS_TO_WRAP": t["layerCls"],
        "FSDP_STATE_DICT_TYPE": "FULL_STATE_DICT",
        "FSDP_FORWARD_PREFETCH": "false",
        "FSDP_USE_ORIG_PARAMS": "true",
        "FSDP_CPU_RAM_EFFICIENT_LOADING": "false",
        "FSDP_SYNC_MODULE_STATES": "true",
        "FSDP_ACTIVATION_CHECKPOINTING": "false",
        "FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD": "false",
        # the device: PartialState reads it (state.py) and set_device() returns early
        "ACCELERATE_TORCH_DEVICE": "cpu",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    return env


def run_child(case: dict, args) -> dict:
    for k in list(os.environ):
        if k.startswith("FSDP_") or k.startswith("ACCELERATE_"):
            del os.environ[k]
    env = launch_env(case)
    os.environ.update(env)
    sys.path.insert(0, HERE)
    import fsdp2_cpu as f2  # noqa: E402  (its stream reader, statistics, introspection)

    f2._stub_torchvision()
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    import oracle  # noqa: E402

    from torch.distributed.tensor import DTensor

    torch.set_num_threads(oracle.THREADS)
    world, rank = int(case["world"]), int(case["rank"])
    t = case["trainer"]
    notes: List[str] = [
        "Trainer step = the plain loop's forward / backward / FSDP blocks event for event (forward identical; loss and backward add only scalar-sized blocks: loss / num_items_in_batch, loss *= num_processes, accelerator.backward's loss / gradient_accumulation_steps and their backward), plus the Trainer's small live tensors at the peak: see comparison.peakDifference",
        "gradients: the Trainer frees them at the END of a step (model.zero_grad() after optimizer.step()), so gradBytes is 0 at a step's start and baselineBytes is lower than the plain loop's by the gradient bytes; the plain loop frees them at the start of its step (zero_grad first); the live peak in backward is unaffected",
        "on a GPU run accelerate's DataLoaderShard keeps the prefetched next batch on the host (send_to_device is applied to the batch being yielded), so of the batch tensors only the current batch (input_ids AND labels: the default collator makes two tensors) is device memory; here device = cpu and both batches sit in the one allocator",
    ]

    # ---------------- markers ----------------
    labels = []
    mark_tensor = torch.zeros(1)
    oracle.MARK_OP = "aten::is_set_to"
    marks_on = {"on": False}

    def mark(kind: str, value: str) -> None:
        if marks_on["on"]:
            labels.append((kind, value))
            mark_tensor.is_set_to(mark_tensor)

    def segment(name: str) -> None:
        mark("segment", name)

    # ---------------- process group, before anything of accelerate / transformers ----------------
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)

    import accelerate
    import transformers
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType

    transformers.logging.set_verbosity_error()
    orig_prepare_backend = PartialState._prepare_backend
    backend_calls = []

    def patched_prepare_backend(self, cpu=False, sagemaker_dp=False, backend=None):
        b, dt = orig_prepare_backend(self, cpu, sagemaker_dp, backend)
        out = (dist.get_backend(), DistributedType.MULTI_GPU)
        backend_calls.append({"cpu": cpu, "backendArg": backend, "original": [b, str(dt)], "returned": [out[0], str(out[1])]})
        return out

    PartialState._prepare_backend = patched_prepare_backend

    # ---------------- AdamW implementation counters ----------------
    import torch.optim.adam as tadam

    impl_calls = {"_single_tensor_adam": 0, "_multi_tensor_adam": 0, "_fused_adam": 0}
    impl_kw = {}
    for fname in list(impl_calls):
        real_f = getattr(tadam, fname)

        def counting(*a, __real=real_f, __name=fname, **kw):
            impl_calls[__name] += 1
            if not impl_kw:
                impl_kw.update({k: (v if isinstance(v, (bool, int, float, str, type(None))) else str(v)) for k, v in kw.items()})
            return __real(*a, **kw)

        setattr(tadam, fname, counting)

    # ---------------- fully_shard recorder ----------------
    import torch.distributed.fsdp as tfsdp

    calls = []
    real_fully_shard = tfsdp.fully_shard
    names_box = {"m": {}, "p": {}}

    def recording_fully_shard(module, **kw):
        mods = list(module) if isinstance(module, (list, tuple)) else [module]
        names, pnames = names_box["m"], names_box["p"]
        calls.append(
            {
                "modules": [names.get(id(m), "?") for m in mods],
                "classes": [type(m).__name__ for m in mods],
                "reshardAfterForward": kw.get("reshard_after_forward", "default (None)"),
                "mpPolicy": f2._mp_fields(kw.get("mp_policy")),
                "offloadPolicy": type(kw.get("offload_policy")).__name__ if "offload_policy" in kw else None,
                "mesh": None if kw.get("mesh") is None else str(kw.get("mesh")),
                "params": list(dict.fromkeys(pnames.get(id(q), "?") for m in mods for q in m.parameters() if not isinstance(q, DTensor))),
            }
        )
        return real_fully_shard(module, **kw)

    tfsdp.fully_shard = recording_fully_shard

    # ---------------- the run ----------------
    batch_ptrs: List[Dict[int, str]] = []  # per fetched batch: data_ptr -> role
    comps: Dict[int, dict] = {}
    box = {"trainer": None, "hooks": [], "step": 0}

    # (data_ptr -> nbytes of distinct local storages, logical bytes, count): the harness's rule.
    from fake_pg_harness import storage_stats as storages  # noqa: E402

    def components() -> dict:
        tr = box["trainer"]
        model = tr.model
        opt = tr.optimizer.optimizer if hasattr(tr.optimizer, "optimizer") else tr.optimizer
        params = oracle.unique_params(model)
        p_st, p_log, p_n = storages(params)
        g_st, g_log, g_n = storages([p.grad for p in params])
        state = [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
        steps_t = [v for s in opt.state.values() for k, v in s.items() if k == "step" and torch.is_tensor(v)]
        s_st, s_log, _ = storages(state)
        st_st, _, _ = storages(steps_t)
        b_st, _, _ = storages(list(model.buffers()))
        held = batch_ptrs[-1] if batch_ptrs else {}
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
            "_ptrs": {"param": p_st, "grad": g_st, "state": s_st, "buffer": b_st, "_held": dict(held)},
        }

    class Marker(transformers.TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            tr = box["trainer"]
            model = tr.model
            head = model.get_output_embeddings()
            box["hooks"].append(head.register_forward_hook(lambda m, a, o: mark("phase", "loss")))
            box["hooks"].append(model.register_forward_hook(lambda m, a, o: mark("phase", "forward-end"), prepend=True))
            mark("phase", "train-begin")

        def on_epoch_begin(self, args, state, control, **kw):
            box["step"] = 1
            segment("step1")
            comps[1] = components()
            mark("phase", "fetch")

        def on_step_begin(self, args, state, control, **kw):
            mark("phase", "forward")

        def on_pre_optimizer_step(self, args, state, control, **kw):
            mark("phase", "step")

        def on_optimizer_step(self, args, state, control, **kw):
            mark("phase", "post-step")

        def on_step_end(self, args, state, control, **kw):
            n = box["step"]
            if n < STEPS:
                box["step"] = n + 1
                segment(f"step{n + 1}")
                comps[n + 1] = components()
                mark("phase", "fetch")
            else:
                segment("end")

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        marks_on["on"] = True
        segment("build")
        model = oracle.build_model(case)  # tools/oracle/hf_models.py at seed 0, as fsdp2_cpu.py
        model.train()
        static = oracle.static_facts(model)
        param_rows = [{"name": n, "shape": list(p.shape), "numel": p.numel(), "dtype": oracle.dtype_name(p.dtype)} for n, p in model.named_parameters()]
        names_box["m"] = {id(m): n for n, m in model.named_modules()}
        names_box["p"] = {id(q): n for n, q in model.named_parameters()}
        # the dataset: python lists (no tensors held by it); labels equal to input_ids
        torch.manual_seed(1)
        vocab = case["config"]["vocab_size"]
        seq = int(case["input"][1])
        # STEPS + 2 batches per rank: accelerate's DataLoaderShard fetches one batch ahead, so every
        # measured step (4 included) has a next batch to prefetch, as in a long run
        n_samples = int(case["input"][0]) * world * (STEPS + 2)
        ids = torch.randint(0, vocab, (n_samples, seq), dtype=torch.int64).tolist()
        dataset = [{"input_ids": row, "labels": list(row)} for row in ids]
        del ids

        segment("trainer-init")
        fsdp_config = {"fsdp_version": 2, "transformer_layer_cls_to_wrap": [t["layerCls"]], "reshard_after_forward": bool(t.get("reshardAfterForward", True))}
        ta_kwargs = dict(
            output_dir=os.path.join(ROOT, SCRATCH, "out", case["id"]),
            fsdp="full_shard auto_wrap",
            fsdp_config=fsdp_config,
            per_device_train_batch_size=int(case["input"][0]),
            max_steps=STEPS,
            report_to=[],
            save_strategy="no",
            eval_strategy="no",
            dataloader_num_workers=0,
            optim="adamw_torch",
            disable_tqdm=True,
        )
        if t.get("bf16"):
            ta_kwargs["bf16"] = True
        ta = transformers.TrainingArguments(**ta_kwargs)
        tr = transformers.Trainer(model=model, args=ta, train_dataset=dataset, callbacks=[Marker()])
        box["trainer"] = tr

        real_get_batch = tr.get_batch_samples

        def get_batch_samples(*a, **kw):
            batch_samples, num_items = real_get_batch(*a, **kw)
            ptrs = {}
            for b in batch_samples:
                for k, v in b.items():
                    if torch.is_tensor(v) and v.untyped_storage().nbytes():
                        ptrs[v.untyped_storage().data_ptr()] = f"batch.{k}"
            if torch.is_tensor(num_items) and num_items.untyped_storage().nbytes():
                ptrs[num_items.untyped_storage().data_ptr()] = "num_items_in_batch"
            batch_ptrs.append(ptrs)
            return batch_samples, num_items

        tr.get_batch_samples = get_batch_samples
        acc = tr.accelerator
        real_backward = acc.backward

        def backward(loss, **kw):
            mark("phase", "backward")
            out = real_backward(loss, **kw)
            mark("phase", "post-backward")
            return out

        acc.backward = backward
        real_clip = tr._clip_grad_norm

        def clip(m):
            mark("phase", "clip")
            return real_clip(m)

        tr._clip_grad_norm = clip
        real_zero = model.zero_grad

        def zero_grad(*a, **kw):
            mark("phase", "zero_grad")
            out = real_zero(*a, **kw)
            mark("phase", "after-zero_grad")
            return out

        model.zero_grad = zero_grad

        segment("train-setup")
        out = tr.train()
        segment("after-train")
        # introspection (reads only)
        model = tr.model
        opt = tr.optimizer.optimizer
        params = oracle.unique_params(model)
        inventory = f2._inventory(model, params, opt, lambda x: x._local_tensor if isinstance(x, DTensor) else x, DTensor)
        fsdp_groups = f2._fsdp_groups(model)
        marks_on["on"] = False
        for h in box["hooks"]:
            h.remove()

    tfsdp.fully_shard = real_fully_shard
    PartialState._prepare_backend = orig_prepare_backend

    # ---------------- reading the stream ----------------
    stream = f2.read_stream(oracle, prof, labels)
    del prof
    foreach_ops = {}
    for e in stream:
        if e["segment"].startswith("step"):
            for k in ("op", "top"):
                if e.get(k) and "_foreach_" in e[k]:
                    foreach_ops.setdefault(e["phase"], set()).add(e[k])
    foreach_ops = {k: sorted(v) for k, v in foreach_ops.items()}

    steps = OrderedDict()
    details = {}
    for s in range(1, STEPS + 1):
        name = f"step{s}"
        c = dict(comps[s])
        ptrs = c.pop("_ptrs")
        held = ptrs.pop("_held")
        live = f2.live_blocks_before(stream, name)
        batch_live = {p: live[p]["bytes"] for p in held if p in live and held[p].startswith("batch.")}
        items_live = {p: live[p]["bytes"] for p in held if p in live and held[p] == "num_items_in_batch"}
        c["batchBytes"] = sum(batch_live.values())
        c["batchTensors"] = sorted(held[p] for p in batch_live)
        c["numItemsBytes"] = sum(items_live.values())
        ptrs["input"] = batch_live
        ptrs["num_items"] = items_live
        baseline = c["paramBytes"] + c["gradBytes"] + c["optimizerStateBytes"] + c["bufferBytes"] + c["batchBytes"]
        known = set()
        for group in ptrs.values():
            known.update(group)
        other = {ptr: e for ptr, e in live.items() if ptr not in known}
        st = f2.segment_stats(stream, name)
        c["baselineBytes"] = baseline
        c["allocatedBeforeStep"] = st["allocatedBefore"]
        c["unattributedBytes"] = st["allocatedBefore"] - baseline
        c["unattributedBlocks"] = [
            {"bytes": e["bytes"], "segment": e["segment"], "phase": e["phase"], "op": e["op"], "top": e["top"], "scope": e.get("scope")}
            for ptr, e in other.items()
        ][:40]
        c["livePeakBytes"] = baseline + st["maxDelta"]
        c["liveEndBytes"] = baseline + st["endDelta"]
        c["allocatorPeakBytes"] = st["allocatedBefore"] + st["maxDelta"]
        c["livePeakAt"] = st["peakAt"]
        c["events"] = st["events"]
        c["phases"] = st["phases"]
        if s == MEASURED_STEP:
            c["peakComposition"] = f2.peak_composition(stream, name, st, ptrs, live)
            c["fsdpBlocks"] = f2.fsdp_blocks(stream, name)
            c["scopes"] = f2.scope_summary(stream, name)
            details["nonFsdpBlocks"] = non_fsdp_blocks(stream, name, st)
            model_ptrs = set(ptrs["param"]) | set(ptrs["grad"]) | set(ptrs["state"]) | set(ptrs["buffer"])
            details["smallLiveAtPeak"] = small_live_at_peak(stream, name, st, live, batch_ptrs, model_ptrs, s)
        steps[name] = c

    measured = OrderedDict(steps[f"step{MEASURED_STEP}"])
    measured["nonFsdpBlocks"] = details["nonFsdpBlocks"]
    measured["smallLiveAtPeak"] = details["smallLiveAtPeak"]
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
                {"id": case["id"], "baselineBytes": measured["baselineBytes"],
                 "events": [{k: e[k] for k in ("phase", "op", "top", "scope", "bytes", "ptr") if e.get(k) is not None} for e in stream if e["segment"] == f"step{MEASURED_STEP}"]},
                fh, separators=(",", ":"),
            )
    for s in steps.values():
        for k in ("phases", "unattributedBlocks", "peakComposition", "fsdpBlocks", "scopes"):
            s.pop(k, None)

    # ---------------- what the Trainer / Accelerator did ----------------
    from torch.optim.optimizer import _default_to_fused_or_foreach

    plugin = acc.state.fsdp_plugin
    opt_info = {
        "class": f"{type(opt).__module__}.{type(opt).__name__}",
        "wrappedBy": f"{type(tr.optimizer).__module__}.{type(tr.optimizer).__name__}",
        "defaults": oracle.json_safe(opt.defaults),
        "paramGroups": [{"params": len(g["params"]), "weight_decay": g.get("weight_decay"), "lr": g.get("lr"), "foreach": g.get("foreach"), "fused": g.get("fused")} for g in opt.param_groups],
        "implementationCalls": dict(impl_calls),
        "implementationKwargs": {k: v for k, v in impl_kw.items() if k in ("foreach", "fused", "capturable", "differentiable", "amsgrad", "maximize", "decoupled_weight_decay", "has_complex")},
        "defaultToFusedOrForeach(params)": list(_default_to_fused_or_foreach(params, False, False)),
        "foreachOpsInStepsByPhase": foreach_ops,
        "note": "AdamW(foreach=None, fused=None) from Trainer.create_optimizer (optim adamw_torch): torch.optim.adam resolves it per step with _default_to_fused_or_foreach -> foreach only when every param is a Tensor/Parameter/DTensor on a foreach-supported device (cuda, xpu, ...; not cpu). On this CPU run _single_tensor_adam ran (once per param group per step), as the plain loop's foreach=False; on CUDA the same Trainer would run _multi_tensor_adam. Gradient clipping (clip_grad_norm_, foreach=None) uses torch.nn.utils' own rule, which counts cpu as foreach-capable: aten::_foreach_norm / _foreach_mul_ in phase clip.",
    }
    trainer_info = {
        "transformers": transformers.__version__,
        "accelerate": accelerate.__version__,
        "trainingArguments": {k: (v if isinstance(v, (bool, int, float, str, type(None))) else str(v)) for k, v in ta_kwargs.items() if k != "fsdp_config"},
        "fsdpConfigGiven": fsdp_config,
        "fsdpConfigAfter": oracle.json_safe(ta.fsdp_config),
        "fsdpPluginArgs": oracle.json_safe(ta.fsdp_plugin_args),
        "argsMixedPrecision": ta.mixed_precision,
        "argsBf16": ta.bf16,
        "maxGradNorm": ta.max_grad_norm,
        "averageTokensAcrossDevices": ta.average_tokens_across_devices,
        "weightDecay": ta.weight_decay,
        "lrSchedulerType": str(ta.lr_scheduler_type),
        "lrScheduler": f"{type(tr.lr_scheduler).__module__}.{type(tr.lr_scheduler).__name__}",
        "loggingSteps": ta.logging_steps,
        "worldSize": ta.world_size,
        "parallelMode": str(ta.parallel_mode),
        "nGpu": ta.n_gpu,
        "device": str(ta.device),
        "modelAcceptsLossKwargs": tr.model_accepts_loss_kwargs,
        "gradientAccumulationSteps": ta.gradient_accumulation_steps,
        "isFsdpEnabled": tr.is_fsdp_enabled,
        "globalStep": tr.state.global_step,
        "trainOutput": oracle.json_safe(out.metrics),
        "accelerator": {
            "distributedType": str(acc.distributed_type),
            "isFsdp2": acc.is_fsdp2,
            "mixedPrecision": acc.mixed_precision,
            "nativeAmp": getattr(acc, "native_amp", None),
            "autocastHandler": None if acc.autocast_handler is None else str(acc.autocast_handler),
            "scaler": None if acc.scaler is None else type(acc.scaler).__name__,
            "device": str(acc.device),
            "numProcesses": acc.num_processes,
            "processIndex": acc.process_index,
            "backend": acc.state.backend,
            "modelForwardWrapped": getattr(model.forward, "__wrapped__", None) is not None or type(model.forward).__name__ != "method",
        },
        "plugin": {
            "fsdpVersion": plugin.fsdp_version,
            "reshardAfterForward": plugin.reshard_after_forward,
            "autoWrapPolicy": getattr(getattr(plugin.auto_wrap_policy, "func", plugin.auto_wrap_policy), "__name__", str(plugin.auto_wrap_policy)),
            "transformerClsNamesToWrap": plugin.transformer_cls_names_to_wrap,
            "cpuOffload": repr(plugin.cpu_offload),
            "cpuRamEfficientLoading": plugin.cpu_ram_efficient_loading,
            "activationCheckpointing": plugin.activation_checkpointing,
            "stateDictType": str(plugin.state_dict_type),
            "mixedPrecisionPolicy": f2._mp_fields(plugin.mixed_precision_policy),
        },
        "fullyShardCalls": calls,
        "optimizer": opt_info,
        "paramDtypesAfterSteps": sorted({r["dtype"] for r in inventory["params"]}),
        "gradDtypesAfterSteps": sorted({r["grad"]["dtype"] for r in inventory["params"] if r["grad"]}),
        "batchesFetched": len(batch_ptrs),
    }

    result = OrderedDict()
    result["id"] = case["id"]
    result["case"] = case
    result["generatedBy"] = GENERATED_BY
    result["env"] = {
        "torch": torch.__version__,
        "torchGit": getattr(torch.version, "git_version", None),
        "python": sys.version.split()[0],
        "transformers": transformers.__version__,
        "accelerate": accelerate.__version__,
        "device": "cpu",
        "threads": torch.get_num_threads(),
        "processGroup": "fake (torch.testing._internal.distributed.fake_pg.FakeStore, backend 'fake'), initialised before TrainingArguments",
        "launchEnv": env,
    }
    result["patches"] = [
        {
            "target": "accelerate.state.PartialState._prepare_backend",
            "returns": "(torch.distributed.get_backend() = 'fake', DistributedType.MULTI_GPU), after calling the original",
            "calls": backend_calls,
            "why": "on a CPU-only host the original returns (None, NO) without use_cpu and (gloo, MULTI_CPU) with it; neither reaches FSDP (see blockers)",
        }
    ]
    result["blockers"] = [
        {
            "setting": "use_cpu=False (default), no patch",
            "where": "accelerate/state.py PartialState._prepare_backend: torch.cuda.is_available() False -> (None, DistributedType.NO); transformers/trainer.py:466",
            "error": "ValueError: Using fsdp only works in distributed training.",
        },
        {
            "setting": "use_cpu=True, no patch",
            "where": "accelerate/state.py AcceleratorState.__init__ (~986-1010): only MULTI_GPU/MLU/SDAA/MUSA/NPU/XPU/HPU/NEURON become DistributedType.FSDP; MULTI_CPU keeps its type, fsdp_plugin is not set on the state",
            "error": "Trainer.is_fsdp_enabled False; prepare() wraps DDP; backward fails on the fake group: RuntimeError: result.isTensor() || result.isTensorList() INTERNAL ASSERT FAILED at torch/csrc/distributed/c10d/comm.cpp:114 ... expected the hook result is either a Tensor or a TensorList found None",
        },
        {
            "setting": "bf16=True, use_cpu=False on a CPU-only torch build",
            "where": "transformers/training_args.py ~1746 (_validate_args)",
            "error": "ValueError: Your setup doesn't support bf16/gpu. You need to assign use_cpu if you want to train the model on CPU.",
            "workaround": "ACCELERATE_MIXED_PRECISION=bf16 (accelerate launch --mixed_precision bf16) gives the same args.mixed_precision",
        },
    ]
    result["world"] = world
    result["rank"] = rank
    result["params"] = static["params"]
    result["bufferBytes"] = static["bufferBytes"]
    result["paramTable"] = f2._param_table(param_rows, inventory)
    result["fsdp"] = {
        "units": [c["modules"] for c in calls if c["modules"] != [""]],
        "groups": fsdp_groups,
        "perGroup": f2._per_group_figures(fsdp_groups, world),
    }
    result["trainer"] = trainer_info
    result["inventory"] = inventory
    result["steps"] = steps
    result["train"] = {case["optimizer"]: measured}
    result["comparison"] = compare(case, measured, calls)
    result["notes"] = notes
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        pass
    return result


def non_fsdp_blocks(stream, name, st) -> List[dict]:
    """Blocks of the step allocated outside FSDP scopes and outside forward/backward (the Trainer's
    own: batch, num_items_in_batch, loss scaling, clipping, scheduler ...), with lifetime."""
    evs = [e for e in stream if e["segment"] == name]
    open_ = {}
    rows = []
    for i, e in enumerate(evs):
        if e["bytes"] > 0:
            r = {"bytes": e["bytes"], "alloc": {"i": i, "phase": e["phase"], "op": e["op"], "top": e["top"]}, "free": None}
            open_[e["ptr"]] = r
            rows.append(r)
        elif e["bytes"] < 0:
            r = open_.pop(e["ptr"], None)
            if r is None:
                r = {"bytes": -e["bytes"], "alloc": None, "free": None}
                rows.append(r)
            r["free"] = {"i": i, "phase": e["phase"], "op": e["op"]}
    skip = ("forward", "loss", "backward")
    keep = []
    for r in rows:
        ph = (r["alloc"] or r["free"] or {}).get("phase")
        if ph in skip:
            continue
        ai = r["alloc"]["i"] if r["alloc"] else -1
        fi = r["free"]["i"] if r["free"] else len(evs)
        r["liveAtPeak"] = ai <= st["peakIndex"] < fi
        keep.append(r)
    return keep[:120]


def small_live_at_peak(stream, name, st, live_before, batch_ptrs, model_ptrs, step) -> List[dict]:
    """Every block under 4 KiB live at the step's peak that is not a parameter, gradient, optimizer
    state or buffer (where the Trainer's own tensors are): when and where it was allocated, and its
    role.  Roles: the batches by index (the Trainer trains on batch N in step N; accelerate's
    DataLoaderShard has already fetched batch N + 1), num_items_in_batch; the others are named from
    where they were allocated (read off the sources: trainer.py _run_epoch / training_step,
    accelerator.py backward)."""
    evs = [e for e in stream if e["segment"] == name]
    live = {p: e for p, e in live_before.items()}
    for e in evs[: st["peakIndex"] + 1]:
        if e["bytes"] > 0:
            live[e["ptr"]] = e
        elif e["bytes"] < 0:
            live.pop(e["ptr"], None)
    roles = {}
    for i, b in enumerate(batch_ptrs):
        for p, r in b.items():
            roles[p] = (r, i + 1)
    prev = f"step{step - 1}"
    rows = []
    for p, e in live.items():
        if e["bytes"] >= 4096 or p in model_ptrs:
            continue
        role, extra = None, None
        if p in roles and e["phase"] == "fetch":  # batches are made in fetch (a freed batch's address may be reused later)
            r, n = roles[p]
            role = f"{r} (batch {n})"
            if r == "batch.input_ids" and n == step:
                extra = False  # the plain loop's input
            elif r == "num_items_in_batch" or n == step + 1 or r == "batch.labels":
                extra = True
        elif e["segment"] == "train-setup" and e["op"] == "aten::empty" and e["bytes"] <= 8 and e["top"] == "aten::empty":
            role, extra = "Trainer._tr_loss accumulator (torch.tensor(0.0), _inner_training_loop)", True
        elif e["segment"] == "train-setup" and e["op"] == "aten::resize_":
            role, extra = "DeviceMesh of a fully_shard(mesh=None) call (also in the plain loop)", False
        elif e["segment"] == prev and e["phase"] in ("loss", "forward-end"):
            role, extra = "previous step's loss (tr_loss_step = loss.detach(), held by _run_epoch until reassigned)", True
        elif e["segment"] == prev and e["phase"] == "clip":
            role, extra = "previous step's total grad norm tensor (grad_norm, held by _run_epoch until reassigned)", True
        elif e["segment"] == name and e["phase"] == "backward" and e["op"] == "aten::div" and e["top"] == "aten::div":
            role, extra = "accelerator.backward: loss = loss / gradient_accumulation_steps (a new tensor, live through backward)", True
        elif e["segment"] == name and e["phase"] in ("loss", "forward-end"):
            role, extra = "this step's loss (bf16: FSDP's cast_forward_outputs copy; the plain loop has the same)", False
        elif e["segment"] == name and e["phase"] == "backward" and e["top"] == "aten::ones_like":
            role, extra = "backward's grad seed (ones_like(loss); also in the plain loop)", False
        elif e["segment"] == name and e["phase"] in ("forward", "backward"):
            role, extra = "forward/backward block (also in the plain loop)", False
        rows.append({"bytes": e["bytes"], "segment": e["segment"], "phase": e["phase"], "op": e["op"], "top": e["top"], "scope": e.get("scope"), "role": role, "trainerOnly": extra})
    return rows


def compare(case: dict, measured: dict, calls: list) -> dict:
    ref_id = case.get("compareWith")
    path = os.path.join(ROOT, PLAIN_DIR, f"{ref_id}.json")
    if not ref_id or not os.path.exists(path):
        return {"compareWith": ref_id, "available": False}
    with open(path) as f:
        ref = json.load(f)
    r = next(iter(ref["train"].values()))
    keys = ("paramBytes", "gradBytes", "optimizerStateBytes", "bufferBytes", "baselineBytes", "allocatedBeforeStep", "livePeakBytes", "allocatorPeakBytes", "liveEndBytes")
    figures = {k: {"plainLoop": r.get(k), "trainer": measured.get(k), "diff": (measured.get(k) or 0) - (r.get(k) or 0)} for k in keys}
    figures["input"] = {"plainLoop": r.get("inputBytes", 0) + r.get("targetBytes", 0), "trainer": measured.get("batchBytes"), "diff": measured.get("batchBytes", 0) - r.get("inputBytes", 0) - r.get("targetBytes", 0)}
    phases = {}
    for ph in sorted(set(r["phases"]) | set(measured["phases"])):
        a, b = r["phases"].get(ph), measured["phases"].get(ph)
        phases[ph] = {
            "plainLoop": None if a is None else {k: a[k] for k in ("allocated", "freed", "events")},
            "trainer": None if b is None else {k: b[k] for k in ("allocated", "freed", "events")},
        }
    extra = [r for r in measured.get("smallLiveAtPeak", []) if r.get("trainerOnly")]
    unknown = [r for r in measured.get("smallLiveAtPeak", []) if r.get("trainerOnly") is None]
    diff = measured["allocatorPeakBytes"] - r["allocatorPeakBytes"]
    explained = {
        "allocatorPeakDiff": diff,
        "trainerOnlyBlocksAtPeak": [{"bytes": x["bytes"], "role": x["role"]} for x in extra],
        "trainerOnlyBytes": sum(x["bytes"] for x in extra),
        "unlabelledSmallBlocksAtPeak": unknown,
        "closes": sum(x["bytes"] for x in extra) == diff and not unknown,
        "note": "allocatorPeakBytes = every block live before the step + the step's highest delta (both runs count the same DeviceMesh blocks); the in-step forward/backward/FSDP blocks live at the peak are the same in both runs (peakComposition)",
    }
    keyf = lambda c: {k: c.get(k) for k in ("modules", "classes", "reshardAfterForward", "mpPolicy", "offloadPolicy", "mesh", "params")}  # noqa: E731
    ref_calls = ((ref.get("fsdp") or {}).get("accelerate") or {}).get("fullyShardCalls") or []
    return {
        "compareWith": ref_id,
        "available": True,
        "fullyShardCallsSameAsPlainLoop": [keyf(c) for c in calls] == [keyf(c) for c in ref_calls],
        "optimizerStepPhaseAbsoluteMax": {
            "plainLoop": r["allocatedBeforeStep"] + r["phases"]["step"]["maxCumulative"],
            "trainer": measured["allocatedBeforeStep"] + measured["phases"]["step"]["maxCumulative"],
            "note": "not the step's peak (that is in backward in both); the optimizer step's transient differs by more than the Trainer's small tensors where Trainer.create_optimizer's two param groups (weight decay / no decay: norms and biases last) change the order _single_tensor_adam visits the parameters: each parameter's denom lives until the next parameter's exp_avg_sq.sqrt(), so the transient is max over consecutive parameters (a, b) of 2*size(b) + size(a); untied Llama: the plain loop (one group, model order) has model.norm (128 B) before lm_head, the Trainer layers.1.mlp.down_proj (16 KiB): +16256 B; tied Qwen2: no change beyond the small tensors",
        },
        "peakDifference": explained,
        "fixture": os.path.relpath(path, ROOT),
        "figures": figures,
        "livePeakAt": {"plainLoop": r.get("livePeakAt"), "trainer": measured.get("livePeakAt")},
        "peakComposition": {"plainLoop": r.get("peakComposition"), "trainer": measured.get("peakComposition")},
        "phases": phases,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=DEFAULT_CASES)
    ap.add_argument("--only", default=None)
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--traces", default=None, help="also write each measured step's allocation events to DIR/<id>.json")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child-out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    with open(args.cases) as f:
        cases = json.load(f)
    if args.child is not None:
        case = next(c for c in cases if c["id"] == args.child)
        try:
            res = run_child(case, args)
        except Exception as e:  # noqa: BLE001
            res = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        with open(args.child_out, "w") as f:
            json.dump(res, f)
        return 0
    sys.path.insert(0, HERE)
    import fsdp2_cpu as f2

    if args.only:
        want = [s.strip() for s in args.only.split(",") if s.strip()]
        cases = [c for c in cases if c["id"] in want]
    os.makedirs(args.out, exist_ok=True)
    failed = 0
    tmp = tempfile.mkdtemp(prefix="trainer_fsdp2_cpu_")
    for case in cases:
        t0 = time.time()
        out = os.path.join(tmp, f"{case['id']}.json")
        cmd = [sys.executable, os.path.abspath(__file__), "--cases", args.cases, "--child", case["id"], "--child-out", out]
        if args.traces:
            cmd += ["--traces", args.traces]
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONWARNINGS="ignore")
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if os.path.exists(out):
            with open(out) as f:
                res = json.load(f)
        else:
            res = {"error": f"child exited with {p.returncode}", "stderr": p.stdout[-4000:]}
        extra = "" if args.cases == DEFAULT_CASES else f" --cases {args.cases}"
        extra += "" if args.out == DEFAULT_OUT else f" --out {args.out}"
        res["command"] = f"/tmp/trl/bin/python tools/oracle/trainer_fsdp2_cpu.py{extra} --only {case['id']}"
        order = ["id", "case", "generatedBy", "command", "env", "error", "traceback", "stderr"]
        res = OrderedDict(sorted(res.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))
        with open(os.path.join(args.out, f"{case['id']}.json"), "w") as f:
            f.write(f2.dump_fixture(res))
        if "error" in res:
            failed += 1
            print(f"{case['id']}: ERROR {res['error']}\n{res.get('traceback') or res.get('stderr')}", flush=True)
        else:
            tr = next(iter(res["train"].values()))
            cmp_ = res["comparison"]
            ref = cmp_["figures"]["livePeakBytes"]["plainLoop"] if cmp_.get("available") else None
            print(f"{case['id']}: livePeak {tr['livePeakBytes']} (plain {ref}) allocatorPeak {tr['allocatorPeakBytes']} baseline {tr['baselineBytes']} "
                  f"unattributed {tr['unattributedBytes']} steady {tr['steadyCheck']['same']} ({time.time() - t0:.1f} s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
