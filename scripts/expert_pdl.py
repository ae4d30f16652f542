"""An experiment: the expert-centric path's four launches chained with programmatic dependent launch.

    python scripts/expert_pdl.py [--presets qwen3-30b-a3b olmoe-1b-7b mixtral-8x7b] [--T 1 8 64 256]
    TRITON_INTERPRET=1 python scripts/expert_pdl.py --check   # the contract only, on the CPU

``moe_expert(..., pdl=True)`` launches the gate/up GEMM, the down GEMM and combine while their
predecessor still runs; each waits for it in-kernel (``gdc_wait``) before it reads anything, so
only the gaps between launches can close, none of the bytes (a GEMM cannot fetch its weights
before align has said which expert a block belongs to). vLLM's ``fused_moe`` does not launch this
way, so the shipped baseline does not either; this measures what it would buy, at the bench's
routings (seed 1000 + T), each form timed twice in alternation in one process, the outputs of
both checked against each other (bit for bit) and against the float64 reference first.

``--aligns histogram parallel`` also swaps the align kernel (the one-program kernel shipped until
session 9, or the many-program one shipped since, at 128 pairs a program; both through
``scripts/align_variants.py``): every (align, PDL) form is timed twice in
alternation, and every form's output must be the same to the bit.

Rows: µs per layer call to results/<GPU>/expert_pdl.csv.
"""

import argparse
from functools import partial
from pathlib import Path

import torch

import warpdecode as wd
from warpdecode import _alloc
from warpdecode import expert as ex


def check():
    """PDL changes no bits (in the interpreter it is off; on a GPU the benchmark below checks it)."""
    gen = torch.Generator().manual_seed(0)
    for T, H, I, E, K in [(1, 40, 48, 5, 2), (5, 24, 40, 7, 7), (3, 16, 24, 3, 1)]:
        shape = wd.MoEShape("check", H=H, I=I, E=E, K=K)
        w13, w2 = shape.weights(dtype=torch.float32, seed=1)
        x = torch.randn(T, H, generator=gen)
        tw, ids = wd.route(torch.randn(T, E, generator=gen), K)
        with _alloc.poisoned():
            a = ex.moe_expert(x, w13, w2, tw, ids)
            b = ex.moe_expert(x, w13, w2, tw, ids, pdl=True)
        err = wd.rel_error(b, wd.reference_moe(x, w13, w2, tw, ids))
        assert torch.equal(a, b) and err < 1e-5, (T, H, I, E, K, err)
        print(f"T={T} H={H} I={I} E={E} K={K}: same bits, error {err:.1e}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=["qwen3-30b-a3b", "olmoe-1b-7b", "mixtral-8x7b"])
    p.add_argument("--T", type=int, nargs="+", default=[1, 8, 64, 256])
    p.add_argument("--aligns", nargs="+", default=["histogram"], choices=["histogram", "parallel"])
    p.add_argument("--check", action="store_true")
    args = p.parse_args()
    if args.check:
        return check()

    import sys
    sys.path.insert(0, str(Path(__file__).parent))
    from align_variants import histogram_align, parallel_align
    shipped_align = ex.align
    aligns = {"histogram": histogram_align, "parallel": parallel_align}

    from warpdecode.bench import data
    from warpdecode.bench.experiment import cases, checked_us, row

    rows = []
    for case in cases(args.presets, args.T):
        first = None
        for align, pdl in [(a, pdl) for _ in range(2) for a in args.aligns for pdl in (False, True)]:
            ex.align = aligns[align]
            try:
                us, err, y = checked_us(case, partial(ex.moe_expert, pdl=pdl), f"align={align} pdl={pdl}")
            finally:
                ex.align = shipped_align
            first = y if first is None else first
            if not torch.equal(y, first):
                raise AssertionError(f"{case.shape.name} T={case.T}: align={align} pdl={pdl} changed the output's bits")
            rows.append(row(case, pdl=pdl, align=align, us=us, err=err))
            print(f"{case.shape.name:14s} T={case.T:3d} align={align:9s} pdl={pdl!s:5s} {us:9.2f} us "
                  f"{100 * case.floor_us / us:5.1f}% err/floor {err:.2f}", flush=True)
    data.merge_write(Path(f"results/{torch.cuda.get_device_name().replace(' ', '_')}/expert_pdl.csv"), rows)


if __name__ == "__main__":
    main()
