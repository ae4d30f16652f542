"""transformers' own expert parallelism around warpdecode's experts, on the CPU: two gloo processes
load a tiny Qwen3-MoE with ``from_pretrained(..., distributed_config=...)``, each rank keeping
half of the experts, and run it with the ``warpdecode`` experts implementation (kernels in
Triton's interpreter). transformers hands each rank's experts the whole batch with the routes to
the other rank's experts renamed ``num_local_experts`` at weight 0, and all-reduces the partial
outputs; the integration skips those slots on the device.

Each rank's logits must match the same model unsharded (float32, warpdecode experts) and the model
in float64 (eager experts), and the experts must have seen half of the experts and sentinel ids:
a load that silently kept every expert on every rank fails. Skipped without transformers, or
without accelerate, which transformers' parallel loading imports.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import warpdecode as wd

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate", reason="transformers' tensor/expert-parallel from_pretrained needs accelerate")

E, K, WORLD = 8, 3, 2
#: ‖logits − float64 logits‖ / ‖float64 logits‖ of a float32 model of two layers; a rank missing
#: an expert's share is off by O(1)
TOL = 1e-5


def _config():
    from transformers import Qwen3MoeConfig

    return Qwen3MoeConfig(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, pad_token_id=0, bos_token_id=1, eos_token_id=2, intermediate_size=96,
                          moe_intermediate_size=48, head_dim=16, num_experts=E, num_experts_per_tok=K,
                          norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[])


def _ids():
    return torch.randint(3, 128, (2, 5), generator=torch.Generator().manual_seed(7))


def ep_config(world: int):
    """The experts sharded by expert over ``world`` ranks, as this transformers release spells it:
    ``ep_size`` where it exists (5.20 on; the dense modules then tensor-parallel over the same ranks,
    the experts through the all-reduce implementation), else ``enable_expert_parallel=True`` (5.17:
    the expert-parallel plan alone, the router's outputs masked per rank)."""
    from transformers.distributed import DistributedConfig

    if "ep_size" in {f.name for f in dataclasses.fields(DistributedConfig)}:
        return DistributedConfig(tp_size=world, ep_size=world)
    return DistributedConfig(tp_size=world, enable_expert_parallel=True)


def _worker(rank: int, world: int, port: int, path: str):
    os.environ.update(TRITON_INTERPRET="1", RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    from transformers import Qwen3MoeForCausalLM
    from transformers.integrations.moe import ExpertsInterface

    import warpdecode.integrations.transformers as wd_hf

    seen = []

    def recording(module, hidden_states, top_k_index, top_k_weights):
        local = module.gate_up_proj.shape[0]
        off = top_k_index >= local
        seen.append({"local_experts": local, "sentinels": int(off.sum()),
                     "sentinel_weight": float(top_k_weights[off].abs().sum()) if off.any() else 0.0})
        return wd_hf.warpdecode_experts_forward(module, hidden_states, top_k_index, top_k_weights)

    ExpertsInterface.register(wd_hf.NAME, recording)
    try:
        model = Qwen3MoeForCausalLM.from_pretrained(path, dtype=torch.float32, distributed_config=ep_config(world))
        model.eval().set_experts_implementation(wd_hf.NAME)
        with torch.no_grad():
            logits = model(_ids()).logits
        torch.save({"logits": logits, "seen": seen}, f"{path}/rank{rank}.pt")
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_transformers_expert_parallel_with_warpdecode_experts_matches_the_whole_model():
    from transformers import Qwen3MoeForCausalLM

    import warpdecode.integrations.transformers as wd_hf

    wd_hf.register()
    torch.manual_seed(0)
    model = Qwen3MoeForCausalLM(_config()).eval()
    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d)
        with torch.no_grad():
            model.set_experts_implementation(wd_hf.NAME)
            whole = model(_ids()).logits
            model.double().set_experts_implementation("eager")
            ref = model(_ids()).logits
        mp.spawn(_worker, args=(WORLD, _free_port(), d), nprocs=WORLD, join=True)
        ranks = [torch.load(f"{d}/rank{r}.pt") for r in range(WORLD)]
    assert wd.rel_error(whole, ref) <= TOL
    for r, out in enumerate(ranks):
        seen = out["seen"]
        assert len(seen) == 2, seen  # one experts call per layer
        assert all(s["local_experts"] == E // WORLD for s in seen), seen  # half the experts on each rank
        assert sum(s["sentinels"] for s in seen) > 0 and all(s["sentinel_weight"] == 0 for s in seen), seen
        logits = out["logits"]
        assert logits.shape == whole.shape and not logits.isnan().any()
        assert wd.rel_error(logits, whole) <= TOL, (r, wd.rel_error(logits, whole))
        assert wd.rel_error(logits, ref) <= TOL, (r, wd.rel_error(logits, ref))
