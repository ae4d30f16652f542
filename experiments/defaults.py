"""The default launch configurations against the tuned ones, on the presets and on real layer
shapes that are not presets.

    python experiments/defaults.py [--T 1 2 4 ...] [--shapes NAME ...] [--reps 50]
    python experiments/defaults.py --version down [--T 1 2 4] [--shapes NAME ...]
    python experiments/defaults.py --version gate_up [--T 1 4 8] [--shapes NAME ...]
    TRITON_INTERPRET=1 python experiments/defaults.py --check     # the defaults' results, on the CPU

For each shape and T: warp decode, the expert-centric path and ``auto``, once with the shipped
table (the presets have one) and once with every table switched off (each path's defaults, and
``auto``'s crossover without a table), timed in one process as ``bench.sweep.speed``
times them (``warpdecode.moe`` in CUDA-graph replays over rotated layer copies, the read ceiling
measured first). Rows:
``experiments/results/<GPU>/defaults.csv`` (``tables`` = ``tuned`` or ``off``). The summary it
prints last (``--summary CSV`` prints it again): per shape and T the defaults' time over the tuned
one, the expert path's fraction of the ceiling at T ≥ 32, and ``auto`` over the faster of its two
paths, beside the path ``auto`` picks (``auto_picks``: w, e) and that path's time over the faster
one. ``auto`` runs the picked path's kernels, so the two figures differ by the timing's noise.

``--version down``: the data behind warp decode's default down tile. On every shape, at the T's
where the defaults run the pair (T = 1, 2, 4), the pair with its default gate/up tile and each of
``DOWN_TILES`` as its down tile, the default's tile first and again last (a drift check), checked
against float64 and timed as ``harness.checked_us`` times (CUDA graph over rotated layer copies).
Rows: ``experiments/results/<GPU>/down_defaults.csv`` (schema ``harness.COLUMNS``); the summary
printed last: per shape and T, each tile's time over the fastest, the default tile marked.

``--version expert``: the data behind the expert path's default tiles on few, wide experts (K = 2,
E ≤ 16, I ≥ 4096: :data:`FEW_WIDE`, and Mixtral-8x7B beside its tuned table). At T = 4 … 256 the expert
path with the shipped default (``configs.default_expert``), each of :data:`EXPERT_VARIANTS` applied
to it, the default again last (a drift check), and the tuned table's config where the shape has one,
checked and timed as ``--version down`` times. Rows: ``experiments/results/<GPU>/expert_defaults.csv``.

``--version gate_up``: the same with the roles swapped, the data behind warp decode's default
gate/up tile on a release: the pair with its default down tile and each of ``GATE_UP_TILES``
(default T = 1, 4, 8). Rows: ``experiments/results/<GPU>/gate_up_defaults.csv``.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

import checkout  # noqa: F401  (first: puts the checkout root on sys.path, for bench)
import torch
import triton

import warpdecode as wd
from bench.poison import poisoned
from warpdecode import api, configs

#: Real MoE layers that are not presets: I not a power of two, E not a power of two, K = 6, H ≥ 5120.
SHAPES = [
    wd.MoEShape("deepseek-v2-lite", H=2048, I=1408, E=64, K=6),
    wd.MoEShape("qwen1.5-moe-a2.7b", H=2048, I=1408, E=60, K=4),
    wd.MoEShape("qwen2-57b-a14b", H=3584, I=2560, E=64, K=8),
    wd.MoEShape("dbrx", H=6144, I=10752, E=16, K=4),
]
ALL_T = [1, 2, 4, 8, 16, 32, 64, 128, 256]

#: Real layers with few, wide experts (K = 2, E ≤ 16, I ≥ 4096) that are not presets.
FEW_WIDE = [
    wd.MoEShape("phi-3.5-moe", H=4096, I=6400, E=16, K=2),
    wd.MoEShape("jamba-v0.1", H=4096, I=14336, E=16, K=2),
    wd.MoEShape("mixtral-8x22b", H=6144, I=16384, E=8, K=2),
    wd.MoEShape("grok-1", H=6144, I=32768, E=8, K=2),
]


def _three_stages_k128(cfg: dict, part: str) -> dict:
    """One pipeline stage fewer (4 → 3) where the default gave up the 128-deep K step to fit four."""
    g = cfg[part]
    if cfg["BLOCK_M"] == 16 and g["BLOCK_K"] < 128 and g["num_stages"] == 4:
        return {**cfg, part: {**g, "BLOCK_K": 128, "num_stages": 3}}
    return cfg


def _deep_down(cfg: dict) -> dict:
    """The down GEMM at 16-row tiles with a 256-deep K step on three stages (the tuner's most common pick there)."""
    g = cfg["down"]
    if cfg["BLOCK_M"] == 16 and g["BLOCK_N"] <= 64:
        return {**cfg, "down": {**g, "BLOCK_K": 256, "num_stages": 3}}
    return cfg


def _gate_up_n128(cfg: dict) -> dict:
    """Gate/up at 128 columns on four stages where the default's 256 columns left room for two."""
    g = cfg["gate_up"]
    if g["BLOCK_N"] == 256 and g["num_stages"] == 2:
        return {**cfg, "gate_up": {**g, "BLOCK_N": 128, "num_stages": 4}}
    return cfg


#: Changes to the default expert config timed by ``--version expert``: name -> f(default) -> config.
EXPERT_VARIANTS = {
    "gate_up K128 s3": lambda c: _three_stages_k128(c, "gate_up"),
    "both K128 s3": lambda c: _three_stages_k128(_three_stages_k128(c, "gate_up"), "down"),
    "gate_up K128 s3, down K256 s3": lambda c: _deep_down(_three_stages_k128(c, "gate_up")),
    "gate_up N128 s4": _gate_up_n128,
}

#: Down tiles timed by ``--version down``: the tuner's picks at T ≤ 4 on the ten shapes
#: (``tuned/NVIDIA_H200.json``, ``results/NVIDIA_H200/tuned_shapes_cache.json``) and the defaults' tiles.
DOWN_TILES = [{"BLOCK_H": r, "BLOCK_I": c, "num_warps": w, "num_stages": 1}
              for r, c, w in [(4, 256, 4), (8, 256, 4), (2, 512, 2), (4, 512, 2), (8, 512, 4), (8, 512, 8),
                              (16, 512, 8)]]

#: Gate/up tiles timed by ``--version gate_up`` ([rows of I, columns of H] on warps): the defaults'
#: one row of 1024 or 2048 columns and the Triton 3.8 tuner's picks at T ≤ 8 on three of the ten
#: shapes (``results/NVIDIA_H200/tuned_shapes_cache_triton38.json``).
GATE_UP_TILES = [{"BLOCK_I": r, "BLOCK_H": c, "num_warps": w, "num_stages": 1}
                 for r, c, w in [(1, 2048, 1), (1, 1024, 1), (1, 512, 1), (2, 512, 1), (2, 256, 1), (4, 256, 2)]]


def no_tables():
    """Every lookup of a tuned table finds none: the defaults everywhere, auto's crossover included."""
    return configs.tables(shipped=False, cache=False)


def check():
    """The default configurations compute the layer (poisoned outputs, float64 reference) on odd shapes."""
    for shape, T in [(wd.MoEShape("c1", H=40, I=24, E=5, K=2), 3), (wd.MoEShape("c2", H=24, I=40, E=7, K=7), 9)]:
        w13, w2 = shape.weights(dtype=torch.float32, seed=1)
        gen = torch.Generator().manual_seed(T)
        x = torch.randn(T, shape.H, generator=gen)
        tw, ids = wd.route(torch.randn(T, shape.E, generator=gen), shape.K)
        ref = wd.reference_moe(x, w13, w2, tw, ids)
        with no_tables(), poisoned():
            for method in ("warp", "expert", "auto"):
                err = wd.rel_error(wd.moe(x, w13, w2, tw, ids, method=method), ref)
                assert err < 1e-5, (shape, T, method, err)
                print(f"{shape.name} T={T} {method}: defaults, error {err:.1e}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", default="defaults", choices=["defaults", "down", "gate_up", "expert"],
                   help="defaults against tuned (default), or the down tiles behind the default")
    p.add_argument("--check", action="store_true", help="check the defaults' results (CPU interpreter)")
    p.add_argument("--T", type=int, nargs="+", default=ALL_T)
    p.add_argument("--shapes", nargs="+", help="preset or extra shape names (default: the six presets and SHAPES)")
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--out", type=Path, help="the CSV (default experiments/results/<GPU>/defaults.csv)")
    p.add_argument("--summary", type=Path, metavar="CSV", help="print the summary of a CSV this wrote, and stop")
    args = p.parse_args(argv)
    if args.check:
        return check()
    if args.summary:
        import csv

        return summary(list(csv.DictReader(args.summary.open())))
    if not torch.cuda.is_available():
        sys.exit("timing needs a CUDA GPU (--check runs on the CPU)")
    from bench import data, sweep
    from bench.timing import read_ceiling

    extra = {s.name: s for s in [*SHAPES, *FEW_WIDE]}
    names = args.shapes or [*wd.MODEL_PRESETS, *extra]
    shapes = [extra.get(n) or wd.get_preset(n) for n in names]
    if args.version == "down":
        return part_tiles(shapes, [t for t in args.T if t <= 4] if args.T != ALL_T else [1, 2, 4], "down")
    if args.version == "expert":
        names = args.shapes or ["mixtral-8x7b", *(s.name for s in FEW_WIDE)]
        shapes = [extra.get(n) or wd.get_preset(n) for n in names]
        return expert_tiles(shapes, [t for t in args.T if t >= 4] if args.T != ALL_T else [4, 8, 16, 64, 256])
    if args.version == "gate_up":
        return part_tiles(shapes, [t for t in args.T if t <= 8] if args.T != ALL_T else [1, 4, 8], "gate_up")
    ceiling = read_ceiling(4.0)
    print(f"read ceiling {ceiling:.3f} TB/s", flush=True)
    rows = []
    for shape in shapes:
        for tables in ("tuned", "off"):
            ctx = no_tables() if tables == "off" else contextlib.nullcontext()
            with ctx:
                got = sweep.speed([shape], args.T, ["warp", "expert", "auto"], ceiling_tbps=ceiling, reps=args.reps)
                picks = {T: api.pick_method(T, shape.H, shape.I, shape.E, shape.K) for T in args.T}
            for r in got:
                rows.append({**r, "tables": tables, "H": shape.H, "I": shape.I, "E": shape.E, "K": shape.K,
                             "auto_picks": picks[int(r["T"])]})
        out = args.out or Path("experiments/results") / torch.cuda.get_device_name().replace(" ", "_") / "defaults.csv"
        data.KEYS.setdefault(out.name, ("preset", "T", "method", "tables"))
        data.merge_write(out, [r for r in rows if r["preset"] == shape.name])
        torch.cuda.empty_cache()
    summary(rows)


def summary(rows):
    by = {(r["preset"], int(r["T"]), r["method"], r["tables"]): float(r["median_us"]) for r in rows}
    frac = {(r["preset"], int(r["T"]), r["method"], r["tables"]): float(r["frac_ceiling"]) for r in rows}

    def ratio(preset, T, m):
        a, b = by.get((preset, T, m, "off")), by.get((preset, T, m, "tuned"))
        return f"{a / b:.3f}" if a and b else "-"

    picks = {(r["preset"], int(r["T"]), r["tables"]): r.get("auto_picks") for r in rows}

    def auto_over(preset, T, tables):
        """auto's time over the faster path's, and the time of the path auto picks over it: the two
        differ by the timing's noise alone, auto running the picked path's kernels."""
        a = by.get((preset, T, "auto", tables))
        paths = [v for m in ("warp", "expert") if (v := by.get((preset, T, m, tables)))]
        pick = picks.get((preset, T, tables))
        picked = by.get((preset, T, pick, tables)) if pick else None
        timed = f"{a / min(paths):.3f}" if a and paths else "-"
        return timed + (f" {pick[0]} {picked / min(paths):.3f}" if picked and paths else "")

    print("\nshape                  T   warp off/tuned  expert off/tuned  expert%(off)  auto/faster, picks (off)  "
          "auto/faster, picks (tuned)")
    for preset in dict.fromkeys(r["preset"] for r in rows):
        for T in sorted({int(r["T"]) for r in rows if r["preset"] == preset}):
            print(f"{preset:20s} {T:4d}   {ratio(preset, T, 'warp'):>12s}  {ratio(preset, T, 'expert'):>16s}  "
                  f"{100 * frac.get((preset, T, 'expert', 'off'), 0):10.1f}%  {auto_over(preset, T, 'off'):>24s}  "
                  f"{auto_over(preset, T, 'tuned'):>26s}")

def part_tiles(shapes, Ts, part: str):
    """``--version down`` / ``gate_up``: the pair with its default tile for the other kernel and
    each of :data:`DOWN_TILES` / :data:`GATE_UP_TILES` for ``part``, the default's own tile among them."""
    import harness

    from warpdecode import warp as wp

    rows, timed = [], {}  # timed: (shape, T) -> [(tile, variant, µs)] for the summary
    with no_tables():
        for case in harness.cases(shapes, Ts):
            s = case.shape
            default = configs.warp_config(s.H, s.I, s.E, s.K, case.T)
            other = default["gate_up" if part == "down" else "down"]
            if part == "down":
                tiles = [c for c in DOWN_TILES if c["BLOCK_I"] <= max(256, 2 * s.I)]
            else:
                tiles = [c for c in GATE_UP_TILES if c["BLOCK_H"] <= triton.next_power_of_2(s.H)]
            if default[part] not in tiles:
                tiles = [default[part], *tiles]
            # the default timed again last: the first tile timed on a shape can run slow (at T = 1 on
            # the ten shapes, up to 1.12× its time in the defaults report: Mixtral, 185 against 164 µs)
            for n, cfg in enumerate([*tiles, default[part]]):
                again = n == len(tiles)
                gate_up, down = (other, cfg) if part == "down" else (cfg, other)

                def pair(x, w13, w2, tw, ids, gate_up=gate_up, down=down):
                    return wp.warp_down(wp.warp_gate_up(x, w13, ids, tw, gate_up), w2, ids, tw, down, x.dtype)

                got = harness.checked_us_or_none(case, pair, str(cfg))
                if got is None:
                    continue
                us, err, _ = got
                label = "default again" if again else "default" if cfg == default[part] else "tile"
                rows.append(harness.row(case, us=us, err=err, experiment="defaults", version=part, variant=label,
                                        config=str(cfg), detail=str({"down" if part == "gate_up" else "gate_up":
                                                                     other})))
                timed.setdefault((s.name, case.T), []).append((cfg, label, us))
                print(f"{s.name} T={case.T} {part} {cfg}: {us:.2f} us ({label})", flush=True)
            harness.write(f"{part}_defaults", rows)
    print(f"\nshape                  T  {part} tiles [rows, columns]/warps: time over the fastest (* the default, "
          "timed first and again last)")
    for (name, T), got in timed.items():
        best = min(us for _, _, us in got)
        mark = {"default": "*", "default again": "* again"}
        cells = [f"{_tile_name(cfg, part)} {us / best:.3f}{mark.get(label, '')}" for cfg, label, us in got]
        print(f"{name:20s} {T:3d}  " + "  ".join(cells))


def expert_tiles(shapes, Ts):
    """``--version expert``: the expert path at the default config, each of :data:`EXPERT_VARIANTS`, the
    default again, and the tuned table's config where there is one."""
    import harness

    from warpdecode.expert import moe_expert

    rows, timed = [], {}
    for case in harness.cases(shapes, Ts):
        s = case.shape
        default = configs.default_expert(s.H, s.I, s.E, s.K, case.T)
        tuned = configs.expert_config(s.H, s.I, s.E, s.K, case.T)
        runs = [("default", default)]
        for name, f in EXPERT_VARIANTS.items():
            if all((v := f(default)) != c for _, c in runs):
                runs.append((name, v))
        runs += [("default again", default)] + ([("tuned", tuned)] if tuned != default else [])
        with no_tables():
            for label, cfg in runs:
                def path(x, w13, w2, tw, ids, cfg=cfg):
                    return moe_expert(x, w13, w2, tw, ids, config=cfg)

                got = harness.checked_us_or_none(case, path, label)
                if got is None:
                    continue
                us, err, _ = got
                rows.append(harness.row(case, us=us, err=err, experiment="defaults", version="expert",
                                        variant=label, config=str(cfg)))
                timed.setdefault((s.name, case.T), []).append((label, us))
                print(f"{s.name} T={case.T} {label} {cfg}: {us:.2f} us", flush=True)
        harness.write("expert_defaults", rows)
    print("\nshape                  T  expert path: time over the default's (first timing)")
    for (name, T), got in timed.items():
        base = got[0][1]
        print(f"{name:20s} {T:3d}  " + "  ".join(f"{label} {us / base:.3f}" for label, us in got))


def _tile_name(cfg: dict, part: str) -> str:
    rows, cols = (cfg["BLOCK_H"], cfg["BLOCK_I"]) if part == "down" else (cfg["BLOCK_I"], cfg["BLOCK_H"])
    return f"{rows}x{cols}/{cfg['num_warps']}w"


if __name__ == "__main__":
    main()
