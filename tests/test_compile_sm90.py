"""Every kernel in warpdecode/kernels/ (and bench/unfused.py's gather and scatter) compiles for the
H200 (sm_90a) — on this machine, GPU or not — with the real Triton pipeline and ptxas
(bench.compiled). The interpreter accepts code the GPU compiler rejects, so a green CPU run alone
proves nothing about the GPU.

What is compiled is what the launchers pass on an H200 (bench.compiled.record_launches):
warpdecode.warp.moe_warp, warpdecode.expert.moe_expert and bench.unfused.moe_expert_unfused are run
on ``meta`` tensors with every kernel replaced by a recorder, configs.py answering from its
non-interpreter branch (its defaults, or the H200's tuned table), the GEMMs' DOT_FP32=False and
PRECISION as on a GPU, and programmatic dependent launch on. So a kernel's new meta-parameter, or a
launcher that passes a different one, is compiled as it will run, without this file knowing about it.

Beyond "it compiles": the warp-decode kernels do not spill, stream weights in 128-bit loads, and
map output rows to warps as docs/design.md ("How one warp per output is written in Triton")
documents; the grouped GEMMs use tensor cores for bf16 and FP8
activations, and full-precision FMAs (no tf32) for fp32.
"""

from __future__ import annotations

import json
import re

import pytest
import torch

from bench import compiled, unfused
from bench import persistent as kf
from warpdecode import MoEShape, _runtime, configs
from warpdecode.kernels import expert as kx
from warpdecode.kernels import warp_fp8 as k8
from warpdecode.kernels import warp_grouped as kg
from warpdecode.kernels import warp_pair as kp

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
KERNEL_MODULES = (kx, kp, kg, kf, k8, unfused)

# (scenario id, path, layer shape, T, dtype, options, GPU whose tuned table configs.py reads)
# The ids name the shape and what the scenario exercises. "no tuned table" gives configs.py's
# GPU defaults (vLLM's get_default_config for the GEMMs); "NVIDIA H200" its tuned table, whose
# every warp-decode bucket is added below.
QWEN = dict(H=2048, I=768, E=128, K=8)  # Qwen3-30B-A3B
ODD = dict(H=2880, I=1408, E=61, K=4)  # H/32 and I/32 not whole, prime E
MIXTRAL = dict(H=4096, I=14336, E=8, K=2)
EDGE = dict(H=2880, I=1408, E=61, K=61)  # K = E, prime, past warp.STATIC_SLOTS_MAX (tests/test_fp8_gpu.py)
DEFAULTS, H200 = "no tuned table", "NVIDIA H200"
SCENARIOS = [
    ("qwen3-30b-T=8-warp", "warp", QWEN, 8, BF16, {}, DEFAULTS),
    ("qwen3-30b-T=8-warp-act=bf16", "warp", QWEN, 8, BF16, dict(act_dtype=BF16), DEFAULTS),
    ("odd-T=1-warp", "warp", ODD, 1, BF16, {}, DEFAULTS),
    # K = 1: the down tile holds one slot (warp_pair._slots of one; tests/test_gpu.py's T=8-K=1)
    ("k1-T=8-warp", "warp", dict(ODD, K=1), 8, BF16, {}, DEFAULTS),
    ("qwen3-30b-T=1-warp-fused", "warp", QWEN, 1, BF16, dict(schedule="fused"), DEFAULTS),
    ("odd-T=3-warp-fused", "warp", ODD, 3, BF16, dict(schedule="fused"), DEFAULTS),
    # one warp, one neuron, 1024 columns per step: the gate/up tile's registers
    # (test_gate_up_tile_fits_32_programs_per_sm)
    ("qwen3-30b-T=1-warp-1x1024", "warp", QWEN, 1, BF16, dict(config={
        "gate_up": {"BLOCK_I": 1, "BLOCK_H": 1024, "num_warps": 1, "num_stages": 1},
        "down": {"BLOCK_H": 8, "BLOCK_I": 256, "num_warps": 8, "num_stages": 1}}), DEFAULTS),
    # the grouped schedule (each routed expert's gate/up rows read once for all its tokens), every dtype
    ("mixtral-T=8-warp-grouped", "warp", MIXTRAL, 8, BF16, dict(schedule="grouped"), DEFAULTS),
    ("odd-T=3-warp-grouped", "warp", ODD, 3, BF16, dict(schedule="grouped"), DEFAULTS),
    ("odd-T=3-warp-grouped-fp16", "warp", ODD, 3, FP16, dict(schedule="grouped"), DEFAULTS),
    ("odd-T=3-warp-grouped-fp32", "warp", ODD, 3, FP32, dict(schedule="grouped"), DEFAULTS),
    ("qwen3-30b-T=8-expert-decode", "expert", QWEN, 8, BF16, {}, DEFAULTS),
    ("qwen3-30b-T=64-expert", "expert", QWEN, 64, BF16, {}, DEFAULTS),
    ("qwen3-30b-T=64-expert-fp8", "expert", QWEN, 64, BF16, dict(act_format="fp8"), DEFAULTS),
    ("qwen3-30b-T=8-expert-fp8-decode", "expert", QWEN, 8, BF16, dict(act_format="fp8"), DEFAULTS),
    ("qwen3-30b-T=8-expert-H200-tuned", "expert", QWEN, 8, BF16, {}, H200),
    ("odd-T=1-expert-fp32", "expert", ODD, 1, FP32, {}, DEFAULTS),
    # gather and scatter as kernels of their own (bench.unfused, the stage-by-stage form of notebook 2)
    ("odd-T=3-expert-eight-kernels", "expert-unfused", ODD, 3, BF16, {}, DEFAULTS),
    ("qwen3-30b-T=8-expert-fp8-eight-kernels", "expert-unfused", QWEN, 8, BF16, dict(act_format="fp8"), DEFAULTS),
    # HALF_M (a tuner candidate): a block whose upper half is padding runs as a half-height tile, so
    # each GEMM holds two pipelined loops; at Mixtral T=256's tuned tiles (BLOCK_M=128, 8 warps)
    ("mixtral-T=256-expert-half-m", "expert", MIXTRAL, 256, BF16, dict(config={"BLOCK_M": 128,
        "gate_up": {"BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 1, "num_warps": 8, "num_stages": 4, "HALF_M": True},
        "down": {"BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 1, "num_warps": 8, "num_stages": 4, "HALF_M": True}}),
     DEFAULTS),
    ("odd-T=64-expert-half-m-fp8", "expert", ODD, 64, BF16, dict(act_format="fp8", config={"BLOCK_M": 64,
        "gate_up": {"BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 1, "num_warps": 4, "num_stages": 4, "HALF_M": True},
        "down": {"BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 1, "num_warps": 4, "num_stages": 3, "HALF_M": True}}),
     DEFAULTS),
    # SWAP_AB (a tuner candidate): the tile transposed on the tensor cores, weight rows on wgmma's
    # M axis and the block's rows on its N: at OLMoE T=256's tuned tiles, with and without HALF_M
    # (rows 64 and 32), and at 16 rows with FP8 activations
    ("olmoe-T=256-expert-swap-ab", "expert", dict(H=2048, I=1024, E=64, K=8), 256, BF16, dict(config={
        "BLOCK_M": 64,
        "gate_up": {"BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 1, "num_warps": 4, "num_stages": 3, "SWAP_AB": True},
        "down": {"BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 1, "num_warps": 4, "num_stages": 3, "SWAP_AB": True,
                 "HALF_M": True}}), DEFAULTS),
    ("odd-T=8-expert-swap-ab-fp8", "expert", ODD, 8, BF16, dict(act_format="fp8", config={"BLOCK_M": 16,
        "gate_up": {"BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 1, "num_warps": 4, "num_stages": 4, "SWAP_AB": True},
        "down": {"BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 1, "num_warps": 4, "num_stages": 3, "SWAP_AB": True}}),
     DEFAULTS),
    # the four launches one after another, as vLLM's fused_moe launches them (the default chains
    # them with programmatic dependent launch where the GPU has it)
    ("qwen3-30b-T=256-expert-no-pdl", "expert", QWEN, 256, BF16, dict(pdl=False), H200),
    # the expert path's defaults where the tiles are largest (configs.default_expert)
    ("qwen3-30b-T=256-expert-defaults", "expert", QWEN, 256, BF16, {}, DEFAULTS),
    ("mixtral-T=256-expert-defaults", "expert", MIXTRAL, 256, BF16, {}, DEFAULTS),
    ("mixtral-T=64-expert-defaults", "expert", MIXTRAL, 64, BF16, {}, DEFAULTS),
    ("h6144-T=256-expert-defaults", "expert", dict(H=6144, I=10752, E=16, K=4), 256, BF16, {}, DEFAULTS),
    ("odd-T=256-expert-defaults-fp32", "expert", ODD, 256, FP32, {}, DEFAULTS),
    # the expert stage tests' layer (tests/test_expert_stages.py): HALF_M FP32 tiles at 12 pairs per expert
    ("stage-T=12-expert-defaults-fp32", "expert", dict(H=300, I=88, E=3, K=3), 12, FP32, {}, DEFAULTS),
    # FP8 weights (warpdecode.quant), both formats: warp decode's FP8 pair (kernels/warp_fp8.py) at its
    # default tiles (two-warp down tiles where K <= 4 and I >= 2048)
    ("qwen3-30b-T=1-warp-fp8-block128", "warp", QWEN, 1, BF16, dict(weights="block128"), DEFAULTS),
    ("qwen3-30b-T=8-warp-fp8-mxfp8", "warp", QWEN, 8, BF16, dict(weights="mxfp8"), DEFAULTS),
    ("odd-T=3-warp-fp8-block128", "warp", ODD, 3, BF16, dict(weights="block128"), DEFAULTS),
    ("odd-T=1-warp-fp8-mxfp8", "warp", ODD, 1, BF16, dict(weights="mxfp8"), DEFAULTS),
    ("mixtral-T=1-warp-fp8-block128", "warp", MIXTRAL, 1, BF16, dict(weights="block128"), DEFAULTS),
    ("mixtral-T=1-warp-fp8-mxfp8", "warp", MIXTRAL, 1, BF16, dict(weights="mxfp8"), DEFAULTS),
    # K = E = 61: the down kernel's slots in a run-time loop (SLOT_LOOP), code that does not grow with K
    ("edge-T=3-K=E=61-warp-fp8-block128", "warp", EDGE, 3, BF16, dict(weights="block128"), DEFAULTS),
    ("edge-T=3-K=E=61-warp-fp8-mxfp8", "warp", EDGE, 3, BF16, dict(weights="mxfp8"), DEFAULTS),
    # the grouped schedule with FP8 weights: e4m3 widened to x's dtype (FP32 x: FMAs), the down kernel's to the
    # intermediate's bf16 terms, or its one term where act_dtype rounds it
    ("mixtral-T=8-warp-grouped-fp8-block128", "warp", MIXTRAL, 8, BF16, dict(schedule="grouped", weights="block128"),
     DEFAULTS),
    ("odd-T=3-warp-grouped-fp8-mxfp8", "warp", ODD, 3, BF16, dict(schedule="grouped", weights="mxfp8"), DEFAULTS),
    ("odd-T=3-warp-grouped-fp8-block128-fp16", "warp", ODD, 3, FP16, dict(schedule="grouped", weights="block128"),
     DEFAULTS),
    ("odd-T=3-warp-grouped-fp8-mxfp8-fp32", "warp", ODD, 3, FP32, dict(schedule="grouped", weights="mxfp8"), DEFAULTS),
    ("qwen3-30b-T=8-warp-grouped-fp8-block128-act=bf16", "warp", QWEN, 8, BF16,
     dict(schedule="grouped", weights="block128", act_dtype=BF16), DEFAULTS),
    # tiles of several rows (bench.fp8.CANDIDATES, experiments/fp8_warp.py): no spills, the layout rule
    ("qwen3-30b-T=1-warp-fp8-rows", "warp", QWEN, 1, BF16, dict(weights="block128", config={
        "gate_up": {"BLOCK_I": 4, "BLOCK_H": 1024, "num_warps": 2, "num_stages": 1},
        "down": {"BLOCK_H": 8, "BLOCK_I": 512, "num_warps": 4, "num_stages": 1}}), DEFAULTS),
    # FP8 weights on the expert path: weight-only (bf16 activations, the e4m3 tiles widened) and w8a8
    # (e4m3 on both sides), decode tiles (SWAP_AB) and the largest default tiles
    ("qwen3-30b-T=8-expert-fp8w-block128", "expert", QWEN, 8, BF16, dict(weights="block128"), DEFAULTS),
    ("qwen3-30b-T=8-expert-w8a8-block128", "expert", QWEN, 8, BF16, dict(weights="block128", act_format="fp8"),
     DEFAULTS),
    ("odd-T=64-expert-fp8w-mxfp8", "expert", ODD, 64, BF16, dict(weights="mxfp8"), DEFAULTS),
    ("odd-T=3-expert-w8a8-mxfp8", "expert", ODD, 3, BF16, dict(weights="mxfp8", act_format="fp8"), DEFAULTS),
    ("mixtral-T=256-expert-fp8w-block128-defaults", "expert", MIXTRAL, 256, BF16, dict(weights="block128"),
     DEFAULTS),
    # W_TMA (a config flag): the weight tiles by TMA from a host TensorDescriptor, plain 16-row tiles (T = 64) and
    # transposed (T = 8), FP8 weights and bf16
    ("qwen3-30b-T=64-expert-fp8w-block128-tma", "expert", QWEN, 64, BF16, dict(weights="block128", config={
        "BLOCK_M": 16,
        "gate_up": {"BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 1, "num_warps": 4, "num_stages": 4, "W_TMA": True},
        "down": {"BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 1, "num_warps": 4, "num_stages": 4, "W_TMA": True}}),
     DEFAULTS),
    ("qwen3-30b-T=8-expert-tma-swap-ab", "expert", QWEN, 8, BF16, dict(config={"BLOCK_M": 16,
        "gate_up": {"BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 1, "num_warps": 4, "num_stages": 4, "SWAP_AB": True,
                    "W_TMA": True},
        "down": {"BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 1, "num_warps": 4, "num_stages": 3, "SWAP_AB": True,
                 "W_TMA": True}}), DEFAULTS),
    ("mixtral-T=256-expert-w8a8-mxfp8-defaults", "expert", MIXTRAL, 256, BF16,
     dict(weights="mxfp8", act_format="fp8"), DEFAULTS),
]


def _tuned_warp_scenarios():
    """Every warp-decode bucket of the H200's tuned table: the configs the H200 actually runs."""
    path = configs.tuned_file(H200)
    if not path.exists():
        return []
    tables = json.loads(path.read_text())
    out = []
    for key, buckets in tables.get("warp", {}).items():
        s = {k: int(v) for k, v in (kv.split("=") for kv in key.split(","))}
        for t_max, _ in buckets:
            out.append((f"{key.replace(',', '-')}-T={t_max}-warp-H200-tuned", "warp", s, t_max, BF16, {}, H200))
    # the FP8 pair's tuned buckets that are not its defaults (the scenarios above compile those),
    # each distinct (format, K, tiles) once: its kernels specialize on K and the tiles, not on H or I
    seen = set()
    for fmt in ("block128", "mxfp8"):
        for key, buckets in tables.get(f"warp_{fmt}", {}).items():
            s = {k: int(v) for k, v in (kv.split("=") for kv in key.split(","))}
            default = json.dumps(configs.default_warp_fp8(s["H"], s["I"], s["K"]), sort_keys=True)
            for t_max, cfg in buckets:
                tiles = json.dumps({k: cfg[k] for k in ("gate_up", "down")}, sort_keys=True)
                if tiles != default and (fmt, s["K"], tiles) not in seen:
                    seen.add((fmt, s["K"], tiles))
                    out.append((f"{key.replace(',', '-')}-T={t_max}-warp-fp8-{fmt}-H200-tuned", "warp", s, t_max,
                                BF16, dict(weights=fmt), H200))
    return out


SCENARIOS += _tuned_warp_scenarios()


def _record(path, s, T, dtype, options, gpu_name):
    shape = MoEShape("scenario", **s)
    return [(ln.kernel, ln.job) for ln in compiled.record_launches(path, shape, T, gpu_name=gpu_name, dtype=dtype,
                                                                     **options)]


def _all_specs() -> tuple[dict[str, compiled.Job], dict[str, dict]]:
    specs, options = {}, {}
    for sid, *scenario in SCENARIOS:
        launches = _record(*scenario)
        # a quantizer (e4m3 for w8a8, fp16 rows for FP8 weights) between the GEMMs
        quantized = any(job.name == "quant_fp8_kernel" for _, job in launches)
        for name, job in launches:
            key = f"{name}-{sid}"
            if key in specs:  # the quantizer runs twice: on the activations, then the intermediate
                key += "-2nd"
            specs[key], options[key] = job, dict(scenario[-2], path=scenario[0], quantized=quantized)
    return specs, options


SPECS, OPTIONS = _all_specs()  # id -> Job and its scenario's options and path, recorded at collection (no compile)
WARP = [n for n, j in SPECS.items() if j.name.startswith("warp_")]
GROUPED = [n for n in WARP if "_grouped_" in SPECS[n].name]  # tensor-core tiles, not one warp per output
PAIR = [n for n in WARP if n not in GROUPED]
PAIR_BF16 = [n for n in PAIR if BF16 in SPECS[n].args.values()  # the layout rule, for bf16 and e4m3 weights
             and SPECS[n].args.get("w13_ptr", SPECS[n].args.get("w2_ptr")) in (BF16, torch.float8_e4m3fn)]
GEMM = [n for n, j in SPECS.items() if j.name.startswith("grouped_")]


@pytest.fixture(scope="module")
def built():
    """Every spec compiled once, in one batch (in a child process where this one interprets)."""
    return dict(zip(SPECS, compiled.compile_many(list(SPECS.values())), strict=True))


def _bits(ld_line: str) -> int:
    m = re.search(r"ld\.global\S*?(?:\.v(\d))?\.[bfsu](\d+)\s", ld_line)
    assert m, f"cannot read the width of {ld_line!r}"
    return int(m.group(1) or 1) * int(m.group(2))


def test_every_kernel_is_compiled():
    """A kernel added to warpdecode/kernels/ (or bench/unfused.py) but never launched by a scenario fails here."""
    defined = {n for mod in KERNEL_MODULES for n in dir(mod) if n.endswith("_kernel")}
    assert defined == {j.name for j in SPECS.values()}


def test_scenarios_use_the_gpu_branch():
    """Control: the recorded meta-parameters are the GPU's, not the interpreter's."""
    for n, j in SPECS.items():
        if j.name.startswith("grouped_"):
            assert j.constexprs["DOT_FP32"] is False, n
            assert j.constexprs["PRECISION"] == ("ieee" if j.args["w13_ptr" if "gate_up" in j.name else "w2_ptr"]
                                                 == FP32 else "tf32"), n
        if j.name.startswith("warp_"):
            # without the knob: the one-launch kernel, and the grouped down kernel (it follows the
            # memset of its scratch, not the gate/up kernel)
            no_pdl = j.name in ("warp_fused_kernel", "warp_down_grouped_kernel")
            assert j.constexprs.get("USE_PDL", no_pdl) is True, n
            assert j.constexprs.get("WIDEN", False) is False, n
    bm = {n: j.constexprs["BLOCK_M"] for n, j in SPECS.items() if j.name == "moe_align_kernel"}
    # the default BLOCK_M follows the pairs per expert (twice the mean, a power of two in [16, 128])
    assert bm["moe_align_kernel-qwen3-30b-T=64-expert"] == 16  # 4 pairs per expert
    assert bm["moe_align_kernel-qwen3-30b-T=8-expert-decode"] == 16
    assert bm["moe_align_kernel-mixtral-T=256-expert-defaults"] == 128  # 64 pairs per expert


def _expert_pdl(name: str) -> bool:
    """Whether a scenario's expert launches are chained: the default on a GPU that has PDL, in the
    fused form with no quantizer between the GEMMs, unless the scenario passes pdl=False."""
    o = OPTIONS[name]
    return o.get("pdl", True) and not o["quantized"] and o["path"] != "expert-unfused"


def test_expert_pdl_waits_before_it_reads(built):
    """With pdl, each kernel after align waits for its predecessor (griddepcontrol.wait) before
    anything else, and every kernel but combine lets its successor launch; without, none does."""
    assert any(_expert_pdl(n) for n in built) and not all(_expert_pdl(n) for n in built if "expert" in n)
    for name, c in built.items():
        if SPECS[name].name not in ("moe_align_kernel", "grouped_gate_up_kernel", "grouped_down_kernel",
                                    "combine_kernel"):
            continue
        ptx, pdl = c.asm["ptx"], _expert_pdl(name)
        waits = "griddepcontrol.wait" in ptx
        launches = "griddepcontrol.launch_dependents" in ptx
        assert waits == (pdl and SPECS[name].name != "moe_align_kernel"), name
        assert launches == (pdl and SPECS[name].name != "combine_kernel"), name
        if waits:  # the wait comes before the first global load of the kernel
            assert ptx.index("griddepcontrol.wait") < ptx.index("ld.global"), name


@pytest.mark.parametrize("name", list(SPECS))
def test_compiles_for_sm90a(built, name):
    c = built[name]
    assert c.name == SPECS[name].name and c.num_warps == SPECS[name].num_warps
    assert ".target sm_90a" in c.asm["ptx"]
    assert len(c.asm["cubin"]) > 0


def test_weight_tiles_by_tma_only_where_the_config_asks(built):
    """A W_TMA GEMM copies its weight tiles with TMA (cp.async.bulk.tensor) and multiplies on the tensor cores, without
    spills; a GEMM without it issues no TMA copy."""
    tma = [n for n in GEMM if SPECS[n].constexprs.get("W_TMA")]
    assert len(tma) == 4, tma
    for n in GEMM:
        ptx = built[n].asm["ptx"]
        assert ("cp.async.bulk.tensor" in ptx) == (n in tma), n
        if n in tma:
            assert "wgmma" in ptx or "mma.sync" in ptx, n
            report = compiled.ptxas_report(built[n])
            assert report["spill_stores"] == 0 and report["spill_loads"] == 0, (n, report)


@pytest.mark.parametrize("name", WARP)
def test_warp_kernel_does_not_spill(built, name):
    report = compiled.ptxas_report(built[name])
    assert report["registers"] > 0, report  # the report was read at all
    assert report["spill_stores"] == 0 and report["spill_loads"] == 0 and report["stack_frame"] == 0, report


EXPERT_DEFAULT_GEMMS = [n for n, j in SPECS.items() if j.name in ("grouped_gate_up_kernel", "grouped_down_kernel")
                        and n.endswith("-defaults") or (j.name.startswith("grouped_") and "defaults-" in n)]


@pytest.mark.parametrize("name", EXPERT_DEFAULT_GEMMS)
def test_expert_default_gemm_does_not_spill(built, name):
    """The expert path's default tiles keep their accumulators in registers and fit shared memory."""
    report = compiled.ptxas_report(built[name])
    assert report["registers"] > 0, report
    assert report["spill_stores"] == 0 and report["spill_loads"] == 0, report
    assert 0 < built[name].shared <= _runtime.HOPPER_LIMITS["shared_per_block"], built[name].shared


def _weight_load_layouts(ttgir: str) -> set:
    """The layouts of a warp-decode kernel's weight loads: the loads marked evict_first. Triton up to
    3.8 prints the hint as ``evictionPolicy = evict_first``, 3.9 inside
    ``{cachePolicy = #tt.cache_policy<cache_modifier = none, eviction_policy = evict_first>}``."""
    return set(re.findall(r"tt\.load .*(?:evictionPolicy|eviction_policy) = evict_first\b.*, (#\w+)>", ttgir))


@pytest.mark.parametrize("line", [
    "%wv = tt.load %p, %m, %c evictionPolicy = evict_first : tensor<8x8x256x!tt.ptr<bf16>, #blocked1> loc(#loc9)",
    "%g = tt.load %p, %m, %c {cachePolicy = #tt.cache_policy<cache_modifier = none, eviction_policy = evict_first>}"
    " : tensor<1x2048x!tt.ptr<bf16>, #blocked> loc(#loc120)",
])
def test_weight_load_layouts_reads_both_ttgir_spellings(line):
    """The eviction hint as Triton 3.6-3.8 (first) and 3.9 (second) print it; a load without it is no weight load."""
    assert len(_weight_load_layouts(line)) == 1
    assert not _weight_load_layouts(line.replace("evict_first", "evict_last"))


@pytest.mark.parametrize("name", PAIR)
def test_warp_kernel_streams_weights_in_128_bit_loads(built, name):
    """The weight streams are the loads marked evict_first (tl.load's eviction_policy): 16 bytes per
    lane (8 bf16, or 16 e4m3 with FP8 weights)."""
    loads = [ln.strip() for ln in built[name].asm["ptx"].splitlines() if "ld.global" in ln and "evict_first" in ln]
    assert loads, "no evict_first weight load found in the PTX"
    assert {_bits(line) for line in loads} == {128}, loads[:4]


@pytest.mark.parametrize("name", PAIR)
def test_global_loads_sees_every_load(built, name):
    """compiled.global_loads (used by notebooks and benchmarks) counts every global load, the
    cache-hinted form ld.global.L1::evict_first.L2::cache_hint.v4.b32 included."""
    lines = [ln for ln in built[name].asm["ptx"].splitlines() if re.search(r"\bld\.global", ln)]
    assert any("cache_hint" in ln for ln in lines)
    assert sorted(compiled.global_loads(built[name])) == sorted(_bits(ln) for ln in lines)


@pytest.mark.parametrize("name", PAIR_BF16)
def test_warp_kernel_maps_outputs_to_warps_as_documented(built, name):
    """The weight tile's layout follows the rule kernels/warp_pair.py states: the reduction axis (the
    last) goes across the 32 lanes of a warp, 8 bf16 (16 bytes) per lane, so one warp spans 256
    columns; a tile wider than that spreads each row over min(num_warps, columns / 256) warps (the
    row's sum then crosses warps through shared memory), and the remaining warps stack over rows.
    With columns ≤ 256, or one warp, each output row belongs to exactly one warp. The down kernel's
    K experts stay inside each thread: its [rows, K, columns] tile has no warp over K, its
    ``PER_SLOT`` form is K 2-D [rows, columns] tiles, and its ``K_FIRST`` form one [K, rows, columns]
    tile, again with no warp over K."""
    job = SPECS[name]
    c = job.constexprs
    down_rank = 2 if c.get("PER_SLOT") or job.name.endswith("_fp8_kernel") else 3
    # 16 bytes per lane: 8 bf16, or 16 e4m3 (FP8 weights, kernels/warp_fp8.py: its tiles are K 2-D ones)
    per_lane = 16 if job.args.get("w13_ptr", job.args.get("w2_ptr")) == torch.float8_e4m3fn else 8
    # the weight tiles by rank: gate/up [rows, columns of H], down [rows, (K,) columns of I]
    tiles = {"warp_gate_up_kernel": {2: [(c.get("BLOCK_I"), c.get("BLOCK_H"))]},
             "warp_gate_up_fp8_kernel": {2: [(c.get("BLOCK_I"), c.get("BLOCK_H"))]},
             "warp_down_kernel": {down_rank: [(c.get("BLOCK_H"), c.get("BLOCK_I"))]},
             "warp_down_fp8_kernel": {2: [(c.get("BLOCK_H"), c.get("BLOCK_I"))]},
             "warp_fused_kernel": {2: [(c.get("GU_BLOCK_I"), c.get("GU_BLOCK_H"))]}}[job.name]
    if job.name == "warp_fused_kernel":
        tiles.setdefault(down_rank, []).append((c.get("DN_BLOCK_H"), c.get("DN_BLOCK_I")))
    ttgir = built[name].asm["ttgir"]
    layouts = dict(re.findall(r"^(#\w+) = #ttg\.blocked<\{(.*?)\}>", ttgir, re.M))
    used = _weight_load_layouts(ttgir)
    assert used, "no weight load found in the TritonGPU IR"
    seen = set()
    for layout in used:
        fields = {k: [int(v) for v in vs.split(",")] for k, vs in re.findall(r"(\w+) = \[([\d, ]+)\]", layouts[layout])}
        rank = len(fields["warpsPerCTA"])
        assert rank in tiles, (layout, layouts[layout], tiles)
        assert fields["threadsPerWarp"][-1] == 32 and fields["sizePerThread"][-1] == per_lane, (layout, layouts[layout])
        assert all(t == 1 for t in fields["threadsPerWarp"][:-1]), (layout, layouts[layout])
        matches = []
        for rows, columns in tiles[rank]:
            warps_on_a_row = min(job.num_warps, max(1, columns // (32 * per_lane)))
            want = [min(rows, job.num_warps // warps_on_a_row)] + [1] * (rank - 2) + [warps_on_a_row]
            if rank == 3 and c.get("K_FIRST"):  # [K, rows, columns]
                want = [1] + want[:1] + want[2:]
            if fields["warpsPerCTA"] == want:  # K (the 3-D tile's middle axis): no warp
                matches.append((rank, rows, columns))
        assert matches, (layout, layouts[layout], tiles)
        seen.update(matches)
    assert seen == {(r, *t) for r, ts in tiles.items() for t in ts}, (seen, tiles)  # every weight tile was seen


@pytest.mark.parametrize("name", GEMM)
def test_grouped_gemm_precision(built, name):
    """bf16 and FP8 activations (dequantised to bf16) on tensor cores, FP8 weights with bf16
    activations widened to bf16, or, with the activations as fp16 rows, to fp16; w8a8 on e4m3 tensor
    cores; fp32 inputs on full-precision FMAs, not tf32."""
    ptx, c = built[name].asm["ptx"], SPECS[name].constexprs
    a = SPECS[name].args["a_ptr"]
    if c["PRECISION"] == "ieee":
        assert not re.search(r"\b(?:wgmma|mma)\b|\.tf32", ptx)
    elif c.get("W_FP8") and a == torch.float16:  # fp16 rows: e4m3 widened to fp16, exactly
        assert re.search(r"\b(?:wgmma\.mma_async|mma\.sync)\S*\.f16\.f16", ptx)
    elif c.get("W_FP8") and c["A_FP8"]:  # w8a8: e4m3 operands (mma.sync takes them widened to f16, exactly)
        assert re.search(r"\b(?:wgmma\.mma_async\S*\.e4m3|mma\.sync\S*\.f16)", ptx)
    else:
        assert re.search(r"\b(?:wgmma\.mma_async|mma\.sync)\S*\.bf16", ptx)


@pytest.mark.parametrize("name", GROUPED)
def test_grouped_warp_kernel_precision(built, name):
    """The grouped schedule's products: on tensor cores where both operands are 16-bit (bf16 or
    fp16 x and weights in the gate/up kernel; bf16 weights and the intermediate's three bf16
    terms in the down kernel: exact in FP32, FP32 sums), on FMAs otherwise (fp32 weights, or
    fp16 weights with the FP32 intermediate), never in tf32. e4m3 weights take the other side's
    dtype (widened in registers): on tensor cores but with FP32 x."""
    ptx = built[name].asm["ptx"]
    args = SPECS[name].args
    dtype, other = (args["w13_ptr"], args["x_ptr"]) if "w13_ptr" in args else (args["w2_ptr"], args["act_ptr"])
    if dtype == torch.float8_e4m3fn:
        dtype = other
    mma = set(re.findall(r"\b(?:wgmma\.mma_async|mma\.sync)\S*?\.(bf16|f16|tf32)\b", ptx))
    if dtype == FP32 or other != dtype:
        assert not mma and ".tf32" not in ptx, mma
    else:
        assert mma == {"bf16" if dtype == BF16 else "f16"}, mma


def test_grouped_schedule_covers_every_intermediate_format():
    """The scenarios above reach both forms of the grouped down kernel's operands: bf16 weights
    with the three bf16 terms (tensor cores), and fp16 weights with one FP32 term (FMAs); e4m3
    weights with the three terms and with one bf16 term, in both scale formats."""
    downs = [SPECS[n] for n in GROUPED if SPECS[n].name == "warp_down_grouped_kernel"]
    seen = {(j.args["w2_ptr"], j.args["act_ptr"], j.constexprs["TERMS"]) for j in downs}
    e4m3 = torch.float8_e4m3fn
    assert {(BF16, BF16, 3), (FP16, FP32, 1), (FP32, FP32, 1), (e4m3, BF16, 3), (e4m3, BF16, 1)} <= seen, seen
    assert {j.constexprs.get("E8M0") for j in downs if j.constexprs.get("W_FP8")} == {False, True}


def test_gate_up_tile_fits_32_programs_per_sm(built):
    """Why the gate/up tile sums each step across the warp at once (``warp_pair._gate_up_tile``),
    read from ptxas: at the tuned Qwen3-30B T=1 tile (one warp, one neuron, 1024 columns per step)
    it needs at most 64 registers per thread, so an SM holds its limit of 32 of these one-warp
    programs (64 registers × 32 lanes × 32 programs = the 64 K register file). [BLOCK_I, BLOCK_H]
    FP32 tile accumulators cost about twice that, and half the programs."""
    name = "warp_gate_up_kernel-qwen3-30b-T=1-warp-1x1024"
    assert compiled.ptxas_report(built[name])["registers"] <= 64
    assert compiled.programs_per_sm(built[name]) == 32


FP8_DOWN = [n for n in PAIR if SPECS[n].name == "warp_down_fp8_kernel"]


@pytest.mark.parametrize("name", FP8_DOWN)
def test_fp8_down_loads_its_tiles_once_in_the_code(built, name):
    """The FP8 down kernel's weight loads in the PTX: a tile for the first chunk and one in the
    loop over chunks, K of each unrolled, one of each in the slot loop (``SLOT_LOOP``: the code
    does not grow with K); the first weight load comes before the wait for the gate/up kernel."""
    job, lines = SPECS[name], built[name].asm["ptx"].splitlines()
    c = job.constexprs
    per_tile = c["BLOCK_H"] * c["BLOCK_I"] // (job.num_warps * 32 * 16)  # 16 e4m3 a lane a load
    loads = [i for i, ln in enumerate(lines) if "ld.global" in ln and "evict_first" in ln]
    assert len(loads) == 2 * per_tile * (1 if c["SLOT_LOOP"] else c["K"]), (len(loads), per_tile, c)
    assert loads[0] < next(i for i, ln in enumerate(lines) if "griddepcontrol.wait" in ln)


def test_fp8_down_scenarios_reach_both_forms():
    assert {SPECS[n].constexprs["SLOT_LOOP"] for n in FP8_DOWN} == {False, True}


WIDE_GATE_UP = [n for n in PAIR if SPECS[n].name == "warp_gate_up_kernel" and SPECS[n].constexprs["BLOCK_H"] >= 2048]


@pytest.mark.parametrize("name", WIDE_GATE_UP)
def test_wide_gate_up_step_holds_x_in_its_dtype(built, name):
    """At 2048 columns per step and one warp, each lane holds 64 gate, 64 up and 64 x values. The
    tile widens x to FP32 only at the multiply (``warp_pair._gate_up_tile``): an FP32 copy of x
    held across the step costs 64 more registers, and where the compiler sums a lane's products
    as a tree rather than an FMA chain (Triton 3.9) that spills. ptxas's report, on every stack."""
    assert WIDE_GATE_UP  # the tuned table has such tiles
    report = compiled.ptxas_report(built[name])
    assert report["spill_stores"] == 0 and report["stack_frame"] == 0, report


#: gate/up tiles whose lanes hold 64 or more columns of a step (warp_pair.gate_up_slice slices those)
DEEP_GATE_UP = [n for n in WIDE_GATE_UP
                if SPECS[n].constexprs["BLOCK_I"] * SPECS[n].constexprs["BLOCK_H"] >= 64 * 32 * SPECS[n].num_warps]


@pytest.mark.parametrize("name", DEEP_GATE_UP)
def test_wide_gate_up_sums_a_lanes_products_in_fma_chains(built, name):
    """Each lane's gate and up products of a step are summed one FMA each, not as a tree of
    multiplies and adds: Triton 3.6 chains them by itself; from 3.8 the step is loaded in slices
    that accumulate element by element (``warp_pair.gate_up_slice``). A tree costs a multiply and
    an add per product, and all of a step's products live at once (102 registers against 69 at
    Qwen3-30B-A3B's 2048-column step on Triton 3.8). Counted in the PTX, on every stack."""
    assert DEEP_GATE_UP  # the tuned table has such tiles
    ptx = built[name].asm["ptx"]
    job = SPECS[name]
    per_lane = 2 * job.constexprs["BLOCK_I"] * job.constexprs["BLOCK_H"] // (32 * job.num_warps)  # gate and up
    fma = len(re.findall(r"^\s*fma\.rn\.f32\s", ptx, re.M))
    mul = len(re.findall(r"^\s*mul\.f32\s", ptx, re.M))
    assert fma >= 0.9 * per_lane and mul <= 0.1 * per_lane, (fma, mul, per_lane)
