#!/usr/bin/env python3
"""The oracle's cases on a CUDA GPU with PyTorch 2.x: what the caching allocator reports.

Run on a machine with a CUDA GPU, from the repository root:

    python3 tools/measure_cuda.py [--cases tools/oracle/cases.json] [--only ID,...]
                                  [--out test/fixtures/cuda] [--max-seconds 420] [--skip-large]

For each case it writes <out>/<id>.json with:
  env: GPU name, total memory, torch / CUDA / cuDNN versions
  params, saved.bytes            (saved_tensors_hooks, distinct storages, parameters excluded)
  train.<optimizer>:             the third training step (zero_grad(set_to_none=True), forward,
                                 loss, backward, step), after torch.cuda.reset_peak_memory_stats():
                                 baselineAllocated, maxAllocated, maxReserved (torch.cuda.*)
  inference:                     a torch.no_grad() forward: baselineAllocated, maxAllocated,
                                 maxReserved
The model builders, inputs, optimizers and loss are the CPU oracle's own (tools/oracle/oracle.py),
so both measure the same programs. It stops starting new cases after --max-seconds.

`--dry-run` checks that every case builds and runs on the CPU, without CUDA figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "oracle"))

import torch  # noqa: E402

import oracle  # noqa: E402  (builders, inputs, optimizers, loss, saved-bytes measurement)


def to_device(case, model, x, y, device):
    model = model.to(device)
    return model, x.to(device), (y.to(device) if y is not x else x.to(device))


def env_info(device) -> dict:
    info = {"torch": torch.__version__, "device": str(device)}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(
            gpu=props.name,
            totalMemory=props.total_memory,
            cuda=torch.version.cuda,
            cudnn=torch.backends.cudnn.version(),
            capability=f"{props.major}.{props.minor}",
        )
    return info


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


def measure_train(case, name, device) -> dict:
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
    train_step(case, model, opt, x, y)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    result = {"baselineAllocated": base, **peaks(device), "endAllocated": allocated(device)}
    del opt, model, x, y
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def measure_inference(case, device) -> dict:
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
    result = {"baselineAllocated": base, **peaks(device)}
    del model, x
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def measure_saved(case, device) -> int:
    model = oracle.build_model(case)
    x, y = oracle.make_inputs(case, model)
    model, x, y = to_device(case, model, x, y, device)
    oracle.set_mode(model, case)
    saved, _ = oracle.measure_saved(case, model, x, y)
    return saved["bytes"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=os.path.join(HERE, "oracle", "cases.json"))
    ap.add_argument("--only", default="")
    ap.add_argument("--out", default="test/fixtures/cuda")
    ap.add_argument("--max-seconds", type=float, default=420.0)
    ap.add_argument("--skip-large", action="store_true", help="skip inputs over 10 M elements")
    ap.add_argument("--dry-run", action="store_true", help="run on the CPU, check that every case works")
    args = ap.parse_args(argv)

    device = torch.device("cpu" if args.dry_run else "cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device; use --dry-run to check the cases on the CPU", file=sys.stderr)
        return 2
    cases = json.load(open(args.cases))
    only = {s for s in args.only.split(",") if s}
    os.makedirs(args.out, exist_ok=True)
    start = time.time()
    done = 0
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
        record = {
            "id": case["id"],
            "case": case,
            "generatedBy": "tools/measure_cuda.py",
            "command": f"python3 tools/measure_cuda.py --only {case['id']}",
            "env": env_info(device),
            "saved": {"bytes": measure_saved(case, device)},
            "train": {name: measure_train(case, name, device) for name in case.get("optimizers", [])},
            "inference": measure_inference(case, device),
        }
        record["seconds"] = round(time.time() - t0, 2)
        if not args.dry_run:
            with open(os.path.join(args.out, f"{case['id']}.json"), "w") as f:
                json.dump(record, f, indent=1)
        done += 1
        print(f"{case['id']}: {record['seconds']} s", flush=True)
    print(f"{done} cases in {time.time() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
