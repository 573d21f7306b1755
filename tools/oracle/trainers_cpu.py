"""Phase-by-phase live allocator bytes of REAL Hugging Face Trainer / TRL SFTTrainer / TRL GRPOTrainer runs.

torch 2.13 CPU, transformers 5.18.0, TRL 1.13.0, PEFT 0.21.0, accelerate 1.15.0 (the venv of TRAINERS.md).
One case = one fresh child process: the model is built, the trainer constructed and ``trainer.train()`` run, all
under one ``torch.profiler.profile(profile_memory=True)`` session started before the model exists, so the running
sum of the '[memory]' events is the exact live total of the CPU allocator. Phase windows are marked by an aten op
that allocates nothing (``aten::is_set_to``; oracle.py's idea, another op) emitted from instance-level
wrappers around the trainer's own methods and from a TrainerCallback; the marks are read back from the profiler's
event tree in time order. See TRAINERS.md.

    /tmp/trl/bin/python tools/oracle/trainers_cpu.py                         # every dev case
    /tmp/trl/bin/python tools/oracle/trainers_cpu.py --only ID,ID --jobs 2
    /tmp/trl/bin/python tools/oracle/trainers_cpu.py --cases tools/oracle/cases/trainers-holdout.json \
        --out test/fixtures/trainers-holdout --no-traces
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_CASES = os.path.join(HERE, "cases", "trainers-dev.json")
DEFAULT_OUT = os.path.join(ROOT, "test", "fixtures", "trainers")

# Trace files: events smaller than this are left out (their sum per phase is kept) when a trace would exceed
# TRACE_MAX_BYTES with every event in it.
TRACE_MAX_BYTES = 1_500_000
TRACE_SMALL = 64

# Callers of GRPOTrainer._get_per_token_logps_and_entropies (trl 1.13.0, trainer/grpo_trainer.py): the line of
# the call statement's first line, as the frame reports it while the call runs.
GRPO_LOGPS_CALLERS = {
    ("_generate_and_score_completions", 2668): "old_logps",
    ("_generate_and_score_completions", 2734): "ref_logps",  # a separate ref_model (full fine-tuning)
    ("_generate_and_score_completions", 2750): "ref_logps",  # PEFT: the same model with adapters disabled
    ("_compute_loss", 3123): None,  # the training forward: inside the "forward" (compute_loss) window
}

# oracle.py marks with aten::_has_compatible_shallow_copy_type, but nn.Module._apply (model.to(), PEFT, accelerate)
# calls that op too; aten::is_set_to allocates nothing either and nothing in these libraries calls it.
MARK_OP = "aten::is_set_to"

# --no-wrap (a check, not for fixtures): only the step marks of the callback, no method wrappers or hooks, to
# show the wrappers change no allocation (same run peak, step peaks and live totals).
NO_WRAP = os.environ.get("TRAINERS_NO_WRAP") == "1"


# ============================================================================================================
# child: one case
# ============================================================================================================


class Recorder:
    """Marks: a Python-side label list plus one non-allocating aten call per label (read back in order)."""

    def __init__(self, torch):
        self.torch = torch
        self.t = torch.zeros(1)
        self.labels: List[tuple] = []
        self.on = False

    def mark(self, *label) -> None:
        if self.on:
            self.labels.append(label)
            self.t.is_set_to(self.t)


def storage_bytes(tensors) -> int:
    seen = set()
    total = 0
    for t in tensors:
        if t is None:
            continue
        st = t.untyped_storage()
        key = (st.data_ptr(), st.nbytes())
        if key in seen or st.nbytes() == 0:
            continue
        seen.add(key)
        total += st.nbytes()
    return total


def dtype_name(dt) -> str:
    return str(dt).replace("torch.", "")


def describe(v) -> Any:
    import torch

    if isinstance(v, torch.Tensor):
        return {"shape": list(v.shape), "dtype": dtype_name(v.dtype)}
    if isinstance(v, (bool, int, float, str)) or v is None:
        return {"value": v}
    if isinstance(v, (list, tuple)):
        return {"type": type(v).__name__, "len": len(v)}
    return {"type": type(v).__name__}


def json_safe(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set)):
        return [json_safe(x) for x in v]
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    return str(v)


def make_tokenizer(vocab_size: int):
    """A WordLevel tokenizer with exactly vocab_size tokens: <pad>=0, <eos>=1, <unk>=2, t3 ... t{V-1}."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2}
    for i in range(3, vocab_size):
        vocab[f"t{i}"] = i
    tk = Tokenizer(WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    assert len(tok) == vocab_size, (len(tok), vocab_size)
    return tok


def token_rows(n_rows: int, length: int, vocab_size: int, seed: int) -> List[List[int]]:
    import random

    rng = random.Random(seed)
    return [[rng.randrange(3, vocab_size) for _ in range(length)] for _ in range(n_rows)]


def reward_len_mod(completions, **kwargs):
    """GRPO reward: a plain function of the completion text (no model). Varies within a group."""
    return [float(sum(len(w) for w in c.split()) % 7) for c in completions]


HARNESS_COMMON = {
    "report_to": "none",
    "save_strategy": "no",
    "logging_steps": 1,
    "disable_tqdm": True,
    "dataloader_num_workers": 0,
    "seed": 42,
    "use_cpu": True,
}


def build_model(case: dict, transformers, torch):
    cfg = dict(case["config"])
    model_type = cfg.pop("model_type")
    config = transformers.AutoConfig.for_model(model_type, **cfg)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation=case.get("attention", "eager"))
    bad = {str(p.dtype) for p in model.parameters() if p.dtype != torch.float32}
    if bad:
        raise SystemExit(f"{case['id']}: parameters are {sorted(bad)}, not float32")
    return model


def param_facts(model) -> dict:
    seen = {}
    for p in model.parameters():  # nn.Module.parameters() already removes duplicates (tied weights)
        seen[id(p)] = p
    ps = list(seen.values())
    return {
        "total": sum(p.numel() for p in ps),
        "trainable": sum(p.numel() for p in ps if p.requires_grad),
        "tensors": len(ps),
        "trainableTensors": sum(1 for p in ps if p.requires_grad),
        "bytes": storage_bytes(ps),
        "trainableBytes": storage_bytes(p for p in ps if p.requires_grad),
        "dtypes": sorted({dtype_name(p.dtype) for p in ps}),
    }


def run_case_child(case: dict, want_trace: bool, out_path: str, trace_path: Optional[str], command: str) -> None:
    import torch

    torch.set_num_threads(1)
    import transformers
    import datasets
    import accelerate
    import peft
    import trl
    from torch.profiler import ProfilerActivity, profile

    transformers.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    try:
        datasets.utils.logging.set_verbosity_error()
    except Exception:
        pass

    t0 = time.time()
    cid = case["id"]
    kind = case["trainer"]
    cfg = case["config"]
    V = int(cfg["vocab_size"])
    args_in = dict(case.get("args") or {})
    steps = int(case["steps"])
    workdir = os.path.join(tempfile.gettempdir(), f"vram-trainers-{cid}")  # fixed path: the fixture records it
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    # harness["args"]: the config fields the harness sets (none memory-relevant, except those GRPO needs for a
    # deterministic run, below); everything else in harness describes how the run was set up.
    hargs: Dict[str, Any] = dict(HARNESS_COMMON)
    hargs["output_dir"] = os.path.join(workdir, "out")
    hargs["max_steps"] = steps
    harness: Dict[str, Any] = {"args": hargs}

    tok = make_tokenizer(V)
    harness["tokenizer"] = (
        f"tokenizers WordLevel in PreTrainedTokenizerFast, {V} tokens: <pad>=0 (pad_token), <eos>=1 (eos_token), "
        "<unk>=2, t3..t{V-1}; WhitespaceSplit pre-tokenizer, no post-processor (no special tokens added)"
    )
    harness["environment"] = {"OMP_NUM_THREADS": "1", "torch.set_num_threads": 1, "PYTHONHASHSEED": "0",
                              "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    rec = Recorder(torch)

    # ---- datasets (Arrow; no torch tensors) -------------------------------------------------------------
    B = int(args_in.get("per_device_train_batch_size", 8))
    GA = int(args_in.get("gradient_accumulation_steps", 1))
    if kind in ("trainer", "sft"):
        S = int(case["data"]["sequence"])
        n_rows = (steps + 2) * B * GA  # more rows than the run reads: the loader never runs dry
        rows = token_rows(n_rows, S, V, seed=1234)
        train_dataset = datasets.Dataset.from_dict({"input_ids": rows})
        harness["dataset"] = {"rows": n_rows, "column": "input_ids", "tokens": S, "tokenIds": [3, V - 1],
                              "note": "datasets.Dataset.from_dict of pre-tokenized rows, every row exactly S ids"}
        if kind == "trainer":
            harness["data_collator"] = "transformers.DataCollatorForLanguageModeling(tokenizer, mlm=False)"
        else:
            harness["data_collator"] = "SFTTrainer's own (DataCollatorForLanguageModeling of trl)"
    else:
        P = int(case["data"]["prompt"])
        n_rows = 256
        rows = token_rows(n_rows, P, V, seed=1234)
        train_dataset = datasets.Dataset.from_dict({"prompt": [" ".join(f"t{i}" for i in r) for r in rows]})
        harness["dataset"] = {"rows": n_rows, "column": "prompt", "promptTokens": P, "tokenIds": [3, V - 1],
                              "note": "plain-text prompts of exactly P words t<id> (P tokens), not conversational"}
        harness["reward_funcs"] = "reward_len_mod: sum of word lengths of the completion text mod 7 (no model)"

    ref_dir = None
    grpo_full_ref = kind == "grpo" and not case.get("lora") and float(args_in.get("beta", 0.0)) != 0.0
    if grpo_full_ref:
        # TRL builds the reference model with from_pretrained(config._name_or_path) (grpo_trainer.py:988): save the
        # case's seed-0 model first (outside the profiler) so the reference loads the same weights.
        ref_dir = os.path.join(workdir, "init-model")
        m = build_model(case, transformers, torch)
        m.save_pretrained(ref_dir)
        del m
        gc.collect()

    # ---- configs ------------------------------------------------------------------------------------------
    if kind == "grpo":
        max_c = int(args_in.get("max_completion_length", 256))
        gk = dict(args_in.get("generation_kwargs") or {})
        gk["min_new_tokens"] = max_c  # every completion exactly max_completion_length tokens (EOS suppressed)
        hargs["generation_kwargs"] = gk
        if grpo_full_ref:
            # only the reference model is built from these (the policy is passed as an object)
            hargs["model_init_kwargs"] = {"attn_implementation": case.get("attention", "eager"), "dtype": "float32"}
            harness["refModel"] = (
                "TRL loads it with from_pretrained(model.config._name_or_path): the case's seed-0 model, saved "
                "(safetensors) to <output_dir>/../init-model before profiling; the policy's config._name_or_path "
                "points there"
            )
    clash = set(hargs) & set(args_in) - {"generation_kwargs"}
    if clash:
        raise SystemExit(f"{cid}: the case sets harness fields {sorted(clash)}")
    targs = dict(args_in)
    targs.update(hargs)
    if kind == "trainer":
        Args = transformers.TrainingArguments
    elif kind == "sft":
        Args = trl.SFTConfig
    else:
        Args = trl.GRPOConfig
    args = Args(**targs)
    lora_cfg = peft.LoraConfig(task_type="CAUSAL_LM", **case["lora"]) if case.get("lora") else None

    # ---- state shared with the wrappers --------------------------------------------------------------------
    st: Dict[str, Any] = {
        "step": 0,
        "micro": None,
        "in_step": False,
        "in_ts": False,
        "gen_depth": 0,
        "gen_forwards": 0,
        "batch": None,
        "generated": None,
        "buffered": None,
        "grad_at_opt": [],
        "state_at_opt": [],
        "buffered_at_start": [],
        "logps_calls": [],
        "generated_steps": set(),
        "rollout_open": False,
    }
    trainer_box: Dict[str, Any] = {}
    originals: List[Tuple[Any, str]] = []

    def micro():
        # the micro-step index inside training_step; None for the phases outside it (clip, optimizer, zero_grad)
        return st["micro"] if st["in_step"] and st["in_ts"] else None

    def wrap(obj, name, phase, before=None, after=None):
        orig = getattr(obj, name)

        def w(*a, **k):
            if before is not None:
                before()
            rec.mark("begin", phase, micro())
            try:
                return orig(*a, **k)
            finally:
                rec.mark("end", phase, micro())
                if after is not None:
                    after()

        if hasattr(orig, "_wrapped_by_lr_sched"):  # torch's LR scheduler checks for its own step wrapper
            w._wrapped_by_lr_sched = True
        setattr(obj, name, w)
        originals.append((obj, name))

    class Marks(transformers.TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, optimizer=None, **kw):
            if NO_WRAP:
                return
            tr = trainer_box["trainer"]
            acc = tr.accelerator
            wrap(acc, "backward", "backward")
            wrap(acc, "clip_grad_norm_", "clip")

            def grads_now():
                opt = tr.optimizer
                ps = [p for g in opt.param_groups for p in g["params"]]
                st["grad_at_opt"].append(storage_bytes(p.grad for p in ps))

            def state_now():
                inner = getattr(tr.optimizer, "optimizer", tr.optimizer)
                ts = [v for s in inner.state.values() for v in s.values() if torch.is_tensor(v)]
                st["state_at_opt"].append(storage_bytes(ts))

            wrap(tr.optimizer, "step", "optimizer", before=grads_now, after=state_now)
            assert tr.model_wrapped is tr.model, "expected an unwrapped single-process model"
            wrap(tr.model_wrapped, "zero_grad", "zero_grad")
            if kind == "grpo":
                gen_model = acc.unwrap_model(tr.model_wrapped)
                trainer_box["gen_model"] = gen_model

                def gen_after():
                    if st["rollout_open"]:
                        rec.mark("begin", "score", micro())
                        st["score_open"] = True

                def gen_before():
                    st["gen_depth"] += 1
                    st["gen_forwards"] = 0

                orig_gen = gen_model.generate

                def g(*a, **k):
                    gen_before()
                    rec.mark("begin", "generate", micro())
                    try:
                        return orig_gen(*a, **k)
                    finally:
                        if st["gen_forwards"] > 1:
                            rec.mark("end", "decode", micro())
                        rec.mark("end", "generate", micro())
                        st["gen_depth"] -= 1
                        gen_after()

                gen_model.generate = g
                originals.append((gen_model, "generate"))
                # the module generate() calls: the transformers CausalLM (for PEFT, the base model)
                inner = gen_model.get_base_model() if hasattr(gen_model, "get_base_model") else gen_model

                def fpre(mod, a):
                    if st["gen_depth"] > 0:
                        st["gen_forwards"] += 1
                        if st["gen_forwards"] == 1:
                            rec.mark("begin", "prefill", micro())
                        elif st["gen_forwards"] == 2:
                            rec.mark("begin", "decode", micro())

                def fpost(mod, a, out):
                    if st["gen_depth"] > 0 and st["gen_forwards"] == 1:
                        rec.mark("end", "prefill", micro())

                trainer_box["hooks"] = [inner.register_forward_pre_hook(fpre), inner.register_forward_hook(fpost)]

        def on_step_begin(self, args, state, control, **kw):
            st["step"] += 1
            st["micro"] = 0
            st["in_step"] = True
            tr = trainer_box["trainer"]
            buf = getattr(tr, "_buffered_inputs", None)
            if kind == "grpo":
                ts = [v for b in (buf or []) for v in b.values() if torch.is_tensor(v)]
                st["buffered_at_start"].append(storage_bytes(ts))
            rec.mark("step_begin", st["step"])

        def on_step_end(self, args, state, control, **kw):
            rec.mark("step_end", st["step"])
            st["in_step"] = False

    trainer_box["callback"] = Marks()

    def instance_wraps(tr):
        orig_ts = tr.training_step

        def ts(*a, **k):
            st["in_ts"] = True
            rec.mark("begin", "training_step", micro())
            try:
                return orig_ts(*a, **k)
            finally:
                rec.mark("end", "training_step", micro())
                st["in_ts"] = False
                if st["in_step"]:
                    st["micro"] += 1

        tr.training_step = ts
        originals.append((tr, "training_step"))
        wrap(tr, "compute_loss", "forward")
        # the tensors the training forward receives (first micro-step): a forward pre-hook reading shapes only
        def batch_hook(mod, a, k):
            if st["batch"] is None and torch.is_grad_enabled() and mod.training:
                d = {f"arg{i}": describe(v) for i, v in enumerate(a)}
                d.update({key: describe(v) for key, v in k.items()})
                st["batch"] = d

        trainer_box["batch_hook"] = tr.model.register_forward_pre_hook(batch_hook, with_kwargs=True)
        if kind == "grpo":
            orig_gs = tr._generate_and_score_completions

            def gs(*a, **k):
                st["rollout_open"] = True
                st["score_open"] = False
                st["generated_steps"].add(st["step"])
                rec.mark("begin", "rollout", micro())
                try:
                    out = orig_gs(*a, **k)
                finally:
                    if st.get("score_open"):
                        rec.mark("end", "score", micro())
                    rec.mark("end", "rollout", micro())
                    st["rollout_open"] = False
                if st["generated"] is None:
                    st["generated"] = {key: describe(v) for key, v in out.items()}
                return out

            tr._generate_and_score_completions = gs
            originals.append((tr, "_generate_and_score_completions"))
            orig_lp = tr._get_per_token_logps_and_entropies

            def lp(*a, **k):
                f = sys._getframe(1)
                where = (f.f_code.co_name, f.f_lineno)
                del f
                if where not in GRPO_LOGPS_CALLERS:
                    raise RuntimeError(f"unexpected caller of _get_per_token_logps_and_entropies: {where}")
                phase = GRPO_LOGPS_CALLERS[where]
                if phase is None:
                    return orig_lp(*a, **k)
                st["logps_calls"].append([phase, where[0], where[1], st["step"]])
                rec.mark("begin", phase, micro())
                try:
                    return orig_lp(*a, **k)
                finally:
                    rec.mark("end", phase, micro())

            tr._get_per_token_logps_and_entropies = lp
            originals.append((tr, "_get_per_token_logps_and_entropies"))
            orig_pi = tr._prepare_inputs

            def pi(*a, **k):
                rec.mark("begin", "prepare_inputs", micro())
                try:
                    out = orig_pi(*a, **k)
                finally:
                    rec.mark("end", "prepare_inputs", micro())
                if st["buffered"] is None and tr._buffered_inputs is not None:
                    st["buffered"] = [{key: describe(v) for key, v in b.items()} for b in tr._buffered_inputs]
                return out

            tr._prepare_inputs = pi
            originals.append((tr, "_prepare_inputs"))

    # ---- the profiled run ----------------------------------------------------------------------------------
    facts: Dict[str, Any] = {}
    gc.collect()
    rec.on = True
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        rec.mark("point", "start")
        model = build_model(case, transformers, torch)
        if ref_dir is not None:
            model.config._name_or_path = ref_dir
        rec.mark("point", "model")
        facts["paramsModel"] = param_facts(model)
        if kind == "trainer":
            if lora_cfg is not None:
                model = peft.get_peft_model(model, lora_cfg)
            collator = transformers.DataCollatorForLanguageModeling(tokenizer=tok, mlm=False)
            trainer = transformers.Trainer(
                model=model,
                args=args,
                train_dataset=train_dataset,
                data_collator=collator,
                processing_class=tok,
                callbacks=[trainer_box["callback"]],
            )
        elif kind == "sft":
            trainer = trl.SFTTrainer(
                model=model,
                args=args,
                train_dataset=train_dataset,
                processing_class=tok,
                peft_config=lora_cfg,
                callbacks=[trainer_box["callback"]],
            )
        else:
            trainer = trl.GRPOTrainer(
                model=model,
                reward_funcs=reward_len_mod,
                args=args,
                train_dataset=train_dataset,
                processing_class=tok,
                peft_config=lora_cfg,
                callbacks=[trainer_box["callback"]],
            )
        del model
        trainer_box["trainer"] = trainer
        if not NO_WRAP:
            instance_wraps(trainer)
        rec.mark("point", "trainer")
        trainer.train()
        rec.mark("point", "after_train")
        gc.collect()
        rec.mark("point", "after_gc")
    rec.on = False
    labels = rec.labels
    wall_train = time.time() - t0

    # ---- facts read after the run (no allocation) ---------------------------------------------------------
    tr = trainer
    facts["params"] = param_facts(tr.model)
    facts["buffers"] = {"bytes": storage_bytes(list(tr.model.buffers())), "tensors": len(list(tr.model.buffers()))}
    inner_opt = getattr(tr.optimizer, "optimizer", tr.optimizer)
    state_ts = [v for s in inner_opt.state.values() for v in s.values() if torch.is_tensor(v)]
    step_ts = [v for s in inner_opt.state.values() for k, v in s.items() if k == "step" and torch.is_tensor(v)]
    opt_info = {
        "class": type(inner_opt).__name__,
        "defaults": json_safe({k: v for k, v in inner_opt.defaults.items()}),
        "paramGroups": [len(g["params"]) for g in inner_opt.param_groups],
        "stateTensors": len(state_ts),
        "stepTensorBytes": storage_bytes(step_ts),
    }
    ref_model = getattr(tr, "ref_model", None)
    extra: Dict[str, Any] = {}
    if ref_model is not None:
        extra["refModel"] = {"params": param_facts(ref_model), "class": type(ref_model).__name__}
    resolved = {
        "attention": getattr(tr.model.config, "_attn_implementation", None),
        "gradientCheckpointing": bool(getattr(tr.model, "is_gradient_checkpointing", False)),
        "gradientCheckpointingKwargs": json_safe(tr.args.gradient_checkpointing_kwargs),
        "mixedPrecision": str(tr.accelerator.mixed_precision),
        "nativeAmp": bool(getattr(tr.accelerator, "native_amp", False)),
        "optim": str(tr.args.optim),
        "bf16": bool(tr.args.bf16),
        "modelClass": type(tr.model).__name__,
    }
    if kind == "sft":
        resolved["loss_type"] = tr.args.loss_type
        resolved["max_length"] = tr.args.max_length
    if kind == "grpo":
        resolved.update(
            {
                "beta": tr.beta,
                "num_generations": tr.num_generations,
                "num_iterations": tr.num_iterations,
                "steps_per_generation": tr.args.steps_per_generation,
                "generation_batch_size": tr.args.generation_batch_size,
                "max_completion_length": tr.max_completion_length,
                "temperature": tr.temperature,
                "loss_type": tr.loss_type,
                "generationConfig": json_safe(
                    {k: v for k, v in tr.generation_config.to_diff_dict().items() if not k.startswith("transformers")}
                ),
                "logpsCalls": st["logps_calls"],
            }
        )
    for h in trainer_box.get("hooks", []):
        h.remove()
    if "batch_hook" in trainer_box:
        trainer_box["batch_hook"].remove()
    for obj, name in originals:
        try:
            delattr(obj, name)
        except AttributeError:
            pass

    # ---- events -> windows ---------------------------------------------------------------------------------
    t1 = time.time()
    events = profiler_events(prof)
    del prof
    res = windows(events, labels)
    for s in res["steps"]:
        s["generated"] = s["index"] in st["generated_steps"]
    chosen = trace_steps_of(res["steps"], kind) if want_trace else []
    if chosen:
        snap = {s["peakEvent"]: "peak" for s in res["steps"] if s["index"] in chosen}
        res_t = windows(events, labels, trace_steps=set(chosen), snap_at=snap)
        assert [(x["start"], x["peak"], x["end"]) for x in res_t["steps"]] == [
            (x["start"], x["peak"], x["end"]) for x in res["steps"]
        ]
        res["traced"] = res_t["traced"]
    for s in res["steps"]:
        s.pop("peakEvent", None)
    wall_post = time.time() - t1

    fixture: Dict[str, Any] = {
        "id": cid,
        "case": case,
        "command": command,
        "env": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "trl": trl.__version__,
            "peft": peft.__version__,
            "accelerate": accelerate.__version__,
            "datasets": datasets.__version__,
            "python": platform.python_version(),
            "threads": torch.get_num_threads(),
            "device": "cpu",
        },
        "harness": harness,
        "resolved": resolved,
        "params": facts["params"],
        "paramsModel": facts["paramsModel"],
        "buffers": facts["buffers"],
        **extra,
        "batch": st["batch"],
    }
    if kind == "grpo":
        fixture["generated"] = st["generated"]
        fixture["bufferedInputs"] = st["buffered"]
    fixture.update(
        {
            "optimizer": opt_info,
            "optimizerStateBytes": storage_bytes(state_ts),
            "gradBytes": st["grad_at_opt"][-1] if st["grad_at_opt"] else None,
            "points": res["points"],
            "steps": res["steps"],
            "between": res["points"].get("after_train"),
            "betweenAfterGc": res["points"].get("after_gc"),
            "runPeak": res["runPeak"],
            "outsideSteps": res["outside"],
            "events": res["nEvents"],
            "runtime": {"trainSeconds": round(wall_train, 1), "postSeconds": round(wall_post, 1)},
        }
    )
    for k, s in enumerate(fixture["steps"]):
        if k < len(st["grad_at_opt"]):
            s["gradBytesAtOptimizer"] = st["grad_at_opt"][k]
            s["optimizerStateBytesAfter"] = st["state_at_opt"][k]
        if kind == "grpo" and k < len(st["buffered_at_start"]):
            s["bufferedInputsBytesAtStart"] = st["buffered_at_start"][k]
    with open(out_path, "w") as f:
        json.dump(fixture, f, indent=1)
        f.write("\n")
    if want_trace and trace_path:
        trace = make_trace(res, fixture, chosen)
        with open(trace_path, "w") as f:
            json.dump(trace, f, separators=(",", ":"))
            f.write("\n")
    shutil.rmtree(workdir, ignore_errors=True)


def profiler_events(prof) -> list:
    """(kind, node) for allocations and marks of the profiler's event tree, in time order: oracle.py's reader,
    with this tool's mark."""
    import oracle  # the script's own folder; imported only here, after profiling

    oracle.MARK_OP = MARK_OP
    return [(kind, n) for kind, _t, _i, n in oracle.profiler_events(prof)]


def _op_names(n) -> Tuple[Optional[str], Optional[str]]:
    p = n.parent
    inner = None
    top = None
    while p is not None:
        if inner is None:
            inner = p.name
        top = p.name
        p = p.parent
    return inner, top


def windows(events: list, labels: list, trace_steps: Optional[set] = None, snap_at: Optional[dict] = None) -> dict:
    """Replays the allocator events with the marks: step and phase windows (start, peak, end live bytes).

    With ``trace_steps`` (step indices), also every event of those steps, a summary of the live blocks at their
    start, at the events listed in ``snap_at`` (event index -> name; the peaks found by a first pass) and, for
    each window of those steps, the blocks allocated inside it that are still live at its end.
    """
    cur = 0
    run_peak = 0
    run_peak_at = None
    li = 0
    steps: List[dict] = []
    step = None
    open_w: List[dict] = []  # open windows (a stack; an end closes the innermost open window of that name)
    outside: Dict[str, int] = {}
    points: Dict[str, int] = {}
    live: Dict[int, list] = {}  # ptr -> [block id, op, allocated-in label, bytes, window serial]
    next_blk = 0
    traced: Dict[int, dict] = {}
    n_alloc = 0
    lost_frees = 0
    w_serial = 0
    for ei, (kind, n) in enumerate(events):
        if kind == "mark":
            if li >= len(labels):
                raise RuntimeError("more marker ops than labels")
            lab = labels[li]
            li += 1
            tag = lab[0]
            if tag == "point":
                points[lab[1]] = cur
            elif tag == "step_begin":
                step = {"index": lab[1], "start": cur, "peak": cur, "peakEvent": ei, "end": None, "phases": []}
                steps.append(step)
                if trace_steps and lab[1] in trace_steps:
                    traced[lab[1]] = {"events": [], "liveAtStart": summarize_live(live.values()), "snapshots": {},
                                      "retained": []}
            elif tag == "step_end":
                step["end"] = cur
                step = None
            elif tag == "begin":
                w_serial += 1
                w = {"name": lab[1], "micro": lab[2], "start": cur, "peak": cur, "end": None, "_serial": w_serial}
                open_w.append(w)
                if step is not None:
                    step["phases"].append(w)
                else:
                    outside[lab[1]] = outside.get(lab[1], 0) + 1
            elif tag == "end":
                for j in range(len(open_w) - 1, -1, -1):
                    if open_w[j]["name"] == lab[1]:
                        w = open_w.pop(j)
                        w["end"] = cur
                        break
                else:
                    raise RuntimeError(f"end of a window that is not open: {lab}")
                if step is not None and step["index"] in traced:
                    # blocks allocated inside this window (or windows nested in it) and still live at its end
                    lo = w["_serial"]
                    inside = [b for b in live.values() if b[4] >= lo and b[5] == step["index"]]
                    traced[step["index"]]["retained"].append(
                        {"name": w["name"], "micro": w["micro"], "blocks": summarize_live(inside, by_label=False)}
                    )
            continue
        ef = n.extra_fields
        delta = int(ef.alloc_size)
        ptr = int(ef.ptr)
        n_alloc += 1
        cur += delta
        op, top = _op_names(n)
        phase = open_w[-1]["name"] if open_w else ("step" if step is not None else "setup")
        blk = None
        of = None
        if delta > 0:
            if step is not None:
                label = f"s{step['index']}/{phase}"
            else:  # outside a step: before the first one, or after step k (the next batch is collated here)
                label = f"after-s{steps[-1]['index']}" if steps else f"setup/{phase}"
            blk = next_blk
            next_blk += 1
            live[ptr] = [blk, op, label, delta, w_serial, step["index"] if step is not None else None]
        elif delta < 0:
            info = live.pop(ptr, None)
            if info is None:
                lost_frees += 1
            else:
                blk, of = info[0], info[1]
        if cur > run_peak:
            run_peak = cur
            run_peak_at = {"step": step["index"] if step is not None else None, "phase": phase, "op": op, "top": top}
        for w in open_w:
            if cur > w["peak"]:
                w["peak"] = cur
        if step is not None:
            if cur > step["peak"]:
                step["peak"] = cur
                step["peakEvent"] = ei
            t = traced.get(step["index"])
            if t is not None:
                ev = {"bytes": delta, "op": op, "phase": phase}
                if top is not None and top != op:
                    ev["top"] = top
                if of is not None:
                    ev["of"] = of
                if blk is not None:
                    ev["blk"] = blk
                t["events"].append(ev)
                if snap_at and ei in snap_at:
                    t["snapshots"][snap_at[ei]] = {"live": cur, "blocks": summarize_live(live.values())}
    if li != len(labels):
        raise RuntimeError(f"{len(labels) - li} labels without a marker op")
    if open_w:
        raise RuntimeError(f"windows left open: {[w['name'] for w in open_w]}")
    for s in steps:
        for w in s["phases"]:
            w.pop("_serial", None)
    return {
        "steps": steps,
        "points": points,
        "runPeak": {"bytes": run_peak, "at": run_peak_at},
        "outside": outside,
        "nEvents": {"allocator": n_alloc, "marks": len(labels), "freesOfUnknownBlocks": lost_frees},
        "traced": traced,
    }


def summarize_live(blocks, by_label: bool = True) -> list:
    """Live blocks grouped by (where allocated, allocating op): bytes and count, largest first."""
    agg: Dict[Tuple, List[int]] = {}
    for b in blocks:
        key = (b[2], b[1]) if by_label else (b[2].split("/", 1)[-1], b[1])
        a = agg.setdefault(key, [0, 0])
        a[0] += b[3]
        a[1] += 1
    rows = [{"allocatedIn": k[0], "op": k[1], "bytes": v[0], "blocks": v[1]} for k, v in agg.items()]
    rows.sort(key=lambda r: (-r["bytes"], r["allocatedIn"], str(r["op"])))
    return rows


def trace_steps_of(steps: list, kind: str) -> List[int]:
    """The last step; for GRPO also the last step in which generation happened (when it is another one)."""
    chosen = [steps[-1]["index"]]
    if kind == "grpo":
        gen = [s["index"] for s in steps if s.get("generated")]
        if gen and gen[-1] != chosen[0]:
            chosen.insert(0, gen[-1])
    return chosen


def canonical_free_order(events: list) -> list:
    """Runs of consecutive frees with the same (op, top, phase) are put in block-id order.

    Such a run is one C++ release of many blocks: autocast clearing its cast cache when the autocast-wrapped forward
    returns (op null), or a checkpointed layer's recomputed casts released inside a backward node. The cache is a
    hash map, so its free order varies run to run (seen: the same set, another order). Only frees are reordered,
    so no running-sum peak moves; every figure of the fixture is computed before this.
    """
    out: list = []
    run: list = []

    def key(e):
        return (e["op"], e.get("top"), e["phase"])

    for e in events:
        if e["bytes"] < 0 and run and key(e) == key(run[-1]):
            run.append(e)
            continue
        out.extend(sorted(run, key=lambda x: x.get("blk", -1)))
        run = []
        if e["bytes"] < 0:
            run.append(e)
        else:
            out.append(e)
    out.extend(sorted(run, key=lambda x: x.get("blk", -1)))
    return out


def make_trace(res: dict, fixture: dict, chosen: List[int]) -> dict:
    out = {
        "id": fixture["id"],
        "format": "steps[].events: every allocator event of the step in order: bytes (+ allocation, - free), op "
        "(innermost aten op; null: no op, e.g. a free by Python garbage collection), top (outermost op, when "
        "another), phase (innermost open window), blk (block id, the same on a block's allocation and free), "
        "of (on a free: the op that allocated the block). start + the running sum of bytes = live bytes. "
        "liveAtStart / snapshots.peak: live blocks grouped by where they were allocated (s<k>/<phase>, "
        "after-s<k> = between step k and k+1, setup/...) and op. retained: per window, the blocks allocated "
        "inside it still live at its end.",
        "note": "",
        "steps": [],
    }
    for idx in chosen:
        s = next(x for x in fixture["steps"] if x["index"] == idx)
        t = res["traced"][idx]
        out["steps"].append(
            {
                "index": idx,
                "generated": s.get("generated", False),
                "start": s["start"],
                "peak": s["peak"],
                "end": s["end"],
                "liveAtStart": t["liveAtStart"],
                "snapshots": t["snapshots"],
                "retained": t["retained"],
                "events": t["events"],
            }
        )
    for s in out["steps"]:
        s["events"] = canonical_free_order(s["events"])
    size = len(json.dumps(out, separators=(",", ":")))
    if size > TRACE_MAX_BYTES:
        for s in out["steps"]:
            kept, dropped = [], {}
            for e in s["events"]:
                if abs(e["bytes"]) < TRACE_SMALL:
                    d = dropped.setdefault(e["phase"], [0, 0])
                    d[0] += e["bytes"]
                    d[1] += 1
                else:
                    kept.append(e)
            s["events"] = kept
            s["droppedSmall"] = {k: {"bytes": v[0], "events": v[1]} for k, v in dropped.items()}
        out["note"] = (
            f"events with |bytes| < {TRACE_SMALL} left out (whole file over {TRACE_MAX_BYTES} bytes otherwise); "
            "their sum and count per phase in droppedSmall, so the running sum no longer gives live bytes exactly"
        )
    else:
        out["note"] = "every allocator event of the step"
    return out


# ============================================================================================================
# parent: drive the cases
# ============================================================================================================


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=DEFAULT_CASES)
    ap.add_argument("--only", default=None, help="comma-separated case ids")
    ap.add_argument("--out", default=None, help="fixture directory (default test/fixtures/trainers)")
    ap.add_argument("--traces", default=None, help="trace directory (default <out>/traces)")
    ap.add_argument("--no-traces", action="store_true")
    ap.add_argument("--jobs", type=int, default=1, help="cases run in parallel (one thread each)")
    ap.add_argument("--no-wrap", action="store_true",
                    help="check only: no method wrappers/hooks (step marks kept); compare with a normal run")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)

    if a.child:
        spec = json.loads(a.child)
        run_case_child(spec["case"], spec["trace"], spec["out"], spec.get("tracePath"), spec["command"])
        return 0

    cases_path = os.path.abspath(a.cases)
    with open(cases_path) as f:
        cases = json.load(f)
    out_dir = os.path.abspath(a.out or DEFAULT_OUT)
    traces_dir = os.path.abspath(a.traces or os.path.join(out_dir, "traces"))
    os.makedirs(out_dir, exist_ok=True)
    only = set(a.only.split(",")) if a.only else None
    todo = [c for c in cases if only is None or c["id"] in only]
    if only:
        missing = only - {c["id"] for c in todo}
        if missing:
            raise SystemExit(f"unknown case ids: {sorted(missing)}")
    rel_cases = os.path.relpath(cases_path, ROOT)
    rel_out = os.path.relpath(out_dir, ROOT)
    t_all = time.time()
    running: List[Tuple[subprocess.Popen, dict, float]] = []
    failed = []
    queue = list(todo)

    def launch(case):
        want_trace = bool(case.get("trace")) and not a.no_traces
        if want_trace:
            os.makedirs(traces_dir, exist_ok=True)
        cmd = (
            f"/tmp/trl/bin/python tools/oracle/trainers_cpu.py --cases {rel_cases} --out {rel_out}"
            + ("" if want_trace else " --no-traces")
            + f" --only {case['id']}"
        )
        spec = {
            "case": case,
            "trace": want_trace,
            "out": os.path.join(out_dir, f"{case['id']}.json"),
            "tracePath": os.path.join(traces_dir, f"{case['id']}.json") if want_trace else None,
            "command": cmd,
        }
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
                   HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                   ACCELERATE_DISABLE_RICH="1", WANDB_DISABLED="true", PYTHONHASHSEED="0")
        if a.no_wrap:
            env["TRAINERS_NO_WRAP"] = "1"
        log_path = os.path.join(tempfile.gettempdir(), f"vram-trainers-{case['id']}.log")
        logf = open(log_path, "w")
        p = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)],
            cwd=ROOT, env=env, stdout=logf, stderr=subprocess.STDOUT,
        )
        running.append((p, case, time.time(), log_path, logf))

    while queue or running:
        while queue and len(running) < max(1, a.jobs):
            launch(queue.pop(0))
        time.sleep(0.2)
        for item in list(running):
            p, case, ts, log_path, logf = item
            if p.poll() is None:
                continue
            running.remove(item)
            logf.close()
            dt = time.time() - ts
            if p.returncode != 0:
                failed.append(case["id"])
                with open(log_path) as f:
                    tail = f.read()[-3000:]
                print(f"FAIL {case['id']} ({dt:.0f} s)\n{tail}", flush=True)
            else:
                with open(os.path.join(out_dir, f"{case['id']}.json")) as f:
                    fx = json.load(f)
                last = fx["steps"][-1]
                print(
                    f"ok   {case['id']:<40} {dt:6.1f} s  steps {len(fx['steps'])}  last start {last['start']:>10} "
                    f"peak {last['peak']:>10}  run peak {fx['runPeak']['bytes']}",
                    flush=True,
                )
    print(f"{len(todo) - len(failed)}/{len(todo)} cases in {time.time() - t_all:.0f} s", flush=True)
    if failed:
        print("failed: " + ",".join(failed), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
