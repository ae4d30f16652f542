"""The experiments' kernels that are not in the package stay correct between the runs that time
them: each version's own correctness check, run in Triton's CPU interpreter (small and odd shapes,
against float64). The checks take about twelve minutes of interpreter work, so they run on request
(``pytest --lab tests/test_experiments.py``) and before an experiment is re-timed, not in the
default suite; the cheap structural checks below always run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import warpdecode

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.lab
@pytest.mark.skipif(not warpdecode.INTERPRET, reason="the checks run in Triton's CPU interpreter")
@pytest.mark.parametrize(("script", "version", "marker", "checks"), [
    ("one_launch.py", "8", "× the bf16 floor", 3),  # v8: one launch, poisoned output, three shapes
    ("gate_up.py", "ladder", "against float64", 3),  # the gate/up ladder's three probe rungs
    ("warp_down.py", "ladder", "against float64", 10),  # the down ladder's four probe kernels, two shapes
    ("expert_path.py", "align", "the contract holds", 40),  # align five ways (variants), five routings each
    ("warp_down.py", "13", ": error ", 6),  # v13: the whole w2 tile before the wait, 1-4 chunks, odd shapes
    ("expert_path.py", "pdl", "same bits", 3),  # the expert path's launches chained with PDL: no bit changes
    ("warp_down.py", "15", "compiled for sm_90a", 26),  # v15: the whole w2 tile into shared memory (TMA, cp.async)
    ("expert_path.py", "half_m", "as the full tile", 3),  # HALF_M tiles: no change (bits on a GPU), both block kinds
    ("warp_down.py", "14", "state reset", 12),  # v14: the down kernel by chunks of I, two calls per shape
    ("expert_path.py", "swap_ab", "from the plain tile", 20),  # SWAP_AB GEMM tiles against float64 and the plain tiles
    ("defaults.py", "defaults", "defaults, error", 6),  # every path's default configs, odd shapes
    ("one_launch.py", "16", "no program gave up", 10),  # v16: one launch, down walks experts as gate/up ends them
    ("reads.py", "bound", "scratch at rest", 18),  # a read with each way to wait: nine kinds, two sizes
    ("warp_down.py", "17", "per-slot error", 4),  # v17: the down tile in both forms
    ("gate_up.py", "slices", "against float64", 4),  # the gate/up step sliced and in one load, two shapes
    ("expert_path.py", "bound", "no math", 5),  # no-math GEMMs: three shapes read in full, two compiled for sm_90a
    ("warp_down.py", "18", "k-first error", 4),  # v18: the [K, rows, columns] tile against the shipped form
    ("fp8_warp.py", "tiles", "the shipped pair's bits", 4),  # the integer e4m3 dequantization, bit for bit
    ("fp8_warp.py", "bound", "no math", 8),  # the FP8 pair's launches without math: six sums, two compiled
    ("minimal_pair.py", "v1", "minimal pair error", 4),  # notebook 4's pair (a copy), two shapes, T = 1 and 3
    ("fp8_expert.py", "count", "the shipped path's bits", 4),  # fp16 operands, rows scaled: bit for bit, two formats
    ("fp8_expert.py", "rows", "the weight-only path's bits", 12),  # fp16 rows (block or row scales): bit for bit
    ("fp8_mma.py", "mma", "within 1.1x of the shipped pair", 8),  # FP8 pair on tensor cores: shapes, formats, tiles
])
def test_experiment_checks_pass_in_the_interpreter(script, version, marker, checks):
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, f"experiments/{script}", "--version", version, "--check"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert out.stdout.count(marker) == checks, out.stdout


def test_no_experiment_shadows_a_standard_module():
    """Each script runs with experiments/ first on sys.path: a file named like a standard-library
    module (profile.py) would replace it for every import there (cProfile, and torch._dynamo)."""
    names = {p.stem for p in (ROOT / "experiments").glob("*.py")}
    assert not names & set(sys.stdlib_module_names), names & set(sys.stdlib_module_names)


def test_down_runs_time_the_shipped_pair_around_the_candidates(monkeypatch):
    """``down_runs``: the first and last runs are the shipped pair (kernel 1, then the shipped down
    kernel with its tuned config), every other run kernel 1 then the candidate down function with
    one of the configs (never the candidate's function under the shipped label)."""
    from warpdecode import warp as wp

    sys.path.insert(0, str(ROOT / "experiments"))
    import harness as experiment

    shape = warpdecode.get_preset("olmoe-1b-7b")
    case = experiment.Case(shape, 1, 1001, [], [], 1.0, 1.0, None)
    tuned = warpdecode.configs.warp_config(shape.H, shape.I, shape.E, shape.K, 1)
    calls = []
    monkeypatch.setattr(wp, "warp_gate_up", lambda x, w13, ids, tw, cfg: ("act", cfg))
    monkeypatch.setattr(wp, "warp_down", lambda act, w2, ids, tw, cfg, dt: calls.append(("shipped", act, cfg)))
    candidate = lambda act, w2, ids, tw, cfg, dt: calls.append(("candidate", act, cfg))  # noqa: E731
    runs = experiment.down_runs(case, candidate, [{"c": 1}, {"c": 2}], prefix="v ")
    assert [label for label, _, _ in runs] == [f"shipped {tuned['down']}", "v {'c': 1}", "v {'c': 2}", "shipped again"]
    for _, step, _ in runs:
        step("x", "w13", "w2", "tw", "ids")
    gu = ("act", tuned["gate_up"])
    assert calls == [("shipped", gu, tuned["down"]), ("candidate", gu, {"c": 1}), ("candidate", gu, {"c": 2}),
                     ("shipped", gu, tuned["down"])]
