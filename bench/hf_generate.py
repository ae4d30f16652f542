"""``generate`` tokens/s of Hugging Face MoE models (random weights, real shapes) with transformers'
``grouped_mm`` experts against ``warpdecode``, and the Amdahl prediction beside the measured gain.

Two ways ``generate`` runs here (the ``compile`` column):

- ``reduce-overhead`` (default): the fast path transformers documents. A static KV cache
  (``cache_implementation="static"``) makes every decode step the same shapes, and
  ``compile_config=CompileConfig(fullgraph=True, mode="reduce-overhead")`` has ``generate`` run
  the decode step's forward through ``torch.compile``: Inductor, then CUDA graphs (cudagraph
  trees); the prefill runs eagerly. warpdecode's experts trace as one operator, ``warpdecode::moe``.
  ``dynamic`` stays transformers' default (None): the first batch size compiles a graph for its
  shapes, the second one graph for any batch size, which later batch sizes reuse (CUDA graphs are
  recorded per shape either way); ``graphs_compiled`` counts the graphs each row's calls compiled.
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

The implementation :data:`NO_EXPERTS` is the step's bound: the same compiled step whose expert
layers do no work (each returns its input; the router still runs), so its tokens/s is what any
experts implementation could reach on this host and GPU, and the speed-up it shows over grouped_mm
is the most removing the expert layers' time could give.

:func:`generate_speed` measures in one process. ``python -m bench e2e --what generate`` with
several implementations runs each in processes of its own (:func:`generate_in_processes`): in one
process the second implementation measured is always the slower, whichever it is.
"""

from __future__ import annotations

import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from bench.sweep import meta

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
    random hidden states and random top-k routing (a draw per layer; weights in the model's dtype
    and int64 ids, as the models pass them), called through ``impl``, captured in one CUDA graph and
    replayed (on the CPU: the median of ``reps`` eager calls)."""
    from bench.timing import capture, time_replays

    if impl == NO_EXPERTS:
        return 0.0
    cfg, dev = model.config, model.device
    E = getattr(cfg, "num_experts", None) or cfg.num_local_experts
    K = cfg.num_experts_per_tok
    g = torch.Generator(device=dev).manual_seed(seed)
    calls = []
    for m in experts_modules(model):
        x = torch.randn(batch, cfg.hidden_size, device=dev, dtype=model.dtype, generator=g)
        w, ids = torch.randn(batch, E, device=dev, generator=g).softmax(-1).topk(K, dim=-1)
        calls.append((m, x, ids, (w / w.sum(-1, keepdim=True)).to(model.dtype)))
    model.set_experts_implementation(impl)

    def step():
        return [m(x, ids, w) for m, x, ids, w in calls]

    with torch.no_grad():
        if dev.type != "cuda":
            times = []
            for _ in range(reps):
                t = time.perf_counter()
                step()
                times.append(time.perf_counter() - t)
            return statistics.median(times) * 1e6
        graph, _ = capture(step)
        us = time_replays(graph, reps=reps).median_us
    del graph
    return us


def step_clock(device="cuda"):
    """A logits processor that records a CUDA event each time ``generate`` has a new token's
    logits: the decode steps' time without a host sync (the events are read after the call). On
    the CPU it records the host's clock."""
    from transformers import LogitsProcessor

    cuda = torch.device(device).type == "cuda"

    class StepClock(LogitsProcessor):
        def __init__(self):
            self.events: list = []

        def __call__(self, input_ids, scores):
            if cuda:
                e = torch.cuda.Event(enable_timing=True)
                e.record()
            else:
                e = time.perf_counter()
            self.events.append(e)
            return scores

        def decode_s(self) -> tuple[float, int]:
            """(seconds from the first new token's logits to the last, decode steps between them)."""
            first, last = self.events[0], self.events[-1]
            if cuda:
                torch.cuda.synchronize()
                return first.elapsed_time(last) / 1e3, len(self.events) - 1
            return last - first, len(self.events) - 1

    return StepClock()


def generate_kwargs(compile: str, new_tokens: int, clock=None, *, backend: str = "inductor") -> dict:
    """``generate``'s arguments: greedy, exactly ``new_tokens``; ``compile="reduce-overhead"`` the
    static cache and the compiled decode step (``fullgraph=True``; ``dynamic`` transformers'
    default), ``"none"`` eager with the dynamic cache. ``backend`` other than Inductor (Dynamo's
    ``"eager"``, to check the trace on the CPU) takes no mode and compiles on any device."""
    from transformers import CompileConfig, LogitsProcessorList

    kw = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
    if clock is not None:
        kw["logits_processor"] = LogitsProcessorList([clock])
    if compile == "none":
        kw["disable_compile"] = True
        return kw
    cc = CompileConfig(fullgraph=True, mode=compile)
    if backend != "inductor":
        cc.backend, cc.mode, cc._compile_all_devices = backend, None, True
    kw.update(cache_implementation="static", compile_config=cc)
    return kw


def _reset_compiled(model):
    """Forget every compiled graph (and the CUDA graphs recorded for it) and the model's compiled call."""
    torch._dynamo.reset()
    if hasattr(model, "_compiled_call"):
        del model._compiled_call


def generate_speed(*, name: str = "qwen3-30b-a3b", layers: int | None = None, batches=(1, 4, 16),
                   new_tokens: int = 64, prompt_len: int = 32, impls=("grouped_mm", "warpdecode"),
                   repeats: int = 3, compile: str = "reduce-overhead", emit=None, device="cuda",
                   dtype=torch.bfloat16, backend: str = "inductor", moe_reps: int = 50, overrides=None, outs=None):
    """One row per (impl, batch), batch sizes inner, in the order of ``impls`` (see the module's
    docstring; run warpdecode first to see that the order does not favour it); ``emit``, if given,
    receives each row once it is measured and, for an implementation other than :data:`BASELINE`,
    compared with the baseline's row of its batch, so a run cut short keeps what it measured. ``layers=None``:
    as many as the GPU's free memory holds (:func:`fit_layers`). ``device``, ``dtype``,
    ``backend`` and ``overrides`` (config fields) let the same loop run a tiny model on the CPU.
    ``outs``, if given, receives each (impl, batch)'s generated tokens."""
    import transformers
    from torch._dynamo.utils import counters

    if compile not in COMPILE_MODES:
        raise ValueError(f"compile must be one of {COMPILE_MODES}, got {compile!r}")
    register_impls()
    if layers is None:
        free, _ = torch.cuda.mem_get_info()
        layers = fit_layers(name, free, dtype=dtype)
    t0 = time.perf_counter()
    model = make_model(layers, name, device=device, dtype=dtype, **(overrides or {}))
    print(f"{name}: {layers} layers, {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters, "
          f"built in {time.perf_counter() - t0:.1f} s", flush=True)
    info = {**meta(), "transformers": transformers.__version__}
    clock = step_clock(device)
    rows, base = [], {}
    outs = {} if outs is None else outs  # each (impl, batch)'s generated tokens
    run = dict(compile=compile, new_tokens=new_tokens, prompt_len=prompt_len, repeats=repeats, clock=clock,
               counters=counters, outs=outs, backend=backend, moe_reps=moe_reps)
    pending = []  # rows of other implementations measured before the baseline's row of their batch
    for impl in impls:  # batch sizes inner: a graph compiled for any batch size serves the later ones
        model.set_experts_implementation(impl)
        _reset_compiled(model)
        counters.clear()
        for batch in batches:
            row = _generate_row(model, name, layers, batch, impl, **run)
            if row is None:
                continue
            row.update(info)
            rows.append(row)
            if impl == BASELINE:
                base[batch] = row
                ready = [row, *(p for p in pending if p["batch"] == batch)]
                pending = [p for p in pending if p["batch"] != batch]
            elif batch in base:
                ready = [row]
            else:  # compared when the baseline's row of this batch is measured
                _print_row(row, name, layers, compile)
                pending.append(row)
                ready = []
            for r in ready:
                if r["impl"] != BASELINE:
                    _against_baseline(r, base[batch], outs)
                _print_row(r, name, layers, compile)
                if emit:
                    emit(r)
        _reset_compiled(model)
    for r in pending:  # no baseline row for their batch: kept without the comparison
        if emit:
            emit(r)
    return rows


#: What the other implementations are compared with.
BASELINE = "grouped_mm"

#: The bound: an experts implementation that does no work (:func:`no_experts`).
NO_EXPERTS = "no_experts"


def no_experts(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
               top_k_weights: torch.Tensor) -> torch.Tensor:
    """An ``ExpertsInterface`` implementation that launches nothing: the input back, for the step's
    bound (the tokens it generates are meaningless)."""
    return hidden_states


def register_impls() -> None:
    """warpdecode's experts implementation and :data:`NO_EXPERTS`, registered with transformers."""
    from transformers.integrations.moe import ExpertsInterface

    from warpdecode.integrations.transformers import register

    register()
    ExpertsInterface.register(NO_EXPERTS, no_experts)

#: The measured columns of a row, with the decimals they are stored to: over several processes, the median.
MEASURED = {"seconds": 4, "tokens_per_s": 1, "step_us": 1, "first_call_s": 2, "moe_us": 1}


def save_rows(path: Path, rows: list[dict], outs: dict) -> None:
    """What one process of :func:`generate_in_processes` hands back: its rows and generated tokens
    (strings as plain ``str``, ``torch.__version__`` included, as :func:`load_rows` reads only those)."""
    rows = [{k: str(v) if isinstance(v, str) else v for k, v in r.items()} for r in rows]
    torch.save({"rows": rows, "tokens": {k: v.cpu() for k, v in outs.items()}}, path)


def load_rows(path: Path) -> tuple[list[dict], dict]:
    got = torch.load(path, weights_only=True)
    return got["rows"], got["tokens"]


def generate_in_processes(argv_of, impls, rounds: int, *, layers: int | None = None, emit=None) -> list[dict]:
    """Each implementation in a fresh process per round, the implementations alternating (A, B, A,
    B, …) so that a drift of the machine over the run reaches each alike. ``argv_of(impl, layers,
    path)`` is the command line of one process: it measures ``impl`` alone with one timed call per
    batch (:func:`generate_speed`) and saves its rows and tokens to ``path`` (:func:`save_rows`).
    ``layers`` None: the first process fits as many as the GPU's memory holds, the others take its
    count. The rows merge into one per (impl, batch) (:func:`merge_rounds`); ``emit``, if given,
    receives the merged rows after every process, so a run cut short keeps what it measured. A
    process that fails is reported and left out."""
    measured, tokens, merged = [], {}, []
    with tempfile.TemporaryDirectory(prefix="warpdecode-generate-") as tmp:
        for r in range(rounds):
            for impl in impls:
                path = Path(tmp) / f"{impl}-{r}.pt"
                print(f"== generate {impl}, round {r + 1} of {rounds}, in a process of its own", flush=True)
                done = subprocess.run(argv_of(impl, layers, path), check=False)
                if done.returncode != 0 or not path.exists():
                    print(f"ERROR generate {impl}, round {r + 1}: exit status {done.returncode}, no rows", flush=True)
                    continue
                rows, toks = load_rows(path)
                measured += rows
                for key, t in toks.items():
                    tokens.setdefault(key, t)  # compared from each implementation's first process
                if layers is None and rows:
                    layers = rows[0]["layers"]
                merged = merge_rounds(measured, tokens)
                if emit:  # after every process: a run cut short in a round keeps the processes it finished
                    for row in merged:
                        emit(row)
    for row in merged:
        _print_row(row, row["model"], row["layers"], row["compile"])
    return merged


def merge_rounds(rows: list[dict], tokens: dict) -> list[dict]:
    """One row per (impl, batch) from rows measured in several processes: each :data:`MEASURED`
    column the median over them, ``moe_share`` the medians' ratio, ``processes`` how many; each
    other implementation's row compared with the baseline's of its batch from these medians
    (:func:`_against_baseline`; ``tokens``: each (impl, batch)'s generated tokens)."""
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["impl"], r["batch"]), []).append(r)
    merged = {}
    for key, group in groups.items():
        m = dict(group[0])
        for k, digits in MEASURED.items():
            m[k] = round(statistics.median(r[k] for r in group), digits)
        m["moe_share"] = round(m["moe_us"] / m["step_us"], 4)
        m["graphs_compiled"] = max(r["graphs_compiled"] for r in group)
        m["cudagraph_skips"] = max(r["cudagraph_skips"] for r in group)
        m["processes"] = len(group)
        merged[key] = m
    for (impl, batch), m in merged.items():
        if impl != BASELINE and (BASELINE, batch) in merged:
            _against_baseline(m, merged[BASELINE, batch], tokens)
    return list(merged.values())


def _against_baseline(row: dict, b: dict, outs: dict | None) -> None:
    """Add the speed-up over the baseline's row ``b`` of the same batch, Amdahl's prediction from
    the baseline's expert share, and the fraction of the same greedy tokens (empty without ``outs``)."""
    batch, impl = row["batch"], row["impl"]
    row["speedup_over_" + BASELINE] = round(row["tokens_per_s"] / b["tokens_per_s"], 4)
    row["amdahl_predicted"] = round(amdahl(b["moe_share"], b["moe_us"] / row["moe_us"]) if row["moe_us"] > 0
                                    else 1.0 / (1.0 - b["moe_share"]), 4)
    row["same_tokens_as_" + BASELINE] = ("" if outs is None else
                                         round((outs[impl, batch] == outs[BASELINE, batch]).float().mean().item(), 4))


def _print_row(row: dict, name: str, layers: int, compile: str) -> None:
    s = "speedup_over_" + BASELINE
    print(f"generate {name} L={layers} batch={row['batch']} {row['impl']} ({compile}, {row['cache']} cache): "
          f"{row['tokens_per_s']:.1f} tok/s, {row['step_us']:.0f} us/step, first call "
          f"{row['first_call_s']:.1f} s ({row['graphs_compiled']} graphs compiled); expert layers "
          f"{row['moe_us']:.0f} us ({100 * row['moe_share']:.0f}% of the step)"
          + (f"; speed-up {row[s]:.3f}x, Amdahl predicts {row['amdahl_predicted']:.3f}x; same tokens "
             f"{100 * row['same_tokens_as_' + BASELINE]:.0f}%" if s in row else ""), flush=True)


def _generate_row(model, name, layers, batch, impl, *, compile, new_tokens, prompt_len, repeats, clock, counters,
                  outs, backend, moe_reps) -> dict | None:
    """One (batch, impl): a warm-up call, ``repeats`` timed calls, the expert layers alone. None
    (and the error printed) if it fails, so the next one runs."""
    dev = model.device
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    ids = torch.randint(3, model.config.vocab_size, (batch, prompt_len), device=dev,
                        generator=torch.Generator(device=dev).manual_seed(batch))
    mask = torch.ones_like(ids)
    kw = generate_kwargs(compile, new_tokens, clock, backend=backend)
    graphs = counters["stats"]["unique_graphs"]
    try:
        with torch.no_grad():
            sync()
            t = time.perf_counter()
            model.generate(ids, attention_mask=mask, **kw)  # warm-up: compiles, records the CUDA graphs
            sync()
            first = time.perf_counter() - t
            walls, decode = [], []
            for _ in range(repeats):
                clock.events.clear()
                sync()
                t = time.perf_counter()
                out = model.generate(ids, attention_mask=mask, **kw)
                sync()
                walls.append(time.perf_counter() - t)
                decode.append(clock.decode_s())
        moe = experts_us(model, batch, impl, reps=moe_reps)
    except Exception as e:
        print(f"ERROR {name} L={layers} batch={batch} {impl} ({compile}): {type(e).__name__}: {e}"[:2000], flush=True)
        sync()
        return None
    outs[impl, batch] = out[:, prompt_len:]
    step_s = statistics.median(s / n for s, n in decode)
    return {"model": f"{name} shapes", "layers": layers, "batch": batch, "prompt": prompt_len,
            "new_tokens": new_tokens, "impl": impl, "compile": compile,
            "cache": "dynamic" if compile == "none" else "static",
            "seconds": round(statistics.median(walls), 4),
            "tokens_per_s": round(statistics.median(batch * n / s for s, n in decode), 1),
            "step_us": round(step_s * 1e6, 1), "first_call_s": round(first, 2),
            "moe_us": round(moe, 1), "moe_share": round(moe / (step_s * 1e6), 4),
            "graphs_compiled": counters["stats"]["unique_graphs"] - graphs,
            "cudagraph_skips": counters["inductor"]["cudagraph_skips"]}
