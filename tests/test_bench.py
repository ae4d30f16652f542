"""The benchmarks time the public call and name their commit (bench/methods.py,
sweep.py), on the CPU: each public method calls ``warpdecode.moe`` with the ids as ``route`` gives
them, each bare twin is the kernels alone; the sweep times a public method and its twin in one
interleaved run and writes their ratio (``overhead``); every row names the commit it was measured
on (``sweep.commit``): the checkout's short hash, ``-dirty`` where its code differs, else what the
copier of the tree says."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import warpdecode as wd
from bench import methods, sweep
from bench.timing import Timing
from warpdecode import api
from warpdecode.expert import moe_expert
from warpdecode.warp import moe_warp
from warpdecode.workload import LayerInputs

#: Each public method and the options it passes to warpdecode.moe.
PUBLIC = {"loop": {"method": "loop"}, "warp": {"method": "warp"}, "expert": {"method": "expert"},
          "auto": {"method": "auto"}, "expert_fp8": {"method": "expert", "act_format": "fp8"},
          "warp_bf16_act": {"method": "warp", "act_dtype": torch.bfloat16}}


def _layer(T=2):
    s = wd.get_preset("tiny")
    w13, w2 = s.weights(seed=1)
    g = torch.Generator().manual_seed(T)
    x = torch.randn(T, s.H, generator=g).to(torch.bfloat16)
    logits = torch.randn(T, s.E, generator=g)
    tw, ids = wd.route(logits, s.K)
    return s, w13, w2, LayerInputs(x, logits, tw, ids)


def test_public_methods_call_warpdecode_moe_and_twins_are_the_kernels(monkeypatch):
    _, w13, w2, inp = _layer()
    calls = []

    def moe(x, w13_, w2_, tw, ids, **options):
        calls.append((ids, options))
        return x

    monkeypatch.setattr(api, "moe", moe)
    fns = methods.registry(include_hf=False)
    for name, options in PUBLIC.items():
        calls.clear()
        assert fns[name](inp.x, w13, w2, inp.topk_weights, inp.topk_ids) is inp.x
        (ids, got), = calls
        assert got == options, name
        assert ids is inp.topk_ids and ids.dtype == torch.int32, name  # as route gives them: no cast, no copy
    assert methods.KERNELS.keys() <= PUBLIC.keys() and "loop" not in methods.KERNELS
    assert fns["warp_kernels"] is moe_warp and fns["expert_kernels"] is moe_expert
    assert fns["auto_kernels"] is api.run_auto
    assert all(sweep.SANITY[twin] == sweep.SANITY[m] for m, twin in methods.KERNELS.items())
    assert all(twin in fns and twin not in methods.EAGER for twin in methods.KERNELS.values())


def test_speed_times_each_public_method_beside_its_kernels(monkeypatch):
    """speed(): every public method asked for brings its bare twin, both captured and timed in the
    same interleaved run; the public row's overhead is public / twin, a method without a twin
    (loop, timed eagerly) has none; every row carries the commit."""
    shape, w13, w2, inp = _layer()
    ref = wd.reference_moe(inp.x, w13, w2, inp.topk_weights, inp.topk_ids).to(torch.bfloat16)
    us = {"warp": 3.0, "warp_kernels": 2.0, "auto": 4.5, "auto_kernels": 3.0, "loop": 50.0}

    def fake(name):
        def fn(*args):
            return ref.clone()

        fn.method = name
        return fn

    fns = {m: fake(m) for m in us}
    batches = []

    def capture_poisoned(step):
        fn, _ = step.args
        return SimpleNamespace(method=fn.method), step()

    def time_interleaved(graphs, reps):
        batches.append([g.method for g in graphs])
        return [Timing(us[g.method], us[g.method], us[g.method], reps) for g in graphs]

    monkeypatch.setattr(sweep, "registry", lambda: fns)
    monkeypatch.setattr(sweep, "num_copies", lambda s: 1)
    monkeypatch.setattr(sweep, "make_layers", lambda s, L: [(w13, w2)])
    monkeypatch.setattr(sweep, "make_inputs", lambda s, T, L, seed: [inp])
    monkeypatch.setattr(sweep, "capture_poisoned", capture_poisoned)
    monkeypatch.setattr(sweep, "time_interleaved", time_interleaved)
    monkeypatch.setattr(sweep, "time_eager", lambda step, reps: Timing(us["loop"], us["loop"], us["loop"], reps))
    monkeypatch.setattr(sweep, "commit", lambda: "abc1234")
    rows = sweep.speed([shape], [2], ["loop", "warp", "auto"], ceiling_tbps=1.0, reps=10, kernels=True)
    assert batches == [["warp", "warp_kernels", "auto", "auto_kernels"]]  # one interleaved run
    by = {r["method"]: r for r in rows}
    assert set(by) == set(us)
    assert by["warp"]["overhead"] == 1.5 and by["auto"]["overhead"] == 1.5
    assert by["warp_kernels"]["overhead"] == "" and by["loop"]["overhead"] == ""
    assert all(r["commit"] == "abc1234" and r["checked"] for r in rows)
    assert [r["method"] for r in sweep.speed([shape], [2], ["warp"], ceiling_tbps=1.0)] == ["warp"]  # the default


def _git(toplevel: str, status: str = "", head: str = "abc1234"):
    """A stand-in for subprocess.run that answers git's three questions; returns it and the argv's it saw."""
    seen = []

    def run(argv, **kw):
        seen.append(argv)
        assert argv[:3] == ["git", "-C", ROOT]
        out = status if argv[3] == "status" else toplevel if "--show-toplevel" in argv else head
        return SimpleNamespace(stdout=out + "\n", returncode=0)

    return run, seen


ROOT = str(Path(sweep.__file__).resolve().parents[2])


@pytest.fixture
def fresh_commit(monkeypatch):
    monkeypatch.delenv("WARPDECODE_COMMIT", raising=False)
    sweep.commit.cache_clear()
    yield
    sweep.commit.cache_clear()


@pytest.mark.parametrize("status, expected", [("", "abc1234"), (" M warpdecode/api.py", "abc1234-dirty")],
                         ids=["clean", "code-changed"])
def test_commit_names_the_checkout_and_whether_its_code_differs(monkeypatch, fresh_commit, status, expected):
    run, seen = _git(ROOT, status)
    monkeypatch.setattr(subprocess, "run", run)
    assert sweep.commit() == expected and sweep.meta()["commit"] == expected
    asked = next(a for a in seen if a[3] == "status")
    assert "--untracked-files=no" in asked  # tracked files only
    assert {f":(exclude){p}" for p in sweep.DATA_PATHS} <= set(asked)  # the results it writes are not code


def test_commit_is_what_the_copier_says_else_unknown_without_a_checkout(monkeypatch, fresh_commit):
    def no_git(argv, **kw):
        raise FileNotFoundError("git")

    monkeypatch.setattr(subprocess, "run", no_git)
    monkeypatch.delenv("WARPDECODE_COMMIT", raising=False)
    assert sweep.commit() == "unknown"
    sweep.commit.cache_clear()
    monkeypatch.setenv("WARPDECODE_COMMIT", "def5678")
    assert sweep.commit() == "def5678"
    sweep.commit.cache_clear()
    run, _ = _git("/a/repository/around/site-packages")  # a repository around an install is not its checkout
    monkeypatch.setattr(subprocess, "run", run)
    assert sweep.commit() == "def5678"
    sweep.commit.cache_clear()
    run, _ = _git(ROOT, " M warpdecode/api.py")  # a copied tree whose .git is older than its files: the copier's word
    monkeypatch.setattr(subprocess, "run", run)
    assert sweep.commit() == "def5678"



def test_fp8_rows_append_to_an_older_file_under_the_union_of_columns(tmp_path):
    """bench.fp8 appends: rows that name their commit, after an older file's rows that do not."""
    from bench import fp8

    path = tmp_path / "fp8_speed.csv"
    fp8._write(path, [{"preset": "tiny", "median_us": 1.0, "gpu": "g"}])
    fp8._write(path, [{"preset": "tiny", "median_us": 2.0, "overhead": 1.1, "gpu": "g", "commit": "abc1234"}])
    old, new = fp8._read(path)
    assert (old["median_us"], old["commit"], old["gpu"]) == ("1.0", "", "g")
    assert (new["median_us"], new["commit"], new["overhead"], new["gpu"]) == ("2.0", "abc1234", "1.1", "g")


def test_each_public_method_computes_what_its_kernels_do():
    """Through warpdecode.moe (checks, dispatch) each public method gives its twin's bits."""
    _, w13, w2, inp = _layer()
    fns = methods.registry(include_hf=False)
    args = (inp.x, w13, w2, inp.topk_weights, inp.topk_ids)
    for public, twin in methods.KERNELS.items():
        assert torch.equal(fns[public](*args), fns[twin](*args)), public


def test_bench_command_times_the_kernels_beside_the_public_call(monkeypatch, tmp_path):
    """``python -m bench bench`` asks the sweep for the kernels' rows and writes its rows, the
    read ceiling's too, with the commit."""
    from bench import __main__ as lab
    from bench import data, timing
    from warpdecode import _runtime

    monkeypatch.setattr(_runtime, "DEFAULT_DEVICE", torch.device("cuda"))
    monkeypatch.setattr(timing, "read_ceiling", lambda gb: 4.0)
    monkeypatch.setattr(timing, "copy_ceiling", lambda gb: 3.0)
    monkeypatch.setattr(sweep, "commit", lambda: "abc1234")
    seen = {}
    row = {"preset": "tiny", "T": 1, "method": "warp", "median_us": 2.0, "floor_us": 1.0, "frac_ceiling": 0.5,
           "error_over_floor": 1.0, "overhead": 1.1, **sweep.meta()}

    def speed(shapes, Ts, methods, **kw):
        seen.update(kw, methods=methods)
        return [row]

    monkeypatch.setattr(sweep, "speed", speed)
    lab.main(["bench", "--presets", "tiny", "--what", "speed", "--methods", "warp", "--out", str(tmp_path)])
    assert seen["kernels"] and seen["methods"] == ["warp"]
    assert [r["commit"] for r in data.read(tmp_path / "speed.csv")] == ["abc1234"]
    assert [r["commit"] for r in data.read(tmp_path / "ceiling.csv")] == ["abc1234"]
