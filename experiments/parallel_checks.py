"""What warpdecode.parallel's per-call checks cost: the ranks' agreement on the call's inputs
(``parallel.agree``: one all-gather of a few int64, always on) and ``check_routing=True``
(``parallel._same_routing``: one all-gather of the routing), each timed alone, on 2 ranks.

version   command                                                     verdict
gloo      python experiments/parallel_checks.py --version gloo       CPU ranks over gloo (the CI's backend);
                                                                      NCCL on GPUs is not measured here

Writes experiments/results/<device>/parallel_checks.csv: per check and T, the median µs per call
over ``--reps`` calls after a warm-up, on rank 0.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from warpdecode import parallel

TS = (1, 16, 256)
K, E = 8, 128  # Qwen3-30B-A3B's routing


def _time(fn, reps: int) -> float:
    for _ in range(10):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def _worker(rank: int, world: int, init: str, out: str, reps: int):
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    rows = []
    try:
        for T in TS:
            g = torch.Generator().manual_seed(T)
            ids = torch.randint(0, E, (T, K), generator=g, dtype=torch.int32)
            tw = torch.rand(T, K, generator=g)
            facts = {"layout": "ep", "T": T, "H": 2048, "I": 768, "E": E // world, "num_experts": E, "K": K,
                     "x.dtype": "torch.bfloat16", "weights": "16-bit"}
            agree_us = _time(lambda f=facts: parallel.agree(None, None, f, "the call's inputs"), reps)
            routing_us = _time(lambda w=tw, i=ids: parallel._same_routing(None, w, i), reps)
            for check, us in (("agree", agree_us), ("check_routing", routing_us)):
                rows.append({"check": check, "T": T, "K": K, "ranks": world, "backend": "gloo",
                             "median_us": round(us, 1)})
        if rank == 0:
            with open(out, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(rows[0]))
                w.writeheader()
                w.writerows(rows)
    finally:
        dist.destroy_process_group()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--version", choices=["gloo"], default="gloo")
    p.add_argument("--reps", type=int, default=300)
    args = p.parse_args(argv)
    out = Path(__file__).parent / "results" / "cpu" / "parallel_checks.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        init = f"file://{os.path.join(d, 'rendezvous')}"
        mp.spawn(_worker, args=(2, init, str(out), args.reps), nprocs=2)
    with out.open() as f:
        for r in csv.DictReader(f):
            print(f"{r['check']:>14}  T={r['T']:>4}  {r['median_us']:>8} µs per call")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
