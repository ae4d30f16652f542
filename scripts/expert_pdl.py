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
    from warpdecode.bench.sweep import meta
    from warpdecode.bench.timing import capture_poisoned, read_ceiling, time_replays
    from warpdecode.bench.workload import bytes_needed, make_inputs, make_layers, num_copies

    ceiling = read_ceiling()
    rows = []
    for name in args.presets:
        shape = wd.get_preset(name)
        L = num_copies(shape)
        layers = make_layers(shape, L)
        for T in args.T:
            inputs = make_inputs(shape, T, L, seed=1000 + T)
            floor_us = sum(bytes_needed(shape, i) for i in inputs) / L / (ceiling * 1e12) * 1e6
            ref = wd.reference_moe(inputs[0].x, *layers[0], inputs[0].topk_weights, inputs[0].topk_ids)
            pairs = list(zip(layers, inputs, strict=True))
            first = None
            for align, pdl in [(a, pdl) for _ in range(2) for a in args.aligns for pdl in (False, True)]:
                ex.align = aligns[align]
                try:
                    g, outs = capture_poisoned(lambda pdl=pdl, pairs=pairs: [
                        ex.moe_expert(i.x, w13, w2, i.topk_weights, i.topk_ids, pdl=pdl) for (w13, w2), i in pairs])
                finally:
                    ex.align = shipped_align
                err = wd.rel_error(outs[0], ref) / wd.rounding_floor(ref, torch.bfloat16)
                if not (err <= 4 and all(not y.isnan().any() for y in outs)):  # NaN fails too
                    raise AssertionError(f"{name} T={T} align={align} pdl={pdl}: error {err:.2f} × the rounding floor")
                first = outs[0].clone() if first is None else first
                if not torch.equal(outs[0], first):
                    raise AssertionError(f"{name} T={T}: align={align} pdl={pdl} changed the output's bits")
                us = time_replays(g, reps=60).median_us / L
                del g, outs
                rows.append({"preset": name, "T": T, "pdl": pdl, "align": align, "us": round(us, 3),
                             "floor_us": round(floor_us, 3),
                             "frac_ceiling": round(floor_us / us, 4), "error_over_floor": round(err, 3),
                             "ceiling_TBps": round(ceiling, 4), **meta()})
                print(f"{name:14s} T={T:3d} align={align:9s} pdl={pdl!s:5s} {us:9.2f} us {100 * floor_us / us:5.1f}% "
                      f"err/floor {err:.2f}", flush=True)
        layers = None
        torch.cuda.empty_cache()
    data.merge_write(Path(f"results/{torch.cuda.get_device_name().replace(' ', '_')}/expert_pdl.csv"), rows)


if __name__ == "__main__":
    main()
