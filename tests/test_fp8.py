"""FP8 weights (warpdecode.quant): the two formats, their validation, and every method that reads them,
against the float64 reference on the dequantized weights (so the error measures the kernels'
rounding, not the weights' quantization, which is measured on its own).

Each case names its edge: T = 1, H and I not multiples of 128 (partial scale blocks, and a
partial 32-column group for MXFP8), I past one block, prime E, K = 1, K = E, idle experts.
Outputs are poisoned before each launch, so an unwritten element is NaN, which fails every bound.
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl
from moecases import Case, make_inputs, run_poisoned

import warpdecode as wd
from bench.poison import poisoned
from warpdecode import api, costmodel, quant, warp
from warpdecode.kernels import expert as kx
from warpdecode.kernels import warp_fp8 as k8
from warpdecode.kernels import warp_grouped as kg

FORMATS = quant.FORMATS

#: error / (bf16 rounding floor of the float64 result on the dequantized weights), per path. Warp
#: decode rounds once, at the output; the weight-only expert path also rounds the intermediate, each
#: slot's output and the combine (as with bf16 weights: tests/test_accuracy.py); w8a8 quantizes the
#: activations and the intermediate to e4m3 as well. Loop rounds everything in bf16.
TOLERANCE = {
    torch.bfloat16: {"warp": 1.1, "expert": 6.0, "expert-w8a8": 60.0, "loop": 12.0},
    # warp decode's grouped schedule in the other compute dtypes (e4m3 widened to fp16, or FP32 FMAs; the
    # intermediate three bf16 terms): rounded once, as in bf16; FP32 follows the sums' condition (test_accuracy.py)
    torch.float16: {"warp": 1.1},
    torch.float32: {"warp": 100.0},
}


def expert_tolerance(K: int) -> float:
    """The weight-only expert path's bound at K routed experts: its combine adds the K bf16 partial
    outputs with one bf16 rounding per add, as vLLM's ``moe_sum`` does (``kernels/expert.py``
    ``combine_kernel``), so its error grows as √K floors (the H200: 2.8-3.0 at K = 8, 7.7 at K = 61);
    1.5·√K past the fixed 6 floors that holds to K = 16."""
    return max(TOLERANCE[torch.bfloat16]["expert"], 1.5 * K ** 0.5)

#: ‖dequantize(quantize(w)) − w‖ / ‖w‖ for Gaussian weights: e4m3 keeps 4 significant bits, so the
#: relative rounding error of one element is at most 2^-4; its RMS over a block is about a third of that.
QUANT_ERROR = {"block128": 0.035, "mxfp8": 0.035}

CASES = [
    Case("T=1-H=160-I=88", T=1, H=160, I=88, E=7, K=3),  # H, I: partial blocks; I < one block
    Case("odd-H=180-I=136", T=3, H=180, I=136, E=5, K=2),  # I past one block; 180 % 32 = 20
    Case("prime-E=13-K=4", T=2, H=64, I=40, E=13, K=4),
    Case("K=1", T=4, H=96, I=40, E=8, K=1),
    Case("K=E=4", T=2, H=64, I=40, E=4, K=4),
    Case("idle-experts-subset", T=4, H=64, I=40, E=11, K=2, routing="idle"),
    # K past warp.STATIC_SLOTS_MAX: the down kernel's slots in a run-time loop over two chunks of I, a partial row block
    Case("slot-loop-K=E=11", T=1, H=40, I=136, E=11, K=11),
]


def fp8_inputs(case: Case, fmt: str, seed: int):
    """(x, w13, w2, topk_weights, topk_ids) with the weights in ``fmt``, and the bf16 weights."""
    x, w13, w2, tw, ti = make_inputs(case, torch.bfloat16, seed)
    q13, q2 = wd.quantize_experts(w13, w2, fmt)
    return (x, q13, q2, tw, ti), (w13, w2)


def error_over_floor(y, ref) -> float:
    return wd.rel_error(y, ref) / wd.rounding_floor(ref, torch.bfloat16)


# ---------------------------------------------------------------------------------------------
# the formats


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dims", [(3, 2 * 88, 160), (2, 180, 136), (2, 256, 256)], ids=["partial", "odd", "whole"])
def test_round_trip_and_scale_shapes(fmt, dims, seed):
    """quantize → dequantize is within e4m3's rounding of the weights; the scale shapes are the
    checkpoints' (gate and up blocked separately in w13, partial blocks at the ends); float64
    dequantization is q · s exactly; MXFP8's power-of-two scales make it exact in bf16 too."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(dims, generator=g).bfloat16() * 0.05
    w[0, :3] = 0  # a zero row: its group's scale is still valid
    gate_up = dims == (3, 2 * 88, 160)
    q = quant.quantize(w, fmt, gate_up=gate_up)
    E, N, C = dims
    if fmt == "block128":
        rows = 2 * triton.cdiv(N // 2, 128) if gate_up else triton.cdiv(N, 128)
        assert tuple(q.scale.shape) == (E, rows, triton.cdiv(C, 128)) and q.scale.dtype == torch.float32
    else:
        assert tuple(q.scale.shape) == (E, N, triton.cdiv(C, 32)) and q.scale.dtype == torch.uint8
    assert q.weight.dtype == torch.float8_e4m3fn and q.dequantize().dtype == torch.bfloat16
    assert wd.rel_error(q.dequantize(), w) < QUANT_ERROR[fmt]
    assert torch.equal(q.dequantize(torch.float64).to(torch.bfloat16), q.dequantize())
    e = E - 1  # dequantization by hand: every element times its block's scale
    s = q.scale_factors()[e]
    r = torch.arange(N)
    half = N // 2 if gate_up else N
    srow = (r // half) * triton.cdiv(half, q.GROUP_N) + (r % half) // q.GROUP_N
    want = q.weight[e].double() * s[srow][:, torch.arange(C) // q.GROUP_K]
    assert torch.equal(q.expert(e, torch.float64), want)
    if fmt == "mxfp8":
        assert torch.equal(q.dequantize(torch.float64), q.dequantize().double())


@pytest.mark.parametrize("fmt", FORMATS)
def test_from_checkpoint_shares_storage(fmt, seed):
    """A checkpoint's tensors are held as they are, not copied (torch's e8m0 dtype viewed as its bits)."""
    case = CASES[0]
    (_, q13, q2, _, _), _ = fp8_inputs(case, fmt, seed)
    s13, s2 = q13.scale, q2.scale
    if fmt == "mxfp8" and quant.E8M0 is not None:
        s13, s2 = s13.view(quant.E8M0), s2.view(quant.E8M0)
    w13, w2 = wd.experts_from_checkpoint(q13.weight, s13, q2.weight, s2, format=fmt)
    for new, old, scale in ((w13, q13, s13), (w2, q2, s2)):
        assert new.weight.data_ptr() == old.weight.data_ptr()
        assert new.scale.data_ptr() == scale.data_ptr()
    assert torch.equal(w13.dequantize(), q13.dequantize()) and w13.gate_up and not w2.gate_up


def _bad_scale(fmt, what):
    """(scale tensor, error pattern) for one kind of bad scale of the w2 of CASES[0]."""
    c = CASES[0]
    shape = quant.CLASSES[fmt].scale_shape_for((c.E, c.H, c.I))
    good = torch.ones(shape) if fmt == "block128" else torch.full(shape, 127, dtype=torch.uint8)
    if what == "shape":
        return good[:, :-1] if shape[1] > 1 else good[:, :, :-1].contiguous(), "must have shape"
    if what == "dtype":
        return good.double() if fmt == "block128" else good.float(), "must be"
    bad = good.clone()
    if fmt == "block128":
        bad[0, 0, 0] = {"nan": float("nan"), "inf": float("inf"), "zero": 0.0, "negative": -1.0}[what]
        return bad, "finite and positive"
    bad[0, 0, 0] = {"nan": 255, "inf": 255, "zero": 0, "negative": 0}[what]
    return bad, "finite e8m0"


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("what", ["shape", "dtype", "nan", "inf", "zero", "negative"])
def test_bad_scales_are_refused_by_name(fmt, what):
    c = CASES[0]
    scale, pattern = _bad_scale(fmt, what)
    weight = torch.zeros(c.E, c.H, c.I, dtype=torch.float8_e4m3fn)
    with pytest.raises((ValueError, TypeError), match=f"w2: .*{pattern}"):
        quant.CLASSES[fmt](weight, scale, name="w2")


def test_bad_weights_are_refused_by_name():
    s = torch.ones(2, 1, 1)
    with pytest.raises(TypeError, match="w2: the weight must be torch.float8_e4m3fn"):
        quant.BlockFP8Weights(torch.zeros(2, 8, 8, dtype=torch.bfloat16), s, name="w2")
    with pytest.raises(ValueError, match="w2: the weight must be contiguous"):
        quant.BlockFP8Weights(torch.zeros(2, 8, 8, dtype=torch.float8_e4m3fn).transpose(1, 2), s, name="w2")
    with pytest.raises(ValueError, match="w2: the weight must be 3-D"):
        quant.BlockFP8Weights(torch.zeros(8, 8, dtype=torch.float8_e4m3fn), s, name="w2")
    with pytest.raises(ValueError, match="format must be one of"):
        wd.quantize_experts(torch.zeros(2, 8, 8), torch.zeros(2, 8, 4), format="nvfp4")
    with pytest.raises(ValueError, match="w13 holds non-finite values"):
        wd.quantize_experts(torch.full((2, 8, 8), float("nan")), torch.zeros(2, 8, 4))


class Launched(Exception):
    pass


@pytest.fixture
def no_launch(monkeypatch):
    """Every FP8 path's kernels replaced by a tripwire: an error must come before any launch."""
    class Tripwire:
        def __getitem__(self, grid):
            raise Launched

    for mod in (k8, kx, kg):
        for name in dir(mod):
            if name.endswith("_kernel"):
                monkeypatch.setattr(mod, name, Tripwire())
    monkeypatch.setattr(api, "moe_loop", Tripwire().__getitem__)


@pytest.mark.parametrize("method", ["warp", "expert", "auto", "loop"])
def test_moe_refuses_bad_fp8_pairs_before_launch(no_launch, method, seed):
    (x, q13, q2, tw, ti), (w13, w2) = fp8_inputs(CASES[0], "block128", seed)
    m13, m2 = wd.quantize_experts(w13, w2, "mxfp8")
    cases = [
        ((x, q13, w2), TypeError, "w13 is FP8 weights but w2 is not"),
        ((x, w13, q2), TypeError, "w2 is FP8 weights but w13 is not"),
        ((x, q13, m2), ValueError, "one FP8 format"),
        ((x, q2, q13), ValueError, "w13 FP8 weights must be built with gate_up=True"),  # swapped
        ((x.half(), q13, q2), TypeError, "w13 holds FP8 weights for torch.bfloat16 activations"),
    ]
    for (xx, a, b), err, pattern in cases:
        with pytest.raises(err, match=pattern):
            wd.moe(xx, a, b, tw, ti, method=method)
    q2.scale = q2.scale[:, :1]  # replaced after it was built: still checked on every call
    with pytest.raises(ValueError, match="w2: block128 scales .* must have shape"):
        wd.moe(x, q13, q2, tw, ti, method=method)
    if method == "warp":
        with pytest.raises(TypeError, match="w2 is FP8 weights but w13 is not"):  # the grouped schedule: checked alike
            wd.moe(x, w13, q2, tw, ti, method="warp", schedule="grouped")
        from bench import persistent

        with pytest.raises(ValueError, match="reads 16-bit weights only"):
            persistent.moe_fused(x, m13, m2, tw, ti)


def test_explain_names_the_fp8_schedule(seed):
    """With FP8 weights explain names the schedule moe runs: the grouped one where asked for, else the
    pair (the FP8 defaults hold no grouped entry)."""
    (x, q13, q2, tw, ti), _ = fp8_inputs(CASES[1], "mxfp8", seed)
    assert wd.explain(x, q13, q2, tw, ti, method="warp", schedule="grouped").schedule == "grouped"
    assert wd.explain(x, q13, q2, tw, ti, method="warp").schedule == "split"


def test_reference_reads_the_dequantized_weights(seed):
    (x, q13, q2, tw, ti), _ = fp8_inputs(CASES[1], "block128", seed)
    ref = wd.reference_moe(x, q13, q2, tw, ti)
    assert torch.equal(ref, wd.reference_moe(x, q13.dequantize(torch.float64), q2.dequantize(torch.float64), tw, ti))


# ---------------------------------------------------------------------------------------------
# the interpreter converts e4m3 and e8m0 as the GPU does


@triton.jit
def _upcast_kernel(q_ptr, f_ptr, bits_ptr, s_ptr, N, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < N
    tl.store(f_ptr + offs, tl.load(q_ptr + offs, mask=mask).to(tl.float32), mask=mask)
    tl.store(s_ptr + offs, k8._scales(bits_ptr + offs, mask, True), mask=mask)


def test_e4m3_and_e8m0_convert_exactly():
    """Every e4m3 code widens to FP32 exactly as torch widens it, NaN codes to NaN; every e8m0 code
    the validation admits (1…254) decodes to 2^(b − 127). The kernel runs where the others do: in
    the interpreter here, compiled on a GPU (``tools/gpu.sh fp8`` runs this file there), so the
    interpreter's conversions and the GPU's are each checked against the same torch values."""
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    q = codes.view(torch.float8_e4m3fn).to(wd.DEFAULT_DEVICE)
    bits = torch.arange(1, 255, dtype=torch.int32).to(torch.uint8)
    bits = torch.cat([bits, bits[:2]]).to(wd.DEFAULT_DEVICE)
    f = torch.empty(256, device=wd.DEFAULT_DEVICE)
    s = torch.empty(256, device=wd.DEFAULT_DEVICE)
    _upcast_kernel[(1,)](q, f, bits, s, 256, BLOCK=256)
    want = q.float()
    assert torch.equal(torch.isnan(f), torch.isnan(want)) and int(torch.isnan(want).sum()) == 2
    assert torch.equal(f[~torch.isnan(f)], want[~torch.isnan(want)])
    assert torch.equal(s.double(), torch.exp2(bits.double() - 127))


# ---------------------------------------------------------------------------------------------
# the kernels, against float64 on the dequantized weights


#: (case, schedule, format): the pair on every case in both formats; the grouped schedule on every case but the
#: pair's slot loop, the formats taking turns (its steps' scale groups in both: the tests below)
WARP_CASES = [(c, "split", f) for c in CASES for f in FORMATS] + [
    (c, "grouped", FORMATS[::-1][i % 2]) for i, c in enumerate(c for c in CASES if c.K <= warp.STATIC_SLOTS_MAX)]


@pytest.mark.parametrize("case,schedule,fmt", WARP_CASES, ids=[f"{c.id}-{s}-{f}" for c, s, f in WARP_CASES])
def test_warp_fp8_at_the_floor(case, fmt, schedule, seed):
    """Warp decode with FP8 weights is at the bf16 output floor of the layer it computes (the
    dequantized one), as warp decode with bf16 weights is of its layer: the pair, and the grouped
    schedule (each routed expert's e4m3 rows read once for all its tokens, widened to bf16)."""
    inputs, _ = fp8_inputs(case, fmt, seed)
    ref = wd.reference_moe(*inputs)
    ratio = error_over_floor(run_poisoned(inputs, method="warp", schedule=schedule), ref)
    assert ratio <= TOLERANCE[torch.bfloat16]["warp"], ratio


def _grouped_tiles(step: int) -> dict:
    """The pair's interpreter tiles, and grouped tiles whose steps span ``step`` columns of H and of I."""
    cfg = wd.configs.warp_config(180, 136, 3, 2, 2, weights="block128")
    return {**cfg, "grouped": {"gate_up": {"BLOCK_I": 16, "BLOCK_H": step, "num_warps": 4, "num_stages": 1},
                               "down": {"BLOCK_H": 16, "BLOCK_I": step, "num_warps": 4, "num_stages": 1}}}


@pytest.mark.parametrize("fmt,step", [("block128", 256), ("mxfp8", 256)])
def test_warp_fp8_grouped_steps_across_scale_groups(fmt, step, seed):
    """Steps of several scale groups, taken in a static loop (block128: 2 groups of 128 columns; mxfp8:
    8 of 32), at H = 180 and I = 136: the last step ends mid-group, and mxfp8's last groups lie wholly
    past the end (their scales masked off). The default interpreter tiles (32 and 16 columns) cover
    steps of one group or part of one; poisoned."""
    inputs, _ = fp8_inputs(Case("odd", T=2, H=180, I=136, E=3, K=2), fmt, seed)
    ref = wd.reference_moe(*inputs)
    with poisoned():
        y = warp.moe_warp(*inputs, config=_grouped_tiles(step), schedule="grouped")
    ratio = error_over_floor(y, ref)
    assert ratio <= TOLERANCE[torch.bfloat16]["warp"], ratio


@pytest.mark.parametrize("fmt,dtype", [("block128", torch.float16), ("mxfp8", torch.float32)], ids=["fp16", "fp32"])
def test_warp_fp8_grouped_other_compute_dtypes(fmt, dtype, seed):
    """FP8 weights for fp16 and fp32 activations on the grouped schedule: e4m3 widened to fp16 on the
    tensor cores (FP32 x: FMAs), the intermediate as three bf16 terms whatever x's dtype (the e4m3
    w2 widens to bf16 exactly), y in x's dtype; at that dtype's floor of the float64 layer."""
    x, w13, w2, tw, ti = make_inputs(Case("odd-H=100-I=48", T=2, H=100, I=48, E=3, K=2), dtype, seed)
    inputs = (x, *wd.quantize_experts(w13, w2, fmt), tw, ti)
    ref = wd.reference_moe(*inputs)
    y = run_poisoned(inputs, method="warp", schedule="grouped")
    ratio = wd.rel_error(y, ref) / wd.rounding_floor(ref, dtype)
    assert y.dtype == dtype and ratio <= TOLERANCE[dtype]["warp"], ratio


def test_fp8_down_form_by_k():
    """Every preset's K takes the unrolled down kernel; the slot-loop case above is past it."""
    assert not any(warp.fp8_slot_loop(s.K) for s in wd.PRESETS.values())
    assert warp.fp8_slot_loop(CASES[-1].K) and CASES[-1].K == CASES[-1].E > warp.STATIC_SLOTS_MAX


EXPERT_CASES = [CASES[0], CASES[1], Case("T*K>BLOCK_M-same-experts", T=12, H=64, I=40, E=5, K=2, routing="same")]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", EXPERT_CASES, ids=lambda c: c.id)
def test_expert_fp8_weights(case, fmt, seed):
    """The expert path with FP8 weights: weight-only (bf16 activations) within the bf16 expert
    path's bound; w8a8 (activations and intermediate e4m3 too) far above the floor, and within its
    own bound; auto at whichever path it picks. Against the same float64 reference."""
    inputs, _ = fp8_inputs(case, fmt, seed)
    ref = wd.reference_moe(*inputs)
    tol = TOLERANCE[torch.bfloat16]
    weight_only = error_over_floor(run_poisoned(inputs, method="expert"), ref)
    w8a8 = error_over_floor(run_poisoned(inputs, method="expert", act_format="fp8"), ref)
    assert weight_only <= tol["expert"], weight_only
    assert 5 < w8a8 <= tol["expert-w8a8"], w8a8
    T, H = inputs[0].shape
    picked = api.pick_method(T, H, case.I, case.E, case.K, 2, fmt)
    auto = error_over_floor(run_poisoned(inputs, method="auto"), ref)
    assert auto <= tol[picked], (picked, auto)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", EXPERT_CASES[1:], ids=lambda c: c.id)
def test_expert_fp16_rows_give_the_weight_only_bits(case, fmt, seed, monkeypatch):
    """FP8 weights, bf16 activations spread over eight decades: their fp16 rows (1×128 power-of-two
    scales) hold every value exactly, and the expert path on them (e4m3 widened to fp16) gives the
    bits of its bf16-operand GEMMs, which it runs past ``F16_ROWS_MAX_BLOCK_M``; poisoned, NaN-free."""
    from warpdecode import expert as ex

    (x, q13, q2, tw, ti), _ = fp8_inputs(case, fmt, seed)
    g = torch.Generator().manual_seed(seed)
    x = (x.float() * 10.0 ** (8 * torch.rand(x.shape, generator=g).to(x.device) - 4)).to(torch.bfloat16)
    a, scales = ex.quantize(x, None, "f16")  # fp16 values times powers of two
    H = x.shape[1]
    back, xf = a.float() * scales.repeat_interleave(128, 1)[:, :H], x.float()
    block_max = torch.nn.functional.pad(xf.abs(), (0, -H % 128)).reshape(x.shape[0], -1, 128).amax(-1)
    block_max = block_max.repeat_interleave(128, 1)[:, :H]
    kept = xf.abs() >= 2.0**-29 * block_max  # every value down to 2^-29 of its block's largest
    assert (kept & (xf.abs() < 2.0**-20 * block_max)).any()  # some that e4m3's range would leave subnormal
    assert a.dtype == torch.float16 and torch.equal(back[kept], xf[kept])
    block_m = ex.launch_config(x, q13, ti)["BLOCK_M"]
    assert ex.activation_rows(x, q13, "native", block_m) == "f16"
    assert ex.activation_rows(x.half(), q13, "native", block_m) == "native"  # fp16 x widens e4m3 to fp16 as is
    with poisoned():
        rows = ex.moe_expert(x, q13, q2, tw, ti)
        monkeypatch.setattr(ex, "F16_ROWS_MAX_BLOCK_M", block_m - 1)
        assert ex.activation_rows(x, q13, "native", block_m) == "native"
        widened = ex.moe_expert(x, q13, q2, tw, ti)
    assert not rows.isnan().any() and torch.equal(rows.view(torch.int16), widened.view(torch.int16))


TMA_CASE = Case("tiled-H=256-I=128-E=7", T=16, H=256, I=128, E=7, K=2)  # boxes tile both GEMMs at every test tile


@pytest.mark.parametrize("weights", [*FORMATS, "bf16"])
def test_expert_weight_tiles_by_tma_give_the_same_bits(weights, seed, monkeypatch):
    """``W_TMA`` (a config flag: each weight tile one TMA copy from a host TensorDescriptor, vLLM's USE_TMA_B) gives
    the pointer loads' bits, plain and transposed (SWAP_AB), FP8 (both formats) and bf16 weights, poisoned; a
    table's W_TMA on weights TMA cannot take runs the pointer loads; a caller's config whose boxes would not tile
    the weights is refused by name before any launch."""
    import copy

    from warpdecode import expert as ex

    (x, q13, q2, tw, ti), (w13, w2) = fp8_inputs(TMA_CASE, FORMATS[0] if weights == "bf16" else weights, seed)
    a, b = (w13, w2) if weights == "bf16" else (q13, q2)
    for swap in (False, True):
        cfg = copy.deepcopy(ex.launch_config(x, a, ti))
        for g in ("gate_up", "down"):
            cfg[g]["SWAP_AB"] = swap
        with poisoned():
            plain = ex.moe_expert(x, a, b, tw, ti, config=cfg)
            for g in ("gate_up", "down"):
                cfg[g]["W_TMA"] = True
            tma = ex.moe_expert(x, a, b, tw, ti, config=cfg)
        assert not plain.isnan().any() and torch.equal(plain.view(torch.int16), tma.view(torch.int16)), swap
    # a table's W_TMA on weights TMA cannot take (a view 2 bytes past 16-byte alignment): the pointer loads instead
    shifted = torch.empty(w13.numel() + 1, dtype=w13.dtype, device=w13.device)[1:].view_as(w13).copy_(w13)
    assert shifted.is_contiguous() and shifted.data_ptr() % 16
    table = copy.deepcopy(cfg)
    monkeypatch.setattr(ex, "launch_config", lambda *args: table)
    with poisoned():
        got = ex.moe_expert(x, shifted, w2, tw, ti)
    monkeypatch.undo()
    plain = {**table, "gate_up": {**table["gate_up"], "W_TMA": False}, "down": {**table["down"], "W_TMA": False}}
    want = ex.moe_expert(x, w13, w2, tw, ti, config=plain)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    cfg["gate_up"]["BLOCK_N"] = 2 * TMA_CASE.I
    launched = []
    tripwire = type("Tripwire", (), {"__getitem__": lambda _, grid: launched.append(grid)})
    monkeypatch.setattr(kx, "moe_align_kernel", tripwire())
    with pytest.raises(ValueError, match=r"gate_up.W_TMA needs BLOCK_N to divide 128"):
        ex.moe_expert(x, a, b, tw, ti, config=cfg)
    assert not launched


def test_auto_counts_one_byte_weights():
    """The cost model reads FP8 weights as 1-byte ones: warp decode's share of extra L2 reads halves
    with the bytes, so the modelled crossover does not move below the bf16 one."""
    for shape in wd.PRESETS.values():
        s = (shape.H, shape.I, shape.E, shape.K)
        warp_bf16, expert_bf16 = costmodel.model_us(*s, 1)
        warp_fp8, expert_fp8 = costmodel.model_us(*s, 1, w_elem=1)
        assert warp_fp8 < warp_bf16 and expert_fp8 < expert_bf16
        assert costmodel.model_crossover(*s, 2, 1) >= costmodel.model_crossover(*s, 2)


@pytest.mark.parametrize("schedule", ["split", "grouped"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_warp_fp8_rounded_intermediate_and_fp32_output(fmt, schedule, seed):
    """act_dtype=bf16 rounds the intermediate (error above the floor, still bounded; the grouped
    schedule then keeps one bf16 term, the e4m3 w2 widened to it); FP32 y (warpdecode.parallel's
    partial sums) is far below the bf16 floor."""
    case = CASES[0]
    (x, q13, q2, tw, ti), _ = fp8_inputs(case, fmt, seed)
    ref = wd.reference_moe(x, q13, q2, tw, ti)
    rounded = error_over_floor(run_poisoned((x, q13, q2, tw, ti), method="warp", act_dtype=torch.bfloat16,
                                            schedule=schedule), ref)
    assert 1.0 < rounded <= 3.0, rounded
    y32 = warp.moe_warp(x, q13, q2, tw, ti.to(torch.int32), out_dtype=torch.float32, schedule=schedule)
    assert y32.dtype == torch.float32 and error_over_floor(y32, ref) < 0.05


@pytest.mark.parametrize("fmt", FORMATS)
def test_loop_dequantizes(fmt, seed):
    inputs, _ = fp8_inputs(CASES[1], fmt, seed)
    ratio = error_over_floor(wd.moe(*inputs, method="loop"), wd.reference_moe(*inputs))
    assert ratio <= TOLERANCE[torch.bfloat16]["loop"], ratio


def test_quantization_cost_is_reported_apart(seed):
    """The weights' own quantization error (against the bf16 weights' layer) is far above the
    kernels' rounding: that is why the tests measure against the dequantized layer."""
    inputs, (w13, w2) = fp8_inputs(CASES[1], "block128", seed)
    x, q13, q2, tw, ti = inputs
    ref_fp8 = wd.reference_moe(*inputs)
    ref_bf16 = wd.reference_moe(x, w13, w2, tw, ti)
    assert error_over_floor(ref_fp8, ref_bf16) > 5


def test_fp8_default_configs_take_whole_scale_groups():
    """Every default step of the FP8 pair is whole scale groups (the kernels refuse anything else)."""
    for H, I, K in ((2048, 768, 8), (2880, 1408, 4), (4096, 14336, 2), (160, 88, 3)):  # noqa: E741
        for fmt in FORMATS:
            cfg = wd.configs.warp_config(H, I, 8, K, 1, weights=fmt)
            assert cfg["gate_up"]["BLOCK_H"] % 128 == 0 and cfg["down"]["BLOCK_I"] % 128 == 0, cfg
    inputs, _ = fp8_inputs(CASES[2], "mxfp8", 0)
    bad = {"gate_up": {"BLOCK_I": 4, "BLOCK_H": 16, "num_warps": 4, "num_stages": 1},
           "down": {"BLOCK_H": 4, "BLOCK_I": 32, "num_warps": 4, "num_stages": 1}}
    with pytest.raises(ValueError, match=r"gate_up\.BLOCK_H must be a multiple of 32 \(a step spans whole mxfp8 "
                                         r"scale groups\), got 16"):
        warp.moe_warp(*inputs, config=bad)


# ---------------------------------------------------------------------------------------------
# the GPU benchmark's code, driven on the CPU (its timings replaced: the interpreter times nothing)


def test_fp8_benchmark_code_paths_and_figures(monkeypatch, tmp_path):
    """bench.fp8 (what ``tools/gpu.sh fp8`` runs on the H200) on the tiny preset: every
    phase writes its rows, every row's output is checked against float64, and the bar's figures
    are computed from the CSVs alone. The auto and lesson phases call warpdecode.moe, the auto
    phase each method beside its bare kernels, timed together, the public rows with the overhead.
    The timings are stand-ins (one eager call, 1 µs; the public calls 1.25 µs beside the kernels)."""
    from bench import fp8 as bench
    from bench.timing import Timing
    from warpdecode import api

    def eager(fn, args, reps):
        return Timing(1.0, 1.0, 1.0, 1), [fn(*a) for a in args][0]

    def together(runs, reps):
        us = [1.0 if fn in bench.PUBLIC.values() else 1.25 for fn, _ in runs]
        return [(Timing(u, u, u, 1), eager(fn, args, reps)[1]) for u, (fn, args) in zip(us, runs, strict=True)]

    public = []
    real_moe = api.moe

    def moe(*args, method, **options):
        public.append((method, options.get("act_format", "native")))
        return real_moe(*args, method=method, **options)

    monkeypatch.setattr(api, "moe", moe)
    monkeypatch.setattr(bench, "DEVICE", "cpu")
    monkeypatch.setattr(bench, "_time", eager)
    monkeypatch.setattr(bench, "_time_together", together)
    monkeypatch.setattr(bench, "read_ceiling", lambda gb: 4.5)
    monkeypatch.setattr(bench, "l2_bytes", lambda: 10**5)
    monkeypatch.setattr(bench, "meta", lambda: {"gpu": "cpu"})
    monkeypatch.setattr(bench, "SPEED_T", (1, 3))
    monkeypatch.setattr(bench, "WARP_T", (1,))
    monkeypatch.setattr(bench, "LESSON_T", (1,))
    monkeypatch.setattr(bench, "copies", lambda shape, per_expert: 1)
    # one candidate, the interpreter's tiles (the GPU's one-neuron programs take the interpreter seconds)
    monkeypatch.setattr(bench, "CANDIDATES", [wd.configs.warp_config(160, 88, 7, 3, 1, weights="block128")])
    speed_csv, acc_csv = tmp_path / "fp8_speed.csv", tmp_path / "fp8_accuracy.csv"
    for phase in bench.PHASES:
        bench.speed(["tiny"], phase, csv_path=speed_csv)
    bench.accuracy(["tiny"], Ts=(1,), csv_path=acc_csv)
    speed_rows, acc_rows = bench._read(speed_csv), bench._read(acc_csv)
    assert {(r["method"], r["weights"]) for r in speed_rows} >= {
        ("warp", "bf16"), ("warp", "block128"), ("warp", "mxfp8"), ("warp_tiles", "block128"),
        ("expert", "block128"), ("auto", "block128"), ("expert_w8a8", "block128"), ("expert", "mxfp8"),
        ("warp_kernels", "block128"), ("expert_kernels", "block128"), ("auto_kernels", "block128")}
    assert all(r["checked"] == "True" for r in speed_rows), [r for r in speed_rows if r["checked"] != "True"]
    assert set(public) == {("warp", "native"), ("expert", "native"), ("auto", "native"), ("expert", "fp8")}
    overhead = {r["method"]: r["overhead"] for r in speed_rows if r["config"] == "moe" and r["weights"] == "block128"
                and r["method"] in bench.PUBLIC}
    assert set(overhead) == set(bench.PUBLIC) and set(overhead.values()) == {"1.25"}
    assert {r["method"] for r in acc_rows} == {"warp", "expert", "expert_w8a8"}
    warp = [float(r["error_over_floor"]) for r in acc_rows if r["method"] == "warp" and r["weights"] != "bf16"]
    assert max(warp) <= TOLERANCE[torch.bfloat16]["warp"]
    layer_rows = bench.layer_errors("tiny", layers=1, T=1, steps=1, csv_path=tmp_path / "fp8_layers.csv")
    assert {(r["method"], r["vs"]) for r in layer_rows} == {(m, v) for m in ("warp", "expert_w8a8")
                                                            for v in ("bf16", "fp8")}
    assert len(bench.layer_figures(bench._read(tmp_path / "fp8_layers.csv"))) == 4
    assert bench.measured_crossover(speed_rows, "tiny") in bench.SPEED_T  # the stand-in times all tie
    lines = bench.figures(speed_rows, acc_rows)
    assert any(line.startswith("tiny block128: bf16 / FP8 warp decode") for line in lines), lines
    assert any("auto (block128) / faster path" in line for line in lines), lines
    assert any(line.startswith("error/floor warp (mxfp8)") for line in lines), lines


def test_fp8_tuned_entries_take_the_searched_tiles_only_where_they_won():
    """bench.fp8.tuned_entries: per T the searched tiles where the warp phase timed them under
    SEARCHED_MARGIN of the defaults, else the defaults, and the defaults past the last T; no entry
    for a shape on which the defaults won everywhere. The shipped H200 table holds exactly what it
    gives on the committed rows (``--what table``)."""
    import json

    from bench import fp8 as bench
    from warpdecode.configs import default_warp_fp8, shape_key, tuned_file

    q, o = wd.get_preset("qwen3-30b-a3b"), wd.get_preset("olmoe-1b-7b")
    kq, ko = (shape_key(s.H, s.I, s.E, s.K) for s in (q, o))
    searched_cfg = {"gate_up": {"BLOCK_I": 2, "BLOCK_H": 1024, "num_warps": 1, "num_stages": 1},
                    "down": {"BLOCK_H": 4, "BLOCK_I": 512, "num_warps": 4, "num_stages": 1}}
    rows = [{"preset": p, "method": "warp", "weights": "block128", "config": c, "T": str(T), "median_us": str(us)}
            for p, T, c, us in [("qwen3-30b-a3b", 1, "default", 20), ("qwen3-30b-a3b", 1, "searched", 17),
                                ("qwen3-30b-a3b", 2, "default", 30), ("qwen3-30b-a3b", 2, "searched", 29.9),
                                ("olmoe-1b-7b", 1, "default", 20), ("olmoe-1b-7b", 1, "searched", 20.5)]]
    got = bench.tuned_entries(rows, {"warp_block128": {kq: [[8, searched_cfg]], ko: [[8, searched_cfg]]}})
    assert list(got) == ["warp_block128"] and list(got["warp_block128"]) == [kq]  # OLMoE: the defaults won
    (t1, c1), (t2, c2) = got["warp_block128"][kq]
    assert (t1, t2) == (1, 2) and c1["gate_up"] == searched_cfg["gate_up"]
    assert c2["gate_up"] == default_warp_fp8(q.H, q.I, q.K)["gate_up"]  # 0.3 % faster: within the margin
    assert c1["measured_us"] == {"default": 20.0, "searched": 17.0}

    shipped = json.loads(tuned_file("NVIDIA H200").read_text())
    import csv
    from pathlib import Path

    results = Path(__file__).resolve().parents[1] / "results" / "NVIDIA_H200"
    with (results / "fp8_speed.csv").open() as f:
        committed = list(csv.DictReader(f))
    shipped_fp8 = {k: v for k, v in shipped.items() if k.startswith("warp_")}

    def left_out(shape, fmt, cfg):  # the tiles --what table found spilling (the compile checks compile the rest)
        return shape_key(shape.H, shape.I, shape.E, shape.K) not in shipped_fp8.get(f"warp_{fmt}", {})

    searched = json.loads((results / "fp8_tuned.json").read_text())
    assert bench.tuned_entries(committed, searched, spills=left_out) == shipped_fp8
    assert len(bench.tuned_entries(committed, searched)) == 2  # both formats have shapes where searched tiles won
    # what moe reads there: Qwen3-30B-A3B T = 1 with mxfp8 weights runs the searched tiles
    table_cfg = wd.configs.bucket(shipped, "warp_mxfp8", q.H, q.I, q.E, q.K, 1)
    assert table_cfg["measured_us"]["searched"] < table_cfg["measured_us"]["default"]
