"""A minimal MoE decoder, to see warp decode inside a whole decode step.

RMSNorm, grouped-query attention with a KV cache (Qwen3's q/k RMSNorm and RoPE), and the MoE
layer with a selectable ``method``; random weights, shaped like the real model. Decode steps take
T tokens, one per sequence, all at the same position, so one step is what a serving engine runs
for a batch of T sequences. :meth:`Decoder.step` is graph-capturable for ``expert``/``warp``/
``auto``; :meth:`Decoder.step` with ``method="reference"`` computes the same step in float64,
widening one layer's weights at a time, and returns every layer's hidden state for the error study.

Lean, not an engine. At T = 1 a decode step is a few hundred small kernels, each a few µs even in a
CUDA graph, so the dense part of a layer is written to launch few of them, with plain PyTorch:

- RMSNorm is ``F.rms_norm`` (one fused kernel on CUDA; bf16 is normalised in float32 and rounded
  once, float64 stays float64), the same call on both paths.
- One QKV projection (``wqkv`` = wq, wk, wv stacked by rows), split into views.
- RoPE's cos/sin come from a table built once per cache length and dtype (:meth:`Decoder.new_cache`
  builds it), so a step indexes it at ``pos``: no trigonometry in the step.
- Attention is ``F.scaled_dot_product_attention`` with ``enable_gqa=True`` over the cache, laid out
  (layers, 2, T, kv_heads, max_ctx, head_dim) so each head's keys and values are contiguous rows.
- ``Decoder(..., compile=True)`` also runs the dense code before and after attention through
  ``torch.compile``, which fuses the norms, RoPE, residual and routing; the KV cache write,
  attention and the MoE layer stay outside, launched as they are.

Per layer, eager on CUDA, besides the MoE layer's own kernels: RMSNorm (1), QKV GEMM (1), q/k
RMSNorm (2), RoPE on q and k (4 each), two cache writes, attention (1), output GEMM with the
residual (1), RMSNorm (1), router GEMM (1), routing (6), the MoE residual (1): about 25 launches,
where the first version of this file, unfused, launched about 90.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F

from warpdecode import api
from warpdecode.presets import PRESETS, MoEShape
from warpdecode.reference import reference_moe
from warpdecode.routing import route


@dataclass(frozen=True)
class ModelConfig:
    name: str
    vocab: int
    layers: int
    heads: int  # query heads
    kv_heads: int
    head_dim: int
    moe: MoEShape  # H is the model's hidden size
    rms_eps: float = 1e-6
    rope_theta: float = 1e6

    @property
    def hidden(self) -> int:
        return self.moe.H


MODELS = {
    c.name: c
    for c in [
        # Qwen3-30B-A3B: 48 layers, hidden 2048, 32 query / 4 KV heads of 128, 128 experts, top-8
        ModelConfig("qwen3-30b-a3b", vocab=151936, layers=48, heads=32, kv_heads=4, head_dim=128,
                    moe=PRESETS["qwen3-30b-a3b"]),
        ModelConfig("tiny", vocab=256, layers=3, heads=4, kv_heads=2, head_dim=32, moe=PRESETS["tiny"]),
    ]
}

#: Each MoE method as the model calls it: ``warpdecode.moe``, the call users make (its checks and
#: dispatch included in every timing of a step or of its MoE layers).
MOE_METHODS = {m: partial(api.moe, method=m) for m in api.METHODS} | {
    # the expert path with FP8 activations: with FP8 weights (warpdecode.quant), the w8a8 form
    "expert_fp8": partial(api.moe, method="expert", act_format="fp8")}


def _rms(x, w, eps):
    """RMSNorm over the last dim. One kernel on CUDA; bf16 is computed in float32 and rounded once."""
    return F.rms_norm(x, (x.shape[-1],), w, eps)


def _rope_table(n: int, head_dim: int, theta: float, *, device, dtype):
    """Rotate-half RoPE for positions [0, n): ``cos`` and ``sin`` (n, head_dim), computed in float64,
    then rounded to ``dtype``. ``sin`` carries rotate-half's sign, [-sin, sin], so that
    ``rotate_half(x) · sin`` is ``roll(x, head_dim / 2) · sin``."""
    inv = theta ** (-torch.arange(0, head_dim, 2, device=device, dtype=torch.float64) / head_dim)
    ang = torch.arange(n, device=device, dtype=torch.float64)[:, None] * inv  # (n, head_dim / 2)
    cos = torch.cat([ang.cos(), ang.cos()], dim=-1)
    sin = torch.cat([-ang.sin(), ang.sin()], dim=-1)
    return cos.to(dtype), sin.to(dtype)


def _rope(x, cos, sin):
    """x (..., head_dim) at one position: x·cos + rotate_half(x)·sin, rotate_half(x) = [-x2, x1]."""
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * sin


class _Compiled:
    """``fn`` through ``torch.compile``; if compiling fails (no toolchain, an op it cannot lower),
    a warning says so and ``fn`` runs eagerly from then on: it computes the same thing."""

    def __init__(self, fn, backend):
        self.fn, self.failed = fn, None
        try:
            self.fast = torch.compile(fn, backend=backend, fullgraph=True, dynamic=False)
        except Exception as e:  # an unknown backend fails here, the rest at the first call
            self._fail(e)

    def _fail(self, e):
        self.failed = f"{type(e).__name__}: {e}".splitlines()[0]
        warnings.warn(f"torch.compile of {self.fn.__name__} failed, running it eagerly: {self.failed}",
                      RuntimeWarning, stacklevel=3)

    def __call__(self, *args):
        if self.failed is None:
            try:
                return self.fast(*args)
            except Exception as e:
                self._fail(e)
        return self.fn(*args)


class Decoder:
    """Random weights for ``cfg`` (optionally only its first ``layers`` layers) on ``device``.

    compile: ``True`` runs the dense code before and after attention (:meth:`_attn_in`,
    :meth:`_attn_out`) through ``torch.compile`` (inductor, whole graph, static shapes: one compile
    per T, none per position or layer) on the model-dtype path; any other value is a
    ``torch.compile`` backend (the CPU tests trace with ``"aot_eager"``, which needs no C++
    compiler). The KV cache write, attention and the MoE layer stay outside, so a step remains
    capturable in a CUDA graph once a first eager call has compiled it. The float64 path always runs
    eagerly. If compiling fails the step warns and runs eagerly; :attr:`dense` says which ran.
    """

    def __init__(self, cfg: ModelConfig, *, device=None, dtype=torch.bfloat16, seed: int = 0,
                 layers: int | None = None, compile=False):
        self.cfg, self.dtype = cfg, dtype
        self.device = torch.device(device or "cpu")
        g = torch.Generator(device=self.device).manual_seed(seed)
        H, hd, nq, nkv = cfg.hidden, cfg.head_dim, cfg.heads, cfg.kv_heads

        def rand(*shape, fan_in):
            return torch.randn(*shape, generator=g, device=self.device, dtype=dtype).mul_(fan_in**-0.5)

        def norm_w(n):
            return (1 + 0.1 * torch.randn(n, generator=g, device=self.device, dtype=torch.float32)).to(dtype)

        self.embed = rand(cfg.vocab, H, fan_in=1)
        self.final_norm = norm_w(H)
        self.lm_head = rand(cfg.vocab, H, fan_in=H)
        self.layers = []
        for li in range(layers or cfg.layers):
            w13, w2 = cfg.moe.weights(dtype=dtype, device=self.device, seed=1000 * seed + li)
            wq, wk, wv = rand(nq * hd, H, fan_in=H), rand(nkv * hd, H, fan_in=H), rand(nkv * hd, H, fan_in=H)
            self.layers.append({
                "in_norm": norm_w(H), "post_norm": norm_w(H), "q_norm": norm_w(hd), "k_norm": norm_w(hd),
                "wqkv": torch.cat([wq, wk, wv]),  # ((nq + 2 nkv) hd, H): q rows, then k, then v
                "wo": rand(H, nq * hd, fan_in=nq * hd), "router": rand(cfg.moe.E, H, fan_in=H), "w13": w13, "w2": w2,
            })
        self._rope = {}  # dtype -> (cos, sin), each (positions, head_dim)
        self._fast_in, self._fast_out = self._attn_in, self._attn_out
        if compile:
            backend = "inductor" if compile is True else compile
            self._fast_in, self._fast_out = _Compiled(self._attn_in, backend), _Compiled(self._attn_out, backend)

    @property
    def dense(self) -> str:
        """How the model-dtype path runs the dense code: ``eager``, ``compiled``, or
        ``eager (compile failed: …)``."""
        if not isinstance(self._fast_in, _Compiled):
            return "eager"
        failed = self._fast_in.failed or self._fast_out.failed
        return f"eager (compile failed: {failed})" if failed else "compiled"

    # ------------------------------------------------------------------------------------------
    def new_cache(self, T: int, max_ctx: int, *, dtype=None, fill: bool = False, seed: int = 0):
        """K and V of every layer, (layers, 2, T, kv_heads, max_ctx, head_dim): random if ``fill``
        (a benchmark at a given context length), else zeros to be written by the steps. Also
        builds the RoPE table for ``max_ctx`` positions in ``dtype``, so steps only index it."""
        dtype = dtype or self.dtype
        self._rope_at(0, max_ctx, dtype)
        shape = (len(self.layers), 2, T, self.cfg.kv_heads, max_ctx, self.cfg.head_dim)
        if not fill:
            return torch.zeros(shape, device=self.device, dtype=dtype)
        g = torch.Generator(device=self.device).manual_seed(seed)
        return torch.randn(shape, generator=g, device=self.device, dtype=dtype)

    def _rope_at(self, pos: int, max_ctx: int, dtype):
        """cos and sin (head_dim,) at ``pos``: views into the table, built here if it is shorter
        than ``max_ctx`` (never while a CUDA graph is captured: it would hold no values)."""
        table = self._rope.get(dtype)
        if table is None or table[0].shape[0] < max_ctx:
            if self.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
                raise RuntimeError("the RoPE table for this cache is missing: make the cache with new_cache(), "
                                   "or run one step eagerly, before capturing a CUDA graph")
            cfg = self.cfg
            table = self._rope[dtype] = _rope_table(max_ctx, cfg.head_dim, cfg.rope_theta, device=self.device,
                                                    dtype=dtype)
        return table[0][pos], table[1][pos]

    def dense_bytes(self) -> int:
        """Bytes of the weights every step reads whole: attention, norms, routers, the LM head.
        (The embedding is read one row per token; the experts by routing, counted separately.)"""
        dense = ("in_norm", "post_norm", "q_norm", "k_norm", "wqkv", "wo", "router")
        n = self.lm_head.numel() + self.final_norm.numel()
        for p in self.layers:
            n += sum(p[k].numel() for k in dense)
        return n * self.embed.element_size()

    # ------------------------------------------------------------------------------------------
    def _attn_in(self, h, in_norm, wqkv, q_norm, k_norm, cos, sin):
        """Attention's input: RMSNorm, the QKV projection, q/k RMSNorm per head, RoPE.
        h (T, H) → q (T, heads, head_dim), k and v (T, kv_heads, head_dim)."""
        cfg = self.cfg
        qkv = (_rms(h, in_norm, cfg.rms_eps) @ wqkv.T).view(h.shape[0], cfg.heads + 2 * cfg.kv_heads, cfg.head_dim)
        q, k, v = qkv.split([cfg.heads, cfg.kv_heads, cfg.kv_heads], dim=1)
        return _rope(_rms(q, q_norm, cfg.rms_eps), cos, sin), _rope(_rms(k, k_norm, cfg.rms_eps), cos, sin), v

    def _attn_out(self, h, o, wo, post_norm, router):
        """Attention's output projection and residual, then the MoE layer's RMSNorm and routing.
        Returns h (T, H) after attention, x (T, H) the MoE layer's input, topk_weights, topk_ids."""
        cfg = self.cfg
        h = torch.addmm(h, o, wo.T)  # h + o @ wo.T, one GEMM
        x = _rms(h, post_norm, cfg.rms_eps)
        tw, ti = route(x @ router.T, cfg.moe.K, renormalize=cfg.moe.renormalize)
        return h, x, tw, ti

    def step(self, tokens: torch.Tensor, pos: int, cache: torch.Tensor, *, method: str = "auto",
             trace: list | None = None, routes: list | None = None) -> torch.Tensor:
        """One decode step: ``tokens`` (T,) at position ``pos`` of each sequence; writes K/V at
        ``pos`` into ``cache`` (from :meth:`new_cache`) and attends over [0, pos]. Returns logits
        (T, vocab).

        method: ``loop``/``expert``/``warp``/``auto`` for the MoE layers, in the model's dtype;
        ``reference``: everything in float64 (``cache`` must be float64); or ``moe-only:<method>``:
        everything in float64 except the MoE layers, which get their input rounded to the model's
        dtype and run ``<method>`` — the model's error is then the MoE path's alone, accumulated
        over the layers. ``trace``, if given, receives the hidden state after every layer,
        ``routes`` every layer's topk_ids."""
        cfg = self.cfg
        moe_only = method.startswith("moe-only:")
        if moe_only:
            method = method.split(":", 1)[1]
        ref = method == "reference" or moe_only
        act = torch.float64 if ref else self.dtype
        attn_in, attn_out = (self._attn_in, self._attn_out) if ref else (self._fast_in, self._fast_out)
        T = tokens.shape[0]
        cos, sin = self._rope_at(pos, cache.shape[-2], act)  # (head_dim,) each, for every layer
        h = self.embed[tokens].to(act)
        for li, p in enumerate(self.layers):
            if ref:
                p = {k: v.double() for k, v in p.items() if k not in ("w13", "w2")} | {"w13": p["w13"], "w2": p["w2"]}
            q, k, v = attn_in(h, p["in_norm"], p["wqkv"], p["q_norm"], p["k_norm"], cos, sin)
            cache[li, 0, :, :, pos] = k
            cache[li, 1, :, :, pos] = v
            keys, vals = cache[li, 0, :, :, : pos + 1], cache[li, 1, :, :, : pos + 1]  # (T, kv_heads, pos + 1, hd)
            # softmax(q·kᵀ / √head_dim) · v; query head j reads KV head j // (heads / kv_heads)
            o = F.scaled_dot_product_attention(q.unsqueeze(2), keys, vals, enable_gqa=True)  # (T, heads, 1, hd)
            h, x, tw, ti = attn_out(h, o.reshape(T, cfg.heads * cfg.head_dim), p["wo"], p["post_norm"], p["router"])
            if routes is not None:
                routes.append(ti)
            if method == "reference":
                h = h + reference_moe(x, p["w13"], p["w2"], tw, ti)
            else:
                h = h + MOE_METHODS[method](x.to(self.dtype).contiguous(), p["w13"], p["w2"], tw, ti).to(act)
            if trace is not None:
                trace.append(h)
        fw = self.final_norm.double() if ref else self.final_norm
        return _rms(h, fw, cfg.rms_eps) @ (self.lm_head.double() if ref else self.lm_head).T
