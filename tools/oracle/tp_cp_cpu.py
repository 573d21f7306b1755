#!/usr/bin/env python3
"""One rank of tensor parallelism x context parallelism (torchtitan's layout without FSDP) of a
real transformers 4.40.2 Llama with ``attn_implementation="sdpa"``, measured on PyTorch 2.13 (CPU)
with the fake process group. It combines ``tp_cpu.py`` (the DTensor TP plan, the 4.40.2 head-count
adjustment, sequence and loss parallel) and ``cp_cpu.py`` (the CPU flash SDPA op routed through
torch's own ring attention, the CP buffers, the CP training step); the measurement is theirs
(``fake_pg_harness.py``).

Run from the repository root with the torch 2.13 CPU venv (cases run one at a time, each in its
own child process with one thread):

    /tmp/t213/bin/python tools/oracle/tp_cp_cpu.py [--only ID,...] [--out test/fixtures/tp-cp-cpu]
        [--transformers-src /work/hfenv/hf-4.40.2:/work/hfenv/stubs] [--hf-deps /usr/lib/python3/dist-packages]
    /tmp/t213/bin/python tools/oracle/tp_cp_cpu.py --verify   # numerical check over gloo -> verify.json

Layout (torchtitan ``ParallelDims``: mesh dims in the order pp, dp_replicate, dp_shard, cp, tp,
size-1 dims dropped, so tp is the innermost dim; ``apply_tp`` on ``world_mesh["tp"]``;
``create_context_parallel_ctx(cp_mesh=world_mesh["cp"], ...)``; the train context enters
``loss_parallel()`` first, then the CP context):

* ``init_process_group("fake", store=FakeStore(), rank=R, world_size=cp*tp)``;
  ``mesh = init_device_mesh("cpu", (cp, tp), mesh_dim_names=("cp", "tp"))`` (a 1-D mesh of the
  one dim > 1 in the control cases). Global rank R has cp coordinate R // tp and tp coordinate
  R % tp (recorded from ``mesh.get_coordinate()``).
* The model (``AutoModelForCausalLM.from_config``, sdpa, float32, seed 0), then
  ``parallelize_module(model, mesh["tp"], tp_cpu.tp_plan(cfg, sp, lp))`` and
  ``tp_cpu.localize_attention(model, tp)`` (tp_cpu.ADJUSTMENT).
* ``cp_cpu.install_cpu_ring`` (cp_cpu.ADJUSTMENT), load balance and rotate method set as the case
  says.
* Three steps of ``cp_cpu.CPTrainer`` (zero_grad(set_to_none=True); inside ``loss_parallel()``
  when lp, then a fresh ``context_parallel(mesh["cp"], buffers=[input_ids, labels, position_ids],
  buffer_seq_dims=[1, 1, 1])``: ``model(input_ids, labels, position_ids, use_cache=False).loss``
  and backward; SGD step outside), step 3 measured. ``savedBytes`` from a pack hook on a fourth
  forward inside the same contexts. Traced cases add ``train.sgd.events`` (every allocation and
  free of step 3: phase, ring mark, op, top op, input shapes, allocation id, running live bytes).

Under CP the q/k/v the ring sees are the TP-local tensors (ColwiseParallel's
``use_local_output=True``: plain tensors with the rank's heads/tp heads), which the CP monkey-patch
wraps as ``DTensor.from_local(Shard(2))`` on ``mesh["cp"]``. With sequence parallelism the decoder
layers' norms run on the tp shard of the (already CP-local) sequence: Shard(1) over tp of a
[B, s/cp, H] tensor.
"""

from __future__ import annotations

import contextlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import cp_cpu  # noqa: E402  (install_cpu_ring, cp_inputs, CPTrainer, cp_options, ADJUSTMENT)
import tp_cpu  # noqa: E402  (tp_plan, localize_attention, ADJUSTMENT)
from fake_pg_harness import FAKE_PG, Marker, arg_parser, drive, fixture_head, hf_child_args, import_hf, init_fake_pg, local, saved_recorder, start_child, storages  # noqa: E402

GENERATED_BY = "tools/oracle/tp_cp_cpu.py"
DEFAULT_OUT = os.path.join("test", "fixtures", "tp-cp-cpu")
STEPS = 3
MEASURED_STEP = 3
CONFIG = dict(cp_cpu.CONFIG)
MESH_ORDER = "torchtitan ParallelDims: dims pp, dp_replicate, dp_shard, cp, tp in that order, size-1 dims dropped (tp innermost: global rank = cp_rank * tp + tp_rank)"


def _case(cid, tp, cp, rank, **kw):
    c = {
        "id": cid,
        "config": dict(CONFIG),
        "transformers": "4.40.2",
        "attention": "sdpa",
        "input": [2, 64],
        "dtype": "float32",
        "tp": tp,
        "cp": cp,
        "rank": rank,
        "meshDimNames": [n for n, d in (("cp", cp), ("tp", tp)) if d > 1],
        "sequenceParallel": False,
        "lossParallel": False,
        "loadBalance": cp > 1,
        "rotateMethod": "allgather" if cp > 1 else None,
        "optimizer": "sgd",
        "traceStep": False,
    }
    c.update(kw)
    return c


CASES = [
    _case("tp2cp2", 2, 2, 0, traceStep=True),
    _case("tp2cp2_r3", 2, 2, 3),
    _case("tp2cp2_sp", 2, 2, 0, sequenceParallel=True),
    _case("tp2cp2_lp", 2, 2, 0, lossParallel=True),
    _case("tp2cp2_nolb", 2, 2, 0, loadBalance=False),
    _case("tp2cp2_mha", 2, 2, 0, config={**CONFIG, "num_key_value_heads": 4}),
    # controls through this same script: TP alone (sdpa, [2, 64]) and CP alone
    _case("tp2cp1", 2, 1, 0, note="control: TP alone, same model and input"),
    _case("tp2cp1_sp", 2, 1, 0, sequenceParallel=True, note="control: TP+SP alone"),
    _case("tp2cp1_lp", 2, 1, 0, lossParallel=True, note="control: TP+loss parallel alone"),
    _case("tp1cp2", 1, 2, 0, note="control: CP alone (test/fixtures/cp-cpu/cp2.json through this script)"),
]


def build_mesh(tp: int, cp: int):
    """(mesh, tp_mesh, cp_mesh, coordinate): init_device_mesh over the dims > 1 in torchtitan's
    order ("cp", "tp"); None for a dim of size 1 (and for the mesh without any)."""
    from torch.distributed.device_mesh import init_device_mesh

    dims = [(n, d) for n, d in (("cp", cp), ("tp", tp)) if d > 1]
    if not dims:
        return None, None, None, None
    mesh = init_device_mesh("cpu", tuple(d for _, d in dims), mesh_dim_names=tuple(n for n, _ in dims))
    sub = {n: (mesh if len(dims) == 1 else mesh[n]) for n, _ in dims}
    return mesh, sub.get("tp"), sub.get("cp"), mesh.get_coordinate()


class TPCPTrainer(cp_cpu.CPTrainer):
    """cp_cpu.CPTrainer with torchtitan's train context: loss_parallel() (when lp) outside the CP
    context."""

    def __init__(self, *a, lp: bool = False, **k):
        super().__init__(*a, **k)
        self.lp = lp

    @contextlib.contextmanager
    def ctx(self):
        from torch.distributed.tensor.parallel import loss_parallel

        with contextlib.ExitStack() as stack:
            if self.lp:
                stack.enter_context(loss_parallel())
            stack.enter_context(super().ctx())
            yield


def run_child(case: dict, args) -> dict:
    transformers = import_hf(args)
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    start_child(transformers, case)
    t, c, rank = int(case["tp"]), int(case["cp"]), int(case["rank"])
    sp, lp = bool(case["sequenceParallel"]), bool(case["lossParallel"])
    trace = bool(case.get("traceStep"))
    mark = Marker()

    A, ring_counter = None, {}
    mesh = tp_mesh = cp_mesh = coord = None
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=trace) as prof:
        mark("segment", "build")
        if t * c > 1:
            init_fake_pg(rank, t * c)
            mesh, tp_mesh, cp_mesh, coord = build_mesh(t, c)
        if c > 1:
            A, ring_counter = cp_cpu.install_cpu_ring(mark if trace else None)
            A._cp_options.enable_load_balance = bool(case["loadBalance"])
            A.set_rotate_method(case["rotateMethod"])
        torch.manual_seed(0)
        config = dict(case["config"])
        cfg = transformers.AutoConfig.for_model(config.pop("model_type"), **config)
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=case["attention"])
        model.train()
        whole_params = sum(p.numel() for p in model.parameters())
        bufs = cp_cpu.cp_inputs(cfg.vocab_size, case["input"])
        mark("segment", "wrap")
        if t > 1:
            from torch.distributed.tensor.parallel import parallelize_module

            parallelize_module(model, tp_mesh, tp_cpu.tp_plan(cfg, sp, lp))
            tp_cpu.localize_attention(model, t)
        params = list(dict.fromkeys(model.parameters()))
        opt = torch.optim.SGD(params, lr=1e-3, foreach=False)
        trainer = TPCPTrainer(mark, model, opt, bufs, cp_mesh, ring_counter, MEASURED_STEP, lp=lp)

        comps, losses = cp_cpu.run_steps(mark, trainer, model, params, bufs, STEPS)

    # ---- the allocation stream ----
    train = cp_cpu.measured_train(prof, mark, comps[MEASURED_STEP], trace, MEASURED_STEP)

    grad_table = []
    for n_, p_ in model.named_parameters():
        gr = p_.grad
        grad_table.append({"name": n_, "param": list(local(p_).shape), "paramPlacements": str(getattr(p_, "placements", None)), "grad": list(local(gr).shape) if gr is not None else None, "gradPlacements": str(getattr(gr, "placements", None))})

    # ---- saved tensors of a fourth forward (inside the same contexts) ----
    pack, saved = saved_recorder(set(storages(params)))
    sdpa_saved = trainer.saved_forward(pack)

    result = fixture_head(case, GENERATED_BY)
    result["env"] = {"torch": torch.__version__, "transformers": transformers.__version__, "device": "cpu", "threads": 1, "processGroup": FAKE_PG if t * c > 1 else None}
    result["adjustment"] = {"tp": tp_cpu.ADJUSTMENT if t > 1 else None, "cp": cp_cpu.ADJUSTMENT if c > 1 else None}
    result["mesh"] = {
        "order": MESH_ORDER,
        "shape": list(mesh.shape) if mesh is not None else [],
        "dimNames": list(mesh.mesh_dim_names) if mesh is not None else [],
        "coordinate": coord,
        "cpRank": cp_mesh.get_local_rank() if cp_mesh is not None else 0,
        "tpRank": tp_mesh.get_local_rank() if tp_mesh is not None else 0,
        "tpGroupRanks": tp_mesh.mesh.flatten().tolist() if tp_mesh is not None else [rank],
        "cpGroupRanks": cp_mesh.mesh.flatten().tolist() if cp_mesh is not None else [rank],
    }
    result["cpOptions"] = cp_cpu.cp_options(A)
    result["cpBuffers"] = trainer.cp_buffers()
    result["params"] = {"whole": whole_params, "local": sum(local(p).numel() for p in params)}
    result["paramTable"] = grad_table
    result["lossesNote"] = "with the fake process group collectives move no data: the loss is not meaningful for tp*cp > 1"
    result["losses"] = [losses[k] for k in sorted(losses)]
    result["savedBytes"] = sum(v["bytes"] for v in saved.values())
    result["saved"] = sorted(saved.values(), key=lambda v: -v["bytes"])
    result["sdpaNodes"] = sdpa_saved
    result["train"] = {case["optimizer"]: train}
    if t * c > 1:
        dist.destroy_process_group()
    return result


def summary(res: dict) -> str:
    tr = res["train"]["sgd"]
    m = res["mesh"]
    return f"cp/tp rank {m['cpRank']}/{m['tpRank']} params {res['params']['local']} saved {res['savedBytes']} livePeak {tr['livePeakBytes']} baseline {tr['baselineBytes']} unattributed {tr['unattributedBytes']} at {tr['livePeakAt']}"


# ---------------------------------------------------------------------------------------------
# --verify: real gloo group, tp*cp processes. Logits of the TP x CP model (full_tensor over tp
# when loss parallel, context_parallel_unshard over cp) equal the plain model's; parameter
# gradients (full_tensor over tp, all-reduced over cp) equal the plain model's. The loss is
# cross_entropy(logits, targets, reduction="sum") with random targets sharded as a CP buffer
# (not HF's internally shifted loss, which is per-shard under CP).
# ---------------------------------------------------------------------------------------------
VERIFY = [
    {"id": "verify_tp2cp2", "tp": 2, "cp": 2, "loadBalance": True, "sp": False, "lp": False, "input": [2, 32], "kv": 2},
    {"id": "verify_tp2cp2_sp", "tp": 2, "cp": 2, "loadBalance": True, "sp": True, "lp": False, "input": [2, 32], "kv": 2},
    {"id": "verify_tp2cp2_lp_nolb", "tp": 2, "cp": 2, "loadBalance": False, "sp": False, "lp": True, "input": [2, 32], "kv": 2},
]


def verify_child(v, rank, port, args) -> dict:
    transformers = import_hf(args)
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._context_parallel._attention import context_parallel_unshard
    from torch.distributed.tensor.parallel import loss_parallel, parallelize_module

    torch.set_num_threads(1)
    t, c = v["tp"], v["cp"]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=t * c)
    mesh, tp_mesh, cp_mesh, coord = build_mesh(t, c)
    A, _ = cp_cpu.install_cpu_ring()
    A._cp_options.enable_load_balance = v["loadBalance"]
    cfg, model = cp_cpu.verify_model(transformers, torch, v)
    b, s = v["input"]
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, cfg.vocab_size, (b, s), generator=g)
    tgt = torch.randint(0, cfg.vocab_size, (b, s), generator=g)
    pos = torch.arange(s).unsqueeze(0).contiguous()
    # reference: the plain model, before parallelizing
    ref_logits = model(input_ids=ids, position_ids=pos, use_cache=False).logits
    F.cross_entropy(ref_logits.flatten(0, 1), tgt.flatten(), reduction="sum").backward()
    ref_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    ref_logits = ref_logits.detach()
    model.zero_grad(set_to_none=True)
    parallelize_module(model, tp_mesh, tp_cpu.tp_plan(cfg, v["sp"], v["lp"]))
    tp_cpu.localize_attention(model, t)
    with contextlib.ExitStack() as stack:
        if v["lp"]:
            stack.enter_context(loss_parallel())
        stack.enter_context(context_parallel(cp_mesh, buffers=[ids, pos, tgt], buffer_seq_dims=[1, 1, 1]))
        logits = model(input_ids=ids, position_ids=pos, use_cache=False).logits
        F.cross_entropy(logits.flatten(0, 1), tgt.flatten(), reduction="sum").backward()
        lb = A._cp_options.enable_load_balance
    lg = logits.detach()
    if isinstance(lg, DTensor):
        lg = lg.full_tensor()
    full = context_parallel_unshard(cp_mesh, [lg.contiguous()], [1])[0]
    out = {"rank": rank, "coordinate": coord, "loadBalance": lb, "logitsDTensor": isinstance(logits, DTensor), "logitsMaxAbsDiff": float((full - ref_logits).abs().max())}
    gd, worst = 0.0, None
    for n, p in model.named_parameters():
        gsum = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad.clone()
        dist.all_reduce(gsum, group=cp_mesh.get_group())
        d = float((gsum - ref_grads[n]).abs().max() / (ref_grads[n].abs().max() + 1e-12))
        if d >= gd:
            gd, worst = d, n
    out["gradMaxRelDiff"] = gd
    out["gradWorstParam"] = worst
    dist.destroy_process_group()
    return out


def run_verify(args) -> int:
    head = dict(generatedBy=GENERATED_BY, command="/tmp/t213/bin/python tools/oracle/tp_cp_cpu.py --verify", what="real gloo group, tp*cp processes, mesh ('cp', 'tp'): logits (full_tensor over tp when loss parallel, context_parallel_unshard over cp) vs the plain model's; parameter gradients (full_tensor over tp, all-reduced over the cp group) vs the plain model's; loss cross_entropy(logits, targets, reduction='sum') with random targets as a CP buffer", adjustment={"tp": tp_cpu.ADJUSTMENT, "cp": cp_cpu.ADJUSTMENT})
    only = set(args.only.split(",")) if args.only else None
    return cp_cpu.run_verify(args, VERIFY, script=__file__, report_head=head, world=lambda v: v["tp"] * v["cp"], tmp_prefix="tpcpverify", only=only)


def main(argv=None) -> int:
    ap = arg_parser(__doc__, DEFAULT_OUT)
    cp_cpu.verify_args(ap, "numerical check over gloo")
    args = ap.parse_args(argv)
    if args.verify_child is not None:
        return cp_cpu.run_verify_child(args, VERIFY, verify_child)
    if args.verify:
        return run_verify(args)
    return drive(args, CASES, run_child, script=__file__, summary=summary, child_args=hf_child_args(args), generated_by=GENERATED_BY)


if __name__ == "__main__":
    sys.exit(main())
