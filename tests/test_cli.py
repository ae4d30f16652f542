"""The command lines (``python -m warpdecode tune --shape``; the checkout's ``python -m bench``): on a GPU,
``bench`` and ``tune`` run each preset
in a process of its own (what one preset allocated changes another's timings), forwarding every
option they were given; without one, the options the CPU cannot honour say so; ``report`` names
what it writes and writes nothing without data; the checkout is found from the current directory
or ``--root``, never from the package's location; ``--help`` explains every option."""

from __future__ import annotations

import json
import subprocess
import sys

import torch

import bench.sweep  # noqa: F401  imported before a test pretends to have a GPU: its import reads the device
import warpdecode
from bench import __main__ as lab
from warpdecode import __main__ as cli
from warpdecode import _runtime


def _parse(argv: list[str]):
    """The options ``python -m bench <argv>`` would run with (the parser main() builds)."""
    seen = {}
    real = lab.cmd_bench

    def keep(args):
        seen["args"] = args

    lab.cmd_bench = keep
    try:
        lab.main(argv)
    finally:
        lab.cmd_bench = real
    return seen["args"]


def test_bench_on_a_gpu_runs_each_preset_in_its_own_process(monkeypatch):
    calls = []
    monkeypatch.setattr(_runtime, "DEFAULT_DEVICE", torch.device("cuda"))
    monkeypatch.setattr(subprocess, "run", lambda argv, check: calls.append(argv))
    given = ["bench", "--presets", "qwen3-30b-a3b", "mixtral-8x7b", "--T", "1", "8", "--methods", "warp", "expert",
             "--what", "speed", "--reps", "7", "--out", "/tmp/somewhere", "--root", "."]
    lab.main(given)
    assert [c[c.index("--presets") + 1] for c in calls] == ["qwen3-30b-a3b", "mixtral-8x7b"]
    for argv in calls:
        assert argv[:4] == [sys.executable, "-m", "bench", "bench"]
        child, parent = _parse(argv[3:]), _parse(given)
        assert child.in_process and not parent.in_process
        assert len(child.presets) == 1
        for opt in ("T", "stage_T", "methods", "what", "reps", "out", "root"):  # everything else is forwarded
            assert getattr(child, opt) == getattr(parent, opt), opt


class _InProcess(Exception):
    pass


def test_bench_with_one_preset_or_in_process_does_not_spawn(monkeypatch):
    import pytest

    from bench import timing

    monkeypatch.setattr(_runtime, "DEFAULT_DEVICE", torch.device("cuda"))
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: (_ for _ in ()).throw(AssertionError("spawned")))

    def measure(*a, **k):  # the first thing the in-process benchmark does
        raise _InProcess

    monkeypatch.setattr(timing, "read_ceiling", measure)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Test GPU")
    for argv in (["bench", "--presets", "mixtral-8x7b"],
                 ["bench", "--presets", "tiny", "mixtral-8x7b", "--in-process"]):
        with pytest.raises(_InProcess):
            lab.main(argv)


def test_generate_on_a_gpu_runs_each_implementation_in_processes_of_its_own(monkeypatch, tmp_path, capsys):
    """e2e --what generate with two implementations: a fresh process per implementation and round,
    alternating over --hf-repeats rounds, each measuring one implementation with one timed call, the
    first one's layer count forwarded to the others; the rows merge into one per implementation (the
    median over its processes, a failed process left out) and the speed-up comes from the medians;
    each process's rows are written as it ends. One implementation is measured in this process."""
    from pathlib import Path
    from types import SimpleNamespace

    import pytest

    from bench import data
    from bench import hf_generate as hg

    (tmp_path / "README.md").write_text("scratch\n")
    (tmp_path / "results").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(_runtime, "DEFAULT_DEVICE", torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Test GPU")
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(hg, "generate_speed", lambda **kw: pytest.fail("measured in the parent process"))
    tokens_per_s = {"grouped_mm": [100.0, 90.0, 110.0], "warpdecode": [150.0, 120.0, None]}  # None: the process fails
    children = []

    def run(argv, check):
        assert argv[:4] == [sys.executable, "-m", "bench", "e2e"]
        child = lab.build_parser().parse_args(argv[3:])
        children.append(child)
        (impl,) = child.hf_impls
        tps = tokens_per_s[impl].pop(0)
        if tps is None:
            return SimpleNamespace(returncode=1)
        rows = [{"model": "qwen3-30b-a3b shapes", "layers": child.hf_layers or 5, "batch": b, "impl": impl,
                 "compile": child.hf_compile, "cache": "static", "seconds": 1.0, "tokens_per_s": tps,
                 "step_us": 1e6 / tps, "first_call_s": 9.0, "moe_us": 400.0 if impl == "grouped_mm" else 200.0,
                 "moe_share": 0.0, "graphs_compiled": 1, "cudagraph_skips": 0, "gpu": "Test GPU"}
                for b in child.hf_batch]
        hg.save_rows(Path(child.hf_rows), rows, {(impl, b): torch.tensor([4, 5, 6]) for b in child.hf_batch})
        return SimpleNamespace(returncode=0)

    monkeypatch.setattr(subprocess, "run", run)
    lab.main(["e2e", "--what", "generate", "--hf-batch", "1", "--hf-new-tokens", "8"])
    assert [c.hf_impls for c in children] == [["grouped_mm"], ["warpdecode"]] * 3  # alternating, one each
    for c in children:
        assert c.what == ["generate"] and c.hf_models == ["qwen3-30b-a3b"] and c.hf_repeats == 1
        assert c.hf_batch == [1] and c.hf_new_tokens == 8 and c.hf_compile == "reduce-overhead" and c.hf_rows
    assert [c.hf_layers for c in children] == [None] + [5] * 5  # the first process fits them, the rest follow
    rows = {r["impl"]: r for r in data.read(data.gpu_dir("Test GPU") / "hf_generate.csv")}
    g, w = rows["grouped_mm"], rows["warpdecode"]
    assert (float(g["tokens_per_s"]), g["processes"]) == (100.0, "3")
    assert (float(w["tokens_per_s"]), w["processes"]) == (135.0, "2")  # the failed process left out
    assert float(w["speedup_over_grouped_mm"]) == 1.35 and float(w["same_tokens_as_grouped_mm"]) == 1.0
    assert float(w["amdahl_predicted"]) == pytest.approx(hg.amdahl(float(g["moe_share"]), 2.0), abs=5e-5)
    assert "ERROR generate warpdecode, round 3" in capsys.readouterr().out

    # a run cut short inside a round (the machine's limit) keeps the processes it finished
    (data.gpu_dir("Test GPU") / "hf_generate.csv").unlink()
    tokens_per_s.update(grouped_mm=[100.0], warpdecode=[KeyboardInterrupt])
    real_run = run

    def cut(argv, check):
        if tokens_per_s["warpdecode"][:1] == [KeyboardInterrupt] and "warpdecode" in argv:
            raise KeyboardInterrupt
        return real_run(argv, check)

    monkeypatch.setattr(subprocess, "run", cut)
    with pytest.raises(KeyboardInterrupt):
        lab.main(["e2e", "--what", "generate", "--hf-batch", "1", "--hf-repeats", "1"])
    rows = data.read(data.gpu_dir("Test GPU") / "hf_generate.csv")
    assert [(r["impl"], float(r["tokens_per_s"])) for r in rows] == [("grouped_mm", 100.0)]

    measured = []
    monkeypatch.setattr(hg, "generate_speed", lambda **kw: measured.append(kw["impls"]) or [])
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("spawned"))
    lab.main(["e2e", "--what", "generate", "--hf-impls", "warpdecode"])
    assert measured == [["warpdecode"]]


def test_tune_runs_each_preset_in_its_own_process(monkeypatch):
    from bench import persistent as tune  # python -m bench tune: the package tuner's steps and the persistent one

    calls = []
    monkeypatch.setattr(_runtime, "DEFAULT_DEVICE", torch.device("cuda"))
    monkeypatch.setattr(subprocess, "run", lambda argv, check: calls.append(argv))
    monkeypatch.setattr(tune, "tune", lambda *a, **k: (_ for _ in ()).throw(AssertionError("tuned in this process")))
    lab.main(["tune", "--presets", "olmoe-1b-7b", "gpt-oss-20b", "--paths", "warp", "fused"])
    assert [c[c.index("--presets") + 1:c.index("--presets") + 2] for c in calls] == [["olmoe-1b-7b"], ["gpt-oss-20b"]]
    assert all(c[:4] == [sys.executable, "-m", "bench", "tune"] and "--in-process" in c
               and c[c.index("--paths") + 1:] == ["warp", "fused"] for c in calls)
    # one preset, or --in-process: tuned right here
    seen = []
    monkeypatch.setattr(tune, "tune", lambda presets, paths: seen.append((presets, paths)))
    lab.main(["tune", "--presets", "olmoe-1b-7b"])
    lab.main(["tune", "--presets", "olmoe-1b-7b", "gpt-oss-20b", "--in-process", "--paths", "expert"])
    assert seen == [(["olmoe-1b-7b"], ["warp", "fused", "grouped", "expert", "expert_swap"]),
                    (["olmoe-1b-7b", "gpt-oss-20b"], ["expert"])]
    assert len(calls) == 2



def test_bench_tune_times_the_persistent_schedule_between_the_pair_and_the_rest(monkeypatch, tmp_path):
    """``python -m bench tune --paths ... fused``: the package tuner's ``warp`` step, then the persistent
    schedule against the pair it wrote (its buckets merged into the table), then the other steps."""
    import pytest

    from bench import persistent
    from warpdecode import configs, tuner
    from warpdecode.presets import get_preset

    s = get_preset("olmoe-1b-7b")
    key = configs.shape_key(s.H, s.I, s.E, s.K)
    tile = {"BLOCK_I": 2, "BLOCK_H": 512, "num_warps": 2, "num_stages": 1}
    path, steps = tmp_path / "tuned.json", []

    def package_tune(shapes, paths, path):
        steps.append(list(paths))
        if "warp" in paths:
            configs.update_table(path, lambda current: {"warp": {key: [[1, {"gate_up": tile, "down": tile}]]}})

    def tune_fused(shape, buckets, **kw):
        steps.append(["fused"])
        return [[T, {**cfg, "fused": persistent.default_fused(s.H, s.I, s.K)}] for T, cfg in buckets]

    monkeypatch.setattr(tuner, "tune", package_tune)
    monkeypatch.setattr(persistent, "warm", lambda shapes, log=print: {})
    monkeypatch.setattr(persistent, "tune_fused", tune_fused)
    persistent.tune(["olmoe-1b-7b"], paths=persistent.PATHS, path=path, log=lambda *a: None)
    assert steps == [["warp"], ["fused"], ["grouped", "expert", "expert_swap"]]
    (T, cfg), = configs.read_table(path)["warp"][key]
    assert persistent.check_fused(cfg["fused"]) and cfg["gate_up"] == tile
    with pytest.raises(ValueError, match="tune olmoe-1b-7b with 'warp' first"):
        persistent.tune(["olmoe-1b-7b"], paths=["fused"], path=tmp_path / "empty.json", log=lambda *a: None)

def test_bench_tune_with_fp8_weights_tunes_the_expert_path_and_crossover_on_them(monkeypatch):
    """``python -m bench tune --weights`` hands the package tuner the format, its expert steps of
    ``--paths`` and the crossover; each preset's process gets the option too."""
    import bench.__main__ as bm
    from warpdecode import tuner

    calls, argvs = [], []
    monkeypatch.setattr(bm, "on_gpu", lambda: True)
    monkeypatch.setattr(tuner, "tune", lambda presets, **kw: calls.append((presets, kw)))
    lab.main(["tune", "--presets", "olmoe-1b-7b", "--in-process", "--weights", "mxfp8"])
    assert calls == [(["olmoe-1b-7b"], {"paths": ["expert", "expert_swap"], "crossover": True, "weights": "mxfp8"})]
    monkeypatch.setattr(bm, "each_in_own_process", lambda argv, args, presets: argvs.extend(
        argv(args, p) for p in presets))
    lab.main(["tune", "--presets", "olmoe-1b-7b", "qwen3-30b-a3b", "--weights", "block128"])
    assert len(argvs) == 2 and all(a[-2:] == ["--weights", "block128"] for a in argvs)


def test_the_installed_tune_without_shape_points_the_presets_at_bench(monkeypatch):
    """The shipped table is tuned from a checkout: ``python -m warpdecode tune`` without ``--shape``
    (with the presets' options or none) says to run ``python -m bench tune`` and tunes nothing."""
    import pytest

    from warpdecode import tuner as tune

    monkeypatch.setattr(_runtime, "DEFAULT_DEVICE", torch.device("cuda"))
    monkeypatch.setattr(tune, "tune", lambda *a, **k: pytest.fail("tuned"))
    for argv in (["tune"], ["tune", "--presets", "olmoe-1b-7b"], ["tune", "--paths", "warp", "--in-process"]):
        with pytest.raises(SystemExit) as e:
            cli.main(argv)
        assert e.value.code == cli.TUNE_PRESETS and "`python -m bench tune` from its root" in e.value.code
    with pytest.raises(SystemExit) as e:  # an option tune --shape does not take is refused, not dropped
        cli.main(["tune", "--shape", "1", "2", "3", "1", "--presets", "olmoe-1b-7b"])
    assert e.value.code == 2


def test_tune_shape_on_a_gpu_tunes_that_shape_here_with_its_options(monkeypatch):
    import pytest

    from warpdecode import tuner as tune

    seen = []
    monkeypatch.setattr(_runtime, "DEFAULT_DEVICE", torch.device("cuda"))
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("spawned"))
    monkeypatch.setattr(tune, "tune", lambda *a, **k: pytest.fail("tune --shape went to the presets' tuner"))
    monkeypatch.setattr(tune, "tune_shape", lambda *shape, **k: seen.append((shape, k)))
    cli.main(["tune", "--shape", "5120", "1408", "60", "6", "--T", "1", "4", "--dtype", "fp16", "--paths", "warp",
              "expert"])
    cli.main(["tune", "--shape", "4096", "1536", "128", "8"])
    cli.main(["tune", "--shape", "2048", "768", "128", "8", "--weights", "mxfp8"])
    every = {"dtype": "bf16", "Ts": None, "paths": list(tune.PATHS)}
    assert seen == [((5120, 1408, 60, 6), {"dtype": "fp16", "Ts": [1, 4], "paths": ["warp", "expert"],
                                           "weights": None}),
                    ((4096, 1536, 128, 8), {**every, "weights": None}),
                    ((2048, 768, 128, 8), {**every, "weights": "mxfp8"})]
    assert cli.FORMATS == list(warpdecode.quant.FORMATS)


def test_tune_shape_on_the_cpu_says_what_is_missing_and_writes_nothing(monkeypatch, tmp_path):
    import pytest

    from warpdecode import tuner as tune

    if _runtime.DEFAULT_DEVICE.type == "cuda":
        pytest.skip("checks the error raised where no CUDA GPU is")
    monkeypatch.setenv("WARPDECODE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tune, "tune", lambda *a, **k: pytest.fail("tuned without a GPU"))
    with pytest.raises(SystemExit) as e:
        cli.main(["tune", "--shape", "5120", "1408", "60", "6"])
    assert str(e.value).startswith("tune: tune --shape needs a CUDA GPU")
    assert "torch.cuda.is_available() is False" in str(e.value) and "Nothing was written" in str(e.value)
    assert list(tmp_path.iterdir()) == []


def test_retuning_the_pair_keeps_the_schedules_that_still_win(monkeypatch, tmp_path):
    """``tune --paths warp`` alone must not drop the buckets' ``grouped`` and ``fused`` entries
    (OLMoE's grouped schedule at T = 8 and 16 would go with them): a schedule is kept where it
    measured at least 1 % below the new pair, dropped where the new pair beats it, and left to its
    own tuner when that path runs too."""
    from warpdecode import tuner as tune
    from warpdecode.configs import shape_key
    from warpdecode.presets import get_preset

    shape = get_preset("olmoe-1b-7b")
    key = shape_key(shape.H, shape.I, shape.E, shape.K)
    g = [{"BLOCK_I": rows, "BLOCK_H": 1024, "num_warps": 1, "num_stages": 1} for rows in (1, 2)]  # old, new
    d = [{"BLOCK_H": rows, "BLOCK_I": 256, "num_warps": 4, "num_stages": 1} for rows in (4, 8)]
    grouped = {"gate_up": {"BLOCK_I": 64, "BLOCK_H": 128, "num_warps": 4, "num_stages": 3}, "down": {}}
    old = [[1, {"gate_up": g[0], "down": d[0], "measured_us": {"split": 28.4, "fused": 35.2}}],
           [8, {"gate_up": g[0], "down": d[0], "grouped": grouped,
                "measured_us": {"split": 141.4, "grouped": 127.9, "fused": 182.0}}],
           [16, {"gate_up": g[0], "down": d[0], "grouped": grouped,
                 "measured_us": {"split": 248.6, "grouped": 177.8}}]]
    new = [[1, {"gate_up": g[1], "down": d[1], "measured_us": {"split": 28.0}}],
           [8, {"gate_up": g[1], "down": d[1], "measured_us": {"split": 141.6}}],
           [16, {"gate_up": g[1], "down": d[1], "measured_us": {"split": 178.0}}]]
    gemm = {"BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 1, "num_warps": 4, "num_stages": 3}
    untouched = [[256, {"BLOCK_M": 16, "gate_up": gemm, "down": gemm}]]
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps({"warp": {key: old}, "expert": {key: untouched}}))
    monkeypatch.setattr(tune, "tuned_file", lambda: path)
    monkeypatch.setattr(tune, "warm_all", lambda *a, **k: {})
    monkeypatch.setattr(tune, "tune_warp", lambda shape, **k: json.loads(json.dumps(new)))
    table = tune.tune(["olmoe-1b-7b"], paths=("warp",), log=lambda *a: None)
    assert json.loads(path.read_text()) == table
    got = dict((T, cfg) for T, cfg in table["warp"][key])
    assert table["expert"][key] == untouched
    assert got[1] == {"gate_up": g[1], "down": d[1], "measured_us": {"split": 28.0, "fused": 35.2}}
    assert got[8]["grouped"] == grouped and got[8]["gate_up"] == g[1]  # 127.9 < 0.99 x 141.6
    assert got[8]["measured_us"] == {"split": 141.6, "grouped": 127.9, "fused": 182.0}
    assert "grouped" not in got[16]  # 177.8 is not 1 % below the new pair's 178.0
    # a schedule that is re-tuned in the same run is left to its own tuner
    kept = tune.keep_schedules(old, new, retuned=["grouped"])
    assert all("grouped" not in cfg and "grouped" not in cfg["measured_us"] for _, cfg in kept)


def test_expert_swap_keeps_a_form_only_where_it_is_one_percent_faster(monkeypatch):
    """``tune --paths expert_swap``: each bucket's tuned tiles against SWAP_AB on either GEMM or both, each also
    with W_TMA (the weight tiles by TMA) where the boxes tile the weights, timed in two alternated rounds; the
    fastest form replaces the tuned one only where it is ≥ 1 % faster in both rounds (not where one round's noise
    says so), and a form that does not launch (out of shared memory: ``_time`` gives None) is passed over; a
    shape whose tiles TMA boxes cannot tile gets no W_TMA form."""
    from types import SimpleNamespace

    from warpdecode import tuner as tune

    tile = {"BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 1, "num_warps": 4, "num_stages": 3}
    buckets = [[T, {"BLOCK_M": 16, "gate_up": dict(tile), "down": dict(tile, SWAP_AB=True, W_TMA=True)}]
               for T in (1, 8, 32, 128)]
    speeds = {1: {(): 100.0, ("gate_up",): 99.5, ("down",): 97.0, ("gate_up", "down"): 98.0},  # swap down
              8: {(): 100.0, ("gate_up",): 99.5, ("down",): None, ("gate_up", "down"): 101.0},  # under 1 %: tma
              32: {(): 100.0, ("gate_up",): 95.0, ("down",): None, ("gate_up", "down"): None},  # swap gate/up
              # round 1: swapping gate/up 2 % faster, round 2: plain faster: plain
              128: {(): [100.0, 96.0], ("gate_up",): [98.0, 98.0], ("down",): 100.0, ("gate_up", "down"): 101.0}}
    seen, calls = {}, {}

    def fake_time(step, reps):
        cfg, T = step()
        form = tuple(g for g in ("gate_up", "down") if cfg[g].get("SWAP_AB"))
        tma = tuple(g for g in ("gate_up", "down") if cfg[g].get("W_TMA"))
        assert tma in ((), ("gate_up", "down")), tma
        calls[(T, form, tma)] = calls.get((T, form, tma), 0) + 1
        t = speeds[T][form]
        t = t[calls[(T, form, tma)] - 1] if isinstance(t, list) else t
        return None if t is None else t - 3.0 if (T, form, tma) == (8, (), ("gate_up", "down")) else t + 1.0 * bool(tma)

    monkeypatch.setattr(tune, "num_copies", lambda shape: 1)
    monkeypatch.setattr(tune, "make_layers", lambda shape, L, **k: [(None, None)])
    monkeypatch.setattr(tune, "make_inputs", lambda shape, T, L, seed, **k: [SimpleNamespace(
        x=T, topk_weights=None, topk_ids=None)])
    monkeypatch.setattr(tune, "_over_layers", lambda fn, xs, *cols: lambda: (fn.keywords["config"], xs[0]))
    monkeypatch.setattr(tune, "_time", fake_time)
    out = dict(tune.tune_expert_swap(warpdecode.get_preset("olmoe-1b-7b"), buckets, log=lambda m: seen.setdefault(
        "log", []).append(m)))
    assert out[1]["down"].get("SWAP_AB") and not out[1]["gate_up"].get("SWAP_AB")
    assert out[8]["gate_up"].get("W_TMA") and out[8]["down"].get("W_TMA")  # plain tiles, weights by TMA
    assert not out[8]["down"].get("SWAP_AB") and not out[8]["gate_up"].get("SWAP_AB")  # the old flag is gone too
    assert out[32]["gate_up"].get("SWAP_AB") and not out[32]["down"].get("SWAP_AB")
    assert not out[128]["gate_up"].get("SWAP_AB") and not out[128]["down"].get("SWAP_AB")
    assert not any(out[T][g].get("W_TMA") for T in (1, 32, 128) for g in ("gate_up", "down"))  # the old flag too
    assert all(cfg["BLOCK_M"] == 16 and cfg["gate_up"]["BLOCK_N"] == 64 for cfg in out.values())
    assert set(calls.values()) == {2} and len(calls) == 4 * 8  # every form timed once per round, with and without
    assert seen["log"][-1].endswith("plain 100.00/96.00 us; swap gate/up 98.00/98.00 us; swap down 100.00/100.00 us; "
                                    "swap both 101.00/101.00 us; plain + tma 101.00/97.00 us; swap gate/up + tma "
                                    "99.00/99.00 us; swap down + tma 101.00/101.00 us; swap both + tma 102.00/102.00 us"
                                    " -> plain")
    calls.clear()  # I = 1000: a 64-column box does not tile the gate rows, so no form asks for TMA
    odd = warpdecode.MoEShape("odd", H=2048, I=1000, E=64, K=8)
    tune.tune_expert_swap(odd, buckets[:1], log=lambda m: None)
    assert len(calls) == 4 and all(tma == () for _, _, tma in calls)


# ---------------------------------------------------------------------------------------------
# the checkout: found from the current directory, or named with --root; never the package's own


def _checkout(path):
    (path / "results").mkdir(parents=True)
    (path / "README.md").write_text("a checkout\n")
    return path


def test_the_checkout_is_found_from_the_current_directory(tmp_path, monkeypatch):
    import pytest

    from bench import data

    root = _checkout(tmp_path / "clone")
    (root / "notebooks").mkdir()
    monkeypatch.chdir(root / "notebooks")  # where the notebooks run
    assert data.checkout() == root.resolve()
    assert data.gpu_dir("NVIDIA H200") == root.resolve() / "results" / "NVIDIA_H200"
    assert data.checkout(root) == root.resolve()
    monkeypatch.chdir(tmp_path)  # above the checkout: nothing here holds README.md and results/
    with pytest.raises(data.NoCheckout, match="README.md and results/.*--root"):
        data.checkout()
    with pytest.raises(data.NoCheckout, match="not a warpdecode checkout"):
        data.checkout(tmp_path)
    # an installed package has no checkout around it: the readers do not look there
    assert not any(hasattr(data, name) for name in ("REPO", "RESULTS", "FIGURES"))


def test_bench_out_of_a_checkout_fails_before_measuring(tmp_path, monkeypatch, capsys):
    import pytest

    from bench import timing

    monkeypatch.setattr(_runtime, "DEFAULT_DEVICE", torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Test GPU")
    monkeypatch.setattr(timing, "read_ceiling", lambda *a: (_ for _ in ()).throw(AssertionError("measured")))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match="run this from a warpdecode checkout or pass --root"):
        lab.main(["bench", "--presets", "tiny"])


# ---------------------------------------------------------------------------------------------
# report: says what it writes, and writes nothing without data

README = """# scratch
<!-- results:start -->
old results
<!-- results:end -->
text between
<!-- accuracy:start -->
old accuracy
<!-- accuracy:end -->
<!-- targets:start -->
old targets
<!-- targets:end -->
<!-- schedules:start -->
old schedules
<!-- schedules:end -->
"""
H200 = "NVIDIA H200"


def _report_checkout(tmp_path, with_data=True):
    """A scratch checkout with the README's blocks and, if asked, the H200's shipped CSV."""
    import shutil
    from pathlib import Path

    root = _checkout(tmp_path / "clone")
    (root / "README.md").write_text(README)
    if with_data:
        here = Path(__file__).resolve().parents[1] / "results" / "NVIDIA_H200"
        (root / "results" / "NVIDIA_H200").mkdir()
        for name in ("speed.csv", "accuracy.csv", "ceiling.csv", "stages.csv"):
            shutil.copy(here / name, root / "results" / "NVIDIA_H200" / name)
    return root


def _snapshot(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _stub_figures(monkeypatch, fail=False):
    """report.figures, cheap: one small file per call in the folder it is given."""
    from bench import report

    def draw(gpu, *, root=None, out=None):
        if fail:
            raise RuntimeError("a figure failed")
        path = out / "headline.png"
        path.write_bytes(b"\x89PNG fake")
        return [path]

    monkeypatch.setattr(report, "figures", draw)


def test_report_without_data_changes_nothing(tmp_path, monkeypatch):
    import pytest

    root = _report_checkout(tmp_path, with_data=False)
    before = _snapshot(root)
    with pytest.raises(SystemExit) as e:
        lab.main(["report", "--root", str(root), "--gpu", H200])
    assert e.value.code not in (0, None)
    assert "no benchmark data for 'NVIDIA H200'" in str(e.value.code) and "Nothing was written" in str(e.value.code)
    with pytest.raises(SystemExit, match="speed.csv"):
        lab.main(["report", "--root", str(root), "--gpu", H200, "--only", "crossover"])
    # data for one GPU, asked for another: names the one it has
    _report_checkout(tmp_path / "other")
    with pytest.raises(SystemExit, match="results for: 'NVIDIA H200'"):
        lab.main(["report", "--root", str(tmp_path / "other" / "clone"), "--gpu", "NVIDIA B200"])
    assert _snapshot(root) == before


def test_report_writes_nothing_when_a_part_fails(tmp_path, monkeypatch):
    import pytest

    root = _report_checkout(tmp_path)
    before = _snapshot(root)
    _stub_figures(monkeypatch, fail=True)
    with pytest.raises(RuntimeError, match="a figure failed"):
        lab.main(["report", "--root", str(root), "--gpu", H200])
    assert _snapshot(root) == before  # the README's blocks were computed, not written


def test_report_names_each_file_and_block_it_writes(tmp_path, monkeypatch, capsys):
    import json

    root = _report_checkout(tmp_path)
    _stub_figures(monkeypatch)
    monkeypatch.chdir(tmp_path)  # --root, not the current directory, says where
    lab.main(["report", "--root", str(root), "--gpu", H200, "--dry-run"])
    said = capsys.readouterr().out
    assert "would write README.md" in said and (root / "README.md").read_text() == README
    assert not (root / "figures").exists() and not (root / "warpdecode").exists()

    lab.main(["report", "--root", str(root), "--gpu", H200])
    said = capsys.readouterr().out
    text = (root / "README.md").read_text()
    for block in ("results", "accuracy", "targets"):
        assert f"old {block}" not in text and f"block {block}: from results/NVIDIA_H200/" in said
    assert "| qwen3-30b-a3b | 1 |" in text and "text between" in text
    assert "old schedules" in text and "block schedules: nothing to fill it with" in said  # no tuned table here
    tuned = root / "warpdecode" / "tuned" / "NVIDIA_H200.json"
    assert "wrote warpdecode/tuned/NVIDIA_H200.json: the auto crossover" in said
    assert json.loads(tuned.read_text())["crossover"]["H=2048,I=768,E=128,K=8"] >= 1
    assert "wrote figures/headline.png" in said and (root / "figures" / "headline.png").exists()
    assert "wrote README.md: README.md's generated blocks" in said
    # a second run finds nothing to change and says so
    lab.main(["report", "--root", str(root), "--gpu", H200])
    said = capsys.readouterr().out
    assert "wrote" not in said and said.count("unchanged") == 3


def test_report_generate_table_takes_each_model_and_batch_at_its_deepest_run(tmp_path):
    """hf_generate.csv's compiled rows: per model and batch the run with the most layers, its two
    implementations' rows side by side, with the no-experts bound of the same commit and how the run
    was made; eager rows, runs without a grouped_mm row and runs of both in one process left out."""
    import csv

    from bench import data, report

    root = _report_checkout(tmp_path)
    assert report.generate_table(H200, root) is None  # no generate data: the block stays as it is
    columns = ["model", "layers", "batch", "impl", "compile", "tokens_per_s", "moe_share", "speedup_over_grouped_mm",
               "amdahl_predicted", "gpu", "torch", "triton", "transformers", "processes", "commit"]
    rows = []
    runs = [(8, 1, "reduce-overhead", 300.0, 400.0), (48, 1, "reduce-overhead", 80.0, 104.0),
            (48, 1, "none", 10.0, 99.0), (48, 4, "reduce-overhead", 200.0, 330.0)]
    for layers, batch, compile_, g_tps, w_tps in runs:
        for impl, tps in (("grouped_mm", g_tps), ("warpdecode", w_tps)):
            rows.append({"model": "qwen3-30b-a3b shapes", "layers": layers, "batch": batch, "impl": impl,
                         "compile": compile_, "tokens_per_s": tps, "moe_share": 0.4 if impl == "grouped_mm" else 0.2,
                         "speedup_over_grouped_mm": f"{w_tps / g_tps:.4f}" if impl == "warpdecode" else "",
                         "amdahl_predicted": "1.3000" if impl == "warpdecode" else "", "gpu": H200,
                         "torch": "2.11", "triton": "3.6", "transformers": "5.17",
                         **({"processes": 2, "commit": "abc1234"} if batch == 4 else {})})
    # the bound: the same run's step with no expert work, and one of another commit, which is not this run's
    for commit, tps in (("abc1234", 800.0), ("0ld0000", 900.0)):
        rows.append({**rows[-1], "impl": "no_experts", "tokens_per_s": tps, "speedup_over_grouped_mm": "",
                     "commit": commit})
    with (data.gpu_dir(H200, root) / "hf_generate.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        w.writerows(rows)
    table = report.generate_table(H200, root)
    body = [line for line in table.splitlines() if line.startswith("| qwen3")]
    assert body == ["| qwen3-30b-a3b | 48 | 4 | 330.0 | 200.0 | 1.65× | 1.30× | 40% | 800.0 (4.00×) | "
                    "one per implementation, 2 each | abc1234 |"]  # batch 1: both in one process
    assert "results/NVIDIA_H200/hf_generate.csv" in table


def test_report_vllm_block_compares_each_layer_and_marks_the_t1_bar(tmp_path):
    """vllm_baseline.csv: vLLM's time over auto's per weights, release, layer and T; at T = 1 warp
    decode against vLLM (the bar only on its layers) and the two-launch bound; the headline's
    sentence names the least ratio of auto on the lowest release, at three digits."""
    import csv

    from bench import data, report

    root = _report_checkout(tmp_path)
    assert report.vllm_table(H200, root) is None and report.vllm_sentence(H200, root) == ""
    folder = data.experiments_dir(H200, root)
    folder.mkdir(parents=True)
    rows = []
    for triton, layer, T, vllm, auto, warp in [("3.6.0", "olmoe-1b-7b", 1, 36.0, 30.0, 30.0),
                                               ("3.6.0", "olmoe-1b-7b", 8, 100.0, 100.1, 120.0),
                                               ("3.6.0", "phi-3.5-moe", 1, 90.0, 75.0, 75.0),
                                               ("3.9.0", "olmoe-1b-7b", 1, 36.0, 27.0, 27.0)]:
        for variant, us in (("vllm", vllm), ("auto", auto), ("warp", warp)):
            rows.append({"experiment": "vllm_baseline", "version": "bf16", "variant": variant, "preset": layer,
                         "T": T, "us": us, "frac_ceiling": 0.9, "error_over_floor": 2.5 if variant == "vllm" else 1.0,
                         "detail": "{'vllm': '0.34.0'}" if variant == "vllm" else "{}", "gpu": H200,
                         "torch": "2.11", "triton": triton, "commit": "abc1234"})
    with (folder / "vllm_baseline.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    table = report.vllm_table(H200, root)
    assert "| bf16 | 3.6.0 | olmoe-1b-7b | 1.20 | 1.00 |" in table  # 100 / 100.1, two digits in the table
    assert "| 3.6.0 | olmoe-1b-7b | 36.00 | 30.00 | 1.20× (missed) | — | — | — |" in table  # no bound measured
    assert "| 3.9.0 | olmoe-1b-7b | 36.00 | 27.00 | 1.33× (met) |" in table
    assert "| 3.6.0 | phi-3.5-moe | 90.00 | 75.00 | 1.20× (no bar) |" in table
    assert "vllm (bf16) 2.50" in table and "commit abc1234" in table
    said = report.vllm_sentence(H200, root, preset="olmoe-1b-7b")
    assert "30.0 µs to vLLM's 36.0 (1.20×)" in said and "at least 0.999×" in said and "olmoe-1b-7b, T = 8" in said
    assert "triton 3.6.0" in said and "1 preset and 1 other layer" in said


def test_report_fp8_bound_block_sets_the_pair_against_its_no_math_launches_and_vllm(tmp_path):
    """fp8_bound.csv: per layer and T the FP8 pair over its no-math launches, beside vLLM's latest w8a8 row of
    the same layer and T; a later row of a (layer, T, variant) replaces an earlier one; no vLLM row: dashes."""
    import csv

    from bench import data, report

    root = _report_checkout(tmp_path)
    assert report.fp8_bound_table(H200, root) is None
    folder = data.experiments_dir(H200, root)
    folder.mkdir(parents=True)

    def write(name, rows):
        with (folder / name).open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)

    meta = {"gpu": H200, "torch": "2.11", "triton": "3.6.0"}
    write("fp8_bound.csv", [{"preset": p, "T": T, "variant": v, "us": us, **meta} for p, T, v, us in [
        ("qwen3-30b-a3b", 4, "fp8 pair (default)", 60.0), ("qwen3-30b-a3b", 4, "fp8 pair (default)", 50.0),
        ("qwen3-30b-a3b", 4, "no math, same launches", 40.0), ("qwen3-30b-a3b", 4, "read of the FP8 bytes", 38.0),
        ("olmoe-1b-7b", 1, "fp8 pair (default)", 22.0), ("olmoe-1b-7b", 1, "no math, same launches", 20.0)]])
    write("vllm_baseline.csv", [{"version": "fp8", "variant": "vllm w8a8", "preset": "qwen3-30b-a3b", "T": T,
                                 "us": us, "frac_ceiling": 0.8, "error_over_floor": 26.0, "detail": "{}",
                                 "commit": "abc1234", **meta} for T, us in [(4, 70.0), (4, 55.0), (8, 80.0)]])
    table = report.fp8_bound_table(H200, root)
    assert "| qwen3-30b-a3b | 4 | 50.0 | 40.0 | 1.25× | 38.0 | 55.0 | 1.10 | 1.38 |" in table
    assert "| olmoe-1b-7b | 1 | 22.0 | 20.0 | 1.10× | — | — | — | — |" in table
    assert "| 8 |" not in table  # vLLM alone: no pair row


def test_report_fp8_expert_bound_block_sets_the_expert_path_against_its_no_math_launches(tmp_path):
    """vllm_baseline.csv's FP8 cells with ``expert no math`` (every GPU's): auto, the expert path and vLLM over them;
    cells without the bound are left out, a later row replaces an earlier one, and the bound's blank error does
    not enter the vLLM block's error medians."""
    import csv

    from bench import data, report

    root = _report_checkout(tmp_path)
    assert report.fp8_expert_bound_table(root) is None
    folder = data.experiments_dir(H200, root)
    folder.mkdir(parents=True)
    meta = {"gpu": H200, "torch": "2.11", "triton": "3.6.0", "frac_ceiling": 0.5, "commit": "abc1234"}
    rows = [{"version": "fp8", "variant": v, "preset": p, "T": T, "us": us, "error_over_floor": err,
             "detail": detail, **meta} for p, T, v, us, err, detail in [
        ("olmoe-1b-7b", 256, "vllm w8a8", 140.0, 26.0, "{'vllm': '0.34.0'}"),
        ("olmoe-1b-7b", 256, "auto", 300.0, 2.9, "{'method': 'expert'}"),
        ("olmoe-1b-7b", 256, "auto", 200.0, 2.9, "{'method': 'expert'}"),
        ("olmoe-1b-7b", 256, "expert", 201.0, 2.9, "{'method': 'expert'}"),
        ("olmoe-1b-7b", 256, "expert no math", 160.0, "", ""),
        ("olmoe-1b-7b", 256, "expert tma", 204.0, 2.9, ""),
        ("olmoe-1b-7b", 4, "vllm w8a8", 40.0, 26.0, "{'vllm': '0.34.0'}"),
        ("olmoe-1b-7b", 4, "auto", 30.0, 1.0, "{'method': 'warp'}")]]
    with (folder / "vllm_baseline.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    table = report.fp8_expert_bound_table(root)
    assert ("| NVIDIA H200 | 3.6.0 | olmoe-1b-7b | 256 | 200.0 (expert) | 201.0 | 160.0 | 1.26× | 204.0 | 140.0 | 0.70 "
            "| 0.88 |" in table)
    assert "| 4 |" not in table
    assert "expert no math (fp8)" not in report.vllm_table(H200, root)


def test_report_defaults_table_takes_each_releases_worst_row(tmp_path):
    """Per defaults report, the worst row of each figure with where it is: a rerun file's rows replace
    the first file's, auto is over the faster of its two paths with the same tables, and an expert
    share under the bar names that row's no-math bound."""
    import csv

    from bench import data, report

    root = _report_checkout(tmp_path)
    assert report.defaults_table(H200, root) is None  # no defaults report: the block stays as it is
    folder = data.experiments_dir(H200, root)
    folder.mkdir(parents=True)

    def write(name, rows):
        with (folder / name).open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["preset", "T", "method", "tables", "median_us", "frac_ceiling", "gpu",
                                              "torch", "triton"])
            w.writeheader()
            w.writerows(rows)

    def rows(preset, T, tuned, off, frac, triton="3.6.0"):  # tuned, off: (warp, expert, auto) µs
        return [{"preset": preset, "T": T, "method": m, "tables": tables, "median_us": us, "frac_ceiling": frac,
                 "gpu": H200, "torch": "2.11", "triton": triton}
                for tables, times in (("tuned", tuned), ("off", off))
                for m, us in zip(("warp", "expert", "auto"), times, strict=True)]

    write("defaults.csv", rows("a", 1, (10, 20, 10), (12, 20, 12.6), 0.9)
          + rows("a", 256, (50, 40, 44), (50, 40, 44), 0.8))
    write("defaults_t256.csv", rows("a", 256, (50, 40, 40.4), (50, 42, 42), 0.86))  # the rerun replaces T = 256
    write("defaults_triton38_tuned.csv", rows("b", 32, (30, 20, 20.2), (30, 20, 20.2), 0.84, triton="3.8.0"))
    with (folder / "expert_bound.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["preset", "T", "variant", "frac_ceiling", "triton"])
        w.writeheader()
        w.writerow({"preset": "b", "T": 32, "variant": "no math default", "frac_ceiling": 0.83, "triton": "3.6.0"})
    lines = [line for line in report.defaults_table(H200, root).splitlines() if line.startswith("| 3.")]
    assert lines == [
        "| 3.6.0 | 1 | 1…256 | 1.200× (a T = 1) | 1.050× (a T = 256) | 86.0 % (a T = 256) | 1.050× (a T = 1) | "
        "1.010× (a T = 256) |",
        "| 3.8.0 | 1 | 32…32 | 1.000× (b T = 32) | 1.000× (b T = 32) | 84.0 % (b T = 32); its launches with no math: "
        "83.0 % (Triton 3.6.0, `expert_bound.csv`) | 1.010× (b T = 32) | 1.010× (b T = 32) |"]


# ---------------------------------------------------------------------------------------------
# options the CPU cannot honour say so


def _cpu(monkeypatch):
    """This process as one without a GPU; the sweeps stubbed (they are tested elsewhere)."""
    from bench import e2e, sweep

    monkeypatch.setattr(_runtime, "DEFAULT_DEVICE", torch.device("cpu"))
    ran = {}

    def accuracy(shapes, Ts, methods, **kw):
        ran["accuracy"] = ([s.name for s in shapes], Ts)
        return [{"T": T, "method": "warp", "error": 1e-3, "error_over_floor": 1.0} for T in Ts]

    def layer_errors(name, **kw):
        ran["errors"] = (name, kw)
        return [{"method": "warp", "layer": "logits", "error": 1e-3}]

    monkeypatch.setattr(sweep, "accuracy", accuracy)
    monkeypatch.setattr(e2e, "layer_errors", layer_errors)
    return ran


def test_bench_on_the_cpu_names_what_it_ignores(monkeypatch, capsys):
    import pytest

    ran = _cpu(monkeypatch)
    lab.main(["bench", "--what", "speed", "accuracy", "--presets", "mixtral-8x7b", "--reps", "5", "--T", "2"])
    said = capsys.readouterr().out
    assert "--what speed ignored: timings need a CUDA GPU" in said
    assert "--presets ignored: the CPU interpreter runs the 'tiny' preset (mixtral-8x7b need a GPU)" in said
    assert "--reps ignored" in said and "--methods" not in said  # only what was given
    assert ran["accuracy"] == (["tiny"], [2]) and "nothing written" in said
    with pytest.raises(SystemExit, match="nothing to run without a CUDA GPU"):
        lab.main(["bench", "--what", "speed", "stages"])
    assert "--what speed stages ignored" in capsys.readouterr().out
    lab.main(["bench"])  # the defaults ask for nothing the CPU cannot do: nothing to say
    assert "ignored" not in capsys.readouterr().out


def test_compare_on_the_cpu_names_the_preset_it_replaced(monkeypatch, capsys):
    ran = _cpu(monkeypatch)
    lab.main(["compare", "--preset", "mixtral-8x7b", "--reps", "3"])
    said = capsys.readouterr().out
    assert "the 'tiny' preset instead of 'mixtral-8x7b'" in said and "--reps ignored" in said
    assert ran["accuracy"][0] == ["tiny"]
    lab.main(["compare"])
    assert "instead of 'qwen3-30b-a3b'" in capsys.readouterr().out  # the default is replaced too


def test_token_counts_below_one_are_refused_by_the_parser(monkeypatch, capsys):
    """``compare --T 0`` printed NaN rows and exited 0, ``--T -1`` ended in a traceback: every token
    count is an integer >= 1, or argparse says which option is wrong and exits with 2."""
    import pytest

    ran = _cpu(monkeypatch)
    for argv in (["compare", "--T", "0"], ["compare", "--T", "4", "-1"], ["compare", "--T", "x"],
                 ["bench", "--T", "0"], ["bench", "--stage-T", "-8"], ["tune", "--T", "0"], ["e2e", "--err-T", "0"]):
        with pytest.raises(SystemExit) as e:
            (cli if argv[0] == "tune" else lab).main(argv)
        assert e.value.code == 2, argv
        assert f"argument {argv[1]}: a token count must be an integer >= 1, got '{argv[-1]}'" in (
            capsys.readouterr().err), argv
    assert ran == {}  # nothing ran


def test_e2e_on_the_cpu_names_what_it_ignores(monkeypatch, capsys):
    import pytest

    ran = _cpu(monkeypatch)
    lab.main(["e2e", "--model", "mixtral-8x7b", "--what", "errors", "speed", "generate", "--T", "1", "--steps", "2"])
    said = capsys.readouterr().out
    assert "the 'tiny' model instead of 'mixtral-8x7b'" in said
    assert "--what speed generate ignored" in said and "--T ignored" in said
    name, kw = ran["errors"]
    assert name == "tiny" and kw["steps"] == 2 and kw["progress_bar"]  # a long CPU run shows its progress
    with pytest.raises(SystemExit, match="nothing to run without a CUDA GPU"):
        lab.main(["e2e", "--what", "speed"])


def test_progress_without_tqdm_prints_lines(monkeypatch, capsys):
    from bench import e2e

    monkeypatch.setitem(sys.modules, "tqdm.auto", None)  # import fails as if tqdm were not installed
    bar = e2e.progress(4, "tiny: layer errors")
    bar.update(2)
    bar.set_postfix_str("reference done")
    bar.close()
    assert "tiny: layer errors: 2/4 decode steps, reference done" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# --help


def test_help_lists_every_command_and_explains_every_option(capsys):
    import pytest

    for module, names in ((cli, ["tune"]), (lab, ["compare", "bench", "tune", "e2e", "report"])):
        p = module.build_parser()
        commands = p._subparsers._group_actions[0]
        assert list(commands.choices) == names
        with pytest.raises(SystemExit):
            module.main(["--help"])
        listing = capsys.readouterr().out
        for action in commands._choices_actions:  # one line each
            line = next(ln for ln in listing.splitlines() if ln.strip().startswith(action.dest + " "))
            assert action.help and action.help in line, (action.dest, line)
        for name, sub in commands.choices.items():
            assert sub.description, name
            for action in sub._actions:
                assert action.help, f"{name} {action.option_strings}: no help"


def test_the_installed_command_points_the_checkout_commands_at_bench():
    """The wheel's ``python -m warpdecode`` holds ``tune``; the commands that need a checkout say, in
    one line, to run ``python -m bench <command>`` from its root."""
    import pytest

    for name in cli.IN_CHECKOUT:
        with pytest.raises(SystemExit) as e:
            cli.main([name, "--help"])
        assert str(e.value) == f"{name} needs a checkout of warpdecode: run `python -m bench {name}` from its root"


# ---------------------------------------------------------------------------------------------
# tools/run_notebooks.py: a CPU run never overwrites the committed GPU outputs


def _runner(monkeypatch, gpu: bool):
    """tools/run_notebooks.py as a module, with execution mocked: each run appends one cell's output."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "tools" / "run_notebooks.py"
    spec = importlib.util.spec_from_file_location("run_notebooks", path)
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    monkeypatch.setattr(runner, "on_gpu", lambda: gpu)

    def execute(nb, path, timeout, kernel):
        import nbformat

        nb.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="gpu\n" if gpu else "cpu\n")]

    monkeypatch.setattr(runner, "execute", execute)
    return runner


def _notebook(path):
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(1)")])
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="committed\n")]
    nbformat.write(nb, path)
    return path.read_bytes()


def test_notebook_runner_on_the_cpu_writes_elsewhere(tmp_path, monkeypatch):
    import pytest

    nb = tmp_path / "01_x.ipynb"
    committed = _notebook(nb)
    runner = _runner(monkeypatch, gpu=False)
    monkeypatch.setattr(runner, "CPU_OUT", tmp_path / "build" / "notebooks")
    assert runner.main([str(nb)]) == 0  # the default without a GPU: build/notebooks/
    assert nb.read_bytes() == committed and "cpu" in (tmp_path / "build" / "notebooks" / nb.name).read_text()
    assert runner.main([str(nb), "--out", str(tmp_path / "mine")]) == 0
    assert nb.read_bytes() == committed and "cpu" in (tmp_path / "mine" / nb.name).read_text()
    with pytest.raises(SystemExit, match="refusing --in-place without a CUDA GPU"):
        runner.main([str(nb), "--in-place"])
    assert nb.read_bytes() == committed


def test_notebook_runner_on_a_gpu_writes_in_place(tmp_path, monkeypatch):
    nb = tmp_path / "01_x.ipynb"
    committed = _notebook(nb)
    runner = _runner(monkeypatch, gpu=True)
    assert runner.main([str(nb)]) == 0
    assert nb.read_bytes() != committed and "gpu" in nb.read_text()
    committed = _notebook(nb)
    assert runner.main([str(nb), "--out", str(tmp_path / "copy")]) == 0  # --out: the original stays
    assert nb.read_bytes() == committed and "gpu" in (tmp_path / "copy" / nb.name).read_text()
