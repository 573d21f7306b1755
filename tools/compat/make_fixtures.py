#!/usr/bin/python3
"""Regenerate the torchsummary / torchinfo compatibility fixtures.

This script drives the *real* tools (it never re-implements them) and writes
one text file per case plus ``index.json`` into ``test/fixtures/compat/``.
The tools themselves are not part of this repository: extract them from their
git repositories into a scratch folder and pass the folders on the command
line (see ``tools/compat/README.md``).

Run with the Debian interpreter that has PyTorch 1.13 + torchvision 0.14::

    /usr/bin/python3 tools/compat/make_fixtures.py \
        --torchsummary /tmp/torchsummary \
        --torchsummary-v151 /tmp/torchsummary-1.5.1 \
        --torchinfo /tmp/torchinfo

Options ``--only ID[,ID...]`` and ``--skip-huge`` limit what is regenerated;
``--check`` compares against the files on disk instead of writing them.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import io
import json
import os
import sys
import time
import warnings

# Commits the committed fixtures were produced with (see README.md).
TORCHSUMMARY_MASTER_COMMIT = "345d898d84507b848e92dab4629e03405e19afce"
TORCHSUMMARY_V151_COMMIT = "b50f213f38544ac337beeeda93b03c7e48e69c78"
TORCHINFO_COMMIT = "5c4164f1e2e185ce33c597dbe00535bf8ed2b930"

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUT = os.path.join(REPO_ROOT, "test", "fixtures", "compat")


# --------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------

def build_models():
    """Imported lazily so that --help works without torch."""
    import torch
    from torch import nn
    from torchvision.models import mobilenet_v3_large, mobilenet_v3_small

    arch_fn = {"mobilenet_v3_small": mobilenet_v3_small, "mobilenet_v3_large": mobilenet_v3_large}

    class PlantDiseaseClassifier(nn.Module):
        """The wrapper from the user's seed (generalised to pick the arch/width)."""

        def __init__(self, num_classes=3, arch="mobilenet_v3_small", width_mult=1.0):
            super().__init__()
            self.base_model = arch_fn[arch](weights=None, width_mult=width_mult)
            in_features = self.base_model.classifier[3].in_features
            self.base_model.classifier[3] = nn.Linear(in_features, num_classes)

        def forward(self, x):
            return self.base_model(x)

    def mobilenet(name, num_classes, width_mult, wrapped):
        if wrapped:
            return PlantDiseaseClassifier(num_classes, name, width_mult)
        return arch_fn[name](weights=None, num_classes=num_classes, width_mult=width_mult)

    def tiny_conv():
        return nn.Sequential(
            nn.Conv2d(3, 16, 3, 2, 1, bias=False),
            nn.BatchNorm2d(16),
            nn.Hardswish(inplace=True),
            nn.Conv2d(16, 8, 1),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(8, 10),
        )

    def tiny_mixed():
        return nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.ReLU6(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(16),
            nn.SiLU(inplace=True),
            nn.Dropout(0.5),
            nn.Conv2d(16, 4, 1),
            nn.Sigmoid(),
            nn.Flatten(),
            nn.Linear(4 * 16 * 12, 32),
            nn.Tanh(),
            nn.Linear(32, 5),
            nn.GELU(),
        )

    def tiny_shared():
        # One Linear instance called twice: exercises repeated rows,
        # torchsummary's double counting and torchinfo's "(recursive)".
        shared = nn.Linear(16, 16)
        return nn.Sequential(nn.Flatten(), nn.Linear(48, 16), nn.ReLU(), shared, nn.ReLU(), shared)

    def tiny_frozen():
        # tiny_conv with the first Conv2d and the BatchNorm frozen.
        m = tiny_conv()
        for p in m[0].parameters():
            p.requires_grad_(False)
        for p in m[1].parameters():
            p.requires_grad_(False)
        return m

    def f32_conv():
        # One 1x1 conv on an odd-sized image: torchsummary master's float32
        # total prints 145.32 where float64 arithmetic (v1.5.1) prints 145.33.
        return nn.Sequential(nn.Conv2d(3, 8, 1))

    def tie_linear_ts():
        # 32,768 params -> Params size exactly 0.125 MiB: '%0.2f' gives 0.12
        # (half-even on an exact tie), JavaScript's toFixed(2) would give 0.13.
        return nn.Sequential(nn.Linear(255, 128))

    def tie_linear_ti():
        # 281,250 params -> 1,125,000 bytes = exactly 1.125 MB: torchinfo prints 1.12.
        return nn.Sequential(nn.Linear(1124, 250))

    tiny = {
        "f32_conv": f32_conv,
        "tie_linear_ts": tie_linear_ts,
        "tie_linear_ti": tie_linear_ti,
        "tiny_conv": tiny_conv,
        "tiny_mixed": tiny_mixed,
        "tiny_shared": tiny_shared,
        "tiny_frozen": tiny_frozen,
    }

    def make(model_spec):
        torch.manual_seed(0)
        name = model_spec["name"]
        if name in tiny:
            return tiny[name]()
        return mobilenet(name, model_spec["numClasses"], model_spec["widthMult"], model_spec["wrapped"])

    return make


TINY_DEFINITIONS = {
    "tiny_conv": (
        "nn.Sequential(Conv2d(3,16,3,2,1,bias=False), BatchNorm2d(16), Hardswish(inplace=True), "
        "Conv2d(16,8,1), ReLU(inplace=True), AdaptiveAvgPool2d(1), Flatten(), Linear(8,10))"
    ),
    "tiny_mixed": (
        "nn.Sequential(Conv2d(3,8,3,padding=1), ReLU6(inplace=True), MaxPool2d(2), "
        "Conv2d(8,16,3,stride=2,padding=1,bias=False), BatchNorm2d(16), SiLU(inplace=True), "
        "Dropout(0.5), Conv2d(16,4,1), Sigmoid(), Flatten(), Linear(768,32), Tanh(), "
        "Linear(32,5), GELU())"
    ),
    "tiny_shared": (
        "shared = Linear(16,16); nn.Sequential(Flatten(), Linear(48,16), ReLU(), shared, ReLU(), shared)"
    ),
    "tiny_frozen": (
        "tiny_conv with requires_grad=False on every parameter of layer 0 (Conv2d) and layer 1 (BatchNorm2d)"
    ),
}
TINY_DEFINITIONS.update({
    "f32_conv": "nn.Sequential(Conv2d(3,8,1))",
    "tie_linear_ts": "nn.Sequential(Linear(255,128))  # 32,768 params",
    "tie_linear_ti": "nn.Sequential(Linear(1124,250))  # 281,250 params",
})
TINY_CLASSES = {"f32_conv": 8, "tie_linear_ts": 128, "tie_linear_ti": 250, "tiny_conv": 10, "tiny_mixed": 5, "tiny_shared": 16, "tiny_frozen": 10}


# --------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------

def mn(name, num_classes, width_mult=1.0, wrapped=False):
    return {"name": name, "numClasses": num_classes, "widthMult": width_mult, "wrapped": wrapped}


def tiny_model(name):
    return {
        "name": name,
        "numClasses": TINY_CLASSES[name],
        "widthMult": None,
        "wrapped": False,
        "definition": TINY_DEFINITIONS[name],
    }


S, L = "mobilenet_v3_small", "mobilenet_v3_large"


def short(model):
    if model["name"] in TINY_DEFINITIONS:
        return model["name"]
    arch = "small" if model["name"] == S else "large"
    w = "" if model["widthMult"] == 1.0 else "_w%03d" % round(model["widthMult"] * 100)
    return "%s_%dcls%s%s" % (arch, model["numClasses"], w, "_wrapped" if model["wrapped"] else "")


def ts_case(model, input_size, batch_size=None, tool="torchsummary", huge=False, note=None):
    tag = "torchsummary" if tool == "torchsummary" else "torchsummary151"
    dims = input_size[1:] if len(input_size) == 3 else input_size  # CHW -> "HxW"
    cid = "%s_%s_%s" % (tag, short(model), "x".join(str(d) for d in dims))
    args = {"input_size": list(input_size), "device": "cpu"}
    if batch_size is not None:
        args["batch_size"] = batch_size
        cid += "_bs%d" % batch_size
    case = {"id": cid, "tool": tool, "model": model, "inputSize": list(input_size), "call": args}
    if huge:
        case["huge"] = True
    if note:
        case["note"] = note
    return case


def ti_case(model, input_size, depth=None, col_names=None, note=None):
    cid = "torchinfo_%s_%s" % (short(model), "x".join(str(d) for d in input_size))
    args = {"input_size": list(input_size)}
    if depth is not None:
        args["depth"] = depth
    if col_names is not None:
        args["col_names"] = list(col_names)
        cid += "_depth%d_cols" % depth
    case = {"id": cid, "tool": "torchinfo", "model": model, "inputSize": list(input_size), "call": args}
    if note:
        case["note"] = note
    return case


def all_cases():
    c = []
    # ---- torchsummary, master -------------------------------------------
    c.append(ts_case(mn(S, 3), (3, 224, 224), note="byte-identical to the user's reference torchsummary_mobilenet_v3_small_3cls_224x224.txt"))
    c.append(ts_case(mn(S, 3, wrapped=True), (3, 224, 224), note="master hooks the root module too: last row is PlantDiseaseClassifier-163"))
    c.append(ts_case(mn(S, 1000), (3, 224, 224)))
    c.append(ts_case(mn(S, 3, 0.75), (3, 224, 224)))
    c.append(ts_case(mn(S, 1000, 0.75, wrapped=True), (3, 299, 299)))
    c.append(ts_case(mn(S, 3), (3, 321, 241)))
    c.append(ts_case(mn(S, 1000), (3, 224, 224), batch_size=4))
    c.append(ts_case(mn(S, 3), (3, 4000, 2672), huge=True, note="byte-identical to the user's reference torchsummary_mobilenet_v3_small_3cls_4000x2672.txt"))
    c.append(ts_case(mn(L, 1000), (3, 224, 224)))
    c.append(ts_case(mn(L, 3, wrapped=True), (3, 224, 224)))
    c.append(ts_case(mn(L, 1000), (3, 299, 299)))
    c.append(ts_case(mn(L, 3, 0.75), (3, 321, 241)))
    c.append(ts_case(tiny_model("tiny_conv"), (3, 32, 32)))
    c.append(ts_case(tiny_model("tiny_mixed"), (3, 64, 48)))
    c.append(ts_case(tiny_model("tiny_shared"), (3, 4, 4)))
    c.append(ts_case(tiny_model("tiny_frozen"), (3, 32, 32)))
    c.append(ts_case(tiny_model("f32_conv"), (3, 1415, 1417), note="Estimated Total Size is summed in float32: 145.32 (float64 would give 145.33, see the torchsummary@1.5.1 twin)"))
    c.append(ts_case(tiny_model("tie_linear_ts"), (255,), note="Params size is exactly 0.125 MiB and prints 0.12 (round-half-even)"))
    # ---- torchsummary 1.5.1 (the PyPI release; skips the root module) ----
    v151 = "torchsummary@1.5.1"
    c.append(ts_case(mn(S, 3, wrapped=True), (3, 224, 224), tool=v151, note="the seed's exact setup (pip install torchsummary); byte-identical to the user's reference torchsummary_mobilenet_v3_small_3cls_224x224.txt"))
    c.append(ts_case(mn(S, 3), (3, 224, 224), tool=v151, note="unwrapped: no MobileNetV3 row"))
    c.append(ts_case(mn(L, 1000), (3, 224, 224), batch_size=4, tool=v151))
    c.append(ts_case(tiny_model("f32_conv"), (3, 1415, 1417), tool=v151, note="float64 arithmetic: 145.33 where master prints 145.32"))
    # ---- torchinfo ------------------------------------------------------
    c.append(ti_case(mn(S, 3), (1, 3, 224, 224), note="byte-identical to the user's reference torchinfo_mobilenet_v3_small_3cls_1x3x224x224.txt"))
    c.append(ti_case(mn(S, 3), (4, 3, 224, 224)))
    c.append(ti_case(mn(S, 3), (1, 3, 321, 241)))
    c.append(ti_case(mn(S, 1000), (1, 3, 224, 224)))
    c.append(ti_case(mn(S, 1000), (4, 3, 321, 241)))
    c.append(ti_case(mn(S, 3, 0.75), (1, 3, 224, 224)))
    c.append(ti_case(mn(S, 3, wrapped=True), (1, 3, 224, 224)))
    c.append(ti_case(mn(L, 1000), (1, 3, 224, 224)))
    c.append(ti_case(mn(L, 3), (4, 3, 224, 224)))
    c.append(ti_case(mn(L, 3), (1, 3, 321, 241)))
    c.append(ti_case(mn(S, 3), (1, 3, 224, 224), depth=10, col_names=("input_size", "output_size", "num_params", "mult_adds")))
    c.append(ti_case(tiny_model("tiny_conv"), (1, 3, 32, 32)))
    c.append(ti_case(tiny_model("tiny_mixed"), (2, 3, 64, 48)))
    c.append(ti_case(tiny_model("tiny_shared"), (2, 3, 4, 4)))
    c.append(ti_case(tiny_model("tiny_frozen"), (1, 3, 32, 32)))
    c.append(ti_case(tiny_model("tie_linear_ti"), (1, 1124), note="Params size is exactly 1.125 MB and prints 1.12 (round-half-even)"))
    reference = {
        "torchsummary_small_3cls_224x224": "torchsummary_mobilenet_v3_small_3cls_224x224.txt",
        "torchsummary151_small_3cls_wrapped_224x224": "torchsummary_mobilenet_v3_small_3cls_224x224.txt",
        "torchsummary_small_3cls_4000x2672": "torchsummary_mobilenet_v3_small_3cls_4000x2672.txt",
        "torchinfo_small_3cls_1x3x224x224": "torchinfo_mobilenet_v3_small_3cls_1x3x224x224.txt",
    }
    for x in c:
        if x["id"] in reference:
            x["sameBytesAs"] = "shared/reference/" + reference[x["id"]]
    ids = [x["id"] for x in c]
    assert len(ids) == len(set(ids)), "duplicate case ids"
    for x in c:
        x["file"] = x["id"] + ".txt"
    return c


def python_call(case):
    a = case["call"]
    if case["tool"] == "torchinfo":
        s = "torchinfo.summary(model, input_size=%s" % (tuple(a["input_size"]),)
        if "depth" in a:
            s += ", depth=%d" % a["depth"]
        if "col_names" in a:
            s += ", col_names=%s" % (tuple(a["col_names"]),)
        return s + ")"
    if case["tool"] == "torchsummary":
        s = "torchsummary.summary_string(model, %s" % (tuple(a["input_size"]),)
    else:
        s = "torchsummary.summary(model, %s" % (tuple(a["input_size"]),)
    if "batch_size" in a:
        s += ", batch_size=%d" % a["batch_size"]
    return s + ", device='cpu')"


# --------------------------------------------------------------------------
# Running the tools
# --------------------------------------------------------------------------

def load_module(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_case(case, make, tools):
    import torch

    model = make(case["model"])
    a = case["call"]
    if case["tool"] == "torchsummary":
        # summary() prints summary_string()'s result with print(), which adds
        # one more "\n" (a blank last line). The fixture is summary_string().
        text, _ = tools["torchsummary"].summary_string(
            model, tuple(a["input_size"]), batch_size=a.get("batch_size", -1), device=torch.device("cpu")
        )
    elif case["tool"] == "torchsummary@1.5.1":
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            tools["torchsummary151"].summary(
                model, tuple(a["input_size"]), batch_size=a.get("batch_size", -1), device="cpu"
            )
        text = buf.getvalue()
    else:
        kwargs = {"input_size": tuple(a["input_size"])}
        if "depth" in a:
            kwargs["depth"] = a["depth"]
        if "col_names" in a:
            kwargs["col_names"] = tuple(a["col_names"])
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):  # verbose=1: print(ModelStatistics)
            tools["torchinfo"].summary(model, **kwargs)
        text = buf.getvalue()
    del model
    gc.collect()
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--torchsummary", required=True, help="folder holding torchsummary/ from sksq96/pytorch-summary master")
    ap.add_argument("--torchsummary-v151", required=True, help="folder holding torchsummary/ from sksq96/pytorch-summary v1.5.1 (b50f213)")
    ap.add_argument("--torchinfo", required=True, help="folder holding torchinfo/ from TylerYep/torchinfo main")
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--only", default="", help="comma-separated case ids")
    ap.add_argument("--skip-huge", action="store_true", help="skip the 4000x2672 torchsummary case (~40 s, ~7 GB RAM)")
    ap.add_argument("--check", action="store_true", help="compare with the files in --out instead of writing")
    opts = ap.parse_args()

    warnings.filterwarnings("ignore")
    sys.path.insert(0, opts.torchinfo)
    import torchinfo  # noqa: E402

    tools = {
        "torchsummary": load_module("torchsummary_master", os.path.join(opts.torchsummary, "torchsummary", "torchsummary.py")),
        "torchsummary151": load_module("torchsummary_v151", os.path.join(opts.torchsummary_v151, "torchsummary", "torchsummary.py")),
        "torchinfo": torchinfo,
    }
    import torch
    import torchvision

    make = build_models()
    cases = all_cases()
    only = {x for x in opts.only.split(",") if x}
    os.makedirs(opts.out, exist_ok=True)
    failures = 0
    for case in cases:
        case["pythonCall"] = python_call(case)
        if only and case["id"] not in only:
            continue
        if opts.skip_huge and case.get("huge"):
            continue
        t0 = time.time()
        text = run_case(case, make, tools)
        path = os.path.join(opts.out, case["file"])
        if opts.check:
            with open(path, encoding="utf-8") as f:
                ok = f.read() == text
            failures += 0 if ok else 1
            print("%-60s %s (%.1f s)" % (case["id"], "same" if ok else "DIFFERENT", time.time() - t0))
        else:
            with open(path, "w", encoding="utf-8", newline="\n") as f:
                f.write(text)
            print("%-60s written (%.1f s)" % (case["id"], time.time() - t0))

    index = {
        "about": (
            "Real outputs of torchsummary and torchinfo, one file per case, made by "
            "tools/compat/make_fixtures.py. Each file holds the exact text the tool emits, ending in one "
            "newline: for torchsummary master it is summary_string()'s result (summary() prints that with "
            "print(), adding a second newline); for torchsummary 1.5.1 and torchinfo it is what summary() "
            "prints to stdout. Model weights are random (irrelevant to the text). Models are in train mode."
        ),
        "environment": {
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "torchvision": torchvision.__version__,
            "device": "cpu",
        },
        "tools": {
            "torchsummary": {"repo": "sksq96/pytorch-summary", "ref": "master", "commit": TORCHSUMMARY_MASTER_COMMIT},
            "torchsummary@1.5.1": {"repo": "sksq96/pytorch-summary", "ref": "v1.5.1 (setup.py version bump; = PyPI torchsummary 1.5.1)", "commit": TORCHSUMMARY_V151_COMMIT},
            "torchinfo": {"repo": "TylerYep/torchinfo", "ref": "main (version 1.8.0)", "commit": TORCHINFO_COMMIT},
        },
        "cases": cases,
    }
    if not opts.check and not only:
        with open(os.path.join(opts.out, "index.json"), "w", encoding="utf-8", newline="\n") as f:
            json.dump(index, f, indent=2)
            f.write("\n")
    if opts.check and failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
