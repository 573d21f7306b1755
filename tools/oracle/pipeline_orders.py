#!/usr/bin/env python3
"""The compute order of torch.distributed.pipelining's ScheduleInterleaved1F1B per rank, as its
own `_calculate_single_rank_operations` computes it (idle slots dropped), for a grid of
(pp, virtual stages, micro-batches). No process group is needed: the method reads only the
sizes. Run with PyTorch 2.13 CPU (the venv of tools/oracle/README.md):

    /tmp/t213/bin/python tools/oracle/pipeline_orders.py > test/fixtures/pipeline-orders/interleaved-1f1b.json
"""
import json
import types

import torch
from torch.distributed.pipelining.schedules import ScheduleInterleaved1F1B, _ComputationType

rows = []
for pp in (2, 3, 4):
    for v in (2, 3):
        for m in (1, 2, 3, 4, 6, 8, 12):
            rounds = max(1, m // pp)
            if m % rounds:
                continue
            me = types.SimpleNamespace(pp_group_size=pp, n_local_stages=v, _n_microbatches=m, microbatches_per_round=m // rounds)
            for rank in range(pp):
                ops = ScheduleInterleaved1F1B._calculate_single_rank_operations(me, rank)
                seq = []
                for a in ops:
                    if a is None:
                        continue
                    kind = {_ComputationType.FORWARD: "forward", _ComputationType.FULL_BACKWARD: "backward"}[a.computation_type]
                    seq.append([kind, a.stage_index, a.microbatch_index])
                rows.append({"pp": pp, "virtualStages": v, "microBatches": m, "rank": rank, "actions": seq})
print(json.dumps({"torch": torch.__version__, "command": "/tmp/t213/bin/python tools/oracle/pipeline_orders.py", "orders": rows}, separators=(",", ":")))
