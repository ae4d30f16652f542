"""The expert path's two GEMM kernels (``warpdecode/kernels/expert.py``) in the form ``moe_expert``
runs them with native activations and weights (gather fused into gate/up's loads, scatter into
down's stores), with the knob the experiments vary and the package does not: ``MATH``.

    MATH=True   the shipped tiles: acc += a·w on the tensor cores each K step, then the epilogue
    MATH=False  the same grid, tiles, loads (masks, pipelining) and stores, but each K step only
                sums the bits of every loaded element, as signed integers, over the tile's K axis
                (two integer ops an element and a few shuffles, nothing on the tensor cores,
                registers for a row and a column of sums rather than a tile); the output tile is
                stored where and as the shipped kernel stores it, its bits cut to the dtype:

      S(v)[·]  = Σ_k bits(v[·, k])                           (int32, wrapping: in any order)
      gate/up  h[r, n]   = S(x)[t_r] + S(Wg[e] ⊕ Wu[e])[n]     (gate and up XORed first: one sum)
      down     o[p_r, n] = S(h)[r] + bits(w[p_r] rounded) + S(W2[e])[n]

Byte ledger: the shipped kernels' (``kernels/expert.py``), the same with ``MATH=False``; every
element loaded changes the output, so the compiler can drop no load, and :func:`expected_gate_up` /
:func:`expected_down` (PyTorch) check that each was read. The loop is a ``tl.range`` with the
launch's ``num_stages`` (a config's ``LOOP_STAGES`` where given), so its loads are cp.async into
shared memory, software-pipelined as the shipped loop's are: the same K steps in flight (the
pipeliner otherwise pipelines only loads that feed a ``tl.dot``). Without an asynchronous MMA
holding a buffer, a wgmma tile's loop takes one buffer less of shared memory.

``gate_up`` and ``down`` below are ``warpdecode.expert.gate_up`` / ``down`` for this copy.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from warpdecode import _alloc
from warpdecode import expert as ex
from warpdecode.kernels.expert import _mma, _upper_half_empty


@triton.jit
def _bits(v):
    """v's bits as integers of its width (e4m3 → int8, bf16 → int16, fp32 → int32)."""
    if v.dtype.primitive_bitwidth == 8:
        return v.to(tl.int8, bitcast=True)
    elif v.dtype.primitive_bitwidth == 16:
        return v.to(tl.int16, bitcast=True)
    else:
        return v.to(tl.int32, bitcast=True)


@triton.jit
def _from_bits(v, dtype: tl.constexpr):
    """int32 ``v`` cut to ``dtype``'s width and read as ``dtype``."""
    if dtype.primitive_bitwidth == 16:
        return v.to(tl.int16).to(dtype, bitcast=True)
    else:
        return v.to(dtype, bitcast=True)


@triton.jit
def _sum_k(bits, axis: tl.constexpr):
    """Σ over a tile's K axis of its bits as signed integers, in int32 (wrapping: any order gives the same)."""
    return tl.sum(bits.to(tl.int32), axis=axis)


@triton.jit
def _gate_up_rows(
    a_ptr, w13_ptr, out_ptr, sorted_token_ids_ptr, e, m0, pid_n, H, I, NUM_PAIRS, K,
    stride_ar, stride_we, stride_wr, stride_or,
    ROWS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DOT_FP32: tl.constexpr,
    PRECISION: tl.constexpr, SWAP_AB: tl.constexpr, MATH: tl.constexpr, NUM_STAGES: tl.constexpr,
):
    """The shipped ``_gate_up_rows`` with GATHER, native operands; MATH=False: the sums (the header)."""
    offs_m = (m0 + tl.arange(0, ROWS)).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < I
    offs_k = tl.arange(0, BLOCK_K)
    pair = tl.load(sorted_token_ids_ptr + offs_m)
    mask_m = pair < NUM_PAIRS
    rows = (tl.where(mask_m, pair, 0) // K).to(tl.int64)  # token rows: the gather in the loads
    a_ptrs = a_ptr + rows[:, None] * stride_ar + offs_k[None, :]
    if SWAP_AB:
        g_ptrs = w13_ptr + e * stride_we + offs_n[:, None].to(tl.int64) * stride_wr + offs_k[None, :]
        acc_g = tl.zeros([BLOCK_N, ROWS], dtype=tl.float32)
        acc_u = tl.zeros([BLOCK_N, ROWS], dtype=tl.float32)
    else:
        g_ptrs = w13_ptr + e * stride_we + offs_n[None, :].to(tl.int64) * stride_wr + offs_k[:, None]
        acc_g = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
        acc_u = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
    u_ptrs = g_ptrs + I * stride_wr
    k_axis: tl.constexpr = 1 if SWAP_AB else 0  # of the weight tiles
    sum_a = tl.zeros([ROWS], dtype=tl.int32)  # MATH=False: the sums, per row and per neuron
    sum_w = tl.zeros([BLOCK_N], dtype=tl.int32)
    dot_dtype = tl.float32 if DOT_FP32 else a_ptr.dtype.element_ty

    for k0 in tl.range(0, H, BLOCK_K, num_stages=NUM_STAGES):
        mask_k = (k0 + offs_k) < H
        a = tl.load(a_ptrs + k0, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        if SWAP_AB:
            wmask = mask_n[:, None] & mask_k[None, :]
        else:
            wmask = mask_k[:, None] & mask_n[None, :]
        wg = tl.load(g_ptrs + k0, mask=wmask, other=0.0)
        wu = tl.load(u_ptrs + k0, mask=wmask, other=0.0)
        if MATH:
            acc_g = _mma(a.to(dot_dtype), wg.to(dot_dtype), acc_g, PRECISION, SWAP_AB)
            acc_u = _mma(a.to(dot_dtype), wu.to(dot_dtype), acc_u, PRECISION, SWAP_AB)
        else:
            sum_a += _sum_k(_bits(a), 1)
            sum_w += _sum_k(_bits(wg) ^ _bits(wu), k_axis)

    mask = mask_m[:, None] & mask_n[None, :]
    out_ptrs = out_ptr + offs_m[:, None] * stride_or + offs_n[None, :]
    if MATH:
        if SWAP_AB:
            acc_g, acc_u = tl.trans(acc_g), tl.trans(acc_u)
        h = acc_g * tl.sigmoid(acc_g) * acc_u
        tl.store(out_ptrs, h.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        h = sum_a[:, None] + sum_w[None, :]
        tl.store(out_ptrs, _from_bits(h, out_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["EM", "NUM_PAIRS", "K"])
def gate_up_kernel(
    a_ptr,  # (T, H) token rows, gathered by the loads
    w13_ptr,  # (E, 2I, H)
    out_ptr,  # (EM, I): silu(gate)·up, or (MATH=False) the sums; padding rows are not written
    sorted_token_ids_ptr,  # (EM,) int32
    expert_ids_ptr,  # (EM // BLOCK_M,) int32
    num_tokens_post_padded_ptr,  # (1,) int32
    EM, H, I, NUM_PAIRS, K,
    stride_ar, stride_we, stride_wr, stride_or,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    DOT_FP32: tl.constexpr, PRECISION: tl.constexpr, HALF_M: tl.constexpr, USE_PDL: tl.constexpr,
    SWAP_AB: tl.constexpr, NUM_STAGES: tl.constexpr,
    MATH: tl.constexpr,  # True: the shipped tile; False: the loads and stores only
):
    if USE_PDL:
        gdc_wait()
        gdc_launch_dependents()
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(EM, BLOCK_M)
    num_pid_n = tl.cdiv(I, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    if pid_m * BLOCK_M >= tl.load(num_tokens_post_padded_ptr):
        return
    e = tl.load(expert_ids_ptr + pid_m).to(tl.int64)
    m0 = pid_m * BLOCK_M
    args = (a_ptr, w13_ptr, out_ptr, sorted_token_ids_ptr, e, m0, pid_n, H, I, NUM_PAIRS, K,
            stride_ar, stride_we, stride_wr, stride_or)
    if _upper_half_empty(sorted_token_ids_ptr, m0, NUM_PAIRS, BLOCK_M, HALF_M):
        _gate_up_rows(*args, BLOCK_M // 2, BLOCK_N, BLOCK_K, DOT_FP32, PRECISION, SWAP_AB, MATH, NUM_STAGES)
    else:
        _gate_up_rows(*args, BLOCK_M, BLOCK_N, BLOCK_K, DOT_FP32, PRECISION, SWAP_AB, MATH, NUM_STAGES)


@triton.jit
def _down_rows(
    a_ptr, w2_ptr, out_ptr, sorted_token_ids_ptr, topk_weights_ptr, e, m0, pid_n, H, I, NUM_PAIRS,
    stride_ar, stride_we, stride_wr, stride_or,
    ROWS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DOT_FP32: tl.constexpr,
    PRECISION: tl.constexpr, SWAP_AB: tl.constexpr, MATH: tl.constexpr, NUM_STAGES: tl.constexpr,
):
    """The shipped ``_down_rows`` with SCATTER, native operands; MATH=False: the sums (the header)."""
    offs_m = (m0 + tl.arange(0, ROWS)).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < H
    offs_k = tl.arange(0, BLOCK_K)
    pair = tl.load(sorted_token_ids_ptr + offs_m)
    valid = pair < NUM_PAIRS
    a_ptrs = a_ptr + offs_m[:, None] * stride_ar + offs_k[None, :]
    if SWAP_AB:
        w_ptrs = w2_ptr + e * stride_we + offs_n[:, None].to(tl.int64) * stride_wr + offs_k[None, :]
        acc = tl.zeros([BLOCK_N, ROWS], dtype=tl.float32)
    else:
        w_ptrs = w2_ptr + e * stride_we + offs_n[None, :].to(tl.int64) * stride_wr + offs_k[:, None]
        acc = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
    k_axis: tl.constexpr = 1 if SWAP_AB else 0
    sum_a = tl.zeros([ROWS], dtype=tl.int32)
    sum_w = tl.zeros([BLOCK_N], dtype=tl.int32)
    dot_dtype = tl.float32 if DOT_FP32 else a_ptr.dtype.element_ty

    for k0 in tl.range(0, I, BLOCK_K, num_stages=NUM_STAGES):
        mask_k = (k0 + offs_k) < I
        a = tl.load(a_ptrs + k0, mask=valid[:, None] & mask_k[None, :], other=0.0)
        if SWAP_AB:
            w = tl.load(w_ptrs + k0, mask=mask_n[:, None] & mask_k[None, :], other=0.0)
        else:
            w = tl.load(w_ptrs + k0, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
        if MATH:
            acc = _mma(a.to(dot_dtype), w.to(dot_dtype), acc, PRECISION, SWAP_AB)
        else:
            sum_a += _sum_k(_bits(a), 1)
            sum_w += _sum_k(_bits(w), k_axis)

    rw = tl.load(topk_weights_ptr + tl.where(valid, pair, 0), mask=valid, other=0.0)
    out_ptrs = out_ptr + tl.where(valid, pair, 0).to(tl.int64)[:, None] * stride_or + offs_n[None, :]
    mask = valid[:, None] & mask_n[None, :]
    if MATH:
        if SWAP_AB:
            acc = tl.trans(acc)
        acc = acc * rw[:, None]
        tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        row = sum_a + _bits(rw.to(out_ptr.dtype.element_ty)).to(tl.int32)
        o = row[:, None] + sum_w[None, :]
        tl.store(out_ptrs, _from_bits(o, out_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["EM", "NUM_PAIRS"])
def down_kernel(
    a_ptr,  # (EM, I) the intermediate, expert-major
    w2_ptr,  # (E, H, I)
    out_ptr,  # (T*K, H) in pair order: routing weight × expert output, or (MATH=False) the sums
    sorted_token_ids_ptr,  # (EM,) int32
    expert_ids_ptr,  # (EM // BLOCK_M,) int32
    num_tokens_post_padded_ptr,  # (1,) int32
    topk_weights_ptr,  # (T*K,) fp32
    EM, H, I, NUM_PAIRS,
    stride_ar, stride_we, stride_wr, stride_or,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    DOT_FP32: tl.constexpr, PRECISION: tl.constexpr, HALF_M: tl.constexpr, USE_PDL: tl.constexpr,
    SWAP_AB: tl.constexpr, NUM_STAGES: tl.constexpr,
    MATH: tl.constexpr,  # True: the shipped tile; False: the loads and stores only
):
    if USE_PDL:
        gdc_wait()
        gdc_launch_dependents()
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(EM, BLOCK_M)
    num_pid_n = tl.cdiv(H, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    if pid_m * BLOCK_M >= tl.load(num_tokens_post_padded_ptr):
        return
    e = tl.load(expert_ids_ptr + pid_m).to(tl.int64)
    m0 = pid_m * BLOCK_M
    args = (a_ptr, w2_ptr, out_ptr, sorted_token_ids_ptr, topk_weights_ptr, e, m0, pid_n, H, I, NUM_PAIRS,
            stride_ar, stride_we, stride_wr, stride_or)
    if _upper_half_empty(sorted_token_ids_ptr, m0, NUM_PAIRS, BLOCK_M, HALF_M):
        _down_rows(*args, BLOCK_M // 2, BLOCK_N, BLOCK_K, DOT_FP32, PRECISION, SWAP_AB, MATH, NUM_STAGES)
    else:
        _down_rows(*args, BLOCK_M, BLOCK_N, BLOCK_K, DOT_FP32, PRECISION, SWAP_AB, MATH, NUM_STAGES)


def _meta(cfg: dict, block_m: int, dtype, math: bool) -> dict:
    """The shipped launcher's meta-parameters (``expert._gemm_meta``), native operands, ``MATH``; the
    loop's stages are the launch's, or ``cfg["LOOP_STAGES"]`` where given."""
    meta = ex._gemm_meta(cfg, block_m, None, dtype)
    meta.pop("A_FP8")
    return dict(meta, NUM_STAGES=cfg.get("LOOP_STAGES", meta["num_stages"]), MATH=math)


def gate_up(x: torch.Tensor, w13: torch.Tensor, al: ex.Alignment, cfg: dict, K: int, *, math: bool = False,
            pdl: bool = False) -> torch.Tensor:
    """``expert.gate_up(x, None, w13, al, cfg, gather_k=K, pdl=pdl)`` with this copy's kernel; ``w13`` may be
    e4m3 (FP8 weights' bytes, their scales not read), the output in the activations' dtype."""
    E, two_i, H = w13.shape
    I = two_i // 2  # noqa: E741
    out = _alloc.empty(al.EM, I, dtype=x.dtype, device=w13.device)
    grid = (triton.cdiv(al.EM, al.block_m) * triton.cdiv(I, cfg["BLOCK_N"]),)
    gate_up_kernel[grid](
        x, w13, out, al.sorted_token_ids, al.expert_ids, al.num_tokens_post_padded,
        al.EM, H, I, al.num_pairs, K, x.stride(0), w13.stride(0), w13.stride(1), out.stride(0),
        **_meta(cfg, al.block_m, w13.dtype, math), **ex._pdl(pdl),
    )
    return out


def down(h: torch.Tensor, w2: torch.Tensor, al: ex.Alignment, topk_weights: torch.Tensor, cfg: dict, *,
         math: bool = False, pdl: bool = False) -> torch.Tensor:
    """``expert.down(h, None, w2, al, topk_weights, cfg, scatter=True, pdl=pdl)`` with this copy's kernel; ``w2``
    may be e4m3, the output in the intermediate's dtype."""
    E, H, I = w2.shape
    out = _alloc.empty(al.num_pairs, H, dtype=h.dtype, device=w2.device)
    grid = (triton.cdiv(al.EM, al.block_m) * triton.cdiv(H, cfg["BLOCK_N"]),)
    down_kernel[grid](
        h, w2, out, al.sorted_token_ids, al.expert_ids, al.num_tokens_post_padded, topk_weights,
        al.EM, H, I, al.num_pairs, h.stride(0), w2.stride(0), w2.stride(1), out.stride(0),
        **_meta(cfg, al.block_m, w2.dtype, math), **ex._pdl(pdl),
    )
    return out


def moe(x, w13, w2, topk_weights, topk_ids, *, config: dict, math: bool = False, pdl: bool = False):
    """``expert.moe_expert``'s four launches (align, gate/up, down, combine) with this copy's GEMMs."""
    K = topk_ids.shape[1]
    al = ex.align(topk_ids, w13.shape[0], config["BLOCK_M"], pdl=pdl)
    h = gate_up(x, w13, al, config["gate_up"], K, math=math, pdl=pdl)
    o = down(h, w2, al, topk_weights, config["down"], math=math, pdl=pdl)
    return ex.combine(o, topk_ids, topk_weights, w13.shape[0], pdl=pdl)


def _fp8_rows_stages(x, f13, f2, topk_weights, topk_ids, config: dict):
    """:func:`moe_fp8_rows` up to its combine: (alignment, gate/up's fp16 rows, its output, down's fp16 rows, its
    output)."""
    al = ex.align(topk_ids, f13.shape[0], config["BLOCK_M"])
    a, _ = ex.quantize(x, None, "f16")
    h = gate_up(a, f13.weight, al, config["gate_up"], topk_ids.shape[1])
    h16, _ = ex.quantize(h, al, "f16")
    return al, a, h, h16, down(h16, f2.weight, al, topk_weights, config["down"])


def moe_fp8_rows(x, f13, f2, topk_weights, topk_ids, *, config: dict):
    """The bound of ``moe_expert``'s six launches on FP8 weights with fp16 rows (align, the rows, gate/up, the
    rows, down, combine): the same launches, this copy's GEMMs with no math on the e4m3 bytes, every load but
    the scales' (the rows' and the weights', one FP32 per row or weight row per K step). Not a layer's output:
    MATH=True here would leave the scales out."""
    o = _fp8_rows_stages(x, f13, f2, topk_weights, topk_ids, config)[-1]
    return ex.combine(o, topk_ids, topk_weights, f13.shape[0])


def check_fp8_rows(x, f13, f2, topk_weights, topk_ids, config: dict):
    """:func:`moe_fp8_rows`'s no-math GEMMs store what PyTorch says they must (every e4m3 weight and fp16 row they
    load summed in), bit for bit, so every load ran."""
    al, a, h, h16, o = _fp8_rows_stages(x, f13, f2, topk_weights, topk_ids, config)
    rows, want = expected_gate_up(a, f13.weight, al, topk_ids.shape[1])
    assert torch.equal(int_view(h[rows]), int_view(want)), ("gate/up", config)
    pairs, want = expected_down(h16, f2.weight, al, topk_weights)
    assert pairs.numel() == topk_ids.numel() and torch.equal(int_view(o[pairs]), int_view(want)), ("down", config)


# ---------------------------------------------------------------------------------------------
# what MATH=False must store, in PyTorch: every element of every tile it loads, summed in


def int_view(t: torch.Tensor) -> torch.Tensor:
    return t.view({1: torch.int8, 2: torch.int16, 4: torch.int32}[t.element_size()])


def sum_bits(t: torch.Tensor) -> torch.Tensor:
    """S above: Σ over the last dimension of ``t``'s bits as signed integers (int64)."""
    return int_view(t).long().sum(-1)


def _cut(v: torch.Tensor, dtype) -> torch.Tensor:
    """int64 ``v`` cut to ``dtype``'s width (as the kernel's int32 → int16 cast) and read as ``dtype``."""
    width = 8 * torch.tensor([], dtype=dtype).element_size()
    v = v & ((1 << width) - 1)
    v = v - ((v >> (width - 1)) << width)
    return v.to({16: torch.int16, 32: torch.int32}[width]).view(dtype)


def _rows(al: ex.Alignment):
    """(rows of sorted_token_ids holding a pair, their pairs, their experts)."""
    used = int(al.num_tokens_post_padded.item())
    pair = al.sorted_token_ids[:used].long()
    rows = torch.nonzero(pair < al.num_pairs).flatten()
    experts = al.expert_ids[:used // al.block_m].long().repeat_interleave(al.block_m)[rows]
    return rows, pair[rows], experts


def expected_gate_up(x, w13, al: ex.Alignment, K: int):
    """(rows, their (·, I) values) that the MATH=False gate/up kernel stores."""
    I = w13.shape[1] // 2  # noqa: E741
    rows, pair, experts = _rows(al)
    used = torch.unique(experts)
    col = torch.zeros(w13.shape[0], I, dtype=torch.int64, device=w13.device)
    for e in used.tolist():  # one expert at a time: an int64 copy of its rows, not of the layer's
        w = int_view(w13[e])
        col[e] = (w[:I] ^ w[I:]).long().sum(-1)
    return rows, _cut(sum_bits(x)[pair // K][:, None] + col[experts], x.dtype)


def expected_down(h, w2, al: ex.Alignment, topk_weights):
    """(pairs, their (·, H) values) that the MATH=False down kernel stores."""
    rows, pair, experts = _rows(al)
    col = torch.zeros(w2.shape[:2], dtype=torch.int64, device=w2.device)
    for e in torch.unique(experts).tolist():
        col[e] = sum_bits(w2[e])
    rw = int_view(topk_weights.flatten()[pair].to(h.dtype)).long()
    return pair, _cut((sum_bits(h[rows]) + rw)[:, None] + col[experts], h.dtype)


# ---------------------------------------------------------------------------------------------
# parallel compilation, as warpdecode.tuner.precompile does it for the shipped kernels


def _new_binary(kernel, before: set):
    """The binary of ``kernel`` this process compiled since its cache held the keys ``before``."""
    cache = kernel.device_caches[torch.cuda.current_device()][0]
    new = [k for key, k in cache.items() if key not in before]
    return new[0] if len(new) == 1 else None


def warm(job) -> dict | str:
    """Launch one GEMM (``kind`` "gate_up" or "down"; ``math`` None for the shipped kernel, else
    this copy with MATH=math) on a tiny problem with the specialization of a real launch (sizes
    divisible by 16), which puts its binary in Triton's disk cache. Returns its registers, spilled
    bytes, shared memory and programs per SM on this GPU, or why it failed."""
    from bench.persistent import _programs_per_sm
    from warpdecode.kernels import expert as kx

    kind, math, K, block_m, cfg, pdl = job
    torch.cuda.set_device(0)
    H = I = 272  # noqa: E741
    E, T = max(K, 4), 3
    x = torch.randn(T, H, device="cuda", dtype=torch.bfloat16)
    w13 = torch.randn(E, 2 * I, H, device="cuda", dtype=torch.bfloat16)
    w2 = torch.randn(E, H, I, device="cuda", dtype=torch.bfloat16)
    ids = torch.stack([torch.randperm(E, device="cuda")[:K] for _ in range(T)]).to(torch.int32)
    tw = torch.rand(T, K, device="cuda")
    h = torch.randn(ex.max_padded_rows(T * K, E, block_m), I, device="cuda", dtype=torch.bfloat16)
    kernel = {("gate_up", True): kx.grouped_gate_up_kernel, ("down", True): kx.grouped_down_kernel,
              ("gate_up", False): gate_up_kernel, ("down", False): down_kernel}[kind, math is None]
    before = set(kernel.device_caches[torch.cuda.current_device()][0])
    try:
        al = ex.align(ids, E, block_m, pdl=pdl)
        if kind == "gate_up":
            if math is None:
                ex.gate_up(x, None, w13, al, cfg, gather_k=K, pdl=pdl)
            else:
                gate_up(x, w13, al, cfg, K, math=math, pdl=pdl)
        elif math is None:
            ex.down(h, None, w2, al, tw, cfg, scatter=True, pdl=pdl)
        else:
            down(h, w2, al, tw, cfg, math=math, pdl=pdl)
        torch.cuda.synchronize()
    except Exception as e:
        return repr(e)[:300]
    b = _new_binary(kernel, before)
    if b is None:
        return {}
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {"registers": b.n_regs, "spills": b.n_spills, "shared": b.metadata.shared,
            "programs_per_sm": _programs_per_sm(b, cfg["num_warps"], props)}


def precompile(jobs: list) -> list:
    """:func:`warm` for every job, in a pool of processes."""
    import os
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    with ProcessPoolExecutor(min(16, os.cpu_count() or 1), mp_context=get_context("spawn")) as pool:
        return list(pool.map(warm, jobs))
