"""Does warp decode's time at small T depend on where the weights sit in memory, and does the
gate/up kernel's grid order change that? (Mixtral T=1 measured 163–186 µs across runs with the
same configs, results/NOTES.md.)

For each preset and placement, a spacer of random size is allocated first, so the layer copies
land at other addresses; then the tuned pair runs with the gate/up grid in both orders:
``pair`` (the pair index fastest, shipped) and ``neuron`` (one pair's neuron blocks after
another: programs side by side read consecutive rows of one expert). Both orders run this file's
copy of the gate/up kernel (``gate_up_kernel``, the shipped tile), then the shipped down kernel.

    python scripts/grid_order.py [--presets mixtral-8x7b ...] [--placements 4]

Writes results/<GPU>/grid_order.csv: µs per layer, fraction of the read ceiling, by placement.
"""

import argparse
from functools import partial
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents

from warpdecode import _alloc, configs
from warpdecode import warp as wp
from warpdecode.bench import data
from warpdecode.bench.sweep import meta
from warpdecode.bench.timing import read_ceiling
from warpdecode.bench.tune import _over_layers, _time
from warpdecode.bench.workload import bytes_needed, make_inputs, make_layers, num_copies
from warpdecode.kernels.warp_pair import _gate_up_tile
from warpdecode.presets import get_preset


@triton.jit(do_not_specialize=["NUM_PAIRS"])
def gate_up_kernel(
    x_ptr, w13_ptr, topk_ids_ptr, act_ptr, H, I, NUM_PAIRS, K, stride_xt, stride_we, stride_wr, stride_at,
    BLOCK_I: tl.constexpr, BLOCK_H: tl.constexpr, USE_PDL: tl.constexpr,
    PAIR_FASTEST: tl.constexpr,  # the shipped grid order; False: neuron blocks fastest, one pair after another
):
    """The shipped gate/up kernel (kernels/warp_pair.py ``warp_gate_up_kernel``) in either grid order."""
    if USE_PDL:
        gdc_launch_dependents()
    pid = tl.program_id(0)
    if PAIR_FASTEST:  # programs side by side read the same neuron rows of every pair (shared experts: L2)
        pair, pid_i = pid % NUM_PAIRS, pid // NUM_PAIRS
    else:  # programs side by side read consecutive rows of one expert, which streams expert by expert
        blocks_i = tl.cdiv(I, BLOCK_I)
        pair, pid_i = pid // blocks_i, pid % blocks_i
    _gate_up_tile(x_ptr, w13_ptr, topk_ids_ptr, act_ptr, H, I, K, stride_xt, stride_we, stride_wr, stride_at,
                  pair, pid_i, BLOCK_I, BLOCK_H)


def pair_in_order(x, w13, w2, topk_ids, topk_weights, c_gu: dict, c_dn: dict, pair_fastest: bool):
    """gate_up_kernel in the given grid order, then the shipped down kernel (with PDL where the GPU has it)."""
    T, H = x.shape
    I = w13.shape[1] // 2  # noqa: E741
    K = topk_ids.shape[1]
    act = _alloc.empty(T * K, I, dtype=torch.float32, device=x.device)
    gate_up_kernel[(T * K * triton.cdiv(I, c_gu["BLOCK_I"]),)](
        x, w13, topk_ids, act, H, I, T * K, K, x.stride(0), w13.stride(0), w13.stride(1), act.stride(0),
        BLOCK_I=c_gu["BLOCK_I"], BLOCK_H=c_gu["BLOCK_H"], USE_PDL=wp.USE_PDL, PAIR_FASTEST=pair_fastest,
        num_warps=c_gu["num_warps"], num_stages=c_gu["num_stages"])
    return wp.warp_down(act, w2, topk_ids, topk_weights, c_dn, x.dtype)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=["mixtral-8x7b", "qwen3-30b-a3b", "gpt-oss-20b", "qwen3-235b-a22b"])
    p.add_argument("--T", type=int, nargs="+", default=[1, 2])
    p.add_argument("--placements", type=int, default=4)
    p.add_argument("--seed", type=int, default=5000, help="routing draw: make_inputs seed = SEED + T (bench: 1000)")
    p.add_argument("--out", default=f"results/{torch.cuda.get_device_name().replace(' ', '_')}/grid_order.csv")
    args = p.parse_args()
    ceiling = read_ceiling()
    gen = torch.Generator().manual_seed(7)
    rows = []
    for name in args.presets:
        shape = get_preset(name)
        for placement in range(args.placements):
            spacer_mb = 0 if placement == 0 else int(torch.randint(1, 4096, (1,), generator=gen))
            spacer = torch.empty(spacer_mb << 20, dtype=torch.uint8, device="cuda")
            L = num_copies(shape)
            layers = make_layers(shape, L, seed=placement)
            w13s, w2s = [a for a, _ in layers], [b for _, b in layers]
            for T in args.T:
                inputs = make_inputs(shape, T, L, seed=args.seed + T)
                xs, ids, tws = [i.x for i in inputs], [i.topk_ids for i in inputs], [i.topk_weights for i in inputs]
                cfg = configs.warp_config(shape.H, shape.I, shape.E, shape.K, T)
                floor = sum(bytes_needed(shape, i) for i in inputs) / L / (ceiling * 1e12) * 1e6
                for order in ("pair", "neuron"):
                    step = partial(pair_in_order, c_gu=cfg["gate_up"], c_dn=cfg["down"], pair_fastest=order == "pair")
                    us = _time(_over_layers(step, xs, w13s, w2s, ids, tws), 50) / L
                    rows.append({"preset": name, "T": T, "seed": args.seed + T, "placement": placement,
                                 "spacer_MB": spacer_mb,
                                 "order": order, "us": round(us, 2), "floor_us": round(floor, 2),
                                 "frac_ceiling": round(floor / us, 4), "ceiling_TBps": round(ceiling, 4), **meta()})
                    print(f"{name:16s} T={T} seed {args.seed + T} placement {placement} "
                          f"(+{spacer_mb:4d} MB) {order:6s} "
                          f"{us:8.2f} us "
                          f"{100 * floor / us:5.1f}%", flush=True)
            del layers, w13s, w2s, spacer
            torch.cuda.empty_cache()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    data.merge_write(Path(args.out), rows)


if __name__ == "__main__":
    main()
