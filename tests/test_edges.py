"""Every method on every CPU-sized edge (moecases.EDGE_CASES): T=1, odd H and I, prime E, K=1,
K=E, every token on the same experts, experts that receive no token, T*K past one BLOCK_M block;
and T=0. Each run is poisoned (an unwritten element is NaN) and held to the tolerance table in
test_accuracy.py.
"""

from __future__ import annotations

import pytest
import torch
from moecases import EDGE_CASES, VARIANTS, Case, make_inputs, run_poisoned, variant_kwargs
from test_accuracy import check_accuracy

from bench.poison import poisoned
from warpdecode import _alloc

# On the CPU "warp" runs the split schedule (the interpreter's default config, configs.warp_config), so
# "warp-split" would repeat it; auto gives bit for bit the method it picks (test_accuracy.py,
# test_auto_is_the_method_it_picks)
EDGE_VARIANTS = [v for v in VARIANTS if v not in ("warp-split", "auto")]


@pytest.mark.parametrize("variant", EDGE_VARIANTS)
@pytest.mark.parametrize("case", EDGE_CASES, ids=[c.id for c in EDGE_CASES])
def test_edge(case, variant, seed):
    inputs = make_inputs(case, torch.bfloat16, seed)
    if case.routing != "router":  # the routing the case names is the one it got
        hit = torch.unique(inputs[4])
        assert len(hit) == (case.K if case.routing == "same" else min(case.E, case.K + 1))
    check_accuracy(inputs, variant, torch.bfloat16)


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=["bf16", "fp16", "fp32"])
def test_T0_returns_empty(dtype, variant, seed):
    case = Case("T=0", T=0, H=45, I=23, E=5, K=2)
    inputs = make_inputs(case, dtype, seed)
    y = run_poisoned(inputs, **variant_kwargs(variant, dtype))
    assert y.shape == (0, 45) and y.dtype == dtype


def test_poison_is_armed():
    """Control for every poisoned run: inside the block new buffers are NaN / 2**30, and the
    block restores the previous state on exit."""
    with poisoned():
        f = _alloc.empty(3, 5, dtype=torch.bfloat16, device="cpu")
        i = _alloc.empty(7, dtype=torch.int32, device="cpu")
        with poisoned():
            pass
        assert _alloc._POISON
    assert torch.isnan(f).all() and (i == _alloc.INT_POISON).all()
    assert not _alloc._POISON


@pytest.mark.parametrize("schedule", ["split", "fused", "grouped"])
def test_warp_same_expert_in_two_slots(schedule, seed):
    """A top-K that names one expert twice (routing code may, e.g. after masking experts): the
    layer is then the sum over the slots, each with its own weight. The grouped schedule finds a
    token's slots by comparing ids with its expert, so it must add both weights, not pick one."""
    import warpdecode

    case = Case("dup", T=5, H=64, I=40, E=6, K=3)
    x, w13, w2, tw, ids = make_inputs(case, torch.bfloat16, seed)
    ids = ids.clone()
    ids[:, 1] = ids[:, 0]  # every token: slot 1 repeats slot 0's expert
    ref = warpdecode.reference_moe(x, w13, w2, tw, ids)
    y = run_poisoned((x, w13, w2, tw, ids), method="warp", schedule=schedule)
    from test_accuracy import limit

    ratio = warpdecode.rel_error(y, ref) / warpdecode.rounding_floor(ref, torch.bfloat16)
    assert ratio <= limit(torch.bfloat16, "warp", case.K), ratio


@pytest.mark.parametrize("slices", [1, 2, 4], ids=["one-load", "2-slices", "4-slices"])
def test_warp_gate_up_in_slices_matches_float64(slices, seed):
    """The gate/up step loaded in slices (``SUB_H``, what Triton ≥ 3.8 runs: see
    ``warp_pair.gate_up_slice``) computes silu(gate)·up as the one-load step does, at an H that
    ends in a partial step and a partial slice, with an I that ends in a partial block; poisoned."""
    from warpdecode import warp as wp

    T, H, I, E, K = 3, 2880 // 8 + 5, 23, 5, 2  # noqa: E741  H = 365: 256-column steps, last one partial
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(T, H, generator=gen).bfloat16()
    w13 = (torch.randn(E, 2 * I, H, generator=gen) * H**-0.5).bfloat16()
    ids = torch.stack([torch.randperm(E, generator=gen)[:K] for _ in range(T)]).to(torch.int32)
    tw = torch.rand(T, K, generator=gen)
    cfg = {"BLOCK_I": 4, "BLOCK_H": 256, "num_warps": 1, "num_stages": 1, "SUB_H": 256 // slices}
    with poisoned():
        act = wp.warp_gate_up(x, w13, ids, tw, cfg)
    w = w13.double()[ids.long().flatten()]  # (T*K, 2I, H)
    h = torch.einsum("prh,ph->pr", w, x.double().repeat_interleave(K, 0))
    ref = torch.nn.functional.silu(h[:, :I]) * h[:, I:]
    err = ((act.double() - ref).norm() / ref.norm()).item()
    assert err < 1e-6, err  # an FP32 intermediate, FP32 sums: no bf16 rounding after the inputs


@pytest.mark.parametrize("form", ["3-D", "per-slot", "k-first"])
@pytest.mark.parametrize("T,H,I,E,K", [(2, 24, 40, 5, 1), (3, 16, 40, 6, 6), (2, 20, 33, 7, 3)],
                         ids=["K=1", "K=E", "K=3,I-partial"])
def test_warp_down_forms_match_float64(form, T, H, I, E, K, seed, monkeypatch):  # noqa: E741
    """The down tile's three forms (``warp_pair``: [rows, K, columns], K 2-D tiles, [K, rows,
    columns]) compute Σ_j w[t, j] · W2[e_tj]·a[tK+j] as float64 does: K = 1, K = E, K not a power of
    two (padded slots), I past the last full 16-column step, rows past H; poisoned."""
    from warpdecode import warp as wp
    from warpdecode.kernels import warp_pair as kp

    monkeypatch.setattr(kp, "down_form", lambda *args, **kwargs: (form == "per-slot", form == "k-first"))
    gen = torch.Generator().manual_seed(seed)
    act = torch.randn(T * K, I, generator=gen)
    w2 = (torch.randn(E, H, I, generator=gen) * I**-0.5).bfloat16()
    ids = torch.stack([torch.randperm(E, generator=gen)[:K] for _ in range(T)]).to(torch.int32)
    tw = torch.rand(T, K, generator=gen)
    cfg = {"BLOCK_H": 8, "BLOCK_I": 16, "num_warps": 1, "num_stages": 1}
    with poisoned():
        y = wp.warp_down(act, w2, ids, tw, cfg, torch.float32)
    w = w2.double()[ids.long()]  # (T, K, H, I)
    ref = torch.einsum("tkhi,tki,tk->th", w, act.double().view(T, K, I), tw.double())
    err = ((y.double() - ref).norm() / ref.norm()).item()
    assert err < 1e-6, err  # FP32 sums of bf16 weights and an FP32 intermediate: no rounding after the inputs
