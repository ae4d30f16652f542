"""Warp decode: the whole MoE layer in two kernels, parallel over outputs instead of experts.

Kernel 1, gate/up: one warp owns one intermediate neuron i of one (token t, slot j) pair,
e = topk_ids[t, j]. It streams that neuron's gate row w13[e, i, :] and up row w13[e, I + i, :]
across H, reads the activation x[t, :] once for both, accumulates both dot products in FP32,
reduces across the warp, and writes silu(g)·u. No sort, no padding, no gather.

Kernel 2, down: one warp owns one hidden output h of one token t. It streams the rows
w2[e, h, :] of the token's K routed experts across I, multiplies them by the FP32 intermediate
with the routing weight folded in, sums over the K experts and over I in FP32 registers, and
stores y[t, h] once. The top-K combine is gone: it is a sum over one axis of the tile.

How "one warp per output" is written in Triton
----------------------------------------------
Triton programs are CTAs, not warps. A program here owns a [BLOCK_R, BLOCK_C] tile: BLOCK_R
output rows (neurons, or hidden outputs) by BLOCK_C columns of the reduction axis, and runs
with ``num_warps`` warps. Triton lays the tile out with sizePerThread [1, 8] × threadsPerWarp
[1, 32]: each lane holds 8 consecutive bf16 (one 16-byte load) of a row, so one warp spans 256
columns. With BLOCK_C = 256 (or one warp), warpsPerCTA is [num_warps, 1]: the warps stack over
rows, each output row belongs to exactly one warp, and ``tl.sum(acc, axis=1)`` is a pure
warp-shuffle reduction — literally one warp per output (BLOCK_R = 2·num_warps gives each warp
two outputs: two independent load streams, more bytes in flight). A wider tile spreads each row
over min(num_warps, BLOCK_C / 256) warps, and the row's sum crosses them through a few bytes of
shared memory; the tuner picks that for some shapes, where more loads in flight per row beat the
extra step. In the down kernel's [rows, K, columns] tile, warps left over once every row has its
warps go over the K experts (at one row and eight warps, one expert per warp), and the combine over
K then crosses warps too. ``tests/test_compile_sm90.py`` checks this rule on every tuned config; notebook 4
prints the layouts (``warpdecode.compiled.layouts``).

Overlapping the two kernels (programmatic dependent launch, sm_90+)
-------------------------------------------------------------------
At T=1 each kernel moves only tens of MB, so its ramp-up and its last, half-empty wave cost as
much as a fifth of its time. With ``USE_PDL`` the gate/up kernel lets the down kernel launch as
soon as all of its own programs have started (``gdc_launch_dependents``); the down kernel then
streams its w2 rows, which do not depend on kernel 1, and only waits (``gdc_wait``: kernel 1
complete, its stores visible) before it touches the intermediate. The down kernel's weight stream
fills the gate/up kernel's tail.

One persistent kernel instead of two (``warp_fused_kernel``)
-----------------------------------------------------------
PDL overlaps only the down kernel's first columns with kernel 1's tail. The fused kernel runs
both phases in one launch of exactly as many programs as the GPU holds at once (a persistent
grid): each program loops over gate/up units, loads the w2 columns of its first down unit, then
meets every other program at a grid barrier (an atomic counter in global memory) and loops over
down units. One launch ramp instead of two, and a program that finishes its gate/up share early
keeps HBM busy with its down rows while it waits. A grid barrier is only safe when every program
is resident at once, so the launcher sizes the grid from the compiled kernel's occupancy; the
spin gives up after ``MAX_SPINS`` polls and raises a flag rather than hang the GPU. The CPU
interpreter runs programs one after another, where a barrier would never open, so there the same
kernel runs as two launches (``PHASE`` 1, then 2).

Token-dependent sizes (T, T*K) are not specialized, so one compiled kernel serves every T.

Grid order: the pair (or token) index varies fastest, so the programs that run side by side
work on the same rows of different tokens; tokens that share an expert then read its rows from
L2 instead of HBM.
"""

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

# ---------------------------------------------------------------------------------------------
# The two tiles every kernel below is made of


@triton.jit
def _gate_up_tile(
    x_ptr, w13_ptr, topk_ids_ptr, act_ptr,
    H, I, K, stride_xt, stride_we, stride_wr, stride_at,
    pair,  # which (token, slot): t = pair // K
    pid_i,  # which block of BLOCK_I neurons
    BLOCK_I: tl.constexpr, BLOCK_H: tl.constexpr,
    EVICT: tl.constexpr,  # the weight loads' cache policy: "evict_first" streams past L2
    LEAN: tl.constexpr,  # reduce each step's products to one FP32 number per row (see below)
    WAIT: tl.constexpr = False,  # gdc_wait before the store: a launch before this one writes there too
):
    """silu(gate)·up of neurons [pid_i·BLOCK_I, +BLOCK_I) of one (token, slot) pair.

    The accumulators: by default two [BLOCK_I, BLOCK_H] FP32 tiles, summed across the warp once at
    the end: per lane twice as many registers as the bf16 weights it loads each step, which caps
    how many programs, and so how many bytes in flight, an SM holds. ``LEAN`` sums each step's
    products across the warp at once (five shuffles per row and step) into one FP32 number per
    row, so the registers go to loads in flight instead."""
    t = pair // K
    e = tl.load(topk_ids_ptr + pair).to(tl.int64)
    offs_i = pid_i * BLOCK_I + tl.arange(0, BLOCK_I)
    mask_i = offs_i < I
    offs_h = tl.arange(0, BLOCK_H)

    gate_ptrs = w13_ptr + e * stride_we + offs_i[:, None].to(tl.int64) * stride_wr + offs_h[None, :]
    up_ptrs = gate_ptrs + I * stride_wr
    x_ptrs = x_ptr + t.to(tl.int64) * stride_xt + offs_h

    if LEAN:
        acc_g = tl.zeros([BLOCK_I], dtype=tl.float32)
        acc_u = tl.zeros([BLOCK_I], dtype=tl.float32)
    else:
        acc_g = tl.zeros([BLOCK_I, BLOCK_H], dtype=tl.float32)
        acc_u = tl.zeros([BLOCK_I, BLOCK_H], dtype=tl.float32)
    for h0 in range(0, H, BLOCK_H):
        mask_h = (h0 + offs_h) < H
        xv = tl.load(x_ptrs + h0, mask=mask_h, other=0.0).to(tl.float32)
        mask = mask_i[:, None] & mask_h[None, :]
        g = tl.load(gate_ptrs + h0, mask=mask, other=0.0, eviction_policy=EVICT)
        u = tl.load(up_ptrs + h0, mask=mask, other=0.0, eviction_policy=EVICT)
        if LEAN:
            acc_g += tl.sum(g.to(tl.float32) * xv[None, :], axis=1)
            acc_u += tl.sum(u.to(tl.float32) * xv[None, :], axis=1)
        else:
            acc_g += g.to(tl.float32) * xv[None, :]
            acc_u += u.to(tl.float32) * xv[None, :]

    if LEAN:
        g, u = acc_g, acc_u
    else:
        g = tl.sum(acc_g, axis=1)  # warp-shuffle reduction: one warp holds one row
        u = tl.sum(acc_u, axis=1)
    a = g * tl.sigmoid(g) * u  # SiLU(g)·u in registers
    if WAIT:
        gdc_wait()
    tl.store(act_ptr + pair.to(tl.int64) * stride_at + offs_i, a.to(act_ptr.dtype.element_ty), mask=mask_i)


@triton.jit
def _down_chunk(
    w2_ptr, topk_ids_ptr, H, I, stride_we, stride_wr,
    t, pid_h, i0,  # token, block of BLOCK_H hidden outputs, first column
    K: tl.constexpr, K_PAD: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_I: tl.constexpr, EVICT: tl.constexpr,
):
    """Columns [i0, i0 + BLOCK_I) of the w2 rows token t needs: a [BLOCK_H, K_PAD, BLOCK_I] tile
    (rows of hidden outputs × the token's K routed experts × columns). Rows past H, slots past K
    and columns past I load zeros, so a program with no rows left loads nothing."""
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_k = tl.arange(0, K_PAD)
    mask_k = offs_k < K
    offs_i = i0 + tl.arange(0, BLOCK_I)
    e = tl.load(topk_ids_ptr + t.to(tl.int64) * K + offs_k, mask=mask_k, other=0).to(tl.int64)
    w_ptrs = (w2_ptr + offs_h[:, None, None].to(tl.int64) * stride_wr + e[None, :, None] * stride_we
              + offs_i[None, None, :])
    mask = (offs_h < H)[:, None, None] & mask_k[None, :, None] & (offs_i < I)[None, None, :]
    return tl.load(w_ptrs, mask=mask, other=0.0, eviction_policy=EVICT)


@triton.jit
def _down_tile(
    act_ptr, w2_ptr, topk_ids_ptr, topk_weights_ptr, y_ptr,
    H, I, stride_at, stride_we, stride_wr, stride_yt,
    t, pid_h,
    wv,  # the first chunk, _down_chunk(..., i0=0), loaded by the caller (early, if it can)
    K: tl.constexpr, K_PAD: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_I: tl.constexpr,
    ACT_CACHE: tl.constexpr,  # "" or ".cg": read the intermediate from L2, past this SM's L1
    EVICT: tl.constexpr,
):
    """y[t, rows] = Σ_j topk_weights[t, j] · w2[e_j, rows, :] · act[t·K + j, :]. Rows go to warps,
    K stays inside each thread (unless there are more warps than rows: then the rest go over K),
    columns go across a warp's lanes: summing over axis 1 is the top-K combine, in registers;
    summing over axis 2 is the dot product, across the warp."""
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_k = tl.arange(0, K_PAD)
    mask_k = offs_k < K
    pairs = t.to(tl.int64) * K + offs_k  # the token's (token, slot) pairs
    offs_i = tl.arange(0, BLOCK_I)
    rw = tl.load(topk_weights_ptr + pairs, mask=mask_k, other=0.0)  # routing weights, folded into a
    a_ptrs = act_ptr + pairs[:, None] * stride_at + offs_i[None, :]

    acc = tl.zeros([BLOCK_H, BLOCK_I], dtype=tl.float32)
    for i0 in range(0, I, BLOCK_I):
        if i0 > 0:
            wv = _down_chunk(w2_ptr, topk_ids_ptr, H, I, stride_we, stride_wr, t, pid_h, i0,
                             K, K_PAD, BLOCK_H, BLOCK_I, EVICT)
        mask_i = (i0 + offs_i) < I
        a = tl.load(a_ptrs + i0, mask=mask_k[:, None] & mask_i[None, :], other=0.0,
                    cache_modifier=ACT_CACHE).to(tl.float32) * rw[:, None]
        acc += tl.sum(wv.to(tl.float32) * a[None, :, :], axis=1)  # the combine over K, in registers

    y = tl.sum(acc, axis=1)  # the dot product, across the warp
    tl.store(y_ptr + t.to(tl.int64) * stride_yt + offs_h, y.to(y_ptr.dtype.element_ty), mask=offs_h < H)


# ---------------------------------------------------------------------------------------------
# Two kernels


@triton.jit(do_not_specialize=["NUM_PAIRS"])
def warp_gate_up_kernel(
    # pointers
    x_ptr,  # (T, H) compute dtype
    w13_ptr,  # (E, 2I, H) compute dtype: gate rows [0, I), up rows [I, 2I)
    topk_ids_ptr,  # (T, K) int32, in [0, E)
    act_ptr,  # (T*K, I) fp32 or compute dtype: silu(gate) * up per (token, slot)
    # sizes
    H,
    I,
    NUM_PAIRS,  # T * K
    K,
    # strides (elements)
    stride_xt,
    stride_we,
    stride_wr,
    stride_at,
    # meta
    BLOCK_I: tl.constexpr,  # neurons per program (rows of the tile)
    BLOCK_H: tl.constexpr,  # columns of H per step
    USE_PDL: tl.constexpr,  # let the down kernel launch early (GPU only)
    EVICT: tl.constexpr,  # weight loads' cache policy
    PAIR_FASTEST: tl.constexpr = True,  # grid order; False: neuron blocks fastest, one pair after another
    LEAN: tl.constexpr = False,  # per-step reduction (_gate_up_tile)
):
    if USE_PDL:
        gdc_launch_dependents()
    pid = tl.program_id(0)
    if PAIR_FASTEST:  # programs side by side read the same neuron rows of every pair (shared experts: L2)
        pair, pid_i = pid % NUM_PAIRS, pid // NUM_PAIRS
    else:  # programs side by side read consecutive rows of one expert, which streams expert by expert
        blocks_i = tl.cdiv(I, BLOCK_I)
        pair, pid_i = pid // blocks_i, pid % blocks_i
    _gate_up_tile(x_ptr, w13_ptr, topk_ids_ptr, act_ptr, H, I, K, stride_xt, stride_we, stride_wr, stride_at,
                  pair, pid_i, BLOCK_I, BLOCK_H, EVICT, LEAN)


@triton.jit(do_not_specialize=["T"])
def warp_down_kernel(
    # pointers
    act_ptr,  # (T*K, I) fp32 or compute dtype, from warp_gate_up_kernel
    w2_ptr,  # (E, H, I) compute dtype
    topk_ids_ptr,  # (T, K) int32, in [0, E)
    topk_weights_ptr,  # (T, K) fp32
    y_ptr,  # (T, H) compute dtype
    # sizes
    H,
    I,
    T,
    # strides (elements)
    stride_at,
    stride_we,
    stride_wr,
    stride_yt,
    # meta
    K: tl.constexpr,
    K_PAD: tl.constexpr,  # next power of two ≥ K
    BLOCK_H: tl.constexpr,  # hidden outputs per program (rows of the tile)
    BLOCK_I: tl.constexpr,  # columns of I per step
    USE_PDL: tl.constexpr,  # start streaming w2 before kernel 1 has finished (GPU only)
    EVICT: tl.constexpr,  # weight loads' cache policy
):
    pid = tl.program_id(0)
    t = pid % T  # fastest: tokens side by side share w2 rows of common experts
    pid_h = pid // T
    # the first BLOCK_I columns of every routed expert's rows: they do not depend on kernel 1
    wv = _down_chunk(w2_ptr, topk_ids_ptr, H, I, stride_we, stride_wr, t, pid_h, 0, K, K_PAD, BLOCK_H, BLOCK_I, EVICT)
    if USE_PDL:
        gdc_wait()  # kernel 1 has finished and its intermediate is visible
    _down_tile(act_ptr, w2_ptr, topk_ids_ptr, topk_weights_ptr, y_ptr, H, I, stride_at, stride_we, stride_wr,
               stride_yt, t, pid_h, wv, K, K_PAD, BLOCK_H, BLOCK_I, "", EVICT)


# ---------------------------------------------------------------------------------------------
# One persistent kernel


@triton.jit
def _grid_barrier(barrier_ptr, generation, num_programs, MAX_SPINS: tl.constexpr):
    """Every program waits here until all ``num_programs`` have arrived. ``barrier_ptr``: int32
    [count, generation, timed_out]; ``generation`` was read before this program could arrive.
    The last to arrive resets the count and bumps the generation, which opens the barrier and
    leaves the buffer ready for the next launch."""
    tl.debug_barrier()  # all warps of this program have issued their stores (bar.sync)
    arrived = tl.atomic_add(barrier_ptr, 1, sem="acq_rel", scope="gpu")  # release them, gpu-wide
    if arrived == num_programs - 1:
        tl.atomic_xchg(barrier_ptr, 0, sem="relaxed", scope="gpu")
        tl.atomic_add(barrier_ptr + 1, 1, sem="release", scope="gpu")
    else:
        spins = 0
        now = tl.atomic_add(barrier_ptr + 1, 0, sem="acquire", scope="gpu")
        while (now == generation) & (spins < MAX_SPINS):
            now = tl.atomic_add(barrier_ptr + 1, 0, sem="acquire", scope="gpu")
            spins += 1
        if spins >= MAX_SPINS:  # a program never arrived: not all were resident. Say so, never hang.
            tl.atomic_xchg(barrier_ptr + 2, 1, sem="relaxed", scope="gpu")


@triton.jit(do_not_specialize=["T"])
def warp_fused_kernel(
    # pointers
    x_ptr,  # (T, H) compute dtype
    w13_ptr,  # (E, 2I, H) compute dtype
    w2_ptr,  # (E, H, I) compute dtype
    topk_ids_ptr,  # (T, K) int32, in [0, E)
    topk_weights_ptr,  # (T, K) fp32
    act_ptr,  # (T*K, I) fp32 or compute dtype: scratch between the phases
    y_ptr,  # (T, H) compute dtype
    barrier_ptr,  # (3,) int32: count, generation, timed-out flag; count 0 between launches
    # sizes
    H,
    I,
    T,
    # strides (elements)
    stride_xt,
    stride_w13e,
    stride_w13r,
    stride_w2e,
    stride_w2r,
    stride_at,
    stride_yt,
    # meta
    K: tl.constexpr,
    K_PAD: tl.constexpr,
    GU_BLOCK_I: tl.constexpr,  # gate/up tile: neurons ...
    GU_BLOCK_H: tl.constexpr,  # ... by columns of H
    DN_BLOCK_H: tl.constexpr,  # down tile: hidden outputs ...
    DN_BLOCK_I: tl.constexpr,  # ... by columns of I
    PHASE: tl.constexpr,  # 0: both, with the grid barrier between; 1: gate/up only; 2: down only
    MAX_SPINS: tl.constexpr,
):
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    if PHASE == 0:
        generation = tl.atomic_add(barrier_ptr + 1, 0, sem="relaxed", scope="gpu")  # before anyone can open it

    if PHASE != 2:  # gate/up: units of GU_BLOCK_I neurons of one pair, the pair varying fastest
        num_pairs = T * K
        for unit in range(pid, num_pairs * tl.cdiv(I, GU_BLOCK_I), num_programs):
            _gate_up_tile(x_ptr, w13_ptr, topk_ids_ptr, act_ptr, H, I, K, stride_xt, stride_w13e, stride_w13r,
                          stride_at, unit % num_pairs, unit // num_pairs, GU_BLOCK_I, GU_BLOCK_H, "evict_first",
                          False)

    if PHASE != 1:  # down: units of DN_BLOCK_H outputs of one token, the token varying fastest
        # the first unit's first columns do not depend on the intermediate: load them before waiting
        wv = _down_chunk(w2_ptr, topk_ids_ptr, H, I, stride_w2e, stride_w2r, pid % T, pid // T, 0,
                         K, K_PAD, DN_BLOCK_H, DN_BLOCK_I, "evict_first")
        if PHASE == 0:
            _grid_barrier(barrier_ptr, generation, num_programs, MAX_SPINS)
        for unit in range(pid, T * tl.cdiv(H, DN_BLOCK_H), num_programs):
            if unit != pid:
                wv = _down_chunk(w2_ptr, topk_ids_ptr, H, I, stride_w2e, stride_w2r, unit % T, unit // T, 0,
                                 K, K_PAD, DN_BLOCK_H, DN_BLOCK_I, "evict_first")
            _down_tile(act_ptr, w2_ptr, topk_ids_ptr, topk_weights_ptr, y_ptr, H, I, stride_at, stride_w2e,
                       stride_w2r, stride_yt, unit % T, unit // T, wv, K, K_PAD, DN_BLOCK_H, DN_BLOCK_I,
                       ".cg" if PHASE == 0 else "", "evict_first")


# ---------------------------------------------------------------------------------------------
# Tokens that share an expert: one read of its rows for all of them (schedule "grouped")
#
# The pair kernels above read an expert's rows once per (token, slot) routed to it. While T·K is
# well under E that is once per expert, but once tokens share experts (Mixtral's 8 experts at any
# T > 1) the rows are read again for every token (from L2 at best). The grouped schedule's two
# kernels give each program one expert's rows and every token: the token axis becomes the N of a
# small matrix product on the tensor cores (padded to 16), tokens not routed to the expert are
# masked out, and the rows are read once. Still no sort, no padding of the weights' side, no
# gather or scatter pass: a program finds the tokens routed to its expert by comparing topk_ids
# with it.
#
# - gate/up: bf16 x times bf16 weights (exact products, FP32 sums), SiLU·up and the routing
#   weight applied in registers, and the FP32 result stored as three bf16 terms whose sum is it
#   exactly (8 + 8 + 8 significand bits): the down kernel's tensor cores take them as they are.
# - down: a program owns one expert's w2 rows for a block of hidden outputs and multiplies them by
#   the three terms (every product exact, every sum FP32). The sum over experts goes through an
#   FP32 scratch in global memory (atomic adds); the last of a block's E programs to arrive rounds
#   the block's sums to y, once. With K > 2 the order of those FP32 additions varies from run to
#   run, so the last bit of y may too. (Two earlier down kernels measured slower than the pair's:
#   one that walked every expert for a block of outputs, and this one splitting the FP32
#   intermediate itself at every step: ``results/NOTES.md``, sessions 6 and 7.)
#
# The tensor cores' work grows with the padded token count times the experts hit, not with T·K:
# the schedule is for small T where tokens share experts; the tuner decides where it wins.


@triton.jit
def _mma(a, b, acc, WIDEN: tl.constexpr):
    """acc + a @ b with FP32 sums. 16-bit operands go to the tensor cores as they are (their products
    are exact in FP32); FP32 operands, operands of two dtypes, and every operand where ``WIDEN``
    (the CPU interpreter, whose 16-bit dot multiplies raw bits), are multiplied in FP32, not tf32."""
    if WIDEN or a.dtype == tl.float32 or a.dtype != b.dtype:
        out = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    else:  # (Triton compiles the statements after a constexpr-true branch's return too)
        out = tl.dot(a, b, acc)
    return out


@triton.jit
def _routed(topk_ids_ptr, T, e, K: tl.constexpr, K_PAD: tl.constexpr, T_PAD: tl.constexpr):
    """[T_PAD, K_PAD] mask of the (token, slot) pairs routed to expert e (slots past K, tokens past T: never)."""
    offs_t = tl.arange(0, T_PAD)
    offs_k = tl.arange(0, K_PAD)
    mask = (offs_t < T)[:, None] & (offs_k < K)[None, :]
    ids = tl.load(topk_ids_ptr + offs_t[:, None] * K + offs_k[None, :], mask=mask, other=-1)
    return ids == e


@triton.jit
def _first_rows(hit, K: tl.constexpr, K_PAD: tl.constexpr, T_PAD: tl.constexpr):
    """For each token, the intermediate's row the grouped kernels use for this program's expert:
    that of its first slot routed there (a second slot naming the expert again shares it), and
    whether the token is routed there at all."""
    slot = tl.min(tl.where(hit, tl.arange(0, K_PAD)[None, :], K_PAD), axis=1)
    routed = slot < K
    return tl.arange(0, T_PAD) * K + tl.where(routed, slot, 0), routed


@triton.jit(do_not_specialize=["T", "E"])
def warp_gate_up_grouped_kernel(
    x_ptr,  # (T, H) compute dtype
    w13_ptr,  # (E, 2I, H) compute dtype
    topk_ids_ptr,  # (T, K) int32, in [0, E)
    topk_weights_ptr,  # (T, K) fp32
    act_ptr,  # (TERMS, T*K, I): the weighted silu(gate)·up, in the row of each token's first slot of e
    H, I, T, E,
    stride_xt, stride_we, stride_wr, stride_at, stride_term,
    K: tl.constexpr, K_PAD: tl.constexpr,
    T_PAD: tl.constexpr,  # ≥ T, a power of two ≥ 16 (the smallest N of a tensor-core product)
    TERMS: tl.constexpr,  # 3: FP32 values as three exact bf16 terms; 1: values in act's dtype
    BLOCK_I: tl.constexpr,  # neurons per program (≥ 16)
    BLOCK_H: tl.constexpr,  # columns of H per step
    USE_PDL: tl.constexpr,
    EVICT: tl.constexpr,
    WIDEN: tl.constexpr,  # multiply in FP32 (the CPU interpreter, see _mma)
):
    """Neurons [pid_i·BLOCK_I, +BLOCK_I) of expert e for every token routed to e; the expert varies
    fastest, so a program whose expert no token chose exits at once. A token whose top-K names e
    twice gets the sum of both weights in its first slot's row (the down kernel reads that one)."""
    if USE_PDL:
        gdc_launch_dependents()
    pid = tl.program_id(0)
    e = pid % E
    pid_i = pid // E
    hit = _routed(topk_ids_ptr, T, e, K, K_PAD, T_PAD)
    if tl.sum(hit.to(tl.int32)) > 0:
        offs_t = tl.arange(0, T_PAD)
        offs_i = pid_i * BLOCK_I + tl.arange(0, BLOCK_I)
        mask_i = offs_i < I
        offs_h = tl.arange(0, BLOCK_H)
        gate_ptrs = w13_ptr + e.to(tl.int64) * stride_we + offs_i[:, None].to(tl.int64) * stride_wr + offs_h[None, :]
        up_ptrs = gate_ptrs + I * stride_wr
        x_ptrs = x_ptr + offs_t[None, :].to(tl.int64) * stride_xt + offs_h[:, None]  # [BLOCK_H, T_PAD]: x transposed
        acc_g = tl.zeros([BLOCK_I, T_PAD], dtype=tl.float32)
        acc_u = tl.zeros([BLOCK_I, T_PAD], dtype=tl.float32)
        for h0 in range(0, H, BLOCK_H):
            mask_h = (h0 + offs_h) < H
            xv = tl.load(x_ptrs + h0, mask=mask_h[:, None] & (offs_t < T)[None, :], other=0.0)
            g = tl.load(gate_ptrs + h0, mask=mask_i[:, None] & mask_h[None, :], other=0.0, eviction_policy=EVICT)
            u = tl.load(up_ptrs + h0, mask=mask_i[:, None] & mask_h[None, :], other=0.0, eviction_policy=EVICT)
            # one read of the rows, every token's dot product (16-bit products are exact in FP32)
            acc_g = _mma(g, xv, acc_g, WIDEN)
            acc_u = _mma(u, xv, acc_u, WIDEN)
        # each token's routing weights for e, summed should its top-K name e twice
        mask_tk = (offs_t < T)[:, None] & (tl.arange(0, K_PAD) < K)[None, :]
        rw = tl.load(topk_weights_ptr + offs_t[:, None] * K + tl.arange(0, K_PAD)[None, :], mask=mask_tk, other=0.0)
        a = acc_g * tl.sigmoid(acc_g) * acc_u * tl.sum(tl.where(hit, rw, 0.0), axis=1)[None, :]  # weighted SiLU(g)·u
        rows, routed = _first_rows(hit, K, K_PAD, T_PAD)
        ptrs = act_ptr + rows[None, :].to(tl.int64) * stride_at + offs_i[:, None]
        mask = mask_i[:, None] & routed[None, :]
        if TERMS == 3:  # hi + mid + lo == a exactly: 8 + 8 + 8 significand bits of FP32's 24
            hi = a.to(tl.bfloat16)
            rest = a - hi.to(tl.float32)
            mid = rest.to(tl.bfloat16)
            tl.store(ptrs, hi, mask=mask)
            tl.store(ptrs + stride_term, mid, mask=mask)
            tl.store(ptrs + 2 * stride_term, (rest - mid.to(tl.float32)).to(tl.bfloat16), mask=mask)
        else:
            tl.store(ptrs, a.to(act_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["T", "E"])
def warp_down_grouped_kernel(
    act_ptr,  # (TERMS, T*K, I) from warp_gate_up_grouped_kernel, the routing weight in it
    w2_ptr,  # (E, H, I) compute dtype
    topk_ids_ptr,  # (T, K) int32, in [0, E)
    y_ptr,  # (T, H) compute dtype
    sums_ptr,  # (T_PAD, H) fp32, zero on entry: every expert's share of y
    arrived_ptr,  # (cdiv(H, BLOCK_H),) int32, zero on entry: programs done per block of outputs
    H, I, T, E,
    stride_at, stride_term, stride_we, stride_wr, stride_yt,
    K: tl.constexpr, K_PAD: tl.constexpr, T_PAD: tl.constexpr,
    TERMS: tl.constexpr,
    BLOCK_H: tl.constexpr,  # hidden outputs per program (the M of the product)
    BLOCK_I: tl.constexpr,  # columns of I per step
    EVICT: tl.constexpr,
    WIDEN: tl.constexpr,
):
    """Hidden outputs [pid_h·BLOCK_H, +BLOCK_H) of expert e's share of y for every token routed to
    e, added into ``sums``; the E-th program of the block to finish rounds the block to y. The
    expert varies fastest, so the programs of one block of outputs run side by side."""
    pid = tl.program_id(0)
    e = pid % E
    pid_h = pid // E
    offs_t = tl.arange(0, T_PAD)
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = offs_h < H
    s_ptrs = sums_ptr + offs_t[None, :] * H + offs_h[:, None]  # [BLOCK_H, T_PAD]
    hit = _routed(topk_ids_ptr, T, e, K, K_PAD, T_PAD)
    if tl.sum(hit.to(tl.int32)) > 0:
        rows, routed = _first_rows(hit, K, K_PAD, T_PAD)
        offs_i = tl.arange(0, BLOCK_I)
        w_ptrs = w2_ptr + e.to(tl.int64) * stride_we + offs_h[:, None].to(tl.int64) * stride_wr + offs_i[None, :]
        a_ptrs = act_ptr + rows[None, :].to(tl.int64) * stride_at + offs_i[:, None]  # [BLOCK_I, T_PAD]
        acc = tl.zeros([BLOCK_H, T_PAD], dtype=tl.float32)
        for i0 in range(0, I, BLOCK_I):
            mask_i = (i0 + offs_i) < I
            mask_a = mask_i[:, None] & routed[None, :]
            w = tl.load(w_ptrs + i0, mask=mask_h[:, None] & mask_i[None, :], other=0.0, eviction_policy=EVICT)
            for term in tl.static_range(TERMS):
                acc = _mma(w, tl.load(a_ptrs + term * stride_term + i0, mask=mask_a, other=0.0), acc, WIDEN)
        tl.atomic_add(s_ptrs, acc, mask=mask_h[:, None] & routed[None, :], sem="relaxed", scope="gpu")
    tl.debug_barrier()  # every warp of this program has issued its adds
    if tl.atomic_add(arrived_ptr + pid_h, 1, sem="acq_rel", scope="gpu") == E - 1:
        # the last program of this block of outputs: every expert's adds are visible. Read them
        # where the atomics made them (L2: an atomic add of zero; L1 is not coherent)
        mask = mask_h[:, None] & (offs_t < T)[None, :]
        sums = tl.atomic_add(s_ptrs, tl.zeros([BLOCK_H, T_PAD], dtype=tl.float32), mask=mask, sem="relaxed",
                             scope="gpu")
        y_ptrs = y_ptr + offs_t[None, :].to(tl.int64) * stride_yt + offs_h[:, None]
        tl.store(y_ptrs, sums.to(y_ptr.dtype.element_ty), mask=mask)
