"""``generate`` tokens/s of a Hugging Face Qwen3-MoE model (random weights, Qwen3-30B-A3B shapes,
fewer layers) with transformers' ``grouped_mm`` experts against ``warpdecode``."""

from __future__ import annotations

import statistics
import time

import torch

from .sweep import meta


def make_model(layers: int = 8):
    """A Qwen3-MoE causal LM with Qwen3-30B-A3B's shapes and ``layers`` layers, random bf16 weights, on the GPU."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    cfg = Qwen3MoeConfig(vocab_size=151936, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
                         num_hidden_layers=layers, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
                         num_experts=128, num_experts_per_tok=8, norm_topk_prob=True, decoder_sparse_step=1,
                         mlp_only_layers=[], max_position_embeddings=4096)
    torch.manual_seed(0)
    with torch.device("cuda"):
        return Qwen3MoeForCausalLM(cfg).to(torch.bfloat16).eval()


def generate_speed(*, layers: int = 8, batches=(1, 8), new_tokens: int = 64, prompt_len: int = 32,
                   impls=("grouped_mm", "warpdecode"), repeats: int = 3):
    from ..integrations.transformers import register

    register()
    model = make_model(layers)
    cfg = model.config
    info = meta()
    rows = []
    for batch in batches:
        ids = torch.randint(0, cfg.vocab_size, (batch, prompt_len), device="cuda")
        outs = {}
        for impl in impls:
            model.set_experts_implementation(impl)
            kw = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
            with torch.no_grad():
                model.generate(ids, **kw)  # warm-up: compiles kernels, allocates
                times = []
                for _ in range(repeats):
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    outs[impl] = model.generate(ids, **kw)
                    torch.cuda.synchronize()
                    times.append(time.perf_counter() - t0)
            t = statistics.median(times)
            rows.append({"model": "qwen3-30b-a3b shapes", "layers": layers, "batch": batch, "prompt": prompt_len,
                         "new_tokens": new_tokens, "impl": impl, "seconds": round(t, 4),
                         "tokens_per_s": round(batch * new_tokens / t, 1), **info})
            print(f"generate L={layers} batch={batch} {impl}: {batch * new_tokens / t:.1f} tok/s", flush=True)
        if len(outs) == 2:
            same = (outs[impls[0]] == outs[impls[1]]).float().mean().item()
            for r in rows[-2:]:
                r["same_tokens_as_" + impls[0]] = round(same, 4)
    return rows
