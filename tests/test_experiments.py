"""Experiment scripts whose kernels are not in the package yet stay correct between the sessions
that time them: each one's own correctness check, run in Triton's CPU interpreter (tiny and odd
shapes, the output poisoned, against the float64 reference)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import warpdecode

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(not warpdecode.INTERPRET, reason="the check runs in Triton's CPU interpreter")
def test_ordered_launch_is_correct_in_the_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "scripts/ordered_launch.py", "--check"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert out.stdout.count("× the bf16 floor") == 3, out.stdout


@pytest.mark.skipif(not warpdecode.INTERPRET, reason="the check runs in Triton's CPU interpreter")
def test_gate_up_ladder_rungs_compute_what_they_claim():
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "scripts/gate_up_ladder.py", "--check"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert out.stdout.count("against float64") == 3, out.stdout
