"""Warp decode in one persistent kernel: both phases of ``warp_pair.py`` in one launch, a grid
barrier between them (schedule ``"fused"``).

    one launch of P programs, all resident at once; program p:
      for unit in p, p+P, …:  a[pair, i-block] = warp_pair's gate/up tile        (pair fastest)
      wv = the first w2 columns of its first down unit                         (independent of a)
      grid barrier                                                             (every a stored, visible)
      for unit in p, p+P, …:  y[t, h-block] = warp_pair's down tile, from wv    (token fastest)

Byte ledger: the pair's (``warp_pair.py``), plus the barrier: one atomic add per program and its
polls, on 12 bytes. Minimum: U·3·I·H·2 B for the U distinct routed experts.

One launch ramp serves both phases; a program done with gate/up streams its down rows while it
waits. The barrier needs every program resident (the grid is sized from the compiled occupancy) and
gives up after ``MAX_SPINS`` polls with a flag. The interpreter runs ``PHASE`` 1, then 2. T unspecialized.
"""

import triton
import triton.language as tl

from .warp_pair import _down_chunk, _down_tile, _gate_up_tile


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
    topk_ids_ptr,  # (T, K) int32 or int64; ids outside [0, E) are guarded (kernels/ids.py)
    topk_weights_ptr,  # (T, K) fp32
    act_ptr,  # (T*K, I) fp32 or compute dtype: scratch between the phases
    y_ptr,  # (T, H) compute dtype
    barrier_ptr,  # (3,) int32: count, generation, timed-out flag; count 0 between launches
    # sizes
    H,
    I,
    E,
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
    PER_SLOT: tl.constexpr,  # the down tile's form (warp_pair.PER_SLOT, warp_pair.K_FIRST)
    K_FIRST: tl.constexpr = False,
):
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    if PHASE == 0:
        generation = tl.atomic_add(barrier_ptr + 1, 0, sem="relaxed", scope="gpu")  # before anyone can open it

    if PHASE != 2:  # gate/up: units of GU_BLOCK_I neurons of one pair, the pair varying fastest
        num_pairs = T * K
        for unit in range(pid, num_pairs * tl.cdiv(I, GU_BLOCK_I), num_programs):
            _gate_up_tile(x_ptr, w13_ptr, topk_ids_ptr, topk_weights_ptr, act_ptr, H, I, E, K, stride_xt,
                          stride_w13e, stride_w13r, stride_at, unit % num_pairs, unit // num_pairs, GU_BLOCK_I,
                          GU_BLOCK_H, GU_BLOCK_H, BAD_BY_BOUND=True)

    if PHASE != 1:  # down: units of DN_BLOCK_H outputs of one token, the token varying fastest
        # the first unit's first columns do not depend on the intermediate: load them before waiting
        wv = _down_chunk(w2_ptr, topk_ids_ptr, H, I, E, stride_w2e, stride_w2r, pid % T, pid // T, 0,
                         K, K_PAD, DN_BLOCK_H, DN_BLOCK_I, PER_SLOT, K_FIRST)
        if PHASE == 0:
            _grid_barrier(barrier_ptr, generation, num_programs, MAX_SPINS)
        for unit in range(pid, T * tl.cdiv(H, DN_BLOCK_H), num_programs):
            if unit != pid:
                wv = _down_chunk(w2_ptr, topk_ids_ptr, H, I, E, stride_w2e, stride_w2r, unit % T, unit // T, 0,
                                 K, K_PAD, DN_BLOCK_H, DN_BLOCK_I, PER_SLOT, K_FIRST)
            # (PHASE 0: the intermediate other SMs stored, read from L2, past this SM's L1)
            _down_tile(act_ptr, w2_ptr, topk_ids_ptr, topk_weights_ptr, y_ptr, H, I, E, stride_at, stride_w2e,
                       stride_w2r, stride_yt, unit % T, unit // T, wv, K, K_PAD, DN_BLOCK_H, DN_BLOCK_I,
                       ".cg" if PHASE == 0 else "", PER_SLOT, K_FIRST)
