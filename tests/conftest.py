"""Test configuration: the ``gpu`` marker, per-test seeds, and the tests folder on sys.path.

``@pytest.mark.gpu`` tests run only where kernels compile for a CUDA GPU; elsewhere (the CPU
interpreter) they are skipped at collection, so ``pytest tests`` is green on a laptop and the
same command runs them on the device.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

import pytest

# A user's own cache of tuned tables must not change what the tests see:
# the tests read the shipped tables and an empty cache of their own.
os.environ["WARPDECODE_CACHE_DIR"] = tempfile.mkdtemp(prefix="warpdecode-test-cache-")
atexit.register(shutil.rmtree, os.environ["WARPDECODE_CACHE_DIR"], ignore_errors=True)

sys.path.insert(0, os.path.dirname(__file__))  # tests import moecases, under any --import-mode

from moecases import seed_for  # noqa: E402

import warpdecode  # noqa: E402  first, so TRITON_INTERPRET is decided before any kernel exists

GPU = warpdecode.DEFAULT_DEVICE.type == "cuda"


def pytest_addoption(parser):
    parser.addoption("--lab", action="store_true",
                     help="also run the experiments' own checks (tests marked lab: minutes in the interpreter)")


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (kernels compiled, not interpreted); skipped elsewhere")


def pytest_collection_modifyitems(config, items):
    lab = pytest.mark.skip(reason="an experiment's own check: run with --lab")
    gpu = pytest.mark.skip(reason="needs a CUDA GPU; kernels run in Triton's CPU interpreter here")
    for item in items:
        if "lab" in item.keywords and not config.getoption("--lab"):
            item.add_marker(lab)
        if "gpu" in item.keywords and not GPU:
            item.add_marker(gpu)


@pytest.fixture
def seed(request) -> int:
    """A seed of this test's own: fresh numbers per test, the same numbers on every run."""
    return seed_for(request.node.nodeid.split("::", 1)[-1])
