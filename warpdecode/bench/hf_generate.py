"""``generate`` tokens/s of Hugging Face MoE models (random weights, real shapes) with transformers'
``grouped_mm`` experts against ``warpdecode``, and the Amdahl prediction beside the measured gain.

Two ways ``generate`` runs here (the ``compile`` column):

- ``reduce-overhead`` (default): the fast path transformers documents. A static KV cache
  (``cache_implementation="static"``) makes every decode step the same shapes, and
  ``compile_config=CompileConfig(fullgraph=True, dynamic=False, mode="reduce-overhead")`` has
  ``generate`` run the decode step's forward through ``torch.compile``: Inductor, then CUDA graphs
  (cudagraph trees). The prefill runs eagerly. warpdecode's experts trace as one operator,
  ``warpdecode::moe``.
- ``none``: eager ``generate`` with the dynamic cache, bound by the host's Python.

Models (:data:`MODELS`): Qwen3-30B-A3B, OLMoE-1B-7B and Mixtral-8x7B configurations, built on the
GPU in bf16 with transformers' own random initialization (:func:`make_model`), with as many
layers as the GPU's memory holds unless told (:func:`fit_layers`).

Per (model, batch, impl), one row: decode tokens/s, the median over ``repeats`` calls after a
warm-up call of batch · (N − 1) / the time from the first new token's logits to the last (CUDA
events a logits processor records, so the prefill is not in it; ``tokens_per_s``); the whole
call (``seconds``); the warm-up call (``first_call_s``: compiling and recording the graphs); the
step's expert layers alone, replayed in a CUDA graph on random routing (``moe_us``,
:func:`experts_us`) and their share of the step. warpdecode's row adds the measured speed-up over
``grouped_mm`` and Amdahl's prediction from grouped_mm's share f and the expert layers' speed-up s:
``1 / ((1 − f) + f / s)`` (:func:`amdahl`), and the fraction of generated tokens equal to
grouped_mm's (greedy; near-ties of bf16 logits may flip).
"""

from __future__ import annotations

import statistics
import time

import torch

from .sweep import meta

#: transformers' config and model classes and the real model's config, per name.
MODELS = {
    "qwen3-30b-a3b": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", dict(
        vocab_size=151936, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
        num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4, head_dim=128, num_experts=128,
        num_experts_per_tok=8, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
        max_position_embeddings=4096)),
    "olmoe-1b-7b": ("OlmoeConfig", "OlmoeForCausalLM", dict(
        vocab_size=50304, hidden_size=2048, intermediate_size=1024, num_hidden_layers=16, num_attention_heads=16,
        num_key_value_heads=16, num_experts=64, num_experts_per_tok=8, norm_topk_prob=False,
        max_position_embeddings=4096)),
    "mixtral-8x7b": ("MixtralConfig", "MixtralForCausalLM", dict(
        vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, num_local_experts=8, num_experts_per_tok=2, max_position_embeddings=4096)),
}

COMPILE_MODES = ("reduce-overhead", "none")


def model_config(name: str, layers: int | None = None, **overrides):
    """transformers' config of model ``name`` with ``layers`` layers (default: all of the real
    model's), ``overrides`` replacing any field."""
    import transformers

    cfg_cls, _, fields = MODELS[name]
    fields = {**fields, **overrides}
    if layers is not None:
        fields["num_hidden_layers"] = layers
    return getattr(transformers, cfg_cls)(pad_token_id=0, bos_token_id=1, eos_token_id=2, **fields)


def make_model(layers: int | None = 8, name: str = "qwen3-30b-a3b", *, device="cuda", dtype=torch.bfloat16,
               seed: int = 0, **overrides):
    """``name``'s causal LM with ``layers`` layers, built on ``device`` directly in ``dtype`` (no
    float32 copy, no CPU detour) with transformers' own random initialization (normal weights,
    unit norms); every weight matrix is checked to be random, not left empty or zero."""
    import transformers

    cfg = model_config(name, layers, **overrides)
    cls = getattr(transformers, MODELS[name][1])
    torch.manual_seed(seed)
    with torch.device(device):
        model = cls._from_config(cfg, dtype=dtype)
    model.eval()
    if torch.device(device).type != "meta":
        flat = [n for n, p in model.named_parameters() if p.dim() >= 2 and not bool(p.float().std() > 0)]
        if flat:
            raise RuntimeError(f"{name}: weights not randomly initialized: {flat[:4]}")
    return model


def param_bytes(name: str, layers: int, dtype=torch.bfloat16) -> int:
    """Bytes of ``name``'s parameters at ``layers`` layers (counted on the meta device)."""
    model = make_model(layers, name, device="meta", dtype=dtype)
    return sum(p.numel() for p in model.parameters()) * torch.empty((), dtype=dtype).element_size()


def fit_layers(name: str, free_bytes: int, *, reserve: float = 0.15, dtype=torch.bfloat16) -> int:
    """The most layers of ``name`` (at most the real model's) whose weights fit in ``free_bytes``
    less a ``reserve`` fraction (the KV cache, activations, the graphs' pools)."""
    one, two = param_bytes(name, 1, dtype), param_bytes(name, 2, dtype)
    per_layer, fixed = two - one, 2 * one - two
    fit = int((free_bytes * (1 - reserve) - fixed) // per_layer)
    return max(1, min(MODELS[name][2]["num_hidden_layers"], fit))


def amdahl(share: float, layer_speedup: float) -> float:
    """The whole step's speed-up when a part taking ``share`` of it gets ``layer_speedup`` faster."""
    return 1.0 / ((1.0 - share) + share / layer_speedup)


def experts_modules(model) -> list:
    """The model's experts modules (the ones ``set_experts_implementation`` dispatches), in order."""
    return [m for m in model.modules() if type(m).__name__.endswith("Experts") and hasattr(m, "gate_up_proj")]


def experts_us(model, batch: int, impl: str, *, reps: int = 50, seed: int = 0) -> float:
    """µs of one decode step's expert layers alone: every layer's experts module on ``batch``
    random hidden states and random top-k routing (a draw per layer; bf16 weights and int64 ids,
    as the models pass them), called through ``impl``, captured in one CUDA graph and replayed."""
    from .timing import capture, time_replays

    cfg = model.config
    E = getattr(cfg, "num_experts", None) or cfg.num_local_experts
    K = cfg.num_experts_per_tok
    g = torch.Generator(device="cuda").manual_seed(seed)
    calls = []
    for m in experts_modules(model):
        x = torch.randn(batch, cfg.hidden_size, device="cuda", dtype=model.dtype, generator=g)
        w, ids = torch.randn(batch, E, device="cuda", generator=g).softmax(-1).topk(K, dim=-1)
        calls.append((m, x, ids, (w / w.sum(-1, keepdim=True)).to(model.dtype)))
    model.set_experts_implementation(impl)
    with torch.no_grad():
        graph, _ = capture(lambda: [m(x, ids, w) for m, x, ids, w in calls])
        us = time_replays(graph, reps=reps).median_us
    del graph
    return us


def step_clock():
    """A logits processor that records a CUDA event each time ``generate`` has a new token's
    logits: the decode steps' time without a host sync (the events are read after the call)."""
    from transformers import LogitsProcessor

    class StepClock(LogitsProcessor):
        def __init__(self):
            self.events: list = []

        def __call__(self, input_ids, scores):
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            self.events.append(e)
            return scores

        def decode_s(self) -> tuple[float, int]:
            """(seconds from the first new token's logits to the last, decode steps between them)."""
            torch.cuda.synchronize()
            return self.events[0].elapsed_time(self.events[-1]) / 1e3, len(self.events) - 1

    return StepClock()


def generate_kwargs(compile: str, new_tokens: int, clock=None) -> dict:
    """``generate``'s arguments: greedy, exactly ``new_tokens``; ``compile="reduce-overhead"`` the
    static cache and the compiled decode step, ``"none"`` eager with the dynamic cache."""
    from transformers import CompileConfig, LogitsProcessorList

    kw = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
    if clock is not None:
        kw["logits_processor"] = LogitsProcessorList([clock])
    if compile == "none":
        kw["disable_compile"] = True
    else:
        kw.update(cache_implementation="static",
                  compile_config=CompileConfig(fullgraph=True, dynamic=False, mode=compile))
    return kw


def _reset_compiled(model):
    """Forget every compiled graph (and the CUDA graphs recorded for it) and the model's compiled call."""
    torch._dynamo.reset()
    if hasattr(model, "_compiled_call"):
        del model._compiled_call


def generate_speed(*, name: str = "qwen3-30b-a3b", layers: int | None = None, batches=(1, 4, 16),
                   new_tokens: int = 64, prompt_len: int = 32, impls=("grouped_mm", "warpdecode"),
                   repeats: int = 3, compile: str = "reduce-overhead", emit=None):
    """One row per (batch, impl), in that order (see the module's docstring); ``emit``, if given,
    receives each row as it is measured, so a run cut short keeps what it measured. ``layers=None``:
    as many as the GPU's free memory holds (:func:`fit_layers`)."""
    import transformers
    from torch._dynamo.utils import counters

    from ..integrations.transformers import register

    if compile not in COMPILE_MODES:
        raise ValueError(f"compile must be one of {COMPILE_MODES}, got {compile!r}")
    register()
    if layers is None:
        free, _ = torch.cuda.mem_get_info()
        layers = fit_layers(name, free)
    t0 = time.perf_counter()
    model = make_model(layers, name)
    print(f"{name}: {layers} layers, {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters, "
          f"built in {time.perf_counter() - t0:.1f} s", flush=True)
    cfg = model.config
    info = {**meta(), "transformers": transformers.__version__}
    cache = "dynamic" if compile == "none" else "static"
    clock = step_clock()
    rows = []
    for batch in batches:
        ids = torch.randint(3, cfg.vocab_size, (batch, prompt_len), device="cuda",
                            generator=torch.Generator(device="cuda").manual_seed(batch))
        mask = torch.ones_like(ids)
        outs, by_impl = {}, {}
        for impl in impls:
            model.set_experts_implementation(impl)
            _reset_compiled(model)
            counters.clear()
            kw = generate_kwargs(compile, new_tokens, clock)
            try:
                with torch.no_grad():
                    torch.cuda.synchronize()
                    t = time.perf_counter()
                    model.generate(ids, attention_mask=mask, **kw)  # warm-up: compiles, records the graphs
                    torch.cuda.synchronize()
                    first = time.perf_counter() - t
                    walls, decode = [], []
                    for _ in range(repeats):
                        clock.events.clear()
                        torch.cuda.synchronize()
                        t = time.perf_counter()
                        out = model.generate(ids, attention_mask=mask, **kw)
                        torch.cuda.synchronize()
                        walls.append(time.perf_counter() - t)
                        decode.append(clock.decode_s())
                moe = experts_us(model, batch, impl)
            except Exception as e:  # the row is missing and the log says why; the next one runs
                print(f"ERROR {name} L={layers} batch={batch} {impl} ({compile}): {type(e).__name__}: {e}"[:2000],
                      flush=True)
                torch.cuda.synchronize()
                continue
            outs[impl] = out[:, prompt_len:]
            step_s = statistics.median(s / n for s, n in decode)
            row = {"model": f"{name} shapes", "layers": layers, "batch": batch, "prompt": prompt_len,
                   "new_tokens": new_tokens, "impl": impl, "compile": compile, "cache": cache,
                   "seconds": round(statistics.median(walls), 4),
                   "tokens_per_s": round(statistics.median(batch * n / s for s, n in decode), 1),
                   "step_us": round(step_s * 1e6, 1), "first_call_s": round(first, 2),
                   "moe_us": round(moe, 1), "moe_share": round(moe / (step_s * 1e6), 4),
                   "graphs": counters["stats"]["unique_graphs"],
                   "cudagraph_skips": counters["inductor"]["cudagraph_skips"], **info}
            by_impl[impl] = row
            base = by_impl.get(impls[0])
            if impl != impls[0] and base is not None:
                row["speedup_over_" + impls[0]] = round(row["tokens_per_s"] / base["tokens_per_s"], 4)
                row["amdahl_predicted"] = round(amdahl(base["moe_share"], base["moe_us"] / row["moe_us"]), 4)
                row["same_tokens_as_" + impls[0]] = round((outs[impl] == outs[impls[0]]).float().mean().item(), 4)
            rows.append(row)
            print(f"generate {name} L={layers} batch={batch} {impl} ({compile}, {cache} cache): "
                  f"{row['tokens_per_s']:.1f} tok/s, {row['step_us']:.0f} us/step, first call {first:.1f} s; "
                  f"expert layers {moe:.0f} us ({100 * row['moe_share']:.0f}% of the step)"
                  + (f"; speed-up {row['speedup_over_' + impls[0]]:.3f}x, Amdahl predicts "
                     f"{row['amdahl_predicted']:.3f}x; same tokens {100 * row['same_tokens_as_' + impls[0]]:.0f}%"
                     if "amdahl_predicted" in row else ""), flush=True)
            if emit:
                emit(row)
        _reset_compiled(model)
    return rows
