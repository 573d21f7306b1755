#!/usr/bin/env python3
"""The oracle's cases on a CUDA GPU with PyTorch 2.x: what the caching allocator reports.

Run on a machine with a CUDA GPU, from the repository root:

    python3 tools/measure_cuda.py [--cases tools/oracle/cases.json] [--only ID,...]
                                  [--out test/fixtures/cuda] [--max-seconds 420] [--skip-large]

For each case it writes <out>/<id>.json with:
  env: GPU name, total memory, torch / CUDA / cuDNN versions
  params, saved.bytes            (saved_tensors_hooks, distinct storages, parameters excluded;
                                 saved.storages: each storage with the op and autograd attribute
                                 that saved it)
  train.<optimizer>:             the third training step (zero_grad(set_to_none=True), forward,
                                 loss, backward, step), after torch.cuda.reset_peak_memory_stats():
                                 baselineAllocated, maxAllocated, maxReserved (torch.cuda.*);
                                 allocatedBeforeBuild: what was still allocated after gc and
                                 empty_cache before the model was built (0 for a clean start)
  inference:                     a torch.no_grad() forward: baselineAllocated, maxAllocated,
                                 maxReserved
The model builders, inputs, optimizers and loss are the CPU oracle's own (tools/oracle/oracle.py),
so both measure the same programs. It stops starting new cases after --max-seconds.

`--dry-run` checks that every case builds and runs on the CPU, without CUDA figures.
`--trace-ids A,B` also records the caching allocator's event history of the measured training
step of those cases (torch.cuda.memory._record_memory_history) into <out>/traces/<id>.json:
every alloc/free with its size and the innermost Python frames, to compare event by event.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "oracle"))

import torch  # noqa: E402
from cuda_env import cuda_properties  # noqa: E402  (tools/cuda_env.py)

import oracle  # noqa: E402  (builders, inputs, optimizers, loss, saved-bytes measurement)


def to_device(case, model, x, y, device):
    model = model.to(device)
    return model, x.to(device), (y.to(device) if y is not x else x.to(device))


def env_info(device) -> dict:
    info = {"torch": torch.__version__, "device": str(device)}
    if device.type == "cuda":
        info.update(cuda_properties(torch, device))
    return info


def probe_runtime(device) -> dict:
    """What the runtime takes beside tensors, measured: the CUDA context (device memory in use
    that the caching allocator did not reserve) and the cuBLAS workspace (allocated by the
    first matmul through PyTorch's allocator, beyond its output)."""
    torch.cuda.init()
    probe = torch.zeros(1, device=device)
    torch.cuda.synchronize(device)
    free, total = torch.cuda.mem_get_info(device)
    context = total - free - torch.cuda.memory_reserved(device)
    a = torch.ones(64, 64, device=device)
    before = torch.cuda.memory_allocated(device)
    c = a @ a
    torch.cuda.synchronize(device)
    workspace = torch.cuda.memory_allocated(device) - before - c.numel() * c.element_size()
    del a, c, probe
    # A warm-up training step of a conv + linear model: the backward thread gets its own
    # cuBLAS handle and workspace, cuDNN its handle. What stays allocated afterwards is the
    # runtime's, present before every case (each fixture's allocatedBeforeBuild).
    warm = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Flatten(), torch.nn.LazyLinear(4)).to(device)
    inputs = torch.randn(2, 3, 8, 8, device=device)
    warm(inputs).sum().backward()
    torch.cuda.synchronize(device)
    del warm, inputs
    persistent = clean(device)
    return {"contextBytes": int(context), "cublasWorkspaceAllocated": int(workspace), "persistentAfterWarmup": int(persistent), "total": int(total)}


def clean(device) -> int:
    """Frees what earlier measurements left (autograd graphs in reference cycles) and returns
    what is still allocated: 0 when the next measurement starts from an empty device."""
    gc.collect()
    if device.type != "cuda":
        return 0
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    return torch.cuda.memory_allocated(device)


def allocated(device) -> int:
    return torch.cuda.memory_allocated(device) if device.type == "cuda" else 0


def peaks(device) -> dict:
    if device.type != "cuda":
        return {}
    return {"maxAllocated": torch.cuda.max_memory_allocated(device), "maxReserved": torch.cuda.max_memory_reserved(device)}


def train_step(case, model, opt, x, y):
    opt.zero_grad(set_to_none=True)
    loss, out = oracle.run_forward(case, model, x, y, with_loss=True)
    del out
    loss.backward()
    opt.step()
    del loss


def frames_of(entry) -> list:
    out = []
    for frame in entry.get("frames", []) or []:
        name = frame.get("filename", "")
        if "/torch/" in name and "/torch/nn/modules/" not in name and "/torch/optim/" not in name:
            continue
        out.append(f"{frame.get('name')}@{os.path.basename(name)}:{frame.get('line')}")
        if len(out) == 3:
            break
    return out


def start_history(device) -> bool:
    try:
        torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python", max_entries=200_000)
        return True
    except Exception as error:  # noqa: BLE001 (older signatures)
        print(f"memory history unavailable: {error}", file=sys.stderr)
        return False


def stop_history(device) -> list:
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    index = device.index if device.index is not None else torch.cuda.current_device()
    traces = snapshot.get("device_traces", [])
    events = traces[index] if index < len(traces) else []
    return [{"action": e.get("action"), "addr": e.get("addr"), "size": e.get("size"), "frames": frames_of(e)} for e in events]


def measure_train(case, name, device, history=None) -> dict:
    left = clean(device)
    model = oracle.build_model(case)
    x, y = oracle.make_inputs(case, model)
    model, x, y = to_device(case, model, x, y, device)
    oracle.set_mode(model, case)
    opt = oracle.make_optimizer(name, oracle.unique_params(model))
    train_step(case, model, opt, x, y)
    train_step(case, model, opt, x, y)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    base = allocated(device)
    recording = history is not None and device.type == "cuda" and start_history(device)
    train_step(case, model, opt, x, y)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    result = {"allocatedBeforeBuild": left, "baselineAllocated": base, **peaks(device), "endAllocated": allocated(device)}
    if recording:
        history[name] = stop_history(device)
    del opt, model, x, y
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def measure_inference(case, device) -> dict:
    left = clean(device)
    model = oracle.build_model(case)
    x, y = oracle.make_inputs(case, model)
    model, x, _ = to_device(case, model, x, y, device)
    oracle.set_mode(model, case)
    with torch.no_grad():
        oracle.run_forward(case, model, x, None, with_loss=False)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
        base = allocated(device)
        out = oracle.run_forward(case, model, x, None, with_loss=False)
        del out
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    result = {"allocatedBeforeBuild": left, "baselineAllocated": base, **peaks(device)}
    del model, x
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def measure_saved(case, device) -> dict:
    """Saved bytes and, per distinct storage, what saved it (the CPU oracle's record)."""
    clean(device)
    model = oracle.build_model(case)
    x, y = oracle.make_inputs(case, model)
    model, x, y = to_device(case, model, x, y, device)
    oracle.set_mode(model, case)
    saved, _ = oracle.measure_saved(case, model, x, y)
    keep = ("bytes", "includesLoss", "lossBytes", "byTopModule", "storages")
    return {k: saved[k] for k in keep if k in saved}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=os.path.join(HERE, "oracle", "cases.json"))
    ap.add_argument("--only", default="")
    ap.add_argument("--out", default="test/fixtures/cuda")
    ap.add_argument("--max-seconds", type=float, default=420.0)
    ap.add_argument("--skip-large", action="store_true", help="skip inputs over 10 M elements")
    ap.add_argument("--dry-run", action="store_true", help="run on the CPU, check that every case works")
    ap.add_argument("--trace-ids", default="", help="cases whose measured training step's allocator history is recorded")
    args = ap.parse_args(argv)

    device = torch.device("cpu" if args.dry_run else "cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device; use --dry-run to check the cases on the CPU", file=sys.stderr)
        return 2
    cases = json.load(open(args.cases))
    only = {s for s in args.only.split(",") if s}
    trace_ids = {s for s in args.trace_ids.split(",") if s}
    os.makedirs(args.out, exist_ok=True)
    start = time.time()
    done = 0
    if device.type == "cuda":
        runtime = {"env": env_info(device), **probe_runtime(device)}
        with open(os.path.join(args.out, "runtime.json"), "w") as f:
            json.dump(runtime, f, indent=1)
        print(f"runtime: {runtime}", flush=True)
    for case in cases:
        if only and case["id"] not in only:
            continue
        numel = 1
        for d in case["input"]:
            numel *= d
        if args.skip_large and numel > 10_000_000:
            continue
        if time.time() - start > args.max_seconds:
            print(f"time bound reached after {done} cases", flush=True)
            break
        t0 = time.time()
        history = {} if case["id"] in trace_ids else None
        record = {
            "id": case["id"],
            "case": case,
            "generatedBy": "tools/measure_cuda.py",
            "command": f"python3 tools/measure_cuda.py --only {case['id']}",
            "env": env_info(device),
            "params": {"total": sum(p.numel() for p in oracle.unique_params(oracle.build_model(case)))},
            "saved": measure_saved(case, device),
            "train": {name: measure_train(case, name, device, history) for name in case.get("optimizers", [])},
            "inference": measure_inference(case, device),
        }
        record["seconds"] = round(time.time() - t0, 2)
        if not args.dry_run:
            with open(os.path.join(args.out, f"{case['id']}.json"), "w") as f:
                json.dump(record, f, indent=1)
            if history:
                os.makedirs(os.path.join(args.out, "traces"), exist_ok=True)
                with open(os.path.join(args.out, "traces", f"{case['id']}.json"), "w") as f:
                    json.dump({"id": case["id"], "env": record["env"], "steps": history}, f)
        done += 1
        print(f"{case['id']}: {record['seconds']} s", flush=True)
    print(f"{done} cases in {time.time() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
