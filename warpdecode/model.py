"""A minimal MoE decoder, to see warp decode inside a whole decode step.

RMSNorm, grouped-query attention with a KV cache (Qwen3's q/k RMSNorm and RoPE), and the MoE
layer with a selectable ``method``; random weights, shaped like the real model. Decode steps take
T tokens, one per sequence, all at the same position, so one step is what a serving engine runs
for a batch of T sequences. :meth:`Decoder.step` is graph-capturable for ``expert``/``warp``/
``auto``; :meth:`Decoder.step` with ``method="reference"`` computes the same step in float64,
widening one layer's weights at a time, and returns every layer's hidden state for the error study.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .api import run_auto
from .expert import moe_expert
from .loop import moe_loop
from .presets import PRESETS, MoEShape
from .reference import reference_moe
from .routing import route
from .warp import moe_warp


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

MOE_METHODS = {"loop": moe_loop, "expert": moe_expert, "warp": moe_warp, "auto": run_auto}


def _rms(x, w, eps):
    x32 = x.float() if x.dtype != torch.float64 else x
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def _rope(x, pos: int, theta: float):
    """Rotate-half RoPE at one position; x (..., head_dim)."""
    d = x.shape[-1]
    inv = theta ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float64) / d)
    ang = pos * inv
    cos = torch.cat([ang.cos(), ang.cos()]).to(x.dtype)
    sin = torch.cat([ang.sin(), ang.sin()]).to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class Decoder:
    """Random weights for ``cfg`` (optionally only its first ``layers`` layers) on ``device``."""

    def __init__(self, cfg: ModelConfig, *, device=None, dtype=torch.bfloat16, seed: int = 0,
                 layers: int | None = None):
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
            self.layers.append({
                "in_norm": norm_w(H), "post_norm": norm_w(H), "q_norm": norm_w(hd), "k_norm": norm_w(hd),
                "wq": rand(nq * hd, H, fan_in=H), "wk": rand(nkv * hd, H, fan_in=H), "wv": rand(nkv * hd, H, fan_in=H),
                "wo": rand(H, nq * hd, fan_in=nq * hd), "router": rand(cfg.moe.E, H, fan_in=H), "w13": w13, "w2": w2,
            })

    # ------------------------------------------------------------------------------------------
    def new_cache(self, T: int, max_ctx: int, *, dtype=None, fill: bool = False, seed: int = 0):
        """Per layer, K and V of shape (T, max_ctx, kv_heads, head_dim); random if ``fill`` (a
        benchmark at a given context length), else zeros to be written by the steps."""
        dtype = dtype or self.dtype
        shape = (len(self.layers), 2, T, max_ctx, self.cfg.kv_heads, self.cfg.head_dim)
        if not fill:
            return torch.zeros(shape, device=self.device, dtype=dtype)
        g = torch.Generator(device=self.device).manual_seed(seed)
        return torch.randn(shape, generator=g, device=self.device, dtype=dtype)

    def dense_bytes(self) -> int:
        """Bytes of the weights every step reads whole: attention, norms, routers, the LM head.
        (The embedding is read one row per token; the experts by routing, counted separately.)"""
        dense = ("in_norm", "post_norm", "q_norm", "k_norm", "wq", "wk", "wv", "wo", "router")
        n = self.lm_head.numel() + self.final_norm.numel()
        for p in self.layers:
            n += sum(p[k].numel() for k in dense)
        return n * self.embed.element_size()

    # ------------------------------------------------------------------------------------------
    def step(self, tokens: torch.Tensor, pos: int, cache: torch.Tensor, *, method: str = "auto",
             trace: list | None = None, routes: list | None = None) -> torch.Tensor:
        """One decode step: ``tokens`` (T,) at position ``pos`` of each sequence; writes K/V at
        ``pos`` into ``cache`` and attends over [0, pos]. Returns logits (T, vocab).

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
        T = tokens.shape[0]
        hd, nq, nkv = cfg.head_dim, cfg.heads, cfg.kv_heads
        h = self.embed[tokens].to(act)
        for li, p in enumerate(self.layers):
            if ref:
                p = {k: v.double() for k, v in p.items() if k not in ("w13", "w2")} | {"w13": p["w13"], "w2": p["w2"]}
            x = _rms(h, p["in_norm"], cfg.rms_eps)
            q = _rope(_rms((x @ p["wq"].T).view(T, nq, hd), p["q_norm"], cfg.rms_eps), pos, cfg.rope_theta)
            k = _rope(_rms((x @ p["wk"].T).view(T, nkv, hd), p["k_norm"], cfg.rms_eps), pos, cfg.rope_theta)
            v = (x @ p["wv"].T).view(T, nkv, hd)
            cache[li, 0, :, pos] = k
            cache[li, 1, :, pos] = v
            keys, vals = cache[li, 0, :, : pos + 1], cache[li, 1, :, : pos + 1]  # (T, C, kv, hd)
            qg = q.view(T, nkv, nq // nkv, hd)
            scores = torch.einsum("tkgd,tckd->tkgc", qg, keys)
            scores = (scores if ref else scores.float()) / math.sqrt(hd)
            attn = torch.softmax(scores, dim=-1).to(act)
            o = torch.einsum("tkgc,tckd->tkgd", attn, vals).reshape(T, nq * hd)
            h = h + o @ p["wo"].T
            x = _rms(h, p["post_norm"], cfg.rms_eps)
            logits = x @ p["router"].T
            tw, ti = route(logits, cfg.moe.K, renormalize=cfg.moe.renormalize)
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
