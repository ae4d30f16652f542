"""Every row the benchmarks write names the commit it was measured on (``sweep.commit``): the
checkout's short hash, ``-dirty`` where its code differs, else what the copier of the tree says."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from warpdecode.bench import sweep


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
def fresh_commit():
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


def test_commit_without_a_checkout_is_unknown_or_what_the_copier_says(monkeypatch, fresh_commit):
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



def test_fp8_rows_append_to_an_older_file_under_the_union_of_columns(tmp_path):
    """bench.fp8 appends: rows that name their commit, after an older file's rows that do not."""
    from warpdecode.bench import fp8

    path = tmp_path / "fp8_speed.csv"
    fp8._write(path, [{"preset": "tiny", "median_us": 1.0, "gpu": "g"}])
    fp8._write(path, [{"preset": "tiny", "median_us": 2.0, "overhead": 1.1, "gpu": "g", "commit": "abc1234"}])
    old, new = fp8._read(path)
    assert (old["median_us"], old["commit"], old["gpu"]) == ("1.0", "", "g")
    assert (new["median_us"], new["commit"], new["overhead"], new["gpu"]) == ("2.0", "abc1234", "1.1", "g")
