"""Figures drawn from a checkout's ``results/<GPU>/*.csv`` (``python -m bench report`` calls these).

Every figure names its GPU and software versions; the numbers come only from the CSV. Each
function reads the checkout ``root`` (default: the one around the current working directory,
:func:`bench.data.checkout`) and writes its PNG into ``out`` (default ``<root>/figures``).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bench import data  # noqa: E402
from warpdecode.presets import MODEL_PRESETS  # noqa: E402

STYLE = {
    "warp": dict(color="#d62728", marker="o", label="warp decode (2 kernels)"),
    "expert": dict(color="#1f77b4", marker="s", label="expert-centric (8 stages, tuned)"),
    "auto": dict(color="#7f7f7f", marker="", linestyle=":", label="auto"),
    "grouped_mm": dict(color="#2ca02c", marker="^", label="HF transformers grouped_mm"),
    "loop": dict(color="#9467bd", marker="x", label="eager expert loop"),
}
MOVES_DATA = {"1 route": False, "2 align": True, "3 gather": True, "5 gate/up GEMM": False, "6 down GEMM": False,
              "7 scatter": True, "8 combine": True}


def _rows(gpu, name, root):
    return data.read(data.gpu_dir(gpu, root) / name)


def _caption(gpu, root):
    c = _rows(gpu, "ceiling.csv", root)
    m = c[0] if c else {"gpu": gpu}
    return f"{m.get('gpu')} · torch {m.get('torch', '?')} · triton {m.get('triton', '?')} · {m.get('date', '?')}"


def fraction_of_ceiling(gpu: str, methods=("warp", "expert", "grouped_mm"), *, root=None, out=None):
    """Small multiples: fraction of the measured read ceiling against T, one panel per preset."""
    speed = data.speed_table(gpu, root)
    presets = [p for p in MODEL_PRESETS if p in speed]
    fig, axes = plt.subplots(2, 3, figsize=(13, 7), sharex=True, sharey=True)
    for ax, p in zip(axes.flat, presets, strict=False):
        for m in methods:
            pts = sorted(speed[p].get(m, {}).items())
            if pts:
                st = STYLE[m]
                ax.plot([t for t, _ in pts], [100 * r["frac_ceiling"] for _, r in pts], **st)
        ax.axhline(85, color="k", lw=0.6, ls="--")
        ax.set_xscale("log", base=2)
        ax.set_title(p)
        ax.set_ylim(0, 105)
        ax.grid(alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("tokens per step T")
    for ax in axes[:, 0]:
        ax.set_ylabel("% of measured read ceiling")
    axes.flat[0].legend(fontsize=8, loc="lower left")
    fig.suptitle(f"MoE layer time as a fraction of the memory ceiling (dashed: 85%)\n{_caption(gpu, root)}")
    fig.tight_layout()
    return _save(fig, "fraction_of_ceiling.png", root, out)


def headline(gpu: str, preset: str = "qwen3-30b-a3b", *, root=None, out=None):
    """One preset: time per layer against T for every method, with the byte floor."""
    speed = data.speed_table(gpu, root)[preset]
    fig, ax = plt.subplots(figsize=(7.5, 5))
    for m in ("loop", "grouped_mm", "expert", "warp"):
        pts = sorted(speed.get(m, {}).items())
        if pts:
            ax.plot([t for t, _ in pts], [r["median_us"] for _, r in pts], **STYLE[m])
    floor = sorted(speed["warp"].items())
    ax.plot([t for t, _ in floor], [r["floor_us"] for _, r in floor], color="k", ls="--", lw=1,
            label="floor: distinct experts' bytes / read ceiling")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("tokens per step T")
    ax.set_ylabel("µs per MoE layer (median)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    ax.set_title(f"{preset}, bf16: one MoE layer\n{_caption(gpu, root)}", fontsize=10)
    fig.tight_layout()
    return _save(fig, "headline.png", root, out)


def stage_breakdown(gpu: str, preset: str = "qwen3-30b-a3b", *, root=None, out=None):
    """The expert-centric path's stages at each measured T, as shares of their sum."""
    rows = [r for r in _rows(gpu, "stages.csv", root) if r["preset"] == preset and r["path"] == "expert"]
    Ts = sorted({int(r["T"]) for r in rows})
    stages = sorted({r["stage"] for r in rows})
    t = {(int(r["T"]), r["stage"]): float(r["median_us"]) for r in rows}
    fig, ax = plt.subplots(figsize=(8, 4.5))
    bottom = [0.0] * len(Ts)
    cmap = plt.get_cmap("tab10")
    for i, s in enumerate(stages):
        share = [100 * t.get((T, s), 0) / sum(t.get((T, x), 0) for x in stages) for T in Ts]
        ax.bar([str(T) for T in Ts], share, bottom=bottom, color=cmap(i), hatch="//" if MOVES_DATA.get(s) else None,
               label=s + (" (moves data)" if MOVES_DATA.get(s) else ""))
        bottom = [b + v for b, v in zip(bottom, share, strict=False)]
    for j, T in enumerate(Ts):
        total = sum(t.get((T, x), 0) for x in stages)
        ax.text(j, 101, f"{total:.0f} µs", ha="center", fontsize=8)
    ax.set_ylim(0, 110)
    ax.set_xlabel("tokens per step T")
    ax.set_ylabel("% of the summed stage times")
    ax.legend(fontsize=7, bbox_to_anchor=(1.01, 1), loc="upper left")
    ax.set_title(f"Expert-centric path, stage by stage ({preset}, bf16; stage 4 is a no-op in bf16)\n"
                 f"{_caption(gpu, root)}", fontsize=9)
    fig.tight_layout()
    return _save(fig, "stage_breakdown.png", root, out)


def accuracy(gpu: str, *, root=None, out=None):
    """Error against the float64 reference in multiples of the bf16 rounding floor, per method."""
    rows = _rows(gpu, "accuracy.csv", root)
    methods = ["warp", "warp_bf16_act", "expert", "grouped_mm", "loop", "expert_fp8"]
    presets = [p for p in MODEL_PRESETS if any(r["preset"] == p for r in rows)]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / len(methods)
    cmap = plt.get_cmap("tab10")
    for i, m in enumerate(methods):
        means = []
        for p in presets:
            v = [float(r["error_over_floor"]) for r in rows if r["preset"] == p and r["method"] == m]
            means.append(sum(v) / len(v) if v else float("nan"))
        ax.bar([j + i * width for j in range(len(presets))], means, width, label=m, color=cmap(i))
    ax.axhline(1, color="k", lw=0.8, ls="--")
    ax.set_yscale("log")
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(presets))], presets, fontsize=8)
    ax.set_ylabel("error / bf16 rounding floor (mean over T ≤ 64)")
    ax.legend(fontsize=8, ncol=3)
    ax.set_title(f"Error against the float64 reference (1 = the float64 result rounded once to bf16)\n"
                 f"{_caption(gpu, root)}", fontsize=9)
    fig.tight_layout()
    return _save(fig, "accuracy.png", root, out)


def one_launch_attempts(gpu: str, rows: list[dict], presets=("qwen3-30b-a3b", "olmoe-1b-7b"), T: int = 1, *,
                        root=None, out=None):
    """Each design that put warp decode's phases into one launch or overlapped them more, its best
    time over the shipped pair's in the same runs (``rows``: ``report.one_launch_attempts`` at T),
    with the time the 85 % bar asks for on the same scale. None (nothing drawn) where a preset has
    no such rows."""
    if not all(any(r["preset"] == p for r in rows) for p in presets):
        return None
    versions = list(dict.fromkeys(r["version"] for r in rows if r["preset"] in presets))[::-1]
    names = {r["version"]: f"{r['version']}: {r['design']}" for r in rows}
    fig, axes = plt.subplots(1, len(presets), figsize=(12, 4.4), sharex=True, sharey=True)
    for ax, preset in zip(axes, presets, strict=True):
        mine = {r["version"]: r for r in rows if r["preset"] == preset}
        y = [i for i, v in enumerate(versions) if v in mine]
        got = [mine[v] for v in versions if v in mine]
        ratio = [r["best_us"] / r["pair_us"] for r in got]
        ax.barh(y, [x - 1 for x in ratio], left=1, color="#d62728", alpha=0.8, height=0.6)
        ax.plot([r["bar_us"] / r["pair_us"] for r in got], y, "k|", ms=14, mew=2,
                label="the 85 % bar (its floor from the same run)")
        for yi, x, r in zip(y, ratio, got, strict=True):
            ax.text(max(x, 1) + 0.01, yi, f"{x - 1:+.1%}: {r['best_us']:.1f} against {r['pair_us']:.1f} µs",
                    va="center", fontsize=7.5)
        ax.axvline(1, color="k", lw=1)
        ax.set_xlim(0.8, 1.7)
        ax.set_ylim(-0.6, len(versions) + 0.3)  # a free row on top for the legend
        ax.set_title(f"{preset}, T = {T}", fontsize=9)
        ax.set_xlabel("best time / the shipped pair's (same runs)")
        ax.grid(alpha=0.3, axis="x")
    axes[0].set_yticks(range(len(versions)), [names[v] for v in versions], fontsize=8)
    axes[-1].legend(fontsize=8, loc="upper right")
    fig.suptitle("Warp decode's phases in one launch, or overlapped further, against the two-kernel pair\n"
                 f"{_caption(gpu, root)} (each design's own runs: experiments/README.md)", fontsize=10)
    fig.tight_layout()
    return _save(fig, "one_launch_attempts.png", root, out)


def _run_caption(row):
    """GPU and versions of one measured row (the e2e CSVs carry their own)."""
    return (f"{row.get('gpu')} · torch {row.get('torch', '?')} · triton {row.get('triton', '?')} · "
            f"{row.get('date', '?')}")


CTX_LINES = ["-", "--", ":", "-."]


def e2e_speed(gpu: str, steps: list[dict], model: str | None = None, *, root=None, out=None):
    """Whole decode steps (e2e_speed.csv) of the model measured last (of ``model``, if given, with
    the number of layers it was last measured with): tokens/s and fraction of the
    step's byte floor against T, per method and context length; then warp decode's speed-up over
    the expert-centric path for one MoE layer (speed.csv), for the whole step, and as Amdahl
    predicts it from the MoE layers' share of the step (``steps``: ``report.e2e_table``)."""
    from bench.model import MODELS

    table = data.e2e_speed_table(gpu, root=root)
    last = [r for r in data.read(data.gpu_dir(gpu, root) / "e2e_speed.csv") if model in (None, r["model"])][-1]
    model, layers = last["model"], int(last["layers"])
    ctxs = sorted(ctx for (m, L, ctx) in table if (m, L) == (model, layers))
    fig, (ax_tps, ax_floor, ax_up) = plt.subplots(1, 3, figsize=(15, 4.8))
    for i, ctx in enumerate(ctxs):
        for m in ("expert", "warp", "auto"):
            pts = sorted(table[(model, layers, ctx)].get(m, {}).items())
            if not pts:
                continue
            st = {**STYLE[m], "linestyle": CTX_LINES[i % len(CTX_LINES)],
                  "label": f"{STYLE[m]['label']}, ctx {ctx}"}
            ax_tps.plot([t for t, _ in pts], [r["tokens_per_s"] for _, r in pts], **st)
            ax_floor.plot([t for t, _ in pts], [100 * r["frac_floor"] for _, r in pts], **st)
    rows = [r for r in steps if (r["model"], r["layers"]) == (model, layers)]
    preset = MODELS[model].moe.name if model in MODELS else model
    layer = data.speed_table(gpu, root).get(preset, {})
    Tmax = max(T for ctx in ctxs for pts in table[(model, layers, ctx)].values() for T in pts)
    Ts = [T for T in sorted(set(layer.get("warp", {})) & set(layer.get("expert", {}))) if T <= Tmax]
    if Ts:
        ax_up.plot(Ts, [layer["expert"][T]["median_us"] / layer["warp"][T]["median_us"] for T in Ts], color="k",
                   marker="o", ms=4, label=f"one MoE layer ({preset}, speed.csv)")
    for i, ctx in enumerate(ctxs):
        r_ctx = sorted((r for r in rows if r["ctx"] == ctx), key=lambda r: r["T"])
        ls = CTX_LINES[i % len(CTX_LINES)]
        ax_up.plot([r["T"] for r in r_ctx], [r["measured_speedup"] for r in r_ctx], color=STYLE["warp"]["color"],
                   marker="o", ls=ls, label=f"whole step, measured, ctx {ctx}")
        pred = [r for r in r_ctx if r["predicted_speedup"]]
        ax_up.plot([r["T"] for r in pred], [r["predicted_speedup"] for r in pred], color=STYLE["warp"]["color"],
                   marker="D", mfc="none", ls="none", ms=9, label=f"whole step, Amdahl's prediction, ctx {ctx}")
    ax_up.axhline(1, color="k", lw=0.6, ls="--")
    for ax, ylabel in ((ax_tps, "decode tokens/s (T sequences × steps/s)"),
                       (ax_floor, "% of the step's byte floor"), (ax_up, "expert time / warp decode time")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("tokens per step T")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3, which="both")
    ax_tps.set_yscale("log")
    ax_floor.set_ylim(0, 100)
    ax_tps.legend(fontsize=7)
    ax_up.legend(fontsize=7)
    ax_tps.set_title("throughput")
    ax_floor.set_title("dense weights + distinct experts + KV cache, / ceiling", fontsize=9)
    ax_up.set_title("warp decode's speed-up: one layer vs the whole step", fontsize=9)
    fig.suptitle(f"{model}, {layers} layers, bf16, random weights: whole decode steps (CUDA graphs)\n"
                 f"{_run_caption(last)}", fontsize=10)
    fig.tight_layout()
    return _save(fig, "e2e_speed.png", root, out)


def e2e_errors(gpu: str, model: str | None = None, *, root=None, out=None):
    """The latest error run of e2e_errors.csv: relative error of the hidden state after each layer,
    and of the logits, against the same model in float64, per method; solid: the whole model in
    bf16, dashed: ``moe-only:`` (float64 model, MoE layers in bf16: the MoE path's own error)."""
    run = data.e2e_errors_run(gpu, model, root)
    fig, ax = plt.subplots(figsize=(11, 5))
    n = max(k for e in run["errors"].values() for k in e if k != "logits")
    x_logits = n + max(1, n / 12)
    for method, errs in run["errors"].items():
        moe_only = method.startswith("moe-only:")
        base = method.split(":", 1)[-1]
        st = STYLE.get(base, {"color": "k", "marker": "."})
        pts = sorted((k, v) for k, v in errs.items() if k != "logits")
        label = f"{st.get('label', base)}, " + ("MoE only (rest float64)" if moe_only else "whole model bf16")
        ax.plot([k for k, _ in pts], [v for _, v in pts], color=st["color"], marker=st.get("marker") or ".",
                ms=3, lw=1.2, ls="--" if moe_only else "-", mfc="none" if moe_only else st["color"], label=label)
        if "logits" in errs:
            ax.plot([x_logits], [errs["logits"]], color=st["color"], marker="*", ms=10,
                    mfc="none" if moe_only else st["color"], ls="none")
    ax.plot([], [], color="k", marker="*", ls="none", label="logits (final norm and LM head)")
    ticks = sorted({1, n, *range(0, n + 1, max(1, n // 8))} - {0})
    ax.set_xticks([*ticks, x_logits], [*map(str, ticks), "logits"])
    ax.set_yscale("log")
    ax.set_xlabel("after layer")
    ax.set_ylabel("‖h − h_float64‖ / ‖h_float64‖")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, bbox_to_anchor=(1.01, 1), loc="upper left")
    ax.set_title(f"{run['model']}: error against the float64 model, T = {run['T']}, after {run['steps']} decode "
                 f"steps\n{_run_caption(run['meta'])}", fontsize=9)
    fig.tight_layout()
    return _save(fig, "e2e_errors.png", root, out)


def _save(fig, name, root=None, out=None):
    folder = Path(out) if out is not None else data.figures_dir(root)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
