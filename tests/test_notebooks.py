"""The notebooks' two forms agree, and each keeps the house rules that a reader relies on.

``notebooks/NN_*.py`` (jupytext py:percent) is the source; ``NN_*.ipynb`` carries the outputs of a
run. ``jupytext --sync notebooks/[0-9]*.py`` writes the second from the first; these tests fail when one
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


def test_the_ladder_has_nine_rungs_each_in_both_forms():
    assert [p.name[:3] for p in TWINS] == ["01_", "02_", "03_", "04_", "05_", "06_", "07_", "08_", "09_"]
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
    assert f"python tools/run_notebooks.py notebooks/{twin.stem}.ipynb" in text


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


@pytest.mark.parametrize("twin", TWINS, ids=[p.stem for p in TWINS])
def test_prose_is_timeless(twin):
    """Markdown says what and why in the present tense: how the project was developed lives in git."""
    prose = "\n".join(src for kind, src in _cells(twin) if kind == "markdown")
    for word in (r"\bs[e]ssions?\b", r"\bcall \d", r"\buntil\b", r"\bsince\b", r"\b20\d\d\b", r"NOTES\.md"):
        assert not re.search(word, prose, re.IGNORECASE), f"{twin.stem}: {word} in markdown"


@pytest.mark.parametrize("twin", TWINS, ids=[p.stem for p in TWINS])
def test_checked_cells_hold_no_compiler_facts(twin):
    """Checked output is what every machine prints alike: no timings, register counts or spills."""
    for kind, src in _cells(twin):
        if kind == "code" and "NBVAL_CHECK_OUTPUT" in src:
            for fact in ("ptxas_report", "n_regs", "spill", "median_us", "do_bench", "programs_per_sm"):
                assert fact not in src, f"{twin.stem}: {fact} in a checked cell"


@pytest.mark.parametrize("twin", TWINS[:-1], ids=[p.stem for p in TWINS[:-1]])
def test_each_rung_but_the_last_is_linked_from_the_ladder(twin):
    """Rung N+1 is reachable from the notebooks: some notebook links to its .ipynb."""
    following = TWINS[TWINS.index(twin) + 1]
    links = "\n".join(src for p in TWINS for kind, src in _cells(p) if kind == "markdown")
    assert f"({following.stem}.ipynb)" in links, f"no notebook links to {following.stem}"


@pytest.mark.parametrize("twin", TWINS, ids=[p.stem for p in TWINS])
def test_saved_outputs_hold_no_progress_bars(twin):
    """The saved outputs are what the cells print: tools/run_notebooks.py drops tqdm's bars and notices."""
    nb = jupytext.read(twin.with_suffix(".ipynb"))
    streams = [o.get("text", "") for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "stream"]
    assert not [s for s in streams if re.search(r"\d+%\|.*(it/s|s/it)|TqdmWarning", s)], twin.stem
