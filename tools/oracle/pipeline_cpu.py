#!/usr/bin/env python3
"""Per-rank memory of pipeline parallelism (torch.distributed.pipelining), measured on real
PyTorch 2.13 (CPU) with a real gloo process group.

Unlike tools/oracle/fsdp2_cpu.py (one process on the fake group), every case here runs W real
processes (one per pipeline rank, one thread each) joined by ``init_process_group("gloo")`` on
127.0.0.1: the schedules' isend/irecv need a real peer.  Every rank measures itself and writes
its own figures; the parent merges them into one fixture per case.

Run from the repository root with PyTorch 2.13 (CPU build), e.g. the venv /tmp/t213:

    /tmp/t213/bin/python tools/oracle/pipeline_cpu.py [--cases tools/oracle/cases/pipeline-cpu.json]
        [--only ID,...] [--out test/fixtures/pipeline-cpu] [--traces DIR]
        [--transformers-src /work/hfenv/hf-4.40.2:/work/hfenv/stubs] [--hf-deps /usr/lib/python3/dist-packages]

Cases run one after the other (a case uses W processes).  A failing case writes ``error`` and the
run exits 1.

Model and split.  ``"model": "sequential"``: the full model is built on every rank exactly as
tools/oracle/oracle.py builds it (layers.py, seed 0; inputs at seeds 1/2), then cut at the
top-level layer indices ``split`` (``[4]`` -> layers [0,4) and [4,n)) into ``pp * virtual``
stage modules ``nn.Sequential(*layers[a:b])``; a rank keeps the stage modules it runs (stage ids
``rank`` and, interleaved, ``rank + pp``) and drops the rest (their parameters are freed in the
build segment).  ``"model": "hf"``: a transformers 4.40.2 causal LM (tools/oracle/hf_models.py)
split torchtitan-style, see ``hf_stage_wrappers``.  Each stage module is wrapped in
``PipelineStage(module, stage_id, num_stages, torch.device("cpu"))`` (no example args: dynamic
metadata inference on the first step).  The schedule (``ScheduleGPipe`` | ``Schedule1F1B`` |
``ScheduleInterleaved1F1B``) gets ``n_microbatches = m`` and ``loss_fn = cross_entropy(output,
target)`` (hf: logits and targets flattened over batch and sequence); the rank holding stage 0
calls ``schedule.step(x, ...)``, the rank holding the last stage ``step(target=y, losses=[])``,
others ``step()``; ``return_outputs`` is the case's ``returnOutputs`` (default True, torch's
default).  Then ``Adam(lr=1e-3)`` (torch defaults: foreach None, which on CPU resolves to the
for-loop implementation) steps the rank's own parameters, and ``zero_grad(set_to_none=True)``
frees the gradients.  The merged output (last stage, returnOutputs) and the losses list are
dropped right after ``step()`` returns.  A rank keeps ``x`` only if it runs stage 0 and ``y``
only if it runs the last stage.

Measurement (fsdp2_cpu.py's method).  The profiler (``profile_memory=True``) runs from before the
model is built (after the process group is up) to the end, so every free is of a block whose
allocation was seen; allocation events in time order, cumulated, give the live bytes.  Marks are
``aten::is_set_to`` calls on a 1-element tensor (an op that allocates nothing; their count is
checked).  Segments: build, stage (PipelineStage + schedule objects), optimizer, step1 ... step4;
step1 runs the schedule's lazy init (P2P warm-up vote, metadata inference, receive buffers),
step 3 is reported, step 4 is checked equal.  Inside a step every pipelining call of interest
is wrapped (on the instances, torch untouched) to set the phase label on entry and
``after:<label>`` on return:

  ``F<mb>.s<stage>`` forward_one_chunk, ``L<mb>`` the schedule's loss (``_maybe_compute_loss``
  on the last stage), ``B<mb>.s<stage>`` backward_one_chunk, ``sendF``/``sendB``/``recvF``/
  ``recvB<mb>.s<stage>`` get_*_ops (building the P2P ops: sendB pops the stage's bwd_cache),
  ``reduce_grad.s<stage>`` perform_reduce_grad (scales the gradients by 1/m), ``merge_outputs``,
  ``init_fwd.s<stage>``/``init_bwd.s<stage>`` _prepare_forward_infra/_prepare_backward_infra
  (step 1 only), ``clear_runtime_states.s<stage>``, and, outside step(), ``opt.step``,
  ``zero_grad``, ``drop_outputs``.

Fixture ``test/fixtures/pipeline-cpu/<id>.json``: ``case``, ``command``, ``env``, ``schedule``
(class, pp, virtual stages per rank, m, split, each stage's layer range and rank, the case's
``returnOutputs``), then ``ranks``: per rank ``stages``, ``livePeakBytes`` (= baseline + the
step's highest live delta), ``baselineBytes`` (live before step 3, from the objects: parameters,
optimizer state, receive buffers, the last stage's output_chunks of the previous step, inputs;
``unattributedBytes`` = allocated-before-step from the stream minus that sum: 0 expected),
``parametersBytes``, ``gradBytes`` (before the step: 0, gradients are freed at the end of each step),
``optimizerStateBytes``, ``bufferBytes`` (module buffers: the HF rotary caches), ``recvBufferBytes`` {activations, gradients}, ``outputChunksBytes``,
``inputBytes``/``targetBytes``, ``peakPhase`` (label of the phase the peak falls in, with op),
``liveEndBytes``, ``schedulePeakBytes`` / ``schedulePeakPhase`` (the highest live bytes inside
``schedule.step()``, before the optimizer), ``actions`` (the compute actions this rank ran, in order, from the wrappers),
``pipelineOrder`` (the schedule's own IR for this rank, ``schedule.pipeline_order[rank]``, and
for the runtime schedules ``pipelineOrderWithComms``), ``recvBuffers`` (per stage and
micro-batch: shape, bytes, where allocated), ``timeline`` (per phase of step 3: [label, live at
entry, max live, live at exit], absolute bytes), ``peakComposition`` (blocks live at the peak:
from before the step by role; allocated in the step by phase label), ``steps`` (headline figures
of steps 1-4) and ``steadyCheck``.  Baseline and peaks are per rank; all bytes are the sizes
the CPU allocator was asked for (profiler ``alloc_size``).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from collections import OrderedDict
from typing import Dict, List, Tuple

from gloo_harness import Marks, case_args, case_doc, child_args, child_env, child_setup, command_for, drive, run_ranks, steady_check, steps_summary, take_env_meta, timeline
from gloo_harness import dump_fixture as _dump_fixture
from gloo_harness import storages as ptrs_of

GENERATED_BY = "tools/oracle/pipeline_cpu.py"
DEFAULT_CASES = os.path.join("tools", "oracle", "cases", "pipeline-cpu.json")
DEFAULT_OUT = os.path.join("test", "fixtures", "pipeline-cpu")
DEFAULT_HF_DEPS = "/usr/lib/python3/dist-packages"
STEPS = 4
MEASURED_STEP = 3
SCHEDULES = ("ScheduleGPipe", "Schedule1F1B", "ScheduleInterleaved1F1B")


# --------------------------------------------------------------------------------------------
# stage modules
# --------------------------------------------------------------------------------------------


def stage_ranges(n_layers: int, split: List[int]) -> List[Tuple[int, int]]:
    cuts = [0] + list(split) + [n_layers]
    out = []
    for a, b in zip(cuts, cuts[1:]):
        if not a < b:
            raise ValueError(f"split {split} gives an empty stage")
        out.append((a, b))
    return out


def hf_stage_wrappers():
    """torchtitan-style stages of a HF causal LM (LlamaForCausalLM 4.40.2).  ``split`` cuts the
    decoder layers (4 layers, ``[2]``: stage 0 = layers 0-1, stage 1 = layers 2-3).  For each stage
    the rank holds, the whole model is built (seed 0, so every rank has the same weights) and
    pruned: ``model.model.layers`` becomes a ModuleList of the stage's layers (the others are
    deleted); on every stage but the first ``model.model.embed_tokens`` is set to None and the
    stage is fed ``inputs_embeds`` (the previous stage's hidden states); on every stage but the
    last ``model.model.norm`` and ``model.lm_head`` are replaced by ``nn.Identity()``.  The stage
    module wraps the pruned model; its forward returns ``model(...).logits`` (use_cache=False):
    hidden states [b, S, H] on non-last stages, logits [b, S, V] on the last one.  Returns the
    (first stage, later stage) wrapper classes."""
    import torch.nn as nn

    class FirstStage(nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids):
            return self.m(input_ids=input_ids, use_cache=False, return_dict=True).logits

    class LaterStage(nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, hidden):
            return self.m(inputs_embeds=hidden, use_cache=False, return_dict=True).logits

    return FirstStage, LaterStage


# --------------------------------------------------------------------------------------------
# child: one rank of one case
# --------------------------------------------------------------------------------------------


def run_child(case: dict, rank: int, port: int, args) -> dict:
    import gc

    fsdp2_cpu, torch, oracle = child_setup(args.hf_deps, args.transformers_src)
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile

    pp = int(case["pp"])
    virtual = int(case.get("virtualStages", 1))
    n_stages = pp * virtual
    m = int(case["microBatches"])
    sched_name = case["schedule"]
    if sched_name not in SCHEDULES:
        raise ValueError(f"unknown schedule {sched_name}")
    return_outputs = bool(case.get("returnOutputs", True))
    my_stages = [rank + k * pp for k in range(virtual)]
    notes: List[str] = []

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=pp)

    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining import schedules as S

    # ---------------- markers ----------------
    marks = Marks(torch, oracle)
    segment = marks.segment  # no phase stack here: a phase label is marked as is

    def phase(name: str) -> None:
        marks.mark("phase", name)

    actions: Dict[str, List[str]] = {}
    cur_seg = {"name": "setup"}

    def record_action(a: str) -> None:
        actions.setdefault(cur_seg["name"], []).append(a)

    def wrap(obj, meth: str, label_fn, action: bool = False):
        orig = getattr(obj, meth)

        def wrapped(*a, **k):
            lab = label_fn(*a, **k)
            if action:
                record_action(lab)
            phase(lab)
            try:
                return orig(*a, **k)
            finally:
                phase("after:" + lab)

        setattr(obj, meth, wrapped)

    is_hf = case["model"] == "hf"
    stage_info = []
    marks.on = True
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        # ---------------- build ----------------
        segment("build")
        if not is_hf:
            full = oracle.build_model(case)  # seed 0
            x, y = oracle.make_inputs(case, full)  # seeds 1, 2
            layers_all = list(full.children())
            ranges = stage_ranges(len(layers_all), case["split"])
            if len(ranges) != n_stages:
                raise ValueError(f"split {case['split']} gives {len(ranges)} stages, want {n_stages}")
            mods = {}
            for s in my_stages:
                a, b = ranges[s]
                mods[s] = nn.Sequential(*layers_all[a:b])
            del layers_all, full
            param_total = None
        else:
            import hf_models

            nl = int(case["config"]["num_hidden_layers"])
            ranges = stage_ranges(nl, case["split"])
            if len(ranges) != n_stages:
                raise ValueError(f"split {case['split']} gives {len(ranges)} stages, want {n_stages}")
            FirstStage, LaterStage = hf_stage_wrappers()
            mods = {}
            x = y = None
            param_total = None
            for s in my_stages:
                full = oracle.build_model(case)  # seed 0: the same weights on every rank
                if param_total is None:
                    param_total = sum(p.numel() for p in full.parameters())
                if x is None:
                    x, y = oracle.make_inputs(case, full)  # ids [B, S]; target = the ids
                a, b = ranges[s]
                full.model.layers = nn.ModuleList(list(full.model.layers)[a:b])
                if s != 0:
                    full.model.embed_tokens = None
                if s != n_stages - 1:
                    full.model.norm = nn.Identity()
                    full.lm_head = nn.Identity()
                full.train()
                mods[s] = FirstStage(full) if s == 0 else LaterStage(full)
            del full
        has_first = 0 in my_stages
        has_last = (n_stages - 1) in my_stages
        if not has_first:
            del x
            x = None
        if not has_last:
            del y
            y = None
        gc.collect()

        # ---------------- stages and schedule ----------------
        segment("stage")
        cur_seg["name"] = "stage"
        stages = []
        for s in my_stages:
            mods[s].train()
            st = PipelineStage(mods[s], s, n_stages, torch.device("cpu"))
            stages.append(st)
            stage_info.append({"stage": s, "layers": list(ranges[s]), "params": sum(p.numel() for p in mods[s].parameters())})

        if is_hf:

            def loss_fn(output, target):
                return F.cross_entropy(output.flatten(0, 1).float(), target.flatten(0, 1))

        else:

            def loss_fn(output, target):
                return F.cross_entropy(output, target)

        cls = getattr(S, sched_name)
        if virtual == 1:
            schedule = cls(stages[0], n_microbatches=m, loss_fn=loss_fn)
        else:
            schedule = cls(stages, n_microbatches=m, loss_fn=loss_fn)

        for st in stages:
            sid = st.stage_index
            wrap(st, "forward_one_chunk", lambda mb, *a, _s=sid, **k: f"F{mb}.s{_s}", action=True)
            wrap(st, "backward_one_chunk", lambda mb, *a, _s=sid, **k: f"B{mb}.s{_s}", action=True)
            wrap(st, "get_fwd_send_ops", lambda mb, *a, _s=sid, **k: f"sendF{mb}.s{_s}")
            wrap(st, "get_bwd_send_ops", lambda mb, *a, _s=sid, **k: f"sendB{mb}.s{_s}")
            wrap(st, "get_fwd_recv_ops", lambda mb, *a, _s=sid, **k: f"recvF{mb}.s{_s}")
            wrap(st, "get_bwd_recv_ops", lambda mb, *a, _s=sid, **k: f"recvB{mb}.s{_s}")
            wrap(st, "perform_reduce_grad", lambda *a, _s=sid, **k: f"reduce_grad.s{_s}", action=True)
            wrap(st, "_prepare_forward_infra", lambda *a, _s=sid, **k: f"init_fwd.s{_s}")
            wrap(st, "_prepare_backward_infra", lambda *a, _s=sid, **k: f"init_bwd.s{_s}")
            wrap(st, "clear_runtime_states", lambda *a, _s=sid, **k: f"clear_runtime_states.s{_s}")
        wrap(schedule, "_maybe_compute_loss", lambda stage, output, target_mbs, mb, *a, **k: f"L{mb}" if stage.is_last else f"noloss{mb}")
        wrap(schedule, "_merge_outputs", lambda *a, **k: "merge_outputs")
        wrap(schedule, "_update_losses", lambda *a, **k: "update_losses")

        segment("optimizer")
        cur_seg["name"] = "optimizer"
        params = []
        seen = set()
        for st in stages:
            for p in st.submod.parameters():
                if id(p) not in seen:
                    seen.add(id(p))
                    params.append(p)
        opt = torch.optim.Adam(params, lr=1e-3)

        def components() -> dict:
            p = ptrs_of(params)
            g = ptrs_of([q.grad for q in params])
            state = [v for s_ in opt.state.values() for v in s_.values() if torch.is_tensor(v)]
            sp = ptrs_of(state)
            act_bufs, grad_bufs = [], []
            for st in stages:
                for infos in st.args_recv_info.values():
                    for info in infos:
                        if not info.is_root_arg and info.buffer is not None:
                            act_bufs.append(info.buffer)
                for infos in st.grad_recv_info.values():
                    for info in infos:
                        if info.buffer is not None:
                            grad_bufs.append(info.buffer)
            ab, gb = ptrs_of(act_bufs), ptrs_of(grad_bufs)
            bp = ptrs_of([b for st in stages for b in st.submod.buffers()])
            oc = ptrs_of([t for st in stages for o in st.output_chunks for t in (o if isinstance(o, (tuple, list)) else [o])])
            ip = ptrs_of([x]) if x is not None else {}
            tp = ptrs_of([y]) if y is not None and (x is None or y.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()) else {}
            return {
                "parametersBytes": sum(p.values()),
                "gradBytes": sum(g.values()),
                "optimizerStateBytes": sum(sp.values()),
                "recvBufferBytes": {"activations": sum(ab.values()), "gradients": sum(gb.values())},
                "outputChunksBytes": sum(oc.values()),
                "bufferBytes": sum(bp.values()),
                "inputBytes": sum(ip.values()),
                "targetBytes": sum(tp.values()),
                "_ptrs": {"param": p, "grad": g, "state": sp, "recvAct": ab, "recvGrad": gb, "outputChunks": oc, "buffer": bp, "input": ip, "target": tp},
            }

        def train_step():
            kw = {"return_outputs": return_outputs}
            losses = [] if has_last else None
            if has_last:
                kw["target"] = y
                kw["losses"] = losses
            if has_first:
                out = schedule.step(x, **kw)
            else:
                out = schedule.step(**kw)
            phase("drop_outputs")
            del out, losses
            phase("opt.step")
            opt.step()
            phase("zero_grad")
            opt.zero_grad(set_to_none=True)
            phase("end")

        comps = {}
        for s in range(1, STEPS + 1):
            segment(f"step{s}")
            cur_seg["name"] = f"step{s}"
            comps[s] = components()
            train_step()
        segment("introspect")
        recv_rows = []
        for st in stages:
            for mb, infos in sorted(st.args_recv_info.items()):
                for info in infos:
                    if not info.is_root_arg and info.buffer is not None:
                        b = info.buffer
                        recv_rows.append({"stage": st.stage_index, "kind": "activation", "mb": mb, "shape": list(b.shape), "dtype": str(b.dtype).replace("torch.", ""), "bytes": b.numel() * b.element_size(), "requiresGrad": b.requires_grad, "ptr": b.untyped_storage().data_ptr()})
            for mb, infos in sorted(st.grad_recv_info.items()):
                for info in infos:
                    if info.buffer is not None:
                        b = info.buffer
                        recv_rows.append({"stage": st.stage_index, "kind": "gradient", "mb": mb, "shape": list(b.shape), "dtype": str(b.dtype).replace("torch.", ""), "bytes": b.numel() * b.element_size(), "requiresGrad": b.requires_grad, "ptr": b.untyped_storage().data_ptr()})
        state_rows = {k: (list(v.shape), v.numel() * v.element_size()) for k, v in next(iter(opt.state.values())).items() if torch.is_tensor(v)} if opt.state else {}
        opt_defaults = oracle.json_safe(opt.defaults)
        segment("end")
        marks.on = False

    # ---------------- reading the stream ----------------
    stream = fsdp2_cpu.read_stream(oracle, prof, marks.labels)
    del prof
    # where each receive buffer was allocated
    first_alloc: Dict[int, dict] = {}
    for e in stream:
        if e["bytes"] > 0 and e["ptr"] not in first_alloc:
            first_alloc[e["ptr"]] = e
    live_at_end: Dict[int, dict] = {}
    for e in stream:
        if e["bytes"] > 0:
            live_at_end[e["ptr"]] = e
        elif e["bytes"] < 0:
            live_at_end.pop(e["ptr"], None)
    for r in recv_rows:
        e = live_at_end.get(r["ptr"]) or first_alloc.get(r["ptr"])
        r["allocatedIn"] = f"{e['segment']}/{e['phase']}" if e else None
        r.pop("ptr")

    steps = OrderedDict()
    measured = None
    for s in range(1, STEPS + 1):
        name = f"step{s}"
        c = dict(comps[s])
        ptrs = c.pop("_ptrs")
        live = fsdp2_cpu.live_blocks_before(stream, name)
        baseline = (
            c["parametersBytes"] + c["gradBytes"] + c["optimizerStateBytes"] + c["recvBufferBytes"]["activations"]
            + c["recvBufferBytes"]["gradients"] + c["outputChunksBytes"] + c["bufferBytes"] + c["inputBytes"] + c["targetBytes"]
        )
        known = set()
        for grp in ptrs.values():
            known.update(grp)
        st_ = fsdp2_cpu.segment_stats(stream, name)
        c["baselineBytes"] = baseline
        c["allocatedBeforeStep"] = st_["allocatedBefore"]
        c["unattributedBytes"] = st_["allocatedBefore"] - baseline
        c["unattributedBlocks"] = [
            {"bytes": e["bytes"], "segment": e["segment"], "phase": e["phase"], "op": e["op"]} for ptr, e in live.items() if ptr not in known
        ][:10]
        c["livePeakBytes"] = baseline + st_["maxDelta"]
        c["liveEndBytes"] = baseline + st_["endDelta"]
        c["peakPhase"] = st_["peakAt"]
        c["events"] = st_["events"]
        if s == MEASURED_STEP:
            evs = [e for e in stream if e["segment"] == name]
            # timeline per phase (absolute live bytes, counted from the baseline)
            c["timeline"] = timeline(evs, baseline)
            def composition(index):
                comp = fsdp2_cpu.peak_composition(stream, name, {"peakIndex": index}, ptrs, live)
                alloc = OrderedDict()
                for r in comp["allocatedInStep"]:
                    a = alloc.setdefault(r["phase"], {"bytes": 0, "blocks": 0})
                    a["bytes"] += r["bytes"]
                    a["blocks"] += r["blocks"]
                return {"fromBeforeStep": comp["fromBeforeStep"], "allocatedInStepByPhase": alloc}

            c["peakComposition"] = composition(st_["peakIndex"])
            # the highest live bytes inside schedule.step() (before "drop_outputs")
            cur = mx = 0
            mx_i = -1
            for i, e in enumerate(evs):
                if e["phase"] in ("drop_outputs", "opt.step", "zero_grad", "end"):
                    break
                cur += e["bytes"]
                if cur > mx:
                    mx, mx_i = cur, i
            c["schedulePeakBytes"] = baseline + mx
            c["schedulePeakPhase"] = {k: evs[mx_i][k] for k in ("phase", "op") if mx_i >= 0}
            c["schedulePeakComposition"] = composition(mx_i)
            if args.traces:
                os.makedirs(args.traces, exist_ok=True)
                with open(os.path.join(args.traces, f"{case['id']}.r{rank}.json"), "w") as fh:
                    json.dump({"id": case["id"], "rank": rank, "baselineBytes": baseline,
                               "events": [{k: e[k] for k in ("phase", "op", "bytes", "ptr") if e.get(k) is not None} for e in evs]}, fh, separators=(",", ":"))
        steps[name] = c

    meas = steps[f"step{MEASURED_STEP}"]
    order = getattr(schedule, "pipeline_order", None)
    order_c = getattr(schedule, "pipeline_order_with_comms", None)
    res = OrderedDict()
    res["rank"] = rank
    res["stages"] = stage_info
    for k in ("livePeakBytes", "baselineBytes", "parametersBytes", "optimizerStateBytes", "recvBufferBytes", "outputChunksBytes", "bufferBytes",
              "inputBytes", "targetBytes", "gradBytes", "unattributedBytes", "unattributedBlocks", "peakPhase", "liveEndBytes", "schedulePeakBytes"):
        res[k] = meas[k]
    res["steadyCheck"] = steady_check(steps, STEPS, MEASURED_STEP)
    res["actions"] = " ".join(actions.get(f"step{MEASURED_STEP}", []))
    res["actionsStep1"] = " ".join(actions.get("step1", []))
    res["pipelineOrder"] = " ".join("-" if a is None else str(a) for a in order[rank]) if order and rank in order else None
    res["pipelineOrderWithComms"] = " ".join(str(a) for a in order_c[rank]) if order_c and rank in order_c else None
    res["recvBuffers"] = recv_rows
    res["optimizerState"] = {"perParamExample": state_rows, "defaults": opt_defaults}
    res["schedulePeakPhase"] = meas["schedulePeakPhase"]
    res["peakComposition"] = meas["peakComposition"]
    res["schedulePeakComposition"] = meas["schedulePeakComposition"]
    res["timeline"] = meas["timeline"]
    res["steps"] = steps_summary(
        steps, ("livePeakBytes", "baselineBytes", "liveEndBytes", "allocatedBeforeStep", "unattributedBytes", "outputChunksBytes", "recvBufferBytes", "peakPhase", "events"))
    res["notes"] = notes
    res["_env"] = {"torch": torch.__version__, "torchGit": getattr(torch.version, "git_version", None), "python": sys.version.split()[0],
                   "device": "cpu", "threads": torch.get_num_threads(), "processGroup": f"gloo, {pp} local processes (tcp://127.0.0.1)",
                   "transformers": fsdp2_cpu._transformers_version()}
    res["_meta"] = {"input": None if x is None else {"shape": list(x.shape), "dtype": str(x.dtype).replace("torch.", "")},
                    "target": None if y is None else {"shape": list(y.shape), "dtype": str(y.dtype).replace("torch.", "")},
                    "ranges": [list(r) for r in ranges], "stageToRank": {str(k): v for k, v in sorted(getattr(schedule, "stage_index_to_group_rank", stages[0].stage_index_to_group_rank).items())},
                    "paramTotal": param_total}
    try:
        dist.barrier()
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        pass
    return res


# --------------------------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------------------------


# JSON indented by one space per level; every row of a rank's timeline / recvBuffers on one line
dump_fixture = functools.partial(_dump_fixture, one_line_keys=("timeline", "recvBuffers", "layers"))


def run_case(case: dict, args, tmp: str) -> dict:
    pp = int(case["pp"])
    env = child_env()

    def child_cmd(r, port, out):
        cmd = [sys.executable, os.path.abspath(__file__), "--cases", args.cases, "--child", case["id"], "--rank", str(r), "--port", str(port),
               "--child-out", out, "--transformers-src", args.transformers_src or "", "--hf-deps", args.hf_deps or ""]
        if args.traces:
            cmd += ["--traces", args.traces]
        return cmd

    ranks, errors = run_ranks(case, pp, tmp, env, args.timeout, child_cmd)
    doc = case_doc(case, GENERATED_BY, command_for(args, case["id"], "/tmp/t213/bin/python tools/oracle/pipeline_cpu.py", DEFAULT_CASES, DEFAULT_OUT))
    got = take_env_meta(doc, ranks, errors)
    if got is None:
        return doc
    env0, metas = got
    meta = metas[0]
    for mm in metas[1:]:
        if mm and mm.get("target"):
            meta["target"] = mm["target"]
    doc["env"] = env0
    doc["world"] = pp
    doc["schedule"] = OrderedDict(
        [("class", case["schedule"]), ("pp", pp), ("virtualStages", int(case.get("virtualStages", 1))), ("microBatches", int(case["microBatches"])),
         ("numStages", pp * int(case.get("virtualStages", 1))), ("split", case["split"]), ("stageRanges", meta["ranges"]),
         ("stageToRank", meta["stageToRank"]), ("returnOutputs", bool(case.get("returnOutputs", True))), ("scaleGrads", True),
         ("lossFn", "F.cross_entropy(output.flatten(0, 1).float(), target.flatten(0, 1)) (target = the input ids)" if case["model"] == "hf" else "F.cross_entropy(output, target)")]
    )
    doc["input"] = meta["input"]
    doc["target"] = meta["target"]
    if meta.get("paramTotal"):
        doc["paramsFullModel"] = meta["paramTotal"]
    doc["ranks"] = ranks
    return doc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    case_args(ap, DEFAULT_OUT, DEFAULT_CASES, traces=True)
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds per case")
    ap.add_argument("--transformers-src", default=os.environ.get("ORACLE_TRANSFORMERS_SRC", "/work/hfenv/hf-4.40.2:/work/hfenv/stubs"))
    ap.add_argument("--hf-deps", default=DEFAULT_HF_DEPS)
    child_args(ap)
    args = ap.parse_args(argv)
    return drive(args, run_child, run_case, dump_fixture, 'pipeline_cpu_', lambda r: f"r{r['rank']} peak {r['livePeakBytes']} sched {r['schedulePeakBytes']} base {r['baselineBytes']} unattr {r['unattributedBytes']} steady {r['steadyCheck']['same']}")


if __name__ == "__main__":
    sys.exit(main())
