"""Nsight Compute's counters on the kernels the missed targets run (no timing claims: ncu runs each
kernel alone, L2 flushed, PDL overlap off).

    ncu --profile-from-start off --clock-control none --section ... python3 scripts/profile_pair.py
    bash scripts/h200.sh profile      # the same, with the sections chosen there

What runs between cudaProfilerStart and cudaProfilerStop (ncu profiles only those launches),
everything launched once before for compilation:
  - the tuned warp pair at T = 1 on Qwen3-30B-A3B and OLMoE (the two T = 1 bars);
  - the one-launch tile read of ``scripts/read_variants.py`` (its best tile shape) on exactly the
    bytes of each of the pair's kernels: what a kernel that only streams those bytes achieves;
  - the expert path's kernels at OLMoE T = 256 (the one expert bar), with the shipped align and
    with the many-program one of ``scripts/align_variants.py``;
  - with ``--v15``, instead: v15's down kernel (``scripts/down_tma.py``, TMA boxes and cp.async) at
    Qwen3-30B-A3B T = 1, two tiles each, beside the shipped one, each after the shipped gate/up kernel.
Routings as the benchmark's (seed 1000 + T); every output is checked against the float64
reference before the profiled launches.
"""

import sys
from pathlib import Path

import torch
import triton

import warpdecode as wd
from warpdecode import expert as ex
from warpdecode.bench.workload import make_inputs, make_layers

sys.path.insert(0, str(Path(__file__).parent))
from align_variants import parallel_align  # noqa: E402
from read_variants import _tile_read  # noqa: E402


def checked(fn, x, w13, w2, tw, ids, name):
    y = fn()
    torch.cuda.synchronize()
    ref = wd.reference_moe(x, w13, w2, tw, ids)
    err = wd.rel_error(y, ref) / wd.rounding_floor(ref, torch.bfloat16)
    assert not y.isnan().any() and err <= 4, (name, err)
    print(f"{name}: error {err:.2f} × the bf16 floor", flush=True)


def v15_work():
    """v15's down kernel and the shipped one, each after the shipped gate/up kernel."""
    from down_tma import down_tma

    from warpdecode import warp as wp

    s = wd.get_preset("qwen3-30b-a3b")
    (w13, w2), = make_layers(s, 1)
    i, = make_inputs(s, 1, 1, seed=1001)
    cfg = wd.configs.warp_config(s.H, s.I, s.E, s.K, 1)
    act = wp.warp_gate_up(i.x, w13, i.topk_ids, cfg["gate_up"])
    work = [("qwen3-30b-a3b T=1 shipped down", lambda: wp.warp_down(act, w2, i.topk_ids, i.topk_weights, cfg["down"],
                                                                  torch.bfloat16))]
    for c in ({"BLOCK_H": 2, "num_warps": 1}, {"BLOCK_H": 8, "num_warps": 4},
              {"kind": "cp.async", "BLOCK_H": 2, "num_warps": 1}, {"kind": "cp.async", "BLOCK_H": 8, "num_warps": 4}):
        y = down_tma(act, w2, i.topk_ids, i.topk_weights, c, torch.bfloat16)
        ref = wp.warp_down(act, w2, i.topk_ids, i.topk_weights, cfg["down"], torch.bfloat16)
        assert not y.isnan().any() and wd.rel_error(y, ref) < 1e-2, c
        work.append((f"qwen3-30b-a3b T=1 v15 down {c}", lambda c=c: down_tma(act, w2, i.topk_ids, i.topk_weights, c,
                                                                           torch.bfloat16)))
    return work


def main():
    if "--v15" in sys.argv:
        return profiled(v15_work())
    work = []  # (name, launch) run once now, then once under the profiler
    for preset in ("qwen3-30b-a3b", "olmoe-1b-7b"):
        s = wd.get_preset(preset)
        (w13, w2), = make_layers(s, 1)
        i, = make_inputs(s, 1, 1, seed=1001)
        args = (i.x, w13, w2, i.topk_weights, i.topk_ids)
        checked(lambda a=args: wd.moe(*a, method="warp"), *args, f"{preset} T=1 warp")
        work.append((f"{preset} T=1 warp pair", lambda a=args: wd.moe(*a, method="warp")))
        distinct = torch.unique(i.topk_ids).numel()
        for phase, nbytes, warps in (("gate/up", distinct * 2 * s.I * s.H * 2, 4),
                                     ("down", distinct * s.I * s.H * 2, 8)):
            n = nbytes // 2
            src = torch.randn(n, device="cuda", dtype=torch.bfloat16)
            out = torch.empty(triton.cdiv(n, 8192), device="cuda", dtype=torch.float32)
            work.append((f"{preset} tile read, the {phase} kernel's {nbytes / 1e6:.1f} MB",
                         lambda s_=src, o=out, n=n, w=warps: _tile_read[(o.numel(),)](
                             s_, o, n, BLOCK=8192, SUB=2048, num_warps=w)))
    s = wd.get_preset("olmoe-1b-7b")
    (w13, w2), = make_layers(s, 1)
    i, = make_inputs(s, 256, 1, seed=1256)
    args = (i.x, w13, w2, i.topk_weights, i.topk_ids)
    checked(lambda: ex.moe_expert(*args), *args, "olmoe-1b-7b T=256 expert")
    work.append(("olmoe-1b-7b T=256 expert path", lambda: ex.moe_expert(*args)))
    work.append(("olmoe-1b-7b T=256 parallel align", lambda: parallel_align(i.topk_ids, s.E, 64)))
    profiled(work)


def profiled(work):
    """Each (name, launch) once for compilation, then once more between cudaProfilerStart and Stop."""
    for _, fn in work:
        fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for name, fn in work:
        torch.cuda.nvtx.range_push(name)
        fn()
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print("profiled, in order:", *(n for n, _ in work), sep="\n  ")


if __name__ == "__main__":
    main()
