"""The README's Python example runs as printed and its assertion holds (on a CPU through Triton's
interpreter on the ``tiny`` preset; on a GPU on Qwen3-30B-A3B's layer shape)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def readme_example() -> str:
    """The first ```python block under the README's "The Python API" heading."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## The Python API"):]
    m = re.search(r"```python\n(.*?)```", section, flags=re.S)
    assert m, "README.md's 'The Python API' section has no ```python block"
    return m.group(1)


def test_readme_example_runs():
    code = readme_example()
    assert "wd.moe(" in code and "assert " in code  # it calls the entry point and checks the result
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    assert scope["y"].shape == scope["x"].shape and not scope["y"].isnan().any()


def test_readme_example_fails_on_a_wrong_result(monkeypatch):
    """The example's assertion can fail: with the routing weights ignored by the layer it does."""
    import pytest

    import warpdecode as wd

    real = wd.moe
    monkeypatch.setattr(wd, "moe", lambda x, w13, w2, tw, ids, **kw: real(x, w13, w2, tw.flip(-1), ids, **kw))
    with pytest.raises(AssertionError):
        exec(compile(readme_example(), "README.md", "exec"), {})
