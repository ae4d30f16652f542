"""warpdecode.moe and warpdecode.route refuse bad inputs, before any kernel launches, with an
error that names the offending argument; and NaN in x reaches exactly its own token's row.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from moecases import Case, make_inputs, run_poisoned, variant_kwargs

import warpdecode
from warpdecode import api, expert, loop, warp
from warpdecode.kernels import expert as kx
from warpdecode.kernels import warp_grouped as kg
from warpdecode.kernels import warp_pair as kp

BASE = Case("validation", T=3, H=32, I=16, E=5, K=2)


class Launched(Exception):
    """Raised by the tripwires: something tried to run a kernel."""


class _Tripwire:
    def __init__(self, name):
        self.name = name

    def __call__(self, *args, **kwargs):
        raise Launched(self.name)

    def __getitem__(self, grid):  # kernel[grid](...)
        raise Launched(self.name)


@pytest.fixture
def no_launch(monkeypatch):
    """Every path and every kernel replaced by a tripwire that raises Launched."""
    for mod, names in [
        (api, ["moe_loop", "moe_expert", "moe_warp"]),
        (loop, ["moe_loop"]),
        (expert, ["align", "quantize", "gate_up", "down", "combine"]),
        (warp, ["warp_gate_up", "warp_gate_up_grouped", "warp_down", "warp_down_grouped"]),
    ]:
        for name in names:
            monkeypatch.setattr(mod, name, _Tripwire(f"{mod.__name__}.{name}"))
    for mod in (kx, kp, kg):
        for name in dir(mod):
            if name.endswith("_kernel"):
                monkeypatch.setattr(mod, name, _Tripwire(f"{mod.__name__}.{name}"))


@pytest.fixture
def inputs(seed):
    x, w13, w2, topk_weights, topk_ids = make_inputs(BASE, torch.bfloat16, seed)
    return dict(x=x, w13=w13, w2=w2, topk_weights=topk_weights, topk_ids=topk_ids)


def _set_k(d, K):
    """(T, K) routing of the right dtypes, on the inputs' device: only K is wrong."""
    dev = d["x"].device
    d.update(topk_ids=torch.zeros(3, K, dtype=torch.int32, device=dev), topk_weights=torch.ones(3, K, device=dev))


def _noncontig(w):
    """Same shape and values, not contiguous."""
    return w.transpose(1, 2).contiguous().transpose(1, 2)


# (case id, how to break the inputs, expected exception, text the message must contain)
BAD_INPUTS = [
    ("x-not-a-tensor", lambda d: d.update(x=np.zeros((3, 32), np.float32)), TypeError, "x"),
    ("x-int32", lambda d: d.update(x=d["x"].to(torch.int32)), TypeError, "x must"),
    ("x-float64", lambda d: d.update(x=d["x"].double()), TypeError, "x must"),
    ("x-1D", lambda d: d.update(x=d["x"][0]), ValueError, "x must"),
    ("w13-dtype-ne-x", lambda d: d.update(w13=d["w13"].half()), TypeError, "w13"),
    ("w2-dtype-ne-x", lambda d: d.update(w2=d["w2"].float()), TypeError, "w2"),
    ("weights-dtype-ne-x", lambda d: d.update(x=d["x"].half()), TypeError, "w13"),
    ("topk_weights-bf16", lambda d: d.update(topk_weights=d["topk_weights"].bfloat16()), TypeError, "topk_weights"),
    ("topk_weights-float64", lambda d: d.update(topk_weights=d["topk_weights"].double()), TypeError, "topk_weights"),
    ("topk_ids-float", lambda d: d.update(topk_ids=d["topk_ids"].float()), TypeError, "topk_ids"),
    ("topk_ids-int16", lambda d: d.update(topk_ids=d["topk_ids"].to(torch.int16)), TypeError, "topk_ids"),
    ("w13-2D", lambda d: d.update(w13=d["w13"][0]), ValueError, "w13"),
    ("w13-H-ne-x-H", lambda d: d.update(w13=d["w13"][:, :, :-1].contiguous()), ValueError, "w13"),
    ("w13-odd-2I", lambda d: d.update(w13=d["w13"][:, :-1].contiguous()), ValueError, "w13"),
    ("w2-I-ne-w13-I", lambda d: d.update(w2=d["w2"][:, :, :-1].contiguous()), ValueError, "w2"),
    ("w2-H-ne-x-H", lambda d: d.update(w2=d["w2"][:, :-1].contiguous()), ValueError, "w2"),
    ("w2-E-ne-w13-E", lambda d: d.update(w2=d["w2"][:-1].contiguous()), ValueError, "w2"),
    ("topk_ids-T-ne-x-T", lambda d: d.update(topk_ids=d["topk_ids"][:-1], topk_weights=d["topk_weights"][:-1]),
     ValueError, "topk_ids"),
    ("topk_weights-K-ne-topk_ids-K", lambda d: d.update(topk_weights=d["topk_weights"][:, :1]),
     ValueError, "topk_weights"),
    ("K>E", lambda d: _set_k(d, 6), ValueError, "topk_ids"),
    ("K=0", lambda d: _set_k(d, 0), ValueError, "topk_ids"),
    ("x-on-meta", lambda d: d.update(x=d["x"].to("meta")), ValueError, "x: meta"),
    ("w2-on-meta", lambda d: d.update(w2=d["w2"].to("meta")), ValueError, "w2: meta"),
    ("topk_ids-on-meta", lambda d: d.update(topk_ids=d["topk_ids"].to("meta")), ValueError, "topk_ids: meta"),
    ("w13-non-contiguous", lambda d: d.update(w13=_noncontig(d["w13"])), ValueError, "w13"),
    ("w2-non-contiguous", lambda d: d.update(w2=_noncontig(d["w2"])), ValueError, "w2"),
]

#: (case id, how the ids break): ids outside [0, E) that ``strict=True`` refuses before any launch
BAD_IDS = [
    ("topk_ids-negative", lambda d: d["topk_ids"].__setitem__((1, 0), -1)),
    ("topk_ids=E", lambda d: d["topk_ids"].__setitem__((2, 1), 5)),
    ("topk_ids-int64-huge", lambda d: d.update(topk_ids=d["topk_ids"].long() + 2**32)),
]

METHODS = ["loop", "expert", "warp", "auto"]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("breaks,exc,names", [c[1:] for c in BAD_INPUTS], ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_before_launch(inputs, breaks, exc, names, method, no_launch):
    breaks(inputs)
    with pytest.raises(exc, match=names):
        warpdecode.moe(**inputs, method=method)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("breaks", [c[1] for c in BAD_IDS], ids=[c[0] for c in BAD_IDS])
def test_strict_refuses_ids_out_of_range_before_launch(inputs, breaks, method, no_launch):
    """``strict=True`` reads the ids' range back (a host sync) and names it, before any launch."""
    breaks(inputs)
    with pytest.raises(ValueError, match=r"topk_ids must lie in \[0, E=5\)"):
        warpdecode.moe(**inputs, method=method, strict=True)


@pytest.mark.parametrize("method", ["expert", "warp", "auto"])
def test_cpu_inputs_where_the_kernels_compile_for_the_gpu_are_named(inputs, method, monkeypatch, no_launch):
    """Where the kernels compile for a GPU, inputs on the CPU would hand it host pointers: refused by
    name before any launch (the loop, plain PyTorch, runs on them)."""
    from warpdecode import _runtime

    monkeypatch.setattr(_runtime, "INTERPRET", False)
    with pytest.raises(ValueError, match=r"inputs are on the CPU \(x: cpu\).*GPU"):
        warpdecode.moe(**{k: v.cpu() for k, v in inputs.items()}, method=method)


def test_a_callers_own_config_is_checked_before_launch(inputs, no_launch):
    """moe_warp(config=...) and moe_expert(config=...) check a caller's configuration as the tables
    are checked (warpdecode.configs), naming the entry, before any launch."""
    from warpdecode.configs import ConfigError, expert_config, warp_config

    d = BASE
    cfg = warp_config(d.H, d.I, d.E, d.K, d.T)
    with pytest.raises(ConfigError, match=r"moe_warp\(config=\.\.\.\)\.gate_up\.BLOCK_H must be a power of two"):
        warp.moe_warp(*inputs.values(), config={**cfg, "gate_up": {**cfg["gate_up"], "BLOCK_H": 100}})
    ecfg = expert_config(d.H, d.I, d.E, d.K, d.T)
    with pytest.raises(ConfigError, match=r"moe_expert\(config=\.\.\.\)\.BLOCK_M must be a power of two"):
        expert.moe_expert(*inputs.values(), config={**ecfg, "BLOCK_M": 24})


#: Every kernel that loads ids: the pair, the persistent kernel, the grouped pair, the expert path
#: (align and combine), its w8a8 form, the loop, and the FP8-weight pair, grouped pair and expert path.
GUARD_VARIANTS = ["loop", "expert", "warp-split", "warp-fused", "warp-grouped", "expert-fp8", "fp8-warp",
                  "fp8-warp-grouped", "fp8-expert"]


@pytest.mark.parametrize("id_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("variant", GUARD_VARIANTS)
def test_ids_out_of_range_never_pass_silently(variant, id_dtype, seed):
    """By default the ids are guarded in the kernels that load them, without a launch or a sync of
    their own: token 1's slot names an id below 0 (int64: 2**32 + 1, which a narrowing cast would
    read as expert 1) with a nonzero weight, so its row is NaN throughout; token 3's names E + 2,
    likewise; token 2's names E with weight 0 (expert parallelism's mark of another rank's expert),
    so it adds nothing: every row but 1 and 3 has the bits of the run where that slot has weight 0
    and a valid id, and none is NaN."""
    case = Case("guard", T=5, H=48, I=24, E=5, K=2)
    x, w13, w2, tw, ids = make_inputs(case, torch.bfloat16, seed)
    kwargs = variant_kwargs(variant.removeprefix("fp8-"), x.dtype)
    if variant.startswith("fp8-"):
        w13, w2 = warpdecode.quantize_experts(w13, w2, "block128")
    ids, tw = ids.to(id_dtype), tw.clone()
    tw[2, 1] = 0.0
    want = run_poisoned((x, w13, w2, tw, ids), **kwargs)
    bad = ids.clone()
    bad[1, 0] = 2**32 + 1 if id_dtype == torch.int64 else -1
    bad[3, 1] = case.E + 2
    bad[2, 1] = case.E
    y = run_poisoned((x, w13, w2, tw, bad), **kwargs)
    assert torch.isnan(y[1]).all() and torch.isnan(y[3]).all(), "a dropped slot's token must be NaN throughout"
    others = torch.tensor([0, 2, 4], device=y.device)
    assert not torch.isnan(y[others]).any(), "NaN leaked into another token's row"
    assert torch.equal(y[others], want[others])


# (case id, keyword arguments of moe, expected exception, text the message must contain)
BAD_OPTIONS = [
    ("method-unknown", dict(method="fused"), ValueError, "method"),
    ("method-None", dict(method=None), ValueError, "method"),
    ("act_format-unknown", dict(method="expert", act_format="int8"), ValueError, "act_format"),
    ("fp8-with-warp", dict(method="warp", act_format="fp8"), ValueError, "act_format"),
    ("fp8-with-loop", dict(method="loop", act_format="fp8"), ValueError, "act_format"),
    ("act_dtype-with-expert", dict(method="expert", act_dtype=torch.float32), ValueError, "act_dtype"),
    ("act_dtype-with-loop", dict(method="loop", act_dtype=torch.bfloat16), ValueError, "act_dtype"),
    ("act_dtype-int8", dict(method="warp", act_dtype=torch.int8), TypeError, "act_dtype"),
    ("act_dtype-float64", dict(method="warp", act_dtype=torch.float64), TypeError, "act_dtype"),
    ("schedule-unknown", dict(method="warp", schedule="persistent"), ValueError, "schedule"),
    ("schedule-fused", dict(method="warp", schedule="fused"), ValueError, "schedule.*bench/persistent.py"),
    ("schedule-with-expert", dict(method="expert", schedule="grouped"), ValueError, "schedule"),
    ("schedule-with-auto", dict(method="auto", schedule="split"), ValueError, "schedule"),
]


@pytest.mark.parametrize("kwargs,exc,names", [c[1:] for c in BAD_OPTIONS], ids=[c[0] for c in BAD_OPTIONS])
def test_bad_option_raises_before_launch(inputs, kwargs, exc, names, no_launch):
    with pytest.raises(exc, match=names):
        warpdecode.moe(**inputs, **kwargs)


@pytest.mark.parametrize("kwargs,exc,names", [c[1:] for c in BAD_OPTIONS], ids=[c[0] + "-T=0" for c in BAD_OPTIONS])
def test_bad_option_raises_also_for_T0(inputs, kwargs, exc, names, no_launch):
    """An invalid combination of options is invalid whatever the batch: T=0 must not skip the check."""
    inputs.update(x=inputs["x"][:0], topk_weights=inputs["topk_weights"][:0], topk_ids=inputs["topk_ids"][:0])
    with pytest.raises(exc, match=names):
        warpdecode.moe(**inputs, **kwargs)


@pytest.mark.parametrize("method", METHODS)
def test_tripwires_are_armed(inputs, method, no_launch):
    """Control for the tests above: a valid call does reach a tripwire, so 'raised before any
    launch' means something."""
    with pytest.raises(Launched):
        warpdecode.moe(**inputs, method=method)


# (case id, router_logits, top_k, expected exception, text the message must contain)
BAD_ROUTES = [
    ("logits-not-a-tensor", [[0.0, 1.0]], 1, TypeError, "router_logits"),
    ("logits-1D", torch.randn(5), 1, ValueError, "router_logits"),
    ("logits-int", torch.zeros(3, 5, dtype=torch.int32), 1, TypeError, "router_logits"),
    ("top_k=0", torch.randn(3, 5), 0, ValueError, "top_k"),
    ("top_k-negative", torch.randn(3, 5), -1, ValueError, "top_k"),
    ("top_k>E", torch.randn(3, 5), 6, ValueError, "top_k"),
    ("top_k-float", torch.randn(3, 5), 2.0, TypeError, "top_k"),
    ("top_k-bool", torch.randn(3, 5), True, TypeError, "top_k"),
]


@pytest.mark.parametrize("logits,top_k,exc,names", [c[1:] for c in BAD_ROUTES], ids=[c[0] for c in BAD_ROUTES])
def test_route_rejects(logits, top_k, exc, names):
    with pytest.raises(exc, match=names):
        warpdecode.route(logits, top_k)


@pytest.mark.parametrize("top_k", [1, 3, 7], ids=["K=1", "K=3", "K=E=7"])
@pytest.mark.parametrize("renormalize", [True, False], ids=["renormalize", "raw-softmax"])
def test_route_is_softmax_topk(top_k, renormalize, seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(6, 7, generator=g).bfloat16()
    topk_weights, topk_ids = warpdecode.route(logits, top_k, renormalize=renormalize)
    probs = torch.softmax(logits.double(), dim=-1)
    assert topk_weights.dtype == torch.float32 and topk_ids.dtype == torch.int32
    assert topk_weights.is_contiguous() and topk_ids.is_contiguous()
    want_w, want_ids = torch.topk(probs, top_k, dim=-1)
    if renormalize:
        want_w = want_w / want_w.sum(-1, keepdim=True)
    assert torch.equal(topk_ids.long(), want_ids)
    torch.testing.assert_close(topk_weights.double(), want_w, rtol=1e-6, atol=0)


def test_rel_error_refuses_shapes_that_differ():
    """A broadcast compared other elements: (2, 3) against (3,) gave 1.41."""
    with pytest.raises(ValueError, match=r"one shape: y \(2, 3\), ref \(3,\)"):
        warpdecode.rel_error(torch.ones(2, 3), torch.ones(3))
    with pytest.raises(ValueError, match=r"y \(3, 1\), ref \(3, 4\)"):
        warpdecode.rel_error(torch.ones(3, 1), torch.ones(3, 4))
    assert warpdecode.rel_error(torch.ones(2, 3), torch.ones(2, 3)) == 0


def test_get_preset_rejects_unknown_name():
    with pytest.raises(ValueError, match="preset"):
        warpdecode.get_preset("qwen4")


NAN_VARIANTS = ["warp", "expert", "loop", "expert-fp8", "warp-act"]


@pytest.mark.parametrize("variant", NAN_VARIANTS)
def test_nan_in_x_stays_in_its_row(variant, seed):
    """All tokens share the same experts, so a NaN token sits in the same GEMM tiles and weight
    rows as the clean ones: its row of y must be NaN, every other row exactly the clean run's."""
    case = Case("nan", T=6, H=48, I=24, E=5, K=2, routing="same")
    x, w13, w2, topk_weights, topk_ids = make_inputs(case, torch.bfloat16, seed)
    kwargs = variant_kwargs(variant, x.dtype)
    clean = run_poisoned((x, w13, w2, topk_weights, topk_ids), **kwargs)
    bad = x.clone()
    bad[2, 17] = float("nan")
    y = run_poisoned((bad, w13, w2, topk_weights, topk_ids), **kwargs)
    assert torch.isnan(y[2]).all(), "the NaN token's row must be NaN throughout (never hidden)"
    others = torch.arange(case.T, device=y.device) != 2
    assert not torch.isnan(y[others]).any(), "NaN leaked into another token's row"
    assert torch.equal(y[others], clean[others])


def test_fp8_activations_need_fp8_tensor_cores(monkeypatch):
    """act_format='fp8' on a GPU older than sm_89 is refused with the reason, before any launch;
    on sm_89 and newer, and in the interpreter (a CPU device), it is allowed."""
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    with pytest.raises(ValueError, match=r"act_format='fp8' needs a GPU with FP8 tensor cores.*A100 is 8\.0"):
        api.check_fp8_device(torch.device("cuda", 0))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 9))
    api.check_fp8_device(torch.device("cuda", 0))
    api.check_fp8_device(torch.device("cpu"))
