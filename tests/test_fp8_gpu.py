"""On the GPU, at real layer sizes: FP8 weights (warpdecode.quant) through every method, against the
float64 reference on the dequantized weights (tests/test_fp8.py holds the CPU edges and the
tolerances). The claims measured here:

* warp decode with FP8 weights is within 1.1× the bf16 rounding floor of the layer it computes,
  in both formats and both schedules (the pair, the grouped one), on every model preset and at the
  GPU-sized edges (H = 2880: partial 128-column blocks; I = 1408; prime E = 61; K = 1; K = E);
* the weight-only expert path stays within the bf16 expert path's bound, and the w8a8 form (the
  classical production path) lies far above the floor, within its own bound;
* compiled (``torch.compile``, Inductor, CUDA graphs), every method that runs kernels on FP8 weights
  gives eager's bits.

Marked ``gpu``: skipped where kernels run in the CPU interpreter (see conftest.py). Each preset's
weights are drawn, quantized and dropped in turn; the reference is computed once per (layer, T).
"""

from __future__ import annotations

import pytest
import torch
from moecases import Case, run_poisoned
from test_fp8 import TOLERANCE, expert_tolerance

import warpdecode as wd
from warpdecode import api, configs, quant

pytestmark = pytest.mark.gpu

DEVICE = "cuda"
TOL = TOLERANCE[torch.bfloat16]
TOKENS = [1, 8, 64]

#: the presets whose shapes bring an edge of their own, and the GPU-sized edges
PRESETS = ["qwen3-30b-a3b", "gpt-oss-20b", "mixtral-8x7b", "olmoe-1b-7b"]
EDGES = [
    Case("T=1-H=2880-I=1408-prime-E=61-K=4", T=1, H=2880, I=1408, E=61, K=4),
    Case("T=8-K=1", T=8, H=2880, I=1408, E=61, K=1),
    Case("T=3-K=E=61", T=3, H=2880, I=1408, E=61, K=61),
]

_layer: dict = {}


def _weights(key, H, I, E, K, fmt):  # noqa: E741
    """(w13, w2) in ``fmt`` for one layer shape, drawn once (the last shape's are dropped)."""
    if _layer.get("key") != (key, fmt):
        _layer.clear()
        torch.cuda.empty_cache()
        w13, w2 = wd.MoEShape(str(key), H=H, I=I, E=E, K=K).weights(device=DEVICE, seed=3)
        _layer.update(key=(key, fmt), w=wd.quantize_experts(w13, w2, fmt))
    return _layer["w"]


def _inputs(H, E, K, T, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, H, generator=g).to(torch.bfloat16).to(DEVICE)
    tw, ti = wd.route(torch.randn(T, E, generator=g).to(DEVICE), K)
    return x, tw, ti


def _check_all_methods(x, w13, w2, tw, ti):
    ref = wd.reference_moe(x, w13, w2, tw, ti)
    floor = wd.rounding_floor(ref, torch.bfloat16)
    got = {}
    for name, kw in (("warp", dict(method="warp")), ("warp-grouped", dict(method="warp", schedule="grouped")),
                     ("expert", dict(method="expert")), ("expert-w8a8", dict(method="expert", act_format="fp8")),
                     ("auto", dict(method="auto"))):
        got[name] = wd.rel_error(run_poisoned((x, w13, w2, tw, ti), **kw), ref) / floor
    T, H = x.shape
    picked = api.pick_method(T, H, w2.shape[2], w13.shape[0], ti.shape[1], 2, w13.FORMAT)
    tol = {**TOL, "expert": expert_tolerance(ti.shape[1])}
    assert got["warp"] <= tol["warp"] and got["warp-grouped"] <= tol["warp"], got
    assert got["expert"] <= tol["expert"], got
    assert 5 < got["expert-w8a8"] <= tol["expert-w8a8"], got
    assert got["auto"] <= tol[picked], (picked, got)


@pytest.mark.parametrize("fmt", quant.FORMATS)
@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("T", TOKENS)
def test_fp8_presets(preset, T, fmt):
    p = wd.get_preset(preset)
    w13, w2 = _weights(preset, p.H, p.I, p.E, p.K, fmt)
    x, tw, ti = _inputs(p.H, p.E, p.K, T, seed=T)
    _check_all_methods(x, w13, w2, tw, ti)


@pytest.mark.parametrize("fmt", quant.FORMATS)
def test_fp8_many_rows_per_expert_at_the_capped_tiles(fmt):
    """OLMoE at T = 256 (32 rows per expert on average), the defaults (no table): the FP8 expert path's 32-row M
    tiles, grouped, with fp16 rows, where the 16-bit rule takes 64 rows (configs.FP8_WEIGHTS_MAX_BLOCK_M)."""
    p = wd.get_preset("olmoe-1b-7b")
    with configs.tables(shipped=False, cache=False):
        assert configs.expert_config(p.H, p.I, p.E, p.K, 256, weights=fmt)["BLOCK_M"] == 32
        w13, w2 = _weights("olmoe-1b-7b", p.H, p.I, p.E, p.K, fmt)
        x, tw, ti = _inputs(p.H, p.E, p.K, 256, seed=256)
        _check_all_methods(x, w13, w2, tw, ti)


@pytest.mark.parametrize("fmt", quant.FORMATS)
@pytest.mark.parametrize("case", EDGES, ids=lambda c: c.id)
def test_fp8_edges(case, fmt):
    w13, w2 = _weights("edge", case.H, case.I, case.E, 61, fmt)
    x, tw, ti = _inputs(case.H, case.E, case.K, case.T, seed=case.K)
    _check_all_methods(x, w13, w2, tw, ti)


def test_fp8_warp_decode_in_a_cuda_graph():
    """Captured once and replayed, the FP8 pair rewrites every element of its output (the benchmark's
    timing form); the replay's bits are the eager call's."""
    p = wd.get_preset("qwen3-30b-a3b")
    w13, w2 = _weights("qwen3-30b-a3b", p.H, p.I, p.E, p.K, "block128")
    x, tw, ti = _inputs(p.H, p.E, p.K, 4, seed=11)
    from bench.timing import capture_poisoned
    from warpdecode.warp import moe_warp

    ti = ti.to(torch.int32)
    g, (y,) = capture_poisoned(lambda: [moe_warp(x, w13, w2, tw, ti)])
    assert torch.equal(y, moe_warp(x, w13, w2, tw, ti))


@pytest.mark.parametrize("fmt", quant.FORMATS)
def test_the_tuner_on_fp8_weights_writes_tiles_moe_runs(fmt, monkeypatch, tmp_path):
    """``warpdecode.tune(..., weights=fmt)`` on a small layer, two candidate tiles: each compiled and
    timed on FP8 copies of that format, the faster written as ``expert_<fmt>`` with the measured
    ``crossover_<fmt>``; ``auto`` then names the measured crossover, and the expert path on the tuned
    tile stays within its bound of float64."""
    from warpdecode import configs
    from warpdecode import tuner as tune

    monkeypatch.setenv("WARPDECODE_CACHE_DIR", str(tmp_path))
    configs.load_tuned.cache_clear()
    two = [{"BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 1, "num_warps": 4, "num_stages": 3},
           {"BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 1, "num_warps": 4, "num_stages": 3}]
    monkeypatch.setattr(tune, "gemm_candidates", lambda group_m=1: [dict(c, GROUP_M=group_m) for c in two])
    H, I, E, K = 1024, 384, 16, 4  # noqa: E741
    try:
        table = wd.tune(H, I, E, K, Ts=[1, 8], weights=fmt)
        key = configs.shape_key(H, I, E, K)
        assert [T for T, _ in table[f"expert_{fmt}"][key]] == [1, 8]
        assert set(table[f"crossover_evidence_{fmt}"][key]) == {"1", "8"}
        crossover = table[f"crossover_{fmt}"][key]
        w13, w2 = _weights("tuned", H, I, E, K, fmt)
        x, tw, ti = _inputs(H, E, K, 8, seed=5)
        plan = wd.explain(x, w13, w2, tw, ti)
        assert plan.crossover == crossover and "measured on this GPU" in plan.reason, plan
        ref = wd.reference_moe(x, w13, w2, tw, ti)
        got = wd.rel_error(run_poisoned((x, w13, w2, tw, ti), method="expert"), ref)
        assert got <= expert_tolerance(K) * wd.rounding_floor(ref, torch.bfloat16)
    finally:
        configs.load_tuned.cache_clear()


#: every method that runs kernels on FP8 weights (loop's hit-expert list is a host sync: no graph)
COMPILED_VARIANTS = [dict(method="warp"), dict(method="expert"), dict(method="expert", act_format="fp8"),
                     dict(method="auto")]


@pytest.mark.parametrize("T", [1, 16])
@pytest.mark.parametrize("fmt", quant.FORMATS)
def test_fp8_moe_compiled_with_cuda_graphs_matches_eager(T, fmt):
    """torch.compile(mode="reduce-overhead", fullgraph=True) with FP8 weights: one
    warpdecode::moe_fp8 per method inside Inductor's CUDA graphs (no host sync, nothing that makes
    cudagraph trees skip the graph, one graph). Five calls, each with fresh inputs copied into the
    same static buffers (the decode loop's pattern): every output is eager's bits."""
    from torch._dynamo.utils import counters

    p = wd.get_preset("qwen3-30b-a3b")
    w13, w2 = _weights("qwen3-30b-a3b", p.H, p.I, p.E, p.K, fmt)
    for t in (w13.weight, w13.scale, w2.weight, w2.scale):
        torch._dynamo.mark_static_address(t)
    torch._dynamo.reset()
    counters.clear()
    f = torch.compile(lambda x, tw, ti: [wd.moe(x, w13, w2, tw, ti, **kw) for kw in COMPILED_VARIANTS],
                      mode="reduce-overhead", fullgraph=True, dynamic=False)
    x_s, tw_s, ti_s = (t.clone() for t in _inputs(p.H, p.E, p.K, T, seed=0))
    with torch.no_grad():
        for call in range(1, 6):
            x, tw, ti = _inputs(p.H, p.E, p.K, T, seed=call)
            x_s.copy_(x), tw_s.copy_(tw), ti_s.copy_(ti)
            got = [y.clone() for y in f(x_s, tw_s, ti_s)]  # the graph's outputs are rewritten by the next replay
            for y, kw in zip(got, COMPILED_VARIANTS, strict=True):
                assert torch.equal(y, wd.moe(x, w13, w2, tw, ti, **kw)), (kw, call)
    assert counters["inductor"]["cudagraph_skips"] == 0, dict(counters["inductor"])
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])
    torch._dynamo.reset()
