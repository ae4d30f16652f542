"""End to end: decode tokens/s of the minimal decoder (``bench.model``) per MoE method, with
the share of the step its MoE layers take, and the error of every layer's hidden state against the
same model in float64. ``compile=True`` runs the decoder's dense code through ``torch.compile``
(:class:`bench.model.Decoder`); every row's ``dense`` column says how it ran."""

from __future__ import annotations

import sys
from functools import partial

import torch

from bench.model import MODELS, MOE_METHODS, Decoder
from bench.sweep import meta
from bench.timing import capture, time_replays
from warpdecode.reference import rel_error


def step_bytes(model: Decoder, T: int, ctx: int, routes) -> int:
    """The fewest bytes a step must move: dense weights once, each layer's distinct routed
    experts once, the KV cache read over ``ctx`` positions, the embedding rows."""
    cfg = model.cfg
    elem = model.embed.element_size()
    expert_elems = 3 * cfg.moe.I * cfg.hidden
    experts = sum(torch.unique(ti).numel() for ti in routes) * expert_elems * elem
    kv = len(model.layers) * 2 * T * ctx * cfg.kv_heads * cfg.head_dim * elem
    return model.dense_bytes() + experts + kv + T * cfg.hidden * elem


def moe_layers(model: Decoder, T: int, routes, method: str):
    """The step's MoE layers alone: one ``method`` call per layer on that layer's routes (a
    step's ``routes``), with random inputs and equal routing weights (the time depends on which
    experts are hit, not on the values). Timing it gives the MoE part of a step."""
    cfg = model.cfg
    g = torch.Generator(device=model.device).manual_seed(T)
    x = torch.randn(T, cfg.hidden, generator=g, device=model.device, dtype=model.dtype)
    tw = torch.full((T, cfg.moe.K), 1 / cfg.moe.K, device=model.device, dtype=torch.float32)
    fn = MOE_METHODS[method]

    def run():
        return [fn(x, p["w13"], p["w2"], tw, ti) for p, ti in zip(model.layers, routes, strict=True)]

    return run


def decode_speed(name: str, Ts, ctxs, methods, *, layers: int | None = None, ceiling_tbps: float, reps: int = 30,
                 compile: bool = True, emit=None):
    """Median time of one decode step (a CUDA graph of ``Decoder.step``) at the last position of
    a filled cache of ``ctx``, per T and MoE method; ``moe_us`` is the same step's MoE layers
    replayed alone (:func:`moe_layers`) and ``moe_share`` their fraction of the step. ``emit``,
    if given, receives each row as it is measured (so a long sweep cut short keeps its rows)."""
    model = Decoder(MODELS[name], device="cuda", layers=layers, seed=0, compile=compile)
    info = meta()
    rows = []
    for ctx in ctxs:
        for T in Ts:
            cache = model.new_cache(T, ctx, fill=True, seed=T)
            tokens = torch.randint(0, model.cfg.vocab, (T,), device="cuda")
            routes = []
            model.step(tokens, ctx - 1, cache, method="expert", routes=routes)
            nbytes = step_bytes(model, T, ctx, routes)
            floor_us = nbytes / (ceiling_tbps * 1e12) * 1e6
            for m in methods:
                g, _ = capture(partial(model.step, tokens, ctx - 1, cache, method=m))
                t = time_replays(g, reps=reps)
                g, _ = capture(moe_layers(model, T, routes, m))
                moe = time_replays(g, reps=reps)
                g = None
                rows.append({"model": name, "layers": len(model.layers), "T": T, "ctx": ctx, "method": m,
                             "dense": model.dense,
                             "step_us": round(t.median_us, 2), "p20_us": round(t.p20_us, 2),
                             "p80_us": round(t.p80_us, 2),
                             "tokens_per_s": round(T / (t.median_us * 1e-6), 1), "bytes": nbytes,
                             "floor_us": round(floor_us, 2), "frac_floor": round(floor_us / t.median_us, 4),
                             "moe_us": round(moe.median_us, 2), "moe_share": round(moe.median_us / t.median_us, 4),
                             "ceiling_TBps": round(ceiling_tbps, 4), **info})
                if emit:
                    emit(rows[-1])
                print(f"{name} L={len(model.layers)} ctx={ctx} T={T} {m} ({model.dense}): {t.median_us:.1f} us/step, "
                      f"{T / (t.median_us * 1e-6):.0f} tok/s, {100 * floor_us / t.median_us:.0f}% of the step floor; "
                      f"MoE layers {moe.median_us:.1f} us ({100 * moe.median_us / t.median_us:.0f}% of the step)",
                      flush=True)
            cache = None
            torch.cuda.empty_cache()
    return rows


ERROR_METHODS = ("expert", "warp", "loop", "moe-only:expert", "moe-only:warp", "moe-only:loop")


def differing_tokens(topk_ids: torch.Tensor, other: torch.Tensor) -> int:
    """Tokens (rows of two (T, K) id arrays) whose sets of experts differ; the order within a row,
    which follows the routing weights, does not count."""
    return int((topk_ids.sort(dim=-1).values != other.sort(dim=-1).values).any(dim=-1).sum())


class _Lines:
    """A progress counter for when tqdm is not installed: one line per finished part."""

    def __init__(self, total: int, desc: str):
        self.total, self.desc, self.n = total, desc, 0

    def update(self, n: int = 1):
        self.n += n

    def set_postfix_str(self, text: str):
        print(f"{self.desc}: {self.n}/{self.total} decode steps, {text}", file=sys.stderr, flush=True)

    def close(self):
        pass


def progress(total: int, desc: str):
    """A progress bar over ``total`` units (tqdm, from the ``dev`` and ``bench`` extras), or a
    line per part without it."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _Lines(total, desc)
    return tqdm(total=total, desc=desc, unit="step", file=sys.stderr)


def decode_trace(model, prompt, method: str, on_step=None, routes=None):
    """(logits, trace) of ``method`` decoding ``prompt`` ((steps, T) token ids) from an empty cache:
    the last step's logits and each layer's hidden state at that step. ``reference`` and the
    ``moe-only:`` methods keep the cache in float64, as their layers compute. ``on_step`` is called
    after each step; ``routes``, a list, receives each step's per-layer (T, K) expert ids."""
    steps, T = prompt.shape
    f64 = method == "reference" or method.startswith("moe-only:")
    cache = model.new_cache(T, steps, dtype=torch.float64 if f64 else model.dtype)
    for s in range(steps):
        trace, step_routes = [], ([] if routes is not None else None)
        logits = model.step(prompt[s], s, cache, method=method, trace=trace, routes=step_routes)
        if routes is not None:
            routes.append(step_routes)
        if on_step:
            on_step()
    return logits, trace


def layer_errors(name: str, *, T: int = 4, steps: int = 8, methods=ERROR_METHODS,
                 layers: int | None = None, device="cuda", seed: int = 0, compile: bool = False,
                 progress_bar: bool = False, flips: dict | None = None):
    """Feed the same ``steps`` tokens per sequence through the float64 model and through each
    method; report every layer's hidden state error at the last step, and the logits' error.
    ``flips``, a dict, receives from the same runs, per method, per layer, the number of the
    steps · T tokens whose set of K experts differs from the float64 model's (a routing decision
    the rounding changed: the token then moves by a whole expert's output, far more than a rounding).

    ``expert``/``warp``/``loop``: the whole model in bf16 (what a deployment sees; attention,
    norms, residuals and routing decisions contribute too). ``moe-only:…``: the model in float64
    but the MoE layers, so the error is the MoE path's own, carried through the layers.
    ``compile`` applies to the all-bf16 methods (the float64 path runs eagerly). ``progress_bar``:
    show the decode steps as they run (:func:`progress`; the CPU interpreter takes minutes)."""
    model = Decoder(MODELS[name], device=device, layers=layers, seed=seed, compile=compile)
    g = torch.Generator(device="cpu").manual_seed(seed)
    prompt = torch.randint(0, model.cfg.vocab, (steps, T), generator=g).to(device)

    bar = progress((1 + len(methods)) * steps, f"{name}: layer errors") if progress_bar else None

    def run(method):
        routes = [] if flips is not None else None  # kept only where the flips are counted
        logits, trace = decode_trace(model, prompt, method, on_step=bar.update if bar else None, routes=routes)
        if bar:
            bar.set_postfix_str(f"{method} done")
        return logits, trace, routes

    ref_logits, ref_trace, ref_routes = run("reference")
    info = meta()
    rows = []
    for m in methods:
        logits, trace, routes = run(m)
        if flips is not None:
            flips[m] = [sum(differing_tokens(got[li], want[li]) for got, want in zip(routes, ref_routes, strict=True))
                        for li in range(len(model.layers))]
        dense = "eager" if m.startswith("moe-only:") else model.dense  # the float64 path is never compiled
        for li, (h, r) in enumerate(zip(trace, ref_trace, strict=True)):
            rows.append({"model": name, "T": T, "steps": steps, "method": m, "dense": dense, "layer": li + 1,
                         "error": rel_error(h, r), **info})
        rows.append({"model": name, "T": T, "steps": steps, "method": m, "dense": dense, "layer": "logits",
                     "error": rel_error(logits, ref_logits), **info})
    if bar:
        bar.close()
    return rows
