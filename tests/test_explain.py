"""``warpdecode.explain`` names the path and schedule ``moe`` runs, and says where the crossover
comes from, without a launch."""

from __future__ import annotations

import pytest
import torch

import warpdecode as wd
from warpdecode import api


def _inputs(T: int, s, device="cpu"):
    gen = torch.Generator().manual_seed(T)
    x = torch.randn(T, s.H, generator=gen).bfloat16().to(device)
    w13 = (torch.randn(s.E, 2 * s.I, s.H, generator=gen) * s.H**-0.5).bfloat16().to(device)
    w2 = (torch.randn(s.E, s.H, s.I, generator=gen) * s.I**-0.5).bfloat16().to(device)
    tw, ids = wd.route(torch.randn(T, s.E, generator=gen), s.K)
    return x, w13, w2, tw.to(device), ids.to(device)


@pytest.mark.parametrize("kwargs", [{}, dict(batch_invariant=True), dict(method="expert"),
                                    dict(method="warp", schedule="grouped")], ids=["auto", "batch_invariant",
                                                                                   "expert", "warp-grouped"])
def test_explain_names_the_path_moe_runs(monkeypatch, kwargs):
    """On both sides of the crossover: the path explain names is the one moe calls (the launchers
    replaced by recorders), and the warp schedule is the one moe_warp receives."""
    s = wd.get_preset("tiny")
    ran = []
    monkeypatch.setattr(api, "moe_expert", lambda x, *a, **k: ran.append(("expert", None)) or x)

    def warp(x, w13, w2, tw, ids, *, schedule=None, config=None, **_):
        config = config or wd.configs.warp_config(s.H, s.I, s.E, s.K, x.shape[0])
        ran.append(("warp", schedule or api.schedule_of(config)))
        return x

    monkeypatch.setattr(api, "moe_warp", warp)
    c = wd.crossover(s.H, s.I, s.E, s.K)
    seen = set()
    for T in (1, c + 1, 64):
        inputs = _inputs(T, s)
        plan = wd.explain(*inputs, **kwargs)
        ran.clear()
        wd.moe(*inputs, **kwargs)
        assert ran == [(plan.method, plan.schedule)], (T, plan, ran)
        seen.add(plan.method)
    assert seen == ({"warp", "expert"} if not kwargs else {kwargs.get("method", "warp")})


def test_explain_says_where_the_crossover_comes_from_and_launches_nothing():
    """Without a tuned table the crossover is the cost model's, with the H200's constants, and
    without a GPU explain says so; meta tensors are enough, so nothing runs."""
    s = wd.get_preset("qwen3-30b-a3b")
    m = lambda *shape, dtype=torch.bfloat16: torch.empty(*shape, device="meta", dtype=dtype)  # noqa: E731
    plan = wd.explain(m(4, s.H), m(s.E, 2 * s.I, s.H), m(s.E, s.H, s.I), m(4, s.K, dtype=torch.float32),
                      m(4, s.K, dtype=torch.int32))
    assert plan.crossover == wd.crossover(s.H, s.I, s.E, s.K)
    assert plan.method == ("warp" if 4 <= plan.crossover else "expert")
    text = str(plan)
    assert text.startswith(f"T = 4: {plan.method}") and f"up to T = {plan.crossover}" in text
    if wd.INTERPRET:
        assert "cost model" in text and "NVIDIA H200" in text and "interpreter" in text
    with pytest.raises(ValueError, match="method"):
        wd.explain(m(4, s.H), m(s.E, 2 * s.I, s.H), m(s.E, s.H, s.I), m(4, s.K, dtype=torch.float32),
                   m(4, s.K, dtype=torch.int32), method="fast")
