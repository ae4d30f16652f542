"""Figures drawn from ``results/<GPU>/*.csv`` (``python -m warpdecode report`` calls these).

Every figure names its GPU and software versions; the numbers come only from the CSV.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ..presets import MODEL_PRESETS  # noqa: E402
from . import data  # noqa: E402

STYLE = {
    "warp": dict(color="#d62728", marker="o", label="warp decode (2 kernels)"),
    "expert": dict(color="#1f77b4", marker="s", label="expert-centric (8 stages, tuned)"),
    "auto": dict(color="#7f7f7f", marker="", linestyle=":", label="auto"),
    "grouped_mm": dict(color="#2ca02c", marker="^", label="HF transformers grouped_mm"),
    "loop": dict(color="#9467bd", marker="x", label="eager expert loop"),
}
MOVES_DATA = {"1 route": False, "2 align": True, "3 gather": True, "5 gate/up GEMM": False, "6 down GEMM": False,
              "7 scatter": True, "8 combine": True}


def _rows(gpu, name):
    return data.read(data.gpu_dir(gpu) / name)


def _caption(gpu):
    c = _rows(gpu, "ceiling.csv")
    m = c[0] if c else {"gpu": gpu}
    return f"{m.get('gpu')} · torch {m.get('torch', '?')} · triton {m.get('triton', '?')} · {m.get('date', '?')}"


def fraction_of_ceiling(gpu: str, methods=("warp", "expert", "grouped_mm")):
    """Small multiples: fraction of the measured read ceiling against T, one panel per preset."""
    speed = data.speed_table(gpu)
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
    fig.suptitle(f"MoE layer time as a fraction of the memory ceiling (dashed: 85%)\n{_caption(gpu)}")
    fig.tight_layout()
    return _save(fig, "fraction_of_ceiling.png")


def headline(gpu: str, preset: str = "qwen3-30b-a3b"):
    """One preset: time per layer against T for every method, with the byte floor."""
    speed = data.speed_table(gpu)[preset]
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
    ax.set_title(f"{preset}, bf16: one MoE layer\n{_caption(gpu)}", fontsize=10)
    fig.tight_layout()
    return _save(fig, "headline.png")


def stage_breakdown(gpu: str, preset: str = "qwen3-30b-a3b"):
    """The expert-centric path's stages at each measured T, as shares of their sum."""
    rows = [r for r in _rows(gpu, "stages.csv") if r["preset"] == preset and r["path"] == "expert"]
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
                 f"{_caption(gpu)}", fontsize=9)
    fig.tight_layout()
    return _save(fig, "stage_breakdown.png")


def accuracy(gpu: str):
    """Error against the float64 reference in multiples of the bf16 rounding floor, per method."""
    rows = _rows(gpu, "accuracy.csv")
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
                 f"{_caption(gpu)}", fontsize=9)
    fig.tight_layout()
    return _save(fig, "accuracy.png")


def _save(fig, name):
    data.FIGURES.mkdir(exist_ok=True)
    path = data.FIGURES / name
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def all_figures(gpu: str):
    return [headline(gpu), fraction_of_ceiling(gpu), stage_breakdown(gpu), accuracy(gpu)]
