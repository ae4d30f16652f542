"""The generate benchmark's parts that need no GPU (warpdecode/bench/hf_generate.py): the model
configurations against the presets' layer shapes and the real models' sizes, how many layers fit,
Amdahl's law, random weights, and ``generate`` on the static cache with the decode step compiled
whole (``fullgraph=True``) around warpdecode's experts, giving eager ``generate``'s tokens."""

from __future__ import annotations

import pytest
import torch

import warpdecode as wd

pytest.importorskip("transformers")
hg = pytest.importorskip("warpdecode.bench.hf_generate")

#: parameters of the real models, in billions (their model cards)
PARAMS_B = {"qwen3-30b-a3b": 30.5, "olmoe-1b-7b": 6.9, "mixtral-8x7b": 46.7}


@pytest.mark.parametrize("name", list(hg.MODELS))
def test_each_model_has_its_presets_layer_and_its_size(name):
    model = hg.make_model(None, name, device="meta")
    s = wd.get_preset(name)
    experts = hg.experts_modules(model)
    assert len(experts) == hg.MODELS[name][2]["num_hidden_layers"]
    assert tuple(experts[0].gate_up_proj.shape) == (s.E, 2 * s.I, s.H)
    assert tuple(experts[0].down_proj.shape) == (s.E, s.H, s.I)
    assert model.config.num_experts_per_tok == s.K
    assert sum(p.numel() for p in model.parameters()) / 1e9 == pytest.approx(PARAMS_B[name], rel=0.01)


def test_fit_layers_counts_the_weights_that_fit():
    one, two = hg.param_bytes("olmoe-1b-7b", 1), hg.param_bytes("olmoe-1b-7b", 2)
    ten = 2 * one - two + 10 * (two - one)  # the bytes of 10 layers and what is outside them
    assert hg.fit_layers("olmoe-1b-7b", int(ten / 0.85) + 1) == 10
    assert hg.fit_layers("olmoe-1b-7b", int(ten / 0.85) - 10**6) == 9
    assert hg.fit_layers("olmoe-1b-7b", 10**15) == 16  # never more than the real model's


def test_amdahl():
    assert hg.amdahl(0.0, 3.0) == 1.0
    assert hg.amdahl(1.0, 3.0) == pytest.approx(3.0)
    assert hg.amdahl(0.5, 2.0) == pytest.approx(4 / 3)


TINY = dict(hidden_size=64, intermediate_size=96, moe_intermediate_size=48, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, vocab_size=128, num_experts=7, num_experts_per_tok=3)


def test_the_weights_are_random():
    model = hg.make_model(2, "qwen3-30b-a3b", device="cpu", **TINY)
    a, b = (e.gate_up_proj for e in hg.experts_modules(model))
    assert all(p.float().std() > 0 for p in model.parameters() if p.dim() >= 2)
    assert not torch.equal(a, b) and a.dtype == torch.bfloat16


def test_generate_on_the_static_cache_compiled_whole_gives_eager_tokens():
    """What the benchmark's compiled path runs, on the CPU: ``generate_kwargs('reduce-overhead')``
    (static cache, ``CompileConfig(fullgraph=True, dynamic=False)``), Dynamo's eager backend in place
    of Inductor + CUDA graphs. The decode step is one graph (nothing breaks it), and the greedy
    tokens are those of eager ``generate`` on the same static cache."""
    from torch._dynamo.utils import counters

    import warpdecode.integrations.transformers as wd_hf

    wd_hf.register()
    small = {**TINY, "moe_intermediate_size": 16}
    model = hg.make_model(2, "qwen3-30b-a3b", device="cpu", dtype=torch.float32, **small)
    model.set_experts_implementation("warpdecode")
    ids = torch.randint(3, 128, (1, 4), generator=torch.Generator().manual_seed(0))  # few programs to interpret
    kw = hg.generate_kwargs("reduce-overhead", 4)
    cc = kw["compile_config"]
    assert kw["cache_implementation"] == "static" and cc.fullgraph and cc.dynamic is False
    assert cc.mode == "reduce-overhead"
    cc.backend, cc.mode, cc._compile_all_devices = "eager", None, True
    torch._dynamo.reset()
    counters.clear()
    with torch.no_grad():
        want = model.generate(ids, attention_mask=torch.ones_like(ids), **{**kw, "disable_compile": True})
        got = model.generate(ids, attention_mask=torch.ones_like(ids), **kw)
    assert counters["stats"]["unique_graphs"] == 1  # the decode step traced, once, whole
    assert got.shape == (1, 8) and torch.equal(got, want)
    assert hg.generate_kwargs("none", 4)["disable_compile"] and "cache_implementation" not in hg.generate_kwargs(
        "none", 4)
