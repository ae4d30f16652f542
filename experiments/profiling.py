"""Profiles and the accuracy claim's dependence on rounding.

    ncu --profile-from-start off --clock-control none … python experiments/profiling.py --version pair
    bash tools/gpu.sh profile                               # the same, with the sections chosen there
    python experiments/profiling.py --version hf_generate [--batch 1] [--tokens 16]
    python experiments/profiling.py --version hf_compiled [--model qwen3-30b-a3b] [--layers 8] [--batch 1]
    python experiments/profiling.py --version rounding        # CPU, float64

- pair: Nsight Compute on the T = 1 pair and on tile reads of its kernels' bytes: gate/up at 97 %
  of its tile read, down at 65 %; the down kernel is the gap.
- hf_generate: cProfile of HF ``generate``: host-bound, the same host time for both experts
  implementations.
- hf_compiled: torch.profiler on the compiled static-cache ``generate`` (the fast path): per
  decode step, the host's launches outside the CUDA graphs, the GPU's busy time and the gaps.
- rounding: the float64 emulation of each path's roundings: the production sequence (gate and up
  rounded before SiLU·up) is 2.40× warp decode's error at K = 2.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
from pathlib import Path

import harness
import torch
import triton
from expert_path import parallel_align
from reads import _tile_read

import warpdecode
import warpdecode as wd
from bench import emulate as em
from bench.hf_generate import make_model
from warpdecode import expert as ex
from warpdecode.integrations.transformers import register
from warpdecode.workload import make_inputs, make_layers

# ==================================================================================================
# version pair: Nsight Compute's counters on the kernels the missed targets run (no timing claims: ncu runs each
#
# kernel alone, L2 flushed, PDL overlap off).
#
#     ncu --profile-from-start off --clock-control none --section ... python3 experiments/profiling.py --version pair
#     bash tools/gpu.sh profile        # the same, with the sections chosen there
#
# What runs between cudaProfilerStart and cudaProfilerStop (ncu profiles only those launches),
# everything launched once before for compilation:
#   - the tuned warp pair at T = 1 on Qwen3-30B-A3B and OLMoE (the two T = 1 bars);
#   - the one-launch tile read of ``experiments/reads.py --version tiles`` (its best tile shape) on exactly the
#     bytes of each of the pair's kernels: what a kernel that only streams those bytes achieves;
#   - the expert path's kernels at OLMoE T = 256 (the one expert bar), with the shipped align and
#     with the many-program one of ``experiments/expert_path.py --version align``;
#   - with ``--v15``, instead: v15's down kernel (``experiments/warp_down.py --version 15``, TMA boxes and cp.async) at
#     Qwen3-30B-A3B T = 1, two tiles each, beside the shipped one, each after the shipped gate/up kernel.
# Routings as the benchmark's (seed 1000 + T); every output is checked against the float64
# reference before the profiled launches.
# ==================================================================================================

sys.path.insert(0, str(Path(__file__).parent))


def checked(fn, x, w13, w2, tw, ids, name):
    y = fn()
    torch.cuda.synchronize()
    ref = wd.reference_moe(x, w13, w2, tw, ids)
    err = wd.rel_error(y, ref) / wd.rounding_floor(ref, torch.bfloat16)
    assert not y.isnan().any() and err <= 4, (name, err)
    print(f"{name}: error {err:.2f} × the bf16 floor", flush=True)


def v15_work():
    """v15's down kernel and the shipped one, each after the shipped gate/up kernel."""
    from warp_down import down_tma

    from warpdecode import warp as wp

    s = wd.get_preset("qwen3-30b-a3b")
    (w13, w2), = make_layers(s, 1)
    i, = make_inputs(s, 1, 1, seed=1001)
    cfg = wd.configs.warp_config(s.H, s.I, s.E, s.K, 1)
    act = wp.warp_gate_up(i.x, w13, i.topk_ids, i.topk_weights, cfg["gate_up"])
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


def main_pair():
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


# ==================================================================================================
# version hf_generate: Where a Hugging Face ``generate`` step spends its host time, per experts implementation.
#
#
#     python experiments/profiling.py --version hf_generate [--batch 1] [--tokens 16]
#
# At batch 1 HF's eager ``generate`` is bound by the CPU (Python and kernel launches), not by the
# GPU; cProfile of the decode loop shows which functions cost what, for ``grouped_mm`` and for
# ``warpdecode``.
# ==================================================================================================

def main_hf_generate():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--layers", type=int, default=8)
    args = p.parse_args()
    register()
    model = make_model(args.layers)
    ids = torch.randint(0, model.config.vocab_size, (args.batch, 32), device="cuda")
    kw = dict(max_new_tokens=args.tokens, min_new_tokens=args.tokens, do_sample=False)
    for impl in ("grouped_mm", "warpdecode"):
        model.set_experts_implementation(impl)
        with torch.no_grad():
            model.generate(ids, **kw)
            torch.cuda.synchronize()
            prof = cProfile.Profile()
            prof.enable()
            model.generate(ids, **kw)
            torch.cuda.synchronize()
            prof.disable()
        print(f"\n===== {impl}: batch {args.batch}, {args.tokens} new tokens, {args.layers} layers")
        pstats.Stats(prof).sort_stats("tottime").print_stats(22)


# ==================================================================================================
# version hf_compiled: Where a compiled static-cache ``generate`` step spends its time, per experts implementation.
#
#     python experiments/profiling.py --version hf_compiled [--model qwen3-30b-a3b] [--layers 8] [--batch 1]
#
# ``generate`` as ``bench.hf_generate`` runs it (static cache, ``torch.compile`` with
# ``mode="reduce-overhead"``, ``fullgraph=True``), one warm-up call, then one call under
# ``torch.profiler`` (CPU and CUDA activities). Per decode step it prints: the step's time (the
# logits processor's CUDA events, as the benchmark measures it), the GPU's busy time (the union of
# its kernels' and copies' intervals), the CUDA graph launches and the kernel launches and copies
# the host issued outside them (runtime and driver API calls), and the host's top operators by
# self time. A kernel the graph should hold but the host launches each step (an operator run
# eagerly between graph partitions, say) shows as launches per step; host time the GPU waits on
# shows as busy time well under the step's time.
# ==================================================================================================

LAUNCH_APIS = ("cudaGraphLaunch", "cuGraphLaunch", "cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel",
               "cuLaunchKernelEx", "cudaMemcpyAsync", "cudaMemsetAsync", "cudaStreamSynchronize",
               "cudaEventSynchronize", "cudaDeviceSynchronize", "cudaStreamWaitEvent")


def _busy_us(intervals) -> float:
    """Microseconds covered by the union of (start, end) intervals."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def main_hf_compiled():
    from torch._dynamo.utils import counters
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    from bench.hf_generate import _reset_compiled, generate_kwargs, step_clock

    p = argparse.ArgumentParser()
    p.add_argument("--model", default="qwen3-30b-a3b")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--tokens", type=int, default=24, help="new tokens per call")
    p.add_argument("--impls", nargs="+", default=["grouped_mm", "warpdecode"])
    p.add_argument("--trace", default=None, help="write each implementation's Chrome trace to TRACE.<impl>.json.gz")
    args = p.parse_args()
    import torch._inductor.config as ic

    print(f"inductor: triton.cudagraphs={ic.triton.cudagraphs} graph_partition={getattr(ic, 'graph_partition', None)} "
          f"cudagraph_trees={ic.triton.cudagraph_trees}; torch {torch.__version__}, triton {triton.__version__}",
          flush=True)
    register()
    model = make_model(args.layers, args.model)
    ids = torch.randint(3, model.config.vocab_size, (args.batch, 32), device="cuda",
                        generator=torch.Generator(device="cuda").manual_seed(0))
    mask = torch.ones_like(ids)
    for impl in args.impls:
        model.set_experts_implementation(impl)
        _reset_compiled(model)  # each implementation compiles its own graph
        counters.clear()
        clock = step_clock()
        kw = generate_kwargs("reduce-overhead", args.tokens, clock)
        with torch.no_grad():
            for _ in range(2):  # compile, record the graphs; then once more
                model.generate(ids, attention_mask=mask, **kw)
            torch.cuda.synchronize()
            clock.events.clear()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                model.generate(ids, attention_mask=mask, **kw)
                torch.cuda.synchronize()
        step_s, steps = clock.decode_s()
        events = prof.events()
        gpu = [e for e in events if e.device_type == DeviceType.CUDA]
        calls = {}
        for e in events:
            if e.device_type == DeviceType.CPU and e.name in LAUNCH_APIS:
                calls[e.name] = calls.get(e.name, 0) + 1
        busy = _busy_us((e.time_range.start, e.time_range.end) for e in gpu)
        cpu_span = max(e.time_range.end for e in events) - min(e.time_range.start for e in events)
        n = args.tokens  # the prefill and the decode steps: calls per generated token
        print(f"\n===== {impl}: {args.model} {args.layers} layers, batch {args.batch}, {args.tokens} new tokens "
              f"(compiled, reduce-overhead, static cache)")
        print(f"decode step {1e6 * step_s / steps:.0f} us (logits events, {steps} steps); whole call "
              f"{cpu_span / 1e3:.1f} ms; GPU busy {busy / 1e3:.1f} ms ({100 * busy / cpu_span:.0f}% of the call); "
              f"graphs compiled {counters['stats']['unique_graphs']}, cudagraph skips "
              f"{counters['inductor']['cudagraph_skips']}, graph breaks {sum(counters['graph_break'].values())}")
        print("per generated token: " + ", ".join(f"{k} {v / n:.1f}" for k, v in sorted(calls.items())))
        kern = {}
        for e in gpu:
            k = kern.setdefault(e.name[:90], [0, 0.0])
            k[0] += 1
            k[1] += e.time_range.end - e.time_range.start
        print("GPU work per generated token, top 14 by time (count, us):")
        for name, (c, us) in sorted(kern.items(), key=lambda kv: -kv[1][1])[:14]:
            print(f"  {c / n:6.1f} x {us / max(c, 1):8.1f} us  {name}")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=22, max_name_column_width=60))
        if args.trace:
            prof.export_chrome_trace(f"{args.trace}.{impl}.json")
        _reset_compiled(model)


# ==================================================================================================
# version rounding: The ≥ 2× accuracy claim against the expert-centric path depends on where that path rounds.
#
#
#     python experiments/profiling.py --version rounding
#
# The expert-centric path here fuses SiLU·up into its gate/up GEMM and rounds the intermediate once
# (the stage 5). vLLM's fused_moe stores gate and up in bf16, then silu_and_mul stores the
# intermediate again, and HF's grouped_mm does the same. bench.emulate computes both in float64
# with exactly those roundings (CPU, a few seconds), on Mixtral-like (K = 2), gpt-oss-like (K = 4)
# and Qwen-like (K = 8) shapes scaled down: error(expert) / error(warp) for each.
# ==================================================================================================

def main_rounding():
    g = torch.Generator().manual_seed(0)
    for H, I, E, K in [(512, 1792, 8, 2), (512, 512, 16, 4), (512, 192, 64, 8)]:  # noqa: E741
        w13 = (torch.randn(E, 2 * I, H, generator=g) * H**-0.5).to(torch.bfloat16)
        w2 = (torch.randn(E, H, I, generator=g) * I**-0.5).to(torch.bfloat16)
        x = torch.randn(16, H, generator=g).to(torch.bfloat16)
        tw, ti = warpdecode.route(torch.randn(16, E, generator=g), K)
        ref = warpdecode.reference_moe(x, w13, w2, tw, ti)
        err = {p: warpdecode.rel_error(em.emulate(x, w13, w2, tw, ti, em.PATHS[p]), ref)
               for p in ("warp", "expert", "expert_unfused")}
        print(f"H={H} I={I} E={E} K={K}: error(expert) / error(warp) = {err['expert'] / err['warp']:.2f} "
              f"(SiLU·up fused, as here); {err['expert_unfused'] / err['warp']:.2f} (gate and up rounded first, "
              "as vLLM and HF)")


VERSIONS = {
    "pair": (main_pair, []),
    "hf_generate": (main_hf_generate, []),
    "hf_compiled": (main_hf_compiled, []),
    "rounding": (main_rounding, []),
}


if __name__ == "__main__":
    harness.dispatch(__doc__, VERSIONS)
