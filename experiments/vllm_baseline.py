"""vLLM's Triton ``fused_experts`` (the expert-centric path production engines run) against
``warpdecode.moe``, on the same weights and routing, timed the same way.

    bash tools/vllm_bundle.sh                    # .vllm/: vLLM's path from its wheel (experiments/vllm_path.py)
    python experiments/vllm_baseline.py --version bf16 [--presets …] [--T …] [--budget-s 480] [--bundle DIR]
    python experiments/vllm_baseline.py --version fp8 [--presets …] [--T …] [--budget-s 480]
    TRITON_INTERPRET=1 python experiments/vllm_baseline.py --version bf16 --check    # on the CPU
    python experiments/vllm_baseline.py --version fractions [--gpu …] [--commit …] [--T 2 4 8]   # no GPU
    bash tools/gpu.sh env vllm pack              # on the GPU machine, carrying .vllm (VLLM_ARGS)

version bf16: vLLM 0.34's unquantized ``fused_experts`` (its tuned config for the shape on this GPU
where vLLM ships one, else its ``get_default_config``; the row's config names which), beside
``warpdecode.moe(method="auto")`` and ``method="warp"``; Qwen3-30B-A3B, OLMoE-1B-7B, Phi-3.5-MoE
(H = 4096, I = 6400, E = 16, K = 2: few, wide experts) and gpt-oss-20b's layer (H = I = 2880,
E = 32, K = 4), T = 1 … 256.

version fp8: vLLM's FP8 w8a8 path (``use_fp8_w8a8``, ``block_shape`` [128, 128]: weights block-scaled,
activations quantized per token group of 128 as vLLM does) beside ``warpdecode.moe`` on FP8
weights (auto, and the paths it picks among: the warp pair, the grouped schedule, the expert path) built
from the same e4m3 bytes and scales (``warpdecode.experts_from_checkpoint``), and the expert path more
ways: w8a8 (``act_format="fp8"``), with bf16 GEMM operands at every tile (:func:`moe_bf16_operands`; the
expert path gives FP8 weights fp16 rows up to ``expert.F16_ROWS_MAX_BLOCK_M``; rows of runs before that
rule name ``fp8_expert.moe_f16``'s fp16 rows ``expert f16 rows``), its config with the weight tiles by TMA
(``expert tma``: ``W_TMA``, as vLLM's w8a8 path loads its weights on Hopper), and from T = 16 its launches
with no math (``expert no math``: their bound);
Qwen3-30B-A3B, Qwen3-235B-A22B, OLMoE-1B-7B, T = 1 … 256 (``--presets`` also takes the layers that are not
presets: phi-3.5-moe, deepseek-v2-lite, H = 2048, I = 1408, E = 64, K = 6).

Each method is called as a user calls it, captured in one CUDA graph over the layer copies (weights
at least 3× the L2 at T = 1, each copy its own routing draw), its output checked against the
float64 reference (``warpdecode.reference_moe``, FP8 weights dequantized exactly) before it is
timed, NaN failing; the methods' graphs are timed together (``time_interleaved``), median per
layer call. Rows go to ``experiments/results/<GPU>/vllm_baseline.csv`` as each (layer, T) is measured,
each naming the commit; the variant names the ops vLLM ran with where a substitute stood in for a
compiled one (``vllm+subst(...)``: experiments/vllm_path.py). The table printed last: µs per method
and vLLM's time over warpdecode's. ``--budget-s`` ends the sweep in time (the case under way finishes).
"""

from __future__ import annotations

import collections
import csv
import math
import os
import time
import traceback

import expert_knobs as kn
import harness
import torch
from fp8_expert import moe_bf16_operands

import warpdecode as wd
from bench.timing import capture_poisoned, read_ceiling, time_interleaved
from warpdecode import expert as ex
from warpdecode.workload import make_inputs

#: Layers that are not presets: few, wide experts (Phi-3.5-MoE's routed layer), and many narrow ones
#: with I = 1408 (11 scale groups of 128) and K = 6 (DeepSeek-V2-Lite's).
PHI = wd.MoEShape("phi-3.5-moe", H=4096, I=6400, E=16, K=2)
DSV2_LITE = wd.MoEShape("deepseek-v2-lite", H=2048, I=1408, E=64, K=6)
SHAPES = {s.name: s for s in (PHI, DSV2_LITE)}
DEFAULTS = {"bf16": ["qwen3-30b-a3b", "olmoe-1b-7b", "phi-3.5-moe", "gpt-oss-20b"],
            "fp8": ["qwen3-30b-a3b", "qwen3-235b-a22b", "olmoe-1b-7b"]}
TS = [1, 2, 4, 8, 16, 32, 64, 128, 256]
#: version fp8 times the expert path's launches with no math (``expert no math``: their bound) from this T on,
#: where the expert path runs them with fp16 rows.
NO_MATH_FROM_T = 16
BLOCK = [128, 128]
#: Error over the bf16 rounding floor a method may have and still be timed: bf16 paths (vLLM rounds
#: the intermediate to bf16 after each GEMM and the activation); vLLM's w8a8, whose activations are
#: e4m3 (bench.fp8 checks its w8a8 rows at the same bound); warpdecode on FP8 weights (bf16 activations).
TOL = {"bf16": 8.0, "w8a8": 60.0, "fp8 weights": 8.0}
#: warpdecode's paths on FP8 weights, each through ``warpdecode.moe`` (version fp8): auto, and each path it
#: chooses among, so one run gives the bar and the evidence for auto's FP8 crossover.
FP8_METHODS = {"auto": {}, "warp": {"method": "warp", "schedule": "split"},
               "grouped": {"method": "warp", "schedule": "grouped"}, "expert": {"method": "expert"}}


def shape_of(name: str) -> wd.MoEShape:
    return SHAPES[name] if name in SHAPES else wd.get_preset(name)


# -- timing ------------------------------------------------------------------------------------------

def measure(case: harness.Case, methods: dict, reps: int) -> dict:
    """{label: (µs per layer call, error over the bf16 floor)} for ``methods`` ({label: (fn(x, layer,
    inputs), tolerance)}): each captured in one CUDA graph over the case's layer copies (outputs
    poisoned first), copy 0's output checked against float64 and every output for NaN, then the
    checked graphs timed together. A method that fails its check or its capture is printed and left out. A
    tolerance of None marks a bound, not a layer (the expert path's launches with no math, their loads checked
    bit for bit before): its output is not checked, and its error is None."""
    steps = list(zip(case.layers, case.inputs, strict=True))
    floor = wd.rounding_floor(case.ref, torch.bfloat16)
    graphs, errs = {}, {}
    for label, (fn, tol) in methods.items():
        try:
            g, outs = capture_poisoned(lambda fn=fn: [fn(i.x, layer, i) for layer, i in steps])
        except Exception as e:  # noqa: BLE001  the row is missing and the log says why
            print(f"ERROR {case.shape.name} T={case.T} {label}: {type(e).__name__}: {str(e)[:300]}", flush=True)
            torch.cuda.synchronize()
            continue
        if tol is None:
            graphs[label], errs[label] = g, None
            continue
        err = wd.rel_error(outs[0], case.ref) / floor
        nan = any(bool(y.isnan().any()) for y in outs)
        if nan or not err <= tol:
            print(f"FAIL {case.shape.name} T={case.T} {label}: error {err:.2f} × the bf16 floor (bound {tol})"
                  + (", NaN in an output" if nan else "") + ": not timed", flush=True)
            continue
        graphs[label], errs[label] = g, err
    times = time_interleaved(list(graphs.values()), reps=reps) if graphs else []
    return {label: (t.median_us / len(steps), errs[label]) for label, t in zip(graphs, times, strict=True)}


def write_case(case, version: str, results: dict, configs: dict, plans: dict, deadline_note: str = "") -> list[dict]:
    rows = []
    for label, (us, err) in results.items():
        r = harness.row(case, us=us, err=math.nan if err is None else err, experiment="vllm_baseline",
                        version=version, variant=label, config=harness.literal(configs.get(label)), run=RUN)
        if err is None:  # a bound: no output to check
            r["error_over_floor"] = ""
        r["detail"] = harness.literal(plans.get(label))
        rows.append(r)
    harness.write("vllm_baseline", rows)
    return rows


def print_case(case, results: dict, vllm_label: str | None):
    parts = [f"{label} {us:8.2f} µs" + (f" (err {err:.2f})" if err is not None else " (bound)")
             for label, (us, err) in results.items()]
    line = f"{case.shape.name:16s} T={case.T:<4d} " + "  ".join(parts)
    if vllm_label in results:
        base = results[vllm_label][0]
        line += "  " + "  ".join(f"vllm/{label} {base / us:.2f}" for label, (us, _) in results.items()
                                 if label != vllm_label)
    print(line, flush=True)


def summary(rows: list[dict], labels: list[str]):
    """µs per method and vLLM's time over each warpdecode method, per layer and T."""
    by = {}
    for r in rows:
        by.setdefault((r["preset"], int(r["T"])), {})[r["variant"]] = float(r["us"])
    vl = next((lb for lb in labels if lb.startswith("vllm")), None)
    others = [lb for lb in labels if lb != vl]
    head = f"{'layer':16s} {'T':>4s} " + " ".join(f"{lb + ' µs':>14s}" for lb in labels) + " " + " ".join(
        f"{'vllm/' + lb:>12s}" for lb in others)
    print(f"\n{wd.gpu_name() if torch.cuda.is_available() else 'cpu'}: {vl or 'vllm'} against warpdecode "
          f"(median µs per layer call)\n{head}")
    for (preset, T), us in by.items():
        cells = " ".join(f"{us[lb]:14.2f}" if lb in us else f"{'—':>14s}" for lb in labels)
        ratios = " ".join(f"{us[vl] / us[lb]:12.2f}" if vl in us and lb in us else f"{'—':>12s}" for lb in others)
        print(f"{preset:16s} {T:4d} {cells} {ratios}")


# -- the sweeps --------------------------------------------------------------------------------------

def sweep_bf16(v, presets, Ts, deadline, reps) -> list[dict]:
    vl = v.label() if v else None
    rows = []
    for case in harness.cases([shape_of(p) for p in presets], Ts):
        if time.monotonic() > deadline:
            print(f"SKIP {case.shape.name} T={case.T} and the rest: out of time", flush=True)
            break
        s, K = case.shape, case.shape.K
        methods, configs, plans = {}, {}, {}
        if v is not None:
            methods[vl] = (lambda x, layer, i: v.fused_experts(x, *layer, i.topk_weights, i.topk_ids), TOL["bf16"])
            configs[vl] = v.config((s.E, 2 * s.I, s.H), (s.E, s.H, s.I), K, case.T)
            plans[vl] = {"vllm": v.manifest["vllm"], "ops": v.origin}
        for m in ("auto", "warp"):
            methods[m] = (lambda x, layer, i, m=m: wd.moe(x, *layer, i.topk_weights, i.topk_ids, method=m), TOL["bf16"])
            i0 = case.inputs[0]
            p = wd.explain(i0.x, *case.layers[0], i0.topk_weights, i0.topk_ids, method=m)
            plans[m] = {"method": p.method, "schedule": p.schedule, "crossover": p.crossover}
        results = measure(case, methods, reps)
        print_case(case, results, vl)
        rows += write_case(case, "bf16", results, configs, plans)
    return rows


def fp8_cases(presets, Ts, deadline):
    """harness.Case-like cases whose layers are (e4m3 w13, its block scales, e4m3 w2, its scales, the
    warpdecode FP8 weights over the same tensors); the floor counts the FP8 bytes."""
    from bench.fp8 import copies, fp8_bytes

    ceiling = read_ceiling()
    for name in presets:
        if time.monotonic() > deadline:
            return
        s = shape_of(name)
        n = copies(s, 3 * s.I * s.H * (1 + 4 / 16384))
        layers = []
        for c in range(n):
            w13, w2 = s.weights(device="cuda", seed=100 + c)
            q13, q2 = wd.quantize_experts(w13, w2, "block128")
            del w13, w2
            f13, f2 = wd.experts_from_checkpoint(q13.weight, q13.scale, q2.weight, q2.scale, format="block128")
            layers.append((q13.weight, q13.scale, q2.weight, q2.scale, f13, f2))
        for T in Ts:
            inputs = make_inputs(s, T, n, seed=1000 + T)
            floor_us = sum(fp8_bytes(s, lay[4], lay[5], i) for lay, i in zip(layers, inputs, strict=True)) / n \
                / (ceiling * 1e12) * 1e6
            i0 = inputs[0]
            ref = wd.reference_moe(i0.x, layers[0][4], layers[0][5], i0.topk_weights, i0.topk_ids)
            yield harness.Case(s, T, 1000 + T, layers, inputs, floor_us, ceiling, ref)
        del layers
        torch.cuda.empty_cache()


def sweep_fp8(v, presets, Ts, deadline, reps) -> list[dict]:
    vl = (v.label() + " w8a8") if v else None
    rows = []
    for case in fp8_cases(presets, Ts, deadline):
        if time.monotonic() > deadline:
            print(f"SKIP {case.shape.name} T={case.T} and the rest: out of time", flush=True)
            break
        s, K = case.shape, case.shape.K
        methods, configs, plans = {}, {}, {}
        if v is not None:
            qcs = {id(layer): v.fp8_block_quant_config(layer[1], layer[3], BLOCK) for layer in case.layers}
            methods[vl] = (lambda x, layer, i, qcs=qcs: v.fused_experts(x, layer[0], layer[2], i.topk_weights,
                                                                        i.topk_ids, quant_config=qcs[id(layer)]),
                           TOL["w8a8"])
            configs[vl] = v.config((s.E, 2 * s.I, s.H), (s.E, s.H, s.I), K, case.T, fp8=True, block_shape=BLOCK)
            plans[vl] = {"vllm": v.manifest["vllm"], "ops": v.origin}
        i0, lay0 = case.inputs[0], case.layers[0]
        for label, kw in FP8_METHODS.items():
            methods[label] = (lambda x, layer, i, kw=kw: wd.moe(x, layer[4], layer[5], i.topk_weights, i.topk_ids,
                                                                **kw), TOL["fp8 weights"])
            p = wd.explain(i0.x, lay0[4], lay0[5], i0.topk_weights, i0.topk_ids, **kw)
            plans[label] = {"method": p.method, "schedule": p.schedule, "crossover": p.crossover,
                            "weights": "block128"}
        # the expert path's GEMMs with the activations in e4m3 (this project's w8a8: the same launches with
        # nothing to widen) and in bf16 at every tile (what fp16 rows replace up to F16_ROWS_MAX_BLOCK_M)
        methods["expert w8a8"] = (lambda x, layer, i: wd.moe(x, layer[4], layer[5], i.topk_weights, i.topk_ids,
                                                             method="expert", act_format="fp8"), TOL["w8a8"])
        methods["expert bf16 operands"] = (lambda x, layer, i: moe_bf16_operands(
            x, layer[4], layer[5], i.topk_weights, i.topk_ids), TOL["fp8 weights"])
        cfg = ex.launch_config(i0.x, lay0[4], i0.topk_ids)
        tma = tma_config(cfg, lay0[4], lay0[5])
        if tma is not None:  # the same config, its weight tiles by TMA (W_TMA) where the boxes tile the weights
            methods["expert tma"] = (lambda x, layer, i, tma=tma: ex.moe_expert(
                x, layer[4], layer[5], i.topk_weights, i.topk_ids, config=tma), TOL["fp8 weights"])
            configs["expert tma"] = tma
        if case.T >= NO_MATH_FROM_T and ex.activation_rows(i0.x, lay0[4], "native", cfg["BLOCK_M"]) == "f16":
            # the bound of the expert path's launches: the same six with no math in the GEMMs, same config
            kn.check_fp8_rows(i0.x, lay0[4], lay0[5], i0.topk_weights, i0.topk_ids, cfg)
            methods["expert no math"] = (lambda x, layer, i, cfg=cfg: kn.moe_fp8_rows(
                x, layer[4], layer[5], i.topk_weights, i.topk_ids, config=cfg), None)
            configs["expert no math"] = cfg
        results = measure(case, methods, reps)
        print_case(case, results, vl)
        rows += write_case(case, "fp8", results, configs, plans)
    return rows


def tma_config(cfg: dict, f13, f2) -> dict | None:
    """``cfg`` with ``W_TMA`` on each GEMM whose weight tiles TMA boxes can copy (``expert.weight_tma_problems``);
    None where neither's can."""
    ok = {gemm: problem is None for gemm, problem in ex.weight_tma_problems(cfg, f13, f2).items()}
    return {**cfg, **{g: {**cfg[g], "W_TMA": True} for g in ok if ok[g]}} if any(ok.values()) else None


# -- the CPU check -----------------------------------------------------------------------------------

def check_cpu(args) -> int:
    """vLLM's path end to end in Triton's interpreter (its GEMM kernel as it ships, the compiled ops'
    substitutes), beside warpdecode.moe, against float64: fp32 activations and weights (the
    interpreter's dot is exact there), the aligned and the one-block-per-pair assignment, the
    FP8 w8a8 path on block-128 weights, and the expert path's launches with no math on them. Skips vLLM, saying
    why, where its bundle is missing."""
    try:
        v = load_vllm(args, cpu=True)
    except FileNotFoundError as e:
        print(f"vLLM SKIPPED: {e}")
        v = None
    shape = wd.MoEShape("check", H=256, I=128, E=8, K=2)
    w13, w2 = shape.weights(dtype=torch.float32, seed=3)
    for T in (1, 3, 40):  # T = 1: T·K·4 ≤ E, each pair its own block; 3, 40: the aligned blocks
        g = torch.Generator().manual_seed(T)
        x = torch.randn(T, shape.H, generator=g)
        tw, ids = wd.route(torch.randn(T, shape.E, generator=g), shape.K)
        ref = wd.reference_moe(x, w13, w2, tw, ids)
        outs = {"auto": wd.moe(x, w13, w2, tw, ids), "warp": wd.moe(x, w13, w2, tw, ids, method="warp")}
        if v is not None:
            outs[v.label()] = v.fused_experts(x, w13, w2, tw, ids)
        for label, y in outs.items():
            err = wd.rel_error(y, ref)
            print(f"check fp32 T={T} {label}: error {err:.2e} against float64")
            assert err < 1e-5, (label, err)
    q13, q2 = wd.quantize_experts(*shape.weights(seed=4), "block128")
    f13, f2 = wd.experts_from_checkpoint(q13.weight, q13.scale, q2.weight, q2.scale)
    for T in (1, 3):
        g = torch.Generator().manual_seed(10 + T)
        x = torch.randn(T, shape.H, generator=g).bfloat16()
        tw, ids = wd.route(torch.randn(T, shape.E, generator=g), shape.K)
        ref = wd.reference_moe(x, f13, f2, tw, ids)
        floor = wd.rounding_floor(ref, torch.bfloat16)
        outs = {"auto": (wd.moe(x, f13, f2, tw, ids), TOL["fp8 weights"])}
        if v is not None:
            qc = v.fp8_block_quant_config(q13.scale, q2.scale, BLOCK)
            y = v.fused_experts(x, q13.weight, q2.weight, tw, ids, quant_config=qc)
            outs[v.label() + " w8a8"] = (y, TOL["w8a8"])
        for label, (y, tol) in outs.items():
            err = wd.rel_error(y, ref) / floor
            print(f"check fp8 T={T} {label}: error {err:.2f} × the bf16 floor (bound {tol})")
            assert err <= tol and not bool(y.isnan().any()), (label, err)
        cfg = ex.launch_config(x, f13, ids)
        tma = tma_config(cfg, f13, f2)
        y = ex.moe_expert(x, f13, f2, tw, ids, config=tma)
        assert torch.equal(y, ex.moe_expert(x, f13, f2, tw, ids, config=cfg)), "W_TMA changed the bits"
        print(f"check fp8 T={T} expert tma: the pointer loads' bits")
        kn.check_fp8_rows(x, f13, f2, tw, ids, cfg)
        print(f"check fp8 T={T} expert no math: every load's bits in its output ({cfg['BLOCK_M']}-row tiles)")
    print("check: vLLM " + ("ran through " + v.label() if v else "SKIPPED") + "; every output within its bound")
    return 0


# -- entry -------------------------------------------------------------------------------------------

def load_vllm(args, *, cpu: bool = False):
    """vLLM's path from the bundle, its ops probed on the GPU; on the CPU, vLLM's CPU platform and
    Triton kept on (vLLM turns Triton off where no GPU driver is active, unless the visible-device
    list is empty, as in its distributed start-up)."""
    import vllm_path

    if cpu:
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    v = vllm_path.load(args.bundle, substitutes=args.ops == "auto")
    if not cpu:
        v.probe()
    print(v.describe(), flush=True)
    return v


RUN = ""


def main(version: str) -> int:
    global RUN
    p = harness.parser(__doc__, VERSIONS, presets=DEFAULTS[version], Ts=TS)
    p.add_argument("--budget-s", type=float, default=math.inf, help="stop starting new cases after this many seconds")
    p.add_argument("--reps", type=int, default=100, help="timed replays per method and case")
    p.add_argument("--bundle", default=None, help="the folder tools/vllm_bundle.sh built (default: $VLLM_BUNDLE, "
                                                  "~/vllm, .vllm)")
    p.add_argument("--ops", choices=["auto", "compiled"], default="auto",
                   help="auto: vLLM's compiled ops where they load and launch, else their substitutes (named in the "
                        "rows); compiled: leave vLLM out rather than run a substitute")
    args = p.parse_args()
    if args.check or not torch.cuda.is_available():
        return check_cpu(args)
    start = time.monotonic()
    deadline = start + args.budget_s
    RUN = f"{version}-{int(time.time())}"
    try:
        v = load_vllm(args)
        if args.ops == "compiled" and (v.substituted or not v.complete):
            print(f"vLLM SKIPPED: --ops compiled and {', '.join(v.substituted) or 'an op'} cannot run compiled")
            v = None
    except Exception as e:  # noqa: BLE001  warpdecode's rows are still worth having; the log says why
        traceback.print_exc()
        print(f"vLLM SKIPPED: the bundle did not import: {type(e).__name__}: {e}", flush=True)
        v = None
    sweep = sweep_bf16 if version == "bf16" else sweep_fp8
    rows = sweep(v, args.presets or DEFAULTS[version], args.T or TS, deadline, args.reps)
    labels = list(dict.fromkeys(r["variant"] for r in rows))
    summary(rows, labels)
    print(f"rows: {harness.results_dir() / 'vllm_baseline.csv'} ({len(rows)}), {time.monotonic() - start:.0f} s")
    return 0


def read_fractions(rows: list[dict], variants: dict) -> list[dict]:
    """Per FP8 row of ``variants`` (variant: "warp" or "expert", the cost model's path), the read fraction
    ``warpdecode.costmodel.read_fraction`` finds in its time, with FP8 weights (docs/design.md, "Cost model
    constants")."""
    from warpdecode import costmodel as cm

    out = []
    for r in rows:
        path = variants.get(r["variant"])
        if r["version"] != "fp8" or path is None:
            continue
        s, T, us = shape_of(r["preset"]), int(r["T"]), float(r["us"])
        out.append({"preset": r["preset"], "T": T, "variant": r["variant"], "side": path, "commit": r["commit"],
                    "us": us, "fraction": cm.read_fraction(s.H, s.I, s.E, s.K, T, path, us, w_elem=1)})
    return out


def main_fractions() -> int:
    """version fractions (no GPU): the cost model's FP8 read fractions in this GPU's vllm_baseline.csv rows."""
    import statistics

    p = harness.parser(__doc__, VERSIONS, presets=DEFAULTS["fp8"], Ts=TS)
    p.add_argument("--gpu", default="NVIDIA H200", help="whose rows (default NVIDIA H200: the model's constants)")
    p.add_argument("--commit", nargs="+", default=None, help="only rows of these commits (default all)")
    p.add_argument("--expert", nargs="+", default=["expert", "expert f16 rows"],
                   help="the variants that time the expert path as moe_expert runs it (default: expert, and the "
                        "fp16 rows of runs before they were the package's)")
    args = p.parse_args()
    path = harness.HERE / "results" / args.gpu.replace(" ", "_") / "vllm_baseline.csv"
    with path.open() as f:
        rows = [r for r in csv.DictReader(f) if (not args.commit or r["commit"] in args.commit)
                and (not args.presets or r["preset"] in args.presets) and (not args.T or int(r["T"]) in args.T)]
    got = read_fractions(rows, {"warp": "warp", **dict.fromkeys(args.expert, "expert")})
    by = collections.defaultdict(list)
    for g in got:
        print(f"{g['commit']} {g['preset']:16s} T={g['T']:<3d} {g['variant']:16s} {g['us']:9.2f} µs  "
              f"fraction {g['fraction']:.3f}")
        by[(g["side"], g["T"])].append(g["fraction"])
    print("\nmedian (range) per side and T:")
    for (side, T), v in sorted(by.items()):
        print(f"  {side:6s} T={T:<3d} {statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f}), {len(v)} rows")
    return 0


VERSIONS = {"bf16": (lambda: main("bf16"), []), "fp8": (lambda: main("fp8"), []), "fractions": (main_fractions, [])}


if __name__ == "__main__":
    harness.dispatch(__doc__, VERSIONS)
