"""The expert-centric path's kernels, in the vocabulary of vLLM's ``fused_moe``.

    align    sorted_token_ids = the T·K pairs grouped by expert, each run padded to BLOCK_M; expert_ids per block
    gather   A[r]    = x[sorted_token_ids[r] // K]                           (inside gate/up's loads)
    quant    A[r]    = e4m3(A[r] / s_r), one power-of-two s_r per 1×128 block (optional)
    gate/up  ∥(m, n): h[r, n] = silu(A[r]·Wg[e_m, n]) · (A[r]·Wu[e_m, n]), r in block m, rounded
    down     ∥(m, n): o[r, n] = w[r] · (h[r]·W2[e_m, n]), rounded
    scatter  O[sorted_token_ids[r]] = o[r]                                   (inside down's stores)
    combine  y[t]    = Σ_j O[tK + j], one rounding per add

Byte ledger of one call (bf16, B = blocks of BLOCK_M rows in use, each naming one expert; EM rows):
  align    reads T·K·4 B per program;  writes EM·4 B + EM/BLOCK_M·4 B
  gate/up  reads B·2I·H·2 B of weight tiles (an expert's rows once per block of its rows; GROUP_M
           orders the blocks so a second read comes from L2), the rows' activations (H·2 B each);
           writes EM·I·2 B of h (padding rows are not written)
  down     reads B·H·I·2 B of weight tiles, EM·I·2 B of h;  writes T·K·H·2 B (scattered to pair order)
  combine  reads T·K·H·2 B;  writes T·H·2 B
  minimum  the U distinct routed experts' rows once, U·3·I·H·2 B; B = U while every expert's pairs fit
           in one block (decode). The intermediate and the per-pair outputs round-trip through HBM,
           which warp decode does not do (``warp_pair.py``).

FP8 weights (``W_FP8``, ``warpdecode.quant``): e4m3 tiles, half the bytes above, with block scales.
BLOCK_K divides the scale group (128 or 32), so each step is scaled once in FP32: acc += (A·Q) ⊙ s_a sᵀ
(vLLM's block-FP8 GEMM). Weight-only: Q widened to bf16 (exactly) against bf16 A; w8a8 (``A_FP8``):
A is e4m3 with per-row 1×128 scales s_a, both operands on the FP8 tensor cores as they are.

Weight tiles by TMA (``W_TMA``, vLLM's ``USE_TMA_B``; off by default, a tuner candidate): each K step's weight
tile is one TMA copy of a (1, BLOCK_N, BLOCK_K) box of a host-made TensorDescriptor (expert, row, column) into
shared memory, in place of BLOCK_N·BLOCK_K/16-byte pointer loads; the same bytes. The launcher allows it where the
boxes tile the matrix (rows per GEMM and K divisible by the box, 16-byte-aligned rows).

Index arrays (all int32, on the device)
---------------------------------------
topk_ids            (T, K)       expert of each (token, slot) pair; pair p = t*K + j
sorted_token_ids    (EM,)        pair indices grouped by expert, each expert's run padded to a
                                 multiple of BLOCK_M with the sentinel T*K ("no pair")
expert_ids          (EM/BLOCK_M,) expert of each BLOCK_M-row block of sorted_token_ids; -1 for
                                 blocks past num_tokens_post_padded
num_tokens_post_padded (1,)      rows of sorted_token_ids in use; the rest is never read

EM = T*K + E*(BLOCK_M − 1) (vLLM's bound; T*K*BLOCK_M when T*K < E), known without a sync: grids
are sized for it, and programs past num_tokens_post_padded return at once.

Each stage is its own kernel, so each can be timed: moe_align_kernel, quant_fp8_kernel,
grouped_gate_up_kernel, grouped_down_kernel, combine_kernel. Gather and scatter are fused into the
GEMMs as vLLM fuses them; ``bench/unfused.py`` runs them as kernels of their own (GATHER and SCATTER
off), the stage-by-stage form notebook 2 shows.
"""

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from .ids import clamped, dropped
from .warp_fp8 import _scales  # one step's weight scales as FP32 factors, as warp decode's FP8 pair reads them


@triton.jit(do_not_specialize=["NUM_PAIRS", "EM", "BLOCKS_PER_PROG"])
def moe_align_kernel(
    topk_ids_ptr,  # (T*K,) int32 or int64; a pair whose id lies outside [0, E) is placed nowhere
    sorted_token_ids_ptr,  # (EM,) int32 out
    expert_ids_ptr,  # (EM // BLOCK_M,) int32 out
    num_tokens_post_padded_ptr,  # (1,) int32 out
    NUM_PAIRS, EM, E,  # NUM_PAIRS = T*K
    BLOCKS_PER_PROG,  # blocks of BLOCK_M rows this program labels and pads
    BLOCK_M: tl.constexpr,
    SCAN: tl.constexpr,  # pairs counted per step, power of two
    BLOCK_E: tl.constexpr,  # ≥ E, power of two
    BLOCK_C: tl.constexpr,  # pairs this program places
    CHUNK: tl.constexpr,  # blocks labelled per step
    USE_PDL: tl.constexpr = False,  # let the gate/up GEMM launch now (it waits for this kernel)
):
    """One program per BLOCK_C pairs; no atomics, no barrier, no scratch.

    Every program counts all the pairs per expert (histogram → padded prefix sum: each expert's
    first row), and, in the same pass, the pairs of the programs before it. It places its own
    pairs at first row + pairs of that expert before it, in pair order (inside its chunk, from a
    BLOCK_C × BLOCK_C comparison), and labels and pads its share of the blocks, writing the
    sentinel only on rows no pair lands on, so no two programs ever write the same row (vLLM's
    atomic cursors leave the order inside a run free; docs/design.md). Every program counts all
    the pairs, so the work grows as pairs² / BLOCK_C: the launcher widens BLOCK_C past 2048 pairs."""
    if USE_PDL:
        gdc_launch_dependents()
    pid = tl.program_id(0)
    first = pid * BLOCK_C
    counts = tl.zeros([BLOCK_E], dtype=tl.int32)  # pairs per expert
    earlier = tl.zeros([BLOCK_E], dtype=tl.int32)  # ... among pairs [0, first)
    for p0 in range(0, NUM_PAIRS, SCAN):
        offs_p = p0 + tl.arange(0, SCAN)
        ids, ok = clamped(tl.load(topk_ids_ptr + offs_p, mask=offs_p < NUM_PAIRS, other=0), E)
        ids = ids.to(tl.int32)
        counts += tl.histogram(ids, BLOCK_E, mask=(offs_p < NUM_PAIRS) & ok)
        earlier += tl.histogram(ids, BLOCK_E, mask=(offs_p < first) & ok)
    padded = tl.cdiv(counts, BLOCK_M) * BLOCK_M  # rows per expert after padding
    ends = tl.cumsum(padded, axis=0)
    starts = ends - padded
    total = tl.sum(padded, axis=0)
    if pid == 0:
        tl.store(num_tokens_post_padded_ptr, total)

    offs_j = tl.arange(0, BLOCK_C)
    pair = first + offs_j
    e_c, ok_c = clamped(tl.load(topk_ids_ptr + pair, mask=pair < NUM_PAIRS, other=0), E)
    e_c = e_c.to(tl.int32)
    mask_c = (pair < NUM_PAIRS) & ok_c
    same = (e_c[:, None] == e_c[None, :]) & (offs_j[None, :] < offs_j[:, None]) & mask_c[None, :]
    rank = tl.sum(same.to(tl.int32), axis=1)  # pairs of the same expert before it in this chunk
    tl.store(sorted_token_ids_ptr + tl.gather(starts + earlier, e_c, 0) + rank, pair, mask=mask_c)

    offs_e = tl.arange(0, BLOCK_E)
    offs_m = tl.arange(0, BLOCK_M)
    b_end = tl.minimum((pid + 1) * BLOCKS_PER_PROG, EM // BLOCK_M)
    for b0 in range(0, BLOCKS_PER_PROG, CHUNK):  # block b belongs to the expert whose rows cover b*BLOCK_M
        offs_b = pid * BLOCKS_PER_PROG + b0 + tl.arange(0, CHUNK)
        mask_b = offs_b < b_end
        row = offs_b * BLOCK_M
        expert = tl.sum(((ends[None, :] <= row[:, None]) & (offs_e[None, :] < E)).to(tl.int32), axis=1)
        used = row < total
        tl.store(expert_ids_ptr + offs_b, tl.where(used, expert, -1), mask=mask_b)
        # rows of the block that hold pairs: the rest is padding, "no pair"
        filled = tl.where(used, tl.gather(starts + counts, tl.where(used, expert, 0), 0) - row, 0)
        pad = (offs_m[None, :] >= filled[:, None]) & mask_b[:, None]
        tl.store(sorted_token_ids_ptr + row[:, None] + offs_m[None, :],
                 tl.full([CHUNK, BLOCK_M], 0, tl.int32) + NUM_PAIRS, mask=pad)


@triton.jit
def quant_fp8_kernel(
    a_ptr,  # (EM, N) compute dtype
    q_ptr,  # (EM, N) float8_e4m3fn out
    scale_ptr,  # (EM, cdiv(N, GROUP)) fp32 out: power-of-two scales
    num_tokens_post_padded_ptr,  # (1,) int32, read only when GUARD_ROWS
    N, stride_ar, stride_qr, stride_sr,
    GROUP: tl.constexpr,  # 128: one scale per 1×128 block, as DeepSeek-V3 and vLLM's block FP8
    GUARD_ROWS: tl.constexpr,  # an expert-major buffer: rows past num_tokens_post_padded are skipped
    QMAX: tl.constexpr = 448.0,  # the largest |q|: e4m3's (an fp16 q_ptr takes 2^15, every bf16 value exact)
):
    """q = a / s rounded to q's dtype, s = 2^ceil(log2(amax/QMAX)). Power-of-two scales make q·s exact in bf16."""
    r = tl.program_id(0)
    g = tl.program_id(1)
    if GUARD_ROWS:
        if r >= tl.load(num_tokens_post_padded_ptr):
            return
    offs = g * GROUP + tl.arange(0, GROUP)
    mask = offs < N
    a = tl.load(a_ptr + r.to(tl.int64) * stride_ar + offs, mask=mask, other=0.0).to(tl.float32)
    amax = tl.max(tl.abs(a), axis=0)
    amax = tl.where(amax != amax, amax, tl.maximum(amax, 1e-30))  # keep NaN loud
    s = tl.exp2(tl.ceil(tl.log2(amax / QMAX)))
    q = tl.clamp(a / s, -QMAX, QMAX)
    q = tl.where(a != a, a, q)
    tl.store(q_ptr + r.to(tl.int64) * stride_qr + offs, q.to(q_ptr.dtype.element_ty), mask=mask)
    tl.store(scale_ptr + r.to(tl.int64) * stride_sr + g, s)


@triton.jit
def _mma(a, w, acc, PRECISION: tl.constexpr, SWAP_AB: tl.constexpr):
    """acc + a·w (a [rows, BLOCK_K], w [BLOCK_K, BLOCK_N]), or transposed, acc + w·aᵀ (w [BLOCK_N, BLOCK_K])."""
    if SWAP_AB:
        return tl.dot(w, tl.trans(a), acc, input_precision=PRECISION)
    else:
        return tl.dot(a, w, acc, input_precision=PRECISION)


@triton.jit
def _scaled_mma(a, w, acc, a_s, w_s, PRECISION: tl.constexpr, SWAP_AB: tl.constexpr):
    """acc + (a·w) ⊙ a_s w_sᵀ: one K step of a block-scaled GEMM, its product scaled in FP32 (a_s per
    row [rows], w_s per weight row [BLOCK_N]); transposed with SWAP_AB."""
    if SWAP_AB:
        return acc + tl.dot(w, tl.trans(a), input_precision=PRECISION) * w_s[:, None] * a_s[None, :]
    else:
        return acc + tl.dot(a, w, input_precision=PRECISION) * a_s[:, None] * w_s[None, :]


@triton.jit
def _grouped_order(pid, EM, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of program ``pid`` over EM rows × N columns: grouped ordering, as in Triton's matmul
    tutorial, GROUP_M blocks of rows side by side so that a weight tile's second read comes from L2."""
    num_pid_m = tl.cdiv(EM, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    return first_pid_m + ((pid % num_pid_in_group) % group_size_m), (pid % num_pid_in_group) // group_size_m


@triton.jit
def _upper_half_empty(sorted_token_ids_ptr, m0, NUM_PAIRS, BLOCK_M: tl.constexpr, HALF_M: tl.constexpr):
    """Whether rows m0 + BLOCK_M/2 … m0 + BLOCK_M − 1 of a block are all padding. An expert's pairs
    fill the front of its run and the sentinel the rest, so the first row of the upper half decides.
    Without HALF_M: False, a constant, and the kernel compiles the full-height tile only."""
    if HALF_M:
        return tl.load(sorted_token_ids_ptr + m0 + BLOCK_M // 2) >= NUM_PAIRS
    else:
        return False


@triton.jit
def _weight_tile(ptrs, desc, e, n0, k0, mask, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SWAP_AB: tl.constexpr,
                 W_TMA: tl.constexpr):
    """One K step's weight tile, (BLOCK_K, BLOCK_N), or (BLOCK_N, BLOCK_K) with SWAP_AB: ``W_TMA``, one TMA copy of
    the (1, BLOCK_N, BLOCK_K) box at expert e, row n0, column k0 of ``desc`` (vLLM's ``USE_TMA_B``; the launcher
    checks the boxes tile the matrix), else the masked pointer load."""
    if W_TMA:
        w = desc.load([e.to(tl.int32), n0, k0]).reshape([BLOCK_N, BLOCK_K])
        if not SWAP_AB:
            w = tl.trans(w)
        return w
    else:
        return tl.load(ptrs + k0, mask=mask, other=0.0)


@triton.jit
def _gate_up_rows(
    a_ptr, a_scale_ptr, w13_ptr, w_desc, w_scale_ptr, out_ptr, sorted_token_ids_ptr,
    e,  # the block's expert (int64)
    m0,  # its first row of sorted_token_ids
    pid_n,  # its block of BLOCK_N neurons
    H, I, NUM_PAIRS, K, S_UP, stride_ar, stride_sr, stride_we, stride_wr, stride_wse, stride_wsr, stride_wsc,
    stride_or,
    ROWS: tl.constexpr,  # rows m0 … m0 + ROWS − 1: BLOCK_M, or BLOCK_M / 2 (HALF_M)
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, A_FP8: tl.constexpr, DOT_FP32: tl.constexpr,
    PRECISION: tl.constexpr, GATHER: tl.constexpr, SWAP_AB: tl.constexpr,
    W_FP8: tl.constexpr, W_GROUP_N: tl.constexpr, W_GROUP_K: tl.constexpr, W_E8M0: tl.constexpr,
    W_TMA: tl.constexpr,
):
    """The gate/up GEMM's tile of ROWS rows × BLOCK_N neurons: K-loop, then SiLU·up and the store.
    SWAP_AB computes the tile transposed: the weight rows on the tensor cores' M axis, the block's
    rows on N (see :func:`_down_rows`)."""
    offs_m = (m0 + tl.arange(0, ROWS)).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < I
    offs_k = tl.arange(0, BLOCK_K)
    # padding rows (the sentinel) are neither read nor stored, as vLLM's token_mask does: at large T
    # they are up to half of the rows (BLOCK_M = 128 for Mixtral's 64 pairs per expert)
    pair = tl.load(sorted_token_ids_ptr + offs_m)
    mask_m = pair < NUM_PAIRS
    rows = offs_m  # the gathered buffer: row r
    if GATHER:  # token rows
        rows = (tl.where(mask_m, pair, 0) // K).to(tl.int64)
    a_ptrs = a_ptr + rows[:, None] * stride_ar + offs_k[None, :]
    a_scale_ptrs = a_scale_ptr + rows * stride_sr
    # w13[e, n, k] read as a (BLOCK_K, BLOCK_N) tile: the dot computes a @ wᵀ (SWAP_AB: as a
    # (BLOCK_N, BLOCK_K) tile, the dot w @ aᵀ)
    if SWAP_AB:
        g_ptrs = w13_ptr + e * stride_we + offs_n[:, None].to(tl.int64) * stride_wr + offs_k[None, :]
        acc_g = tl.zeros([BLOCK_N, ROWS], dtype=tl.float32)
        acc_u = tl.zeros([BLOCK_N, ROWS], dtype=tl.float32)
    else:
        g_ptrs = w13_ptr + e * stride_we + offs_n[None, :].to(tl.int64) * stride_wr + offs_k[:, None]
        acc_g = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
        acc_u = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
    u_ptrs = g_ptrs + I * stride_wr
    # the operands' dtype on the tensor cores: with FP8 weights the activations' (e4m3 weights widen to
    # bf16 or scaled fp16 exactly; e4m3 rows: w8a8, both as they are), with 16-bit weights and FP8 rows the
    # weights' (the rows widen to it), else the activations'; the interpreter widens all to FP32
    dot_dtype = tl.float32 if DOT_FP32 else (a_ptr.dtype.element_ty if W_FP8 or not A_FP8 else w13_ptr.dtype.element_ty)
    gs_ptrs = w_scale_ptr + e * stride_wse + (offs_n // W_GROUP_N) * stride_wsr  # FP8 weights: [BLOCK_N]
    us_ptrs = gs_ptrs + S_UP * stride_wsr

    for k0 in range(0, H, BLOCK_K):
        mask_k = (k0 + offs_k) < H
        a = tl.load(a_ptrs + k0, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        a_s = tl.full([ROWS], 1.0, tl.float32)  # FP8 weights: the rows' scales, applied to the product
        if A_FP8:  # BLOCK_K divides 128: one power-of-two scale per row covers the tile
            if W_FP8:
                a_s = tl.load(a_scale_ptrs + k0 // 128, mask=mask_m, other=0.0)
            else:  # dequantized here, exact in bf16
                a = a.to(tl.float32) * tl.load(a_scale_ptrs + k0 // 128, mask=mask_m, other=0.0)[:, None]
        a = a.to(dot_dtype)
        if SWAP_AB:
            wmask = mask_n[:, None] & mask_k[None, :]
        else:
            wmask = mask_k[:, None] & mask_n[None, :]
        wg = _weight_tile(g_ptrs, w_desc, e, pid_n * BLOCK_N, k0, wmask, BLOCK_N, BLOCK_K, SWAP_AB, W_TMA).to(dot_dtype)
        wu = _weight_tile(u_ptrs, w_desc, e, I + pid_n * BLOCK_N, k0, wmask, BLOCK_N, BLOCK_K, SWAP_AB,
                          W_TMA).to(dot_dtype)
        if W_FP8:  # BLOCK_K divides W_GROUP_K: one scale per weight row covers the tile
            sg = _scales(gs_ptrs + (k0 // W_GROUP_K) * stride_wsc, mask_n, W_E8M0)
            su = _scales(us_ptrs + (k0 // W_GROUP_K) * stride_wsc, mask_n, W_E8M0)
            acc_g = _scaled_mma(a, wg, acc_g, a_s, sg, PRECISION, SWAP_AB)
            acc_u = _scaled_mma(a, wu, acc_u, a_s, su, PRECISION, SWAP_AB)
        else:
            acc_g = _mma(a, wg, acc_g, PRECISION, SWAP_AB)
            acc_u = _mma(a, wu, acc_u, PRECISION, SWAP_AB)

    if SWAP_AB:  # back to (rows, neurons) for the epilogue
        acc_g, acc_u = tl.trans(acc_g), tl.trans(acc_u)
    h = acc_g * tl.sigmoid(acc_g) * acc_u
    tl.store(out_ptr + offs_m[:, None] * stride_or + offs_n[None, :], h.to(out_ptr.dtype.element_ty),
             mask=mask_m[:, None] & mask_n[None, :])


@triton.jit(do_not_specialize=["EM", "NUM_PAIRS", "K"])
def grouped_gate_up_kernel(
    # pointers
    a_ptr,  # (EM, H) expert-major activations, or (T, H) token rows when GATHER; compute dtype or fp8
    a_scale_ptr,  # (rows of a, cdiv(H, 128)) fp32, read only when A_FP8
    w13_ptr,  # (E, 2I, H) compute dtype, or float8_e4m3fn when W_FP8
    w_scale_ptr,  # W_FP8 only: block128 (E, 2·cdiv(I, 128), cdiv(H, 128)) fp32; mxfp8 (E, 2I, cdiv(H, 32)) e8m0
    out_ptr,  # (EM, I) compute dtype: silu(gate)·up, rounded; padding rows are not written
    sorted_token_ids_ptr,  # (EM,) int32
    expert_ids_ptr,  # (EM // BLOCK_M,) int32
    num_tokens_post_padded_ptr,  # (1,) int32
    # sizes: NUM_PAIRS = T*K, the padding sentinel of sorted_token_ids; pair p is token p // K's (K read
    # only when GATHER); S_UP (W_FP8): the scale row of the first up row (gate and up blocked separately)
    EM, H, I, NUM_PAIRS, K, S_UP,
    # strides (elements)
    stride_ar, stride_sr, stride_we, stride_wr, stride_wse, stride_wsr, stride_wsc, stride_or,
    # meta
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    A_FP8: tl.constexpr,
    DOT_FP32: tl.constexpr,  # the CPU interpreter's bf16 dot is wrong: widen there
    PRECISION: tl.constexpr,  # "ieee" for fp32 inputs (no tf32 shortcut); ignored for bf16/fp16
    GATHER: tl.constexpr,  # True: row r of the tile reads x[sorted_token_ids[r] // K], stage 3 fused
                           # into the loads as vLLM does; False: a is gathered already (bench/unfused.py)
    HALF_M: tl.constexpr = False,  # a block whose upper half is padding runs as a BLOCK_M/2-row tile
    USE_PDL: tl.constexpr = False,  # launched early: wait for align, then let the down GEMM launch
    SWAP_AB: tl.constexpr = False,  # the tile transposed on the tensor cores (_down_rows)
    W_FP8: tl.constexpr = False,  # e4m3 weights with block scales (the header)
    W_GROUP_N: tl.constexpr = 1,  # weight rows per scale: 128 (block128) or 1 (mxfp8)
    W_GROUP_K: tl.constexpr = 128,  # columns per scale: 128 (block128) or 32 (mxfp8); BLOCK_K divides it
    W_E8M0: tl.constexpr = False,  # the weight scales are e8m0 bits (mxfp8)
    W_TMA: tl.constexpr = False,  # weight tiles by TMA from w_desc (_weight_tile)
    w_desc=None,  # W_TMA: a TensorDescriptor of w13, box (1, BLOCK_N, BLOCK_K)
):
    if USE_PDL:
        gdc_wait()  # align has finished and its index arrays are visible
        gdc_launch_dependents()
    pid_m, pid_n = _grouped_order(tl.program_id(0), EM, I, BLOCK_M, BLOCK_N, GROUP_M)

    if pid_m * BLOCK_M >= tl.load(num_tokens_post_padded_ptr):
        return
    e = tl.load(expert_ids_ptr + pid_m).to(tl.int64)
    m0 = pid_m * BLOCK_M
    args = (a_ptr, a_scale_ptr, w13_ptr, w_desc, w_scale_ptr, out_ptr, sorted_token_ids_ptr, e, m0, pid_n, H, I,
            NUM_PAIRS, K, S_UP, stride_ar, stride_sr, stride_we, stride_wr, stride_wse, stride_wsr, stride_wsc,
            stride_or)
    if _upper_half_empty(sorted_token_ids_ptr, m0, NUM_PAIRS, BLOCK_M, HALF_M):
        _gate_up_rows(*args, BLOCK_M // 2, BLOCK_N, BLOCK_K, A_FP8, DOT_FP32, PRECISION, GATHER, SWAP_AB,
                      W_FP8, W_GROUP_N, W_GROUP_K, W_E8M0, W_TMA)
    else:
        _gate_up_rows(*args, BLOCK_M, BLOCK_N, BLOCK_K, A_FP8, DOT_FP32, PRECISION, GATHER, SWAP_AB,
                      W_FP8, W_GROUP_N, W_GROUP_K, W_E8M0, W_TMA)


@triton.jit
def _down_rows(
    a_ptr, a_scale_ptr, w2_ptr, w_desc, w_scale_ptr, out_ptr, sorted_token_ids_ptr, topk_weights_ptr,
    e,  # the block's expert (int64)
    m0,  # its first row of sorted_token_ids
    pid_n,  # its block of BLOCK_N hidden outputs
    H, I, NUM_PAIRS, stride_ar, stride_sr, stride_we, stride_wr, stride_wse, stride_wsr, stride_wsc, stride_or,
    ROWS: tl.constexpr,  # rows m0 … m0 + ROWS − 1: BLOCK_M, or BLOCK_M / 2 (HALF_M)
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, A_FP8: tl.constexpr, DOT_FP32: tl.constexpr,
    PRECISION: tl.constexpr, SCATTER: tl.constexpr, SWAP_AB: tl.constexpr,
    W_FP8: tl.constexpr, W_GROUP_N: tl.constexpr, W_GROUP_K: tl.constexpr, W_E8M0: tl.constexpr,
    W_TMA: tl.constexpr,
):
    """The down GEMM's tile of ROWS rows × BLOCK_N hidden outputs: K-loop, routing weight, store.

    SWAP_AB (vLLM's name for it): the tile is computed transposed, w (BLOCK_N × BLOCK_K) @ aᵀ, so the
    weight rows take the tensor cores' M axis (64 per warp group on Hopper) and the block's rows
    their N axis (any multiple of 8). With few pairs per expert, rows the plain form pads up to 64
    are not multiplied, and the accumulator is BLOCK_N × ROWS."""
    offs_m = (m0 + tl.arange(0, ROWS)).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < H
    offs_k = tl.arange(0, BLOCK_K)
    pair = tl.load(sorted_token_ids_ptr + offs_m)
    valid = pair < NUM_PAIRS  # padding rows of the intermediate were never written: not read either
    a_ptrs = a_ptr + offs_m[:, None] * stride_ar + offs_k[None, :]
    a_scale_ptrs = a_scale_ptr + offs_m * stride_sr
    if SWAP_AB:
        w_ptrs = w2_ptr + e * stride_we + offs_n[:, None].to(tl.int64) * stride_wr + offs_k[None, :]
        acc = tl.zeros([BLOCK_N, ROWS], dtype=tl.float32)
    else:
        w_ptrs = w2_ptr + e * stride_we + offs_n[None, :].to(tl.int64) * stride_wr + offs_k[:, None]
        acc = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
    # as in _gate_up_rows: the activations' dtype, or with FP8 rows and 16-bit weights the weights'
    dot_dtype = tl.float32 if DOT_FP32 else (a_ptr.dtype.element_ty if W_FP8 or not A_FP8 else w2_ptr.dtype.element_ty)
    ws_ptrs = w_scale_ptr + e * stride_wse + (offs_n // W_GROUP_N) * stride_wsr  # FP8 weights: [BLOCK_N]

    for k0 in range(0, I, BLOCK_K):
        mask_k = (k0 + offs_k) < I
        a = tl.load(a_ptrs + k0, mask=valid[:, None] & mask_k[None, :], other=0.0)
        a_s = tl.full([ROWS], 1.0, tl.float32)  # FP8 weights: the rows' scales, applied to the product
        if A_FP8:  # BLOCK_K divides 128: one power-of-two scale per row covers the tile
            if W_FP8:
                a_s = tl.load(a_scale_ptrs + k0 // 128, mask=valid, other=0.0)
            else:  # dequantized here, exact in bf16
                a = a.to(tl.float32) * tl.load(a_scale_ptrs + k0 // 128, mask=valid, other=0.0)[:, None]
        a = a.to(dot_dtype)
        wmask = mask_n[:, None] & mask_k[None, :] if SWAP_AB else mask_k[:, None] & mask_n[None, :]
        w = _weight_tile(w_ptrs, w_desc, e, pid_n * BLOCK_N, k0, wmask, BLOCK_N, BLOCK_K, SWAP_AB, W_TMA).to(dot_dtype)
        if W_FP8:  # BLOCK_K divides W_GROUP_K: one scale per weight row covers the tile
            w_s = _scales(ws_ptrs + (k0 // W_GROUP_K) * stride_wsc, mask_n, W_E8M0)
            acc = _scaled_mma(a, w, acc, a_s, w_s, PRECISION, SWAP_AB)
        else:
            acc = _mma(a, w, acc, PRECISION, SWAP_AB)
    if SWAP_AB:  # back to (rows, hidden outputs) for the epilogue
        acc = tl.trans(acc)

    # the routing weight, applied in the epilogue as vLLM's MUL_ROUTED_WEIGHT does
    rw = tl.load(topk_weights_ptr + tl.where(valid, pair, 0), mask=valid, other=0.0)
    acc = acc * rw[:, None]
    out_rows = offs_m
    if SCATTER:
        out_rows = tl.where(valid, pair, 0).to(tl.int64)
    tl.store(out_ptr + out_rows[:, None] * stride_or + offs_n[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=valid[:, None] & mask_n[None, :])


@triton.jit(do_not_specialize=["EM", "NUM_PAIRS"])
def grouped_down_kernel(
    # pointers
    a_ptr,  # (EM, I) compute dtype or fp8: the intermediate, expert-major
    a_scale_ptr,  # (EM, cdiv(I, 128)) fp32, read only when A_FP8
    w2_ptr,  # (E, H, I) compute dtype, or float8_e4m3fn when W_FP8
    w_scale_ptr,  # W_FP8 only: block128 (E, cdiv(H, 128), cdiv(I, 128)) fp32; mxfp8 (E, H, cdiv(I, 32)) e8m0
    out_ptr,  # (EM, H), or (T*K, H) in token order when SCATTER; compute dtype: routing weight ×
              # expert output, rounded; padding rows are not written
    sorted_token_ids_ptr,  # (EM,) int32
    expert_ids_ptr,  # (EM // BLOCK_M,) int32
    num_tokens_post_padded_ptr,  # (1,) int32
    topk_weights_ptr,  # (T*K,) fp32
    # sizes and strides (elements)
    EM, H, I, NUM_PAIRS,
    stride_ar, stride_sr, stride_we, stride_wr, stride_wse, stride_wsr, stride_wsc, stride_or,
    # meta
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    A_FP8: tl.constexpr, DOT_FP32: tl.constexpr, PRECISION: tl.constexpr,
    SCATTER: tl.constexpr,  # store row r at row sorted_token_ids[r] (stage 7 fused into the stores,
                            # as vLLM does); False: expert-major rows (bench/unfused.py)
    HALF_M: tl.constexpr = False,  # a block whose upper half is padding runs as a BLOCK_M/2-row tile
    USE_PDL: tl.constexpr = False,  # launched early: wait for the gate/up GEMM, then let combine launch
    SWAP_AB: tl.constexpr = False,  # the tile transposed on the tensor cores (_down_rows)
    W_FP8: tl.constexpr = False,  # e4m3 weights with block scales (the header)
    W_GROUP_N: tl.constexpr = 1,  # weight rows per scale: 128 (block128) or 1 (mxfp8)
    W_GROUP_K: tl.constexpr = 128,  # columns per scale: 128 (block128) or 32 (mxfp8); BLOCK_K divides it
    W_E8M0: tl.constexpr = False,  # the weight scales are e8m0 bits (mxfp8)
    W_TMA: tl.constexpr = False,  # weight tiles by TMA from w_desc (_weight_tile)
    w_desc=None,  # W_TMA: a TensorDescriptor of w2, box (1, BLOCK_N, BLOCK_K)
):
    if USE_PDL:
        gdc_wait()
        gdc_launch_dependents()
    pid_m, pid_n = _grouped_order(tl.program_id(0), EM, H, BLOCK_M, BLOCK_N, GROUP_M)

    if pid_m * BLOCK_M >= tl.load(num_tokens_post_padded_ptr):
        return
    e = tl.load(expert_ids_ptr + pid_m).to(tl.int64)
    m0 = pid_m * BLOCK_M
    args = (a_ptr, a_scale_ptr, w2_ptr, w_desc, w_scale_ptr, out_ptr, sorted_token_ids_ptr, topk_weights_ptr, e, m0,
            pid_n, H, I, NUM_PAIRS, stride_ar, stride_sr, stride_we, stride_wr, stride_wse, stride_wsr, stride_wsc,
            stride_or)
    if _upper_half_empty(sorted_token_ids_ptr, m0, NUM_PAIRS, BLOCK_M, HALF_M):
        _down_rows(*args, BLOCK_M // 2, BLOCK_N, BLOCK_K, A_FP8, DOT_FP32, PRECISION, SCATTER, SWAP_AB,
                   W_FP8, W_GROUP_N, W_GROUP_K, W_E8M0, W_TMA)
    else:
        _down_rows(*args, BLOCK_M, BLOCK_N, BLOCK_K, A_FP8, DOT_FP32, PRECISION, SCATTER, SWAP_AB,
                   W_FP8, W_GROUP_N, W_GROUP_K, W_E8M0, W_TMA)


@triton.jit
def combine_kernel(
    src_ptr,  # (T*K, H) compute dtype; rows of pairs whose id lies outside [0, E) were never written
    topk_ids_ptr,  # (T, K) int32 or int64
    topk_weights_ptr,  # (T, K) fp32: read only by the guard
    y_ptr,  # (T, H) compute dtype out
    H, E, stride_sr, stride_yt,
    K: tl.constexpr,
    K_PAD: tl.constexpr,  # next power of two ≥ K
    BLOCK_H: tl.constexpr,
    USE_PDL: tl.constexpr = False,  # launched early: wait for the down GEMM
):
    """y[t] = Σ_j src[t*K + j], accumulated in the compute dtype, one rounding per add,
    as vLLM's ``moe_sum`` kernel does (``scalar_t x = 0; x += input[...]``). A slot whose id lies
    outside [0, E) was placed nowhere: its row is skipped, and its token is NaN if its weight is
    not 0 (``kernels/ids.py``)."""
    if USE_PDL:
        gdc_wait()
    t = tl.program_id(0)
    offs_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = offs_h < H
    acc = tl.zeros([BLOCK_H], dtype=y_ptr.dtype.element_ty)
    for j in tl.static_range(K):
        _, ok = clamped(tl.load(topk_ids_ptr + t.to(tl.int64) * K + j), E)
        v = tl.load(src_ptr + (t.to(tl.int64) * K + j) * stride_sr + offs_h, mask=mask_h & ok, other=0.0)
        acc = (acc.to(tl.float32) + v.to(tl.float32)).to(y_ptr.dtype.element_ty)
    nan = dropped(topk_ids_ptr, topk_weights_ptr, t, E, K, K_PAD)
    acc = tl.where(nan, float("nan"), acc.to(tl.float32)).to(y_ptr.dtype.element_ty)  # exact: acc is y's dtype
    tl.store(y_ptr + t.to(tl.int64) * stride_yt + offs_h, acc, mask=mask_h)
