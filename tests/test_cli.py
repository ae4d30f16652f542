"""The command line's plumbing that no CPU run exercises otherwise: on a GPU, ``bench`` and
``tune`` run each preset in a process of its own (what one preset allocated changed another's
timings on the H200, results/NOTES.md), forwarding every option they were given."""

from __future__ import annotations

import json
import subprocess
import sys

import torch

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
    assert seen == [(["olmoe-1b-7b"], ["warp", "fused", "grouped", "expert"]),
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
