"""Every kernel the launchers launch in their default configurations compiles without spills for
Ampere (sm_80), datacenter Blackwell (sm_100a) and consumer Blackwell (sm_120a), on this machine,
GPU or not (bench.compiled; tests/test_compile_sm90.py does Hopper, tuned table included).

No tuned table: the shipped one is the H200's and applies only there, so on these GPUs every
launch takes configs.py's defaults, derived from the architecture's limits
(``compiled.ARCH_LIMITS``: shared memory per program, SMs). What is compiled is what
bench.compiled.record_launches records the launchers passing on such a GPU, over the
scenarios below: both paths, every schedule, the expert path's SWAP_AB decode tiles and HALF_M
tiles, FP8 activations where the GPU has FP8 tensor cores (not sm_80: ``warpdecode.moe`` refuses
them there), bf16, fp16 and fp32, at T = 1, 3, 8, 64, 256 on three layer shapes; FP8 weights
(``warpdecode.quant``, both formats: warp decode's FP8 pair and grouped schedule, the expert path
weight-only and w8a8) on sm_100a. Jobs that
compile to the same code are compiled once (``compiled.compile_key``).

The checks read what ptxas reports and the PTX says: no spill and no stack frame, the shared
memory within what one program may take on that GPU, registers within what one SM holds, the
weight streams in 128-bit loads, tensor cores for 16-bit operands and full-precision FMAs for
FP32 ones, and no programmatic dependent launch where the GPU has none (sm_80).
"""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch

from bench import compiled, unfused
from bench import persistent as kf
from warpdecode import MoEShape
from warpdecode.kernels import expert as kx
from warpdecode.kernels import warp_fp8 as k8
from warpdecode.kernels import warp_grouped as kg
from warpdecode.kernels import warp_pair as kp

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
KERNEL_MODULES = (kx, kp, kg, kf, k8, unfused)
ARCHS = (80, 100, 120)
FP8_ARCHS = {a for a in ARCHS if a >= 89}
FP8_WEIGHT_ARCHS = {100}  # FP8 weights (warpdecode.quant): datacenter Blackwell here, Hopper in test_compile_sm90.py
NO_TABLE = "no tuned table"

ODD = dict(H=2880, I=1408, E=61, K=4)  # H/32 and I/32 not whole, prime E
MIXTRAL = dict(H=4096, I=14336, E=8, K=2)
QWEN = dict(H=2048, I=768, E=128, K=8)  # Qwen3-30B-A3B
EDGE = dict(H=2880, I=1408, E=61, K=61)  # K = E, past warp.STATIC_SLOTS_MAX: the FP8 down kernel's slot loop
SHAPES = {"odd": ODD, "mixtral": MIXTRAL, "qwen3-30b": QWEN}
TS = (1, 3, 8, 64, 256)


def scenarios(arch: int) -> list[tuple]:
    """(scenario id, path, layer shape, T, dtype, options) for one architecture. The default warp
    schedule is the pair or the grouped one by the sharing rule; ``fused`` is asked for."""
    out = []
    for sname, s in SHAPES.items():
        for T in TS:
            out.append((f"{sname}-T={T}-warp", "warp", s, T, BF16, {}))
            out.append((f"{sname}-T={T}-expert", "expert", s, T, BF16, {}))
            if arch in FP8_ARCHS:
                out.append((f"{sname}-T={T}-expert-fp8", "expert", s, T, BF16, dict(act_format="fp8")))
        for T in (1, 3):
            out.append((f"{sname}-T={T}-warp-fused", "warp", s, T, BF16, dict(schedule="fused")))
        for schedule in ("split", "grouped"):
            out.append((f"{sname}-T=8-warp-{schedule}", "warp", s, 8, BF16, dict(schedule=schedule)))
        out.append((f"{sname}-T=8-warp-act=bf16", "warp", s, 8, BF16, dict(act_dtype=BF16)))
    for dtype, dname in ((FP16, "fp16"), (FP32, "fp32")):
        for schedule in ("split", "grouped", "fused"):
            out.append((f"odd-T=3-warp-{schedule}-{dname}", "warp", ODD, 3, dtype, dict(schedule=schedule)))
        for T in (1, 64, 256):
            out.append((f"odd-T={T}-expert-{dname}", "expert", ODD, T, dtype, {}))
        out.append((f"mixtral-T=256-expert-{dname}", "expert", MIXTRAL, 256, dtype, {}))  # the largest tiles
    # gather and scatter as kernels of their own, and the four launches without PDL
    out.append(("odd-T=3-expert-eight-kernels", "expert-unfused", ODD, 3, BF16, {}))
    if arch in FP8_ARCHS:
        out.append(("qwen3-30b-T=8-expert-fp8-eight-kernels", "expert-unfused", QWEN, 8, BF16, dict(act_format="fp8")))
    out.append(("qwen3-30b-T=256-expert-no-pdl", "expert", QWEN, 256, BF16, dict(pdl=False)))
    if arch in FP8_WEIGHT_ARCHS:  # FP8 weights (warpdecode.quant), both formats, at their default tiles
        for fmt in ("block128", "mxfp8"):
            for sname, T in (("qwen3-30b", 1), ("odd", 3), ("mixtral", 1)):
                out.append((f"{sname}-T={T}-warp-fp8-{fmt}", "warp", SHAPES[sname], T, BF16, dict(weights=fmt)))
            out.append((f"edge-T=3-K=E=61-warp-fp8-{fmt}", "warp", EDGE, 3, BF16, dict(weights=fmt)))
            out.append((f"mixtral-T=8-warp-grouped-fp8-{fmt}", "warp", MIXTRAL, 8, BF16,
                        dict(weights=fmt, schedule="grouped")))
        # the expert path's FP8-weight GEMMs: weight-only and w8a8, decode and the largest default tiles
        for sname, T, fmt, act in (("qwen3-30b", 1, "block128", "native"), ("odd", 64, "mxfp8", "fp8"),
                                   ("mixtral", 256, "block128", "fp8"), ("mixtral", 256, "mxfp8", "native")):
            out.append((f"{sname}-T={T}-expert-fp8-weights-{fmt}-{act}", "expert", SHAPES[sname], T, BF16,
                        dict(weights=fmt, act_format=act)))
    return out


def _specs() -> tuple[dict, dict]:
    """(arch, id) -> Job, one per distinct compilation (the id of the first scenario that launched
    it), and id -> every scenario that launched it."""
    specs, seen, launched_by = {}, {}, {}
    for arch in ARCHS:
        for sid, path, s, T, dtype, options in scenarios(arch):
            launches = compiled.record_launches(path, MoEShape(sid, **s), T, gpu_name=NO_TABLE, dtype=dtype,
                                                arch=arch, **options)
            for ln in launches:
                assert ln.job.arch == arch
                key = compiled.compile_key(ln.job)
                if key not in seen:
                    seen[key] = (arch, f"{compiled.arch_name(arch)}-{ln.kernel}-{sid}")
                    specs[seen[key]] = ln.job
                launched_by.setdefault(seen[key], set()).add(sid)
    return specs, launched_by


SPECS, LAUNCHED_BY = _specs()  # recorded at collection (no compile here)
IDS = {key: key[1] for key in SPECS}
PAIR_BF16 = [k for k, j in SPECS.items() if j.name in ("warp_gate_up_kernel", "warp_down_kernel", "warp_fused_kernel",
                                                       "warp_gate_up_fp8_kernel", "warp_down_fp8_kernel")
             and BF16 in j.args.values()]  # bf16 activations: bf16 or e4m3 weights
GEMM = [k for k, j in SPECS.items() if j.name.startswith("grouped_")]
GROUPED = [k for k, j in SPECS.items() if "_grouped_" in j.name]

_built: dict = {}


@pytest.fixture(scope="module")
def built():
    """Every spec of one architecture compiled once, in one batch per architecture (a child process
    where this one interprets), on first use; a job the compiler rejects fails its own tests."""
    def get(key):
        arch = key[0]
        if arch not in _built:
            keys = [k for k in SPECS if k[0] == arch]
            _built[arch] = dict(zip(keys, compiled.compile_many([SPECS[k] for k in keys], errors="keep"), strict=True))
        c = _built[arch][key]
        if isinstance(c, compiled.CompileError):
            j = SPECS[key]
            pytest.fail(f"{c.message}\n{j.constexprs} num_warps={j.num_warps} num_stages={j.num_stages}")
        return c
    return get


def test_every_kernel_is_compiled_for_every_architecture():
    """A kernel added to warpdecode/kernels/ (or bench/unfused.py) but never launched by a scenario fails
    here; sm_80 launches no FP8 quantizer (no FP8 tensor cores); the FP8-weight pair is compiled for sm_100a."""
    defined = {n for mod in KERNEL_MODULES for n in dir(mod) if n.endswith("_kernel")}
    fp8_weights = {n for n in dir(k8) if n.endswith("_kernel")}
    for arch in ARCHS:
        names = {j.name for (a, _), j in SPECS.items() if a == arch}
        want = defined if arch in FP8_ARCHS else defined - {"quant_fp8_kernel"}
        assert names == (want if arch in FP8_WEIGHT_ARCHS else want - fp8_weights), arch


def test_fp8_is_refused_without_fp8_tensor_cores():
    with pytest.raises(ValueError, match="FP8 tensor cores"):
        compiled.record_launches("expert", MoEShape("q", **QWEN), 8, gpu_name=NO_TABLE, arch=80, act_format="fp8")
    with pytest.raises(ValueError, match="FP8 tensor cores"):
        compiled.record_launches("warp", MoEShape("q", **QWEN), 1, gpu_name=NO_TABLE, arch=80, weights="block128")


def test_scenarios_reach_the_default_tiles_they_name():
    """Control: the defaults give SWAP_AB tiles at decode (most experts see at most one row) and
    HALF_M tiles at large T, the pair and the grouped warp schedules, and no PDL on sm_80."""
    gemms = [SPECS[k] for k in GEMM]
    assert any(j.constexprs["SWAP_AB"] for j in gemms) and any(j.constexprs["HALF_M"] for j in gemms)
    assert {j.name for j in SPECS.values()} >= {"warp_gate_up_kernel", "warp_gate_up_grouped_kernel",
                                                "warp_fused_kernel"}
    pdl = {arch: {j.constexprs["USE_PDL"] for (a, _), j in SPECS.items() if a == arch and "USE_PDL" in j.constexprs}
           for arch in ARCHS}
    assert pdl == {80: {False}, 100: {False, True}, 120: {False, True}}, pdl


def test_compile_many_compiles_each_distinct_job_once_and_keeps_rejections():
    """Integers count by width and divisibility by 16 only (as a launch specializes them), so two
    jobs that differ in T alone are one binary; a job the compiler rejects (FP8 on sm_80) comes back
    as a CompileError with the compiler's reason, beside the others compiled."""
    combine = next(j for (a, _), j in SPECS.items() if a == 80 and j.name == "combine_kernel")
    quant = next(j for (a, _), j in SPECS.items() if a == 100 and j.name == "quant_fp8_kernel")
    ints = [k for k, v in combine.args.items() if isinstance(v, int)]
    other = dataclasses.replace(combine, args={**combine.args, ints[0]: combine.args[ints[0]] + 16})
    assert compiled.compile_key(other) == compiled.compile_key(combine)
    one, two, rejected = compiled.compile_many([combine, other, quant], arch=80, errors="keep")
    assert one is two and compiled.target(one) == "sm_80"
    assert isinstance(rejected, compiled.CompileError) and "fp8e4nv" in rejected.message, rejected
    with pytest.raises(RuntimeError, match="quant_fp8_kernel for sm_80"):
        compiled.compile_many([quant], arch=80)


def test_compile_count_stays_modest():
    """The file compiles each distinct job once: a few minutes on two cores per stack."""
    assert len(SPECS) <= 410, len(SPECS)


@pytest.mark.parametrize("key", list(SPECS), ids=IDS.get)
def test_compiles_without_spills(built, key):
    """ptxas's report: no spill, no stack frame; the shared memory fits one program on that GPU and
    one SM holds at least one program of it (registers × threads within the register file)."""
    arch, _ = key
    c, j = built(key), SPECS[key]
    assert compiled.target(c) == compiled.arch_name(arch) and len(c.asm["cubin"]) > 0
    report = compiled.ptxas_report(c)
    assert report["registers"] > 0, report  # the report was read at all
    assert report["spill_stores"] == 0 and report["spill_loads"] == 0 and report["stack_frame"] == 0, report
    limits = compiled.ARCH_LIMITS[arch]
    assert c.shared <= limits["shared_per_block"], (c.shared, j.constexprs, j.num_stages)
    assert compiled.programs_per_sm(c) >= 1, (report, c.shared)


@pytest.mark.parametrize("key", [k for k in SPECS if k[0] == 80], ids=IDS.get)
def test_no_programmatic_dependent_launch_on_ampere(built, key):
    """griddepcontrol is sm_90+; on sm_80 every kernel runs as an ordinary launch."""
    assert "griddepcontrol" not in built(key).asm["ptx"]


@pytest.mark.parametrize("key", PAIR_BF16, ids=IDS.get)
def test_warp_kernel_streams_weights_in_128_bit_loads(built, key):
    """The weight streams (the loads marked evict_first): 16 bytes per lane (8 bf16, or 16 e4m3 with
    FP8 weights), on every GPU."""
    loads = [ln.strip() for ln in built(key).asm["ptx"].splitlines() if "ld.global" in ln and "evict_first" in ln]
    assert loads, "no evict_first weight load found in the PTX"
    widths = {int(m.group(1) or 1) * int(m.group(2))
              for m in (re.search(r"ld\.global\S*?(?:\.v(\d))?\.[bfsu](\d+)\s", ln) for ln in loads)}
    assert widths == {128}, loads[:4]


#: The tensor-core instructions: Ampere's and consumer Blackwell's mma.sync, Hopper's wgmma,
#: datacenter Blackwell's tcgen05.mma (its operand types in a descriptor, not in the instruction)
MMA = re.compile(r"\b(?:mma\.sync|wgmma\.mma_async|tcgen05\.mma)\b")


@pytest.mark.parametrize("key", GEMM + GROUPED, ids=IDS.get)
def test_tensor_cores_for_16_bit_operands_only(built, key):
    """The expert GEMMs (bf16, fp16, FP8 activations dequantised to 16 bits) and the grouped warp
    kernels with 16-bit operands on both sides on tensor cores (e4m3 weights widened to the other
    side's dtype); FP32 operands (or fp16 weights with the FP32 intermediate) on full-precision FMAs,
    never tf32."""
    ptx, j = built(key).asm["ptx"], SPECS[key]
    if j.name.startswith("grouped_"):
        wide = j.constexprs["PRECISION"] == "ieee"
    else:
        a = j.args
        w, other = (a["w13_ptr"], a["x_ptr"]) if "w13_ptr" in a else (a["w2_ptr"], a["act_ptr"])
        w = other if w == torch.float8_e4m3fn else w
        wide = w == FP32 or other != w
    if wide:
        assert not MMA.search(ptx) and ".tf32" not in ptx and "kind::tf32" not in ptx
    else:
        assert MMA.search(ptx), "no tensor-core instruction"
