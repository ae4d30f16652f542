"""Property-based: warp decode and the expert path match the float64 reference on random small
shapes, dtypes and routings, within the tolerance table of test_accuracy.py.

Hypothesis draws (T, H, I, E, K, dtype, routing); the examples are derandomized (the same on
every run, so CI does not flake) and bounded in number, with no per-example deadline: each one
runs kernels in the CPU interpreter. Sizes start at H=16 and I=8: below that the output has too
few elements for error / floor to be a stable statistic (a single element's floor can be ~0), and
T·H is at least 192 for the same reason (the small-output edges are in test_edges.py, seeded).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from moecases import Case, make_inputs
from test_accuracy import check_accuracy

DTYPES = [torch.bfloat16, torch.float16, torch.float32]


@st.composite
def cases(draw):
    E = draw(st.integers(1, 16))
    T = draw(st.integers(1, 24))
    h_min = max(16, -(-192 // T))  # T·H ≥ 192
    return Case(
        "hypothesis",
        T=T,
        H=draw(st.integers(h_min, max(h_min, 160) + 32)),
        I=draw(st.integers(8, 96)),
        E=E,
        K=draw(st.integers(1, min(E, 8))),
        routing=draw(st.sampled_from(["router", "same", "idle"])),
    )


SETTINGS = settings(max_examples=15, deadline=None, derandomize=True, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("variant", ["warp", "expert"])
@SETTINGS
@given(case=cases(), dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**31 - 1))
def test_matches_reference(variant, case, dtype, seed):
    check_accuracy(make_inputs(case, dtype, seed), variant, dtype)
