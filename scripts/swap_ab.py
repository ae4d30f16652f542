"""An experiment: the expert GEMMs with SWAP_AB, against the tuned tiles.

    python scripts/swap_ab.py [--presets olmoe-1b-7b mixtral-8x7b qwen3-30b-a3b] [--T 1 8 32 256]
    TRITON_INTERPRET=1 python scripts/swap_ab.py --check   # against float64, on the CPU

At OLMoE T = 256 an expert holds ~32 pairs and the tuned tile is 64 rows: on Hopper's tensor cores
(64 rows per warp group) the block's rows are the MMA's M axis, so half of every product is
padding, and at T ≤ 8 (16-row tiles) the compiler falls back from wgmma altogether. ``SWAP_AB``
(vLLM's name) computes the tile transposed: the weight rows take the M axis (64 or 128 of them)
and the block's rows the N axis, which takes any multiple of 8. The weights are read the same way
and once; what changes is the tensor-core work and the accumulator's registers.

Here: the full path (``moe_expert``, the bench's routings, seed 1000 + T) with the tuned table's
tiles, plain (SWAP_AB off) and with SWAP_AB on the gate/up GEMM, the down GEMM, or both, each form
timed twice in alternation in one process, every output checked against float64 first. (Call 7 of
session 11 ran this before the table held any SWAP_AB; its log, ``logs/swap_ab.log``, names the
plain form "tuned".) Rows to results/<GPU>/swap_ab.csv.
"""

import argparse
from functools import partial
from pathlib import Path

import torch

import warpdecode as wd
from warpdecode import _alloc
from warpdecode import expert as ex
from warpdecode.bench.tune import SWAP_FORMS as FORMS
from warpdecode.bench.tune import with_swap as swapped
from warpdecode.configs import expert_config


def check():
    """SWAP_AB against float64 and against the plain tile, both GEMMs, at 16 and 32 rows (with and
    without HALF_M), bf16 and FP8 activations."""
    gen = torch.Generator().manual_seed(0)
    tile = {"BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1, "num_warps": 4, "num_stages": 2}
    for T, H, I, E, K, block_m, fmt in [(40, 40, 48, 5, 2, 32, "native"), (30, 24, 40, 7, 3, 16, "native"),
                                        (12, 300, 88, 3, 1, 32, "fp8")]:
        shape = wd.MoEShape("check", H=H, I=I, E=E, K=K)
        w13, w2 = shape.weights(dtype=torch.bfloat16, seed=1)
        x = torch.randn(T, H, generator=gen).bfloat16()
        tw, ids = wd.route(torch.randn(T, E, generator=gen), K)
        ref = wd.reference_moe(x, w13, w2, tw, ids)
        floor = wd.rounding_floor(ref, torch.bfloat16)
        for half in ([False, True] if block_m >= 32 else [False]):
            cfg = {"BLOCK_M": block_m, "gate_up": dict(tile, HALF_M=half), "down": dict(tile, HALF_M=half)}
            with _alloc.poisoned():
                plain = ex.moe_expert(x, w13, w2, tw, ids, act_format=fmt, config=cfg)
                bar = 4 if fmt == "native" else 1.05 * wd.rel_error(plain, ref) / floor  # FP8: ~30 × the floor
                for form, gemms in FORMS.items():
                    y = ex.moe_expert(x, w13, w2, tw, ids, act_format=fmt, config=swapped(cfg, gemms))
                    err = wd.rel_error(y, ref) / floor
                    near = wd.rel_error(y, plain) / floor
                    assert not y.isnan().any() and err <= bar and near <= 1.5, (T, H, I, E, K, form, err, near)
                    print(f"T={T} H={H} I={I} E={E} K={K} BLOCK_M={block_m} HALF_M={half} {fmt} {form}: "
                          f"error {err:.2f} × the floor, {near:.2f} from the plain tile")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=["olmoe-1b-7b", "mixtral-8x7b", "qwen3-30b-a3b"])
    p.add_argument("--T", type=int, nargs="+", default=[1, 8, 32, 256])
    p.add_argument("--check", action="store_true")
    args = p.parse_args()
    if args.check:
        return check()

    from warpdecode.bench import data
    from warpdecode.bench.experiment import cases, checked_us_or_none, row

    rows = []
    for case in cases(args.presets, args.T):
        s = case.shape
        cfg = expert_config(s.H, s.I, s.E, s.K, case.T)
        for _ in range(2):
            for form, gemms in FORMS.items():
                res = checked_us_or_none(case, partial(ex.moe_expert, config=swapped(cfg, gemms)), form)
                if res is None:  # a swapped tile out of shared memory
                    continue
                us, err, _y = res
                rows.append(row(case, form=form, BLOCK_M=cfg["BLOCK_M"], us=us, err=err))
                print(f"{s.name:14s} T={case.T:3d} BLOCK_M={cfg['BLOCK_M']:3d} {form:13s} {us:9.2f} us "
                      f"{100 * case.floor_us / us:5.1f}%  err/floor {err:.2f}", flush=True)
    data.merge_write(Path(f"results/{torch.cuda.get_device_name().replace(' ', '_')}/swap_ab.csv"), rows)


if __name__ == "__main__":
    main()
