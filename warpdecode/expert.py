"""Rungs 2 and 3: the expert-centric path as production engines run it, one function per stage of
``kernels/expert.py`` (1 route is ``warpdecode.route``; 2 align, 4 quantize, 5 gate/up, 6 down, 8 combine).
:func:`moe_expert` runs them as vLLM's ``fused_moe``: 3 gather inside the gate/up GEMM's loads, 7 scatter
inside the down GEMM's stores, four launches chained with PDL; six where a quantize precedes each GEMM
(e4m3 activations, or FP8 weights' fp16 rows). ``bench/unfused.py`` runs gather and scatter
as kernels of their own, bit for bit the same.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton

from . import _alloc, _runtime
from .configs import FP8_WEIGHTS_MAX_BLOCK_M, check_expert, expert_config
from .kernels import expert as kx
from .quant import FP8, is_fp8

FP8_GROUP = 128
#: fp16 rows: each 1×128 block's largest value scaled into (2^14, 2^15], under fp16's 65504, so every bf16
#: value down to 2^-29 of it stays a normal fp16 and keeps its bits.
F16_QMAX = 32768.0
#: FP8 weights with bf16 activations: the GEMMs take the activations as fp16 rows up to this BLOCK_M
#: (one F2FP widens two e4m3 weights to fp16, where bf16 operands take three instructions for two); past
#: it the weight-only GEMMs widen to bf16 (the default tiles go no further). Data: docs/design.md, "FP8 weights
#: on the expert path".
F16_ROWS_MAX_BLOCK_M = FP8_WEIGHTS_MAX_BLOCK_M


@dataclass
class Alignment:
    """vLLM's ``moe_align_block_size`` contract (see :mod:`warpdecode.kernels.expert`)."""

    sorted_token_ids: torch.Tensor  # (EM,) int32, pair indices by expert, padded with T*K
    expert_ids: torch.Tensor  # (EM // block_m,) int32, -1 past num_tokens_post_padded
    num_tokens_post_padded: torch.Tensor  # (1,) int32
    block_m: int
    num_pairs: int  # T*K, also the padding sentinel

    @property
    def EM(self) -> int:
        return self.sorted_token_ids.numel()


def max_padded_rows(num_pairs: int, E: int, block_m: int) -> int:
    """EM, the worst-case rows after padding, known without a device sync (vLLM's bound)."""
    em = num_pairs + E * (block_m - 1)
    if num_pairs < E:
        em = min(em, num_pairs * block_m)
    return triton.cdiv(em, block_m) * block_m


def _pdl(pdl: bool) -> dict:
    """Meta-parameters launching a kernel with PDL (``USE_PDL``) where ``pdl`` and the GPU allow."""
    use = pdl and _runtime.HAS_PDL
    return {"USE_PDL": use, **({"launch_pdl": True} if use else {})}


def align(topk_ids: torch.Tensor, E: int, block_m: int, *, pdl: bool = False,
          block_c: int | None = None) -> Alignment:
    """Stage 2: pairs by expert, runs padded to ``block_m``; ``block_c`` (power of two ≥ 16): pairs per program."""
    num_pairs = topk_ids.numel()
    EM = max_padded_rows(num_pairs, E, block_m)
    dev = topk_ids.device
    sorted_token_ids = _alloc.empty(EM, dtype=torch.int32, device=dev)
    expert_ids = _alloc.empty(EM // block_m, dtype=torch.int32, device=dev)
    num_tokens_post_padded = _alloc.empty(1, dtype=torch.int32, device=dev)
    block_c = block_c or min(128, max(16, triton.next_power_of_2(triton.cdiv(num_pairs, 64))))
    grid = triton.cdiv(num_pairs, block_c)
    kx.moe_align_kernel[(grid,)](
        topk_ids, sorted_token_ids, expert_ids, num_tokens_post_padded,
        num_pairs, EM, E, triton.cdiv(EM // block_m, grid),
        BLOCK_M=block_m,
        SCAN=min(4096, max(16, triton.next_power_of_2(num_pairs))),
        BLOCK_E=max(16, triton.next_power_of_2(E)),
        BLOCK_C=block_c,
        CHUNK=max(1, min(16, 2048 // block_m)),
        num_warps=4,
        USE_PDL=pdl and _runtime.HAS_PDL,  # launched as usual; it lets the next kernel launch early
    )
    return Alignment(sorted_token_ids, expert_ids, num_tokens_post_padded, block_m, num_pairs)


def quantize(a: torch.Tensor, al: Alignment | None, fmt: str = "native"):
    """Stage 4: ``native`` returns ``(a, None)``; ``fp8``: e4m3 and a power-of-two scale per row per 128 columns;
    ``f16``: fp16 the same way (:data:`F16_QMAX`: exact for bf16 values down to 2^-29 of their block's largest).
    ``al``: an expert-major ``a``'s alignment (rows past the end skipped), or None for token rows."""
    if fmt == "native":
        return a, None
    EM, N = a.shape
    groups = triton.cdiv(N, FP8_GROUP)
    dtype, qmax = (torch.float16, F16_QMAX) if fmt == "f16" else (FP8, torch.finfo(FP8).max)
    q = _alloc.empty(EM, N, dtype=dtype, device=a.device)
    scales = _alloc.empty(EM, groups, dtype=torch.float32, device=a.device)
    kx.quant_fp8_kernel[(EM, groups)](
        a, q, scales, al.num_tokens_post_padded if al is not None else scales, N,
        a.stride(0), q.stride(0), scales.stride(0), GROUP=FP8_GROUP, GUARD_ROWS=al is not None, QMAX=qmax,
        num_warps=1,
    )
    return q, scales


def activation_rows(x: torch.Tensor, w13, act_format: str, block_m: int) -> str:
    """The form :func:`quantize` gives the GEMMs' activations: ``act_format``, except ``f16`` for FP8 weights
    with bf16 activations at BLOCK_M ≤ :data:`F16_ROWS_MAX_BLOCK_M` (the weight-only GEMMs' bits, fewer
    instructions per weight byte)."""
    if act_format == "native" and is_fp8(w13) and x.dtype == torch.bfloat16 and block_m <= F16_ROWS_MAX_BLOCK_M:
        return "f16"
    return act_format


def _weight_operands(w) -> tuple:
    """(weights, scales, S_UP, scale strides, meta) of a GEMM's B operand, FP8 or plain (no scales read)."""
    if not is_fp8(w):
        return w, w, 0, (0, 0, 0), {"W_FP8": False, "W_GROUP_N": 1, "W_GROUP_K": 128, "W_E8M0": False}
    s = w.scale
    return (w.weight, s, w.up_scale_row, s.stride(),
            {"W_FP8": True, "W_GROUP_N": w.GROUP_N, "W_GROUP_K": w.GROUP_K, "W_E8M0": w.FORMAT == "mxfp8"})


def gemm_dims(H: int, I: int) -> dict[str, tuple[int, int]]:  # noqa: E741
    """Per GEMM, (output rows per expert, K) of its weights: gate/up's I rows (its up rows follow) over H, down's
    H over I."""
    return {"gate_up": (I, H), "down": (H, I)}


def tma_box_problem(cfg: dict, n: int, k: int, elem: int, gemm: str = "gemm") -> str | None:
    """Why ``W_TMA`` cannot copy a GEMM's weight tiles, of ``n`` rows per expert over ``k`` at ``elem`` bytes, in
    boxes of (1, BLOCK_N, BLOCK_K), from the shape alone; None where it can: the boxes must tile the matrix
    (vLLM's ``USE_TMA_B`` conditions) and TMA takes 16-byte-aligned rows."""
    bn, bk = cfg["BLOCK_N"], cfg["BLOCK_K"]
    if n % bn or k % bk:
        return (f"config {gemm}.W_TMA needs BLOCK_N to divide {n} and BLOCK_K to divide {k} (each TMA box one whole "
                f"tile of the weights), got BLOCK_N={bn}, BLOCK_K={bk}")
    if (k * elem) % 16:
        return f"config {gemm}.W_TMA needs 16-byte-aligned weight rows, got {k} × {elem} B"
    return None


def weight_tma_problems(cfg: dict, w13, w2) -> dict[str, str | None]:
    """Per GEMM of the expert config ``cfg``, why ``W_TMA`` cannot copy its weight tiles from these weights
    (:func:`tma_box_problem`, and contiguous, 16-byte-aligned storage), or None where it can."""
    _, two_i, H = w13.shape
    out = {}
    for (gemm, (n, k)), w in zip(gemm_dims(H, two_i // 2).items(), (w13, w2), strict=True):
        w = w.weight if is_fp8(w) else w
        problem = tma_box_problem(cfg[gemm], n, k, w.element_size(), gemm)
        if problem is None and (not w.is_contiguous() or w.data_ptr() % 16):
            problem = f"config {gemm}.W_TMA needs contiguous, 16-byte-aligned weights"
        out[gemm] = problem
    return out


def _weight_desc(cfg: dict, w: torch.Tensor) -> dict:
    """The weight-tile meta-parameters: ``W_TMA`` and its TensorDescriptor where the config asks for it."""
    if not cfg.get("W_TMA", False):
        return {"W_TMA": False}
    from triton.tools.tensor_descriptor import TensorDescriptor

    return {"W_TMA": True, "w_desc": TensorDescriptor.from_tensor(w, [1, cfg["BLOCK_N"], cfg["BLOCK_K"]])}


def _gemm_meta(cfg: dict, block_m: int, a_scales, dtype, w=None) -> dict:
    """A GEMM's launch parameters: ``HALF_M`` (default off) runs a half-padding block as BLOCK_M/2 rows;
    ``SWAP_AB`` (default off) transposes the tile, weight rows on the tensor cores' M axis."""
    half = bool(cfg.get("HALF_M", False))
    if half and block_m < 32:
        raise ValueError(f"HALF_M needs BLOCK_M >= 32 (tl.dot takes at least 16 rows), got BLOCK_M={block_m}")
    if is_fp8(w) and w.GROUP_K % cfg["BLOCK_K"]:
        raise ValueError(f"BLOCK_K={cfg['BLOCK_K']} must divide the {w.FORMAT} scale group ({w.GROUP_K} columns): "
                         "each K step takes one weight scale")
    if is_fp8(w):  # e4m3 weights: widened to the activations' dtype, or multiplied as e4m3 (w8a8)
        dtype = w.dtype
    return dict(
        BLOCK_M=block_m, HALF_M=half, SWAP_AB=bool(cfg.get("SWAP_AB", False)),
        BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], GROUP_M=cfg["GROUP_M"],
        A_FP8=a_scales is not None, DOT_FP32=_runtime.INTERPRET,
        PRECISION="ieee" if dtype == torch.float32 or _runtime.INTERPRET else "tf32",
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )


def gate_up(a, a_scales, w13: torch.Tensor, al: Alignment, cfg: dict, *, gather_k: int = 0,
            pdl: bool = False) -> torch.Tensor:
    """Stage 5: grouped GEMM, SiLU·up, rounded: (EM, I) from stage 3's (EM, H) ``a``, or with ``gather_k = K``
    the (T, H) token rows gathered in the loads."""
    E, two_i, H = w13.shape
    I = two_i // 2  # noqa: E741
    out = _alloc.empty(al.EM, I, dtype=w13.dtype, device=w13.device)
    scales = a_scales if a_scales is not None else out  # never read when A_FP8 is off
    w, w_scales, s_up, s_strides, w_meta = _weight_operands(w13)
    grid = (triton.cdiv(al.EM, al.block_m) * triton.cdiv(I, cfg["BLOCK_N"]),)
    kx.grouped_gate_up_kernel[grid](
        a, scales, w, w_scales, out, al.sorted_token_ids, al.expert_ids, al.num_tokens_post_padded,
        al.EM, H, I, al.num_pairs, max(gather_k, 1), s_up, a.stride(0), scales.stride(0), w.stride(0), w.stride(1),
        *s_strides, out.stride(0), GATHER=gather_k > 0, **_gemm_meta(cfg, al.block_m, a_scales, w13.dtype, w13),
        **w_meta, **_weight_desc(cfg, w), **_pdl(pdl),
    )
    return out


def down(h, h_scales, w2: torch.Tensor, al: Alignment, topk_weights: torch.Tensor, cfg: dict, *,
         scatter: bool = False, pdl: bool = False) -> torch.Tensor:
    """Stage 6: grouped GEMM down × routing weight, rounded: (EM, H), or with ``scatter`` (T*K, H) (stage 7 fused)."""
    E, H, I = w2.shape
    out = _alloc.empty(al.num_pairs if scatter else al.EM, H, dtype=w2.dtype, device=w2.device)
    scales = h_scales if h_scales is not None else out
    w, w_scales, _, s_strides, w_meta = _weight_operands(w2)
    grid = (triton.cdiv(al.EM, al.block_m) * triton.cdiv(H, cfg["BLOCK_N"]),)
    kx.grouped_down_kernel[grid](
        h, scales, w, w_scales, out, al.sorted_token_ids, al.expert_ids, al.num_tokens_post_padded, topk_weights,
        al.EM, H, I, al.num_pairs, h.stride(0), scales.stride(0), w.stride(0), w.stride(1), *s_strides,
        out.stride(0), SCATTER=scatter, **_gemm_meta(cfg, al.block_m, h_scales, w2.dtype, w2), **w_meta,
        **_weight_desc(cfg, w), **_pdl(pdl),
    )
    return out


def combine(s: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, E: int, *,
            pdl: bool = False) -> torch.Tensor:
    """Stage 8: y[t] = Σ_j s[t*K + j] in the compute dtype (``moe_sum``); bad ids as ``kernels/ids.py``."""
    H = s.shape[1]
    T, K = topk_ids.shape
    y = _alloc.empty(T, H, dtype=s.dtype, device=s.device)
    BLOCK_H = min(1024, triton.next_power_of_2(H))
    grid = (T, triton.cdiv(H, BLOCK_H))
    kx.combine_kernel[grid](s, topk_ids, topk_weights, y, H, E, s.stride(0), y.stride(0), K=K,
                            K_PAD=triton.next_power_of_2(K), BLOCK_H=BLOCK_H, num_warps=4, **_pdl(pdl))
    return y


def launch_config(x, w13, topk_ids, act_format: str = "native", config: dict | None = None) -> dict:
    """The configuration :func:`moe_expert` runs: ``config`` checked as the tables are, else the table's or the
    default for this layer and T."""
    weights = w13.FORMAT if is_fp8(w13) else None
    if config is not None:  # a caller's own: checked as the tables are
        check_expert(config, act_format == "fp8", weights, "moe_expert(config=...)")
        return config
    T, H = x.shape
    E, two_i, _ = w13.shape
    return expert_config(H, two_i // 2, E, topk_ids.shape[1], T, fp8=act_format == "fp8", elem=x.element_size(),
                         weights=weights)


def moe_expert(x, w13, w2, topk_weights, topk_ids, *, act_format: str = "native", config: dict | None = None,
               pdl: bool | None = None):
    """Stages 2–8 on validated, contiguous inputs (``warpdecode.moe`` checks them first).

    act_format: ``"native"`` (default, compute dtype) or ``"fp8"`` (e4m3 activations and intermediate,
    1×128 power-of-two scales; with FP8 weights w8a8, else weight-only). FP8 weights with bf16 activations
    (``native``) run weight-only; at BLOCK_M ≤ :data:`F16_ROWS_MAX_BLOCK_M` the activations and intermediate
    go to the GEMMs as fp16 rows (:func:`activation_rows`), the same bits but for values under 2^-29 of their
    1×128 block's largest. pdl: chain gate/up, down and combine with PDL (Hopper+, native activations); None
    (default): where the GPU has it unless ``WARPDECODE_PDL=0``; False: as vLLM. pdl gives the same bits."""
    E, K = w13.shape[0], topk_ids.shape[1]
    cfg = launch_config(x, w13, topk_ids, act_format, config)
    if cfg["gate_up"].get("W_TMA", False) or cfg["down"].get("W_TMA", False):  # before any launch
        for gemm, problem in weight_tma_problems(cfg, w13, w2).items():
            if problem and cfg[gemm].get("W_TMA", False):
                if config is not None:  # the caller's own config
                    raise ValueError(problem)
                cfg = {**cfg, gemm: {**cfg[gemm], "W_TMA": False}}  # a table's: pointer loads, the same bits
    rows = activation_rows(x, w13, act_format, cfg["BLOCK_M"])
    # PDL only where each kernel's predecessor is the previous one of these four (no quantize between)
    pdl = (_runtime.USE_PDL if pdl is None else pdl) and rows == "native"
    al = align(topk_ids, E, cfg["BLOCK_M"], pdl=pdl)
    a, a_scales = quantize(x, None, rows)  # per token: the same values the gathered rows get
    h = gate_up(a, a_scales, w13, al, cfg["gate_up"], gather_k=K, pdl=pdl)
    h, h_scales = quantize(h, al, rows)
    o = down(h, h_scales, w2, al, topk_weights, cfg["down"], scatter=True, pdl=pdl)
    return combine(o, topk_ids, topk_weights, E, pdl=pdl)
