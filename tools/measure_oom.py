#!/usr/bin/env python3
"""Real sizes on a CUDA GPU: reserved peaks and the largest batch or context before OOM (issue 24).

Run on a machine with a CUDA GPU, from the repository root (no network needed):

    python3 tools/measure_oom.py --out test/fixtures/cuda-oom [--quick] [--max-seconds 450]
    python3 tools/measure_oom.py --dry-run          # CPU, tiny sizes: checks the logic, writes nothing

Cases (one JSON per case under --out, plus runtime.json):
  qwen2_5_0_5b_bf16_sdpa_adamw_fused_nogc / _gc
      Qwen2.5-0.5B built from its config.json (embedded below; random weights) by transformers'
      own modeling code, weights in bfloat16 (the checkpoint's torch_dtype), attn_implementation
      "sdpa", use_cache=False, one sequence per step, the HF Trainer's step as it touches memory:
      model.train(); out = model(input_ids=ids, labels=ids); out.loss.backward();
      AdamW(fused=True) step (Trainer's default optim adamw_torch_fused); model.zero_grad() at the
      END of the step (set_to_none). Without / with gradient checkpointing (non-reentrant, one
      checkpoint per decoder layer: gradient_checkpointing_enable, as the Trainer calls it).
      Not done (Trainer pieces with no weight in these figures): gradient clipping (one 0-dim
      norm per gradient), the collator's attention_mask/labels copies, accelerate's autocast
      (a no-op on bfloat16 weights). Contexts 2048, 4096, 8192, 16384.
  mnv3s_3cls_4000x2672_train_adam     torchvision mobilenet_v3_small(num_classes=3), batch 1,
                                      3x4000x2672 float32, model.train(), Adam (the seed's case)
  mnv3s_3cls_4000x2672_inference      the same model, model.eval() under torch.no_grad()
  resnet50_224_train_sgd_momentum     torchvision resnet50(), 224x224, model.train(), SGD
                                      momentum 0.9; batches 32, 64, 128
  Vision steps: opt.zero_grad(set_to_none=True), forward, cross_entropy, backward, opt.step().

For each measured size ("runs"): after gc.collect() and empty_cache(), what is still allocated and
reserved (`before`: the runtime's cuBLAS workspaces, made by a warm-up step at start), then
reset_peak_memory_stats(), the model built, three steps (one forward for inference):
maxAllocated / maxReserved over the whole run, `steady` the same over the last step alone (peaks
reset before it), memory_stats()'s num_alloc_retries and num_ooms.

OOM thresholds ("thresholds"): torch.cuda.set_per_process_memory_fraction(f) with f = budget /
total_memory emulates a smaller GPU: the caching allocator refuses a cudaMalloc that would take its
reserved bytes past int(f * total) (the CUDA context is outside that figure). The largest batch
(vision, step 1) or context (Qwen, step 1024) whose run succeeds (a fresh model and optimizer, two
training steps: the first and a steady one; one forward for inference) is found by doubling from a
start value, then bisection, catching torch.cuda.OutOfMemoryError; gc.collect() and empty_cache()
between tries. Every try is recorded. Budgets: 24 GiB and 80 GiB (--budgets-gib).

Runtime on an H200 is expected at 4-6 minutes; every search is bounded (--max-seconds for the
whole run, a ceiling per search); `seconds` is recorded for every run and search. --quick: Qwen at
2048 and 8192, the 24 GiB budget only, MobileNet training, ResNet-50 at batch 32.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time

import torch
from cuda_env import cuda_properties  # noqa: E402  (tools/cuda_env.py)

GiB = 2**30

# Qwen/Qwen2.5-0.5B config.json (the Hub's file; the device has no network).
QWEN25_05B = {
    "architectures": ["Qwen2ForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151643,
    "hidden_act": "silu",
    "hidden_size": 896,
    "initializer_range": 0.02,
    "intermediate_size": 4864,
    "max_position_embeddings": 32768,
    "max_window_layers": 24,
    "model_type": "qwen2",
    "num_attention_heads": 14,
    "num_hidden_layers": 24,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 32768,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.40.1",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}

# --dry-run: the same family at a tiny size.
QWEN_TINY = {
    **QWEN25_05B,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "max_window_layers": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 4096,
    "sliding_window": 4096,
}


class Bench:
    """Device-dependent helpers: CUDA figures, or zeros on the CPU (--dry-run)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def clean(self) -> dict:
        gc.collect()
        if not self.cuda:
            return {"allocated": 0, "reserved": 0}
        torch.cuda.synchronize(self.device)
        torch.cuda.empty_cache()
        return {"allocated": torch.cuda.memory_allocated(self.device), "reserved": torch.cuda.memory_reserved(self.device)}

    def reset(self):
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)

    def peaks(self) -> dict:
        if not self.cuda:
            return {"maxAllocated": 0, "maxReserved": 0}
        return {"maxAllocated": torch.cuda.max_memory_allocated(self.device), "maxReserved": torch.cuda.max_memory_reserved(self.device)}

    def counters(self) -> dict:
        if not self.cuda:
            return {"numAllocRetries": 0, "numOoms": 0}
        s = torch.cuda.memory_stats(self.device)
        return {"numAllocRetries": int(s.get("num_alloc_retries", 0)), "numOoms": int(s.get("num_ooms", 0))}

    def set_fraction(self, fraction: float):
        if self.cuda:
            torch.cuda.set_per_process_memory_fraction(fraction, self.device)


def is_oom(error: BaseException) -> bool:
    return isinstance(error, torch.cuda.OutOfMemoryError) or (isinstance(error, RuntimeError) and "out of memory" in str(error))


def env_info(device: torch.device) -> dict:
    info = {"torch": torch.__version__, "device": str(device)}
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    try:
        import torchvision

        info["torchvision"] = torchvision.__version__
    except ImportError:
        pass
    if device.type == "cuda":
        info.update(cuda_properties(torch, device))
    return info


def warm_up(bench: Bench) -> dict:
    """What the runtime holds before any case: the CUDA context outside the allocator, and the
    cuBLAS workspaces of the caller's thread and autograd's backward thread (a warm-up step)."""
    if not bench.cuda:
        return {}
    device = bench.device
    torch.zeros(1, device=device)
    bench.sync()
    free, total = torch.cuda.mem_get_info(device)
    context = total - free - torch.cuda.memory_reserved(device)
    warm = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 4)).to(device)
    inputs = torch.randn(2, 3, 8, 8, device=device)
    warm(inputs).sum().backward()
    a = torch.ones(64, 64, device=device)
    (a @ a).sum().item()
    del warm, inputs, a
    after = bench.clean()
    return {"contextBytes": int(context), "total": int(total), "afterWarmup": after}


# ---------------------------------------------------------------- models and steps


def qwen_builder(config: dict, checkpointing: bool, device: torch.device, dtype: torch.dtype):
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = {k: v for k, v in config.items() if k not in ("architectures", "transformers_version", "torch_dtype", "model_type")}

    def build():
        cfg = AutoConfig.for_model(config["model_type"], **fields)
        torch.manual_seed(0)
        # Built on the device in bfloat16 directly: no float32 copy passes through the allocator.
        import transformers

        dtype_arg = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", **{dtype_arg: dtype})
        if any(p.device.type != device.type for p in model.parameters()):
            model.to(device)  # a release that built on the CPU: each tensor copied once, already bfloat16
        assert all(p.dtype == dtype for p in model.parameters()), "the model was not built in bfloat16"
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.train()
        return model

    return build


def qwen_job(build, value: int, device: torch.device, vocab: int):
    """A fresh model and optimizer; returns step(), one Trainer-like training step at context `value`."""
    model = build()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=device.type == "cuda")
    ids = torch.randint(0, vocab, (1, value), device=device)

    def step():
        out = model(input_ids=ids, labels=ids, use_cache=False)
        loss = out.loss
        del out
        loss.backward()
        del loss
        opt.step()
        model.zero_grad(set_to_none=True)

    return step, [model, opt, ids]


def vision_builder(name: str, num_classes: int, device: torch.device):
    import torchvision

    def build():
        torch.manual_seed(0)
        return getattr(torchvision.models, name)(num_classes=num_classes).to(device)

    return build


def vision_job(build, value: int, device: torch.device, image: tuple, num_classes: int, optimizer: str | None):
    model = build()
    x = torch.randn(value, *image, device=device)
    if optimizer is None:
        model.eval()

        def forward():
            with torch.no_grad():
                out = model(x)
                del out

        return forward, [model, x]
    model.train()
    y = torch.randint(0, num_classes, (value,), device=device)
    if optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    elif optimizer == "sgd_momentum":
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    else:
        raise ValueError(optimizer)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        del loss
        opt.step()

    return step, [model, opt, x, y]


# ---------------------------------------------------------------- measuring


def measure_run(bench: Bench, make_job, value: int, steps: int) -> dict:
    """One size: the whole run's peaks (model build onward) and the last step's."""
    t0 = time.time()
    before = bench.clean()
    bench.reset()
    step, held = make_job(value)
    for _ in range(steps - 1):
        step()
    bench.sync()
    whole_before_last = bench.peaks()
    bench.reset()
    step()
    bench.sync()
    steady = bench.peaks()
    whole = {
        "maxAllocated": max(whole_before_last["maxAllocated"], steady["maxAllocated"]),
        "maxReserved": max(whole_before_last["maxReserved"], steady["maxReserved"]),
    }
    result = {"value": value, "before": before, **whole, "steady": steady, **bench.counters(), "steps": steps}
    del step, held
    bench.clean()
    result["seconds"] = round(time.time() - t0, 2)
    return result


def attempt(bench: Bench, make_job, value: int, steps: int, fake_limit: int | None) -> dict:
    """Whether `steps` steps at `value` run; an OOM is caught, everything freed after."""
    t0 = time.time()
    before = bench.clean()
    bench.reset()
    record: dict = {"value": value, "before": before}
    step = held = None
    try:
        step, held = make_job(value)
        for _ in range(steps):
            step()
        bench.sync()
        if fake_limit is not None and value > fake_limit:  # --dry-run: exercise the OOM path
            raise torch.cuda.OutOfMemoryError(f"dry run: {value} > {fake_limit}")
        record["ok"] = True
    except Exception as error:  # noqa: BLE001
        if not is_oom(error):
            record["ok"] = False
            record["error"] = f"{type(error).__name__}: {str(error)[:300]}"
        else:
            record["ok"] = False
            record["oom"] = str(error).split("\n")[0][:300]
    del step, held
    record.update(bench.peaks())
    record.update(bench.counters())
    bench.clean()
    record["seconds"] = round(time.time() - t0, 2)
    return record


def search(bench: Bench, make_job, start: int, step: int, ceiling: int, steps: int, deadline: float, fake_limit=None) -> dict:
    """The largest multiple of `step` in [step, ceiling] that runs: doubling from `start`, then bisection."""
    tries: list = []
    seen: dict = {}

    def ok(value: int) -> bool:
        if value not in seen:
            r = attempt(bench, make_job, value, steps, fake_limit)
            tries.append(r)
            print(f"    {value}: {'ok' if r['ok'] else ('OOM' if 'oom' in r else 'error')} ({r['seconds']} s)", flush=True)
            seen[value] = r["ok"]
            if "error" in r:
                raise RuntimeError(r["error"])
        return seen[value]

    good, bad, out = 0, None, {}
    try:
        if ok(start):
            good = start
            while bad is None:
                if good >= ceiling:
                    break
                if time.time() > deadline:
                    raise TimeoutError("time bound")
                nxt = min(ceiling, good * 2)
                if ok(nxt):
                    good = nxt
                else:
                    bad = nxt
        else:
            bad = start
        while bad is not None and bad - good > step:
            if time.time() > deadline:
                raise TimeoutError("time bound")
            mid = good + ((bad - good) // (2 * step)) * step
            mid = max(mid, good + step)
            if ok(mid):
                good = mid
            else:
                bad = mid
        out = {"threshold": good, "firstFailing": bad, "capped": bad is None}
    except (TimeoutError, RuntimeError) as error:
        out = {"threshold": None, "bracket": [good, bad], "stopped": str(error)}
    return {**out, "ceiling": ceiling, "step": step, "tries": tries}


def thresholds(bench: Bench, make_job, budgets_gib, total: int, start: int, step: int, ceiling: int, steps: int, deadline: float, dry: bool) -> list:
    out = []
    for gib in budgets_gib:
        t0 = time.time()
        allowed_target = int(gib * GiB)
        fraction = allowed_target / total if total else 1.0
        if bench.cuda and fraction >= 1.0:
            print(f"  {gib} GiB: not below the device's memory, skipped", flush=True)
            continue
        print(f"  budget {gib} GiB (fraction {fraction:.6f})", flush=True)
        bench.clean()
        bench.set_fraction(fraction)
        try:
            # --dry-run: a pretend limit that grows with the budget, to run the search's every branch.
            fake = (start * 3 + step * (gib // 24)) if dry else None
            found = search(bench, make_job, start, step, ceiling, steps, deadline, fake)
        finally:
            bench.set_fraction(1.0)
            bench.clean()
        out.append(
            {
                "budgetGiB": gib,
                "fraction": fraction,
                # CUDACachingAllocator: allowed_memory_maximum = static_cast<size_t>(fraction * total).
                "allowed": int(fraction * total) if total else None,
                **found,
                "seconds": round(time.time() - t0, 2),
            }
        )
        print(f"  -> {out[-1].get('threshold')} ({out[-1]['seconds']} s)", flush=True)
    return out


# ---------------------------------------------------------------- driver


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="test/fixtures/cuda-oom")
    ap.add_argument("--quick", action="store_true", help="a subset (see the docstring)")
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny sizes; checks the script, writes nothing")
    ap.add_argument("--only", default="", help="case ids, comma-separated")
    ap.add_argument("--budgets-gib", default="24,80")
    ap.add_argument("--max-seconds", type=float, default=450.0, help="no new search starts after this; searches stop at it")
    args = ap.parse_args(argv)

    dry = args.dry_run
    device = torch.device("cpu" if dry else "cuda")
    if not dry and not torch.cuda.is_available():
        print("no CUDA device; --dry-run checks the script on the CPU", file=sys.stderr)
        return 2
    bench = Bench(device)
    start_time = time.time()
    deadline = start_time + args.max_seconds
    env = env_info(device)
    runtime = warm_up(bench)
    total = runtime.get("total", 0)
    budgets = [int(b) for b in args.budgets_gib.split(",") if b]
    if args.quick:
        budgets = budgets[:1]
    only = {s for s in args.only.split(",") if s}
    command = "python3 tools/measure_oom.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if not dry:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "runtime.json"), "w") as f:
            json.dump({"env": env, "command": command, **runtime}, f, indent=1)
    print(f"env: {env}\nruntime: {runtime}", flush=True)

    qwen_config = QWEN_TINY if dry else QWEN25_05B
    image = (3, 64, 48) if dry else (3, 4000, 2672)
    r50_image = (3, 64, 64) if dry else (3, 224, 224)
    qwen_contexts = [64, 128] if dry else ([2048, 8192] if args.quick else [2048, 4096, 8192, 16384])
    qwen_step = 16 if dry else 1024
    cases = []
    for gc_on in (False, True):
        cases.append(
            {
                "id": f"qwen2_5_0_5b_bf16_sdpa_adamw_fused_{'gc' if gc_on else 'nogc'}",
                "model": {"kind": "hf", "name": "Qwen/Qwen2.5-0.5B", "config": qwen_config, "attention": "sdpa", "dtype": "bfloat16", "useCache": False},
                "mode": "train",
                "optimizer": "adamw_fused",
                "checkpointing": gc_on,
                "dim": "S",
                "input": [1, "S"],
                "values": qwen_contexts,
                "search": {"start": qwen_step * (2 if dry else 4), "step": qwen_step, "ceiling": qwen_step * 16 if dry else 65536},
                "loop": "Trainer-like: model.train(); loss = model(input_ids=ids, labels=ids, use_cache=False).loss; backward; AdamW(fused) step; model.zero_grad(set_to_none=True)",
                "job": lambda v, b=qwen_builder(qwen_config, gc_on, device, torch.bfloat16): qwen_job(b, v, device, qwen_config["vocab_size"]),
            }
        )
    vision_cases = [
        ("mnv3s_3cls_4000x2672_train_adam", "mobilenet_v3_small", 3, image, "adam", [1], {"start": 2, "step": 1, "ceiling": 8 if dry else 256}),
        ("mnv3s_3cls_4000x2672_inference", "mobilenet_v3_small", 3, image, None, [1], {"start": 4, "step": 1, "ceiling": 16 if dry else 512}),
        ("resnet50_224_train_sgd_momentum", "resnet50", 1000, r50_image, "sgd_momentum", [2, 4] if dry else ([32] if args.quick else [32, 64, 128]), {"start": 4 if dry else 64, "step": 1, "ceiling": 16 if dry else 2048}),
    ]
    try:
        import torchvision  # noqa: F401

        have_tv = True
    except ImportError:
        have_tv = False
        print("torchvision is not importable here: the vision cases are skipped", flush=True)
    for cid, name, classes, img, opt, values, srch in vision_cases:
        if not have_tv or (args.quick and opt is None):
            continue
        cases.append(
            {
                "id": cid,
                "model": {"kind": "torchvision", "name": name, "numClasses": classes},
                "mode": "train" if opt else "inference",
                "optimizer": opt,
                "checkpointing": False,
                "dim": "B",
                "input": ["B", *img],
                "values": values,
                "search": srch,
                "loop": "opt.zero_grad(set_to_none=True); cross_entropy(model(x), y).backward(); opt.step()" if opt else "model.eval(); torch.no_grad(): model(x)",
                "job": lambda v, b=vision_builder(name, classes, device), img=img, classes=classes, opt=opt: vision_job(b, v, device, img, classes, opt),
            }
        )

    written = 0
    for case in cases:
        if only and case["id"] not in only:
            continue
        if time.time() > deadline:
            print(f"time bound reached: {case['id']} and later not measured", flush=True)
            break
        t0 = time.time()
        print(f"{case['id']}", flush=True)
        steps = 3 if case["mode"] == "train" else 2
        runs = []
        for value in case["values"]:
            try:
                r = measure_run(bench, case["job"], value, steps)
            except Exception as error:  # noqa: BLE001 (an OOM or a failure at one size: recorded, the case goes on)
                runs.append({"value": value, "error": f"{type(error).__name__}: {str(error)[:300]}"})
                print(f"  {case['dim']}={value}: {runs[-1]['error']}", flush=True)
                del error
                bench.clean()
                continue
            runs.append(r)
            print(f"  {case['dim']}={value}: allocated {r['maxAllocated'] - r['before']['allocated']:,} B, reserved {r['maxReserved'] - r['before']['reserved']:,} B ({r['seconds']} s)", flush=True)
        s = case["search"]
        found = thresholds(bench, case["job"], budgets, total, s["start"], s["step"], s["ceiling"], 2 if case["mode"] == "train" else 1, deadline, dry)
        record = {k: v for k, v in case.items() if k not in ("job", "values", "search")}
        record.update(
            generatedBy="tools/measure_oom.py",
            command=command,
            env=env,
            runtime=runtime,
            runs=runs,
            thresholds=found,
            seconds=round(time.time() - t0, 2),
        )
        if not dry:
            with open(os.path.join(args.out, f"{case['id']}.json"), "w") as f:
                json.dump(record, f, indent=1)
            written += 1
        print(f"{case['id']}: {record['seconds']} s", flush=True)
    print(f"{written} fixtures written in {time.time() - start_time:.0f} s{' (dry run: none)' if dry else ''}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
