"""Rung 4: warp decode's host side: the pair, grouped pair and FP8 pair (``kernels.warp_pair``,
``warp_grouped``, ``warp_fp8``). The persistent one-launch schedule is research beside the package:
``bench/persistent.py``."""

from __future__ import annotations

import torch
import triton

from . import _alloc, _runtime
from .configs import check_warp, default_grouped, default_grouped_down, warp_config
from .kernels import warp_fp8 as k8
from .kernels import warp_grouped as kg
from .kernels import warp_pair as kp
from .quant import FP8, is_fp8

#: Warp decode's schedules; a tuned bucket names its own by an entry of that name (schedule_of).
SCHEDULES = ("split", "grouped")


def schedule_of(cfg: dict) -> str:
    """The schedule a warp-decode config runs: ``grouped`` where it has that entry, else ``split`` (a
    ``fused`` entry, the persistent schedule of ``bench/persistent.py``, is not the package's: ignored)."""
    return "grouped" if "grouped" in cfg else "split"


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


# --- Tokens that share an expert read its rows once (see warpdecode.kernels.warp_grouped)

#: Tokens per grouped launch: the N of its tensor-core tiles (padded to 16); more take several launches.
GROUPED_TOKENS = 16


def _grouped_weights(w) -> tuple:
    """A grouped kernel's weight tensor and scale arguments: FP8 weights' e4m3 and scales; 16-bit, none."""
    if not is_fp8(w):
        return w, {}
    s, up = w.scale, {"S_UP": w.up_scale_row} if w.gate_up else {}
    return w.weight, dict(w_scale_ptr=s, stride_se=s.stride(0), stride_sr=s.stride(1), stride_sc=s.stride(2),
                          W_FP8=True, GROUP_N=w.GROUP_N, GROUP_K=w.GROUP_K, E8M0=w.FORMAT == "mxfp8", **up)


def warp_gate_up_grouped(x, w13, topk_ids, topk_weights, cfg: dict, act_dtype=torch.float32) -> torch.Tensor:
    """Grouped kernel 1: (TERMS, T*K, I) weighted silu(gate)·up, one program per expert's rows, one launch
    per ``GROUPED_TOKENS`` tokens. cfg: ``{"BLOCK_I", "BLOCK_H", "num_warps", "num_stages"}``."""
    T, H = x.shape
    E, two_i, _ = w13.shape
    I = two_i // 2  # noqa: E741
    K = topk_ids.shape[1]
    w, scales = _grouped_weights(w13)
    terms = 3 if act_dtype == torch.float32 and w.dtype in (torch.bfloat16, FP8) else 1  # 3 bf16 sum exactly to FP32
    act = _alloc.empty(terms, T * K, I, dtype=torch.bfloat16 if terms == 3 else act_dtype, device=x.device)
    for t0 in range(0, T, GROUPED_TOKENS):
        n = min(GROUPED_TOKENS, T - t0)
        kg.warp_gate_up_grouped_kernel[(E * triton.cdiv(I, cfg["BLOCK_I"]),)](
            x[t0:], w, topk_ids[t0:], topk_weights[t0:], act[:, t0 * K:], H, I, n, E, x.stride(0), w.stride(0),
            w.stride(1), act.stride(1), act.stride(0), K=K, K_PAD=triton.next_power_of_2(K),
            T_PAD=GROUPED_TOKENS, TERMS=terms, BLOCK_I=cfg["BLOCK_I"], BLOCK_H=cfg["BLOCK_H"], USE_PDL=USE_PDL,
            WIDEN=_runtime.INTERPRET, **scales,
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
    w, scales = _grouped_weights(w2)
    for c in range(chunks):
        t0, n = c * GROUPED_TOKENS, min(GROUPED_TOKENS, T - c * GROUPED_TOKENS)
        kg.warp_down_grouped_kernel[(E * blocks,)](
            act[:, t0 * K:], w, topk_ids[t0:], topk_weights[t0:], y[t0:],
            scratch[c, :GROUPED_TOKENS * H].view(torch.float32), scratch[c, GROUPED_TOKENS * H:], H, I, n, E,
            act.stride(1), act.stride(0), w.stride(0), w.stride(1),
            y.stride(0), K=K, K_PAD=triton.next_power_of_2(K), T_PAD=GROUPED_TOKENS, TERMS=act.shape[0],
            BLOCK_H=cfg["BLOCK_H"], BLOCK_I=cfg["BLOCK_I"],
            WIDEN=_runtime.INTERPRET, **scales, num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
        )
    return y


def moe_warp(x, w13, w2, topk_weights, topk_ids, *, act_dtype=torch.float32, config: dict | None = None,
             schedule: str | None = None, out_dtype=None):
    """Warp decode on validated, contiguous inputs (``warpdecode.moe`` checks them first).

    act_dtype: the intermediate's dtype (default FP32, unrounded; x.dtype rounds it). config: a launch
    config (checked as tables are; default tuned, else the defaults). schedule: ``"split"`` (two kernels,
    PDL), ``"grouped"`` (each expert's rows read once for all its tokens), or None (default: the config's,
    else ``"split"``). out_dtype: y's dtype (default x's); FP32 keeps a partial unrounded. FP8 weights run
    the FP8 pair, or the grouped schedule (FP8 tiles widened in registers)."""
    T, H = x.shape
    E, two_i, _ = w13.shape
    K = topk_ids.shape[1]
    fmt = {"weights": w13.FORMAT} if is_fp8(w13) else {}
    if config is not None:  # a caller's own: checked as the tables are
        check_warp(config, fmt.get("weights"), "moe_warp(config=...)")
    cfg = config or warp_config(H, two_i // 2, E, K, T, **fmt)
    schedule = schedule or schedule_of(cfg)
    out_dtype = out_dtype or x.dtype
    if schedule == "grouped":
        grouped = cfg.get("grouped", {})
        act = warp_gate_up_grouped(x, w13, topk_ids, topk_weights,
                                   grouped.get("gate_up") or default_grouped(x.dtype == torch.float32), act_dtype)
        # the FMA tile wherever the down products run on FMAs (kernels/warp_grouped.py _mma; e4m3 widens to act's)
        on_fmas = not is_fp8(w2) and (w2.dtype == torch.float32 or act.dtype != w2.dtype)
        return warp_down_grouped(act, w2, topk_ids, topk_weights, grouped.get("down") or default_grouped_down(on_fmas),
                                 out_dtype)
    if fmt:
        act = warp_gate_up_fp8(x, w13, topk_ids, cfg["gate_up"], act_dtype)
        return warp_down_fp8(act, w2, topk_ids, topk_weights, cfg["down"], out_dtype)
    act = warp_gate_up(x, w13, topk_ids, topk_weights, cfg["gate_up"], act_dtype)
    return warp_down(act, w2, topk_ids, topk_weights, cfg["down"], out_dtype)
