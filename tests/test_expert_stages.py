"""The expert-centric path one stage at a time (warpdecode.expert.align … combine; gather and
scatter as kernels of their own from bench.unfused), each against
an independent computation: pure Python for the index arrays, torch for the data movement, a
torch re-implementation for the FP8 quantizer, float64 for the two grouped GEMMs.

Every stage runs inside ``poisoned()``: an element a kernel should write and did not is
NaN (floats) or 2**30 (indices) and fails the comparison.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
import torch.nn.functional as F

import warpdecode
from bench import unfused
from bench.poison import poisoned
from warpdecode import expert
from warpdecode.configs import expert_config

DEV = warpdecode.DEFAULT_DEVICE  # the GPU where kernels compile for one, else the CPU interpreter

# GEMM stage output vs float64, as error / rounding floor (one rounding to the output dtype). A
# 16-bit output's rounding swamps the FP32 accumulation: 1.05. An fp32 output carries the
# accumulation's error itself, which grows with the reduction length n like sqrt(n) roundings: on the
# H200 (sequential FMAs, "ieee") the gate/up GEMM over H = 300 measured 16-22 × the floor, where the
# interpreter's pairwise numpy sums stay under 12; so 2·sqrt(n). A wrong row, a missing term or a
# tf32 product is 10^3-10^6 × the fp32 floor.
GEMM_TOL = {torch.bfloat16: 1.05, torch.float16: 1.05}
FP32_TOL_PER_ROOT_TERM = 2.0


def _tol(dtype, n_terms: int) -> float:
    return GEMM_TOL[dtype] if dtype in GEMM_TOL else FP32_TOL_PER_ROOT_TERM * n_terms ** 0.5

# (id, T, K, E, block_m, routing): routing "random" draws ids uniformly, "one" sends every pair to
# expert E-1 (the last, so every other expert's run is empty)
ALIGN_CASES = [
    ("T=1-K=1-E=1", 1, 1, 1, 16, "random"),
    ("T=1-K=2-prime-E=61-T*K<E", 1, 2, 61, 16, "random"),
    ("T=5-K=2-prime-E=7", 5, 2, 7, 16, "random"),
    ("T=3-K=E=4", 3, 4, 4, 16, "random"),
    ("T=20-K=3-E=4-runs-span-blocks", 20, 3, 4, 16, "random"),
    ("T=16-K=1-one-expert-exact-block", 16, 1, 5, 16, "one"),
    ("T=17-K=1-one-expert-one-over", 17, 1, 5, 16, "one"),
    ("T=9-K=3-prime-E=13-block_m=4", 9, 3, 13, 4, "random"),
    ("T=64-K=8-E=128-decode-batch", 64, 8, 128, 16, "random"),
    ("T=64-K=8-E=128-block_m=64", 64, 8, 128, 64, "random"),
    ("T=256-K=8-E=128-sentinel-fill-spans-steps", 256, 8, 128, 16, "random"),
    ("T=100-K=1-E=1-block_m=64-more-programs-than-blocks", 100, 1, 1, 64, "random"),
    ("T=600-K=8-E=64-counted-in-two-steps", 600, 8, 64, 64, "random"),
]


def _ids(T, K, E, routing, g):
    if routing == "one":
        return torch.full((T, K), E - 1, dtype=torch.int32)
    # K distinct experts per token, as routing produces
    return torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)]).to(torch.int32)


def _expected_runs(topk_ids, E, block_m):
    """Pure Python: (start, pairs, padded rows) of each expert's run, experts in increasing order."""
    pairs_of = {e: [] for e in range(E)}
    for p, e in enumerate(topk_ids.flatten().tolist()):
        pairs_of[e].append(p)
    runs, start = {}, 0
    for e in range(E):
        n = len(pairs_of[e])
        padded = -(-n // block_m) * block_m
        runs[e] = (start, pairs_of[e], padded)
        start += padded
    return runs, start


@pytest.mark.parametrize("T,K,E,block_m,routing", [c[1:] for c in ALIGN_CASES], ids=[c[0] for c in ALIGN_CASES])
def test_align_matches_vllm_contract(T, K, E, block_m, routing, seed):
    g = torch.Generator().manual_seed(seed)
    topk_ids = _ids(T, K, E, routing, g).to(DEV)
    with poisoned():
        al = expert.align(topk_ids, E, block_m)
    num_pairs = T * K
    runs, total = _expected_runs(topk_ids, E, block_m)
    sorted_ids = al.sorted_token_ids.tolist()
    expert_ids = al.expert_ids.tolist()

    assert al.num_pairs == num_pairs and al.block_m == block_m
    assert int(al.num_tokens_post_padded.item()) == total
    assert al.EM % block_m == 0 and al.EM >= total and len(expert_ids) == al.EM // block_m
    for e, (start, pairs, padded) in runs.items():
        run = sorted_ids[start:start + padded]
        # the run holds exactly e's pairs plus padding (vLLM leaves the order inside a run free;
        # this kernel keeps the pairs' order, so its output is the same on every run)
        assert Counter(run) == Counter(pairs) + Counter({num_pairs: padded - len(pairs)}), f"expert {e}"
        assert run[:len(pairs)] == pairs, f"expert {e}"
        assert all(expert_ids[b] == e for b in range(start // block_m, (start + padded) // block_m)), f"expert {e}"
    # past num_tokens_post_padded: sentinel rows, blocks marked -1
    assert all(p == num_pairs for p in sorted_ids[total:])
    assert all(b == -1 for b in expert_ids[total // block_m:])


@pytest.mark.parametrize("num_pairs,E,block_m", [(1, 61, 16), (2, 128, 16), (7, 7, 16), (64, 128, 16), (512, 128, 64)],
                         ids=["T*K=1-E=61", "T*K=2-E=128", "T*K=E=7", "T*K=64-E=128", "T*K=512-E=128-block_m=64"])
def test_em_bound_covers_worst_routing(num_pairs, E, block_m):
    """EM is sized without a sync, so it must cover the routing that pads most: every expert that
    can get a pair gets one, and each further block of an expert costs block_m more pairs."""
    if num_pairs <= E:
        worst_blocks = num_pairs
    else:
        worst_blocks = E + (num_pairs - E) // block_m
    assert expert.max_padded_rows(num_pairs, E, block_m) >= worst_blocks * block_m


def _aligned(T, K, E, seed, routing="random", block_m=16):
    g = torch.Generator().manual_seed(seed)
    topk_ids = _ids(T, K, E, routing, g).to(DEV)
    with poisoned():
        al = expert.align(topk_ids, E, block_m)
    return topk_ids, al, g


STAGE_CASES = [
    ("T=1-K=1", 1, 1, 5),
    ("T=5-K=2-prime-E=7", 5, 2, 7),
    ("T=12-K=3-E=3-T*K>BLOCK_M", 12, 3, 3),
    ("T=2-K=2-prime-E=13-idle-experts", 2, 2, 13),
]
stage_params = pytest.mark.parametrize("T,K,E", [c[1:] for c in STAGE_CASES], ids=[c[0] for c in STAGE_CASES])
dtypes = pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=["bf16", "fp16", "fp32"])
# The GEMM stages: each routing case in one dtype, each dtype (its own tiles: FP32's on FMAs) in at
# least one case; the routing cases exercise the index arithmetic, the dtypes the operand types
GEMM_DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.bfloat16)
gemm_params = pytest.mark.parametrize(
    "T,K,E,dtype", [(*c[1:], d) for c, d in zip(STAGE_CASES, GEMM_DTYPES, strict=True)],
    ids=[f"{str(d).removeprefix('torch.')}-{c[0]}" for c, d in zip(STAGE_CASES, GEMM_DTYPES, strict=True)])


def _used_rows(al):
    ntpp = int(al.num_tokens_post_padded.item())
    ids = al.sorted_token_ids[:ntpp].long()
    return ntpp, ids, ids < al.num_pairs


@stage_params
@dtypes
def test_gather_matches_index_select(T, K, E, dtype, seed):
    _, al, g = _aligned(T, K, E, seed)
    H = 45  # odd, below one BLOCK_H
    x = torch.randn(T, H, generator=g).to(dtype).to(DEV)
    with poisoned():
        a = unfused.gather(x, al, K)
    ntpp, ids, valid = _used_rows(al)
    want = torch.where(valid[:, None], x[torch.where(valid, ids, 0) // K], torch.zeros((), dtype=dtype, device=DEV))
    assert a.shape == (al.EM, H) and a.dtype == dtype
    assert torch.equal(a[:ntpp], want)


def _quantize_ref(a, group=128):
    """torch: per row and 1×128 group, s = 2^ceil(log2(amax/448)), q = clamp(a/s) rounded to e4m3."""
    EM, N = a.shape
    groups = -(-N // group)
    a32 = F.pad(a.float(), (0, groups * group - N)).view(EM, groups, group)
    amax = a32.abs().amax(dim=-1).clamp_min(1e-30)
    s = torch.exp2(torch.ceil(torch.log2(amax / 448.0)))
    q = (a32 / s[..., None]).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return q.view(EM, groups * group)[:, :N], s


@pytest.mark.parametrize("N", [88, 128, 160, 300],
                         ids=["N=88<group", "N=128=group", "N=160-partial-group", "N=300-3-groups"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_quantize_fp8_matches_torch(N, dtype, seed):
    T, K, E = 6, 2, 5
    _, al, g = _aligned(T, K, E, seed)
    ntpp, ids, valid = _used_rows(al)
    # a gathered-like buffer: rows of very different magnitudes, padding rows zero
    a = torch.randn(al.EM, N, generator=g) * torch.exp2(torch.randint(-8, 8, (al.EM, 1), generator=g).float())
    a = torch.where(torch.arange(al.EM)[:, None] < ntpp, a, float("nan"))  # never read past ntpp
    a[:ntpp][~valid.cpu()] = 0.0
    a = a.to(dtype).to(DEV)
    with poisoned():
        q, scales = expert.quantize(a, al, "fp8")
    want_q, want_s = _quantize_ref(a[:ntpp])
    assert q.dtype == torch.float8_e4m3fn and scales.shape == (al.EM, -(-N // 128))
    assert torch.equal(scales[:ntpp], want_s)
    mantissa, _ = torch.frexp(scales[:ntpp])
    assert torch.all(mantissa == 0.5), "scales must be powers of two"
    assert torch.equal(q[:ntpp].view(torch.uint8), want_q.view(torch.uint8))
    # the dequantised value is within half an e4m3 step (3 mantissa bits) of a
    deq = q[:ntpp].float().view(ntpp, -1) * scales[:ntpp].repeat_interleave(128, dim=1)[:, :N]
    assert torch.all((deq - a[:ntpp].float()).abs() <= a[:ntpp].float().abs() * 2**-4 + scales[:ntpp].amax() * 2**-9)


def test_quantize_native_is_identity():
    _, al, g = _aligned(3, 2, 5, 0)
    a = torch.randn(al.EM, 40, generator=g).to(torch.bfloat16).to(DEV)
    q, s = expert.quantize(a, al, "native")
    assert q is a and s is None


def _stage_inputs(T, K, E, dtype, seed, fp8):
    H, I = 300, 88  # H crosses two 128-column scale groups; both odd multiples of 4
    # its BLOCK_M grows with the pairs per expert (GPU defaults); FP32 weights take their own tiles, as moe's do
    cfg = expert_config(H, I, E, K, T, fp8=fp8, elem=torch.empty((), dtype=dtype).element_size())
    topk_ids, al, g = _aligned(T, K, E, seed, block_m=cfg["BLOCK_M"])
    x = torch.randn(T, H, generator=g).to(dtype).to(DEV)
    w13, w2 = (w.to(DEV) for w in warpdecode.MoEShape("stage", H=H, I=I, E=E, K=K).weights(dtype=dtype, seed=seed))
    return x, w13, w2, al, cfg


def _ratio(got, want64, dtype):
    return warpdecode.rel_error(got, want64) / warpdecode.rounding_floor(want64, dtype)


@gemm_params
@pytest.mark.parametrize("fmt", ["native", "fp8"])
def test_gate_up_matches_float64(T, K, E, dtype, fmt, seed):
    x, w13, w2, al, cfg = _stage_inputs(T, K, E, dtype, seed, fmt == "fp8")
    I = w2.shape[2]  # noqa: E741
    with poisoned():
        a = unfused.gather(x, al, K)
        aq, a_scales = expert.quantize(a, al, fmt)
        h = expert.gate_up(aq, a_scales, w13, al, cfg["gate_up"])
    ntpp, ids, valid = _used_rows(al)
    # the GEMM's input as the kernel sees it: the FP8 values times their scales
    a_in = a[:ntpp].double() if fmt == "native" else (
        aq[:ntpp].double() * a_scales[:ntpp].double().repeat_interleave(128, dim=1)[:, : a.shape[1]])
    e = al.expert_ids[torch.arange(ntpp, device=DEV) // al.block_m].long()
    gu = torch.einsum("rh,rnh->rn", a_in, w13.double()[e])
    want = F.silu(gu[:, :I]) * gu[:, I:]
    assert h.shape == (al.EM, I) and h.dtype == dtype
    assert h[:ntpp][~valid].isnan().all(), "padding rows are not written (poison left in place)"
    assert _ratio(h[:ntpp][valid], want[valid], dtype) <= _tol(dtype, x.shape[1])


@gemm_params
@pytest.mark.parametrize("fmt", ["native", "fp8"])
def test_down_matches_float64(T, K, E, dtype, fmt, seed):
    x, w13, w2, al, cfg = _stage_inputs(T, K, E, dtype, seed, fmt == "fp8")
    g = torch.Generator().manual_seed(seed + 1)
    ntpp, ids, valid = _used_rows(al)
    I = w2.shape[2]  # noqa: E741
    h = torch.randn(al.EM, I, generator=g).to(DEV)
    h[:ntpp][~valid] = float("nan")  # padding rows of the intermediate: never written by gate_up
    h = h.to(dtype)
    topk_weights = torch.softmax(torch.randn(T, K, generator=g), dim=-1).to(DEV)
    with poisoned():
        hq, h_scales = expert.quantize(h, al, fmt)
        o = expert.down(hq, h_scales, w2, al, topk_weights, cfg["down"])
    h_in = h[:ntpp].double() if fmt == "native" else (
        hq[:ntpp].double() * h_scales[:ntpp].double().repeat_interleave(128, dim=1)[:, :I])
    e = al.expert_ids[torch.arange(ntpp, device=DEV) // al.block_m].long()
    rw = topk_weights.flatten()[torch.where(valid, ids, 0)].double()
    want = torch.einsum("ri,rhi->rh", h_in[valid], w2.double()[e[valid]]) * rw[valid, None]
    assert o.shape == (al.EM, w2.shape[1]) and o.dtype == dtype
    assert o[:ntpp][~valid].isnan().all(), "padding rows are not written (poison left in place)"
    assert _ratio(o[:ntpp][valid], want, dtype) <= _tol(dtype, I)


@stage_params
@dtypes
def test_scatter_matches_index_copy(T, K, E, dtype, seed):
    _, al, g = _aligned(T, K, E, seed)
    H = 45
    o = torch.randn(al.EM, H, generator=g).to(dtype).to(DEV)
    with poisoned():
        s = unfused.scatter(o, al)
    ntpp, ids, valid = _used_rows(al)
    want = torch.full((T * K, H), float("nan"), dtype=dtype, device=DEV).index_copy_(0, ids[valid], o[:ntpp][valid])
    assert s.shape == (T * K, H)
    assert torch.equal(s, want)  # every pair's row written (no NaN left), from the right row


@pytest.mark.parametrize("T,K,H", [(1, 1, 45), (3, 4, 160), (5, 8, 1100)],
                         ids=["T=1-K=1", "T=3-K=4", "T=5-K=8-H>BLOCK_H"])
@dtypes
def test_combine_sums_in_compute_dtype(T, K, H, dtype, seed):
    """vLLM's moe_sum: one rounding to the compute dtype per add, slot 0 first."""
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(T * K, H, generator=g).to(dtype).to(DEV)
    topk_ids = torch.randint(0, K, (T, K), generator=g, dtype=torch.int32).to(DEV)  # every id in range
    with poisoned():
        y = expert.combine(s, topk_ids, torch.rand(T, K, generator=g).to(DEV), K)
    want = torch.zeros(T, H, dtype=dtype, device=DEV)
    for j in range(K):
        want = (want.float() + s.view(T, K, H)[:, j].float()).to(dtype)
    assert torch.equal(y, want)


@stage_params
def test_stages_compose_to_moe_expert(T, K, E, seed):
    """The eight stages called one by one give bit for bit what moe(method='expert') gives."""
    dtype = torch.bfloat16
    x, w13, w2, _, cfg = _stage_inputs(T, K, E, dtype, seed, False)
    g = torch.Generator().manual_seed(seed + 2)
    topk_weights, topk_ids = warpdecode.route(torch.randn(T, E, generator=g).to(DEV), K)
    with poisoned():
        al = expert.align(topk_ids, E, cfg["BLOCK_M"])
        a, _ = expert.quantize(unfused.gather(x, al, K), al)
        h = expert.gate_up(a, None, w13, al, cfg["gate_up"])
        o = expert.down(h, None, w2, al, topk_weights, cfg["down"])
        y = expert.combine(unfused.scatter(o, al), topk_ids, topk_weights, E)
        want = warpdecode.moe(x, w13, w2, topk_weights, topk_ids, method="expert")
    assert torch.equal(y, want)


@gemm_params
@pytest.mark.parametrize("fmt", ["native", "fp8"])
def test_fused_gather_scatter_is_the_same_to_the_bit(T, K, E, dtype, fmt, seed):
    """Gather inside the gate/up GEMM's loads and scatter inside the down GEMM's stores (vLLM's
    form, moe_expert's default) give exactly what the eight separate stages give."""
    x, w13, w2, _, cfg = _stage_inputs(T, K, E, dtype, seed, fmt == "fp8")
    g = torch.Generator().manual_seed(seed + 3)
    topk_weights, topk_ids = warpdecode.route(torch.randn(T, E, generator=g).to(DEV), K)
    with poisoned():
        fused = expert.moe_expert(x, w13, w2, topk_weights, topk_ids, act_format=fmt)
        apart = unfused.moe_expert_unfused(x, w13, w2, topk_weights, topk_ids, act_format=fmt)
    assert not fused.isnan().any()
    assert torch.equal(fused, apart)


def _counted(dtype, H, I, counts, seed):  # noqa: E741
    """A layer with len(counts) experts, K = 1, and a routing that sends counts[e] tokens to expert e
    (in random order): (x, w13, w2, topk_weights, topk_ids) on DEV."""
    g = torch.Generator().manual_seed(seed)
    flat = torch.cat([torch.full((c,), e, dtype=torch.int32) for e, c in enumerate(counts)])
    topk_ids = flat[torch.randperm(len(flat), generator=g)].view(-1, 1).to(DEV)
    x = torch.randn(topk_ids.shape[0], H, generator=g).to(dtype).to(DEV)
    shape = warpdecode.MoEShape("counted", H=H, I=I, E=len(counts), K=1)
    w13, w2 = (w.to(DEV) for w in shape.weights(dtype=dtype, seed=seed))
    return x, w13, w2, torch.rand(topk_ids.shape[0], 1, generator=g).to(DEV), topk_ids


@pytest.mark.parametrize("block_m", [32, 128], ids=["BLOCK_M=32-half-16-rows", "BLOCK_M=128-half-64-rows"])
@pytest.mark.parametrize("fmt", ["native", "fp8"])
def test_half_m_tiles_match_float64(block_m, fmt, seed):
    """HALF_M: a block whose upper half is padding runs as a BLOCK_M/2-row tile. The routing gives
    blocks on both sides of the line: an expert with exactly BLOCK_M/2 pairs (half tile), one with
    BLOCK_M/2 + 1 (full tile, one valid row in the upper half), one with BLOCK_M + 1 (a full block,
    then a block of one pair: half tile) and one with none. Both GEMMs, gather and scatter fused as
    moe_expert runs them, against float64; padding rows stay poisoned; and the whole path with HALF_M
    gives what it gives without, to the bit."""
    dtype, H, I = torch.bfloat16, 300, 88  # noqa: E741
    half = block_m // 2
    E, K = 4, 1
    x, w13, w2, topk_weights, topk_ids = _counted(dtype, H, I, [half, half + 1, block_m + 1, 0], seed)
    tile = {"BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1, "num_warps": 4, "num_stages": 2}
    with poisoned():
        al = expert.align(topk_ids, E, block_m)
    ntpp, ids, valid = _used_rows(al)
    upper = valid.view(-1, block_m)[:, half]
    assert upper.any() and not upper.all(), "the routing must give blocks of both kinds"

    with poisoned():
        xq, x_scales = expert.quantize(x, None, fmt)
        h = expert.gate_up(xq, x_scales, w13, al, dict(tile, HALF_M=True), gather_k=K)
        hq, h_scales = expert.quantize(h, al, fmt)
        o = expert.down(hq, h_scales, w2, al, topk_weights, dict(tile, HALF_M=True), scatter=True)
    x_in = x.double() if fmt == "native" else (
        xq.double() * x_scales.double().repeat_interleave(128, dim=1)[:, :H])
    e = al.expert_ids[torch.arange(ntpp, device=DEV) // block_m].long()[valid]
    pairs = ids[valid]
    gu = torch.einsum("rh,rnh->rn", x_in[pairs // K], w13.double()[e])
    want_h = F.silu(gu[:, :I]) * gu[:, I:]
    assert h[:ntpp][~valid].isnan().all(), "padding rows are not written (poison left in place)"
    assert _ratio(h[:ntpp][valid], want_h, dtype) <= _tol(dtype, H)
    h_in = h[:ntpp].double() if fmt == "native" else (
        hq[:ntpp].double() * h_scales[:ntpp].double().repeat_interleave(128, dim=1)[:, :I])
    want_o = torch.einsum("ri,rhi->rh", h_in[valid], w2.double()[e]) * topk_weights.flatten()[pairs].double()[:, None]
    assert not o.isnan().any(), "every pair's row is written"
    assert _ratio(o[pairs], want_o, dtype) <= _tol(dtype, I)

    cfg = {"BLOCK_M": block_m, "gate_up": dict(tile), "down": dict(tile)}
    halved = {"BLOCK_M": block_m, "gate_up": dict(tile, HALF_M=True), "down": dict(tile, HALF_M=True)}
    with poisoned():
        y = expert.moe_expert(x, w13, w2, topk_weights, topk_ids, act_format=fmt, config=cfg)
        y_half = expert.moe_expert(x, w13, w2, topk_weights, topk_ids, act_format=fmt, config=halved)
    assert not y_half.isnan().any()
    assert torch.equal(y_half, y), "each row's products and sums are the same in a tile of either height"


@pytest.mark.parametrize("block_m", [16, 32], ids=["BLOCK_M=16", "BLOCK_M=32-with-HALF_M"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_swap_ab_tiles_match_float64(block_m, dtype, seed):
    """SWAP_AB: each GEMM's tile computed transposed (weight rows on the tensor cores' M axis). Both
    GEMMs, gather and scatter fused as moe_expert runs them, against float64, with the same routing
    as the HALF_M test (blocks with one real row, a full block, an expert with none); padding rows
    stay poisoned; the whole path within a rounding of the plain tiles (not to the bit: on a GPU the
    two forms run different tensor-core instructions)."""
    H, I = 300, 88  # noqa: E741
    E, K = 5, 1
    x, w13, w2, topk_weights, topk_ids = _counted(dtype, H, I, [block_m // 2, block_m // 2 + 1, block_m + 1, 0, 1],
                                                  seed)
    tile = {"BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1, "num_warps": 4, "num_stages": 2, "HALF_M": block_m >= 32}
    swapped = dict(tile, SWAP_AB=True)
    with poisoned():
        al = expert.align(topk_ids, E, block_m)
        h = expert.gate_up(x, None, w13, al, swapped, gather_k=K)
        o = expert.down(h, None, w2, al, topk_weights, swapped, scatter=True)
    ntpp, ids, valid = _used_rows(al)
    e = al.expert_ids[torch.arange(ntpp, device=DEV) // block_m].long()[valid]
    pairs = ids[valid]
    gu = torch.einsum("rh,rnh->rn", x.double()[pairs // K], w13.double()[e])
    assert h[:ntpp][~valid].isnan().all(), "padding rows are not written (poison left in place)"
    assert _ratio(h[:ntpp][valid], F.silu(gu[:, :I]) * gu[:, I:], dtype) <= _tol(dtype, H)
    want_o = torch.einsum("ri,rhi->rh", h[:ntpp][valid].double(), w2.double()[e]) \
        * topk_weights.flatten()[pairs].double()[:, None]
    assert not o.isnan().any(), "every pair's row is written"
    assert _ratio(o[pairs], want_o, dtype) <= _tol(dtype, I)

    cfg = {"BLOCK_M": block_m, "gate_up": dict(tile), "down": dict(tile)}
    with poisoned():
        y = expert.moe_expert(x, w13, w2, topk_weights, topk_ids, config=cfg)
        y_swap = expert.moe_expert(x, w13, w2, topk_weights, topk_ids,
                                   config={"BLOCK_M": block_m, "gate_up": swapped, "down": swapped})
    ref = warpdecode.reference_moe(x, w13, w2, topk_weights, topk_ids)
    assert not y_swap.isnan().any()
    assert warpdecode.rel_error(y_swap, ref) <= 1.05 * warpdecode.rel_error(y, ref) + 1e-7


def test_half_m_needs_two_tiles_of_16_rows():
    _, al, g = _aligned(3, 2, 5, 0)  # BLOCK_M = 16
    h = torch.randn(al.EM, 32, generator=g).to(torch.bfloat16).to(DEV)
    w2 = torch.randn(5, 48, 32, generator=g).to(torch.bfloat16).to(DEV)
    tile = {"BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1, "num_warps": 4, "num_stages": 2, "HALF_M": True}
    with pytest.raises(ValueError, match="HALF_M needs BLOCK_M >= 32"):
        expert.down(h, None, w2, al, torch.rand(3, 2).to(DEV), tile)
