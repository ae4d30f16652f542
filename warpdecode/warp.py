"""Rung 4: warp decode's host side: the pair, grouped pair, persistent kernel and FP8 pair
(``kernels.warp_pair``, ``warp_grouped``, ``warp_persistent``, ``warp_fp8``)."""

from __future__ import annotations

import torch
import triton

from . import _alloc, _runtime
from .configs import check_warp, default_fused, default_grouped, default_grouped_down, warp_config
from .kernels import warp_fp8 as k8
from .kernels import warp_grouped as kg
from .kernels import warp_pair as kp
from .kernels import warp_persistent as kf
from .quant import is_fp8

#: Warp decode's schedules; a tuned bucket names its own by an entry of that name (schedule_of).
SCHEDULES = ("split", "grouped", "fused")


def schedule_of(cfg: dict) -> str:
    """The schedule a warp-decode config runs: ``fused`` or ``grouped`` where it has that entry, else ``split``."""
    return next((s for s in ("fused", "grouped") if s in cfg), "split")


#: Programmatic dependent launch between the two kernels (Hopper+; ``WARPDECODE_PDL=0`` turns it off).
USE_PDL = _runtime.USE_PDL


def warp_gate_up(x, w13, topk_ids, topk_weights, cfg: dict, act_dtype=torch.float32) -> torch.Tensor:
    """Kernel 1: (T*K, I) intermediate silu(gate)·up, FP32 by default (never rounded)."""
    T, H = x.shape
    I = w13.shape[1] // 2  # noqa: E741
    K = topk_ids.shape[1]
    act = _alloc.empty(T * K, I, dtype=act_dtype, device=x.device)
    grid = (T * K * triton.cdiv(I, cfg["BLOCK_I"]),)
    kp.warp_gate_up_kernel[grid](
        x, w13, topk_ids, topk_weights, act, H, I, w13.shape[0], T * K, K, x.stride(0), w13.stride(0), w13.stride(1),
        act.stride(0),
        BLOCK_I=cfg["BLOCK_I"], BLOCK_H=cfg["BLOCK_H"], USE_PDL=USE_PDL, SUB_H=kp.gate_up_slice(cfg),
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )
    return act


def warp_down(act, w2, topk_ids, topk_weights, cfg: dict, out_dtype) -> torch.Tensor:
    """Kernel 2: y (T, H) = Σ_j topk_weights[:, j] · w2[e_j] act_j, one FP32 accumulator per output."""
    E, H, I = w2.shape
    T, K = topk_ids.shape
    y = _alloc.empty(T, H, dtype=out_dtype, device=act.device)
    grid = (T * triton.cdiv(H, cfg["BLOCK_H"]),)
    per_slot, k_first = kp.down_form(cfg, K, w2.element_size())
    kp.warp_down_kernel[grid](
        act, w2, topk_ids, topk_weights, y, H, I, E, T, act.stride(0), w2.stride(0), w2.stride(1), y.stride(0),
        K=K, K_PAD=triton.next_power_of_2(K), BLOCK_H=cfg["BLOCK_H"], BLOCK_I=cfg["BLOCK_I"], USE_PDL=USE_PDL,
        PER_SLOT=per_slot, K_FIRST=k_first, num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
        **({"launch_pdl": True} if USE_PDL else {}),
    )
    return y


# --- The pair with FP8 weights, dequantized in registers (see warpdecode.kernels.warp_fp8)
def _fp8_meta(w, block: int, name: str) -> dict:
    if block % w.GROUP_K:
        raise ValueError(f"{name}={block} must be a multiple of the {w.FORMAT} scale group ({w.GROUP_K} columns)")
    return dict(GROUP_N=w.GROUP_N, GROUP_K=w.GROUP_K, E8M0=w.FORMAT == "mxfp8")


def warp_gate_up_fp8(x, w13, topk_ids, cfg: dict, act_dtype=torch.float32) -> torch.Tensor:
    """Kernel 1 with FP8 weights (``warpdecode.quant.FP8Weights``): (T*K, I) silu(gate)·up, FP32 by default."""
    T, H = x.shape
    I = w13.shape[1] // 2  # noqa: E741
    K = topk_ids.shape[1]
    act = _alloc.empty(T * K, I, dtype=act_dtype, device=x.device)
    q, s = w13.weight, w13.scale
    grid = (T * K * triton.cdiv(I, cfg["BLOCK_I"]),)
    k8.warp_gate_up_fp8_kernel[grid](
        x, q, s, topk_ids, act, H, I, w13.shape[0], T * K, K, w13.up_scale_row, x.stride(0), q.stride(0), q.stride(1),
        s.stride(0), s.stride(1), s.stride(2), act.stride(0),
        BLOCK_I=cfg["BLOCK_I"], BLOCK_H=cfg["BLOCK_H"], **_fp8_meta(w13, cfg["BLOCK_H"], "gate_up BLOCK_H"),
        USE_PDL=USE_PDL, num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )
    return act


#: The most slots the FP8 down kernel unrolls (every preset's K); past it a loop whose code does not grow.
STATIC_SLOTS_MAX = 8


def fp8_slot_loop(K: int) -> bool:
    """Whether the FP8 down kernel takes its slots in a run-time loop (``SLOT_LOOP``): K past ``STATIC_SLOTS_MAX``."""
    return K > STATIC_SLOTS_MAX


def warp_down_fp8(act, w2, topk_ids, topk_weights, cfg: dict, out_dtype) -> torch.Tensor:
    """Kernel 2 with FP8 weights: y (T, H) = Σ_j topk_weights[:, j] · (q · s)[e_j] act_j, in FP32."""
    E, H, I = w2.shape
    T, K = topk_ids.shape
    y = _alloc.empty(T, H, dtype=out_dtype, device=act.device)
    q, s = w2.weight, w2.scale
    grid = (T * triton.cdiv(H, cfg["BLOCK_H"]),)
    k8.warp_down_fp8_kernel[grid](
        act, q, s, topk_ids, topk_weights, y, H, I, E, T, act.stride(0), q.stride(0), q.stride(1),
        s.stride(0), s.stride(1), s.stride(2), y.stride(0),
        K=K, K_PAD=triton.next_power_of_2(K), BLOCK_H=cfg["BLOCK_H"], BLOCK_I=cfg["BLOCK_I"],
        **_fp8_meta(w2, cfg["BLOCK_I"], "down BLOCK_I"),
        USE_PDL=USE_PDL, SLOT_LOOP=fp8_slot_loop(K), num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
        **({"launch_pdl": True} if USE_PDL else {}),
    )
    return y


# --- One persistent kernel: both phases, a grid barrier between them (see warpdecode.kernels.warp_persistent)

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
    """Both phases in one persistent launch (two in the interpreter). cfg: ``{"gate_up": {"BLOCK_I",
    "BLOCK_H"}, "down": {"BLOCK_H", "BLOCK_I"}, "num_warps", "programs_per_sm"}``; grid by :func:`fused_grid`."""
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
            kf.warp_fused_kernel[grid](*args(None), PHASE=phase, **meta)
        return y

    launch_args = args(barrier_state(x.device))
    grid = fused_grid(kf.warp_fused_kernel, launch_args, meta, cfg, x.device)
    kf.warp_fused_kernel[grid](*launch_args, PHASE=0, **meta)
    return y


# --- Tokens that share an expert read its rows once (see warpdecode.kernels.warp_grouped)

#: Tokens per grouped launch: the N of its tensor-core tiles (padded to 16); more take several launches.
GROUPED_TOKENS = 16


def grouped_terms(w_dtype, act_dtype) -> int:
    """Terms of the grouped intermediate: 3 bf16 summing exactly to FP32 with bf16 weights, else 1."""
    return 3 if (w_dtype == torch.bfloat16 and act_dtype == torch.float32) else 1


def warp_gate_up_grouped(x, w13, topk_ids, topk_weights, cfg: dict, act_dtype=torch.float32) -> torch.Tensor:
    """Grouped kernel 1: (TERMS, T*K, I) weighted silu(gate)·up, one program per expert's rows, one launch
    per ``GROUPED_TOKENS`` tokens. cfg: ``{"BLOCK_I", "BLOCK_H", "num_warps", "num_stages"}``."""
    T, H = x.shape
    E, two_i, _ = w13.shape
    I = two_i // 2  # noqa: E741
    K = topk_ids.shape[1]
    terms = grouped_terms(w13.dtype, act_dtype)
    act = _alloc.empty(terms, T * K, I, dtype=torch.bfloat16 if terms == 3 else act_dtype, device=x.device)
    for t0 in range(0, T, GROUPED_TOKENS):
        n = min(GROUPED_TOKENS, T - t0)
        kg.warp_gate_up_grouped_kernel[(E * triton.cdiv(I, cfg["BLOCK_I"]),)](
            x[t0:], w13, topk_ids[t0:], topk_weights[t0:], act[:, t0 * K:], H, I, n, E, x.stride(0), w13.stride(0),
            w13.stride(1), act.stride(1), act.stride(0), K=K, K_PAD=triton.next_power_of_2(K),
            T_PAD=GROUPED_TOKENS, TERMS=terms, BLOCK_I=cfg["BLOCK_I"], BLOCK_H=cfg["BLOCK_H"], USE_PDL=USE_PDL,
            WIDEN=_runtime.INTERPRET,
            num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
        )
    return act


def warp_down_grouped(act, w2, topk_ids, topk_weights, cfg: dict, out_dtype) -> torch.Tensor:
    """Grouped kernel 2: y (T, H) from the terms, per expert and output block, FP32 scratch, rounded once."""
    E, H, I = w2.shape  # noqa: E741
    T, K = topk_ids.shape
    blocks = triton.cdiv(H, cfg["BLOCK_H"])
    chunks = triton.cdiv(T, GROUPED_TOKENS)
    # per block of tokens: FP32 sums, then arrival counts, zeroed each call: no state between calls
    row = GROUPED_TOKENS * H + triton.cdiv(blocks, 4) * 4
    scratch = torch.zeros(chunks, row, dtype=torch.int32, device=act.device)
    y = _alloc.empty(T, H, dtype=out_dtype, device=act.device)
    for c in range(chunks):
        t0, n = c * GROUPED_TOKENS, min(GROUPED_TOKENS, T - c * GROUPED_TOKENS)
        kg.warp_down_grouped_kernel[(E * blocks,)](
            act[:, t0 * K:], w2, topk_ids[t0:], topk_weights[t0:], y[t0:],
            scratch[c, :GROUPED_TOKENS * H].view(torch.float32), scratch[c, GROUPED_TOKENS * H:], H, I, n, E,
            act.stride(1), act.stride(0), w2.stride(0), w2.stride(1),
            y.stride(0), K=K, K_PAD=triton.next_power_of_2(K), T_PAD=GROUPED_TOKENS, TERMS=act.shape[0],
            BLOCK_H=cfg["BLOCK_H"], BLOCK_I=cfg["BLOCK_I"],
            WIDEN=_runtime.INTERPRET, num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
        )
    return y


def moe_warp(x, w13, w2, topk_weights, topk_ids, *, act_dtype=torch.float32, config: dict | None = None,
             schedule: str | None = None, out_dtype=None):
    """Warp decode on validated, contiguous inputs (``warpdecode.moe`` checks them first).

    act_dtype: the intermediate's dtype (default FP32, unrounded; x.dtype rounds it). config: a launch
    config (checked as tables are; default tuned, else the defaults). schedule: ``"split"`` (two kernels,
    PDL), ``"fused"`` (one persistent kernel), ``"grouped"`` (each expert's rows read once for all its
    tokens), or None (default: the config's, else ``"split"``). out_dtype: y's dtype (default x's); FP32
    keeps a partial unrounded (``"fused"`` then gives way to the pair). FP8 weights run the FP8 pair."""
    T, H = x.shape
    E, two_i, _ = w13.shape
    K = topk_ids.shape[1]
    if config is not None:  # a caller's own: checked as the tables are
        check_warp(config, w13.FORMAT if is_fp8(w13) else None, "moe_warp(config=...)")
    if is_fp8(w13):
        cfg = config or warp_config(H, two_i // 2, E, K, T, weights=w13.FORMAT)
        act = warp_gate_up_fp8(x, w13, topk_ids, cfg["gate_up"], act_dtype)
        return warp_down_fp8(act, w2, topk_ids, topk_weights, cfg["down"], out_dtype or x.dtype)
    cfg = config or warp_config(H, two_i // 2, E, K, T)
    schedule = schedule or schedule_of(cfg)
    out_dtype = out_dtype or x.dtype
    if schedule == "fused" and out_dtype != x.dtype:
        schedule = "split"
    if schedule == "fused":
        return moe_warp_fused(x, w13, w2, topk_weights, topk_ids, cfg.get("fused") or default_fused(H, two_i // 2, K),
                              act_dtype)
    if schedule == "grouped":
        grouped = cfg.get("grouped", {})
        act = warp_gate_up_grouped(x, w13, topk_ids, topk_weights,
                                   grouped.get("gate_up") or default_grouped(x.dtype == torch.float32), act_dtype)
        # the FMA tile wherever the down products run on FMAs (kernels/warp_grouped.py _mma)
        on_fmas = w2.dtype == torch.float32 or act.dtype != w2.dtype
        return warp_down_grouped(act, w2, topk_ids, topk_weights, grouped.get("down") or default_grouped_down(on_fmas),
                                 out_dtype)
    act = warp_gate_up(x, w13, topk_ids, topk_weights, cfg["gate_up"], act_dtype)
    return warp_down(act, w2, topk_ids, topk_weights, cfg["down"], out_dtype)
