"""An experiment: the expert GEMMs with HALF_M, against the shipped tiles.

    python scripts/half_m.py [--presets mixtral-8x7b olmoe-1b-7b ...] [--T 64 128 256]
    TRITON_INTERPRET=1 python scripts/half_m.py --check   # the contract only, on the CPU

At large T the expert path stops being a pure weight stream: Mixtral's 8 experts move the same
2.8 GB at T = 16 (99 % of the read ceiling) and at T = 256 (83 %). What grows is tensor-core work
on padding: at T = 256 an expert holds ~64 pairs, BLOCK_M = 128 (vLLM's pick and the tuner's), so
half of the rows every tile multiplies are padding. ``HALF_M`` runs a block whose upper half is
all padding as a BLOCK_M/2-row tile (a second, pipelined loop in the same kernel): an expert with
≤ 64 pairs does half the tensor-core work and still reads its weights once.

Here: the full path (``moe_expert``, the bench's routings, seed 1000 + T) with the tuned table's
config, against the same config with ``HALF_M`` on both GEMMs, each timed twice in alternation in
one process; the outputs checked against the float64 reference and against each other (bit for
bit). Also printed: the share of blocks that run half-height. Rows to results/<GPU>/half_m.csv.
"""

import argparse
import copy
from functools import partial
from pathlib import Path

import torch

import warpdecode as wd
from warpdecode import _alloc
from warpdecode import expert as ex
from warpdecode.configs import expert_config


def halved(cfg: dict) -> dict:
    out = copy.deepcopy(cfg)
    for gemm in ("gate_up", "down"):
        out[gemm]["HALF_M"] = True
    return out


def half_share(topk_ids: torch.Tensor, E: int, block_m: int) -> float:
    """Of the blocks the GEMMs run, the share whose upper half is padding."""
    counts = torch.bincount(topk_ids.flatten().long(), minlength=E)
    blocks = -(-counts // block_m)
    last = counts - (blocks - 1) * block_m  # pairs in each expert's last block
    half = ((blocks > 0) & (last <= block_m // 2)).sum().item()
    return half / max(1, blocks.sum().item())


def check():
    """HALF_M changes no bits, on blocks of both kinds (BLOCK_M = 32, so 16-row half tiles)."""
    gen = torch.Generator().manual_seed(0)
    tile = {"BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1, "num_warps": 4, "num_stages": 2}
    for T, H, I, E, K in [(40, 40, 48, 5, 2), (40, 24, 40, 3, 1), (30, 16, 24, 7, 7)]:
        shape = wd.MoEShape("check", H=H, I=I, E=E, K=K)
        w13, w2 = shape.weights(dtype=torch.float32, seed=1)
        x = torch.randn(T, H, generator=gen)
        tw, ids = wd.route(torch.randn(T, E, generator=gen), K)
        cfg = {"BLOCK_M": 32, "gate_up": dict(tile), "down": dict(tile)}
        with _alloc.poisoned():
            a = ex.moe_expert(x, w13, w2, tw, ids, config=cfg)
            b = ex.moe_expert(x, w13, w2, tw, ids, config=halved(cfg))
        err = wd.rel_error(b, wd.reference_moe(x, w13, w2, tw, ids))
        assert torch.equal(a, b) and err < 1e-5, (T, H, I, E, K, err)
        print(f"T={T} H={H} I={I} E={E} K={K}: same bits, error {err:.1e}, "
              f"{100 * half_share(ids, E, 32):.0f}% of blocks half-height")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=["mixtral-8x7b", "olmoe-1b-7b", "qwen3-30b-a3b", "gpt-oss-20b",
                                                    "qwen3-235b-a22b", "deepseek-v3"])
    p.add_argument("--T", type=int, nargs="+", default=[64, 128, 256])
    p.add_argument("--check", action="store_true")
    args = p.parse_args()
    if args.check:
        return check()

    from warpdecode.bench import data
    from warpdecode.bench.experiment import cases, checked_us, row

    rows = []
    for case in cases(args.presets, args.T):
        s, T = case.shape, case.T
        cfg = expert_config(s.H, s.I, s.E, s.K, T)
        if cfg["BLOCK_M"] < 32:
            print(f"{s.name:14s} T={T:3d} BLOCK_M={cfg['BLOCK_M']}: no half tile", flush=True)
            continue
        share = sum(half_share(i.topk_ids, s.E, cfg["BLOCK_M"]) for i in case.inputs) / len(case.inputs)
        got = {}
        for half in (False, True, False, True):
            c = halved(cfg) if half else cfg
            us, err, y = checked_us(case, partial(ex.moe_expert, config=c), f"HALF_M={half}")
            got.setdefault(half, y)
            if not torch.equal(got[half], got[False]):
                raise AssertionError(f"{s.name} T={T}: HALF_M changed the output's bits")
            rows.append(row(case, BLOCK_M=cfg["BLOCK_M"], half_m=half, half_blocks=round(share, 3), us=us, err=err))
            print(f"{s.name:14s} T={T:3d} BLOCK_M={cfg['BLOCK_M']:3d} half={half!s:5s} {us:9.2f} us "
                  f"{100 * case.floor_us / us:5.1f}%  err/floor {err:.2f}  half-height blocks {100 * share:.0f}%",
                  flush=True)
    data.merge_write(Path(f"results/{torch.cuda.get_device_name().replace(' ', '_')}/half_m.csv"), rows)


if __name__ == "__main__":
    main()
