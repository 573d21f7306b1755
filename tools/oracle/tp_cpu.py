#!/usr/bin/env python3
"""One rank of DTensor tensor parallelism (and sequence / loss parallelism) of a real
transformers 4.40.2 Llama, measured on PyTorch 2.13 (CPU) with the fake process group.

Run from the repository root with the torch 2.13 CPU venv:

    /tmp/t213/bin/python tools/oracle/tp_cpu.py [--only ID,...] [--out test/fixtures/tp-cpu]
        [--transformers-src /work/hfenv/hf-4.40.2:/work/hfenv/stubs] [--hf-deps /usr/lib/python3/dist-packages]

Each case runs in its own child process: ``init_process_group("fake", store=FakeStore(), rank,
world_size=t)``, ``init_device_mesh("cpu", (t,))``, the model from the real modeling code
(``AutoModelForCausalLM.from_config``, eager attention, float32, seed 0), then
``parallelize_module`` with the plan below, then three training steps of
``zero_grad(set_to_none=True)``; ``model(input_ids=x, labels=x, use_cache=False).loss``;
``backward``; plain SGD ``step`` (no state). Every collective of the fake group completes at once
and allocates nothing outside the caller's tensors, so the CPU allocator sees what rank R
allocates (a real backend's buffers aside).

The plan (torchtitan's Llama plan with the Hugging Face module names; torch 2.13 styles):

* ``model.embed_tokens``: ``RowwiseParallel(input_layouts=Replicate())`` (vocab-parallel);
  with SP ``output_layouts=Shard(1), use_local_output=False``;
* per layer ``self_attn.{q,k,v}_proj`` and ``mlp.{gate,up}_proj``: ``ColwiseParallel()``;
  ``self_attn.o_proj``, ``mlp.down_proj``: ``RowwiseParallel()`` (SP: ``output_layouts=Shard(1),
  use_local_output=False``);
* SP only: ``input_layernorm``, ``post_attention_layernorm``, ``model.norm``:
  ``SequenceParallel()``; ``self_attn``: ``PrepareModuleInput(input_kwarg_layouts={"hidden_states":
  Shard(1)}, desired_input_kwarg_layouts={"hidden_states": Replicate()})``; ``mlp``:
  ``PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))``;
* ``lm_head``: ``ColwiseParallel(input_layouts=Shard(1) under SP else Replicate(),
  output_layouts=Shard(-1) with loss parallel else Replicate(), use_local_output=not loss
  parallel)``; with loss parallel the forward and backward run inside ``loss_parallel()``.

**Adjustment made to transformers 4.40.2**: its ``LlamaAttention`` reshapes with
``self.num_heads``, ``self.num_key_value_heads`` and ``self.hidden_size``; they are set to the
rank's local values (heads/t, kv heads/t, heads/t · head_dim) after parallelizing, as later
transformers releases do for their own tp_plan. ``use_cache=False`` (HF 4.40.2's DynamicCache
is not involved).

Measured, per case (bytes): ``savedBytes`` (distinct local storages autograd saved in the forward,
parameters excluded: a ``saved_tensors_hooks`` pack hook on a fourth forward), and for step 3
``livePeakBytes`` = params + grads + buffers + input (what is live before the step, by the
objects) + the highest rise of the allocator's live bytes during the step (torch.profiler
``profile_memory=True``, from before the model is built), ``allocatedBefore`` (the stream's
live bytes before the step: the difference is what the objects do not account for).
"""

from __future__ import annotations

import os
import sys

from fake_pg_harness import FAKE_PG, Marker, add_hf_paths, arg_parser, drive, fixture_head, hf_child_args, import_hf, init_fake_pg, live_peak, local, marked_step, read_stream, saved_recorder, saved_tensors_pass, start_child, step_profile, storages

GENERATED_BY = "tools/oracle/tp_cpu.py"
DEFAULT_OUT = os.path.join("test", "fixtures", "tp-cpu")
STEPS = 3
MEASURED_STEP = 3

CONFIG = {
    "model_type": "llama",
    "rms_norm_eps": 1e-06,
    "max_position_embeddings": 256,
    "vocab_size": 1000,
    "tie_word_embeddings": False,
    "hidden_size": 96,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}


def _cases():
    out = []
    for t in (1, 2):
        for sp in (False, True):
            for lp in (False, True):
                if t == 1 and (sp or lp):
                    continue
                cid = f"tp{t}" + ("_sp" if sp else "") + ("_lp" if lp else "")
                out.append({"id": cid, "config": CONFIG, "transformers": "4.40.2", "attention": "eager", "input": [2, 32], "dtype": "float32", "tp": t, "rank": 0, "sequenceParallel": sp, "lossParallel": lp, "optimizer": "sgd", "traceStep": True})
    # an uneven vocabulary on the last rank (an uneven MLP fails in DTensor: RowwiseParallel's
    # from_local(Shard(-1), run_check=False) takes the global size for local × t, and the mm's
    # sharding propagation rejects 254 against 255)
    out.append({"id": "tp2_r1_uneven_vocab", "config": {**CONFIG, "vocab_size": 999}, "transformers": "4.40.2", "attention": "eager", "input": [2, 32], "dtype": "float32", "tp": 2, "rank": 1, "sequenceParallel": False, "lossParallel": False, "optimizer": "sgd"})
    # t = 4 over an MHA config, batch 1 (the sequence all-gather is a view, no re-concatenation)
    for sp in (False, True):
        out.append({"id": "tp4_mha_b1" + ("_sp" if sp else ""), "config": {**CONFIG, "num_key_value_heads": 4}, "transformers": "4.40.2", "attention": "eager", "input": [1, 32], "dtype": "float32", "tp": 4, "rank": 0, "sequenceParallel": sp, "lossParallel": False, "optimizer": "sgd", "traceStep": True})
    # tied embeddings: the LM head's Shard(0) gradient comes first, the embedding's is added into it
    # (parallelize_module gives each module its own DTensor parameter: the tie is broken; with
    # "retie" the script ties lm_head.weight to the embedding's DTensor again afterwards)
    for retie in (False, True):
        out.append({"id": "tp2_tied_sp" + ("_retied" if retie else ""), "config": {**CONFIG, "tie_word_embeddings": True}, "transformers": "4.40.2", "attention": "eager", "input": [2, 32], "dtype": "float32", "tp": 2, "rank": 0, "sequenceParallel": True, "lossParallel": False, "optimizer": "sgd", "traceStep": True, "retie": retie})
    # Adam (for-loop): how often the update redistributes the embedding's Replicate gradient
    out.append({"id": "tp4_mha_b1_adam", "config": {**CONFIG, "num_key_value_heads": 4}, "transformers": "4.40.2", "attention": "eager", "input": [1, 32], "dtype": "float32", "tp": 4, "rank": 0, "sequenceParallel": False, "lossParallel": False, "optimizer": "adam", "traceStep": True})
    return out


CASES = _cases()

ADJUSTMENT = "transformers 4.40.2 LlamaAttention num_heads, num_key_value_heads, hidden_size set to the rank's local values after parallelize_module"


def tp_plan(cfg, sp: bool, lp: bool) -> dict:
    """The plan in this module's docstring (torchtitan's Llama plan, the Hugging Face module
    names); `sp` sequence parallel, `lp` loss parallel. fsdp2_tp_cpu.py applies it too."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, PrepareModuleInput, RowwiseParallel, SequenceParallel

    plan = {
        "model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1), use_local_output=False) if sp else RowwiseParallel(input_layouts=Replicate()),
        "lm_head": ColwiseParallel(input_layouts=Shard(1) if sp else Replicate(), output_layouts=Shard(-1) if lp else Replicate(), use_local_output=not lp),
    }
    if sp:
        plan["model.norm"] = SequenceParallel()
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        for name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj"):
            plan[p + name] = ColwiseParallel()
        for name in ("self_attn.o_proj", "mlp.down_proj"):
            plan[p + name] = RowwiseParallel(output_layouts=Shard(1), use_local_output=False) if sp else RowwiseParallel()
        if sp:
            plan[p + "input_layernorm"] = SequenceParallel()
            plan[p + "post_attention_layernorm"] = SequenceParallel()
            plan[p + "self_attn"] = PrepareModuleInput(input_kwarg_layouts={"hidden_states": Shard(1)}, desired_input_kwarg_layouts={"hidden_states": Replicate()})
            plan[p + "mlp"] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    return plan


def localize_attention(model, t: int) -> None:
    """The adjustment: transformers 4.40.2 reshapes with these, so they become the rank's local
    values (heads/t, kv heads/t, heads/t · head_dim)."""
    for layer in model.model.layers:
        a = layer.self_attn
        a.num_heads //= t
        a.num_key_value_heads //= t
        a.hidden_size = a.num_heads * a.head_dim


def run_child(case: dict, args) -> dict:
    import contextlib

    add_hf_paths(args)
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile
    from torch.distributed.tensor.parallel import loss_parallel, parallelize_module

    transformers = import_hf(args)
    start_child(transformers, case)
    t, rank = int(case["tp"]), int(case["rank"])
    sp, lp = bool(case["sequenceParallel"]), bool(case["lossParallel"])
    mark = Marker()

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        mark("segment", "build")
        if t > 1:
            init_fake_pg(rank, t)
            from torch.distributed.device_mesh import init_device_mesh

            mesh = init_device_mesh("cpu", (t,))
        torch.manual_seed(0)
        config = dict(case["config"])
        cfg = transformers.AutoConfig.for_model(config.pop("model_type"), **config)
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=case["attention"])
        model.train()
        whole_params = sum(p.numel() for p in model.parameters())
        tied_before = model.lm_head.weight is model.model.embed_tokens.weight
        g = torch.Generator().manual_seed(1)
        x = torch.randint(0, cfg.vocab_size, tuple(case["input"]), generator=g)
        mark("segment", "wrap")
        if t > 1:
            parallelize_module(model, mesh, tp_plan(cfg, sp, lp))
            if case.get("retie"):
                model.lm_head.weight = model.model.embed_tokens.weight
            localize_attention(model, t)
        params = list(dict.fromkeys(model.parameters()))
        opt = torch.optim.Adam(params, lr=1e-3, foreach=False) if case["optimizer"] == "adam" else torch.optim.SGD(params, lr=1e-3, foreach=False)
        ctx = loss_parallel if lp else contextlib.nullcontext

        comps = {}
        for s in range(1, STEPS + 1):
            mark("segment", f"step{s}")
            comps[s] = {
                "paramBytes": sum(storages(params).values()),
                "gradBytes": sum(storages([p.grad for p in params]).values()),
                "bufferBytes": sum(storages(list(model.buffers())).values()),
                "inputBytes": x.numel() * x.element_size(),
                "optimizerStateBytes": sum(storages([v for st in opt.state.values() for v in st.values() if torch.is_tensor(v)]).values()),
            }
            marked_step(mark, opt, lambda: model(input_ids=x, labels=x, use_cache=False).loss, ctx)
        mark("segment", "end")

    # ---- the allocation stream ----
    stream = read_stream(prof, mark.labels)
    name = f"step{MEASURED_STEP}"
    measured = step_profile(stream, name)

    # What each parameter's gradient is after step 3's backward (the vocab-parallel embedding's
    # comes out Replicate, whole-vocabulary: see the fixture's gradBytes).
    grad_table = []
    for n_, p_ in model.named_parameters():
        gr = p_.grad
        grad_table.append({"name": n_, "param": list(local(p_).shape), "paramPlacements": str(getattr(p_, "placements", None)), "grad": list(local(gr).shape) if gr is not None else None, "gradPlacements": str(getattr(gr, "placements", None))})

    # ---- saved tensors of a fourth forward ----
    pack, saved = saved_recorder(set(storages(params)))
    saved_tensors_pass(opt, lambda: model(input_ids=x, labels=x, use_cache=False).loss, pack, ctx)

    result = fixture_head(case, GENERATED_BY)
    result["env"] = {"torch": torch.__version__, "transformers": transformers.__version__, "device": "cpu", "threads": 1, "processGroup": FAKE_PG if t > 1 else None}
    result["adjustment"] = ADJUSTMENT if t > 1 else None
    result["params"] = {"whole": whole_params, "local": sum(local(p).numel() for p in params)}
    result["tied"] = {"beforeParallelize": tied_before, "after": model.lm_head.weight is model.model.embed_tokens.weight}
    result["paramTable"] = grad_table
    result["savedBytes"] = sum(v["bytes"] for v in saved.values())
    result["saved"] = sorted(saved.values(), key=lambda v: -v["bytes"])
    train = live_peak(comps[MEASURED_STEP], measured)
    train["stepEvents"] = [e for e in stream if e["segment"] == name and e["phase"] == "step"] if case.get("traceStep") else None
    result["train"] = {case["optimizer"]: train}
    if t > 1:
        dist.destroy_process_group()
    return result


def main(argv=None) -> int:
    args = arg_parser(__doc__, DEFAULT_OUT).parse_args(argv)
    return drive(args, CASES, run_child, script=__file__, child_args=hf_child_args(args))


if __name__ == "__main__":
    sys.exit(main())
