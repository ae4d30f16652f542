"""The command line's plumbing that no CPU run exercises otherwise: on a GPU, ``bench`` and
``tune`` run each preset in a process of its own (what one preset allocated changed another's
timings on the H200, results/NOTES.md), forwarding every option they were given."""

from __future__ import annotations

import json
import subprocess
import sys

import torch

import warpdecode
from warpdecode import __main__ as cli
from warpdecode import _runtime


def _parse(argv: list[str]):
    """The options ``python -m warpdecode <argv>`` would run with (the parser main() builds)."""
    seen = {}
    real = cli.cmd_bench

    def keep(args):
        seen["args"] = args

    cli.cmd_bench = keep
    try:
        cli.main(argv)
    finally:
        cli.cmd_bench = real
    return seen["args"]


def test_bench_on_a_gpu_runs_each_preset_in_its_own_process(monkeypatch):
    calls = []
    monkeypatch.setattr(_runtime, "DEFAULT_DEVICE", torch.device("cuda"))
    monkeypatch.setattr(subprocess, "run", lambda argv, check: calls.append(argv))
    given = ["bench", "--presets", "qwen3-30b-a3b", "mixtral-8x7b", "--T", "1", "8", "--methods", "warp", "expert",
             "--what", "speed", "--reps", "7", "--out", "/tmp/somewhere"]
    cli.main(given)
    assert [c[c.index("--presets") + 1] for c in calls] == ["qwen3-30b-a3b", "mixtral-8x7b"]
    for argv in calls:
        assert argv[:4] == [sys.executable, "-m", "warpdecode", "bench"]
        child, parent = _parse(argv[3:]), _parse(given)
        assert child.in_process and not parent.in_process
        assert len(child.presets) == 1
        for opt in ("T", "stage_T", "methods", "what", "reps", "out"):  # everything else is forwarded as given
            assert getattr(child, opt) == getattr(parent, opt), opt


class _InProcess(Exception):
    pass


def test_bench_with_one_preset_or_in_process_does_not_spawn(monkeypatch):
    import pytest

    from warpdecode.bench import timing

    monkeypatch.setattr(_runtime, "DEFAULT_DEVICE", torch.device("cuda"))
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: (_ for _ in ()).throw(AssertionError("spawned")))

    def measure(*a, **k):  # the first thing the in-process benchmark does
        raise _InProcess

    monkeypatch.setattr(timing, "read_ceiling", measure)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Test GPU")
    for argv in (["bench", "--presets", "mixtral-8x7b"],
                 ["bench", "--presets", "tiny", "mixtral-8x7b", "--in-process"]):
        with pytest.raises(_InProcess):
            cli.main(argv)


def test_tune_runs_each_preset_in_its_own_process(monkeypatch):
    from warpdecode.bench import tune

    calls = []
    monkeypatch.setattr(_runtime, "DEFAULT_DEVICE", torch.device("cuda"))
    monkeypatch.setattr(subprocess, "run", lambda argv, check: calls.append(argv))
    monkeypatch.setattr(tune, "tune", lambda *a, **k: (_ for _ in ()).throw(AssertionError("tuned in this process")))
    cli.main(["tune", "--presets", "olmoe-1b-7b", "gpt-oss-20b", "--paths", "warp", "fused"])
    assert [c[c.index("--presets") + 1:c.index("--presets") + 2] for c in calls] == [["olmoe-1b-7b"], ["gpt-oss-20b"]]
    assert all(c[:4] == [sys.executable, "-m", "warpdecode", "tune"] and "--in-process" in c
               and c[c.index("--paths") + 1:] == ["warp", "fused"] for c in calls)
    # one preset, or --in-process: tuned right here
    seen = []
    monkeypatch.setattr(tune, "tune", lambda presets, paths: seen.append((presets, paths)))
    cli.main(["tune", "--presets", "olmoe-1b-7b"])
    cli.main(["tune", "--presets", "olmoe-1b-7b", "gpt-oss-20b", "--in-process", "--paths", "expert"])
    assert seen == [(["olmoe-1b-7b"], ["warp", "fused", "grouped", "expert", "expert_swap"]),
                    (["olmoe-1b-7b", "gpt-oss-20b"], ["expert"])]
    assert len(calls) == 2


def test_retuning_the_pair_keeps_the_schedules_that_still_win(monkeypatch, tmp_path):
    """``tune --paths warp`` alone once dropped every bucket's ``grouped`` and ``fused`` entries
    (session 11: OLMoE's grouped schedule at T = 8 and 16 would have gone with them). A schedule is
    kept where it measured at least 1 % below the new pair, dropped where the new pair beats it,
    and left to its own tuner when that path runs too."""
    from warpdecode.bench import tune
    from warpdecode.configs import shape_key
    from warpdecode.presets import get_preset

    shape = get_preset("olmoe-1b-7b")
    key = shape_key(shape.H, shape.I, shape.E, shape.K)
    grouped = {"gate_up": {"BLOCK_H": 64}, "down": {"BLOCK_H": 64}}
    old = [[1, {"gate_up": {"g": 0}, "down": {"d": 0}, "measured_us": {"split": 28.4, "fused": 35.2}}],
           [8, {"gate_up": {"g": 0}, "down": {"d": 0}, "grouped": grouped,
                "measured_us": {"split": 141.4, "grouped": 127.9, "fused": 182.0}}],
           [16, {"gate_up": {"g": 0}, "down": {"d": 0}, "grouped": grouped,
                 "measured_us": {"split": 248.6, "grouped": 177.8}}]]
    new = [[1, {"gate_up": {"g": 1}, "down": {"d": 1}, "measured_us": {"split": 28.0}}],
           [8, {"gate_up": {"g": 1}, "down": {"d": 1}, "measured_us": {"split": 141.6}}],
           [16, {"gate_up": {"g": 1}, "down": {"d": 1}, "measured_us": {"split": 178.0}}]]
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps({"warp": {key: old}, "expert": {key: "untouched"}}))
    monkeypatch.setattr(tune, "tuned_file", lambda: path)
    monkeypatch.setattr(tune, "warm_all", lambda *a, **k: {})
    monkeypatch.setattr(tune, "tune_warp", lambda shape, **k: json.loads(json.dumps(new)))
    table = tune.tune(["olmoe-1b-7b"], paths=("warp",), log=lambda *a: None)
    assert json.loads(path.read_text()) == table
    got = dict((T, cfg) for T, cfg in table["warp"][key])
    assert table["expert"][key] == "untouched"
    assert got[1] == {"gate_up": {"g": 1}, "down": {"d": 1}, "measured_us": {"split": 28.0, "fused": 35.2}}
    assert got[8]["grouped"] == grouped and got[8]["gate_up"] == {"g": 1}  # 127.9 < 0.99 x 141.6
    assert got[8]["measured_us"] == {"split": 141.6, "grouped": 127.9, "fused": 182.0}
    assert "grouped" not in got[16]  # 177.8 is not 1 % below the new pair's 178.0
    # a schedule that is re-tuned in the same run is left to its own tuner
    kept = tune.keep_schedules(old, new, retuned=["grouped"])
    assert all("grouped" not in cfg and "grouped" not in cfg["measured_us"] for _, cfg in kept)


def test_expert_swap_keeps_a_form_only_where_it_is_one_percent_faster(monkeypatch):
    """``tune --paths expert_swap``: each bucket's tuned tiles against SWAP_AB on either GEMM or both,
    timed in two alternated rounds; the fastest form replaces the tuned one only where it is ≥ 1 %
    faster in both rounds (not where one round's noise says so), and a form that does not launch
    (out of shared memory: ``_time`` gives None) is passed over."""
    from types import SimpleNamespace

    from warpdecode.bench import tune

    tile = {"BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 1, "num_warps": 4, "num_stages": 3}
    buckets = [[T, {"BLOCK_M": 16, "gate_up": dict(tile), "down": dict(tile, SWAP_AB=True)}] for T in (1, 8, 32, 128)]
    speeds = {1: {(): 100.0, ("gate_up",): 99.5, ("down",): 97.0, ("gate_up", "down"): 98.0},  # swap down
              8: {(): 100.0, ("gate_up",): 99.5, ("down",): None, ("gate_up", "down"): 101.0},  # under 1 %
              32: {(): 100.0, ("gate_up",): 95.0, ("down",): None, ("gate_up", "down"): None},  # swap gate/up
              # round 1: swapping gate/up 2 % faster, round 2: plain faster (session 12's T=8): plain
              128: {(): [100.0, 96.0], ("gate_up",): [98.0, 98.0], ("down",): 100.0, ("gate_up", "down"): 101.0}}
    seen, calls = {}, {}

    def fake_time(step, reps):
        cfg, T = step()
        form = tuple(g for g in ("gate_up", "down") if cfg[g].get("SWAP_AB"))
        calls[(T, form)] = calls.get((T, form), 0) + 1
        t = speeds[T][form]
        return t[calls[(T, form)] - 1] if isinstance(t, list) else t

    monkeypatch.setattr(tune, "num_copies", lambda shape: 1)
    monkeypatch.setattr(tune, "make_layers", lambda shape, L: [(None, None)])
    monkeypatch.setattr(tune, "make_inputs", lambda shape, T, L, seed: [SimpleNamespace(
        x=T, topk_weights=None, topk_ids=None)])
    monkeypatch.setattr(tune, "_over_layers", lambda fn, xs, *cols: lambda: (fn.keywords["config"], xs[0]))
    monkeypatch.setattr(tune, "_time", fake_time)
    out = dict(tune.tune_expert_swap(warpdecode.get_preset("olmoe-1b-7b"), buckets, log=lambda m: seen.setdefault(
        "log", []).append(m)))
    assert out[1]["down"].get("SWAP_AB") and not out[1]["gate_up"].get("SWAP_AB")
    assert not out[8]["down"].get("SWAP_AB") and not out[8]["gate_up"].get("SWAP_AB")  # the old flag is gone too
    assert out[32]["gate_up"].get("SWAP_AB") and not out[32]["down"].get("SWAP_AB")
    assert not out[128]["gate_up"].get("SWAP_AB") and not out[128]["down"].get("SWAP_AB")
    assert all(cfg["BLOCK_M"] == 16 and cfg["gate_up"]["BLOCK_N"] == 64 for cfg in out.values())
    assert set(calls.values()) == {2}  # every form timed once per round
    assert seen["log"][-1].endswith("plain 100.00/96.00 us; swap gate/up 98.00/98.00 us; swap down 100.00/100.00 us; "
                                    "swap both 101.00/101.00 us -> plain")
