"""The expert path's GEMMs with FP8 weights (``kernels/expert.py``): what their instructions cost per
weight byte, beside the same GEMMs on bf16 weights and with FP8 activations (w8a8).

    python experiments/fp8_expert.py --version count [--arch 90 100] [--T 1 8 64 256]   # no GPU
    TRITON_INTERPRET=1 python experiments/fp8_expert.py --version count --check
    python experiments/fp8_expert.py --version rows [--presets …] [--T 4 8 16 32 64 256]  # on the GPU
    TRITON_INTERPRET=1 python experiments/fp8_expert.py --version rows --check

- count: the gate/up and down GEMMs of ``warpdecode.moe(method="expert")`` at Qwen3-30B-A3B, as the
  launchers launch them on an H200 (its tuned expert tiles; ``bench.compiled.record_launches``), for
  bf16 weights, block128 and MXFP8 weights with bf16 activations (weight-only, the path ``auto``
  takes past the crossover) and with e4m3 activations (w8a8, ``act_format="fp8"``), compiled for
  each architecture and disassembled (Triton's nvdisasm). Per program: the SASS it executes (loop
  bodies counted once per K step), over the weight bytes it loads, as lane instructions per byte
  (32 lanes × warps × instructions / bytes), split into what turns e4m3 into the tensor cores'
  operand (``F2FP`` conversions and ``HADD2.F32``), the tensor-core instructions, the FP32
  multiplies and adds that apply the block scales, integer and address arithmetic, and loads and
  shared-memory traffic. An H200 SM issues 4 warp instructions a cycle (128 lane instructions)
  while a 4.5 TB/s read delivers about 17 bytes to it: a kernel over ~7 lane instructions per byte
  is issue-bound, whatever its loads. Rows:
  ``experiments/results/compiled/fp8_expert_instructions.csv`` (one per Triton release,
  architecture, T, format and GEMM). ``variant``: ``shipped`` (what ``moe_expert`` launches: with FP8
  weights and bf16 activations, fp16 rows and their 1×128 scales up to ``expert.F16_ROWS_MAX_BLOCK_M``
  rows), ``shipped tma`` (the same with its weight tiles by TMA, ``W_TMA``, where the boxes tile the
  weights), ``bf16 operands`` (the weight-only GEMMs with e4m3 widened to bf16, what runs past that), and
  from the latter: ``f16 operands``: the weight-only
  GEMMs with the tensor cores' operands in fp16 rather than bf16 (each e4m3 pair one ``F2FP`` to
  f16x2, exactly), each activation row scaled by a power of two into fp16's range (its largest
  value into [2^13, 2^14], so the conversion is exact for every value above 2^-14 of that; the
  inverse joins the product's scales), compiled from a copy of ``kernels/expert.py`` with that
  change (:func:`f16_module`);
  where the shipped tile is not transposed, ``swap`` and ``f16 operands swap``: the same with
  ``SWAP_AB`` (the weights on the tensor cores' M side); ``f16 rows scaled before``: the
  kernel given fp16 activations (``dot_dtype`` follows them: each e4m3 pair one ``F2FP`` to f16x2), as
  if a producer had scaled each row into fp16's range once, before the GEMM; its inverse scale, one
  FP32 multiply per row, is not counted; ``f16 rows, 1x128 scales``: what ``rows`` runs with block
  scales, the shipped kernel given fp16 activations and their 1×128 power-of-two scales (``A_FP8``:
  each K step's product scaled by them, as w8a8 scales its e4m3 rows); ``f16 rows, a scale per
  row``: what ``rows`` runs with row scales (:func:`f16_rows_module`: one scale per row, applied
  once in the epilogue), the inverse scales counted in both.
- rows: the weight-only FP8 expert path with its activations re-encoded once, before each GEMM, in
  fp16 with power-of-two scales, a scale per row per 128 columns (the package's ``quant_fp8_kernel``
  with fp16's range, as w8a8 runs it for e4m3) or one per row (:func:`quant_f16_rows_kernel`); every value at or
  above 2^-29 of its block's (row's) largest keeps its bits, so the layer computes what the
  bf16-operand path computes; the weights widened e4m3 → fp16 by one ``F2FP`` per pair.
  :func:`moe_f16` runs the package's align, GEMMs and combine with it (the kernels' operand dtype
  follows the activations' wherever the weights are FP8; row scales through the module copy). Timed against the
  shipped weight-only path, w8a8 and ``auto`` on the same block128 bytes, each as the stage functions
  (``expert.moe_expert``; ``auto``: ``warpdecode.moe``) in CUDA graphs over layer copies past L2
  (``fp8_warp.fp8_cases``); rows: ``results/<GPU>/fp8_rows.csv``, ``same_bits``: against the
  weight-only path's output. ``--check``: bit for bit the weight-only path in the interpreter, both
  formats, odd shapes, activations over six decades.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tempfile
from pathlib import Path
from unittest import mock

import harness
import torch
import triton
import triton.language as tl
from fp8_warp import QWEN, _sass, executed

from bench import compiled
from warpdecode import expert as ex

OPS = {  # what counts, by SASS mnemonic (sm_90a and sm_100a spell these alike)
    "convert": r"^(F2FP|HADD2\.F32|F2F|I2F|F2I)\b",
    "tensor": r"^(HGMMA|QGMMA|HMMA|QMMA|UTC\w*MMA|IMMA)\b",
    "fp32": r"^(FFMA2?|FMUL2?|FADD2?|FMNMX)\b",
    "int": r"^(LOP3|PRMT|SHF|IMAD|IADD3|LEA|ISETP|SEL|IMNMX|MOV)\b",
    "memory": r"^(LDG|LDGSTS|LDS|LDSM|STS|STG|UTMALDG|SYNCS|BAR|LDGDEPBAR|DEPBAR)\b",
}
FORMATS = [("bf16", None, "native"), ("block128", "block128", "native"), ("mxfp8", "mxfp8", "native"),
           ("block128 w8a8", "block128", "fp8"), ("mxfp8 w8a8", "mxfp8", "fp8")]


F16_MODULE = "expert_f16_operands"


ROW_SCALES = """

@triton.jit
def _row_scales(a_ptrs, mask_m, n, BLOCK_K: tl.constexpr, ROWS: tl.constexpr, ON: tl.constexpr):
    \"\"\"Per row, 2^(14 - e) with 2^e the power of two at or above its largest magnitude (1 where not ON).\"\"\"
    rs = tl.full([ROWS], 1.0, tl.float32)
    if ON:
        offs_k = tl.arange(0, BLOCK_K)
        amax = tl.zeros([ROWS], tl.float32)
        for k1 in range(0, n, BLOCK_K):
            v = tl.load(a_ptrs + k1, mask=mask_m[:, None] & ((k1 + offs_k) < n)[None, :], other=0.0)
            amax = tl.maximum(amax, tl.max(tl.abs(v.to(tl.float32)), axis=1))
        rs = tl.exp2(tl.clamp(14.0 - tl.ceil(tl.log2(tl.maximum(amax, 1e-30))), -126.0, 126.0))
    return rs
"""
SCALED = """        a_s = tl.full([ROWS], 1.0, tl.float32)  # FP8 weights: the rows' scales, applied to the product
        if W_FP8 and not A_FP8:  # fp16 operands: each row scaled into fp16's range, exactly
            a = (a.to(tl.float32) * rs[:, None]).to(tl.float16)
            a_s = 1.0 / rs
"""


def _module_copy(folder: Path, name: str, edits, tail: str = "") -> str:
    """Write ``kernels/expert.py`` to ``folder`` as module ``name`` with ``edits`` ((old, new, how many
    times old occurs), each checked) and ``tail`` appended; its name."""
    import warpdecode.kernels.expert as shipped

    src = Path(shipped.__file__).read_text().replace("from .", "from warpdecode.kernels.")
    for old, new, count in edits:
        assert src.count(old) == count, old
        src = src.replace(old, new)
    (folder / f"{name}.py").write_text(src + tail)
    return name


def f16_module(folder: Path) -> str:
    """Write ``kernels/expert.py`` to ``folder`` as :data:`F16_MODULE` with the weight-only GEMMs'
    operand dtype fp16: the e4m3 weights widened to it, the activations scaled per row by a power of
    two (:data:`ROW_SCALES`) and narrowed to it, the inverse scale applied to each K step's product."""
    edits = [(f"(a_ptr.dtype.element_ty if W_FP8 or not A_FP8 else {w}.dtype.element_ty)",
              f"(tl.float16 if W_FP8 and not A_FP8 else (a_ptr.dtype.element_ty if W_FP8 or not A_FP8 "
              f"else {w}.dtype.element_ty))", 1)
             for w in ("w13_ptr", "w2_ptr")]
    edits += [(f"    for k0 in range(0, {n}, BLOCK_K):\n",
               f"    rs = _row_scales(a_ptrs, {m}, {n}, BLOCK_K, ROWS, W_FP8 and not A_FP8)\n"
               f"    for k0 in range(0, {n}, BLOCK_K):\n", 1) for n, m in (("H", "mask_m"), ("I", "valid"))]
    edits += [(SCALED.split("\n")[0] + "\n", SCALED, 2)]
    return _module_copy(folder, F16_MODULE, edits, ROW_SCALES)


F16_ROWS_MODULE = "expert_f16_rows"


def f16_rows_module(folder: Path) -> str:
    """Write ``kernels/expert.py`` to ``folder`` as :data:`F16_ROWS_MODULE`, where FP8 weights with scaled
    rows (``A_FP8``) take one power-of-two scale per row (:func:`quant_f16_rows_kernel`'s), applied once in
    the epilogue instead of to every K step's product: the kernel ``f16 rows scaled before`` counts, plus
    one multiply per output."""
    one = "a_s = tl.full([ROWS], 1.0, tl.float32)  # the row's scale: in the epilogue"
    edits = [(f"a_s = tl.load(a_scale_ptrs + k0 // 128, mask={m}, other=0.0)", one, 1) for m in ("mask_m", "valid")]
    edits += [("    h = acc_g * tl.sigmoid(acc_g) * acc_u\n",
               "    if A_FP8 and W_FP8:  # fp16 rows: one power-of-two scale per row\n"
               "        r_s = tl.load(a_scale_ptrs, mask=mask_m, other=1.0)[:, None]\n"
               "        acc_g, acc_u = acc_g * r_s, acc_u * r_s\n"
               "    h = acc_g * tl.sigmoid(acc_g) * acc_u\n", 1),
              ("    acc = acc * rw[:, None]\n",
               "    if A_FP8 and W_FP8:  # fp16 rows: one power-of-two scale per row\n"
               "        acc = acc * tl.load(a_scale_ptrs, mask=valid, other=1.0)[:, None]\n"
               "    acc = acc * rw[:, None]\n", 1)]
    return _module_copy(folder, F16_ROWS_MODULE, edits)


def _odd_cases(seed: int):
    """(shape, T, format, (x, w13, w2, topk_weights, topk_ids)) on two odd shapes and both FP8 formats,
    the activations' rows over six decades: what the interpreter checks compare on."""
    import warpdecode as wd
    from warpdecode import quant

    for shape, T in [(wd.MoEShape("c1", H=160, I=96, E=5, K=2), 3), (wd.MoEShape("c2", H=288, I=160, E=7, K=3), 9)]:
        w13, w2 = shape.weights(dtype=torch.bfloat16, seed=seed)
        gen = torch.Generator().manual_seed(T)
        x = (torch.randn(T, shape.H, generator=gen) * torch.logspace(-3, 3, T)[:, None]).to(torch.bfloat16)
        tw, ids = wd.route(torch.randn(T, shape.E, generator=gen), shape.K)
        for fmt in quant.FORMATS:
            yield shape, T, fmt, (x, *quant.quantize_experts(w13, w2, fmt), tw, ids)


def check():
    """The fp16-operand copy computes what the shipped kernels compute (Triton's interpreter: the same
    bits, every conversion on the way being exact), on odd shapes with both FP8 formats."""
    import importlib
    import sys
    from unittest import mock

    import torch

    import warpdecode as wd
    from bench.poison import poisoned

    folder = Path(tempfile.mkdtemp())
    sys.path.insert(0, str(folder))
    f16 = importlib.import_module(f16_module(folder))
    for shape, T, fmt, (x, q13, q2, tw, ids) in _odd_cases(seed=1):
        with poisoned():
            shipped = wd.moe(x, q13, q2, tw, ids, method="expert")
            with mock.patch.object(ex, "kx", f16):
                got = wd.moe(x, q13, q2, tw, ids, method="expert")
        assert torch.equal(shipped.view(torch.int16), got.view(torch.int16)), (shape.name, fmt)
        print(f"{shape.name} T={T} {fmt}: the fp16-operand expert path has the shipped path's bits")


def _jobs(arch: int, Ts):
    """(T, format, GEMM, Job, weight bytes per program, K steps) for the expert path's two GEMMs."""
    def gemms(T, weights, act):
        return [ln.job for ln in compiled.record_launches("expert", QWEN, T, gpu_name="NVIDIA H200", arch=arch,
                                                           weights=weights, act_format=act)
                if "gate_up" in ln.job.name or "down" in ln.job.name]

    rows = []
    for T in Ts:
        for name, weights, act in FORMATS:
            shipped = gemms(T, weights, act)
            weight_only = weights is not None and act == "native"
            if weight_only:  # the variants start from bf16 operands, what runs past F16_ROWS_MAX_BLOCK_M
                with mock.patch.object(ex, "F16_ROWS_MAX_BLOCK_M", 0):
                    base = gemms(T, weights, act)
            for s, j in zip(shipped, base if weight_only else shipped, strict=True):
                c = j.constexprs
                gate_up = "gate_up" in j.name
                k_dim = QWEN.H if gate_up else QWEN.I
                elem = 2 if weights is None else 1
                nbytes = (2 if gate_up else 1) * c["BLOCK_N"] * k_dim * elem  # gate and up rows: two tiles
                steps = triton.cdiv(k_dim, c["BLOCK_K"])
                gemm = "gate_up" if gate_up else "down"
                rows.append((T, name, "shipped", gemm, s, nbytes, steps))
                sc = s.constexprs
                if ex.tma_box_problem(sc, *ex.gemm_dims(QWEN.H, QWEN.I)[gemm], elem) is None:  # weight tiles by TMA
                    dtype = "bf16" if weights is None else "fp8e4nv"
                    desc = f"tensordesc<{dtype}[1, {sc['BLOCK_N']}, {sc['BLOCK_K']}]>"
                    tma = dataclasses.replace(s, args={**s.args, "w_desc": desc}, constexprs={
                        **{k: v for k, v in sc.items() if k != "w_desc"}, "W_TMA": True})
                    rows.append((T, name, "shipped tma", gemm, tma, nbytes, steps))
                if weight_only:
                    rows.append((T, name, "bf16 operands", gemm, j, nbytes, steps))
                    f16 = dataclasses.replace(j, module=F16_MODULE)
                    rows.append((T, name, "f16 operands", gemm, f16, nbytes, steps))
                    # the activations already fp16, scaled once per row before the GEMM: the shipped kernel as is
                    pre = dataclasses.replace(j, args={**j.args, "a_ptr": torch.float16})
                    rows.append((T, name, "f16 rows scaled before", gemm, pre, nbytes, steps))
                    f16_args = {**j.args, "a_ptr": torch.float16, "a_scale_ptr": torch.float32}
                    scaled = dataclasses.replace(j, args=f16_args, constexprs={**c, "A_FP8": True})
                    rows.append((T, name, "f16 rows, 1x128 scales", gemm, scaled, nbytes, steps))
                    by_row = dataclasses.replace(scaled, module=F16_ROWS_MODULE)
                    rows.append((T, name, "f16 rows, a scale per row", gemm, by_row, nbytes, steps))
                    if not c.get("SWAP_AB"):  # the tile transposed: the weights on the tensor cores' M side
                        for variant, job in (("swap", j), ("f16 operands swap", f16)):
                            rows.append((T, name, variant, gemm, dataclasses.replace(
                                job, constexprs={**c, "SWAP_AB": True}), nbytes, steps))
    return rows


def main_count():
    p = harness.parser(__doc__, ["count"])
    p.add_argument("--arch", type=int, nargs="+", default=[90, 100])
    p.add_argument("--T", type=int, nargs="+", default=[1, 8, 64, 256])
    args = p.parse_args()
    if args.check:
        return check()
    folder = Path(tempfile.mkdtemp())
    f16_module(folder)
    f16_rows_module(folder)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(folder), str(harness.HERE),
                                                             os.environ.get("PYTHONPATH")]))
    rows = []
    for arch in args.arch:
        jobs = _jobs(arch, args.T)
        for (T, name, variant, gemm, j, nbytes, steps), c in zip(jobs, compiled.compile_many([r[4] for r in jobs]),
                                                                 strict=True):
            rep = compiled.ptxas_report(c)
            ops = executed(_sass(c), steps)
            per_byte = 32 * j.num_warps / nbytes
            k = j.constexprs
            r = {"triton": triton.__version__, "arch": compiled.arch_name(arch), "T": T, "format": name,
                 "variant": variant, "gemm": gemm,
                 "tile": f"{k['BLOCK_M']}x{k['BLOCK_N']}x{k['BLOCK_K']}" + (" swap" if k.get("SWAP_AB") else ""),
                 "num_warps": j.num_warps, "num_stages": j.num_stages, "registers": rep["registers"],
                 "spill_bytes": rep["spill_stores"] + rep["spill_loads"],
                 "instr_per_byte": round(sum(ops.values()) * per_byte, 3)}
            for key, pat in OPS.items():
                r[key + "_per_byte"] = round(sum(v for op, v in ops.items() if re.match(pat, op)) * per_byte, 3)
            rows.append(r)
            print(f"{r['arch']} T={T:3d} {name:14s} {variant:12s} {gemm:7s} {r['tile']:>16s} "
                  f"w{j.num_warps} s{j.num_stages}: "
                  f"{rep['registers']:3d} regs, spills {r['spill_bytes']:3d} B, {r['instr_per_byte']:5.2f} instr/B "
                  f"(convert {r['convert_per_byte']}, tensor {r['tensor_per_byte']}, fp32 {r['fp32_per_byte']}, "
                  f"int {r['int_per_byte']}, memory {r['memory_per_byte']})", flush=True)
    harness.write_compiled("fp8_expert_instructions", rows, {compiled.arch_name(a) for a in args.arch})
    return 0


# ==================================================================================================
# rows: the activations re-encoded once in fp16, 1×128 power-of-two scales (on the GPU)

F16_MAX = ex.F16_QMAX  # a block's largest value lands in (2^14, 2^15]: below fp16's 65504, 2^-29 of it still normal


@triton.jit
def quant_f16_rows_kernel(
    a_ptr, q_ptr, scale_ptr, num_tokens_post_padded_ptr, N, stride_ar, stride_qr,
    GUARD_ROWS: tl.constexpr, F16_MAX: tl.constexpr, BLOCK: tl.constexpr,
):
    """``quant_fp8_kernel`` with fp16's range (``QMAX`` = :data:`F16_MAX`) and one scale for the whole
    row: every value at or above 2^-29 of the row's largest kept exactly (the largest of a hidden state
    rarely exceeds its typical values by 2^15); NaN and inf stay loud (a/s)."""
    r = tl.program_id(0)
    if GUARD_ROWS:
        if r >= tl.load(num_tokens_post_padded_ptr):
            return
    offs = tl.arange(0, BLOCK)
    row = a_ptr + r.to(tl.int64) * stride_ar
    amax = tl.max(tl.abs(tl.load(row + offs, mask=offs < N, other=0.0).to(tl.float32)), axis=0)
    for n0 in range(BLOCK, N, BLOCK):
        v = tl.load(row + n0 + offs, mask=(n0 + offs) < N, other=0.0).to(tl.float32)
        amax = tl.maximum(amax, tl.max(tl.abs(v), axis=0))
    s = tl.exp2(tl.ceil(tl.log2(tl.maximum(amax, 1e-30) / F16_MAX)))
    for n0 in range(0, N, BLOCK):
        a = tl.load(row + n0 + offs, mask=(n0 + offs) < N, other=0.0).to(tl.float32)
        tl.store(q_ptr + r.to(tl.int64) * stride_qr + n0 + offs, (a / s).to(tl.float16), mask=(n0 + offs) < N)
    tl.store(scale_ptr + r, s)


def quantize_f16_rows(a: torch.Tensor, al):
    """(fp16 rows, their (rows, 1) FP32 scales): :func:`quantize_f16` with one scale per row."""
    EM, N = a.shape
    q = torch.empty(EM, N, dtype=torch.float16, device=a.device)
    scales = torch.empty(EM, 1, dtype=torch.float32, device=a.device)
    quant_f16_rows_kernel[(EM,)](a, q, scales, al.num_tokens_post_padded if al is not None else scales, N,
                                 a.stride(0), q.stride(0), GUARD_ROWS=al is not None, F16_MAX=F16_MAX,
                                 BLOCK=min(1024, triton.next_power_of_2(N)), num_warps=4)
    return q, scales


_QUANTIZE = ex.quantize  # the package's, bound before moe_f16 patches ``ex.quantize``


def quantize_f16(a: torch.Tensor, al):
    """(fp16 rows, their (rows, cdiv(N, 128)) FP32 scales): the package's ``expert.quantize(a, al, "f16")``."""
    return _QUANTIZE(a, al, "f16")


_ROWS_KERNELS = {}  # the row-scaled module copy, written once per process


def _rows_kernels():
    if not _ROWS_KERNELS:
        import importlib
        import sys

        folder = Path(tempfile.mkdtemp())
        sys.path.insert(0, str(folder))
        _ROWS_KERNELS["kx"] = importlib.import_module(f16_rows_module(folder))
    return _ROWS_KERNELS["kx"]


def moe_f16(x, w13, w2, topk_weights, topk_ids, *, tiles: str = "native", scales: str = "block"):
    """``expert.moe_expert`` on FP8 weights with the activations and the intermediate in fp16 rows where
    w8a8 (``act_format="fp8"``) quantizes them to e4m3; ``tiles``: the launch config of the weight-only
    path ("native") or of w8a8 ("fp8"); ``scales``: "block" (:func:`quantize_f16`, the package's kernels
    scale each K step's product) or "row" (:func:`quantize_f16_rows`, :func:`f16_rows_module`'s kernels
    scale each output once). No PDL (a quantize sits between the GEMMs, as for w8a8)."""
    from unittest import mock

    quantize = quantize_f16_rows if scales == "row" else quantize_f16
    config = ex.launch_config(x, w13, topk_ids, tiles)
    with mock.patch.object(ex, "quantize", lambda a, al, fmt: quantize(a, al)), \
            mock.patch.object(ex, "kx", _rows_kernels() if scales == "row" else ex.kx):
        return ex.moe_expert(x, w13, w2, topk_weights, topk_ids, act_format="fp8", config=config)


def check_rows():
    """:func:`moe_f16` gives the bits of the weight-only path with bf16 operands at every tile (Triton's
    interpreter: every conversion on the way exact) with both tile choices, on odd shapes, both FP8 formats,
    activations over six decades."""
    from unittest import mock

    from bench.poison import poisoned

    for shape, T, fmt, (x, q13, q2, tw, ids) in _odd_cases(seed=2):
        with poisoned(), mock.patch.object(ex, "F16_ROWS_MAX_BLOCK_M", 0):  # bf16 operands at every tile
            shipped = ex.moe_expert(x, q13, q2, tw, ids)
        with poisoned():
            for tiles, scales in (("native", "block"), ("fp8", "block"), ("native", "row")):
                got = moe_f16(x, q13, q2, tw, ids, tiles=tiles, scales=scales)
                assert not got.isnan().any() and torch.equal(shipped.view(torch.int16), got.view(torch.int16)), \
                    (shape.name, fmt, tiles, scales)
                print(f"{shape.name} T={T} {fmt} {tiles} tiles, {scales} scales: fp16 rows give the weight-only "
                      "path's bits")


#: Error over the bf16 floor past which a method fails its check: w8a8 quantizes the activations (25-28 floors).
W8A8_TOL = 60.0


def _run(rows, fcase, reps, label, fn, config, *, same_as=None, tol=4.0):
    """Check (within ``tol`` × the floor) and time ``fn`` on the FP8 case (``harness.checked_us_or_none``); its
    row against the FP8 bytes' floor, ``same_bits`` against ``same_as`` where given; (µs, copy 0's output) or
    (None, None)."""
    r = harness.checked_us_or_none(fcase, fn, label, reps=reps, tol=tol)
    if r is None:
        return None, None
    us, err, y0 = r
    detail = {"same_bits": torch.equal(y0, same_as)} if same_as is not None else {}
    rows.append(harness.row(fcase, us=us, err=err, experiment="fp8_expert", version="rows", variant=label,
                            config=config, detail=harness.literal(detail)))
    print(f"{fcase.shape.name:14s} T={fcase.T:<3d} {label:36s} {us:9.2f} µs  {fcase.floor_us / us:6.1%} of the "
          f"ceiling (FP8 bytes)  error/floor {err:.2f}  {detail or ''}", flush=True)
    return us, y0


def main_rows():
    from functools import partial

    from fp8_warp import fp8_cases

    import warpdecode as wd
    from warpdecode import quant

    p = harness.parser(__doc__, ["rows"], presets=["qwen3-30b-a3b"], Ts=[4, 8, 16, 32, 64, 256])
    p.add_argument("--reps", type=int, default=40)
    p.add_argument("--weights", choices=quant.FORMATS, default="block128", help="the FP8 format (default block128)")
    args = p.parse_args()
    if args.check:
        check_rows()
        return 0
    presets = args.presets or ["qwen3-30b-a3b", "olmoe-1b-7b", "qwen3-235b-a22b"]
    Ts = args.T or [4, 8, 16, 32, 64, 256]
    ceiling = harness.read_ceiling()
    print(f"read ceiling {ceiling:.3f} TB/s")
    rows, path = [], harness.results_dir() / "fp8_rows.csv"
    for _case, fcase in fp8_cases(presets, Ts, ceiling, args.weights):
        run = partial(_run, rows, fcase, args.reps)
        _, y_wo = run("weight-only (shipped)", ex.moe_expert, "table or default")
        run("bf16 operands", moe_bf16_operands, "table or default", same_as=y_wo)
        for tiles, scales in (("native", "block"), ("fp8", "block"), ("native", "row"), ("fp8", "row")):
            run(f"fp16 rows, {tiles} tiles, {scales} scales", partial(moe_f16, tiles=tiles, scales=scales),
                f"{tiles} tiles, {scales} scales", same_as=y_wo)
        run("w8a8", partial(ex.moe_expert, act_format="fp8"), "table or default", tol=W8A8_TOL)
        run("auto (warpdecode.moe)", wd.moe, "auto")
        harness.write("fp8_rows", rows, path)
    print(f"rows: {path}")
    return 0


def moe_bf16_operands(x, w13, w2, topk_weights, topk_ids, config=None):
    """The expert path on FP8 weights with its activations in bf16 at every tile: e4m3 widened to bf16,
    the form ``moe_expert`` keeps past ``F16_ROWS_MAX_BLOCK_M`` rows."""
    with mock.patch.object(ex, "F16_ROWS_MAX_BLOCK_M", 0):
        return ex.moe_expert(x, w13, w2, topk_weights, topk_ids, config=config)


VERSIONS = {"count": (main_count, []), "rows": (main_rows, [])}

if __name__ == "__main__":
    harness.dispatch(__doc__, VERSIONS)
