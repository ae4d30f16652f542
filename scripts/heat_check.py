"""Is the spread of Mixtral's T=1 time (163–186 µs for the same kernels and configs) the GPU's
state after heavy work? Times warp decode and the expert-centric path on Mixtral at T=1 three
ways: on a rested GPU, right after SECONDS of dense bf16 matmuls at full power (what a sweep's
DeepSeek-V3 T=256 rows do just before Mixtral's), and again after a pause; with the SM clock,
power and temperature nvidia-smi reports after each.

    python scripts/heat_check.py [--seconds 10] [--pause 20]
"""

import argparse
import subprocess
import time
from functools import partial

import torch

from warpdecode.bench.tune import _over_layers, _time
from warpdecode.bench.workload import make_inputs, make_layers, num_copies
from warpdecode.expert import moe_expert
from warpdecode.presets import get_preset
from warpdecode.warp import moe_warp


def smi() -> str:
    q = "clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active"
    return subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"], capture_output=True,
                          text=True).stdout.strip()


def heat(seconds: float):
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t0 = time.time()
    while time.time() - t0 < seconds:
        for _ in range(20):
            a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--pause", type=float, default=20)
    args = p.parse_args()
    shape = get_preset("mixtral-8x7b")
    L = num_copies(shape)
    layers = make_layers(shape, L)
    inputs = make_inputs(shape, 1, L, seed=1001)
    cols = ([i.x for i in inputs], [w for w, _ in layers], [w for _, w in layers],
            [i.topk_weights for i in inputs], [i.topk_ids for i in inputs])

    def both(label):
        for name, fn in (("warp", moe_warp), ("expert", moe_expert)):
            us = _time(_over_layers(partial(fn), *cols), 100) / L
            print(f"{label:28s} {name:6s} {us:8.2f} us   [{smi()}]", flush=True)

    both("rested")
    heat(args.seconds)
    both(f"after {args.seconds:.0f} s of matmuls")
    time.sleep(args.pause)
    both(f"after a {args.pause:.0f} s pause")
    heat(args.seconds)
    both(f"after {args.seconds:.0f} s of matmuls")


if __name__ == "__main__":
    main()
