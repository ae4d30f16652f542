"""v15, an experiment: the warp down kernel with its whole w2 tile in flight into shared memory
(TMA boxes, or 16-byte cp.async requests; written in Gluon) before ``gdc_wait``, so the bytes in
flight cost no registers.

    python scripts/down_tma.py [--presets qwen3-30b-a3b olmoe-1b-7b] [--T 1 2] [--kinds tma cp.async]
    python scripts/down_tma.py --check     # compiles the kernel for sm_90a (no GPU needed)

Nsight Compute on the T = 1 pair (session 10, ``scripts/profile_pair.py``, ``logs/profile_details.log``):
the tuned down kernel runs 256 programs of 161 registers per thread at Qwen3-30B T = 1, 0.65 waves,
7 warps per SM, 42 % of DRAM's peak, 12.5 µs alone, where a read of its 25.2 MB in tiles takes
8.2 µs (65 %, L2 flushed, no PDL overlap; the gate/up kernel is at 97 % of its tile read). A
program holds one chunk of its [rows, K, I] tile in registers at a time, so an SM has about
64 KB in flight; v13 (all chunks in registers) held more per program but fitted fewer programs.

Here a program asks TMA for its whole tile, K experts × cdiv(I, BOX_I) boxes of [BLOCK_H, BOX_I]
of w2 seen as (E·H, I), into shared memory, before it waits for kernel 1 (w2 does not depend on
it); after the wait it reads the FP32 intermediate and folds each box from shared memory into an
FP32 accumulator. At Qwen3-30B T = 1 the whole of w2 is 190 KB per SM: with BLOCK_H = 2 (24 KB a
program, 1024 programs) all of it can be requested while kernel 1 still runs, limited by shared
memory (228 KB per SM), not registers. Prediction: the pair from 22.4 µs towards the one-launch
tile read of its 75.5 MB (19.1 µs, 87 %). The TMA form lost (session 10, call 3); the cp.async
form asks for the same bytes in 16-byte pieces, one per thread and step, where TMA's small boxes
(1 KB at 2 rows) queue on one unit per SM.

Each candidate runs in the pair with the tuned gate/up kernel (which lets it launch early), against
the tuned pair in the same process, at the benchmark's routings (seed 1000 + T), checked against the
float64 reference first (outputs poisoned). Rows: results/<GPU>/down_tma.csv.
"""

import argparse
import itertools
from pathlib import Path

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma

import warpdecode as wd
from warpdecode import _alloc
from warpdecode import warp as wp

BOX_I = 256  # columns per TMA box: 512 bytes of bf16


@gluon.jit
def _gdc_wait():
    """griddepcontrol.wait (kernel 1 finished, its stores visible), as triton.language.extra.cuda's."""
    gl.inline_asm_elementwise("griddepcontrol.wait; // dummy $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def down_tma_kernel(
    act_ptr,  # (T*K, I) fp32
    w2_desc,  # TMA descriptor of w2 seen as (E*H, I), boxes [BLOCK_H, BOX_I]
    topk_ids_ptr,  # (T, K) int32
    topk_weights_ptr,  # (T, K) fp32
    y_ptr,  # (T, H) bf16
    H, I, T, stride_at, stride_yt,
    K: gl.constexpr, BLOCK_H: gl.constexpr, BOX_I: gl.constexpr, N_BOX: gl.constexpr, USE_PDL: gl.constexpr,
):
    pid = gl.program_id(0)
    t = pid % T
    h0 = (pid // T) * BLOCK_H
    boxes = gl.allocate_shared_memory(w2_desc.dtype, [K * N_BOX, BLOCK_H, BOX_I], w2_desc.layout)
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    mbarrier.expect(bar, K * N_BOX * w2_desc.block_type.nbytes)
    for k in gl.static_range(K):  # w2 does not depend on kernel 1: all of it in flight now
        e = gl.load(topk_ids_ptr + t * K + k)
        for j in gl.static_range(N_BOX):
            tma.async_copy_global_to_shared(w2_desc, [e * H + h0, j * BOX_I], bar, boxes.index(k * N_BOX + j))
    if USE_PDL:
        _gdc_wait()

    mbarrier.wait(bar, phase=0)
    _fold_and_store(boxes, act_ptr, topk_weights_ptr, y_ptr, H, I, t, h0, stride_at, stride_yt,
                    K, BLOCK_H, BOX_I, N_BOX)
    mbarrier.invalidate(bar)


@gluon.jit
def _fold_and_store(tiles, act_ptr, topk_weights_ptr, y_ptr, H, I, t, h0, stride_at, stride_yt,
                    K: gl.constexpr, BLOCK_H: gl.constexpr, BOX_I: gl.constexpr, N_BOX: gl.constexpr):
    """y[t, h0:h0+BLOCK_H] = Σ_k rw_k · Σ_i tiles[k, :, i] · act[t·K + k, i], from shared memory."""
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [gl.num_warps(), 1], [1, 0])
    offs_i = gl.arange(0, BOX_I, layout=gl.SliceLayout(0, layout))
    acc = gl.zeros([BLOCK_H, BOX_I], gl.float32, layout)
    for k in gl.static_range(K):
        pair = t * K + k
        rw = gl.load(topk_weights_ptr + pair)
        for j in gl.static_range(N_BOX):
            cols = j * BOX_I + offs_i
            a = gl.load(act_ptr + pair * stride_at + cols, mask=cols < I, other=0.0) * rw
            w = tiles.index(k * N_BOX + j).load(layout).to(gl.float32)
            acc += w * gl.expand_dims(a, 0)
    offs_h = h0 + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, layout))
    gl.store(y_ptr + t * stride_yt + offs_h, gl.sum(acc, axis=1).to(y_ptr.dtype.element_ty), mask=offs_h < H)


@gluon.jit
def down_cpasync_kernel(
    act_ptr,  # (T*K, I) fp32
    w2_ptr,  # (E, H, I) bf16
    topk_ids_ptr,  # (T, K) int32
    topk_weights_ptr,  # (T, K) fp32
    y_ptr,  # (T, H) bf16
    H, I, T, stride_at, stride_we, stride_wr, stride_yt,
    K: gl.constexpr, BLOCK_H: gl.constexpr, BOX_I: gl.constexpr, N_BOX: gl.constexpr, USE_PDL: gl.constexpr,
):
    """v15 with 16-byte cp.async requests (one per thread and step) instead of TMA boxes."""
    pid = gl.program_id(0)
    t = pid % T
    h0 = (pid // T) * BLOCK_H
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [gl.num_warps(), 1], [1, 0])
    tiles = gl.allocate_shared_memory(w2_ptr.dtype.element_ty, [K * N_BOX, BLOCK_H, BOX_I],
                                      gl.SwizzledSharedLayout(vec=8, per_phase=1, max_phase=1, order=[1, 0]))
    offs_h = h0 + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, layout))
    offs_i = gl.arange(0, BOX_I, layout=gl.SliceLayout(0, layout))
    for k in gl.static_range(K):  # w2 does not depend on kernel 1: all of it in flight now
        e = gl.load(topk_ids_ptr + t * K + k).to(gl.int64)
        rows = w2_ptr + e * stride_we + gl.expand_dims(offs_h, 1).to(gl.int64) * stride_wr
        for j in gl.static_range(N_BOX):
            cols = j * BOX_I + offs_i
            mask = gl.expand_dims(offs_h < H, 1) & gl.expand_dims(cols < I, 0)
            async_copy.async_copy_global_to_shared(tiles.index(k * N_BOX + j), rows + gl.expand_dims(cols, 0),
                                                   mask=mask)
    async_copy.commit_group()
    if USE_PDL:
        _gdc_wait()
    async_copy.wait_group(0)
    gl.thread_barrier()  # every thread's copies landed before any thread reads them
    _fold_and_store(tiles, act_ptr, topk_weights_ptr, y_ptr, H, I, t, h0, stride_at, stride_yt,
                    K, BLOCK_H, BOX_I, N_BOX)


def _descriptor(w2, block_h: int):
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    E, H, I = w2.shape  # noqa: E741
    layout = gl.NVMMASharedLayout.get_default_for([block_h, BOX_I], gl.bfloat16)
    return TensorDescriptor.from_tensor(w2.view(E * H, I), [block_h, BOX_I], layout)


def down_tma(act, w2, topk_ids, topk_weights, cfg: dict, out_dtype) -> torch.Tensor:
    """v15's down kernel: TMA boxes (cfg["kind"] "tma", the default) or 16-byte cp.async ("cp.async")."""
    E, H, I = w2.shape  # noqa: E741
    T, K = topk_ids.shape
    y = _alloc.empty(T, H, dtype=out_dtype, device=act.device)
    grid = (T * triton.cdiv(H, cfg["BLOCK_H"]),)
    meta = dict(K=K, BLOCK_H=cfg["BLOCK_H"], BOX_I=BOX_I, N_BOX=triton.cdiv(I, BOX_I), USE_PDL=wp.USE_PDL,
                num_warps=cfg["num_warps"], **({"launch_pdl": True} if wp.USE_PDL else {}))
    if cfg.get("kind", "tma") == "tma":
        down_tma_kernel[grid](act, _descriptor(w2, cfg["BLOCK_H"]), topk_ids, topk_weights, y, H, I, T,
                              act.stride(0), y.stride(0), **meta)
    else:
        down_cpasync_kernel[grid](act, w2, topk_ids, topk_weights, y, H, I, T, act.stride(0), w2.stride(0),
                                  w2.stride(1), y.stride(0), **meta)
    return y


def candidates(H: int, I: int, K: int, kinds=("tma", "cp.async")):  # noqa: E741
    """Rows per program and warps, where the tile fits in shared memory beside a second program."""
    out = []
    for kind, r, w in itertools.product(kinds, [2, 4, 8, 16], [1, 2, 4]):
        smem = K * triton.cdiv(I, BOX_I) * r * BOX_I * 2
        if smem <= 112 * 1024 and w <= r and H % r == 0:
            out.append({"kind": kind, "BLOCK_H": r, "num_warps": w})
    return out


def check():
    """Compiles every candidate at the two presets' shapes for sm_90a (no GPU needed): registers,
    shared memory, no spills."""
    if wd.INTERPRET:  # Triton's own helpers (gl.sum) were built for the interpreter: compile in a child
        import os
        import subprocess
        import sys
        env = {**os.environ, "TRITON_INTERPRET": "0", "PYTHONPATH": os.pathsep.join(sys.path)}
        subprocess.run([sys.executable, __file__, "--check"], env=env, check=True)
        return
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    from warpdecode.compiled import Compiled, ptxas_report

    for name in ("qwen3-30b-a3b", "olmoe-1b-7b"):
        s = wd.get_preset(name)
        for cfg in candidates(s.H, s.I, s.K):
            sig = {"act_ptr": "*fp32", "topk_ids_ptr": "*i32", "topk_weights_ptr": "*fp32", "y_ptr": "*bf16",
                   "H": "i32", "I": "i32", "T": "i32", "stride_at": "i32", "stride_yt": "i32",
                   "K": "constexpr", "BLOCK_H": "constexpr", "BOX_I": "constexpr", "N_BOX": "constexpr",
                   "USE_PDL": "constexpr"}
            if cfg["kind"] == "tma":
                layout = gl.NVMMASharedLayout.get_default_for([cfg["BLOCK_H"], BOX_I], gl.bfloat16)
                kernel, sig["w2_desc"] = down_tma_kernel, f"tensordesc<bf16[{cfg['BLOCK_H']}, {BOX_I}],{layout!r}>"
            else:
                kernel = down_cpasync_kernel
                sig.update(w2_ptr="*bf16", stride_we="i32", stride_wr="i32")
            sig = {a: sig[a] for a in kernel.arg_names}
            const = {"K": s.K, "BLOCK_H": cfg["BLOCK_H"], "BOX_I": BOX_I, "N_BOX": triton.cdiv(s.I, BOX_I),
                     "USE_PDL": True}
            # as the launcher specializes them: pointers, and sizes and strides that are multiples of 16
            div16 = {"act_ptr", "w2_ptr", "topk_ids_ptr", "topk_weights_ptr", "y_ptr", "H", "I", "stride_at",
                     "stride_we", "stride_wr", "stride_yt"}
            attrs = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(kernel.arg_names) if a in div16}
            src = GluonASTSource(kernel, sig, const, attrs)
            c = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": cfg["num_warps"]})
            rep = ptxas_report(Compiled(kernel.__name__, dict(c.asm), c.metadata.shared, cfg["num_warps"], 1))
            assert rep["spill_stores"] == 0 and "griddepcontrol.wait" in c.asm["ptx"], (name, cfg, rep)
            print(f"{name} {cfg}: compiled for sm_90a, {rep['registers']} registers, "
                  f"{c.metadata.shared} bytes of shared memory, no spills")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=["qwen3-30b-a3b", "olmoe-1b-7b"])
    p.add_argument("--T", type=int, nargs="+", default=[1, 2])
    p.add_argument("--kinds", nargs="+", default=["tma", "cp.async"], choices=["tma", "cp.async"])
    p.add_argument("--check", action="store_true")
    args = p.parse_args()
    if args.check:
        return check()

    from warpdecode.bench import data
    from warpdecode.bench.experiment import cases, checked_us_or_none, down_runs, row

    rows = []
    for case in cases(args.presets, args.T):
        s, T = case.shape, case.T
        for label, step, _ in down_runs(case, down_tma, candidates(s.H, s.I, s.K, args.kinds)):
            res = checked_us_or_none(case, step, label, tol=1.5)
            if res is None:
                continue
            us, err, _ = res
            rows.append(row(case, variant=label, us=us, err=err))
            print(f"{s.name:14s} T={T} {label:60s} {us:8.2f} us {100 * case.floor_us / us:5.1f}% "
                  f"err/floor {err:.2f}", flush=True)
    data.merge_write(Path(f"results/{torch.cuda.get_device_name().replace(' ', '_')}/down_tma.csv"), rows)


if __name__ == "__main__":
    main()
