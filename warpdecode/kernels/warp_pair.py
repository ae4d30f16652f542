"""Warp decode: the whole MoE layer in two kernels, parallel over outputs instead of experts.

    ∥(t, j, i), one warp: a[tK+j, i] = silu(Wg[e_tj, i]·x[t]) · (Wu[e_tj, i]·x[t])    reads 2·T·K·I·H·2 B
    ∥(t, h),    one warp: y[t, h]    = Σ_j w[t, j] · (W2[e_tj, h]·a[tK+j])              reads T·K·H·I·2 B

e_tj = topk_ids[t, j], w = topk_weights; bf16 weights, every sum in FP32, y rounded once.

Byte ledger of one call with T tokens (bf16 weights and x, FP32 intermediate a):
  gate/up  reads  T·K·2I·H·2 B of weight rows, T·H·2 B of x (each program re-reads its token's row from L2),
                  T·K·4 B of topk_ids;  writes T·K·I·4 B of a
  down     reads  T·K·H·I·2 B of weight rows, T·K·I·4 B of a (per program, from L2), T·K·8 B of routing;
                  writes T·H·2 B of y
  minimum  the rows of the U distinct experts the T·K pairs name, once: U·3·I·H·2 B (plus x, y and the
           routing). At T = 1, U = K: the pair reads exactly that. Past T = 1, pairs that share an
           expert ask for its rows again; the grid order below serves those from L2 where it can.

No sort, padding or gather. A [rows, columns] tile, each lane 8 consecutive bf16 of a row, warps over
rows (a row's ``tl.sum`` is a warp shuffle); the down tile keeps the K experts in each thread, its form
per Triton release (3.6 ``_3d``; 3.8+ ``_k_first`` or ``_per_slot``; docs/design.md). Weight loads are
``evict_first``; with ``USE_PDL`` the down kernel streams its first w2 chunk before ``gdc_wait``; T and T·K
are not specialized; the pair (or token) index runs fastest, so tokens sharing an expert read its rows from L2.
"""

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from .ids import guarded, poisoned

#: Whether this release (3.8+) puts a [rows, K, columns] tile's warps over K and sums a lane's products as
#: a tree. Both come with the release, so one flag: the down tile then takes the [K, rows, columns] form
#: (``_k_first``, faster than per slot), and gate/up loads a step in ``SUB_H`` slices (:func:`gate_up_slice`).
#: Data: docs/design.md, "The latest Triton releases".
K_FIRST = TREE_SUMS = tuple(int(v) for v in triton.__version__.split(".")[:2]) >= (3, 8)

#: A k-first step's weight bytes per thread (K_PAD · BLOCK_H · BLOCK_I · elem / (32 · num_warps)) before
#: it spills, past which per-slot runs. Data: ptxas; docs/design.md, "The latest Triton releases".
K_FIRST_MAX_BYTES_PER_THREAD = 256


def down_form(cfg: dict, K: int, elem_bytes: int, *, persistent: bool = False) -> tuple[bool, bool]:
    """(PER_SLOT, K_FIRST) for ``cfg``, K and ``elem_bytes``: the release's (3-D, or :data:`K_FIRST`), but per
    slot past :data:`K_FIRST_MAX_BYTES_PER_THREAD` and for the ``persistent`` kernel (128 registers)."""
    if K_FIRST and (persistent or triton.next_power_of_2(K) * cfg["BLOCK_H"] * cfg["BLOCK_I"] * elem_bytes
                    > K_FIRST_MAX_BYTES_PER_THREAD * 32 * cfg["num_warps"]):
        return True, False
    return False, K_FIRST


def gate_up_slice(cfg: dict) -> int:
    """SUB_H of a gate/up config (``cfg["SUB_H"]`` wins): BLOCK_H where products chain into FMAs, else 256
    columns per warp of a row. Data: docs/design.md, "The latest Triton releases"."""
    if "SUB_H" in cfg:
        return cfg["SUB_H"]
    rows, cols, warps = cfg["BLOCK_I"], cfg["BLOCK_H"], cfg["num_warps"]
    # slices only where a lane holds 64 or more of a step's columns (Qwen3-30B-A3B's 2048 on one warp):
    # at 32 (1024 columns) the tree takes 64 registers and the slices 72, fewer programs per SM
    if not TREE_SUMS or rows * cols < 64 * 32 * warps:
        return cols
    warps_per_row = max(1, min(warps // rows, cols // 256)) if warps > rows else 1
    return min(cols, 256 * warps_per_row)


# --- The two tiles both kernels (and bench/persistent.py's) are made of
@triton.jit
def _gate_up_tile(
    x_ptr, w13_ptr, topk_ids_ptr, topk_weights_ptr, act_ptr,
    H, I, E, K, stride_xt, stride_we, stride_wr, stride_at,
    pair,  # which (token, slot): t = pair // K
    pid_i,  # which block of BLOCK_I neurons
    BLOCK_I: tl.constexpr, BLOCK_H: tl.constexpr,
    SUB_H: tl.constexpr,  # columns of one load: BLOCK_H, or a slice whose products chain into FMAs (below)
    BAD_BY_BOUND: tl.constexpr = False,  # how a bad id's slot reads nothing: its loop bound, else masks (below)
):
    """silu(gate)·up of neurons [pid_i·BLOCK_I, +BLOCK_I) of one (token, slot) pair.

    One FP32 accumulator per row: each step's products are summed across the warp at once, so the
    registers hold loads in flight rather than tile accumulators. Each lane holds BLOCK_H / (32 · warps
    per row) columns of a row per step; with SUB_H < BLOCK_H the step is loaded in BLOCK_H / SUB_H
    slices of that layout whose products accumulate into a [BLOCK_I, SUB_H] partial, an FMA chain on
    releases that sum a lane's products as a tree (3.8+), then one sum per step and the shuffles.

    An id outside [0, E) loads no weights and writes a zero row, or a NaN row where its routing
    weight is not 0, which the down tile folds into its token (``kernels/ids.py``): its weight loads
    are masked, or with ``BAD_BY_BOUND`` its loop takes no step, whichever form keeps its kernel
    without a spill (docs/design.md, "The latest Triton releases")."""
    t = pair // K
    e, ok = guarded(tl.load(topk_ids_ptr + pair), E)
    offs_i = pid_i * BLOCK_I + tl.arange(0, BLOCK_I)
    mask_i = offs_i < I
    if BAD_BY_BOUND:  # a slot whose id lies outside [0, E) takes no step
        mask_r = mask_i
        H_ok = tl.where(ok, H, 0)
    else:  # ... or takes its steps with every weight load masked
        mask_r = mask_i & ok  # rows whose weights are read
        H_ok = H
    offs_h = tl.arange(0, BLOCK_H)

    gate_ptrs = w13_ptr + e * stride_we + offs_i[:, None].to(tl.int64) * stride_wr + offs_h[None, :]
    up_ptrs = gate_ptrs + I * stride_wr
    x_ptrs = x_ptr + t.to(tl.int64) * stride_xt + offs_h

    acc_g = tl.zeros([BLOCK_I], dtype=tl.float32)
    acc_u = tl.zeros([BLOCK_I], dtype=tl.float32)
    if SUB_H == BLOCK_H:
        for h0 in range(0, H_ok, BLOCK_H):
            mask_h = (h0 + offs_h) < H
            # x stays in its own dtype until the multiply: an FP32 copy of a 2048-column step holds 64
            # registers per lane, which spills where the compiler sums in-thread products as a tree (3.9)
            xv = tl.load(x_ptrs + h0, mask=mask_h, other=0.0)
            mask = mask_r[:, None] & mask_h[None, :]
            g = tl.load(gate_ptrs + h0, mask=mask, other=0.0, eviction_policy="evict_first")
            u = tl.load(up_ptrs + h0, mask=mask, other=0.0, eviction_policy="evict_first")
            # warp-shuffle reductions: one warp, one row
            acc_g += tl.sum(g.to(tl.float32) * xv.to(tl.float32)[None, :], axis=1)
            acc_u += tl.sum(u.to(tl.float32) * xv.to(tl.float32)[None, :], axis=1)
    else:
        offs_s = tl.arange(0, SUB_H)
        gate_rows = w13_ptr + e * stride_we + offs_i[:, None].to(tl.int64) * stride_wr  # [BLOCK_I, 1]
        up_rows = gate_rows + I * stride_wr
        x_row = x_ptr + t.to(tl.int64) * stride_xt
        for h0 in range(0, H_ok, BLOCK_H):
            part_g = tl.zeros([BLOCK_I, SUB_H], dtype=tl.float32)
            part_u = tl.zeros([BLOCK_I, SUB_H], dtype=tl.float32)
            for c in tl.static_range(BLOCK_H // SUB_H):
                offs = h0 + c * SUB_H + offs_s
                mask_h = offs < H
                xv = tl.load(x_row + offs, mask=mask_h, other=0.0).to(tl.float32)
                mask = mask_r[:, None] & mask_h[None, :]
                g = tl.load(gate_rows + offs[None, :], mask=mask, other=0.0, eviction_policy="evict_first")
                u = tl.load(up_rows + offs[None, :], mask=mask, other=0.0, eviction_policy="evict_first")
                part_g += g.to(tl.float32) * xv[None, :]
                part_u += u.to(tl.float32) * xv[None, :]
            acc_g += tl.sum(part_g, axis=1)
            acc_u += tl.sum(part_u, axis=1)

    a = acc_g * tl.sigmoid(acc_g) * acc_u  # SiLU(g)·u in registers
    a = tl.where(poisoned(ok, topk_weights_ptr, pair), float("nan"), a)
    tl.store(act_ptr + pair.to(tl.int64) * stride_at + offs_i, a.to(act_ptr.dtype.element_ty), mask=mask_i)


@triton.jit
def _down_chunk(
    w2_ptr, topk_ids_ptr, H, I, E, stride_we, stride_wr,
    t, pid_h, i0,  # token, block of BLOCK_H hidden outputs, first column
    K: tl.constexpr, K_PAD: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_I: tl.constexpr,
    PER_SLOT: tl.constexpr,  # the tile's form (:func:`down_form`)
    K_FIRST: tl.constexpr = False,
):
    """Columns [i0, i0 + BLOCK_I) of the w2 rows token t needs, in the tile's form: one
    [BLOCK_H, K_PAD, BLOCK_I] tile (:func:`_down_chunk_3d`), with ``PER_SLOT`` a tuple of K
    [BLOCK_H, BLOCK_I] tiles (:func:`_down_chunk_per_slot`), with ``K_FIRST`` one
    [K_PAD, BLOCK_H, BLOCK_I] tile (:func:`_down_chunk_k_first`). Rows past H, slots past K,
    columns past I and slots whose id lies outside [0, E) load zeros, so a program with no rows
    left loads nothing."""
    if PER_SLOT:
        wv = _down_chunk_per_slot(w2_ptr, topk_ids_ptr, H, I, E, stride_we, stride_wr, t, pid_h, i0, K, BLOCK_H,
                                  BLOCK_I)
    elif K_FIRST:
        wv = _down_chunk_k_first(w2_ptr, topk_ids_ptr, H, I, E, stride_we, stride_wr, t, pid_h, i0, K, K_PAD,
                                 BLOCK_H, BLOCK_I)
    else:
        wv = _down_chunk_3d(w2_ptr, topk_ids_ptr, H, I, E, stride_we, stride_wr, t, pid_h, i0, K, K_PAD, BLOCK_H,
                            BLOCK_I)
    return wv


@triton.jit
def _down_tile(
    act_ptr, w2_ptr, topk_ids_ptr, topk_weights_ptr, y_ptr,
    H, I, E, stride_at, stride_we, stride_wr, stride_yt,
    t, pid_h,
    wv,  # the first chunk, _down_chunk(..., i0=0), loaded by the caller (early, if it can)
    K: tl.constexpr, K_PAD: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_I: tl.constexpr,
    ACT_CACHE: tl.constexpr,  # "" or ".cg": read the intermediate from L2, past this SM's L1
    PER_SLOT: tl.constexpr,
    K_FIRST: tl.constexpr = False,
):
    """y[t, rows] = Σ_j topk_weights[t, j] · w2[e_j, rows, :] · act[t·K + j, :], in the tile's form
    (:func:`_down_tile_3d`, :func:`_down_tile_per_slot`, :func:`_down_tile_k_first`). Rows go to
    warps, the K experts stay inside each thread, columns go across a warp's lanes: the combine over
    K is in registers, and summing the accumulator over its columns is the dot product, across the
    warp. A slot whose id lies outside [0, E) loads zeros; where its weight is not 0 its
    intermediate row is NaN (``_gate_up_tile``), so its token's outputs are NaN (``kernels/ids.py``)."""
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    if PER_SLOT:
        acc = _down_tile_per_slot(act_ptr, w2_ptr, topk_ids_ptr, topk_weights_ptr, H, I, E, stride_at, stride_we,
                                  stride_wr, t, pid_h, wv, K, K_PAD, BLOCK_H, BLOCK_I, ACT_CACHE)
    elif K_FIRST:
        acc = _down_tile_k_first(act_ptr, w2_ptr, topk_ids_ptr, topk_weights_ptr, H, I, E, stride_at, stride_we,
                                 stride_wr, t, pid_h, wv, K, K_PAD, BLOCK_H, BLOCK_I, ACT_CACHE)
    else:
        acc = _down_tile_3d(act_ptr, w2_ptr, topk_ids_ptr, topk_weights_ptr, H, I, E, stride_at, stride_we,
                            stride_wr, t, pid_h, wv, K, K_PAD, BLOCK_H, BLOCK_I, ACT_CACHE)
    y = tl.sum(acc, axis=1)  # the dot product, across the warp
    tl.store(y_ptr + t.to(tl.int64) * stride_yt + offs_h, y.to(y_ptr.dtype.element_ty), mask=offs_h < H)


# --- The down tile on Triton 3.6: one [rows, K, columns] tile
@triton.jit
def _down_chunk_3d(w2_ptr, topk_ids_ptr, H, I, E, stride_we, stride_wr, t, pid_h, i0,
                   K: tl.constexpr, K_PAD: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_I: tl.constexpr):
    """Columns [i0, i0 + BLOCK_I) of the token's K routed experts' rows: one [BLOCK_H, K_PAD, BLOCK_I] tile."""
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_i = i0 + tl.arange(0, BLOCK_I)
    offs_k = tl.arange(0, K_PAD)
    mask_k = offs_k < K
    e, ok = guarded(tl.load(topk_ids_ptr + t.to(tl.int64) * K + offs_k, mask=mask_k, other=0), E)
    mask_k = mask_k & ok
    w_ptrs = (w2_ptr + offs_h[:, None, None].to(tl.int64) * stride_wr + e[None, :, None] * stride_we
              + offs_i[None, None, :])
    mask = (offs_h < H)[:, None, None] & mask_k[None, :, None] & (offs_i < I)[None, None, :]
    return tl.load(w_ptrs, mask=mask, other=0.0, eviction_policy="evict_first")


@triton.jit
def _down_tile_3d(act_ptr, w2_ptr, topk_ids_ptr, topk_weights_ptr, H, I, E, stride_at, stride_we, stride_wr,
                  t, pid_h, wv, K: tl.constexpr, K_PAD: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_I: tl.constexpr,
                  ACT_CACHE: tl.constexpr):
    """The [BLOCK_H, BLOCK_I] FP32 accumulator of the token's rows: each step's [rows, K, columns]
    products summed over K in registers (the combine), the routing weights folded into the
    intermediate."""
    offs_k = tl.arange(0, K_PAD)
    mask_k = offs_k < K
    pairs = t.to(tl.int64) * K + offs_k  # the token's (token, slot) pairs
    offs_i = tl.arange(0, BLOCK_I)
    rw = tl.load(topk_weights_ptr + pairs, mask=mask_k, other=0.0)  # routing weights, folded into a
    a_ptrs = act_ptr + pairs[:, None] * stride_at + offs_i[None, :]
    acc = tl.zeros([BLOCK_H, BLOCK_I], dtype=tl.float32)
    for i0 in range(0, I, BLOCK_I):
        if i0 > 0:
            wv = _down_chunk_3d(w2_ptr, topk_ids_ptr, H, I, E, stride_we, stride_wr, t, pid_h, i0, K, K_PAD, BLOCK_H,
                                BLOCK_I)
        mask_i = (i0 + offs_i) < I
        a = tl.load(a_ptrs + i0, mask=mask_k[:, None] & mask_i[None, :], other=0.0,
                    cache_modifier=ACT_CACHE).to(tl.float32) * rw[:, None]
        acc += tl.sum(wv.to(tl.float32) * a[None, :, :], axis=1)  # the combine over K, in registers
    return acc


# --- The down tile on Triton 3.8 and later: one [K, rows, columns] tile (K_FIRST) ...
@triton.jit
def _slots(x, N: tl.constexpr):
    """The N tensors x[..., j], j = 0 … N-1 in order, of x[..., N] (N a power of two), by halving
    the last axis: where that axis lies inside each thread, in registers."""
    if N == 1:  # one return, after both branches: Triton 3.9 types every return of a function alike
        parts = (tl.reshape(x, x.shape[:-1]),)
    else:
        parts = (x,)
        for _ in tl.static_range(N.bit_length() - 1):
            # each split takes the even and the odd entries; evens of all parts first keeps j in order
            evens = ()
            odds = ()
            for p in tl.static_range(len(parts)):
                q = parts[p]
                if q.shape[-1] > 2:
                    q = tl.reshape(q, q.shape[:-1] + [q.shape[-1] // 2, 2])
                lo, hi = tl.split(q)
                evens = evens + (lo,)
                odds = odds + (hi,)
            parts = evens + odds
    return parts


@triton.jit
def _down_chunk_k_first(w2_ptr, topk_ids_ptr, H, I, E, stride_we, stride_wr, t, pid_h, i0,
                        K: tl.constexpr, K_PAD: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_I: tl.constexpr):
    """Columns [i0, i0 + BLOCK_I) of the token's K routed experts' rows: one [K_PAD, BLOCK_H, BLOCK_I] tile."""
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_i = i0 + tl.arange(0, BLOCK_I)
    offs_k = tl.arange(0, K_PAD)
    # slots past K read as -1: outside [0, E), so ok alone masks them
    e, mask_k = guarded(tl.load(topk_ids_ptr + t.to(tl.int64) * K + offs_k, mask=offs_k < K, other=-1), E)
    w_ptrs = (w2_ptr + e[:, None, None] * stride_we + offs_h[None, :, None].to(tl.int64) * stride_wr
              + offs_i[None, None, :])
    mask = mask_k[:, None, None] & (offs_h < H)[None, :, None] & (offs_i < I)[None, None, :]
    return tl.load(w_ptrs, mask=mask, other=0.0, eviction_policy="evict_first")


@triton.jit
def _down_step_k_first(act_ptr, topk_weights_ptr, stride_at, I, t, i0, wv, acc,
                       K: tl.constexpr, K_PAD: tl.constexpr, BLOCK_I: tl.constexpr, ACT_CACHE: tl.constexpr):
    """acc += Σ_j w[t, j] · wv[j] · act[tK+j, i0:i0+BLOCK_I]. The intermediate of all K slots is one
    [K_PAD, BLOCK_I] load, broadcast over the tile's rows in one layout conversion; the slots'
    products are taken from the [K_PAD, BLOCK_H, BLOCK_I] product in registers and added to the
    accumulator one after another, which the compiler contracts into one FMA per weight."""
    offs_k = tl.arange(0, K_PAD)
    mask_k = offs_k < K
    pairs = t.to(tl.int64) * K + offs_k  # the token's (token, slot) pairs
    offs_i = i0 + tl.arange(0, BLOCK_I)
    rw = tl.load(topk_weights_ptr + pairs, mask=mask_k, other=0.0)  # routing weights, folded into a
    a = tl.load(act_ptr + pairs[:, None] * stride_at + offs_i[None, :], mask=mask_k[:, None] & (offs_i < I)[None, :],
                other=0.0, cache_modifier=ACT_CACHE).to(tl.float32) * rw[:, None]
    products = _slots(tl.permute(wv.to(tl.float32) * a[:, None, :], (1, 2, 0)), K_PAD)  # K axis last, then split
    for j in tl.static_range(K_PAD):
        acc += products[j]
    return acc


@triton.jit
def _down_tile_k_first(act_ptr, w2_ptr, topk_ids_ptr, topk_weights_ptr, H, I, E, stride_at, stride_we, stride_wr,
                       t, pid_h, wv, K: tl.constexpr, K_PAD: tl.constexpr, BLOCK_H: tl.constexpr,
                       BLOCK_I: tl.constexpr, ACT_CACHE: tl.constexpr):
    """The [BLOCK_H, BLOCK_I] FP32 accumulator of the token's rows, step by step. The first step is
    taken before the loop, so the loop carries one accumulator, never the weight tile (which the
    compiler carries unpacked, two bf16 in two registers)."""
    acc = _down_step_k_first(act_ptr, topk_weights_ptr, stride_at, I, t, 0, wv,
                             tl.zeros([BLOCK_H, BLOCK_I], dtype=tl.float32), K, K_PAD, BLOCK_I, ACT_CACHE)
    for i0 in range(BLOCK_I, I, BLOCK_I):
        wv = _down_chunk_k_first(w2_ptr, topk_ids_ptr, H, I, E, stride_we, stride_wr, t, pid_h, i0, K, K_PAD, BLOCK_H,
                                 BLOCK_I)
        acc = _down_step_k_first(act_ptr, topk_weights_ptr, stride_at, I, t, i0, wv, acc, K, K_PAD, BLOCK_I,
                                 ACT_CACHE)
    return acc


# --- ... or K [rows, columns] tiles, slot by slot (PER_SLOT: too-large k-first tiles; the persistent kernel)
@triton.jit
def _down_chunk_per_slot(w2_ptr, topk_ids_ptr, H, I, E, stride_we, stride_wr, t, pid_h, i0,
                         K: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_I: tl.constexpr):
    """Columns [i0, i0 + BLOCK_I) of the token's K routed experts' rows: K [BLOCK_H, BLOCK_I] tiles."""
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_i = i0 + tl.arange(0, BLOCK_I)
    mask = (offs_h < H)[:, None] & (offs_i < I)[None, :]
    offs = offs_h[:, None] * stride_wr + offs_i[None, :]  # within one expert's block: < H·I < 2**31
    tiles = ()
    for j in tl.static_range(K):
        e, ok = guarded(tl.load(topk_ids_ptr + t.to(tl.int64) * K + j), E)
        tiles = tiles + (tl.load(w2_ptr + e * stride_we + offs, mask=mask & ok, other=0.0,
                                 eviction_policy="evict_first"),)
    return tiles


@triton.jit
def _down_step(act_ptr, topk_weights_ptr, stride_at, I, t, i0, wv, acc,
               K: tl.constexpr, BLOCK_I: tl.constexpr, ACT_CACHE: tl.constexpr):
    """acc += Σ_j w[t, j] · wv[j] · act[tK+j, i0:i0+BLOCK_I], slot by slot, one FMA per weight into
    the [BLOCK_H, BLOCK_I] FP32 accumulator: the top-K combine is the accumulation."""
    offs_i = i0 + tl.arange(0, BLOCK_I)
    for j in tl.static_range(K):
        pair = t.to(tl.int64) * K + j
        rw = tl.load(topk_weights_ptr + pair)  # the routing weight, folded into the intermediate
        a = tl.load(act_ptr + pair * stride_at + offs_i, mask=offs_i < I, other=0.0,
                    cache_modifier=ACT_CACHE).to(tl.float32) * rw
        acc += wv[j].to(tl.float32) * a[None, :]
    return acc


@triton.jit
def _down_tile_per_slot(act_ptr, w2_ptr, topk_ids_ptr, topk_weights_ptr, H, I, E, stride_at, stride_we, stride_wr,
                        t, pid_h, wv, K: tl.constexpr, K_PAD: tl.constexpr, BLOCK_H: tl.constexpr,
                        BLOCK_I: tl.constexpr, ACT_CACHE: tl.constexpr):
    """The [BLOCK_H, BLOCK_I] FP32 accumulator of the token's rows, step by step, the first step
    before the loop (as :func:`_down_tile_k_first`)."""
    acc = _down_step(act_ptr, topk_weights_ptr, stride_at, I, t, 0, wv,
                     tl.zeros([BLOCK_H, BLOCK_I], dtype=tl.float32), K, BLOCK_I, ACT_CACHE)
    for i0 in range(BLOCK_I, I, BLOCK_I):
        wv = _down_chunk_per_slot(w2_ptr, topk_ids_ptr, H, I, E, stride_we, stride_wr, t, pid_h, i0, K, BLOCK_H,
                                  BLOCK_I)
        acc = _down_step(act_ptr, topk_weights_ptr, stride_at, I, t, i0, wv, acc, K, BLOCK_I, ACT_CACHE)
    return acc


# --- The two kernels
@triton.jit(do_not_specialize=["NUM_PAIRS"])
def warp_gate_up_kernel(
    # pointers
    x_ptr,  # (T, H) compute dtype
    w13_ptr,  # (E, 2I, H) compute dtype: gate rows [0, I), up rows [I, 2I)
    topk_ids_ptr,  # (T, K) int32 or int64; ids outside [0, E) are guarded (kernels/ids.py)
    topk_weights_ptr,  # (T, K) fp32: read only by the guard
    act_ptr,  # (T*K, I) fp32 or compute dtype: silu(gate) * up per (token, slot)
    # sizes (NUM_PAIRS = T * K) and strides (elements)
    H, I, E, NUM_PAIRS, K,
    stride_xt, stride_we, stride_wr, stride_at,
    # meta
    BLOCK_I: tl.constexpr,  # neurons per program (rows of the tile)
    BLOCK_H: tl.constexpr,  # columns of H per step
    USE_PDL: tl.constexpr,  # let the down kernel launch early (GPU only)
    SUB_H: tl.constexpr = None,  # columns of one load, a slice of BLOCK_H (_gate_up_tile); None: BLOCK_H
):
    if USE_PDL:
        gdc_launch_dependents()
    pid = tl.program_id(0)
    # the pair fastest: programs side by side read the same neuron rows of every pair (shared experts: L2)
    pair, pid_i = pid % NUM_PAIRS, pid // NUM_PAIRS
    _gate_up_tile(x_ptr, w13_ptr, topk_ids_ptr, topk_weights_ptr, act_ptr, H, I, E, K, stride_xt, stride_we,
                  stride_wr, stride_at, pair, pid_i, BLOCK_I, BLOCK_H, BLOCK_H if SUB_H is None else SUB_H)


@triton.jit(do_not_specialize=["T"])
def warp_down_kernel(
    # pointers
    act_ptr,  # (T*K, I) fp32 or compute dtype, from warp_gate_up_kernel
    w2_ptr,  # (E, H, I) compute dtype
    topk_ids_ptr,  # (T, K) int32 or int64; ids outside [0, E) are guarded (kernels/ids.py)
    topk_weights_ptr,  # (T, K) fp32
    y_ptr,  # (T, H) compute dtype
    # sizes and strides (elements)
    H, I, E, T,
    stride_at, stride_we, stride_wr, stride_yt,
    # meta
    K: tl.constexpr,
    K_PAD: tl.constexpr,  # next power of two ≥ K
    BLOCK_H: tl.constexpr,  # hidden outputs per program (rows of the tile)
    BLOCK_I: tl.constexpr,  # columns of I per step
    USE_PDL: tl.constexpr,  # start streaming w2 before kernel 1 has finished (GPU only)
    PER_SLOT: tl.constexpr,  # the down tile's form (:func:`down_form`)
    K_FIRST: tl.constexpr = False,
):
    pid = tl.program_id(0)
    t = pid % T  # fastest: tokens side by side share w2 rows of common experts
    pid_h = pid // T
    # the first BLOCK_I columns of every routed expert's rows: they do not depend on kernel 1
    wv = _down_chunk(w2_ptr, topk_ids_ptr, H, I, E, stride_we, stride_wr, t, pid_h, 0, K, K_PAD, BLOCK_H, BLOCK_I,
                     PER_SLOT, K_FIRST)
    if USE_PDL:
        gdc_wait()  # kernel 1 has finished and its intermediate is visible
    _down_tile(act_ptr, w2_ptr, topk_ids_ptr, topk_weights_ptr, y_ptr, H, I, E, stride_at, stride_we, stride_wr,
               stride_yt, t, pid_h, wv, K, K_PAD, BLOCK_H, BLOCK_I, "", PER_SLOT, K_FIRST)
