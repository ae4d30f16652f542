"""Search launch configurations on the GPU into ``tuned/<GPU>.json`` (:func:`tune`) or the user's cache
(:func:`tune_shape`), as vLLM's ``benchmark_moe.py --tune``: candidates compiled in parallel (dropped if rejected
or spilling), timed alone in a CUDA graph over layer copies (weights from HBM), the fastest kept per token bucket.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from multiprocessing import get_context

import torch
import triton

from . import _runtime, configs
from . import expert as ex
from . import warp as wp
from .configs import cache_file, crossover_of, default_grouped_down, shape_key, tuned_file
from .kernels import expert as kx
from .kernels import warp_grouped as kg
from .kernels import warp_pair as kp
from .presets import MoEShape, get_preset
from .quant import FORMATS, quantize_experts
from .workload import capture, make_inputs, make_layers, num_copies, replay_ms

WARP_T = [1, 2, 4, 8, 16]
EXPERT_T = [1, 8, 32, 128, 256]
PATHS = ("warp", "grouped", "expert", "expert_swap")
#: What FP8 weights tune here: the expert path's tiles (the FP8 pair's tiles: ``python -m bench.fp8``).
FP8_PATHS = ("expert", "expert_swap")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}

#: The dtype timed; tables are keyed by shape alone (bf16 and fp16 move the same bytes).
_DTYPE = torch.bfloat16


@contextlib.contextmanager
def _timed_dtype(dtype):
    global _DTYPE
    before, _DTYPE = _DTYPE, dtype
    try:
        yield
    finally:
        _DTYPE = before


def _fits(rows: int, warps: int, columns: int) -> bool:
    """Every warp has work: a row spreads over at most columns / 256 warps (8 bf16 per lane)."""
    return warps <= rows * max(1, columns // 256)


def warp_candidates(H: int, I: int, K: int):  # noqa: E741
    """(gate/up, down) tiles by rows per warp, column width and stages, down within 256 elements a thread."""
    rows_warps = [(1, 1), (2, 2), (4, 4), (8, 8), (2, 1), (4, 2), (8, 4), (16, 8),
                  (1, 2), (1, 4), (1, 8), (2, 4), (2, 8), (4, 8)]
    gate_up = [{"BLOCK_I": r, "BLOCK_H": c, "num_warps": w, "num_stages": s}
               for (r, w), c, s in itertools.product(rows_warps, [256, 512, 1024, 2048], [1, 3])
               if c <= max(256, triton.next_power_of_2(H)) and _fits(r, w, c)]
    down = [{"BLOCK_H": r, "BLOCK_I": c, "num_warps": w, "num_stages": 1}
            for (r, w), c in itertools.product(rows_warps, [256, 512, 1024])
            if c <= max(256, triton.next_power_of_2(I)) and r * K * c // (32 * w) <= 256
            and _fits(r, w, c)]
    return gate_up, down


def grouped_candidates():
    """The grouped gate/up kernel's tiles: 32–128 neurons × 64–256 columns, 4 or 8 warps, 2–4 stages."""
    return [{"BLOCK_I": r, "BLOCK_H": c, "num_warps": w, "num_stages": st}
            for r, c, w, st in itertools.product([32, 64, 128], [64, 128, 256], [4, 8], [2, 3, 4])
            if not (r == 32 and w == 8)]


def grouped_down_candidates():
    """The grouped down tiles that won somewhere (docs/design.md) and their neighbours, 3 or 4 stages."""
    return [{"BLOCK_H": r, "BLOCK_I": c, "num_warps": w, "num_stages": st}
            for (r, c, w), st in itertools.product(
                [(32, 128, 2), (64, 64, 4), (64, 128, 4), (64, 256, 4), (128, 64, 4), (128, 128, 8)], [3, 4])]


def gemm_candidates(group_m: int = 1):
    """Expert GEMM tiles near the ones vLLM's tuned H100/H200 tables pick for decode and batch."""
    out = [{"BLOCK_N": n, "BLOCK_K": k, "GROUP_M": group_m, "num_warps": 4, "num_stages": s}
           for n, k, s in itertools.product([64, 128], [64, 128, 256], [3, 4])]
    out += [{"BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": group_m, "num_warps": 8, "num_stages": 4},
            {"BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": group_m, "num_warps": 8, "num_stages": 3},
            {"BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": group_m, "num_warps": 8, "num_stages": 4},
            {"BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": group_m, "num_warps": 8, "num_stages": 4},
            {"BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": group_m, "num_warps": 4, "num_stages": 5}]
    return out


def half_m_variants(timed, block_m: int, best: int = 4):
    """The ``best`` fastest of ``timed`` [(µs, tile)] again with ``HALF_M``; none at BLOCK_M 16."""
    if block_m < 32:
        return []
    ranked = sorted([tc for tc in timed if tc[0] is not None], key=lambda tc: tc[0])
    return [dict(c, HALF_M=True) for _, c in ranked[:best]]


def for_weights(tiles, weights: str | None):
    """``tiles`` as FP8 weights of format ``weights`` take them: each K step within one scale group
    (``BLOCK_K`` at most the format's group), duplicates dropped; unchanged for 16-bit weights."""
    if weights is None:
        return list(tiles)
    group_k = configs.FP8_GROUP_K[weights]
    out = []
    for c in tiles:
        c = dict(c, BLOCK_K=min(c["BLOCK_K"], group_k))
        if c not in out:
            out.append(c)
    return out


def block_m_candidates(T: int, shape: MoEShape):
    """BLOCK_M 16, then 32, 64 and 128 past 2, 8 and 32 pairs per expert."""
    return [16] + [bm for bm, least in ((32, 2), (64, 8), (128, 32)) if T * shape.K / shape.E > least]


def group_m_candidates(T: int, shape: MoEShape, block_m: int):
    """GROUP_M 8 as well once an expert holds more than one M block (its blocks share weights via L2)."""
    return [1, 8] if T * shape.K / shape.E > block_m / 2 else [1]


# --- parallel compilation: a tiny launch per candidate, same specialization, fills Triton's disk cache
_KERNEL_OF = {"warp_gate_up": kp.warp_gate_up_kernel, "warp_down": kp.warp_down_kernel,
              "grouped_gate_up": kg.warp_gate_up_grouped_kernel, "grouped_down": kg.warp_down_grouped_kernel,
              "gate_up": kx.grouped_gate_up_kernel, "down": kx.grouped_down_kernel}


def _compiled_for(kernel) -> dict:
    """This process's compiled binaries of ``kernel`` on the current GPU, by specialization key."""
    return kernel.device_caches[torch.cuda.current_device()][0]


def _warm(job):
    """Launch one candidate on a tiny problem: True, or why it is dropped (rejected, or it spills). ``kind``: a
    name of :data:`_KERNEL_OF`, or a module-level ``launch(x, w13, w2, tw, ids, cfg)`` with its ``kernel``."""
    kind, K, cfg = job
    kind, _, weights = kind.partition(":") if isinstance(kind, str) else (kind, "", "")
    kernel = kind.kernel if callable(kind) else _KERNEL_OF[kind]
    torch.cuda.set_device(0)
    H = I = 272  # noqa: E741  divisible by 16 like every preset, small
    E, T = max(K, 4), 3
    x = torch.randn(T, H, device="cuda", dtype=torch.bfloat16)
    w13 = torch.randn(E, 2 * I, H, device="cuda", dtype=torch.bfloat16)
    w2 = torch.randn(E, H, I, device="cuda", dtype=torch.bfloat16)
    ids = torch.stack([torch.randperm(E, device="cuda")[:K] for _ in range(T)]).to(torch.int32)
    tw = torch.rand(T, K, device="cuda")
    if weights:  # "gate_up:<format>": the GEMM on FP8 weights of that format
        w13, w2 = quantize_experts(w13, w2, weights)
    before = set(_compiled_for(kernel))
    try:
        if callable(kind):
            kind(x, w13, w2, tw, ids, cfg)
        elif kind == "warp_gate_up":
            wp.warp_gate_up(x, w13, ids, tw, cfg)
        elif kind == "warp_down":
            wp.warp_down(torch.randn(T * K, I, device="cuda"), w2, ids, tw, cfg, torch.bfloat16)
        elif kind == "grouped_gate_up":
            wp.warp_gate_up_grouped(x, w13, ids, tw, cfg)
        elif kind == "grouped_down":
            wp.warp_down_grouped(torch.randn(3, T * K, I, device="cuda").bfloat16(), w2, ids, tw, cfg, torch.bfloat16)
        else:  # the forms moe_expert runs: gather fused into gate/up's loads, scatter into down's stores,
            # the activations as it hands them over (FP8 weights: fp16 rows up to F16_ROWS_MAX_BLOCK_M)
            block_m, gcfg = cfg
            al = ex.align(ids, E, block_m)
            rows = ex.activation_rows(x, w13, "native", block_m)
            if kind == "gate_up":
                ex.gate_up(*ex.quantize(x, None, rows), w13, al, gcfg, gather_k=K)
            else:
                h = torch.randn(al.EM, I, device="cuda", dtype=torch.bfloat16)
                ex.down(*ex.quantize(h, al, rows), w2, al, tw, gcfg, scatter=True)
        torch.cuda.synchronize()
    except Exception as e:
        return repr(e)
    spills = [k.n_spills for key, k in _compiled_for(kernel).items() if key not in before]
    return True if not any(spills) else f"spills {max(spills)} bytes"


def _key(kind, K, cfg):
    return json.dumps([kind, K, cfg], sort_keys=True)


def precompile(jobs, workers: int | None = None):
    workers = workers or min(16, os.cpu_count() or 1)
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        return list(pool.map(_warm, jobs))


def _best(timed):
    timed = [(t, c) for t, c in timed if t is not None]
    return min(timed, key=lambda tc: tc[0])


def _time(step, reps):
    try:
        g, _ = capture(step)
    except Exception:  # out of resources at this shape
        torch.cuda.synchronize()
        return None
    t = statistics.median(replay_ms(g, reps=reps)) * 1e3
    del g
    return t


def _over_layers(fn, *columns):
    """A step that calls ``fn`` once per layer copy, with that copy's arguments."""
    rows = list(zip(*columns, strict=True))
    return lambda: [fn(*row) for row in rows]


def _layer_copies(shape: MoEShape, weights: str | None = None):
    """(L, w13s, w2s): enough weight copies that a timed step reads them from HBM; with ``weights`` (an FP8
    format) copies of that format, as many as put the same bytes past L2."""
    if weights is None:
        L = num_copies(shape)
        layers = make_layers(shape, L, dtype=_DTYPE)
    else:  # twice the copies of half the bytes, each quantized as it is made
        L = num_copies(shape, min_working_set=6.0, budget_bytes=120e9)
        layers = [quantize_experts(*make_layers(shape, 1, dtype=_DTYPE, seed=i)[0], weights) for i in range(L)]
    return L, [w for w, _ in layers], [w for _, w in layers]


def _warp_inputs(shape: MoEShape, T: int, L: int, seed: int = 3000):
    """(xs, topk_ids, topk_weights), one per layer copy, the same draw for every warp tuning pass."""
    inputs = make_inputs(shape, T, L, dtype=_DTYPE, seed=seed + T)
    return [i.x for i in inputs], [i.topk_ids for i in inputs], [i.topk_weights for i in inputs]


def _warp_pair(x, w13, w2, ids, tw, c_gu, c_dn):
    return wp.warp_down(wp.warp_gate_up(x, w13, ids, tw, c_gu), w2, ids, tw, c_dn, x.dtype)


def _grouped_pair(x, w13, w2, ids, tw, c_gu, c_dn):
    return wp.warp_down_grouped(wp.warp_gate_up_grouped(x, w13, ids, tw, c_gu), w2, ids, tw, c_dn, x.dtype)


def tune_warp(shape: MoEShape, Ts=WARP_T, reps: int = 30, dropped=(), log=print):
    """The pair per bucket: the best gate/up alone, then the down config fastest with it (timed as a pair)."""
    gate_up_c, down_c = warp_candidates(shape.H, shape.I, shape.K)
    gate_up_c = [c for c in gate_up_c if _key("warp_gate_up", 2, c) not in dropped]
    down_c = [c for c in down_c if _key("warp_down", shape.K, c) not in dropped]
    L, w13s, w2s = _layer_copies(shape)
    buckets = []
    for T in Ts:
        xs, ids, tws = _warp_inputs(shape, T, L)
        t_gu, c_gu = _best([(_time(_over_layers(partial(wp.warp_gate_up, cfg=c), xs, w13s, ids), reps), c)
                            for c in gate_up_c])
        t_pair, c_dn = _best([(_time(_over_layers(partial(_warp_pair, c_gu=c_gu, c_dn=c), xs, w13s, w2s, ids, tws),
                                     reps), c)
                              for c in down_c])
        log(f"warp {shape.name} T={T}: gate/up {t_gu / L:.2f} us {c_gu}; both {t_pair / L:.2f} us, down {c_dn}")
        buckets.append([T, {"gate_up": c_gu, "down": c_dn, "measured_us": {"split": round(t_pair / L, 2)}}])
    w13s = w2s = None
    torch.cuda.empty_cache()
    return buckets


def tune_grouped(shape: MoEShape, buckets, reps: int = 30, dropped=(), log=print):
    """The grouped gate/up then down tile, kept where ≥ 1 % below the tuned pair over two routing draws."""
    gate_up_c = [c for c in grouped_candidates() if _key("grouped_gate_up", shape.K, c) not in dropped]
    down_c = [c for c in grouped_down_candidates() if _key("grouped_down", shape.K, c) not in dropped]
    L, w13s, w2s = _layer_copies(shape)
    out = []
    for T, cfg in buckets:
        if not (T >= 2 and T * shape.K >= shape.E / 2):  # timed only where tokens start to share experts
            out.append([T, cfg])
            continue
        draws = [_warp_inputs(shape, T, L), _warp_inputs(shape, T, L, seed=6000)]

        def timed(c_gu, c_dn, draw, grouped=True):
            step = partial(_grouped_pair if grouped else _warp_pair, c_gu=c_gu, c_dn=c_dn)
            xs, ids, tws = draw
            return _time(_over_layers(step, xs, w13s, w2s, ids, tws), reps)

        _, c_gu = _best([(timed(c, default_grouped_down(), draws[0]), c) for c in gate_up_c])
        _, c_dn = _best([(timed(c_gu, c, draws[0]), c) for c in down_c])
        t_pair = [timed(cfg["gate_up"], cfg["down"], d, grouped=False) / L for d in draws]
        t_grouped = [timed(c_gu, c_dn, d) / L for d in draws]
        log(f"warp {shape.name} T={T}: split {' / '.join(f'{t:.2f}' for t in t_pair)} us; grouped "
            f"{' / '.join(f'{t:.2f}' for t in t_grouped)} us (two routing draws), gate/up {c_gu}, down {c_dn}")
        bucket = {k: v for k, v in cfg.items() if k != "grouped"}
        bucket["measured_us"] = {**cfg.get("measured_us", {}), "split": round(t_pair[0], 2),
                                 "grouped": round(t_grouped[0], 2)}
        if sum(t_grouped) < 0.99 * sum(t_pair):
            bucket["grouped"] = {"gate_up": c_gu, "down": c_dn}
        out.append([T, bucket])
    w13s = w2s = None
    torch.cuda.empty_cache()
    return out


def keep_schedules(old_buckets, new_buckets, retuned=()):
    """The re-tuned buckets, each old schedule timed against the pair (``grouped``; ``fused``, by
    ``bench/persistent.py``) kept where not ``retuned`` and ≥ 1 % faster."""
    old = {T: cfg for T, cfg in old_buckets}
    out = []
    for T, cfg in new_buckets:
        cfg = {**cfg, "measured_us": dict(cfg["measured_us"])}
        prev = old.get(T, {})
        for sched, t_old in prev.get("measured_us", {}).items():
            if sched == "split" or sched in retuned:
                continue
            cfg["measured_us"][sched] = t_old  # what it measured against the old pair
            if sched in prev and t_old < 0.99 * cfg["measured_us"]["split"]:
                cfg[sched] = prev[sched]
        out.append([T, cfg])
    return out


def _gemm_kind(gemm: str, weights: str | None) -> str:
    """A GEMM's precompile job kind: ``gate_up``/``down``, or ``gate_up:<format>`` on FP8 weights."""
    return gemm if weights is None else f"{gemm}:{weights}"


def _time_tiles(gemm: str, block_m: int, fn, columns, tiles, reps: int, dropped):
    """[(µs over the layer copies, tile)] of ``fn(*row, cfg=tile)`` for each tile the precompile kept."""
    return [(_time(_over_layers(partial(fn, cfg=c), *columns), reps), c)
            for c in tiles if _key(gemm, 2, [block_m, c]) not in dropped]


def tune_expert(shape: MoEShape, Ts=EXPERT_T, reps: int = 30, dropped=(), log=print, weights: str | None = None):
    """The expert path per bucket: for each BLOCK_M candidate the fastest gate/up tile, then the fastest down
    tile on its output; the BLOCK_M of the least sum kept. ``weights``: an FP8 format (weight-only GEMMs)."""
    L, w13s, w2s = _layer_copies(shape, weights)
    gu_kind, dn_kind = _gemm_kind("gate_up", weights), _gemm_kind("down", weights)
    buckets = []
    for T in Ts:
        inputs = make_inputs(shape, T, L, dtype=_DTYPE, seed=4000 + T)
        tws = [i.topk_weights for i in inputs]
        best = None
        for bm in block_m_candidates(T, shape):
            als = [ex.align(inp.topk_ids, shape.E, bm) for inp in inputs]
            # the token rows (the GEMM gathers them) as moe_expert hands them over: as they are, or fp16 rows
            rows = ex.activation_rows(inputs[0].x, w13s[0], "native", bm)
            a_, a_scales = zip(*(ex.quantize(inp.x, None, rows) for inp in inputs), strict=True)
            cands = for_weights([c for gm in group_m_candidates(T, shape, bm) for c in gemm_candidates(gm)], weights)
            gu_fn, gu_cols = partial(ex.gate_up, gather_k=shape.K), (a_, a_scales, w13s, als)
            gu = _time_tiles(gu_kind, bm, gu_fn, gu_cols, cands, reps, dropped)
            t_gu, c_gu = _best(gu + _time_tiles(gu_kind, bm, gu_fn, gu_cols, half_m_variants(gu, bm), reps, dropped))
            hs, h_scales = zip(*(ex.quantize(ex.gate_up(a, s, w13, al, c_gu, gather_k=shape.K), al, rows)
                                 for a, s, w13, al in zip(a_, a_scales, w13s, als, strict=True)), strict=True)
            dn_fn, dn_cols = partial(ex.down, scatter=True), (hs, h_scales, w2s, als, tws)
            dn = _time_tiles(dn_kind, bm, dn_fn, dn_cols, cands, reps, dropped)
            t_dn, c_dn = _best(dn + _time_tiles(dn_kind, bm, dn_fn, dn_cols, half_m_variants(dn, bm), reps, dropped))
            if best is None or t_gu + t_dn < best[0]:
                best = (t_gu + t_dn, {"BLOCK_M": bm, "gate_up": c_gu, "down": c_dn})
            log(f"expert {shape.name} T={T} BLOCK_M={bm}: gate/up {t_gu / L:.2f} us {c_gu}; "
                f"down {t_dn / L:.2f} us {c_dn}")
        buckets.append([T, best[1]])
    w13s = w2s = None
    torch.cuda.empty_cache()
    return buckets


SWAP_FORMS = {"plain": (), "swap gate/up": ("gate_up",), "swap down": ("down",), "swap both": ("gate_up", "down")}


def with_swap(cfg: dict, gemms, tma=()) -> dict:
    """The expert config with ``SWAP_AB`` on the named GEMMs only (``gemms=()``: plain), ``W_TMA`` on ``tma``'s."""
    out = dict(cfg)
    for g in ("gate_up", "down"):
        tile = {k: v for k, v in cfg[g].items() if k not in ("SWAP_AB", "W_TMA")}
        out[g] = dict(tile, **({"SWAP_AB": True} if g in gemms else {}), **({"W_TMA": True} if g in tma else {}))
    return out


def tma_gemms(shape: MoEShape, cfg: dict, weights: str | None) -> tuple:
    """The GEMMs of ``cfg`` whose weight tiles TMA boxes can copy on ``shape`` (``expert.tma_box_problem``)."""
    elem = 1 if weights else _DTYPE.itemsize
    return tuple(g for g, (n, k) in ex.gemm_dims(shape.H, shape.I).items()
                 if ex.tma_box_problem(cfg[g], n, k, elem) is None)


def tune_expert_swap(shape: MoEShape, buckets, reps: int = 30, rounds: int = 2, log=print,
                     weights: str | None = None):
    """SWAP_AB per tuned expert bucket on gate/up, down or both, each form also with its weight tiles by TMA
    (``W_TMA``, on the GEMMs whose boxes tile the weights), kept where ≥ 1 % faster in all ``rounds``."""
    L, w13s, w2s = _layer_copies(shape, weights)
    out = []
    for T, cfg in buckets:
        inputs = make_inputs(shape, T, L, dtype=_DTYPE, seed=4000 + T)
        cols = ([i.x for i in inputs], w13s, w2s, [i.topk_weights for i in inputs], [i.topk_ids for i in inputs])
        tma = tma_gemms(shape, cfg, weights)
        forms = [(form, with_swap(cfg, gemms)) for form, gemms in SWAP_FORMS.items()]  # "plain" first
        if tma:
            forms += [(f"{form} + tma", with_swap(cfg, gemms, tma)) for form, gemms in SWAP_FORMS.items()]
        timed = [[_time(_over_layers(partial(ex.moe_expert, config=c), *cols), reps) for _, c in forms]
                 for _ in range(rounds)]
        faster = [i for i in range(1, len(forms))
                  if all(r[0] is not None and r[i] is not None and r[i] <= 0.99 * r[0] for r in timed)]
        pick = min(faster, key=lambda i: sum(r[i] for r in timed)) if faster else 0
        log(f"expert {shape.name} T={T}: " + "; ".join(
            f"{form} " + "/".join(f"{r[i] / L:.2f}" if r[i] else "-" for r in timed) + " us"
            for i, (form, _) in enumerate(forms)) + f" -> {forms[pick][0]}")
        out.append([T, forms[pick][1]])
    w13s = w2s = None
    torch.cuda.empty_cache()
    return out


def warm_all(shapes: list[MoEShape], paths=("warp", "expert"), log=print, weights: str | None = None):
    """Compile every candidate once, in parallel; returns the dropped ones (only warp down depends on K).
    ``weights``: the expert GEMMs' candidates on FP8 weights of that format."""
    jobs = []
    H, I = max(s.H for s in shapes), max(s.I for s in shapes)  # noqa: E741
    if "warp" in paths:
        jobs += [("warp_gate_up", 2, c) for c in warp_candidates(H, I, 2)[0]]
        jobs += [("warp_down", K, c) for K in sorted({s.K for s in shapes}) for c in warp_candidates(H, I, K)[1]]
    if "grouped" in paths:
        jobs += [("grouped_gate_up", K, c) for K in sorted({s.K for s in shapes}) for c in grouped_candidates()]
        jobs += [("grouped_down", K, c) for K in sorted({s.K for s in shapes}) for c in grouped_down_candidates()]
    if "expert" in paths:
        gu_kind, dn_kind = _gemm_kind("gate_up", weights), _gemm_kind("down", weights)
        for bm, gm in itertools.product([16, 32, 64, 128], [1, 8]):
            for c in for_weights(gemm_candidates(group_m=gm), weights):
                for tile in [c] if bm < 32 else [c, dict(c, HALF_M=True)]:
                    jobs += [(gu_kind, 2, (bm, tile)), (dn_kind, 2, (bm, tile))]
    res = precompile(jobs)
    bad = {_key(*j): r for j, r in zip(jobs, res, strict=True) if r is not True}
    log(f"precompiled {len(jobs)} candidates; dropped {len(bad)}: "
        + ", ".join(sorted({r.split("(")[0] for r in bad.values()})))
    return bad


def require_gpu(what: str = "tune") -> None:
    """Raise, naming what is missing, unless kernels compile for a CUDA GPU here."""
    if _runtime.DEFAULT_DEVICE.type == "cuda":
        return
    if not torch.cuda.is_available():
        why = f"torch {torch.__version__} sees no CUDA device (torch.cuda.is_available() is False)"
    else:
        why = "TRITON_INTERPRET is set, so kernels run in Triton's CPU interpreter"
    raise RuntimeError(f"{what} needs a CUDA GPU: it times launch configurations, and {why}. Nothing was written.")


def shape_of(H: int, I: int, E: int, K: int) -> MoEShape:  # noqa: E741
    """The layer shape ``H4096-I1536-E128-K8``: any layer, not only a preset."""
    return MoEShape(f"H{H}-I{I}-E{E}-K{K}", H=H, I=I, E=E, K=K)


def _progress(steps: list, desc: str):
    """(steps, log): a tqdm bar and its ``write`` where tqdm is installed, else the steps printed."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        def each():
            for i, step in enumerate(steps, 1):
                print(f"[{i}/{len(steps)}] {desc}: {' '.join(map(str, step))}", flush=True)
                yield step

        return each(), print
    bar = tqdm(steps, desc=desc, file=sys.stdout)
    return bar, bar.write


def _buckets(Ts):
    """(warp T's, expert T's): the defaults, or ``Ts`` (warp decode's up to 16)."""
    if not Ts:
        return WARP_T, EXPERT_T
    Ts = sorted(set(Ts))
    return [t for t in Ts if t <= WARP_T[-1]], Ts


def check_weights(weights: str | None, paths) -> None:
    """``weights`` None or an FP8 format, whose tuning steps are :data:`FP8_PATHS`; else a ValueError."""
    if weights is None:
        return
    if weights not in FORMATS:
        raise ValueError(f"weights must be None or an FP8 format of {FORMATS}, got {weights!r}")
    other = [p for p in paths if p not in FP8_PATHS]
    if other:
        raise ValueError(f"with FP8 weights the tuner searches the expert path's tiles ({', '.join(FP8_PATHS)}), got "
                         f"{other}: the FP8 pair's tiles are searched by python -m bench.fp8, in a checkout")


def tune(shapes, *, paths=PATHS, Ts=None, path=None, crossover: bool = False, log=None,
         weights: str | None = None) -> dict:
    """Tune ``shapes`` (preset names or :class:`MoEShape`) and return the table, each step merged into
    ``path`` (default: the shipped ``warpdecode/tuned/<GPU>.json``) under its lock. ``paths``: steps of
    :data:`PATHS`; ``Ts``: token buckets (:func:`_buckets`); ``crossover``: also time both paths there and
    store ``crossover`` and ``crossover_evidence``; ``log``: print-like (default: the progress bar's).
    ``weights``: an FP8 format: the weight-only expert path's tiles (:data:`FP8_PATHS`) on weights of that
    format, and the crossover between it and the FP8 pair, as the ``<family>_<format>`` families."""
    check_weights(weights, paths)
    suffix = "" if weights is None else f"_{weights}"
    shapes = [get_preset(s) if isinstance(s, str) else s for s in shapes]
    path = path or tuned_file()
    table = configs._read(path)  # a bad file is named in a warning, and overwritten by the first write
    if configs.other_release(table):  # warp entries and crossovers of another release: stale here
        print(f"{path}: warp decode's entries and the crossovers were tuned on triton {table['triton']}, this is "
              f"{triton.__version__}: they are dropped", flush=True)
        table = configs.for_this_release(table)
    warp_T, expert_T = _buckets(Ts)
    if not warp_T:
        paths = [p for p in paths if p not in ("warp", "grouped")]
    steps = [(s.name, p) for s in shapes for p in PATHS if p in paths] + [(s.name, "crossover") for s in shapes
                                                                           if crossover]
    steps, write = _progress(steps, "tune")
    log = log or write
    dropped = warm_all(shapes, paths, log=log, weights=weights)
    by_name = {s.name: s for s in shapes}
    t0 = time.time()
    for name, step in steps:
        shape = by_name[name]
        key = shape_key(shape.H, shape.I, shape.E, shape.K)
        if step == "warp":
            old = table.get("warp", {}).get(key, [])
            new = {"warp": keep_schedules(old, tune_warp(shape, Ts=warp_T, dropped=dropped, log=log),
                                          retuned=[p for p in paths if p != "warp"])}
        elif step == "grouped":  # one read of each routed expert's gate/up rows, against the tuned pair
            new = {"warp": tune_grouped(shape, table["warp"][key], dropped=dropped, log=log)}
        elif step == "expert":
            new = {"expert" + suffix: tune_expert(shape, Ts=expert_T, dropped=dropped, log=log, weights=weights)}
        elif step == "expert_swap":  # SWAP_AB on top of the tuned expert tiles
            if key not in table.get("expert" + suffix, {}):
                raise ValueError(f"expert_swap refines tuned expert tiles: tune {shape.name} with 'expert' first")
            new = {"expert" + suffix: tune_expert_swap(shape, table["expert" + suffix][key], log=log,
                                                       weights=weights)}
        else:  # the crossover, timed with what was just written
            xo, evidence = time_crossover(shape, sorted(set(warp_T) | set(expert_T)), path, log=log, weights=weights)
            new = {"crossover" + suffix: xo, "crossover_evidence" + suffix: evidence}
        # this shape's new entries merged into the file as it is now (another tuner's shapes kept)
        table = configs.update_table(path, lambda current, new=new, key=key: {f: {key: e} for f, e in new.items()})
        log(f"tuned {shape.name} {step} in {time.time() - t0:.0f} s, wrote {path}")
        t0 = time.time()
    return table


def time_crossover(shape: MoEShape, Ts, path, reps: int = 30, log=print, weights: str | None = None):
    """(crossover, evidence): both paths as ``moe`` runs them with ``path``'s configs at each T of ``Ts``;
    on FP8 weights of format ``weights``, the FP8 pair against the weight-only expert path."""

    shipped = path == tuned_file()
    L, w13s, w2s = _layer_copies(shape, weights)
    evidence = {}
    with configs.tables(shipped=shipped, cache=not shipped):
        for T in Ts:
            xs, ids, tws = _warp_inputs(shape, T, L, seed=1000)
            t_warp = _time(_over_layers(wp.moe_warp, xs, w13s, w2s, tws, ids), reps)
            t_expert = _time(_over_layers(ex.moe_expert, xs, w13s, w2s, tws, ids), reps)
            evidence[str(T)] = {"warp_us": round(t_warp / L, 3) if t_warp else None,
                                "expert_us": round(t_expert / L, 3) if t_expert else None}
            log(f"crossover {shape.name} T={T}: warp {evidence[str(T)]['warp_us']} us, "
                f"expert {evidence[str(T)]['expert_us']} us")
    w13s = w2s = None
    torch.cuda.empty_cache()
    xo = crossover_of(evidence)
    log(f"crossover {shape.name}: auto takes warp decode up to T = {xo}")
    return xo, evidence


def tune_shape(H: int, I: int, E: int, K: int, *, dtype="bf16", Ts=None, paths=PATHS, log=None,  # noqa: E741
               weights: str | None = None) -> dict:
    """Tune one shape into the user's cache (``configs.cache_file()``) with its ``auto`` crossover. ``dtype``:
    ``"bf16"``/``"fp16"`` or a torch dtype; ``Ts``: token buckets (default 1–16 warp, 1–256 expert); ``paths``:
    steps of :data:`PATHS`; ``weights``: an FP8 format, for layers whose experts are FP8 weights of it (the
    expert path's tiles and the crossover, :data:`FP8_PATHS`; ``paths`` left at the default means those).
    Returns the cached table. RuntimeError without a CUDA GPU (nothing written), ValueError for a bad
    ``dtype``, ``paths`` or ``weights``."""
    require_gpu("warpdecode.tune")
    if weights is not None and tuple(paths) == PATHS:
        paths = FP8_PATHS
    check_weights(weights, paths)
    dtype = DTYPES.get(dtype, dtype)
    if dtype not in DTYPES.values():
        raise ValueError(f"dtype must be one of {sorted(DTYPES)} (or torch.bfloat16/float16), got {dtype!r}")
    bad = [p for p in paths if p not in PATHS]
    if bad:
        raise ValueError(f"paths must be from {PATHS}, got {bad}")
    if shape_key(H, I, E, K) in configs._read(tuned_file()).get("warp" if weights is None else f"expert_{weights}", {}):
        print(f"the shipped table {tuned_file()} has this shape and is read before the cache: moe runs yours "
              "with WARPDECODE_TUNED=cache", flush=True)
    with _timed_dtype(dtype):
        return tune([shape_of(H, I, E, K)], paths=paths, Ts=Ts, path=cache_file(), crossover=True, log=log,
                    weights=weights)
