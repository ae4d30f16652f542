"""Every file of the checkout describes the software in the present tense: how it was developed
(work periods, GPU runs by number, the tools used to reach a GPU, the retired lab notebook) lives
in git history, not in a file."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Words that only describe how the project was developed (patterns, so this file passes itself).
HISTORY = [r"\bs[e]ssions?\b", r"\bdevice (tool|call)s?\b", r"\bN[O]TES\.md\b", r"\bscripts/h200\.sh\b"]


def tracked_text_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    paths = [ROOT / p for p in out.splitlines()]
    return [p for p in paths if p.is_file() and p.suffix not in {".png", ".whl", ".gz"}]


def history_words(text: str) -> list[str]:
    return [m.group(0) for word in HISTORY for m in re.finditer(word, text, re.IGNORECASE)]


def test_no_file_tells_how_the_project_was_developed():
    found = {}
    for path in tracked_text_files():
        words = history_words(path.read_text(errors="replace"))
        if words:
            found[path.relative_to(ROOT).as_posix()] = sorted(set(words))
    assert not found, f"history words in files: {found}"


def test_the_check_sees_history_words():
    said = "as measured in " + "Sess" + "ion 4, then in a dev" + "ice call"  # split: this file passes itself
    assert history_words(said) == ["Sess" + "ion", "dev" + "ice call"]
    assert history_words("the steady state of a decode step") == []
