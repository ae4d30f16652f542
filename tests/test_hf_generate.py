"""The generate benchmark's parts that need no GPU (bench/hf_generate.py): the model
configurations against the presets' layer shapes and the real models' sizes, how many layers fit,
Amdahl's law, random weights, and the benchmark's loop on a tiny model: ``generate`` on the static
cache with the decode step compiled whole (``fullgraph=True``) around warpdecode's experts."""

from __future__ import annotations

import pytest
import torch

import warpdecode as wd

pytest.importorskip("transformers")
hg = pytest.importorskip("bench.hf_generate")

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


def test_the_benchmark_loop_end_to_end_on_the_cpu(tmp_path):
    """generate_speed as the GPU runs it (the static cache, the decode step compiled with
    ``fullgraph=True``), on a tiny float32 Qwen3-MoE on the CPU with Dynamo's eager backend in place
    of Inductor and CUDA graphs: a row per (impl, batch), none lost to an error; batch 1 compiles
    one whole graph for its shapes, batch 2 one for any batch size (nothing breaks the graph around
    warpdecode's experts, or fullgraph would raise); both implementations generate the same greedy
    tokens; warpdecode's rows hold the measured speed-up and Amdahl's prediction from grouped_mm's.
    The rows and tokens come back whole through the file a process of its own hands them over in."""
    kw = hg.generate_kwargs("reduce-overhead", 3)
    assert kw["cache_implementation"] == "static" and kw["compile_config"].fullgraph
    assert kw["compile_config"].mode == "reduce-overhead" and kw["compile_config"].backend == "inductor"
    eager = hg.generate_kwargs("none", 3)
    assert eager["disable_compile"] and "cache_implementation" not in eager
    outs = {}
    rows = hg.generate_speed(name="qwen3-30b-a3b", layers=1, batches=(1, 2), new_tokens=3, prompt_len=2, repeats=1,
                             device="cpu", dtype=torch.float32, backend="eager", moe_reps=1,
                             overrides={**TINY, "moe_intermediate_size": 16}, outs=outs)
    hg.save_rows(tmp_path / "rows.pt", rows, outs)
    back, tokens = hg.load_rows(tmp_path / "rows.pt")
    assert back == rows
    assert tokens.keys() == outs.keys() == {(i, b) for i in ("grouped_mm", "warpdecode") for b in (1, 2)}
    assert all(torch.equal(tokens[k], outs[k]) and outs[k].shape[1] == 3 for k in outs)
    assert [(r["impl"], r["batch"]) for r in rows] == [("grouped_mm", 1), ("grouped_mm", 2), ("warpdecode", 1),
                                                       ("warpdecode", 2)]
    for r in rows:
        assert r["graphs_compiled"] == 1 and r["cudagraph_skips"] == 0 and r["cache"] == "static", r
        assert r["tokens_per_s"] > 0 and 0 < r["moe_share"] and r["layers"] == 1
    for gm, w in zip(rows[:2], rows[2:], strict=True):
        assert w["same_tokens_as_grouped_mm"] == 1.0
        # both stored to four decimals: within 5e-5 of the ratio of what the rows hold
        assert w["speedup_over_grouped_mm"] == pytest.approx(w["tokens_per_s"] / gm["tokens_per_s"], rel=1e-3,
                                                             abs=5e-5)
        assert w["amdahl_predicted"] == pytest.approx(hg.amdahl(gm["moe_share"], gm["moe_us"] / w["moe_us"]),
                                                      rel=1e-3, abs=5e-5)


def test_rows_are_compared_with_grouped_mm_whichever_runs_first(monkeypatch):
    """warpdecode run first (so the order cannot favour it): its rows wait for grouped_mm's row of
    their batch, then carry the speed-up and Amdahl's prediction, and every row is emitted once."""
    class Model:
        def set_experts_implementation(self, impl):
            pass

        def parameters(self):
            return iter([torch.zeros(4)])

    def row(model, name, layers, batch, impl, *, outs, **kw):
        outs[impl, batch] = torch.tensor([1, 2, 3, batch])
        tps, moe = {"warpdecode": (300.0, 10.0), "grouped_mm": (100.0, 40.0), hg.NO_EXPERTS: (400.0, 0.0)}[impl]
        return {"batch": batch, "impl": impl, "cache": "static", "tokens_per_s": tps, "step_us": 1.0,
                "first_call_s": 0.0, "graphs_compiled": 1, "moe_us": moe, "moe_share": 0.5}

    monkeypatch.setattr(hg, "make_model", lambda *a, **k: Model())
    monkeypatch.setattr(hg, "_generate_row", row)
    emitted = []
    rows = hg.generate_speed(layers=1, batches=(1, 4), impls=("warpdecode", "grouped_mm", hg.NO_EXPERTS),
                             emit=emitted.append, device="cpu")
    assert [(r["impl"], r["batch"]) for r in rows] == [("warpdecode", 1), ("warpdecode", 4), ("grouped_mm", 1),
                                                       ("grouped_mm", 4), (hg.NO_EXPERTS, 1), (hg.NO_EXPERTS, 4)]
    assert sorted(map(id, emitted)) == sorted(map(id, rows))
    for r in rows[:2]:
        assert r["speedup_over_grouped_mm"] == 3.0 and r["same_tokens_as_grouped_mm"] == 1.0
        assert r["amdahl_predicted"] == pytest.approx(hg.amdahl(0.5, 4.0), abs=5e-5)
    for r in rows[4:]:  # the bound launches nothing: Amdahl's prediction for expert layers that take no time
        assert r["speedup_over_grouped_mm"] == 4.0 and r["amdahl_predicted"] == 2.0
    assert emitted.index(rows[0]) > emitted.index(rows[2])  # compared before it was emitted


def test_the_bound_runs_the_step_without_expert_work():
    """``no_experts`` goes through transformers' experts interface, returns each layer's input and
    launches nothing, so its expert layers take no time."""
    model = hg.make_model(1, "qwen3-30b-a3b", device="cpu", dtype=torch.float32, **TINY)
    hg.register_impls()
    model.set_experts_implementation(hg.NO_EXPERTS)
    (experts,) = hg.experts_modules(model)
    x = torch.randn(3, model.config.hidden_size)
    ids = torch.zeros(3, model.config.num_experts_per_tok, dtype=torch.int64)
    assert experts(x, ids, torch.ones(ids.shape)) is x
    assert hg.experts_us(model, 3, hg.NO_EXPERTS) == 0.0
