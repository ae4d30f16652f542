"""warpdecode as a transformers experts implementation, on tiny random models of each family
whose experts use the fused gate_up/down layout (Qwen3-MoE, OLMoE, Mixtral).

Each case: the model's own ``eager`` experts and ``warpdecode`` give the same logits within bf16
tolerance, and at the experts module itself warpdecode is at least as close to the float64
reference as eager. Skipped when transformers is not installed (it is an optional extra).
"""

from __future__ import annotations

import pytest
import torch

import warpdecode
from warpdecode import api

transformers = pytest.importorskip("transformers")
wd_hf = pytest.importorskip("warpdecode.integrations.transformers")

# relative L2 distance between eager and warpdecode logits, bf16 models of two layers
LOGITS_TOL = 2e-2

DEV = warpdecode.DEFAULT_DEVICE  # where the kernels run: the GPU, or the CPU in the interpreter


def _models():
    from transformers import (
        MixtralConfig,
        MixtralForCausalLM,
        OlmoeConfig,
        OlmoeForCausalLM,
        Qwen3MoeConfig,
        Qwen3MoeForCausalLM,
    )

    common = dict(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return {
        "qwen3_moe-E7-K3": (Qwen3MoeForCausalLM,
                            Qwen3MoeConfig(**common, intermediate_size=96, moe_intermediate_size=48, head_dim=16,
                                           num_experts=7, num_experts_per_tok=3, norm_topk_prob=True,
                                           decoder_sparse_step=1, mlp_only_layers=[])),
        "olmoe-E8-K2-no-renorm": (OlmoeForCausalLM, OlmoeConfig(**common, intermediate_size=48, num_experts=8,
                                                                num_experts_per_tok=2)),
        "mixtral-E5-K2": (MixtralForCausalLM, MixtralConfig(**common, intermediate_size=80, num_local_experts=5,
                                                            num_experts_per_tok=2)),
    }


MODELS = _models()


@pytest.fixture(scope="module", autouse=True)
def registered():
    wd_hf.register()


def _build(name, seed):
    cls, cfg = MODELS[name]
    torch.manual_seed(seed)
    return cls(cfg).to(torch.bfloat16).to(DEV).eval()


@pytest.mark.parametrize("T", [1, 5], ids=["decode-T=1", "prefill-T=5"])
@pytest.mark.parametrize("name", list(MODELS))
def test_logits_match_eager(name, T, seed):
    model = _build(name, seed)
    ids = torch.randint(3, 128, (2, T), generator=torch.Generator().manual_seed(seed)).to(DEV)
    with torch.no_grad():
        model.set_experts_implementation("eager")
        ref = model(ids).logits.float()
        model.set_experts_implementation("warpdecode")
        out = model(ids).logits.float()
    assert torch.isfinite(out).all()
    assert warpdecode.rel_error(out, ref) <= LOGITS_TOL


@pytest.mark.parametrize("name", list(MODELS))
def test_experts_module_against_float64(name, seed):
    """One experts module, called directly: warpdecode is within the bf16 floor's reach of the
    float64 reference, and no farther from it than the model's eager experts. At T = 6 on these
    tiny layers ``auto`` runs the expert path, whose intermediate and combine round in bf16 (1.7-2.6
    floors over 30 draws, eager 2.0-4.0); warp decode within 2 floors."""
    model = _build(name, seed)
    experts = next(m for m in model.modules() if type(m).__name__.endswith("Experts"))
    g = torch.Generator().manual_seed(seed)
    T, E = 6, experts.num_experts
    x = torch.randn(T, experts.gate_up_proj.shape[2], generator=g).to(torch.bfloat16).to(DEV)
    K = 2
    tw, ti = warpdecode.route(torch.randn(T, E, generator=g).to(DEV), K)
    ref = warpdecode.reference_moe(x, experts.gate_up_proj.data, experts.down_proj.data, tw, ti)
    floor = warpdecode.rounding_floor(ref, torch.bfloat16)
    with torch.no_grad():
        model.set_experts_implementation("warpdecode")
        y_wd = experts(x, ti.long(), tw.to(torch.bfloat16))
        model.set_experts_implementation("eager")
        y_eager = experts(x, ti.long(), tw.to(torch.bfloat16))
    # HF passes bf16 routing weights; rounding them costs a little, so warp decode's bound is 2x the floor
    err_wd, err_eager = warpdecode.rel_error(y_wd, ref), warpdecode.rel_error(y_eager, ref)
    picked = api.pick_method(T, x.shape[1], experts.down_proj.shape[2], E, K)
    assert err_wd <= {"warp": 2.0, "expert": 3.0}[picked] * floor, picked
    assert err_wd <= err_eager


def test_experts_module_guards_int64_ids_without_narrowing(seed):
    """transformers passes int64 ids, read as they are: an id of 2**32 + 1 with a nonzero weight
    makes its token NaN (a cast to int32 would read it as expert 1); the id E with weight 0,
    expert parallelism's mark of another rank's expert, adds nothing to its token."""
    model = _build("mixtral-E5-K2", seed)
    experts = next(m for m in model.modules() if type(m).__name__.endswith("Experts"))
    g = torch.Generator().manual_seed(seed)
    E = experts.num_experts
    x = torch.randn(3, experts.gate_up_proj.shape[2], generator=g).to(torch.bfloat16).to(DEV)
    tw, ti = warpdecode.route(torch.randn(3, E, generator=g).to(DEV), 2)
    tw, ti = tw.to(torch.bfloat16), ti.long()
    tw[2, 1] = 0.0
    bad = ti.clone()
    bad[0, 0], bad[2, 1] = 2**32 + 1, E
    with torch.no_grad():
        model.set_experts_implementation("warpdecode")
        want, y = experts(x, ti, tw), experts(x, bad, tw)
    assert torch.isnan(y[0]).all()
    assert torch.equal(y[1:], want[1:])


def test_registration_is_explicit():
    """Importing the integration registers nothing; register() does (checked in a fresh process)."""
    import subprocess
    import sys

    code = ("import warpdecode.integrations.transformers as m\n"
            "from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS as A\n"
            "assert 'warpdecode' not in A, 'registered on import'\n"
            "m.register(); assert 'warpdecode' in A\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_unsupported_layout_raises(seed):
    model = _build("qwen3_moe-E7-K3", seed)
    experts = next(m for m in model.modules() if type(m).__name__.endswith("Experts"))
    experts.is_transposed = True
    model.set_experts_implementation("warpdecode")
    with pytest.raises(NotImplementedError, match="transposed"):
        experts(torch.randn(2, 64, dtype=torch.bfloat16), torch.zeros(2, 3, dtype=torch.long),
                torch.ones(2, 3, dtype=torch.bfloat16))


def test_a_compiled_qwen3_moe_with_warpdecode_experts_matches_eager(seed):
    """torch.compile(fullgraph=True) around a whole tiny Qwen3-MoE: warpdecode's experts trace as
    one operator (``warpdecode::moe``), so nothing breaks the graph, and the logits are eager's."""
    model = _build("qwen3_moe-E7-K3", seed)
    model.set_experts_implementation("warpdecode")
    ids = torch.randint(3, 128, (2, 3), generator=torch.Generator().manual_seed(seed)).to(DEV)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True)
    with torch.no_grad():
        want = model(ids).logits
        got = compiled(ids).logits
    assert torch.equal(got, want) or warpdecode.rel_error(got.float(), want.float()) <= 1e-2
