"""The figures and the numbers behind them (bench.plots, report, data), on small
synthetic CSV files in a scratch checkout (the current directory during each test): each figure
draws the CSV's numbers, each target is decided from its rows, and Amdahl's prediction is the
arithmetic it claims to be."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")  # the `dev`, `bench` and `notebooks` extras

from bench import data, plots, report  # noqa: E402

GPU = "Test GPU"
PNG = b"\x89PNG\r\n\x1a\n"
META = {"gpu": GPU, "torch": "t", "triton": "tr", "date": "2026-01-01"}

# one MoE layer alone (speed.csv, and in e2e_speed.csv's moe_us: the step's layers replayed alone)
# and whole steps of a 2-layer model (e2e_speed.csv), in µs
LAYER_US = {(1, "expert"): 10.0, (1, "warp"): 5.0, (4, "expert"): 20.0, (4, "warp"): 25.0}
STEP_US = {(1, "expert"): 100.0, (1, "warp"): 90.0, (1, "auto"): 90.0,
           (4, "expert"): 200.0, (4, "warp"): 210.0, (4, "auto"): 200.0,
           (8, "expert"): 300.0, (8, "warp"): 330.0}  # T = 8: no layer time (an older row without moe_us)
LAYERS = 2


def _speed_rows():
    return [{"preset": "qwen3-30b-a3b", "T": T, "method": m, "median_us": us, "p20_us": us, "p80_us": us,
             "floor_us": 1.0, "frac_ceiling": 0.5, "achieved_TBps": 1.0, "ceiling_TBps": 2.0,
             "error_over_floor": 1.0, **META} for (T, m), us in LAYER_US.items()]


def _e2e_rows(ctx):
    return [{"model": "qwen3-30b-a3b", "layers": LAYERS, "T": T, "ctx": ctx, "method": m, "step_us": us,
             "p20_us": us, "p80_us": us, "tokens_per_s": T / (us * 1e-6), "bytes": 1000, "floor_us": 50.0,
             "frac_floor": 50.0 / us, "ceiling_TBps": 2.0,
             "moe_us": LAYERS * LAYER_US[(T, m)] if (T, m) in LAYER_US else "", **META}
            for (T, m), us in STEP_US.items()]


def _error_rows(steps, methods, layers=3):
    rows = []
    for i, m in enumerate(methods):
        for layer in [*range(1, layers + 1), "logits"]:
            err = (i + 1) * 1e-3 * (layer if layer != "logits" else layers + 1)
            rows.append({"model": "qwen3-30b-a3b", "T": 4, "steps": steps, "method": m, "layer": layer,
                         "error": err, **META})
    return rows


@pytest.fixture
def results(tmp_path, monkeypatch):
    """A scratch checkout (README.md, results/) as the current directory; returns results/<GPU>/."""
    (tmp_path / "README.md").write_text("scratch\n")
    (tmp_path / "results").mkdir()
    monkeypatch.chdir(tmp_path)
    out = data.gpu_dir(GPU)
    assert out == tmp_path / "results" / "Test_GPU"
    data.merge_write(out / "speed.csv", _speed_rows())
    return out


@pytest.fixture
def drawn(monkeypatch):
    """The figures the plot functions make, kept open instead of saved: [(figure, file name)]."""
    figs = []
    real_save = plots._save

    def keep(fig, name, *where):
        figs.append((fig, name))
        return real_save(fig, name, *where)

    monkeypatch.setattr(plots, "_save", keep)
    return figs


def _lines(ax):
    return {ln.get_label(): (list(ln.get_xdata()), list(ln.get_ydata())) for ln in ax.get_lines()}


def test_amdahl():
    assert report.amdahl(0.0, 3.0) == 1.0  # nothing sped up
    assert report.amdahl(1.0, 3.0) == pytest.approx(3.0)  # everything sped up
    assert report.amdahl(0.5, 2.0) == pytest.approx(1 / 0.75)


def test_e2e_table_by_hand(results):
    data.merge_write(results / "e2e_speed.csv", _e2e_rows(ctx=64))
    rows = {r["T"]: r for r in report.e2e_table(GPU)}
    assert sorted(rows) == [1, 4, 8]
    r = rows[1]  # share 2 × 10 / 100 = 0.2, layer speed-up 2: Amdahl 1 / (0.8 + 0.1)
    assert r["moe_share"] == pytest.approx(0.2) and r["layer_speedup"] == pytest.approx(2.0)
    assert r["predicted_speedup"] == pytest.approx(1 / 0.9) and r["measured_speedup"] == pytest.approx(100 / 90)
    assert r["rest_us"] == pytest.approx(80.0) and r["auto_step_us"] == 90.0
    assert rows[4]["predicted_speedup"] == pytest.approx(1 / (0.8 + 0.2 / 0.8))  # warp slower: a slow-down
    assert rows[8]["predicted_speedup"] is None and rows[8]["auto_step_us"] is None  # no layer row, no auto row


def test_e2e_speed_figure_draws_the_csv(results, drawn):
    data.merge_write(results / "e2e_speed.csv", _e2e_rows(ctx=64) + _e2e_rows(ctx=512))
    path = plots.e2e_speed(GPU, report.e2e_table(GPU))
    assert path == data.figures_dir() / "e2e_speed.png" and path.read_bytes()[:8] == PNG
    (fig, name), = drawn
    ax_tps, ax_floor, ax_up = fig.axes
    tps = _lines(ax_tps)
    assert set(tps) == {f"{plots.STYLE[m]['label']}, ctx {c}" for m in ("expert", "warp", "auto") for c in (64, 512)}
    Ts, tokens_per_s = tps[f"{plots.STYLE['warp']['label']}, ctx 512"]
    assert Ts == [1, 4, 8] and tokens_per_s == pytest.approx([1 / 90e-6, 4 / 210e-6, 8 / 330e-6])
    assert _lines(ax_floor)[f"{plots.STYLE['expert']['label']}, ctx 64"][1] == pytest.approx([50.0, 25.0, 50 / 3])
    up = _lines(ax_up)
    assert up["one MoE layer (qwen3-30b-a3b, speed.csv)"] == ([1, 4], [2.0, 0.8])
    assert up["whole step, measured, ctx 64"][1] == pytest.approx([100 / 90, 200 / 210, 300 / 330])
    assert up["whole step, Amdahl's prediction, ctx 512"] == ([1, 4], [pytest.approx(1 / 0.9),
                                                                       pytest.approx(1 / (0.8 + 0.25))])
    assert GPU in fig._suptitle.get_text()


def test_merge_write_keeps_each_column_once(results):
    """New rows that lack a column the old rows have: the column is written once and keeps its values."""
    path = results / "hf_generate.csv"
    old = [{"model": "m", "layers": 4, "batch": b, "impl": "warpdecode", "compile": "", "cache": "", "same": 1.0}
           for b in (1, 4)]
    data.merge_write(path, old)
    data.merge_write(path, [{"model": "m", "layers": 4, "batch": 16, "impl": "warpdecode", "compile": "", "cache": ""}])
    rows = data.read(path)
    assert path.read_text().splitlines()[0].split(",").count("same") == 1
    assert [(r["batch"], r["same"]) for r in rows] == [("1", "1.0"), ("4", "1.0"), ("16", "")]


def test_e2e_errors_figure_shows_the_latest_run(results, drawn):
    old = _error_rows(6, ["expert", "warp", "loop"], layers=5)
    new = _error_rows(8, ["expert", "warp", "moe-only:expert", "moe-only:warp"])
    data.merge_write(results / "e2e_errors.csv", old)
    data.merge_write(results / "e2e_errors.csv", new)
    run = data.e2e_errors_run(GPU)
    assert (run["steps"], run["T"]) == (8, 4)
    assert set(run["errors"]) == {"expert", "warp", "moe-only:expert", "moe-only:warp"}
    assert run["errors"]["moe-only:warp"] == {1: 4e-3, 2: 8e-3, 3: pytest.approx(12e-3), "logits": 16e-3}

    path = plots.e2e_errors(GPU)
    assert path.name == "e2e_errors.png" and path.read_bytes()[:8] == PNG
    (fig, _), = drawn
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    solid = lines[f"{plots.STYLE['warp']['label']}, whole model bf16"]
    dashed = lines[f"{plots.STYLE['warp']['label']}, MoE only (rest float64)"]
    assert solid.get_linestyle() == "-" and dashed.get_linestyle() == "--"
    assert list(dashed.get_xdata()) == [1, 2, 3] and list(dashed.get_ydata()) == pytest.approx([4e-3, 8e-3, 12e-3])
    assert [t.get_text() for t in ax.get_xticklabels()][-1] == "logits"
    assert not any("loop" in label for label in lines)  # the older run is not mixed in


def test_figures_adds_the_e2e_figures_only_when_measured(results, monkeypatch):
    for f in ("headline", "fraction_of_ceiling", "stage_breakdown", "accuracy"):  # not under test here
        monkeypatch.setattr(plots, f, lambda gpu, _f=f, **kw: data.figures_dir() / f"{_f}.png")
    assert [p.name for p in report.figures(GPU)] == ["headline.png", "fraction_of_ceiling.png",
                                                        "stage_breakdown.png", "accuracy.png"]
    data.merge_write(results / "e2e_speed.csv", _e2e_rows(ctx=64))
    data.merge_write(results / "e2e_errors.csv", _error_rows(8, ["expert", "warp"]))
    assert [p.name for p in report.figures(GPU)][-2:] == ["e2e_speed.png", "e2e_errors.png"]
    assert (data.figures_dir() / "e2e_speed.png").read_bytes()[:8] == PNG
    out = results.parent / "elsewhere"  # out= draws into another folder, the checkout's figures/ untouched
    assert {p.parent for p in report.figures(GPU, out=out) if p.name.startswith("e2e")} == {out}


def _layer(preset, T, method, us, frac):
    return {"preset": preset, "T": T, "method": method, "median_us": us, "p20_us": us, "p80_us": us,
            "floor_us": frac * us, "frac_ceiling": frac, "achieved_TBps": 1.0, "ceiling_TBps": 2.0,
            "error_over_floor": 1.0, **META}


def test_targets_are_checked_against_the_csv(results):
    """report.targets: each bar (85 % of the ceiling; auto within 3 % of the faster path) decided
    from speed.csv rows, both ways; without one_launch_bound.csv, T = 1 is held to the ceiling too."""
    rows = [_layer("qwen3-30b-a3b", T, "warp", 10.0 * T, 0.9 if T > 1 else 0.84) for T in (1, 2, 4, 8)]
    rows += [_layer("qwen3-30b-a3b", T, "expert", 20.0 * T, 0.86) for T in (1, 2, 4, 8, 32, 64)]
    rows += [_layer("qwen3-30b-a3b", T, "auto", 10.0 * T, 0.9) for T in (1, 2, 4, 8)]
    rows += [_layer("qwen3-30b-a3b", 32, "warp", 50.0 * 32, 0.3), _layer("qwen3-30b-a3b", 64, "warp", 50.0 * 64, 0.3),
             _layer("qwen3-30b-a3b", 32, "auto", 20.0 * 32 * 1.031, 0.8)]  # 3.1 % over expert at T=32
    data.merge_write(results / "speed.csv", rows)
    got = {r["target"]: r for r in report.targets(GPU)}
    assert not any("two-launch bound" in t for t in got)
    assert not got["qwen3-30b-a3b, T=1…8: warp ≥ 85 %"]["met"]  # T=1's 84 % fails it
    assert got["qwen3-30b-a3b, T≥32: expert ≥ 85 %"]["met"]  # 86 % at 32 and 64
    auto = got["qwen3-30b-a3b, every T: auto within 3 % of the faster path"]
    assert not auto["met"] and "+3.1%" in auto["measured"]
    assert got["qwen3-30b-a3b, T=1…8: warp ≥ 85 %"]["bound"] == "read ceiling"
    assert "**no**" in report.targets_table(GPU) and "1 of 3 met" in report.targets_table(GPU)


def test_targets_name_auto_rows_from_another_gpu_state(results):
    """auto is timed in a later run than warp and expert; when that run's read ceiling differs by
    more than 1 % (another GPU of the same model, or another state), the auto target says so."""
    rows = [_layer("olmoe-1b-7b", T, m, 10.0, 0.9) for T in (1, 2) for m in ("warp", "expert", "auto")]
    data.merge_write(results / "speed.csv", rows)
    auto = {r["target"]: r for r in report.targets(GPU)}["olmoe-1b-7b, every T: auto within 3 % of the faster path"]
    assert auto["met"] and "ceilings differ" not in auto["measured"]  # one run
    data.merge_write(results / "speed.csv", [{**_layer("olmoe-1b-7b", 2, "auto", 10.0, 0.9), "ceiling_TBps": 2.05}])
    auto = {r["target"]: r for r in report.targets(GPU)}["olmoe-1b-7b, every T: auto within 3 % of the faster path"]
    assert "ceilings differ by 2.5%" in auto["measured"]


def test_results_caption_names_each_runs_ceiling(results):
    """The README results table: one ceiling named when its rows come from one run, each run's
    ceiling and date (with the methods measured in it) when they do not."""
    rows = [_layer("qwen3-30b-a3b", T, m, 10.0, 0.5) for T in (1, 8, 64) for m in ("warp", "expert")]
    data.merge_write(results / "speed.csv", rows)
    data.merge_write(results / "ceiling.csv", [{"read_TBps": 2.0, "copy_TBps": 1.0, **META}])
    assert "the measured read ceiling (2.00 TB/s)" in report.results_table(GPU)
    older = {**_layer("qwen3-30b-a3b", 1, "loop", 99.0, 0.1), "ceiling_TBps": 1.9, "date": "2025-12-31"}
    data.merge_write(results / "speed.csv", [older])
    caption = report.results_table(GPU)
    assert "warp, expert: 2.00 TB/s, 2026-01-01" in caption and "loop: 1.90 TB/s, 2025-12-31" in caption
    # one sweep, one process per preset: each measures its own ceiling; one day's runs are a range
    other = [{**_layer("olmoe-1b-7b", T, m, 10.0, 0.5), "ceiling_TBps": 2.01}
             for T in (1, 8) for m in ("warp", "expert")]
    data.merge_write(results / "speed.csv", other)
    caption = report.results_table(GPU)
    assert "warp, expert: 2.00–2.01 TB/s, 2026-01-01" in caption and caption.count("2026-01-01") == 1


def test_schedules_table_names_what_moe_warp_runs(tmp_path, monkeypatch):
    """The README's schedule table: per preset and bucket, the schedule warp.moe_warp picks from the
    tuned entry (fused, else grouped, else split) in bold with its time, the others it was weighed
    against after it; a preset without a tuned entry has no row."""
    import json

    from warpdecode.configs import shape_key
    from warpdecode.presets import get_preset

    s = get_preset("mixtral-8x7b")
    pair = {"gate_up": {}, "down": {}}
    table = {"warp": {shape_key(s.H, s.I, s.E, s.K): [
        [1, {**pair, "measured_us": {"split": 10.0, "fused": 12.0}}],
        [8, {**pair, "grouped": {"gate_up": {}}, "measured_us": {"split": 30.0, "grouped": 20.0}}],
        [16, {**pair, "measured_us": {"split": 40.0, "grouped": 39.9}}]]}}  # faster once, not kept
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps(table))
    monkeypatch.setattr(report, "tuned_path", lambda gpu, root=None: path)
    text = report.schedules_table(GPU)
    row = next(line for line in text.splitlines() if line.startswith("| mixtral-8x7b"))
    assert row == ("| mixtral-8x7b | **split** 10.0 (fused 12.0) | **grouped** 20.0 (split 30.0) "
                   "| **split** 40.0 (grouped 39.9) |")
    assert "| T ≤ 1 | T ≤ 8 | T ≤ 16 |" in text and "qwen3-30b-a3b" not in text
    path.write_text("{}")
    assert report.schedules_table(GPU) is None  # nothing to fill the README's block with: report leaves it


def test_one_launch_attempts_set_each_design_against_the_pair_of_its_own_runs(results, tmp_path, monkeypatch, drawn):
    """The one-launch figure's numbers: per design, its fastest candidate over the mean of the
    shipped pair's rows in the same CSV, the bar from that candidate's floor; rows of another T,
    another design's label, or a CSV without a pair row are left out; v4 from the tuned table."""
    import json

    from warpdecode.configs import shape_key
    from warpdecode.presets import get_preset

    def rows(preset, variants):
        return [{"preset": preset, "T": T, "variant": v, "us": us, "floor_us": 8.5, "frac_ceiling": 8.5 / us, **META}
                for T, v, us in variants]

    experiments = data.experiments_dir(GPU)
    data.merge_write(experiments / "expert_order.csv", rows("qwen3-30b-a3b", [
        (1, "shipped {'BLOCK_H': 8}", 10.0), (1, "one launch {'a': 1} (96 regs)", 12.0),
        (1, "one launch {'a': 2} (128 regs)", 11.0), (1, "shipped again", 12.0), (2, "one launch {'a': 2}", 9.0),
        (1, "two kernels {'a': 1}", 13.0), (1, "two kernels {'seg': 2}", 9.0),  # v16b, then v16c
        (1, "down alone: shipped {}", 5.0), (1, "down alone: {'seg': 2}", 6.0)])  # neither design nor pair
        + rows("olmoe-1b-7b", [(1, "one launch {'a': 1}", 14.0), (1, "shipped {}", 20.0)]))
    data.merge_write(experiments / "chunk_flags.csv", rows("qwen3-30b-a3b", [(1, "chunked {}", 30.0)]))  # no pair row
    s = get_preset("qwen3-30b-a3b")
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps({"warp": {shape_key(s.H, s.I, s.E, s.K): [
        [1, {"gate_up": {}, "down": {}, "measured_us": {"split": 5.0, "fused": 6.0}}]]}}))
    monkeypatch.setattr(report, "tuned_path", lambda gpu, root=None: path)
    got = {(r["preset"], r["version"]): r for r in report.one_launch_attempts(GPU)}
    assert set(got) == {("qwen3-30b-a3b", "v16"), ("qwen3-30b-a3b", "v16b"), ("qwen3-30b-a3b", "v16c"),
                        ("olmoe-1b-7b", "v16"), ("qwen3-30b-a3b", "v4")}
    assert (got[("qwen3-30b-a3b", "v16b")]["best_us"], got[("qwen3-30b-a3b", "v16c")]["best_us"]) == (13.0, 9.0)
    q = got[("qwen3-30b-a3b", "v16")]
    assert (q["best_us"], q["pair_us"], q["rows"]) == (11.0, 11.0, 2)
    assert q["bar_us"] == pytest.approx(8.5 / 0.85)
    assert got[("olmoe-1b-7b", "v16")]["best_us"] / got[("olmoe-1b-7b", "v16")]["pair_us"] == pytest.approx(0.7)
    v4 = got[("qwen3-30b-a3b", "v4")]
    assert (v4["best_us"], v4["pair_us"], v4["bar_us"]) == (6.0, 5.0, pytest.approx(1.0 / 0.85))  # speed.csv floor
    plots.one_launch_attempts(GPU, report.one_launch_attempts(GPU))
    (fig, name), = drawn
    assert name == "one_launch_attempts.png"
    widths = sorted(round(p.get_width(), 6) for ax in fig.axes for p in ax.patches)
    # olmoe v16; qwen3 v16c, v16, v16b, v4: time over the pair, minus 1
    assert widths == [-0.3, round(9 / 11 - 1, 6), 0.0, round(13 / 11 - 1, 6), 0.2]


def test_one_launch_bound_reads_the_latest_run(results):
    """The bound's table: the latest run that timed the read, or the kinds asked for (rows of other
    runs, and rows without a run, left out), per preset and kind the fastest program shape and how
    many were timed; rows of another T left out; [] without the CSV."""
    assert report.one_launch_bound(GPU) == []

    def row(kind, us, run, r=4, T=1):  # the experiments' schema: the program shape in config
        return {"experiment": "reads", "version": "bound", "variant": kind, "preset": "qwen3-30b-a3b", "T": T,
                "config": repr({"rows": r, "num_warps": 8, "programs": 10}), "us": us, "floor_us": 17.0,
                "frac_ceiling": 17.0 / us, "ceiling_TBps": 4.5, "detail": "{}", "run": run, **META}

    bounds = data.experiments_dir(GPU) / "one_launch_bound.csv"
    old = [{k: v for k, v in row("read", 5.0, "").items() if k != "run"}]  # before the run column
    data.merge_write(bounds, old)
    assert [r["us"] for r in report.one_launch_bound(GPU)] == [5.0]
    data.merge_write(bounds, [
        row("read", 18.0, "2026-11-30T10:00:00Z"), row("read", 19.5, "2026-11-30T18:00:00Z", r=2),
        row("read", 19.0, "2026-11-30T18:00:00Z"), row("read", 10.0, "2026-11-30T18:00:00Z", T=2),
        row("read + count", 20.5, "2026-11-30T18:00:00Z", r=24)])
    got = {r["kind"]: r for r in report.one_launch_bound(GPU)}
    assert set(got) == {"read", "read + count"}
    assert (got["read"]["us"], got["read"]["rows"], got["read"]["timed"]) == (19.0, 4, 2)
    assert got["read + count"]["frac"] == pytest.approx(17.0 / 20.5)
    # a later run of some kinds only: the default stays on the latest run with the read; asked for, those kinds
    data.merge_write(bounds, [row("read + count", 21.0, "2026-12-04T15:00:00Z")])
    assert {r["run"] for r in report.one_launch_bound(GPU)} == {"2026-11-30T18:00:00Z"}
    assert [r["us"] for r in report.one_launch_bound(GPU, kinds=("read + count",))] == [21.0]


def _bound_row(preset, kind, frac, run="2026-11-30T18:00:00Z", T=1):
    us = 17.0 / frac
    return {"experiment": "reads", "version": "bound", "variant": kind, "preset": preset, "T": T,
            "config": repr({"rows": 4, "num_warps": 8, "programs": 10}), "us": us, "floor_us": 17.0,
            "frac_ceiling": frac, "ceiling_TBps": 4.5, "detail": "{}", "run": run, **META}


HOLD, AFTER = report.LAYER_KINDS
BEFORE = "two launches, PDL, the second's loads before its wait"  # faster, but no layer can use it


def test_small_layers_at_one_token_are_held_to_the_two_launch_bound(results):
    """report.targets: a preset that one_launch_bound.csv measured is held at T = 1 to 85 % of the
    fastest kind of its latest run that a layer can use (two dependent launches), compared as
    fractions of each run's own read ceiling; the other presets, and T = 2…8, to the read ceiling."""
    rows = [_layer("qwen3-30b-a3b", 1, "warp", 10.0, 0.72), _layer("olmoe-1b-7b", 1, "warp", 10.0, 0.60),
            _layer("mixtral-8x7b", 1, "warp", 10.0, 0.90)]
    rows += [_layer(p, T, "warp", 10.0 * T, 0.9) for p in ("qwen3-30b-a3b", "olmoe-1b-7b", "mixtral-8x7b")
             for T in (2, 4, 8)]
    data.merge_write(results / "speed.csv", rows)
    bounds = data.experiments_dir(GPU) / "one_launch_bound.csv"
    assert bounds == results.parents[1] / "experiments" / "results" / "Test_GPU" / "one_launch_bound.csv"
    data.merge_write(bounds, [
        _bound_row("qwen3-30b-a3b", HOLD, 0.99, run="2026-11-30T10:00:00Z"),  # an older run: left out
        _bound_row("qwen3-30b-a3b", "read", 0.95), _bound_row("qwen3-30b-a3b", BEFORE, 0.90),
        _bound_row("qwen3-30b-a3b", HOLD, 0.80), _bound_row("qwen3-30b-a3b", AFTER, 0.78),
        _bound_row("qwen3-30b-a3b", HOLD, 0.50, T=2),  # another T: left out
        _bound_row("olmoe-1b-7b", AFTER, 0.75)])
    assert {p: b["kind"] for p, b in report.two_launch_bounds(GPU).items()} == {"qwen3-30b-a3b": HOLD,
                                                                                "olmoe-1b-7b": AFTER}
    got = {r["target"]: r for r in report.targets(GPU)}
    q = got["qwen3-30b-a3b, T=1: warp ≥ 85 % of the two-launch bound"]
    assert q["met"] and q["of_bound"] == pytest.approx(0.72 / 0.80) and q["measured"].startswith("90%")
    assert "two dependent launches" in q["bound"] and "80%" in q["bound"]
    o = got["olmoe-1b-7b, T=1: warp ≥ 85 % of the two-launch bound"]
    assert not o["met"] and o["of_bound"] == pytest.approx(0.60 / 0.75)
    for preset in ("qwen3-30b-a3b", "olmoe-1b-7b"):  # T = 1 left the ceiling's row
        assert f"{preset}, T=1…8: warp ≥ 85 %" not in got and got[f"{preset}, T=2…8: warp ≥ 85 %"]["met"]
    assert got["mixtral-8x7b, T=1…8: warp ≥ 85 %"]["met"]  # no bound measured: the ceiling at every T
    table = report.targets_table(GPU)
    assert "| target | measured against | measured (fraction of that bound) | met |" in table
    assert "`experiments/results/Test_GPU/one_launch_bound.csv`" in table and "4 of 5 met" in table

    # the bound above the bar's reach: the same warp row fails it
    data.merge_write(bounds, [_bound_row("qwen3-30b-a3b", HOLD, 0.86)])
    assert not {r["target"]: r for r in report.targets(GPU)}[q["target"]]["met"]  # 0.72 / 0.86 = 84 %


def test_experiment_csvs_are_read_from_the_experiments_folder(results):
    """An experiment's CSV is read from experiments/results/<GPU>/ of the checkout, never from the
    shipped benchmark data beside it."""
    data.merge_write(results / "one_launch_bound.csv", [_bound_row("qwen3-30b-a3b", HOLD, 0.80)])
    assert data.experiment_csv(GPU, "one_launch_bound.csv") == data.experiments_dir(GPU) / "one_launch_bound.csv"
    assert report.one_launch_bound(GPU, kinds=(HOLD,)) == []
    data.merge_write(data.experiments_dir(GPU) / "one_launch_bound.csv", [_bound_row("qwen3-30b-a3b", HOLD, 0.7)])
    assert [(r["frac"], r["source"]) for r in report.one_launch_bound(GPU, kinds=(HOLD,))] == [
        (0.7, "experiments/results/Test_GPU/one_launch_bound.csv")]


def test_headline_is_computed_from_the_csv(results):
    """The README's first result: warp against expert at T = 1 from speed.csv, and each path's median
    error over the floor from accuracy.csv."""
    data.merge_write(results / "speed.csv", [_layer("qwen3-30b-a3b", 1, "warp", 20.0, 0.75),
                                             _layer("qwen3-30b-a3b", 1, "expert", 25.0, 0.60)])
    data.merge_write(results / "accuracy.csv", [
        {"preset": p, "T": 1, "seed": 0, "method": m, "error_over_floor": v, **META}
        for p, m, v in [("a", "warp", 1.0), ("b", "warp", 1.02), ("c", "warp", 1.01),
                        ("a", "expert", 2.0), ("b", "expert", 3.0), ("c", "expert", 2.5)]])
    data.merge_write(results / "speed.csv", [_layer("olmoe-1b-7b", T, m, us, 0.5) for T, m, us in
                                             [(1, "warp", 10.0), (1, "expert", 12.0), (2, "warp", 13.0),
                                              (2, "expert", 12.0)]])
    line = report.headline(GPU)
    assert "takes 20.0 µs with warp decode and 25.0 µs on the tuned expert-centric path: 1.25× faster" in line
    assert "at 75% of the read bandwidth" in line
    assert "its error is 1.01× that of rounding the exact result once to bf16, the expert path's 2.50×" in line
    # the crossover: Qwen3-30B-A3B measured at T = 1 only, OLMoE's expert path ahead from T = 2
    assert "up to T = 1 on this layer, T = 1 on the 2 presets" in line


def test_tables_read_the_public_rows_beside_the_kernels_rows(results):
    """speed.csv as the sweep writes it: each public method's row (warpdecode.moe, with its commit and
    overhead) beside its bare kernels' row, after older rows without those columns. The README's
    tables and the crossover read the public rows; the kernels' rows are only a diagnostic."""
    public = [{**_layer("qwen3-30b-a3b", 1, m, us, 0.5), "overhead": 1.1, "commit": "abc1234"}
              for m, us in (("warp", 22.0), ("expert", 33.0))]
    bare = [{**_layer("qwen3-30b-a3b", 1, f"{m}_kernels", 1.0, 0.9), "overhead": "", "commit": "abc1234"}
            for m in ("warp", "expert")]
    data.merge_write(results / "speed.csv", public + bare)
    speed = data.speed_table(GPU)["qwen3-30b-a3b"]
    assert speed["warp"][1]["commit"] == "abc1234" and speed["warp"][4]["commit"] == ""  # T = 4: an older row
    table = report.results_table(GPU)
    assert "| qwen3-30b-a3b | 1 | 22.0 µs (50%) | 33.0 µs (50%) |" in table and "1.50×" in table
    assert "_kernels" not in table and "1.0 µs" not in table
    (evidence,) = report.crossover_table(GPU)["crossover_evidence"].values()
    assert evidence["1"] == {"warp_us": 22.0, "expert_us": 33.0}
