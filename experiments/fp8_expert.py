"""The expert path's GEMMs with FP8 weights (``kernels/expert.py``): what their instructions cost per
weight byte, beside the same GEMMs on bf16 weights and with FP8 activations (w8a8).

    python experiments/fp8_expert.py --version count [--arch 90 100] [--T 1 8 64 256]   # no GPU

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
  architecture, T, format and GEMM). ``variant``: ``shipped``, or ``f16 operands``: the weight-only
  GEMMs with the tensor cores' operands in fp16 rather than bf16 (each e4m3 pair one ``F2FP`` to
  f16x2; the activations converted to fp16, unscaled here: a count of instructions, not a kernel
  to run), compiled from a copy of ``kernels/expert.py`` with that one change (:func:`f16_module`);
  where the shipped tile is not transposed, ``swap`` and ``f16 operands swap``: the same with
  ``SWAP_AB`` (the weights on the tensor cores' M side).
"""

from __future__ import annotations

import csv
import dataclasses
import os
import re
import tempfile
from pathlib import Path

import harness
import triton
from fp8_warp import QWEN, _sass, executed

from bench import compiled

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


def f16_module(folder: Path) -> str:
    """Write ``kernels/expert.py`` to ``folder`` as :data:`F16_MODULE` with the weight-only GEMMs'
    operand dtype fp16 (the e4m3 weights and the bf16 activations widened or narrowed to it)."""
    import warpdecode.kernels.expert as shipped

    src = Path(shipped.__file__).read_text().replace("from .", "from warpdecode.kernels.")
    for w in ("w13_ptr", "w2_ptr"):
        old = f"({w}.dtype.element_ty if A_FP8 else a_ptr.dtype.element_ty)"
        assert old in src, old
        new = f"({w}.dtype.element_ty if A_FP8 else (tl.float16 if W_FP8 else a_ptr.dtype.element_ty))"
        src = src.replace(old, new)
    (folder / f"{F16_MODULE}.py").write_text(src)
    return F16_MODULE


def _jobs(arch: int, Ts):
    """(T, format, GEMM, Job, weight bytes per program, K steps) for the expert path's two GEMMs."""
    rows = []
    for T in Ts:
        for name, weights, act in FORMATS:
            launches = compiled.record_launches("expert", QWEN, T, gpu_name="NVIDIA H200", arch=arch,
                                                weights=weights, act_format=act)
            for ln in launches:
                j = ln.job
                if "gate_up" not in j.name and "down" not in j.name:
                    continue
                c = j.constexprs
                gate_up = "gate_up" in j.name
                k_dim = QWEN.H if gate_up else QWEN.I
                elem = 2 if weights is None else 1
                nbytes = (2 if gate_up else 1) * c["BLOCK_N"] * k_dim * elem  # gate and up rows: two tiles
                steps = triton.cdiv(k_dim, c["BLOCK_K"])
                rows.append((T, name, "shipped", "gate_up" if gate_up else "down", j, nbytes, steps))
                if weights is not None and act == "native":
                    gemm = "gate_up" if gate_up else "down"
                    f16 = dataclasses.replace(j, module=F16_MODULE)
                    rows.append((T, name, "f16 operands", gemm, f16, nbytes, steps))
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
    folder = Path(tempfile.mkdtemp())
    f16_module(folder)
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
    path = harness.HERE / "results" / "compiled" / "fp8_expert_instructions.csv"
    keep = [r for r in harness.read(path) if r["triton"] != triton.__version__ or r["arch"] not in
            {compiled.arch_name(a) for a in args.arch}]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(keep + rows)
    print(f"rows: {path}")
    return 0


VERSIONS = {"count": (main_count, [])}

if __name__ == "__main__":
    harness.dispatch(__doc__, VERSIONS)
