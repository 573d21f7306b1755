"""What the gloo-based CPU oracles (pipeline_cpu.py, deepspeed_cpu.py, megatron_cpu.py) share: a
free local port for each case's process group; the driver that reads the cases, runs a child rank
when asked (`--child`), or runs the selected cases (`--only`) and writes one fixture per case; the
launch of one process per rank and the collection of their results; the fixture layout; and, in a
child, the phase marks, storage lookup and readings of the profiler's allocation stream
(deepspeed_cpu.py's method, which megatron_cpu.py follows: roles by storage pointer, step 3's
timeline and peak composition, lost frees, the peak without gloo's staging copies)."""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections import OrderedDict
from typing import Callable, Dict, List, Optional, Tuple


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def drive(args, run_child, run_case, dump_fixture, tmp_prefix: str, rank_line, cases: Optional[list] = None, show_traceback: bool = False) -> int:
    """The oracle's main after argument parsing; `rank_line(r)` summarises one rank of a fixture.
    `cases`: the case list (default: read from `args.cases`); `show_traceback`: print the first
    failing rank's traceback (or stderr) after a case's error line."""
    if cases is None:
        with open(args.cases) as f:
            cases = json.load(f)
        where = args.cases
    else:
        where = "the script's CASES"
    ids = [c["id"] for c in cases]
    if len(set(ids)) != len(ids):
        raise SystemExit("duplicate case ids in " + where)

    if args.child is not None:
        case = next(c for c in cases if c["id"] == args.child)
        try:
            res = run_child(case, args.rank, args.port, args)
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
    os.makedirs(args.out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=tmp_prefix)
    t_all = time.time()
    failed = 0
    for case in cases:
        t0 = time.time()
        doc = run_case(case, args, tmp)
        with open(os.path.join(args.out, f"{case['id']}.json"), "w") as f:
            f.write(dump_fixture(doc))
        secs = time.time() - t0
        if "error" in doc:
            failed += 1
            print(f"{case['id']}: ERROR {doc['error']} ({secs:.1f} s)", flush=True)
            if show_traceback:
                tb = doc["errors"][0].get("traceback") or doc["errors"][0].get("stderr") or ""
                print(tb[-2500:], flush=True)
        else:
            print(f"{case['id']}: {' | '.join(rank_line(r) for r in doc['ranks'])} ({secs:.1f} s)", flush=True)
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"done: {len(cases)} cases, {failed} failed, in {time.time() - t_all:.1f} s", flush=True)
    return 1 if failed else 0


def case_args(ap, default_out: str, default_cases: Optional[str] = None, traces: bool = False) -> None:
    """--cases (when the cases are a file), --only, --out and, with `traces`, --traces."""
    if default_cases is not None:
        ap.add_argument("--cases", default=default_cases)
    ap.add_argument("--only", default=None, help="comma-separated case ids")
    ap.add_argument("--out", default=default_out)
    if traces:
        ap.add_argument("--traces", default=None, help="also write each rank's step-3 allocation events to DIR/<id>.r<rank>.json")


def child_args(ap) -> None:
    """The hidden options a child rank is started with."""
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child-out", default=None, help=argparse.SUPPRESS)


def command_for(args, cid: str, head: str, default_cases: str, default_out: str) -> str:
    """The fixture's `command`: `head` (python and script) with --cases / --out where they are not the defaults."""
    extra = ""
    if args.cases != default_cases:
        extra += f" --cases {args.cases}"
    if args.out != default_out:
        extra += f" --out {args.out}"
    return f"{head}{extra} --only {cid}"


# --------------------------------------------------------------------------------------------
# parent: one process per rank, the fixture
# --------------------------------------------------------------------------------------------


def child_env(**extra) -> dict:
    """The children's environment: one thread, no warnings, gloo on the loopback interface."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONWARNINGS="ignore", **extra)
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    return env


def run_ranks(case: dict, world: int, tmp: str, env: dict, timeout: float, child_cmd: Callable[[int, int, str], List[str]]) -> Tuple[list, list]:
    """Starts `world` processes `child_cmd(rank, port, out)` (each writes its result to `out`),
    waits for them (`timeout` seconds in all, then kills) and reads their results: (ranks, errors);
    a rank without a result is an error with its output's tail."""
    port = free_port()
    procs = []
    for r in range(world):
        out = os.path.join(tmp, f"{case['id']}.r{r}.json")
        err = open(out + ".err", "w+")
        procs.append((r, out, err, subprocess.Popen(child_cmd(r, port, out), stdout=err, stderr=subprocess.STDOUT, env=env)))
    t0 = time.time()
    for r, out, err, p in procs:
        try:
            p.wait(timeout=max(1, timeout - (time.time() - t0)))
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
    return ranks, errors


def case_doc(case: dict, generated_by: str, command: str) -> "OrderedDict":
    doc = OrderedDict()
    doc["id"] = case["id"]
    doc["case"] = case
    doc["generatedBy"] = generated_by
    doc["command"] = command
    return doc


def take_env_meta(doc: dict, ranks: list, errors: list):
    """With errors: records them in `doc` and returns None.  Otherwise removes `_env` and `_meta`
    from every rank and returns (rank 0's _env, [each rank's _meta])."""
    if errors:
        doc["error"] = errors[0].get("error")
        doc["errors"] = errors
        return None
    env0 = ranks[0].pop("_env")
    metas = [ranks[0].pop("_meta")]
    for r in ranks[1:]:
        r.pop("_env", None)
        metas.append(r.pop("_meta", None))
    return env0, metas


def dump_fixture(doc: dict, one_line_keys=("timeline", "layers")) -> str:
    """JSON indented by one space per level, except that any list or object whose compact form
    fits in 160 characters (and every row of a list under one of `one_line_keys`) is written on
    one line."""

    def one(v) -> str:
        return json.dumps(v, separators=(",", ":"))

    def fmt(v, ind: int, key=None) -> str:
        flat = one(v)
        if not isinstance(v, (dict, list)) or len(flat) <= 160 or not v:
            return flat
        pad = " " * (ind + 1)
        if isinstance(v, list):
            if key in one_line_keys:
                items = [one(x) for x in v]
            else:
                items = [fmt(x, ind + 1) for x in v]
            return "[\n" + ",\n".join(pad + i for i in items) + "\n" + " " * ind + "]"
        items = [f"{json.dumps(k)}: {fmt(x, ind + 1, k)}" for k, x in v.items()]
        return "{\n" + ",\n".join(pad + i for i in items) + "\n" + " " * ind + "}"

    return fmt(json.loads(json.dumps(doc)), 0) + "\n"


# --------------------------------------------------------------------------------------------
# child: marks, storages, gloo's Work
# --------------------------------------------------------------------------------------------


def child_setup(hf_deps=None, transformers_src=None, front=()):
    """A child's imports: `front` paths first on sys.path, then this folder (the oracle's modules),
    `hf_deps` (if a folder) last; the torchvision stub; torch on one thread; with
    `transformers_src`, the oracle's transformers tree.  Returns (fsdp2_cpu, torch, oracle)."""
    if hf_deps and os.path.isdir(hf_deps) and hf_deps not in sys.path:
        sys.path.append(hf_deps)
    for path in front:
        sys.path.insert(0, path)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import fsdp2_cpu  # (torchvision stub, stream reader)

    fsdp2_cpu._stub_torchvision()
    import torch

    import oracle

    torch.set_num_threads(1)
    if transformers_src is not None:
        oracle.HF_SRC["path"] = transformers_src
    return fsdp2_cpu, torch, oracle


def settle_work_wait(torch, seconds: float) -> None:
    """`Work.wait()` sleeps `seconds` after returning (0: unchanged): a gloo Work frees its tensors
    on its worker thread otherwise, which the profiler does not record."""
    if seconds > 0:
        Work = torch._C._distributed_c10d.Work
        orig_wait = Work.wait

        def wait_then_settle(self, *a, **k):
            r = orig_wait(self, *a, **k)
            time.sleep(seconds)
            return r

        Work.wait = wait_then_settle


class Marks:
    """Segment and phase labels in the profiler's stream: each mark is one `aten::is_set_to` on a
    1-element tensor (oracle.MARK_OP), its label kept in `labels`, only while `on`.  Phases form a
    stack (`enter`/`leave`; a label reads `outer/inner`); `segment` starts a new one."""

    def __init__(self, torch, oracle):
        self.labels: List[Tuple[str, str]] = []
        self._tensor = torch.zeros(1)
        oracle.MARK_OP = "aten::is_set_to"
        self.on = False
        self.stack: List[str] = []

    def mark(self, kind: str, value: str) -> None:
        if self.on:
            self.labels.append((kind, value))
            self._tensor.is_set_to(self._tensor)

    def segment(self, name: str) -> None:
        self.stack.clear()
        self.mark("segment", name)

    def enter(self, lab: str) -> None:
        self.stack.append(lab)
        self.mark("phase", "/".join(self.stack))

    def leave(self) -> None:
        self.stack.pop()
        self.mark("phase", "/".join(self.stack) if self.stack else "-")

    def wrap(self, obj, meth: str, label: str) -> bool:
        """Marks `label` (entered, left on return) around `obj.meth` if it exists."""
        orig = getattr(obj, meth, None)
        if orig is None or not callable(orig):
            return False

        def wrapped(*a, **k):
            self.enter(label)
            try:
                return orig(*a, **k)
            finally:
                self.leave()

        setattr(obj, meth, wrapped)
        return True


def storages(tensors) -> Dict[int, int]:
    """{storage data_ptr: nbytes} of the tensors (None and non-tensors skipped, empty storages too)."""
    import torch

    seen: Dict[int, int] = {}
    for t in tensors:
        if t is None or not torch.is_tensor(t):
            continue
        st = t.untyped_storage()
        if st.nbytes() and st.data_ptr():
            seen[st.data_ptr()] = st.nbytes()
    return seen


def first_role_wins(roles: dict) -> dict:
    """{role: {ptr: nbytes}} with a storage seen under several roles kept under the first only."""
    seen = set()
    for k in list(roles):
        roles[k] = {p: n for p, n in roles[k].items() if p not in seen}
        seen.update(roles[k])
    return roles


def marked_steps(marks: Marks, steps: int, inventory, one_step, before=None) -> Dict[int, dict]:
    """Steps 1..steps, each in segment step<s> followed by after<s>: `before()` (if given), a gc,
    `inventory()` (the roles held before the step), `one_step()`, a gc.  Returns the inventories."""
    import gc

    comps = {}
    for s in range(1, steps + 1):
        if before is not None:
            before()
        gc.collect()
        comps[s] = inventory()
        marks.segment(f"step{s}")
        one_step()
        gc.collect()
        marks.segment(f"after{s}")
    return comps


# --------------------------------------------------------------------------------------------
# child: reading the allocation stream (fsdp2_cpu.read_stream's events)
# --------------------------------------------------------------------------------------------


def lost_frees(stream: List[dict]) -> List[dict]:
    """Blocks allocated at an address that was still live: their free was lost (it ran on a thread
    the profiler does not see)."""
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
    return lost


def timeline(evs: List[dict], start: int) -> List[list]:
    """Per run of one phase label: [label, live at entry, max live, live at exit], counted from `start`."""
    rows = []
    cur = start
    for e in evs:
        lab = e["phase"]
        if not rows or rows[-1][0] != lab:
            rows.append([lab, cur, cur, cur])
        cur += e["bytes"]
        rows[-1][2] = max(rows[-1][2], cur)
        rows[-1][3] = cur
    return rows


def role_steps(stream: List[dict], comps: Dict[int, dict], steps: int, measured: int, traces: Optional[str] = None, case_id=None, rank=None) -> "OrderedDict":
    """Per step s (1..steps), from the stream and `comps[s]` ({role: {ptr: nbytes}} taken before the
    step; the first role of a storage wins): baseline (live before the step) by role and the rest
    (`unattributed`), live peak, live at the end, peak phase, events; for step `measured` also the
    timeline and the composition of the peak (before-step blocks by role; the step's blocks by
    phase and op, and the collective if the stream names one), and with `traces` the step's
    events written to traces/<case_id>.r<rank>.json."""
    import fsdp2_cpu

    out = OrderedDict()
    for s in range(1, steps + 1):
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
        if s == measured:
            evs = [e for e in stream if e["segment"] == name]
            c["timeline"] = timeline(evs, c["baselineBytes"])
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
                    k = f"{e['phase']} :: {e['op']}" + (f" in {e['collective']}" if e.get("collective") else "")
                    a = inst.setdefault(k, {"bytes": 0, "blocks": 0})
                    a["bytes"] += e["bytes"]
                    a["blocks"] += 1
            c["peakComposition"] = {"fromBeforeStep": before, "allocatedInStep": [dict(at=k, **v) for k, v in sorted(inst.items(), key=lambda kv: -kv[1]["bytes"])]}
            if traces:
                os.makedirs(traces, exist_ok=True)
                with open(os.path.join(traces, f"{case_id}.r{rank}.json"), "w") as fh:
                    json.dump({"id": case_id, "rank": rank, "baselineBytes": c["baselineBytes"],
                               "events": [{k: e[k] for k in ("phase", "op", "top", "bytes", "ptr") if e.get(k) is not None} for e in evs]}, fh, separators=(",", ":"))
        out[name] = c
    return out


def peak_without_backend_temps(stream: List[dict], name: str, is_backend: Callable[[dict], bool]) -> int:
    """Step `name`'s highest live delta without the process-group backend's own temporaries: blocks
    allocated inside a c10d:: / gloo: op (`is_backend(event)`; gloo's all-gather and reduce-scatter
    stage full-size copies on CPU, NCCL writes into the caller's buffers) and their frees, from the
    start of the stream to the step's end."""
    backend_ptrs_live: Dict[int, bool] = {}
    cur = mx = 0
    started = False
    for e in stream:
        if e["segment"] == name:
            started = True
        elif started:
            break
        if e["bytes"] > 0 and is_backend(e):
            backend_ptrs_live[e["ptr"]] = True
            continue
        if e["bytes"] < 0 and backend_ptrs_live.pop(e["ptr"], False):
            continue
        if started:
            cur += e["bytes"]
            mx = max(mx, cur)
    return mx


def steady_check(steps: dict, last: int, measured: int) -> dict:
    """Whether step `last` repeats step `measured`'s live peak and baseline."""
    meas, sl = steps[f"step{measured}"], steps[f"step{last}"]
    return {"step": last, "livePeakBytes": sl["livePeakBytes"], "baselineBytes": sl["baselineBytes"],
            "same": sl["livePeakBytes"] == meas["livePeakBytes"] and sl["baselineBytes"] == meas["baselineBytes"]}


def steps_summary(steps: dict, keys) -> "OrderedDict":
    return OrderedDict((k, {kk: v[kk] for kk in keys}) for k, v in steps.items())
