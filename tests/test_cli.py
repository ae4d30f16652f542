"""The command line's plumbing that no CPU run exercises otherwise: on a GPU, ``bench`` and
``tune`` run each preset in a process of its own (what one preset allocated changed another's
timings on the H200, results/NOTES.md), forwarding every option they were given."""

from __future__ import annotations

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
