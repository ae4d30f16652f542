"""The vLLM baseline's own parts that need no vLLM wheel: the substitutes for vLLM's compiled MoE ops
(experiments/vllm_path.py) hold the ops' contracts, the placeholders for left-out modules serve an
import and then refuse a call, and tools/vllm_bundle.py cuts a fatbin to one architecture and copies
the fused_moe override hook verbatim. With the bundle built (.vllm/), vLLM's own path runs end to
end in the interpreter: ``python experiments/vllm_baseline.py --version bf16 --check``."""

from __future__ import annotations

import importlib
import struct
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))
sys.path.insert(0, str(ROOT / "tools"))

import vllm_bundle  # noqa: E402
import vllm_path  # noqa: E402


@pytest.mark.parametrize(("T", "K", "E", "block"), [
    (1, 8, 128, 16),  # fewer pairs than experts
    (5, 2, 7, 16),  # prime E
    (64, 8, 64, 64),  # several blocks per expert
    (3, 3, 3, 4),  # K = E: every expert routed by every token
])
def test_the_substitute_align_holds_vllms_contract(T, K, E, block):
    g = torch.Generator().manual_seed(T * 100 + K)
    ids = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)]).to(torch.int32)
    n = ids.numel()
    cap = min(n * block, n + E * (block - 1)) if n < E else n + E * (block - 1)  # vLLM's buffer sizes
    sorted_ids = torch.full((cap,), -7, dtype=torch.int32)
    expert_ids = torch.full((-(-cap // block),), -7, dtype=torch.int32)
    post = torch.zeros(1, dtype=torch.int32)
    vllm_path.moe_align_block_size(ids, E, block, sorted_ids, expert_ids, post)
    counts = torch.bincount(ids.flatten().long(), minlength=E)
    padded = (counts + block - 1) // block * block
    assert int(post) == int(padded.sum())
    flat = ids.flatten()
    seen = []
    for b in range(int(post) // block):
        rows = sorted_ids[b * block:(b + 1) * block]
        real = rows[rows < n]
        assert (rows[rows >= n] == n).all(), "padding holds T·K"
        assert (flat[real.long()] == expert_ids[b]).all(), f"block {b} holds another expert's pairs"
        seen += real.tolist()
    assert sorted(seen) == list(range(n)), "every (token, slot) once"


def test_the_substitute_sum_and_activation_round_where_vllms_kernels_do():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4, 64, generator=g).bfloat16()
    out = torch.empty(3, 64, dtype=torch.bfloat16)
    vllm_path.moe_sum(x[:, :2], out)  # K = 2: added in bf16
    assert torch.equal(out, (x[:, 0].float() + x[:, 1].float()).bfloat16())
    vllm_path.moe_sum(x, out)  # K = 4: three bf16 additions in order
    acc = x[:, 0]
    for k in (1, 2, 3):
        acc = (acc.float() + x[:, k].float()).bfloat16()
    assert torch.equal(out, acc)
    big = torch.randn(3, 8, 64, generator=g).bfloat16()
    vllm_path.moe_sum(big, out)  # K = 8: torch's sum
    assert torch.equal(out, big.sum(dim=1))
    a = torch.empty(3, 32, dtype=torch.bfloat16)
    vllm_path.silu_and_mul(a, x[:, 0])
    ref = (torch.nn.functional.silu(x[:, 0, :32].float()).bfloat16().float() * x[:, 0, 32:].float()).bfloat16()
    assert torch.equal(a, ref)


def test_placeholders_serve_the_import_and_refuse_a_call(monkeypatch):
    finder = vllm_path._StubFinder(["fake_left_out"])
    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, finder])
    monkeypatch.setattr(vllm_path, "_ARMED", False)
    mod = importlib.import_module("fake_left_out.config")
    Base = mod.ParallelConfig

    class Real(Base):  # a real class deriving from a placeholder still instantiates
        pass

    @mod.CustomOp.register("x")  # a decorator at import time returns what it decorates
    def f():
        return 3

    assert f() == 3 and isinstance(Real(), Real)
    assert (Base | None) is not None  # annotations evaluate
    monkeypatch.setattr(vllm_path, "_ARMED", True)
    with pytest.raises(RuntimeError, match="fake_left_out.config.get_dp_group"):
        mod.get_dp_group()
    assert isinstance(Real(), Real)
    sys.modules.pop("fake_left_out.config")
    sys.modules.pop("fake_left_out")


def _fatbin(entries):
    """A fatbin: 16-byte header, then (kind, sm, payload) entries of 64-byte headers."""
    body = b""
    for kind, sm, payload in entries:
        head = bytearray(64)
        struct.pack_into("<HHII", head, 0, kind, 0, 64, len(payload))
        struct.pack_into("<I", head, 28, sm)
        body += bytes(head) + payload
    return struct.pack("<IHHQ", vllm_bundle.FATBIN_MAGIC, 1, 16, len(body)) + body


def test_a_fatbin_is_cut_to_one_architecture():
    ELF, PTX = vllm_bundle.ELF, vllm_bundle.PTX
    one = _fatbin([(ELF, 80, b"a" * 8), (ELF, 90, b"b" * 16), (PTX, 80, b"c" * 8), (ELF, 100, b"d" * 8)])
    two = _fatbin([(ELF, 80, b"e" * 8), (PTX, 75, b"f" * 8), (PTX, 80, b"g" * 24)])  # no sm_90 cubin: newest PTX
    three = _fatbin([(ELF, 75, b"h" * 8)])  # nothing an H200 runs
    section = bytearray(b"\0" * 8 + one + two + three)
    stats = vllm_bundle.cut_fatbins(section, 8, len(section) - 8, 90)
    assert len(section) == 8 + len(one) + len(two) + len(three)
    kept = vllm_bundle.fatbins(section, 8, len(section) - 8)
    assert [[(k, sm) for _, k, _, sm in es] for _, _, es in kept] == [[(ELF, 90)], [(PTX, 80)], []]
    assert bytes(section).count(b"b" * 16) == 1 and bytes(section).count(b"g" * 24) == 1
    assert b"a" not in bytes(section) and b"d" not in bytes(section) and b"h" not in bytes(section)
    assert stats["cubins_kept"] == 1 and stats["ptx_kept"] == 1 and stats["entries_dropped"] == 6


def test_the_override_hook_is_copied_verbatim():
    init = b'''from contextlib import contextmanager
from vllm.model_executor.layers.fused_moe.layer import FusedMoE

_config: dict | None = None


@contextmanager
def override_config(config):
    global _config
    old_config = _config
    _config = config
    yield
    _config = old_config


def get_config():
    return _config


__all__ = ["FusedMoE"]
'''
    src = vllm_bundle.hook_source(init)
    ns = {}
    exec(compile(src, "hook", "exec"), ns)
    assert "FusedMoE" not in src and ns["get_config"]() is None
    with ns["override_config"]({"BLOCK_SIZE_M": 16}):
        assert ns["get_config"]() == {"BLOCK_SIZE_M": 16}
    assert ns["get_config"]() is None
