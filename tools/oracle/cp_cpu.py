#!/usr/bin/env python3
"""One rank of PyTorch context parallelism (``torch.distributed.tensor.experimental.context_parallel``,
ring attention, rotate method ALL_GATHER, head-tail load balancing as default) of a real
transformers 4.40.2 Llama with ``attn_implementation="sdpa"``, measured on PyTorch 2.13 (CPU) with
the fake process group. The style, the fields and the measurement are those of ``tp_cpu.py``.

Run from the repository root with the torch 2.13 CPU venv:

    /tmp/t213/bin/python tools/oracle/cp_cpu.py [--only ID,...] [--out test/fixtures/cp-cpu]
        [--transformers-src /work/hfenv/hf-4.40.2:/work/hfenv/stubs] [--hf-deps /usr/lib/python3/dist-packages]
    /tmp/t213/bin/python tools/oracle/cp_cpu.py --verify      # numerical check of the adaptation (gloo)

Each case runs in its own child process: ``init_process_group("fake", store=FakeStore(), rank,
world_size=c)``, ``init_device_mesh("cpu", (c,))``, the model from the real modeling code
(``AutoModelForCausalLM.from_config``, sdpa attention, float32 unless the case says bfloat16, seed 0),
then three training steps of ``zero_grad(set_to_none=True)``; inside
``context_parallel(mesh, buffers=[input_ids, labels, position_ids], buffer_seq_dims=[1, 1, 1])``:
``model(input_ids=..., labels=..., position_ids=..., use_cache=False).loss`` and ``backward``;
then plain SGD ``step`` (no state). ``labels`` is a separate tensor equal to ``input_ids``,
``position_ids`` is ``arange(s)[None]`` (int64, [1, s]: what HF builds itself without CP). A
fresh ``context_parallel`` context per step (as torchtitan does), buffers restored at its exit.
The world-1 case ``cp1`` runs the same model and inputs without CP (no process group).

**Adjustment (the CPU kernel in torch's ring).** torch 2.13's CP dispatcher maps only the CUDA
SDPA ops (flash, efficient, cuDNN and their backwards) to ``_templated_ring_attention`` /
``_templated_ring_attention_backward``; on CPU, ``F.scaled_dot_product_attention`` with DTensor
inputs reaches DTensor as ``aten._scaled_dot_product_flash_attention_for_cpu`` (and its
``_backward``), which has no sharding strategy. This script, at run time and without editing
torch: (1) registers a DTensor sharding strategy for those two ops with every tensor
``Shard(2)`` (the same CP strategy ``_sharding_rules.py`` gives the CUDA flash op; nothing else);
(2) adds them to ``_attention.custom_ops`` (the dict ``_enable_cp_dtensor_dispatcher`` installs
as ``DTensor._op_dispatcher._custom_op_handlers`` on entering ``context_parallel``), with a
handler that is a copy of ``_sdpa_handler`` whose call map sends the forward to
``_templated_ring_attention(group, 2, aten._scaled_dot_product_flash_attention_for_cpu.default,
query, key, value, is_causal, dropout_p, scale)`` and the backward to
``_templated_ring_attention_backward(group, 2,
aten._scaled_dot_product_flash_attention_for_cpu_backward.default, grad_out, "grad_out", query,
key, value, out, logsumexp, is_causal, dropout_p, scale)``, the argument order of the CPU op's
schema (no cum_seq / max / philox / debug-mask arguments: the CPU op has none and returns only
(output, logsumexp)). Everything else — the monkey-patched ``F.scaled_dot_product_attention``,
``DTensor.from_local`` of q/k/v, the rotaters, ``torch.cat`` of k/v, the all-gather, load
balancing, ``_SDPAMerger``, the backward's accumulators and the all-to-all of dkv, the buffer
sharding — is torch's own code. For traced cases the op handed to the ring functions is the CPU op
wrapped by a function that only records a profiler mark before and after each kernel call.

Measured, per case (bytes), as ``tp_cpu.py``: ``savedBytes`` (distinct local storages autograd
saved in a fourth forward — inside a CP context — parameters excluded), and for step 3
``livePeakBytes`` = params + grads + buffers + inputs (full-size ids, labels, positions, live
before the step) + the highest rise of the allocator's live bytes during the step (torch.profiler
``profile_memory=True`` from before the model is built), ``allocatedBefore``. Traced cases add
``events``: every allocation and free of step 3 in order, with the op it happened in, the
op's input shapes, an allocation id pairing each free with its allocation, the phase and the ring
mark (``fwd<n>.pre``, ``fwd<n>.k<i>`` = kernel of ring iteration i, ``fwd<n>.after<i>``,
``bwd<n>...``; n counts calls in order, so ``bwd0`` is the last layer's).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import traceback
from collections import OrderedDict

from fake_pg_harness import FAKE_PG, Marker, arg_parser, drive, fixture_head, graph_nodes, hf_child_args, import_hf, init_fake_pg, live_peak, live_rows, local, read_stream, saved_recorder, start_child, step_profile, storages

GENERATED_BY = "tools/oracle/cp_cpu.py"
DEFAULT_OUT = os.path.join("test", "fixtures", "cp-cpu")
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

ADJUSTMENT = (
    "torch 2.13 CP maps only the CUDA SDPA ops to its ring attention; on CPU the DTensor op is "
    "aten._scaled_dot_product_flash_attention_for_cpu(+_backward). At run time (torch unedited): a DTensor "
    "sharding strategy with every tensor Shard(2) is registered for both ops (the CP strategy "
    "_sharding_rules.py gives the CUDA flash op), and both are added to "
    "torch.distributed.tensor.experimental._context_parallel._attention.custom_ops (installed by "
    "context_parallel as DTensor's custom op handlers) with a copy of _sdpa_handler whose call map sends the "
    "forward to _templated_ring_attention(group, 2, aten._scaled_dot_product_flash_attention_for_cpu.default, "
    "query, key, value, is_causal, dropout_p, scale) and the backward to _templated_ring_attention_backward("
    "group, 2, aten._scaled_dot_product_flash_attention_for_cpu_backward.default, grad_out, 'grad_out', query, "
    "key, value, out, logsumexp, is_causal, dropout_p, scale) (the CPU op's argument names; it has no "
    "cum_seq/max/philox/debug-mask arguments and returns only output, logsumexp). Everything else (rotaters, "
    "cat of k/v, all-gather, load balance, _SDPAMerger, backward accumulators, all-to-all of dkv, buffer "
    "sharding) is torch's code; only the per-chunk kernel is the CPU flash kernel. Traced cases wrap the "
    "kernel in a function that only records profiler marks."
)


def _case(cid, cp, rank, inp, **kw):
    c = {"id": cid, "config": dict(CONFIG), "transformers": "4.40.2", "attention": "sdpa", "input": inp, "dtype": "float32", "cp": cp, "rank": rank, "loadBalance": cp > 1, "rotateMethod": "allgather" if cp > 1 else None, "optimizer": "sgd"}
    c.update(kw)
    return c


CASES = [
    _case("cp1", 1, 0, [2, 64], traceStep=True),
    _case("cp2", 2, 0, [2, 64], traceStep=True),
    _case("cp2_r1", 2, 1, [2, 64], traceStep=True),
    _case("cp2_nolb", 2, 0, [2, 64], loadBalance=False, traceStep=True),
    _case("cp2_nolb_r1", 2, 1, [2, 64], loadBalance=False),
    _case("cp4", 4, 0, [1, 64], traceStep=True),
    _case("cp4_r3", 4, 3, [1, 64]),
    _case("cp2_bf16", 2, 0, [2, 64], dtype="bfloat16", traceStep=True),
    _case("cp2_mha", 2, 0, [2, 64], config={**CONFIG, "num_key_value_heads": 4}, traceStep=True),
]


def install_cpu_ring(mark=None):
    """The adjustment: the CPU flash op through torch's own ring attention (see the docstring)."""
    import torch
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor._op_schema import RuntimeSchemaInfo
    from torch.distributed.tensor._ops.utils import expand_to_full_mesh_op_strategy, register_op_strategy
    from torch.distributed.tensor.experimental._context_parallel import _attention as A

    aten = torch.ops.aten
    fwd_op = aten._scaled_dot_product_flash_attention_for_cpu.default
    bwd_op = aten._scaled_dot_product_flash_attention_for_cpu_backward.default
    S = Shard(2)

    # (1) sharding strategies: outputs then tensor inputs, all on the sequence dim (CP's rule).
    @register_op_strategy(fwd_op, schema_info=RuntimeSchemaInfo(3))
    def _fwd_strategy(op_schema):
        mesh = op_schema.get_mesh_from_args()
        return expand_to_full_mesh_op_strategy(mesh, op_schema, [[S, S, S, S, S]], input_index=2)  # out, lse | q, k, v

    @register_op_strategy(bwd_op, schema_info=RuntimeSchemaInfo(6))
    def _bwd_strategy(op_schema):
        mesh = op_schema.get_mesh_from_args(validate=False)
        return expand_to_full_mesh_op_strategy(mesh, op_schema, [[S] * 9], input_index=3)  # dq, dk, dv | dout, q, k, v, out, lse

    counter = {"fwd": 0, "bwd": 0}

    def marked(op, tag):
        if mark is None:
            return op
        n = counter[tag] - 1
        it = {"i": 0}

        def call(*args, **kwargs):
            mark("ring", f"{tag}{n}.k{it['i']}")
            res = op(*args, **kwargs)
            mark("ring", f"{tag}{n}.after{it['i']}")
            it["i"] += 1
            return res

        return call

    def ring_fwd(mesh, query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
        if attn_mask is not None:
            raise NotImplementedError("attn_mask is not supported by CP")
        return A._templated_ring_attention(mesh.get_group(), 2, marked(fwd_op, "fwd"), query=query, key=key, value=value, is_causal=is_causal, dropout_p=dropout_p, scale=scale)

    def ring_bwd(mesh, grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, *, attn_mask=None, scale=None):
        if attn_mask is not None:
            raise NotImplementedError("attn_mask is not supported by CP")
        return A._templated_ring_attention_backward(mesh.get_group(), 2, marked(bwd_op, "bwd"), grad_out=grad_out, grad_out_name="grad_out", query=query, key=key, value=value, out=out, logsumexp=logsumexp, is_causal=is_causal, dropout_p=dropout_p, scale=scale)

    # (2) a copy of torch's _sdpa_handler with the CPU ops in its call map.
    def cpu_sdpa_handler(op_call, args, kwargs):
        tag = "fwd" if op_call is fwd_op else "bwd"
        counter[tag] += 1
        if mark is not None:
            mark("ring", f"{tag}{counter[tag] - 1}.pre")
        op_info = DTensor._op_dispatcher.unwrap_to_op_info(op_call, args, kwargs)
        DTensor._op_dispatcher.sharding_propagator.propagate(op_info)
        output_sharding = op_info.output_sharding
        if output_sharding is None:
            raise AssertionError("output sharding should not be None")
        if output_sharding.needs_redistribute:
            raise AssertionError("inputs need to be redistributed")
        call_maps = {fwd_op: ring_fwd, bwd_op: ring_bwd}
        local_results = call_maps[op_call](op_info.compute_mesh, *op_info.local_args, **op_info.local_kwargs)
        if mark is not None:
            mark("ring", f"{tag}{counter[tag] - 1}.wrap")
        res = DTensor._op_dispatcher.wrap(local_results, output_sharding.output_spec)
        if mark is not None:
            mark("ring", None)
        return res

    A.custom_ops[fwd_op] = cpu_sdpa_handler
    A.custom_ops[bwd_op] = cpu_sdpa_handler
    return A, counter


BUFFER_NAMES = ["input_ids", "labels", "position_ids"]


def cp_inputs(vocab: int, shape) -> list:
    """input_ids (seed 1), labels (a separate copy) and position_ids (arange(s)[None]): the CP
    buffers, in BUFFER_NAMES order."""
    import torch

    g = torch.Generator().manual_seed(1)
    b, s = shape
    ids = torch.randint(0, vocab, (b, s), generator=g)
    lab = ids.clone()
    pos = torch.arange(s).unsqueeze(0).contiguous()
    return [ids, lab, pos]


class CPTrainer:
    """The training step of this script (and fsdp2_cp_cpu.py) with its marks: zero_grad; a fresh
    ``context_parallel(cp_mesh, buffers, buffer_seq_dims=[1, 1, 1])`` (none when cp_mesh is None)
    around forward and backward; SGD step outside it. On the measured step it records each
    buffer's shape and storage before, inside and after the context."""

    def __init__(self, mark, model, opt, bufs, cp_mesh, ring_counter, measured_step):
        self.mark, self.model, self.opt, self.bufs = mark, model, opt, bufs
        self.cp_mesh, self.ring_counter, self.measured_step = cp_mesh, ring_counter, measured_step
        self.buffer_record = {}

    def ctx(self):
        if self.cp_mesh is None:
            return contextlib.nullcontext()
        from torch.distributed.tensor.experimental import context_parallel

        return context_parallel(self.cp_mesh, buffers=self.bufs, buffer_seq_dims=[1, 1, 1])

    def record_buffers(self, key):
        self.buffer_record[key] = [{"name": n, "shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""), "storageBytes": t.untyped_storage().nbytes(), "dataPtr": t.untyped_storage().data_ptr()} for n, t in zip(BUFFER_NAMES, self.bufs)]

    def step(self, s_) -> float:
        """One marked step; the loss's value."""
        mark, opt = self.mark, self.opt
        ids, lab, pos = self.bufs
        self.ring_counter.update({k: 0 for k in self.ring_counter})  # ring marks count calls per step
        mark("phase", "zero_grad")
        opt.zero_grad(set_to_none=True)
        mark("phase", "shard")
        if s_ == self.measured_step:
            self.record_buffers("before")
        with self.ctx():
            if s_ == self.measured_step:
                self.record_buffers("inside")
            mark("phase", "forward")
            loss = self.model(input_ids=ids, labels=lab, position_ids=pos, use_cache=False).loss
            mark("phase", "backward")
            loss.backward()
            mark("phase", "unshard")
        if s_ == self.measured_step:
            self.record_buffers("after")
        mark("phase", "step")
        opt.step()
        mark("phase", "cleanup")
        lv = float(local(loss.detach()).float())
        del loss
        mark("phase", "end")
        return lv

    def saved_forward(self, pack) -> list:
        """A fourth forward inside a CP context with `pack` as the saved-tensor pack hook, then its
        backward; returns what each SDPA autograd node saved (local q, k, v, output, logsumexp)."""
        import torch
        from torch.distributed.tensor import DTensor

        ids, lab, pos = self.bufs
        self.opt.zero_grad(set_to_none=True)
        sdpa_saved = []
        with self.ctx():
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda p_: p_):
                out = self.model(input_ids=ids, labels=lab, position_ids=pos, use_cache=False)
                loss = out.loss
            # what the SDPA autograd node holds
            for fn in graph_nodes(loss.grad_fn):
                if "ScaledDotProduct" not in type(fn).__name__:
                    continue
                d = {"node": type(fn).__name__}
                for attr in ("_saved_query", "_saved_key", "_saved_value", "_saved_output", "_saved_logsumexp"):
                    t_ = getattr(fn, attr, None)
                    if torch.is_tensor(t_):
                        lt = local(t_)
                        d[attr[len("_saved_"):]] = {"shape": list(lt.shape), "stride": list(lt.stride()), "dtype": str(lt.dtype).replace("torch.", ""), "storageBytes": lt.untyped_storage().nbytes(), "dtensor": isinstance(t_, DTensor)}
                d["is_causal"] = getattr(fn, "_saved_is_causal", None)
                sdpa_saved.append(d)
            loss.backward()
        del loss, out
        return sdpa_saved

    def cp_buffers(self) -> dict:
        """The fixture's cpBuffers: the recorded buffers, each with sameStorageAsBefore."""
        rec = self.buffer_record
        return {k: [{kk: vv for kk, vv in e.items() if kk != "dataPtr"} | {"sameStorageAsBefore": e["dataPtr"] == rec["before"][i]["dataPtr"]} for i, e in enumerate(v)] for k, v in rec.items()}


def cp_options(A):
    """The fixture's cpOptions: torch's _cp_options as they were (None without CP)."""
    if A is None:
        return None
    return {"enable_load_balance": bool(A._cp_options.enable_load_balance), "rotate_method": A._cp_options.rotate_method.name, "convert_to_f32": bool(A._cp_options.convert_to_f32)}


def run_child(case: dict, args) -> dict:
    transformers = import_hf(args)
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    start_child(transformers, case)
    c, rank = int(case["cp"]), int(case["rank"])
    dtype = getattr(torch, case["dtype"])
    trace = bool(case.get("traceStep"))
    mark = Marker()

    A, ring_counter = None, {}
    cp_mesh = None
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=trace) as prof:
        mark("segment", "build")
        if c > 1:
            init_fake_pg(rank, c)
            from torch.distributed.device_mesh import init_device_mesh

            cp_mesh = init_device_mesh("cpu", (c,))
            A, ring_counter = install_cpu_ring(mark if trace else None)
            A._cp_options.enable_load_balance = bool(case["loadBalance"])
            A.set_rotate_method(case["rotateMethod"])
        torch.manual_seed(0)
        config = dict(case["config"])
        cfg = transformers.AutoConfig.for_model(config.pop("model_type"), **config)
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=case["attention"])
        if dtype != torch.float32:
            model.to(dtype)
        model.train()
        whole_params = sum(p.numel() for p in model.parameters())
        bufs = cp_inputs(cfg.vocab_size, case["input"])
        params = list(dict.fromkeys(model.parameters()))
        opt = torch.optim.SGD(params, lr=1e-3, foreach=False)
        trainer = CPTrainer(mark, model, opt, bufs, cp_mesh, ring_counter, MEASURED_STEP)

        comps, losses = run_steps(mark, trainer, model, params, bufs, STEPS)

    # ---- the allocation stream ----
    train = measured_train(prof, mark, comps[MEASURED_STEP], trace, MEASURED_STEP)

    # ---- saved tensors of a fourth forward (inside a CP context) ----
    pack, saved = saved_recorder(set(storages(params)))
    sdpa_saved = trainer.saved_forward(pack)

    result = fixture_head(case, GENERATED_BY)
    result["env"] = {"torch": torch.__version__, "transformers": transformers.__version__, "device": "cpu", "threads": 1, "processGroup": FAKE_PG if c > 1 else None}
    result["adjustment"] = ADJUSTMENT if c > 1 else None
    result["cpOptions"] = cp_options(A)
    result["cpBuffers"] = trainer.cp_buffers()
    result["params"] = {"whole": whole_params, "local": sum(local(p).numel() for p in params)}
    result["lossesNote"] = "with the fake process group the gathered k/v are uninitialised memory: the loss is not meaningful for cp > 1"
    result["losses"] = [losses[k] for k in sorted(losses)]
    result["savedBytes"] = sum(v["bytes"] for v in saved.values())
    result["saved"] = sorted(saved.values(), key=lambda v: -v["bytes"])
    result["sdpaNodes"] = sdpa_saved
    result["train"] = {case["optimizer"]: train}
    if c > 1:
        dist.destroy_process_group()
    return result


def run_steps(mark, trainer, model, params, bufs, steps: int = STEPS):
    """Steps 1..steps of `trainer` (inside the profiler), each in its marked segment with the bytes
    held before it (parameters, gradients, buffers, inputs; SGD keeps no state), then the `end`
    mark: (comps, losses) by step.  tp_cp_cpu.py runs its steps with it too."""
    comps = {}
    losses = {}
    for s_ in range(1, steps + 1):
        mark("segment", f"step{s_}")
        comps[s_] = {
            "paramBytes": sum(storages(params).values()),
            "gradBytes": sum(storages([p.grad for p in params]).values()),
            "bufferBytes": sum(storages(list(model.buffers())).values()),
            "inputBytes": sum(storages(bufs).values()),
            "optimizerStateBytes": 0,
        }
        losses[s_] = trainer.step(s_)
    mark("segment", "end")
    return comps, losses


def measured_train(prof, mark, comp: dict, trace: bool, measured_step: int = MEASURED_STEP) -> dict:
    """The measured step's `train` entry from the allocation stream (ring marks, allocation ids):
    live_peak of `comp` (the bytes held before it) and, traced, its events (`events`, and
    `stepEvents`: those of the optimizer step)."""
    stream = read_stream(prof, mark.labels, ring=True, alloc_id=True, inputs=trace)
    measured = step_profile(stream, f"step{measured_step}", ("phase", "ring", "op", "top"))
    step_events = live_rows(e for e, _ in measured["running"]) if trace else []
    train = live_peak(comp, measured)
    train["stepEvents"] = [e for e in step_events if e["phase"] == "step"] if trace else None
    train["events"] = step_events if trace else None
    return train


# ---------------------------------------------------------------------------------------------
# --verify: the adaptation is numerically right (real gloo group, 2 or 4 processes): logits of
# the CP model, unsharded, equal the plain model's; parameter gradients summed over ranks equal
# the plain model's (loss = sum(logits * w), w a fixed random tensor sharded as a CP buffer).
# ---------------------------------------------------------------------------------------------
VERIFY = [
    {"id": "verify_cp2_lb", "cp": 2, "loadBalance": True, "input": [2, 32], "kv": 2},
    {"id": "verify_cp2_nolb", "cp": 2, "loadBalance": False, "input": [2, 32], "kv": 2},
    {"id": "verify_cp4_lb", "cp": 4, "loadBalance": True, "input": [1, 32], "kv": 4},
]


def verify_model(transformers, torch, v):
    """A verify case's model (tp_cp_cpu.py's too): seed 0, CONFIG with v["kv"] key/value heads,
    sdpa, train mode.  Returns (config, model)."""
    torch.manual_seed(0)
    config = dict(CONFIG, num_key_value_heads=v["kv"])
    cfg = transformers.AutoConfig.for_model(config.pop("model_type"), **config)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    model.train()
    return cfg, model


def verify_child(v, rank, port, args) -> dict:
    transformers = import_hf(args)
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._context_parallel._attention import context_parallel_unshard

    torch.set_num_threads(1)
    c = v["cp"]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=c)
    mesh = init_device_mesh("cpu", (c,))
    A, _ = install_cpu_ring()
    A._cp_options.enable_load_balance = v["loadBalance"]
    cfg, model = verify_model(transformers, torch, v)
    b, s = v["input"]
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, cfg.vocab_size, (b, s), generator=g)
    w = torch.randn(b, s, cfg.vocab_size, generator=g)
    pos = torch.arange(s).unsqueeze(0).contiguous()
    # reference, no CP
    ref_logits = model(input_ids=ids, position_ids=pos, use_cache=False).logits
    (ref_logits * w).sum().backward()
    ref_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    with context_parallel(mesh, buffers=[ids, pos, w], buffer_seq_dims=[1, 1, 1]):
        logits = model(input_ids=ids, position_ids=pos, use_cache=False).logits
        (logits * w).sum().backward()
        lb = A._cp_options.enable_load_balance
    full = context_parallel_unshard(mesh, [logits.detach().contiguous()], [1])[0]
    out = {"rank": rank, "loadBalance": lb, "logitsMaxAbsDiff": float((full - ref_logits.detach()).abs().max())}
    gd = 0.0
    for n, p in model.named_parameters():
        gsum = p.grad.clone()
        dist.all_reduce(gsum)
        gd = max(gd, float((gsum - ref_grads[n]).abs().max() / (ref_grads[n].abs().max() + 1e-12)))
    out["gradMaxRelDiff"] = gd
    dist.destroy_process_group()
    return out


def run_verify(args, verify=None, *, script=__file__, report_head=None, world=lambda v: v["cp"], tmp_prefix="cpverify", only=None) -> int:
    """Runs each verify case (`verify`, default VERIFY; those in `only` when given) as `world(v)`
    gloo processes of `script --verify-child`, and writes `report_head` plus the cases to
    <out>/verify.json (tp_cp_cpu.py's --verify uses it with its own cases and head)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from gloo_harness import free_port

    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    bad = 0
    if report_head is None:
        report_head = dict(generatedBy=GENERATED_BY, command="/tmp/t213/bin/python tools/oracle/cp_cpu.py --verify", what="real gloo group: CP logits (context_parallel_unshard) vs the plain model's; parameter gradients all-reduced over ranks vs the plain model's; loss sum(logits * w)", adjustment=ADJUSTMENT)
    report = OrderedDict(report_head, cases=[])
    for v in VERIFY if verify is None else verify:
        if only and v["id"] not in only:
            continue
        port = free_port()
        tmp = tempfile.mkdtemp(prefix=tmp_prefix)
        n = world(v)
        procs = [subprocess.Popen([sys.executable, os.path.abspath(script), "--verify-child", v["id"], "--rank", str(r), "--port", str(port), "--child-out", os.path.join(tmp, f"{r}.json"), *hf_child_args(args)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(n)]
        outs = [p.communicate(timeout=600) for p in procs]
        res = []
        for r in range(n):
            try:
                with open(os.path.join(tmp, f"{r}.json")) as f:
                    res.append(json.load(f))
            except Exception:  # noqa: BLE001
                res.append({"rank": r, "error": outs[r][1][-2000:]})
        ok = all("error" not in x and x["logitsMaxAbsDiff"] < 1e-4 and x["gradMaxRelDiff"] < 1e-4 for x in res)
        bad += not ok
        report["cases"].append({**v, "ok": ok, "ranks": res})
        print(f"{v['id']}: {'OK' if ok else 'FAIL'} {json.dumps(res)}", flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "verify.json"), "w") as f:
        f.write(json.dumps(report, indent=1) + "\n")
    return 1 if bad else 0


def run_verify_child(args, verify, verify_child) -> int:
    """One rank of the verify case `args.verify_child`: `verify_child(v, rank, port, args)`'s result
    (or the error) to `args.child_out`."""
    v = next(x for x in verify if x["id"] == args.verify_child)
    try:
        res = verify_child(v, args.rank, args.port, args)
    except Exception as e:  # noqa: BLE001
        res = {"rank": args.rank, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
    with open(args.child_out, "w") as f:
        json.dump(res, f)
    return 0


def verify_args(ap, help: str) -> None:
    """--verify (`help`) and the hidden options of a verify child (tp_cp_cpu.py's too)."""
    ap.add_argument("--verify", action="store_true", help=help)
    ap.add_argument("--verify-child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)


def main(argv=None) -> int:
    ap = arg_parser(__doc__, DEFAULT_OUT)
    verify_args(ap, "numerical check of the CPU ring adaptation over gloo")
    args = ap.parse_args(argv)
    if args.verify_child is not None:
        return run_verify_child(args, VERIFY, verify_child)
    if args.verify:
        return run_verify(args)
    return drive(args, CASES, run_child, script=__file__, child_args=hf_child_args(args))


if __name__ == "__main__":
    sys.exit(main())
