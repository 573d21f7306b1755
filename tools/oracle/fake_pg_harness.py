"""The shared driver and measuring helpers of the one-process fake-process-group oracles
(tp_cpu.py, cp_cpu.py, ep_cpu.py, fsdp2_tp_cpu.py, fsdp2_cp_cpu.py).

Each of those scripts measures one rank of a parallel layout in one child process per case:
``init_process_group("fake", ...)`` so every collective completes at once, torch.profiler with
``profile_memory=True`` around the build and the training steps, ``aten::is_set_to`` marker ops
that label the allocation stream with segments and phases, and a ``saved_tensors_hooks`` pack hook
on a later forward. What they share is here: the parent's loop over the cases (one child at a
time, one fixture each), the command-line options, the child's set-up, the markers, the reader of
the allocation stream, the per-step live-peak arithmetic, local storages of DTensors, and FSDP2's
parameter groups. The cases, the model building, the plans and the fixture fields stay in each
script. Stdlib only at import time: torch is imported inside the functions that need it.
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

MARK_OP = "aten::is_set_to"
FAKE_PG = "fake (torch.testing._internal.distributed.fake_pg.FakeStore)"
DEFAULT_TRANSFORMERS_SRC = "/work/hfenv/hf-4.40.2:/work/hfenv/stubs"
DEFAULT_HF_DEPS = "/usr/lib/python3/dist-packages"


# ---------------------------------------------------------------------------------------------
# the parent: options and the loop over the cases
# ---------------------------------------------------------------------------------------------


def arg_parser(doc: str, default_out: str, hf_paths: bool = True) -> argparse.ArgumentParser:
    """The options every script has: --only, --out, (--transformers-src, --hf-deps: where the
    transformers 4.40.2 tree and its dependencies are) and the hidden --child / --child-out."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=None)
    ap.add_argument("--out", default=default_out)
    if hf_paths:
        ap.add_argument("--transformers-src", default=os.environ.get("ORACLE_TRANSFORMERS_SRC", DEFAULT_TRANSFORMERS_SRC))
        ap.add_argument("--hf-deps", default=DEFAULT_HF_DEPS)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child-out", default=None, help=argparse.SUPPRESS)
    return ap


def hf_child_args(args) -> list:
    """The --transformers-src / --hf-deps options passed on to a child process."""
    return ["--transformers-src", args.transformers_src, "--hf-deps", args.hf_deps]


def select_cases(cases: list, only, strict: bool = False) -> list:
    """The cases --only names (all without it); `strict`: an unknown id stops the run."""
    if not only:
        return cases
    if not strict:
        return [c for c in cases if c["id"] in only.split(",")]
    want = [w.strip() for w in only.split(",") if w.strip()]
    unknown = [w for w in want if w not in {c["id"] for c in cases}]
    if unknown:
        raise SystemExit(f"unknown case ids: {unknown}")
    return [c for c in cases if c["id"] in want]


def _finite(x):
    """The value with NaN and infinities as null: a fake group's losses can be NaN, and JSON has no NaN."""
    if isinstance(x, float) and x != x or x in (float("inf"), float("-inf")):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


def json_fixture(res: dict) -> str:
    """A fixture's text: indent=1 JSON (non-finite numbers as null) and a newline."""
    return json.dumps(_finite(res), indent=1, allow_nan=False) + "\n"


def summary_line(res: dict) -> str:
    """The line printed for a measured case: local params, saved, live peak, unattributed bytes."""
    tr = next(iter(res["train"].values()))
    return f"params {res['params']['local']} saved {res['savedBytes']} livePeak {tr['livePeakBytes']} unattributed {tr['unattributedBytes']}"


def drive(args, cases: list, run_child, *, script: str, summary=summary_line, child_args=(), dump=json_fixture, generated_by=None, strict_only=False, extra_env=None, timed_errors=False) -> int:
    """A script's main after its own options: with --child, run that case here (`run_child(case,
    args)`) and write its result (or the error) as JSON to --child-out; otherwise run each case
    --only selects in a child process of `script` (one at a time, one thread), write
    `<out>/<id>.json` with `dump(res)` and print a line per case (`summary(res)`). `generated_by`:
    error fixtures carry the case and generatedBy too. Returns the exit status."""
    if args.child is not None:
        case = next(c for c in cases if c["id"] == args.child)
        try:
            res = run_child(case, args)
        except Exception as e:  # noqa: BLE001
            res = {"id": case["id"], "case": case, **({"generatedBy": generated_by} if generated_by else {}), "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        with open(args.child_out, "w") as f:
            json.dump(res, f)
        return 0
    cases = select_cases(cases, args.only, strict=strict_only)
    os.makedirs(args.out, exist_ok=True)
    failed = 0
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONWARNINGS="ignore", **(extra_env or {}))
    for case in cases:
        t0 = time.time()
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
            out = tmp.name
        proc = subprocess.run([sys.executable, os.path.abspath(script), "--child", case["id"], "--child-out", out, *child_args], env=env, capture_output=True, text=True)
        try:
            with open(out) as f:
                res = json.load(f)
        except Exception:  # noqa: BLE001
            head = {"case": case, "generatedBy": generated_by} if generated_by else {}
            res = {"id": case["id"], **head, "error": f"child exited {proc.returncode}", "stderr": proc.stderr[-4000:]}
        os.unlink(out)
        with open(os.path.join(args.out, f"{case['id']}.json"), "w") as f:
            f.write(dump(res))
        if "error" in res:
            failed += 1
            took = f" ({time.time() - t0:.1f} s)" if timed_errors else ""
            print(f"{case['id']}: ERROR {res['error']}{took}\n{res.get('traceback', res.get('stderr', ''))[-3000:]}", flush=True)
        else:
            print(f"{case['id']}: {summary(res)} ({time.time() - t0:.1f} s)", flush=True)
    return 1 if failed else 0


# ---------------------------------------------------------------------------------------------
# the child: set-up, markers, the fixture's head
# ---------------------------------------------------------------------------------------------


def add_hf_paths(args) -> None:
    """Puts the transformers tree(s) of --transformers-src first on sys.path and --hf-deps last."""
    if args.hf_deps and os.path.isdir(args.hf_deps) and args.hf_deps not in sys.path:
        sys.path.append(args.hf_deps)
    for path in reversed((args.transformers_src or "").split(":")):
        if path and path not in sys.path:
            sys.path.insert(0, path)


def import_hf(args):
    """transformers from --transformers-src (add_hf_paths), its logging set to errors only."""
    add_hf_paths(args)
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers


def start_child(transformers, case: dict) -> None:
    """Stops unless transformers is the case's release; one thread."""
    import torch

    if transformers.__version__ != case["transformers"]:
        raise SystemExit(f"needs transformers {case['transformers']}, got {transformers.__version__}")
    torch.set_num_threads(1)


def init_fake_pg(rank: int, world_size: int) -> None:
    """``init_process_group("fake", store=FakeStore(), ...)``: collectives complete at once and
    allocate nothing outside the caller's tensors."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)


class Marker:
    """``mark(kind, value)``: records the label and runs one ``aten::is_set_to`` (no allocation),
    which read_stream / marked_allocations pair with the label. Nothing is marked while ``on`` is
    False."""

    def __init__(self, on: bool = True):
        import torch

        self.labels = []
        self.on = on
        self._tensor = torch.zeros(1)

    def __call__(self, kind, value) -> None:
        if self.on:
            self.labels.append((kind, value))
            self._tensor.is_set_to(self._tensor)


def fixture_head(case: dict, generated_by: str, python: str = "/tmp/t213/bin/python") -> OrderedDict:
    """A fixture's first fields: id, case, generatedBy and the command that remakes it."""
    result = OrderedDict()
    result["id"] = case["id"]
    result["case"] = case
    result["generatedBy"] = generated_by
    result["command"] = f"{python} {generated_by} --only {case['id']}"
    return result


def marked_step(mark, opt, forward, ctx=None, after_forward=None) -> None:
    """One training step with phase marks: zero_grad(set_to_none=True); ``loss = forward()`` and
    backward inside ``ctx()`` (loss_parallel, or nothing); ``after_forward()`` between them;
    ``opt.step()``; the loss dropped."""
    mark("phase", "zero_grad")
    opt.zero_grad(set_to_none=True)
    mark("phase", "forward")
    with (ctx or contextlib.nullcontext)():
        loss = forward()
        if after_forward is not None:
            after_forward()
        mark("phase", "backward")
        loss.backward()
    mark("phase", "step")
    opt.step()
    mark("phase", "cleanup")
    del loss
    mark("phase", "end")


# ---------------------------------------------------------------------------------------------
# local storages
# ---------------------------------------------------------------------------------------------

_DTensor = None


def local(x):
    """DTensor → its local tensor; funcol's AsyncCollectiveTensor (an all-reduce's output until
    first use) → the tensor it wraps; anything else as it is."""
    global _DTensor
    if _DTensor is None:
        from torch.distributed.tensor import DTensor

        _DTensor = DTensor
    while True:
        if isinstance(x, _DTensor):
            x = x._local_tensor
        elif type(x).__name__ == "AsyncCollectiveTensor":
            x = x.elem
        else:
            return x


def storage_stats(tensors):
    """(data_ptr -> nbytes of the distinct non-empty local storages, logical bytes, tensor count)
    of the tensors that are not None."""
    seen = {}
    logical = 0
    n = 0
    for x in tensors:
        if x is None:
            continue
        lt = local(x)
        n += 1
        logical += lt.numel() * lt.element_size()
        st = lt.untyped_storage()
        if st.nbytes() and st.data_ptr():
            seen[st.data_ptr()] = st.nbytes()
    return seen, logical, n


def storages(tensors) -> dict:
    """data_ptr -> nbytes of the distinct non-empty local storages of the tensors."""
    return storage_stats(tensors)[0]


def saved_recorder(param_ptrs):
    """A saved_tensors_hooks pack hook and the dict it fills: data_ptr -> bytes, shape, dtype of
    each distinct local storage autograd saves that is not in `param_ptrs`."""
    saved = {}

    def pack(x):
        lt = local(x)
        st = lt.untyped_storage()
        ptr = st.data_ptr()
        if ptr and ptr not in param_ptrs and ptr not in saved:
            saved[ptr] = {"bytes": st.nbytes(), "shape": list(lt.shape), "dtype": str(lt.dtype).replace("torch.", "")}
        return x.detach() if x.grad_fn is not None else x

    return pack, saved


def saved_tensors_pass(opt, forward, pack, ctx=None) -> None:
    """After the measured steps: zero_grad(set_to_none=True); ``forward()`` (the loss) under
    ``saved_tensors_hooks(pack, identity)``, inside ``ctx()`` with its backward; the loss dropped."""
    import torch

    opt.zero_grad(set_to_none=True)
    with (ctx or contextlib.nullcontext)():
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda p_: p_):
            loss = forward()
        loss.backward()
    del loss


def graph_nodes(grad_fn):
    """Each autograd node reachable from `grad_fn`, once, depth first."""
    seen = set()
    stack = [grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        yield fn
        for nf, _ in fn.next_functions:
            stack.append(nf)


# ---------------------------------------------------------------------------------------------
# the allocation stream
# ---------------------------------------------------------------------------------------------


def ancestors(node) -> list:
    """The profiler node's enclosing ops, innermost first."""
    out = []
    p = node.parent
    while p is not None:
        out.append(p)
        p = p.parent
    return out


def marked_allocations(prof, labels):
    """The profiler's allocation and marker events in time order: yields ``(label, None)`` for a
    marker op (the labels, in the order mark() made them) and ``(None, node)`` for an allocation
    or free; raises at the end if a mark is missing."""
    nodes = []

    def walk(n):
        nodes.append(n)
        for ch in n.children:
            walk(ch)

    for root in prof.profiler.kineto_results.experimental_event_tree():
        walk(root)
    events = []
    for i, n in enumerate(nodes):
        if "Allocation" in str(n.tag):
            events.append((n.start_time_ns, i, "alloc", n))
        elif n.name == MARK_OP:
            events.append((n.start_time_ns, i, "mark", n))
    events.sort(key=lambda e: (e[0], e[1]))
    del nodes
    li = 0
    for _ts, _i, kind, n in events:
        if kind == "mark":
            li += 1
            yield labels[li - 1], None
        else:
            yield None, n
    if li != len(labels):
        raise RuntimeError("marks missing from the profiler's events")


def shape_str(m):
    """A profiler input's 'float32[2, 4]' (a list of them in brackets), None for a non-tensor."""
    name = type(m).__name__
    if name == "_TensorMetadata":
        return str(m.dtype).replace("torch.", "") + str(list(m.sizes))
    if isinstance(m, list):
        inner = [shape_str(x) for x in m]
        inner = [x for x in inner if x is not None]
        return "[" + ", ".join(inner) + "]" if inner else None
    return None


def read_stream(prof, labels, *, ring=False, scope=False, alloc_id=False, ptr=False, inputs=False) -> list:
    """Allocation events in time order: segment and phase (from the marks), the innermost and
    outermost op, bytes (> 0 allocates, < 0 frees); with `ring` the last "ring" mark (reset by a
    segment), `scope` the innermost ``FSDP::`` record_function, `alloc_id` the allocation id,
    `ptr` the address, `inputs` the innermost op's input shapes (allocations only)."""
    seg, phase, ring_mark = "setup", "setup", None
    stream = []
    for label, n in marked_allocations(prof, labels):
        if n is None:
            k, v = label
            if k == "segment":
                seg, phase, ring_mark = v, "setup", None
            elif k == "phase":
                phase = v
            elif k == "ring":
                ring_mark = v
            continue
        anc = ancestors(n)
        ev = {"segment": seg, "phase": phase}
        if ring:
            ev["ring"] = ring_mark
        ev["op"] = anc[0].name if anc else None
        ev["top"] = anc[-1].name if anc else None
        if scope:
            ev["scope"] = next((a.name for a in anc if a.name.startswith("FSDP::")), None)
        ev["bytes"] = int(n.extra_fields.alloc_size)
        if alloc_id:
            ev["id"] = None if n.extra_fields.allocation_id is None else int(n.extra_fields.allocation_id)
        if ptr:
            ev["ptr"] = int(n.extra_fields.ptr)
        if inputs and anc and ev["bytes"] > 0:
            try:
                ev["inputs"] = [x for x in (shape_str(m) for m in anc[0].extra_fields.inputs) if x is not None]
            except Exception:  # noqa: BLE001
                pass
        stream.append(ev)
    return stream


def step_profile(stream: list, name: str, peak_keys=("phase", "op", "top")) -> dict:
    """What the stream says of segment `name` (a step): ``allocatedBefore`` (bytes live before
    it), ``maxDelta`` (the highest rise of live bytes within it), ``peakAt`` (`peak_keys` of the
    event that first reaches it), ``phases`` (per phase: allocated, freed, maxCumulative) and
    ``running`` ((event, rise so far) for each of its events)."""
    before = 0
    for e in stream:
        if e["segment"] == name:
            break
        before += e["bytes"]
    c = mx = 0
    peak_at = None
    phases = OrderedDict()
    running = []
    for e in stream:
        if e["segment"] != name:
            continue
        c += e["bytes"]
        running.append((e, c))
        ph = phases.setdefault(e["phase"], {"allocated": 0, "freed": 0, "maxCumulative": None})
        ph["allocated" if e["bytes"] > 0 else "freed"] += abs(e["bytes"])
        if ph["maxCumulative"] is None or c > ph["maxCumulative"]:
            ph["maxCumulative"] = c
        if c > mx:
            mx, peak_at = c, {k: e[k] for k in peak_keys}
    return {"allocatedBefore": before, "maxDelta": mx, "peakAt": peak_at, "phases": phases, "running": running}


def baseline_bytes(comp: dict) -> int:
    """What the objects hold before a step: params + grads + buffers + inputs + optimizer state."""
    return comp["paramBytes"] + comp["gradBytes"] + comp["bufferBytes"] + comp["inputBytes"] + comp["optimizerStateBytes"]


def live_peak(comp: dict, prof: dict) -> dict:
    """A measured step's fixture fields: the components, baselineBytes, allocatedBefore,
    unattributedBytes (allocatedBefore - baseline), livePeakBytes (baseline + the step's highest
    rise), livePeakAt, phases; `prof` is step_profile's."""
    baseline = baseline_bytes(comp)
    before = prof["allocatedBefore"]
    return {
        **comp,
        "baselineBytes": baseline,
        "allocatedBefore": before,
        "unattributedBytes": before - baseline,
        "livePeakBytes": baseline + prof["maxDelta"],
        "livePeakAt": prof["peakAt"],
        "phases": prof["phases"],
    }


def live_rows(events, drop=("segment",)) -> list:
    """The events as rows without the `drop` keys and None values, each with ``live``: the
    running sum of bytes over the rows so far."""
    cum = 0
    rows = []
    for e in events:
        cum += e["bytes"]
        d = {k: v for k, v in e.items() if k not in drop and v is not None}
        d["live"] = cum
        rows.append(d)
    return rows


def unattributed_blocks(live: dict, ptrs: dict, limit: int = 20) -> list:
    """The first `limit` blocks live before a step (fsdp2_cpu.live_blocks_before) that are in no
    group of `ptrs` (name -> {data_ptr: nbytes}: params, grads, ...)."""
    known = set()
    for grp in ptrs.values():
        known.update(grp)
    return [{"bytes": e["bytes"], "segment": e["segment"], "phase": e["phase"], "op": e["op"], "scope": e.get("scope")} for ptr, e in live.items() if ptr not in known][:limit]


# ---------------------------------------------------------------------------------------------
# FSDP2
# ---------------------------------------------------------------------------------------------


def fsdp_param_groups(root) -> list:
    """Every FSDP2 parameter group under `root`, each FSDP state's once, in module order."""
    from torch.distributed.fsdp import FSDPModule

    seen, out = set(), []
    for _name, mod in root.named_modules():
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
        out.extend(pgs)
    return out


def unsharded_param_ptrs(fsdp_params) -> dict:
    """data_ptr -> fqn of the unsharded (all-gathered) parameters whose storage is allocated now.
    FSDP2 frees them with resize_(0) on reshard and a later one may reuse the address, so the
    saved parameters are keyed by name."""
    out = {}
    for fp in fsdp_params:
        up = getattr(fp, "_unsharded_param", None)
        if up is not None:
            st = local(up).untyped_storage()
            if st.nbytes() and st.data_ptr():
                out[st.data_ptr()] = getattr(fp, "_param_fqn", None) or str(id(fp))
    return out


def dump_rows(res: dict, pick) -> str:
    """indent=1 JSON with each row of some long lists on one line: `pick(doc, compact)` replaces
    each such list in (a copy of) the fixture by ``compact(list)``."""
    rows = []

    def compact(lst):
        out = []
        for r in lst:
            rows.append(json.dumps(r, separators=(",", ":")))
            out.append(f"@@ROW{len(rows) - 1}@@")
        return out

    doc = json.loads(json.dumps(res))
    pick(doc, compact)
    text = json.dumps(doc, indent=1)
    for i, r in enumerate(rows):
        text = text.replace(f'"@@ROW{i}@@"', r, 1)
    return text + "\n"
