#!/usr/bin/python3
"""Checks the generated fixtures against shared/reference/pytorch_reference.json.

    /usr/bin/python3 tools/oracle/verify_reference.py [--fixtures test/fixtures/pytorch]
                                                      [--reference PATH]

Prints one line per reference figure (expected, got, difference) and exits 1 when a figure is
off by more than its tolerance (exact for counts and saved bytes, 4 KiB for the profiler peak).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys

CANDIDATES = [
    os.path.join("shared", "reference", "pytorch_reference.json"),
    os.path.join("..", "shared", "reference", "pytorch_reference.json"),
    "/work/shared/reference/pytorch_reference.json",
]


def load_fixtures(folder: str):
    out = []
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        with open(path) as f:
            out.append(json.load(f))
    return out


def find(fixtures, **want):
    for fx in fixtures:
        c = fx["case"]
        ok = True
        for k, v in want.items():
            if k == "input":
                ok &= c.get("input") == v
            elif k == "mode":
                ok &= c.get("mode", "train") == v
            else:
                ok &= c.get(k, {"widthMult": 1.0, "dropout": 0.2}.get(k)) == v
        if ok:
            return fx
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures", default=os.path.join("test", "fixtures", "pytorch"))
    ap.add_argument("--reference", default=None)
    args = ap.parse_args(argv)
    ref_path = args.reference or next((p for p in CANDIDATES if os.path.exists(p)), None)
    if ref_path is None:
        print("pytorch_reference.json not found; pass --reference")
        return 2
    with open(ref_path) as f:
        ref = json.load(f)
    fixtures = load_fixtures(args.fixtures)
    failures = 0
    lines = []

    def check(label, expected, got, tol=0):
        nonlocal failures
        if got is None:
            lines.append(f"MISSING  {label}: expected {expected}, no fixture")
            failures += 1
            return
        diff = got - expected
        ok = abs(diff) <= tol
        failures += 0 if ok else 1
        lines.append(f"{'ok  ' if ok else 'FAIL'}     {label}: expected {expected:,} got {got:,} (diff {diff:+,})")

    for row in ref["mobilenet_v3"]:
        base = {"model": row["model"], "numClasses": row["numClasses"], "widthMult": 1.0}
        name = f"{row['model']} {row['numClasses']} cls"
        if "input" not in row:
            fx = find(fixtures, **base)
            check(f"{name} params", row["params"], fx and fx["params"]["total"])
            check(f"{name} buffer elements", row["buffers"], fx and fx["bufferElements"])
            continue
        fx = find(fixtures, input=row["input"], mode="train", **base)
        if "savedBytes" in row:
            check(f"{name} {row['input']} savedBytes (train)", row["savedBytes"], fx and fx["saved"]["bytes"])
        if "cpuPeakBytes" in row:
            t = fx and fx.get("train", {}).get(row["optimizer"])
            ex = (t["bufferBytes"] + t["optimizerStepTensorBytes"]) if t else 0
            check(f"{name} {row['input']} {row['optimizer']} paramBytes", row["paramBytes"], t and t["paramBytes"])
            check(
                f"{name} {row['input']} {row['optimizer']} optimizerStateBytes (without step tensors)",
                row["optimizerStateBytes"],
                t and t["optimizerStateBytes"] - t["optimizerStepTensorBytes"],
            )
            check(
                f"{name} {row['input']} {row['optimizer']} baselineBytes (without buffers, step tensors)",
                row["baselineBytes"],
                t and t["baselineBytes"] - ex,
            )
            check(
                f"{name} {row['input']} {row['optimizer']} cpuPeakBytes = peakBytes - buffers - step tensors",
                row["cpuPeakBytes"],
                t and t["peakBytes"] - ex,
                tol=4096,
            )
    for line in lines:
        print(line)
    print(f"{len(lines) - failures} ok, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
