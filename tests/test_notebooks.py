"""The notebooks' two forms agree, and each keeps the house rules that a reader relies on.

``notebooks/NN_*.py`` (jupytext py:percent) is the source; ``NN_*.ipynb`` carries the outputs of a
run. ``jupytext --sync notebooks/*.py`` writes the second from the first; these tests fail when one
was edited without the other. Running the notebooks themselves is nbval's job (see README).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

jupytext = pytest.importorskip("jupytext")  # the `notebooks` extra

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
TWINS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.py"))


def _cells(path: Path) -> list[tuple[str, str]]:
    nb = jupytext.read(path)
    return [(c.cell_type, c.source.strip()) for c in nb.cells]


def test_the_ladder_has_six_rungs_each_in_both_forms():
    assert [p.name[:3] for p in TWINS] == ["01_", "02_", "03_", "04_", "05_", "06_"]
    assert {p.stem for p in NOTEBOOKS.glob("*.ipynb")} == {p.stem for p in TWINS}


@pytest.mark.parametrize("twin", TWINS, ids=[p.stem for p in TWINS])
def test_py_and_ipynb_have_the_same_cells(twin):
    py, ipynb = _cells(twin), _cells(twin.with_suffix(".ipynb"))
    assert len(py) == len(ipynb), f"{twin.name}: {len(py)} cells, {twin.stem}.ipynb: {len(ipynb)}"
    for i, (a, b) in enumerate(zip(py, ipynb, strict=True)):
        assert a == b, f"{twin.stem}: cell {i} differs; run `jupytext --sync notebooks/{twin.name}`"


@pytest.mark.parametrize("twin", TWINS, ids=[p.stem for p in TWINS])
def test_first_cell_names_the_rung_and_its_command(twin):
    kind, text = _cells(twin)[0]
    assert kind == "markdown" and "**What this rung adds:**" in text
    assert f"python scripts/run_notebooks.py notebooks/{twin.stem}.ipynb" in text


@pytest.mark.parametrize("twin", TWINS, ids=[p.stem for p in TWINS])
def test_no_hard_coded_device(twin):
    code = "\n".join(src for kind, src in _cells(twin) if kind == "code")
    assert not re.search(r"""device\s*=\s*["']cuda|\.cuda\(\)""", code)


@pytest.mark.parametrize("twin", TWINS, ids=[p.stem for p in TWINS])
def test_images_are_files_not_embedded(twin):
    """Figures are files under figures/, linked from markdown; no PNG is stored in the notebook."""
    nb = jupytext.read(twin.with_suffix(".ipynb"))
    for c in nb.cells:
        for out in c.get("outputs", []):
            assert "image/png" not in out.get("data", {}), f"{twin.stem}: an embedded image"
    for _, src in _cells(twin):
        for link in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", src):
            assert (NOTEBOOKS / link).resolve().is_file(), f"{twin.stem}: missing figure {link}"
