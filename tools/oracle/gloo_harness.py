"""What the gloo-based CPU oracles (pipeline_cpu.py, deepspeed_cpu.py) share: a free local port
for each case's process group, and the driver that reads the cases, runs a child rank when asked
(`--child`), or runs the selected cases (`--only`) and writes one fixture per case."""
import json
import os
import shutil
import socket
import tempfile
import time
import traceback


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def drive(args, run_child, run_case, dump_fixture, tmp_prefix: str, rank_line) -> int:
    """The oracle's main after argument parsing; `rank_line(r)` summarises one rank of a fixture."""
    with open(args.cases) as f:
        cases = json.load(f)
    ids = [c["id"] for c in cases]
    if len(set(ids)) != len(ids):
        raise SystemExit("duplicate case ids in " + args.cases)

    if args.child is not None:
        case = next(c for c in cases if c["id"] == args.child)
        try:
            res = run_child(case, args.rank, args.port, args)
        except Exception as e:  # recorded by the parent
            res = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        with open(args.child_out, "w") as f:
            json.dump(res, f)
        return 0

    if args.only:
        want = [s.strip() for s in args.only.split(",") if s.strip()]
        missing = [w for w in want if w not in ids]
        if missing:
            raise SystemExit(f"unknown case ids: {missing}")
        cases = [c for c in cases if c["id"] in want]
    os.makedirs(args.out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=tmp_prefix)
    t_all = time.time()
    failed = 0
    for case in cases:
        t0 = time.time()
        doc = run_case(case, args, tmp)
        with open(os.path.join(args.out, f"{case['id']}.json"), "w") as f:
            f.write(dump_fixture(doc))
        secs = time.time() - t0
        if "error" in doc:
            failed += 1
            print(f"{case['id']}: ERROR {doc['error']} ({secs:.1f} s)", flush=True)
        else:
            print(f"{case['id']}: {' | '.join(rank_line(r) for r in doc['ranks'])} ({secs:.1f} s)", flush=True)
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"done: {len(cases)} cases, {failed} failed, in {time.time() - t_all:.1f} s", flush=True)
    return 1 if failed else 0
