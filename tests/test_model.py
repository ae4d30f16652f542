"""The minimal decoder (warpdecode.model) on the CPU: each MoE method against the same model in
float64, layer by layer, over a few decode steps that fill the KV cache."""

from __future__ import annotations

import pytest
import torch

import warpdecode
from warpdecode.bench.e2e import layer_errors
from warpdecode.model import MODELS, Decoder

# relative error of the logits against the float64 model: bf16 attention, norms and residuals
# dominate at this size, so every method lands near 1e-2; a wrong layer lands near 1
LOGITS_TOL = 3e-2


@pytest.fixture(scope="module")
def errors():
    return layer_errors("tiny", T=2, steps=3, device="cpu", seed=3)


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
    assert cache[:, :, :, 0].abs().sum() > 0 and cache[:, :, :, 1:].abs().sum() == 0


def test_auto_matches_the_method_it_picks():
    m = Decoder(MODELS["tiny"], seed=2)
    tokens = torch.tensor([3, 9, 11])
    outs = {}
    for method in ("auto", "warp", "expert"):
        outs[method] = m.step(tokens, 0, m.new_cache(3, 2), method=method)
    picked = warpdecode.pick_method(3, m.cfg.hidden, m.cfg.moe.I, m.cfg.moe.E, m.cfg.moe.K)
    assert torch.equal(outs["auto"], outs[picked])
