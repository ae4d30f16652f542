"""The minimal decoder (bench.model) on the CPU: its lean step against a straightforward one,
and each MoE method against the same model in float64, layer by layer, over a few decode steps
that fill the KV cache."""

from __future__ import annotations

import math

import pytest
import torch

import warpdecode
from bench.e2e import ERROR_METHODS, differing_tokens, layer_errors
from bench.model import MODELS, Decoder
from warpdecode.reference import reference_moe, rel_error
from warpdecode.routing import route

# relative error of the logits against the float64 model: bf16 attention, norms and residuals
# dominate at this size, so every method lands near 1e-2; a wrong layer lands near 1
LOGITS_TOL = 3e-2
# the lean float64 step against the straightforward float64 step: the same arithmetic in another
# order, so 1e-15-ish; a wrong RoPE sign, KV head or cache position lands near 1
LEAN_TOL = 1e-12
# bf16 step through torch.compile (aot_eager: the same ops, traced; equal today) against the eager
# step: room for one bf16 rounding moved by a decomposition, not for a wrong op
COMPILED_TOL = 2e-3


def straightforward_step(m: Decoder, tokens, pos: int, kv: list, trace: list):
    """The float64 step written the obvious way, for the test only: RMSNorm and RoPE from their
    definitions, separate q/k/v weights, attention one (token, query head) at a time over the
    K/V this function kept in ``kv`` itself (a list per layer), never the model's cache."""
    cfg = m.cfg
    T, hd, nq, nkv = tokens.shape[0], cfg.head_dim, cfg.heads, cfg.kv_heads

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + cfg.rms_eps) * w

    def rope(x):  # rotate the pairs (x[i], x[i + hd/2]) by pos · θ^(-2i/hd)
        ang = pos * cfg.rope_theta ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        return torch.cat([x1 * ang.cos() - x2 * ang.sin(), x2 * ang.cos() + x1 * ang.sin()], dim=-1)

    h = m.embed[tokens].double()
    for li, layer in enumerate(m.layers):
        p = {k: w.double() for k, w in layer.items()}
        wq, wk, wv = p["wqkv"].split([nq * hd, nkv * hd, nkv * hd])
        x = rms(h, p["in_norm"])
        q = rope(rms((x @ wq.T).view(T, nq, hd), p["q_norm"]))
        kv[li].append((rope(rms((x @ wk.T).view(T, nkv, hd), p["k_norm"])), (x @ wv.T).view(T, nkv, hd)))
        o = torch.zeros(T, nq, hd, dtype=torch.float64)
        for t in range(T):
            for j in range(nq):
                g = j // (nq // nkv)  # the KV head query head j shares
                keys = torch.stack([k[t, g] for k, _ in kv[li]])  # (pos + 1, hd)
                vals = torch.stack([v[t, g] for _, v in kv[li]])
                o[t, j] = torch.softmax(keys @ q[t, j] / math.sqrt(hd), dim=0) @ vals
        h = h + o.reshape(T, nq * hd) @ p["wo"].T
        x = rms(h, p["post_norm"])
        tw, ti = route(x @ p["router"].T, cfg.moe.K, renormalize=cfg.moe.renormalize)
        h = h + reference_moe(x, layer["w13"], layer["w2"], tw, ti)
        trace.append(h)
    return rms(h, m.final_norm.double()) @ m.lm_head.double().T


def test_lean_step_matches_the_straightforward_step():
    """Four steps fill positions 0..3 of a cache of 6 whose unwritten positions hold random
    values (attention must not read them); every layer and the logits match at every step."""
    m = Decoder(MODELS["tiny"], seed=4, layers=2)
    T = 2
    cache = m.new_cache(T, 6, dtype=torch.float64, fill=True, seed=1)
    kv = [[] for _ in m.layers]
    g = torch.Generator().manual_seed(0)
    for pos in range(4):
        tokens = torch.randint(0, m.cfg.vocab, (T,), generator=g)
        trace, want_trace = [], []
        logits = m.step(tokens, pos, cache, method="reference", trace=trace)
        want = straightforward_step(m, tokens, pos, kv, want_trace)
        assert logits.dtype == torch.float64 and torch.isfinite(logits).all()
        for h, w in zip(trace, want_trace, strict=True):
            assert rel_error(h, w) <= LEAN_TOL, f"pos {pos}"
        assert rel_error(logits, want) <= LEAN_TOL, f"pos {pos}"


@pytest.fixture(scope="module")
def errors_and_flips():
    flips = {}
    return layer_errors("tiny", T=2, steps=3, device="cpu", seed=3, flips=flips), flips


@pytest.fixture(scope="module")
def errors(errors_and_flips):
    return errors_and_flips[0]


def test_differing_tokens_compares_sets():
    a = torch.tensor([[0, 1, 2], [3, 4, 5], [6, 0, 1]])
    assert differing_tokens(a, a.flip(-1)) == 0  # same experts, other order (weights tied)
    b = a.clone()
    b[1, 2] = 6  # token 1 takes expert 6 instead of 5
    assert differing_tokens(a, b) == 1
    assert differing_tokens(a, b + 1) == 3


def test_routing_flips_counts_per_layer(errors_and_flips):
    """Counted from the error study's own runs: one count per layer per method; with only the MoE
    layers rounded, the first layer routes exactly as the float64 model (everything before its
    router is float64)."""
    _, flips = errors_and_flips
    assert set(flips) == set(ERROR_METHODS)
    assert all(len(f) == MODELS["tiny"].layers and min(f) >= 0 for f in flips.values())
    assert all(flips[m][0] == 0 for m in flips if m.startswith("moe-only:"))


@pytest.mark.parametrize("method", ["loop", "expert", "warp"])
def test_logits_close_to_float64_model(errors, method):
    rows = [r for r in errors if r["method"] == method]
    assert len(rows) == MODELS["tiny"].layers + 1
    logits = next(r["error"] for r in rows if r["layer"] == "logits")
    assert logits <= LOGITS_TOL
    assert all(r["error"] == r["error"] and r["error"] > 0 for r in rows)  # finite, not NaN, not a copy


def test_moe_only_isolates_the_moe_path(errors):
    """With everything but the MoE in float64, warp decode's error stays below the expert-centric
    path's at every layer (one rounding of the output against three kinds), and both stay well
    below the all-bf16 model's."""
    def err(method, layer):
        return next(r["error"] for r in errors if r["method"] == method and r["layer"] == layer)

    for layer in [*range(1, MODELS["tiny"].layers + 1), "logits"]:
        assert err("moe-only:warp", layer) < err("moe-only:expert", layer)
        assert err("moe-only:expert", layer) < err("expert", layer)


def test_reference_step_is_float64_and_writes_the_cache():
    m = Decoder(MODELS["tiny"], seed=1)
    cache = m.new_cache(2, 4, dtype=torch.float64)
    trace = []
    logits = m.step(torch.tensor([5, 7]), 0, cache, method="reference", trace=trace)
    assert logits.dtype == torch.float64 and logits.shape == (2, MODELS["tiny"].vocab)
    assert len(trace) == MODELS["tiny"].layers
    assert cache[..., 0, :].abs().sum() > 0 and cache[..., 1:, :].abs().sum() == 0  # (layers, 2, T, kv, ctx, hd)
    assert m.new_cache(2, 4).shape == (MODELS["tiny"].layers, 2, 2, MODELS["tiny"].kv_heads, 4,
                                       MODELS["tiny"].head_dim)


def test_auto_matches_the_method_it_picks():
    m = Decoder(MODELS["tiny"], seed=2)
    tokens = torch.tensor([3, 9, 11])
    outs = {}
    for method in ("auto", "warp", "expert"):
        outs[method] = m.step(tokens, 0, m.new_cache(3, 2), method=method)
    picked = warpdecode.pick_method(3, m.cfg.hidden, m.cfg.moe.I, m.cfg.moe.E, m.cfg.moe.K)
    assert torch.equal(outs["auto"], outs[picked])


def _compiled_vs_eager(compile):
    torch._dynamo.reset()
    eager, compiled = (Decoder(MODELS["tiny"], seed=5, layers=2, compile=c) for c in (False, compile))
    tokens = torch.tensor([3, 200])
    out = {}
    for name, m in (("eager", eager), ("compiled", compiled)):
        cache = m.new_cache(2, 3)
        out[name] = [m.step(tokens + pos, pos, cache, method="loop") for pos in range(2)]
    torch._dynamo.reset()
    return compiled, out


def test_compiled_dense_code_matches_eager():
    """Decoder(compile=...) traces the dense code whole (fullgraph) and computes the same step;
    aot_eager needs no C++ compiler (inductor itself is checked on the GPU)."""
    m, out = _compiled_vs_eager("aot_eager")
    assert m.dense == "compiled"
    for c, e in zip(out["compiled"], out["eager"], strict=True):
        assert torch.isfinite(c).all() and rel_error(c, e) <= COMPILED_TOL


def test_compile_failure_falls_back_to_eager():
    def broken(gm, example_inputs):
        raise RuntimeError("no compiler here")

    with pytest.warns(RuntimeWarning, match="running it eagerly"):
        m, out = _compiled_vs_eager(broken)
    assert m.dense.startswith("eager (compile failed")
    for c, e in zip(out["compiled"], out["eager"], strict=True):
        assert torch.equal(c, e)
