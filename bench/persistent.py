"""Warp decode in one persistent kernel: both phases of ``warpdecode/kernels/warp_pair.py`` in one
launch, a grid barrier between them (schedule ``"fused"``). A research schedule, beside the package:
the tuner's step here (``python -m bench tune --paths fused``) times it against the tuned pair, and the
shipped H200 table never picks it (notebook 8, ``docs/design.md``).

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

Here: the kernel; :func:`moe_fused` (inputs checked as ``warpdecode.moe`` checks them) and its launcher
:func:`moe_warp_fused`; the config (:func:`default_fused`, a table bucket's ``"fused"`` entry,
:func:`check_fused`); the tuner's step (:func:`fused_candidates`, :func:`tune_fused`, :func:`tune`).
"""

from __future__ import annotations

from functools import partial

import torch
import triton
import triton.language as tl

from warpdecode import _alloc, _runtime, configs
from warpdecode import tuner as tn
from warpdecode.checks import check_kernel_device, check_moe_inputs
from warpdecode.kernels import warp_pair as kp
from warpdecode.kernels.warp_pair import _down_chunk, _down_tile, _gate_up_tile
from warpdecode.presets import MoEShape, get_preset
from warpdecode.quant import is_fp8


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
    topk_ids_ptr,  # (T, K) int32 or int64; ids outside [0, E) are guarded (warpdecode/kernels/ids.py)
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
    PER_SLOT: tl.constexpr,  # the down tile's form (warp_pair.down_form)
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


# --- The launcher: a grid the barrier can open, and the barrier's buffer

#: Polls of the barrier before a program gives up (about a second): a safety net, never reached.
MAX_SPINS = 1 << 20

_barriers: dict = {}  # device index -> int32 [count, generation, timed_out]: timed_out 1, a launch gave up
_resident: dict = {}  # compiled-kernel key -> programs one SM holds at once


def barrier_state(device=None) -> torch.Tensor:
    """This device's grid-barrier buffer (zeroed once); concurrent fused launches on one device must not run."""
    device = torch.device(device or torch.cuda.current_device())
    if device.index not in _barriers:
        _barriers[device.index] = torch.zeros(3, dtype=torch.int32, device=device)
    return _barriers[device.index]


def programs_per_sm(regs_per_thread: int, num_warps: int, shared: int, *, regs: int = 65536,
                    threads: int = 2048, smem: int = 233472, programs: int = 32) -> int:
    """Programs one SM holds by registers (per warp, units of 256), threads, shared memory and 32."""
    regs_per_warp = -(-regs_per_thread * 32 // 256) * 256
    by_regs = regs // max(1, regs_per_warp * num_warps)
    by_warps = threads // (32 * num_warps)
    by_shared = smem // (shared + 1024) if shared else programs
    return max(0, min(by_regs, by_warps, by_shared, programs))


def _programs_per_sm(compiled, num_warps: int, props) -> int:
    """:func:`programs_per_sm` with this GPU's reported limits (Hopper's where torch reports none)."""
    return programs_per_sm(compiled.n_regs, num_warps, compiled.metadata.shared,
                           regs=getattr(props, "regs_per_multiprocessor", 65536),
                           threads=getattr(props, "max_threads_per_multi_processor", 2048),
                           smem=getattr(props, "shared_memory_per_multiprocessor", 233472))


def fused_grid(kernel, args, meta: dict, cfg: dict, device) -> tuple:
    """programs_per_sm × SMs, lowered to the compiled kernel's occupancy so that the barrier can open."""
    props = torch.cuda.get_device_properties(device)
    key = (tuple(a.dtype for a in args if isinstance(a, torch.Tensor)), tuple(sorted(meta.items())))
    if key not in _resident:
        compiled = kernel.warmup(*args, PHASE=0, grid=(1,), **meta)
        compiled._init_handles()  # loads the binary, which fills in n_regs
        _resident[key] = _programs_per_sm(compiled, meta["num_warps"], props)
    per_sm = min(cfg["programs_per_sm"], _resident[key])
    if per_sm < 1:
        raise RuntimeError(f"warp_fused_kernel with {cfg} cannot fit one program on an SM")
    return (per_sm * props.multi_processor_count,)


def moe_warp_fused(x, w13, w2, topk_weights, topk_ids, cfg: dict, act_dtype=torch.float32):
    """Both phases in one persistent launch (two in the interpreter), on validated, contiguous inputs. cfg:
    ``{"gate_up": {"BLOCK_I", "BLOCK_H"}, "down": {"BLOCK_H", "BLOCK_I"}, "num_warps", "programs_per_sm"}``;
    grid by :func:`fused_grid`."""
    T, H = x.shape
    E, two_i, _ = w13.shape
    I = two_i // 2  # noqa: E741
    K = topk_ids.shape[1]
    act = _alloc.empty(T * K, I, dtype=act_dtype, device=x.device)
    y = _alloc.empty(T, H, dtype=x.dtype, device=x.device)
    gu, dn = cfg["gate_up"], cfg["down"]
    per_slot, k_first = kp.down_form({**dn, "num_warps": cfg["num_warps"]}, K, w2.element_size(), persistent=True)
    meta = dict(K=K, K_PAD=triton.next_power_of_2(K), PER_SLOT=per_slot, K_FIRST=k_first, GU_BLOCK_I=gu["BLOCK_I"],
                GU_BLOCK_H=gu["BLOCK_H"], DN_BLOCK_H=dn["BLOCK_H"], DN_BLOCK_I=dn["BLOCK_I"], MAX_SPINS=MAX_SPINS,
                num_warps=cfg["num_warps"], num_stages=1)

    def args(barrier):
        return (x, w13, w2, topk_ids, topk_weights, act, y, barrier, H, I, E, T, x.stride(0), w13.stride(0),
                w13.stride(1), w2.stride(0), w2.stride(1), act.stride(0), y.stride(0))

    if _runtime.INTERPRET:
        units = max(T * K * triton.cdiv(I, gu["BLOCK_I"]), T * triton.cdiv(H, dn["BLOCK_H"]))
        grid = (min(units, 7),)  # a few programs, so the interpreter walks the persistent loops
        for phase in (1, 2):
            warp_fused_kernel[grid](*args(None), PHASE=phase, **meta)
        return y

    launch_args = args(barrier_state(x.device))
    grid = fused_grid(warp_fused_kernel, launch_args, meta, cfg, x.device)
    warp_fused_kernel[grid](*launch_args, PHASE=0, **meta)
    return y


moe_warp_fused.kernel = warp_fused_kernel  # what tuner.precompile checks a candidate's new binaries of for spills


# --- The config: a table bucket's "fused" entry, else the default; checked as the package checks its tiles

#: The persistent config's launch parameters and tiles, (required, optional) by the rule each follows
#: (``warpdecode.configs.RULES``), checked as the package checks its own tiles (``configs.check_tile``).
FUSED_LAUNCH = ({"num_warps": "warps", "programs_per_sm": "count"}, {})
FUSED_TILE = ({"BLOCK_I": "pow2", "BLOCK_H": "pow2"}, {})


def check_fused(cfg, where: str = "fused") -> dict:
    """A persistent config (:func:`moe_warp_fused`'s ``cfg``); else ``configs.ConfigError`` naming ``where``."""
    configs.check_tile(cfg, FUSED_LAUNCH, where)
    for part in ("gate_up", "down"):
        configs._part(cfg, part, FUSED_TILE, where)
    return cfg


def default_fused(H: int, I: int, K: int) -> dict:  # noqa: E741
    """The persistent kernel's default: eight warps, one gate/up row per warp, down within 64 elements a thread."""
    if _runtime.INTERPRET:
        return {"gate_up": {"BLOCK_I": 4, "BLOCK_H": min(128, triton.next_power_of_2(H))},
                "down": {"BLOCK_H": 4, "BLOCK_I": min(64, triton.next_power_of_2(I))},
                "num_warps": 4, "programs_per_sm": 1}
    block_i = min(256, triton.next_power_of_2(I))
    rows = max(1, min(8, 64 * 32 * 8 // (K * block_i)))
    return {"gate_up": {"BLOCK_I": 8, "BLOCK_H": min(1024, triton.next_power_of_2(H))},
            "down": {"BLOCK_H": rows, "BLOCK_I": block_i}, "num_warps": 8, "programs_per_sm": 2}


def fused_config(H: int, I: int, E: int, K: int, T: int) -> dict:  # noqa: E741
    """The tuned bucket's ``"fused"`` entry (``python -m bench tune --paths fused`` writes it where the
    schedule won), else :func:`default_fused`."""
    return configs.warp_config(H, I, E, K, T).get("fused") or default_fused(H, I, K)


def moe_fused(x, w13, w2, topk_weights, topk_ids, *, config: dict | None = None, act_dtype=torch.float32):
    """``warpdecode.moe(..., method="warp")`` on the persistent schedule: inputs checked as ``moe`` checks
    them, ids guarded in the kernel; ``config`` a persistent config (default :func:`fused_config`), checked.
    16-bit weights only. Returns y (T, H) in x's dtype."""
    d = check_moe_inputs(x, w13, w2, topk_weights, topk_ids)
    if is_fp8(w13):
        raise ValueError("the persistent schedule reads 16-bit weights only; with FP8 weights warp decode runs the "
                         "two-kernel pair (warpdecode.moe)")
    check_kernel_device(x)
    if d.T == 0:
        return x.new_empty(0, d.H)
    cfg = check_fused(config or fused_config(d.H, d.I, d.E, d.K, d.T), "moe_fused's config")
    return moe_warp_fused(x.contiguous(), w13, w2, topk_weights.contiguous(), topk_ids.contiguous(), cfg, act_dtype)


# --- The tuner's step: every candidate against each bucket's tuned pair (python -m bench tune --paths fused)

#: ``python -m bench tune``'s steps: the package tuner's (``warpdecode.tuner.PATHS``) and ``fused`` after ``warp``.
PATHS = (tn.PATHS[0], "fused", *tn.PATHS[1:])


def fused_candidates(H: int, I: int, K: int):  # noqa: E741
    """The persistent kernel's configs: warps, gate/up rows per warp, down tile, programs per SM."""
    out = []
    for w, gu_rows, gu_cols in [(4, 4, 1024), (4, 8, 1024), (8, 8, 1024), (8, 8, 2048), (8, 16, 1024),
                                (16, 16, 512), (16, 16, 1024)]:
        gu_cols = min(gu_cols, max(256, triton.next_power_of_2(H)))
        for dn_cols in (256, 512):
            if dn_cols > max(256, triton.next_power_of_2(I)):
                continue
            dn_rows = max(1, min(w, 128 * 32 * w // (K * dn_cols)))
            for per_sm in (1, 2, 4):
                out.append({"gate_up": {"BLOCK_I": gu_rows, "BLOCK_H": gu_cols},
                            "down": {"BLOCK_H": dn_rows, "BLOCK_I": dn_cols},
                            "num_warps": w, "programs_per_sm": per_sm})
    return [c for i, c in enumerate(out) if c not in out[:i]]


def warm(shapes: list[MoEShape], log=print) -> dict:
    """Compile every candidate once, in parallel; the dropped ones, keyed as the package tuner keys them."""
    H, I = max(s.H for s in shapes), max(s.I for s in shapes)  # noqa: E741
    jobs = [(K, c) for K in sorted({s.K for s in shapes}) for c in fused_candidates(H, I, K)]
    res = tn.precompile([(moe_warp_fused, K, c) for K, c in jobs])  # the package tuner's pool and spill check
    bad = {tn._key("warp_fused", K, c): r for (K, c), r in zip(jobs, res, strict=True) if r is not True}
    log(f"precompiled {len(jobs)} persistent candidates; dropped {len(bad)}: "
        + ", ".join(sorted({r.split("(")[0] for r in bad.values()})))
    return bad


def tune_fused(shape: MoEShape, buckets, reps: int = 30, dropped=(), log=print):
    """The persistent schedule against each bucket's tuned pair; kept where it is faster."""
    fused_c = [c for c in fused_candidates(shape.H, shape.I, shape.K)
               if tn._key("warp_fused", shape.K, c) not in dropped]
    L, w13s, w2s = tn._layer_copies(shape)
    out = []
    for T, cfg in buckets:
        xs, ids, tws = tn._warp_inputs(shape, T, L)
        t_pair = tn._time(tn._over_layers(partial(tn._warp_pair, c_gu=cfg["gate_up"], c_dn=cfg["down"]), xs, w13s,
                                          w2s, ids, tws), reps)
        t_fused, c_fused = tn._best([(tn._time(tn._over_layers(partial(moe_warp_fused, cfg=c), xs, w13s, w2s, tws,
                                                               ids), reps), c) for c in fused_c])
        log(f"warp {shape.name} T={T}: split {t_pair / L:.2f} us; fused {t_fused / L:.2f} us {c_fused}")
        bucket = {"gate_up": cfg["gate_up"], "down": cfg["down"],
                  "measured_us": {"split": round(t_pair / L, 2), "fused": round(t_fused / L, 2)}}
        if t_fused < t_pair:
            bucket["fused"] = c_fused
        out.append([T, bucket])
    w13s = w2s = None
    torch.cuda.empty_cache()
    return out


def tune(shapes, paths=PATHS, path=None, log=print) -> None:
    """``python -m bench tune``: the package tuner's steps of ``paths`` (``warpdecode.tuner.tune``) with
    ``fused`` between ``warp`` (the pair it times against) and the rest (``grouped`` keeps its entries),
    each shape's buckets merged into ``path`` (default the shipped table) under its lock."""
    shapes = [get_preset(s) if isinstance(s, str) else s for s in shapes]
    if "fused" not in paths:
        tn.tune(shapes, paths=list(paths), path=path)
        return
    path = path or configs.tuned_file()
    if "warp" in paths:
        tn.tune(shapes, paths=["warp"], path=path)
    dropped = warm(shapes, log=log)
    for shape in shapes:
        key = configs.shape_key(shape.H, shape.I, shape.E, shape.K)
        pair = configs.for_this_release(configs._read(path)).get("warp", {}).get(key)
        if not pair:
            raise ValueError(f"fused times against the tuned pair: tune {shape.name} with 'warp' first")
        new = tune_fused(shape, pair, dropped=dropped, log=log)
        configs.update_table(path, lambda current, new=new, key=key: {"warp": {key: new}})
        log(f"tuned {shape.name} fused, wrote {path}")
    rest = [p for p in paths if p not in ("warp", "fused")]
    if rest:
        tn.tune(shapes, paths=rest, path=path)
