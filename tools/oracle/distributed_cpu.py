#!/usr/bin/python3
"""Per-rank memory of data-parallel training, measured on real PyTorch 1.13 (CPU, fp32).

One process runs rank R of a world of W: a fake process group written here in Python stands
in for the other W-1 ranks (every collective completes at once; all-gather copies the input
into every output, all-reduce and broadcast leave the tensors as they are, in place).  DDP's
Reducer, its buckets, ``no_sync`` and ``torch.distributed.optim.ZeroRedundancyOptimizer`` run
unmodified on top of it, so the allocator sees what rank R of a real run allocates, less what
a real backend (gloo, NCCL) allocates outside PyTorch's allocator.  All ranks get the same data.

Run from the repository root (40 to 75 s for the 20 cases on the 2-core box):

    /usr/bin/python3 tools/oracle/distributed_cpu.py [--cases tools/oracle/cases/distributed-cpu.json]
                                                     [--only ID,...] [--out test/fixtures/distributed-cpu]

Each case runs in a fresh child process (one process group per process) and writes
<out>/<id>.json; a case that fails writes its ``error`` and ``traceback`` instead and the run
exits 1.  The measurement follows tools/oracle/oracle.py, whose helpers it imports: CPU
allocator events of torch.profiler(profile_memory=True), one thread, seed 0 for the model, 1
for the input, 2 for the target, the "sequential" layer language (layers.py), and the same
training step: zero_grad(set_to_none=True), ``loss = F.cross_entropy(ddp(x), y)`` keeping only
the loss, backward, optimizer step, ``del loss``.  Unlike oracle.py one profiler session covers
the whole program from the model build on, so every free is seen and every step is measured:
step 1 (first iteration: one DDP bucket of everything, optimizer state created), step 2 (DDP
rebuilds its buckets at the start of forward), step 3 (the steady step reported under
``train``) and step 4 (``steadyCheck``: same figures as step 3).  Phase markers use
``aten::is_set_to`` instead of oracle.py's ``aten::_has_compatible_shallow_copy_type``, which the
``Tensor.data`` setter also calls (ZeroRedundancyOptimizer's parameters_as_bucket_view).

Case fields: ``id``, ``model`` ("sequential"), ``layers``, ``input`` (this rank's batch),
``mode``, ``world``, ``rank``, ``optimizer`` (sgd | sgd_momentum | adam | adamw: oracle.py's, all
``foreach=False``), ``ddp`` {``gradientAsBucketView`` (false), ``bucketCapMb`` (25),
``broadcastBuffers`` (true), ``findUnusedParameters`` (false)}, optional ``zero``
{``parametersAsBucketView`` (false)}: ZeroRedundancyOptimizer(optimizer_class=<optimizer>) over
DDP's parameters, optional ``microBatches`` (2: the first forward+backward inside
``ddp.no_sync()``, same input), optional ``zeroGradSetToNone`` (true).

Fixture fields (bytes throughout):

* ``paramTable``: parameters in registration order (= DDP's parameter order, ZeRO's indices).
* ``train.<optimizer>`` = ``steps.step3``; every ``steps.stepN`` has the components live before
  the step, read from the objects: ``paramBytes``, ``bufferBytes``, ``gradBytes`` (distinct
  storages of the ``.grad`` tensors; with bucket views these are the buckets themselves),
  ``gradsAreBucketViews``, ``ddpBucketBytes`` (the Reducer's buckets, from its bucket table),
  ``ddpOtherBytes`` (other blocks DDP holds: find_unused_parameters' used maps),
  ``optimizerStateBytes`` and ``optimizerStepTensorBytes`` (this rank's: ZeRO's local optimizer),
  ``inputBytes``, ``targetBytes``; ``baselineBytes`` = their sum, storages counted once;
  ``allocatedBeforeStep`` (what the allocator stream says is live) and ``unattributedBytes``
  (the difference; 0 in every case).  Then, as in oracle.py: ``livePeakBytes`` = baseline + the
  highest live-bytes delta of the step, ``liveEndBytes``, ``livePeakAt``, ``phases`` (per phase:
  allocated, freed, events, maxCumulative relative to the step's start; micro-batches are
  ``forward@1``, ``loss@1``, ``backward@1`` ...), ``peakBytes``/``endBytes`` (oracle.py's
  reference method: frees of blocks allocated before the step left out),
  ``allocatorPeakBytes``.  Also ``collectives`` (calls and
  bytes per collective during the step) and ``bucketsAfterStep``.
* ``ddp``: ``options``; ``construction`` (``allocatedBytes``: net allocation of the DDP
  constructor, ``peakDelta``, the blocks still live after it by op, every event, collectives);
  ``bucketsAtConstruction`` and ``bucketsSteady`` (the Reducer's buckets in all-reduce order:
  parameter indices, numel, bytes, dtype); ``loggingData`` (DDP's own bucket sizes).
* ``zero`` (ZeRO cases): ``partition`` (parameter indices per rank, in assignment order, and
  numel), ``ruleReproduced`` (greedy_partition below gives the same), ``thisRankParams``,
  ``construction``, ``paramBuckets`` (parameters_as_bucket_view), ``stateBytesThisRank``.
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
from typing import Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.futures import Future  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import oracle  # noqa: E402

DEFAULT_CASES = os.path.join("tools", "oracle", "cases", "distributed-cpu.json")
DEFAULT_OUT = os.path.join("test", "fixtures", "distributed-cpu")
STEPS = 4  # step 1: first iteration; step 2: DDP rebuilds its buckets; steps 3 and 4: steady
MEASURED_STEP = 3

# --------------------------------------------------------------------------------------------
# the fake process group
# --------------------------------------------------------------------------------------------

COLLECTIVES: List[dict] = []  # every collective called, with the segment it ran in
SEGMENT = {"name": "setup"}


def _done(result) -> "dist._Work":
    fut = Future()
    fut.set_result(result)
    return torch._C._distributed_c10d._create_work_from_future(fut)


def _log(op: str, tensors) -> None:
    COLLECTIVES.append(
        {
            "segment": SEGMENT["name"],
            "op": op,
            "bytes": [int(t.numel() * t.element_size()) for t in tensors],
        }
    )


class FakeProcessGroup(dist.ProcessGroup):
    """Rank ``rank`` of ``world`` ranks, in one process, with no peers.

    Every work is already complete.  all-reduce and broadcast return their tensors untouched
    (in place, as gloo and NCCL do: DDP's Reducer reads the bucket back from the future's
    value, which must be the same tensor); all-gather copies the input into every output
    (DDP checks parameter shapes by gathering them); nothing else allocates.
    """

    def __init__(self, rank: int, world: int):
        super().__init__(rank, world)
        self._rank = rank
        self._world = world

    def size(self) -> int:
        return self._world

    def rank(self) -> int:
        return self._rank

    def getBackendName(self) -> str:
        return "fake"

    def allreduce(self, tensors, opts=None):
        _log("allreduce", tensors)
        return _done(tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        _log("allreduce_coalesced", tensors)
        return _done(tensors)

    def broadcast(self, tensors, opts=None):
        _log("broadcast", tensors)
        return _done(tensors)

    def allgather(self, outputs, inputs, opts=None):
        _log("allgather", inputs)
        for outs, inp in zip(outputs, inputs):
            for o in outs:
                o.copy_(inp)
        return _done(outputs)

    def reduce_scatter(self, outputs, inputs, opts=None):
        _log("reduce_scatter", outputs)
        for out, ins in zip(outputs, inputs):
            out.copy_(ins[self._rank])
        return _done(outputs)

    def barrier(self, opts=None):
        _log("barrier", [])
        return _done([])


def init_fake_world(world: int, rank: int) -> None:
    """``init_process_group("fake")`` for rank ``rank`` of ``world``, without waiting for peers.

    init_process_group ends in ``_store_based_barrier``, which waits until ``world`` ranks have
    added 1 to the key ``store_based_barrier_key:1``; the other ``world - 1`` are added here.
    """
    store = dist.HashStore()
    store.add(f"{dist.distributed_c10d.STORE_BASED_BARRIER_PREFIX}:1", world - 1)
    dist.Backend.register_backend("fake", lambda store, rank, world, timeout: FakeProcessGroup(rank, world))
    dist.init_process_group("fake", store=store, rank=rank, world_size=world)
    assert dist.get_rank() == rank and dist.get_world_size() == world


# --------------------------------------------------------------------------------------------
# building a case
# --------------------------------------------------------------------------------------------


def optimizer_kwargs(name: str) -> Tuple[type, dict]:
    """The oracle's optimizer names (oracle.make_optimizer) as a class and its arguments."""
    if name == "sgd":
        return torch.optim.SGD, {"lr": 0.01, "foreach": False}
    if name == "sgd_momentum":
        return torch.optim.SGD, {"lr": 0.01, "momentum": 0.9, "foreach": False}
    if name == "adam":
        return torch.optim.Adam, {"lr": 1e-3, "foreach": False}
    if name == "adamw":
        return torch.optim.AdamW, {"lr": 1e-3, "foreach": False}
    raise ValueError(f"unknown optimizer {name!r}")


def make_ddp(case: dict, model: torch.nn.Module) -> torch.nn.parallel.DistributedDataParallel:
    o = case.get("ddp", {})
    return torch.nn.parallel.DistributedDataParallel(
        model,
        bucket_cap_mb=o.get("bucketCapMb", 25),
        gradient_as_bucket_view=o.get("gradientAsBucketView", False),
        broadcast_buffers=o.get("broadcastBuffers", True),
        find_unused_parameters=o.get("findUnusedParameters", False),
    )


def make_opt(case: dict, params: list):
    cls, kw = optimizer_kwargs(case["optimizer"])
    z = case.get("zero")
    if z is None:
        return cls(params, **kw)
    from torch.distributed.optim import ZeroRedundancyOptimizer

    return ZeroRedundancyOptimizer(
        params,
        optimizer_class=cls,
        parameters_as_bucket_view=z.get("parametersAsBucketView", False),
        **kw,
    )


def local_optimizer(opt):
    """The optimizer whose ``state`` holds this rank's tensors (ZeRO: ``opt.optim``)."""
    return getattr(opt, "optim", opt)


# --------------------------------------------------------------------------------------------
# the training step
# --------------------------------------------------------------------------------------------


class _Marks(oracle.Marks):
    """oracle.py's phase markers, on another no-allocation aten op.

    oracle.py marks with ``aten::_has_compatible_shallow_copy_type``, which the ``Tensor.data``
    setter also calls; ZeroRedundancyOptimizer(parameters_as_bucket_view=True) sets
    ``param.data`` for every parameter, which would shift every label after it.  Nothing in
    torch 1.13 outside its tests calls ``aten::is_set_to``.
    """

    suffix = ""  # the micro-batch of the phase names (oracle.run_forward marks "loss" itself)

    def mark(self, kind: str, value: str) -> None:
        if self.enabled:
            if kind == "phase" and value == "loss":
                value += self.suffix
            self.labels.append((kind, value))
            _MARK_TENSOR.is_set_to(_MARK_TENSOR)


_MARK_TENSOR = torch.zeros(1)
oracle.MARK_OP = "aten::is_set_to"
oracle.MARKS = _Marks()  # oracle.run_forward marks the loss phase through oracle.MARKS


def mark(kind: str, value: str) -> None:
    oracle.MARKS.mark(kind, value)


def segment(name: str) -> None:
    SEGMENT["name"] = name
    mark("segment", name)


def train_step(case: dict, ddp, opt, x, y) -> None:
    """oracle._train_step through DDP: zero_grad(set_to_none), forward, cross-entropy (only the
    loss is kept), backward, step, then the loss is dropped.  With ``microBatches`` 2 the first
    micro-batch runs forward and backward inside ``ddp.no_sync()``; its loss is dropped when the
    second forward rebinds ``loss``, as in the usual loop."""
    n = case.get("microBatches", 1)
    mark("phase", "zero_grad")
    opt.zero_grad(set_to_none=case.get("zeroGradSetToNone", True))
    loss = None
    for i in range(n):
        suffix = "" if n == 1 else f"@{i + 1}"
        oracle.MARKS.suffix = suffix
        with (ddp.no_sync() if i < n - 1 else oracle._NullMode()):
            mark("phase", "forward" + suffix)
            loss, out = oracle.run_forward(case, ddp, x, y, with_loss=True)
            del out
            mark("phase", "backward" + suffix)
            loss.backward()
    mark("phase", "step")
    opt.step()
    mark("phase", "cleanup")
    del loss
    mark("phase", "end")


# --------------------------------------------------------------------------------------------
# reading the event stream
# --------------------------------------------------------------------------------------------


def read_stream(prof) -> List[dict]:
    """Allocation events in time order, each with its segment, phase, op, top op and ptr."""
    events = oracle.profiler_events(prof)
    labels = MARK_LABELS
    out = []
    li = 0
    seg, phase = "setup", "setup"
    phase_stack = ["setup"]
    for kind, _t, _i, n in events:
        if kind == "mark":
            if li >= len(labels):
                raise RuntimeError("more marker ops in the profiler's events than marks made")
            k, v = labels[li]
            li += 1
            if k == "segment":
                seg, phase_stack = v, ["setup"]
            elif k == "phase":
                phase_stack = [v]
            elif k == "phase-push":
                phase_stack.append(v)
            elif k == "phase-pop" and len(phase_stack) > 1:
                phase_stack.pop()
            continue
        anc = oracle._ancestry(n)
        ev = {
            "segment": seg,
            "phase": phase_stack[-1],
            "op": anc[0] if anc else None,
            "top": anc[-1] if anc else None,
            "bytes": int(n.extra_fields.alloc_size),
            "ptr": int(n.extra_fields.ptr),
        }
        out.append(ev)
    if li != len(labels):
        raise RuntimeError(f"{len(labels) - li} of {len(labels)} marks not found in the profiler's events")
    return out


MARK_LABELS: List[Tuple[str, str]] = []


def segment_stats(stream: List[dict], name: str, base_live: int) -> dict:
    """Figures of one segment of the stream.  ``base_live``: allocator bytes live before it
    (the cumulative delta of everything earlier in the session)."""
    evs = [e for e in stream if e["segment"] == name]
    live_ptrs: Dict[int, str] = {}
    for e in stream:
        if e["segment"] == name:
            break
        if e["bytes"] > 0:
            live_ptrs[e["ptr"]] = e["segment"]
        elif e["bytes"] < 0:
            live_ptrs.pop(e["ptr"], None)
    allocated_before = set(live_ptrs)
    c = 0
    mx = 0
    peak_at = None
    ref_c = 0
    ref_mx = 0
    unseen = 0
    phases: "OrderedDict[str, dict]" = OrderedDict()
    alloc_op: Dict[int, str] = {}
    freed_before = 0
    for e in evs:
        d = e["bytes"]
        c += d
        before = d < 0 and e["ptr"] in allocated_before and e["ptr"] not in alloc_op
        if before:
            freed_before += -d
            allocated_before.discard(e["ptr"])
        else:
            ref_c += d
            if ref_c > ref_mx:
                ref_mx = ref_c
        if d > 0:
            alloc_op[e["ptr"]] = e["op"]
        elif d < 0:
            alloc_op.pop(e["ptr"], None)
        if c > mx:
            mx = c
            peak_at = {k: e[k] for k in ("phase", "op", "top") if e.get(k) is not None}
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
        "refMaxDelta": ref_mx,
        "refEndDelta": ref_c,
        "freedBlocksFromBeforeBytes": freed_before,
        "allocatedBefore": base_live,
        "allocatorPeak": base_live + mx,
        "allocatorEnd": base_live + c,
        "peakAt": peak_at,
        "phases": phases,
    }


def live_before(stream: List[dict], name: str) -> int:
    total = 0
    for e in stream:
        if e["segment"] == name:
            return total
        total += e["bytes"]
    return total


def ops_summary(stream: List[dict], name: str) -> List[dict]:
    """The allocations of a segment that are still live at its end, grouped by op."""
    live: Dict[int, dict] = {}
    for e in stream:
        if e["segment"] != name:
            continue
        if e["bytes"] > 0:
            live[e["ptr"]] = e
        elif e["bytes"] < 0:
            live.pop(e["ptr"], None)
    rows: "OrderedDict[Tuple, dict]" = OrderedDict()
    for e in live.values():
        key = (e["op"], e["top"])
        r = rows.setdefault(key, {"op": e["op"], "top": e["top"], "blocks": [], "bytes": 0})
        r["blocks"].append(e["bytes"])
        r["bytes"] += e["bytes"]
    return list(rows.values())


def transient_events(stream: List[dict], name: str) -> List[dict]:
    """Every event of a (short) segment, without pointers."""
    return [{k: e[k] for k in ("phase", "op", "top", "bytes")} for e in stream if e["segment"] == name]


# --------------------------------------------------------------------------------------------
# one case (child process)
# --------------------------------------------------------------------------------------------


def param_table(model) -> List[dict]:
    rows = []
    for i, (name, p) in enumerate(model.named_parameters()):
        rows.append({"index": i, "name": name, "shape": list(p.shape), "numel": p.numel(), "bytes": p.numel() * p.element_size()})
    return rows


def bucket_table(ddp, params) -> List[dict]:
    """DDP's buckets as the Reducer holds them now, in the Reducer's order (the order the
    all-reduces are launched): param indices (registration order) and bytes."""
    index = {id(p): i for i, p in enumerate(params)}
    rows = []
    for b in ddp.reducer._get_zeros_like_grad_buckets():
        buf = b.buffer()
        rows.append(
            {
                "index": b.index(),
                "params": [index[id(p)] for p in b.parameters()],
                "numel": buf.numel(),
                "bytes": buf.numel() * buf.element_size(),
                "dtype": oracle.dtype_name(buf.dtype),
            }
        )
    return rows


def greedy_partition(numels: List[int], world: int) -> List[List[int]]:
    """The rule of ZeroRedundancyOptimizer._partition_parameters (torch 1.13), written out:
    parameters sorted by numel, largest first, with Python's stable sort (ties keep the
    parameter-group order); each goes to the rank holding the fewest elements so far, the
    lowest rank on a tie (``_get_min_index``: strict ``<``).  Returns indices per rank in
    assignment order."""
    order = sorted(range(len(numels)), key=lambda i: numels[i], reverse=True)
    sizes = [0] * world
    out: List[List[int]] = [[] for _ in range(world)]
    for i in order:
        r = min(range(world), key=lambda k: (sizes[k], k))
        out[r].append(i)
        sizes[r] += numels[i]
    return out


def zero_info(opt, params) -> dict:
    index = {id(p): i for i, p in enumerate(params)}
    parts = opt._partition_parameters()
    per_rank = []
    for r, groups in enumerate(parts):
        ps = [p for g in groups for p in g["params"]]
        per_rank.append(
            {
                "rank": r,
                "params": [index[id(p)] for p in ps],
                "numel": sum(p.numel() for p in ps),
            }
        )
    local = [index[id(p)] for g in opt.optim.param_groups for p in g["params"]]
    predicted = greedy_partition([p.numel() for p in params], len(parts))
    return {
        "rule": "sorted by numel, largest first (stable: ties keep registration order); each goes to the rank with the smallest numel so far (ties: lowest rank)",
        "partition": per_rank,
        "ruleReproduced": predicted == [r["params"] for r in per_rank],
        "thisRankParams": local,
        "parametersAsBucketView": bool(opt.parameters_as_bucket_view),
        "paramBuckets": [[int(b.numel() * b.element_size()) for b in dev] for dev in opt._buckets],
    }


def components(ddp, opt, params, x, y) -> dict:
    """What is live before a step, read without allocating.  The grads' storages are kept
    (``_gradStorages``) to be told apart from DDP's buckets once the event stream is read."""
    model = ddp.module
    lo = local_optimizer(opt)
    grads = [p.grad for p in params if p.grad is not None]
    grad_storages = {}
    for g in grads:
        ptr, nbytes = oracle.storage_key(g)
        if nbytes:
            grad_storages[ptr] = nbytes
    state_tensors = [v for s in lo.state.values() for v in s.values() if torch.is_tensor(v)]
    step_tensors = [v for s in lo.state.values() for k, v in s.items() if k == "step" and torch.is_tensor(v)]
    return {
        "paramBytes": sum(p.numel() * p.element_size() for p in params),
        "paramStorageBytes": oracle.unique_storage_bytes(params),
        "bufferBytes": sum(b.numel() * b.element_size() for b in model.buffers()),
        "gradBytes": sum(grad_storages.values()),
        "gradTensors": len(grads),
        "optimizerStateBytes": oracle.unique_storage_bytes(state_tensors),
        "optimizerStepTensorBytes": oracle.unique_storage_bytes(step_tensors),
        "optimizerStateParams": len(lo.state),
        "inputBytes": x.numel() * x.element_size(),
        "targetBytes": 0 if oracle.storage_key(y)[0] == oracle.storage_key(x)[0] else y.numel() * y.element_size(),
        "_gradStorages": grad_storages,
    }


def live_blocks_before(stream: List[dict], name: str) -> Dict[int, dict]:
    """Blocks live when segment ``name`` starts: ptr -> the event that allocated it."""
    live: Dict[int, dict] = {}
    for e in stream:
        if e["segment"] == name:
            break
        if e["bytes"] > 0:
            live[e["ptr"]] = e
        elif e["bytes"] < 0:
            live.pop(e["ptr"], None)
    return live


def ddp_held(live: Dict[int, dict]) -> Dict[int, int]:
    """The live blocks DDP's Reducer holds: allocated while DDP was built, or in a forward (the
    bucket rebuild of the second iteration runs at the start of DDP's forward; nothing else a
    forward allocates outlives the step)."""
    return {
        ptr: e["bytes"]
        for ptr, e in live.items()
        if e["segment"] == "ddp" or (e["segment"].startswith("step") and e["phase"].startswith("forward"))
    }


def finish_components(c: dict, live: Dict[int, dict], bucket_bytes: int) -> dict:
    """``bucket_bytes``: the Reducer's buckets as its bucket table gives them; what else DDP
    holds (find_unused_parameters' used-parameter maps) is ``ddpOtherBytes``."""
    held = ddp_held(live)
    grads = c.pop("_gradStorages")
    outside = sum(n for ptr, n in grads.items() if ptr not in held)
    views = bool(grads) and all(ptr in held for ptr in grads)
    out = OrderedDict(c)
    out["gradsAreBucketViews"] = views
    out["ddpBucketBytes"] = bucket_bytes
    out["ddpOtherBytes"] = sum(held.values()) - bucket_bytes
    out["baselineBytes"] = (
        max(c["paramBytes"], c["paramStorageBytes"])
        + c["bufferBytes"]
        + sum(held.values())
        + outside
        + c["optimizerStateBytes"]
        + c["inputBytes"]
        + c["targetBytes"]
    )
    return out


def run_child(case: dict, gloo: "Optional[Tuple[int, int]]" = None) -> dict:
    """Measures ``case``.  ``gloo`` = (rank, port): instead of the fake group, rank ``rank`` of a
    real multi-process gloo group on 127.0.0.1:port (the cross-check of --check-gloo)."""
    torch.set_num_threads(oracle.THREADS)
    torch.manual_seed(0)
    world, rank = case["world"], case["rank"]
    if gloo is None:
        init_fake_world(world, rank)
    else:
        rank = gloo[0]
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{gloo[1]}", rank=rank, world_size=world)

    oracle.MARKS.labels = MARK_LABELS
    oracle.MARKS.enabled = True
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        segment("build")
        model = oracle.build_model(case)
        x, y = oracle.make_inputs(case, model)
        oracle.set_mode(model, case)
        params = oracle.unique_params(model)
        segment("ddp")
        ddp = make_ddp(case, model)
        segment("introspect-ddp")
        buckets_at_construction = bucket_table(ddp, params)
        segment("optimizer")
        opt = make_opt(case, params)
        segment("introspect-optimizer")
        zero = zero_info(opt, params) if case.get("zero") is not None else None
        comps = {}
        buckets_after = {}
        for s in range(1, STEPS + 1):
            segment(f"step{s}")
            comps[s] = components(ddp, opt, params, x, y)  # allocates nothing
            train_step(case, ddp, opt, x, y)
            segment(f"introspect-after-step{s}")
            buckets_after[s] = bucket_table(ddp, params)
        segment("end")
        oracle.MARKS.enabled = False
    stream = read_stream(prof)
    del prof
    leaks = {}
    for e in stream:
        if e["segment"].startswith("introspect"):
            leaks[e["segment"]] = leaks.get(e["segment"], 0) + e["bytes"]
    leaks = {k: v for k, v in leaks.items() if v != 0}
    if leaks:
        raise RuntimeError(f"introspection left blocks allocated: {leaks}")

    def rows_of(name):
        return ops_summary(stream, name)

    ddp_seg = segment_stats(stream, "ddp", live_before(stream, "ddp"))
    opt_seg = segment_stats(stream, "optimizer", live_before(stream, "optimizer"))
    steps = OrderedDict()
    for s in range(1, STEPS + 1):
        name = f"step{s}"
        st = segment_stats(stream, name, live_before(stream, name))
        table = buckets_at_construction if s == 1 else buckets_after[s - 1]
        c = finish_components(comps[s], live_blocks_before(stream, name), sum(b["bytes"] for b in table))
        steps[name] = OrderedDict(
            list(c.items())
            + [
                ("unattributedBytes", st["allocatedBefore"] - c["baselineBytes"]),
                ("peakBytes", c["baselineBytes"] + st["refMaxDelta"]),
                ("endBytes", c["baselineBytes"] + st["refEndDelta"]),
                ("livePeakBytes", c["baselineBytes"] + st["maxDelta"]),
                ("liveEndBytes", c["baselineBytes"] + st["endDelta"]),
                ("freedBlocksFromBeforeStepBytes", st["freedBlocksFromBeforeBytes"]),
                ("allocatedBeforeStep", st["allocatedBefore"]),
                ("allocatorPeakBytes", st["allocatorPeak"]),
                ("allocatorEndBytes", st["allocatorEnd"]),
                ("livePeakAt", st["peakAt"]),
                ("events", st["events"]),
                ("phases", st["phases"]),
                ("collectives", summarize_collectives(name)),
                ("bucketsAfterStep", [b["bytes"] for b in buckets_after[s]]),
            ]
        )
    lo = local_optimizer(opt)
    measured = OrderedDict(steps[f"step{MEASURED_STEP}"])
    measured["optimizer"] = {
        "class": type(opt).__name__,
        "localClass": type(lo).__name__,
        "defaults": oracle.json_safe(lo.defaults),
    }
    measured["steadyCheck"] = {
        "step": STEPS,
        "livePeakBytes": steps[f"step{STEPS}"]["livePeakBytes"],
        "same": steps[f"step{STEPS}"]["livePeakBytes"] == measured["livePeakBytes"]
        and steps[f"step{STEPS}"]["baselineBytes"] == measured["baselineBytes"],
    }

    ddp_info = OrderedDict()
    ddp_info["options"] = {
        "gradientAsBucketView": ddp.gradient_as_bucket_view,
        "bucketCapMb": case.get("ddp", {}).get("bucketCapMb", 25),
        "bucketBytesCap": ddp.bucket_bytes_cap,
        "firstBucketBytes": dist._DEFAULT_FIRST_BUCKET_BYTES,
        "broadcastBuffers": ddp.broadcast_buffers,
        "findUnusedParameters": ddp.find_unused_parameters,
    }
    ddp_info["construction"] = {
        "allocatedBytes": ddp_seg["endDelta"],
        "peakDelta": ddp_seg["maxDelta"],
        "liveAllocations": rows_of("ddp"),
        "events": transient_events(stream, "ddp"),
        "collectives": summarize_collectives("ddp"),
    }
    ddp_info["bucketsAtConstruction"] = buckets_at_construction
    ddp_info["bucketsSteady"] = buckets_after[MEASURED_STEP]
    ddp_info["bucketBytesAtConstruction"] = sum(b["bytes"] for b in buckets_at_construction)
    ddp_info["bucketBytesSteady"] = sum(b["bytes"] for b in buckets_after[MEASURED_STEP])
    log_data = ddp._get_ddp_logging_data()
    ddp_info["loggingData"] = {
        k: log_data[k] for k in ("bucket_sizes", "rebuilt_bucket_sizes", "rebuilt_per_bucket_size_limits", "has_rebuilt_buckets") if k in log_data
    }

    facts = oracle.static_facts(model)
    result = OrderedDict()
    result["id"] = case["id"]
    result["case"] = case
    result["generatedBy"] = "tools/oracle/distributed_cpu.py"
    result["env"] = dict(
        oracle.env_info(),
        processGroup="fake (tools/oracle/distributed_cpu.py FakeProcessGroup)" if gloo is None else "gloo (multi-process)",
    )
    result["world"] = world
    result["rank"] = rank
    result["params"] = facts["params"]
    result["paramTable"] = param_table(model)
    result["bufferElements"] = facts["bufferElements"]
    result["bufferBytes"] = facts["bufferBytes"]
    result["input"] = {"shape": list(x.shape), "dtype": oracle.dtype_name(x.dtype)}
    result["target"] = {"shape": list(y.shape), "dtype": oracle.dtype_name(y.dtype), "sameTensorAsInput": y is x}
    result["ddp"] = ddp_info
    if zero is not None:
        zero["construction"] = {
            "allocatedBytes": opt_seg["endDelta"],
            "peakDelta": opt_seg["maxDelta"],
            "liveAllocations": rows_of("optimizer"),
        }
        zero["stateBytesThisRank"] = measured["optimizerStateBytes"]
        zero["stateParamsThisRank"] = measured["optimizerStateParams"]
        result["zero"] = zero
    result["steps"] = steps
    result["train"] = {case["optimizer"]: measured}
    return result


def summarize_collectives(seg: str) -> List[dict]:
    rows: "OrderedDict[str, dict]" = OrderedDict()
    for c in COLLECTIVES:
        if c["segment"] != seg:
            continue
        r = rows.setdefault(c["op"], {"op": c["op"], "calls": 0, "bytes": 0})
        r["calls"] += 1
        r["bytes"] += sum(c["bytes"])
    return list(rows.values())


# --------------------------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------------------------


def command_for(args, cid: str) -> str:
    extra = ""
    if args.cases != DEFAULT_CASES:
        extra += f" --cases {args.cases}"
    if args.out != DEFAULT_OUT:
        extra += f" --out {args.out}"
    return f"/usr/bin/python3 tools/oracle/distributed_cpu.py{extra} --only {cid}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=DEFAULT_CASES)
    ap.add_argument("--only", default=None, help="comma-separated case ids")
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child-out", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--gloo-rank", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--gloo-port", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument(
        "--check-gloo",
        default=None,
        metavar="ID,...",
        help="run these cases as real multi-process gloo groups (every rank, 127.0.0.1) and compare "
        "the case's rank with its fixture in --out; writes no fixture",
    )
    args = ap.parse_args(argv)

    with open(args.cases) as f:
        cases = json.load(f)
    if isinstance(cases, dict):
        cases = cases["cases"]
    ids = [c["id"] for c in cases]
    if len(set(ids)) != len(ids):
        raise SystemExit("duplicate case ids in " + args.cases)

    if args.child is not None:
        case = next(c for c in cases if c["id"] == args.child)
        try:
            res = run_child(case, None if args.gloo_rank is None else (args.gloo_rank, args.gloo_port))
        except Exception as e:  # recorded in the fixture by the parent
            res = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        with open(args.child_out, "w") as f:
            json.dump(res, f)
        return 0

    if args.check_gloo:
        return check_gloo(args, cases, [s.strip() for s in args.check_gloo.split(",") if s.strip()])

    if args.only:
        want = [s.strip() for s in args.only.split(",") if s.strip()]
        missing = [w for w in want if w not in ids]
        if missing:
            raise SystemExit(f"unknown case ids: {missing}")
        cases = [c for c in cases if c["id"] in want]
    os.makedirs(args.out, exist_ok=True)
    t_all = time.time()
    failed = 0
    for case in cases:
        t0 = time.time()
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "out.json")
            proc = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--cases", args.cases, "--child", case["id"], "--child-out", out],
                capture_output=True,
                text=True,
            )
            if os.path.exists(out):
                with open(out) as f:
                    res = json.load(f)
            else:
                res = {"error": f"child exited with {proc.returncode}", "stderr": proc.stderr[-4000:]}
        if "error" in res:
            failed += 1
            res = OrderedDict([("id", case["id"]), ("case", case), ("generatedBy", "tools/oracle/distributed_cpu.py")] + list(res.items()))
        res["command"] = command_for(args, case["id"])
        # keep the key order of a normal fixture: command right after generatedBy
        res = OrderedDict(sorted(res.items(), key=lambda kv: KEY_ORDER.index(kv[0]) if kv[0] in KEY_ORDER else len(KEY_ORDER)))
        with open(os.path.join(args.out, f"{case['id']}.json"), "w") as f:
            json.dump(res, f, indent=1)
            f.write("\n")
        if "error" in res:
            oracle.log(f"{case['id']}: ERROR {res['error']} ({time.time() - t0:.1f} s)")
        else:
            tr = next(iter(res["train"].values()))
            oracle.log(
                f"{case['id']}: W={res['world']} r={res['rank']} baseline {tr['baselineBytes']} livePeak {tr['livePeakBytes']} "
                f"buckets {tr['ddpBucketBytes']} (construction +{res['ddp']['construction']['allocatedBytes']}) "
                f"state {tr['optimizerStateBytes']} unattributed {tr['unattributedBytes']} ({time.time() - t0:.1f} s)"
            )
    oracle.log(f"done: {len(cases)} cases, {failed} failed, in {time.time() - t_all:.1f} s")
    return 1 if failed else 0


# Compared by --check-gloo.  Allocations are made on the main thread (CPU autograd runs there
# too) and all show in the profiler's stream; a block whose last reference is dropped on one of
# gloo's worker threads (a Work holding a tensor) is freed there, and the profiler, which
# records on the threads it was started on, never sees that free.  So only figures made of
# allocations must match; figures that need every free (live bytes, peaks) are reported.
MUST_MATCH = ["gradBytes", "ddpBucketBytes", "optimizerStateBytes", "optimizerStepTensorBytes", "bucketsAfterStep"]
REPORTED = ["baselineBytes", "allocatedBeforeStep", "livePeakBytes"]


def check_gloo(args, cases: List[dict], want: List[str]) -> int:
    """Every rank of each case in its own process on a real gloo group (127.0.0.1); the case's
    own rank is compared with the fixture the fake group wrote (see MUST_MATCH)."""
    import socket

    by_id = {c["id"]: c for c in cases}
    bad = 0
    for cid in want:
        case = by_id[cid]
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        with tempfile.TemporaryDirectory() as tmp:
            procs = []
            for r in range(case["world"]):
                out = os.path.join(tmp, f"r{r}.json")
                cmd = [sys.executable, os.path.abspath(__file__), "--cases", args.cases, "--child", cid, "--child-out", out,
                       "--gloo-rank", str(r), "--gloo-port", str(port)]
                procs.append((r, out, subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)))
            results = {}
            for r, out, p in procs:
                _, err = p.communicate(timeout=300)
                if os.path.exists(out):
                    with open(out) as f:
                        results[r] = json.load(f)
                else:
                    results[r] = {"error": f"exit {p.returncode}: {err[-2000:]}"}
        with open(os.path.join(args.out, f"{cid}.json")) as f:
            fixture = json.load(f)
        mine = results[case["rank"]]
        if "error" in mine:
            oracle.log(f"{cid}: gloo rank {case['rank']} ERROR {mine['error']}")
            bad += 1
            continue
        diffs, notes = [], []
        for step, fs in fixture["steps"].items():
            gs = mine["steps"][step]
            for k in MUST_MATCH:
                if fs.get(k) != gs.get(k):
                    diffs.append(f"{step}.{k}: fake {fs.get(k)} gloo {gs.get(k)}")
            for ph, v in fs["phases"].items():
                g = gs["phases"].get(ph, {}).get("allocated")
                if v["allocated"] != g:
                    diffs.append(f"{step}.phases.{ph}.allocated: fake {v['allocated']} gloo {g}")
            if step == f"step{MEASURED_STEP}":
                for k in REPORTED:
                    if fs.get(k) != gs.get(k):
                        notes.append(f"{k} {gs.get(k) - fs.get(k):+d}")
        allocs = [e["bytes"] for e in fixture["ddp"]["construction"]["events"] if e["bytes"] > 0]
        g_allocs = [e["bytes"] for e in mine["ddp"]["construction"]["events"] if e["bytes"] > 0]
        if allocs != g_allocs:
            diffs.append(f"ddp construction allocations: fake {allocs} gloo {g_allocs}")
        if fixture.get("zero", {}).get("partition") != mine.get("zero", {}).get("partition"):
            diffs.append("zero.partition differs")
        bad += bool(diffs)
        opt = case["optimizer"]
        ranks = ", ".join(
            f"r{r} peak {res['train'][opt]['livePeakBytes']} state {res['train'][opt]['optimizerStateBytes']}"
            if "error" not in res else f"r{r} ERROR {res['error']}"
            for r, res in sorted(results.items())
        )
        verdict = "allocations as with the fake group" if not diffs else "DIFFERS: " + "; ".join(diffs)
        unseen = f" (step {MEASURED_STEP}, frees unseen on gloo threads: {', '.join(notes)})" if notes else ""
        oracle.log(f"{cid}: {verdict}{unseen} | gloo {ranks}")
    return 1 if bad else 0


KEY_ORDER = ["id", "case", "generatedBy", "command", "env", "world", "rank", "error", "traceback", "stderr"]

if __name__ == "__main__":
    sys.exit(main())
