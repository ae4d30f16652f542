"""bench.ladder, the notebooks' shared helpers: ledgers, result readers, kernel views."""

from __future__ import annotations

import pytest
import torch

import warpdecode
from bench import ladder
from warpdecode import configs
from warpdecode import warp as wp
from warpdecode.kernels import warp_pair as kp

QWEN = warpdecode.get_preset("qwen3-30b-a3b")


def test_decode_bytes_at_one_token_is_k_experts():
    ids = torch.arange(QWEN.K, dtype=torch.int32).view(1, QWEN.K)
    assert ladder.decode_bytes(QWEN, ids) == QWEN.K * 3 * QWEN.H * QWEN.I * 2 + 2 * QWEN.H * 2 + QWEN.K * 8


def test_shared_experts_are_read_once():
    ids = torch.tensor([[0, 1], [1, 0], [0, 1]], dtype=torch.int32)
    s = warpdecode.MoEShape("s", H=64, I=32, E=4, K=2)
    assert ladder.decode_bytes(s, ids) - 3 * 64 * 2 * 2 - 6 * 8 == 2 * s.expert_bytes


def test_expected_distinct_edges():
    assert ladder.expected_distinct(128, 8, 0) == 0
    assert ladder.expected_distinct(128, 8, 1) == pytest.approx(8)
    assert ladder.expected_distinct(128, 8, 10_000) == pytest.approx(128)
    assert ladder.expected_distinct(8, 8, 1) == 8  # K = E: every expert at once


def test_project_keeps_the_fixed_part():
    assert ladder.project(30.0, 20.0, 1.0) == 30.0
    assert ladder.project(30.0, 20.0, 2.0) == pytest.approx(20.0)


def test_expert_stage_bytes_at_one_token():
    ids = torch.arange(QWEN.K, dtype=torch.int32).view(1, QWEN.K)
    led = ladder.expert_stage_bytes(QWEN, ids, block_m=16)
    assert led["4 quantize"] == 0
    assert led["5 gate/up GEMM"] > QWEN.K * 2 * QWEN.I * QWEN.H * 2 > led["3 gather"]


@pytest.mark.parametrize("T, ctx", [(1, 1), (1, 6), (5, 3)], ids=["T=1-first-position", "T=1", "T=5"])
def test_step_ledger_adds_up_to_step_bytes(T, ctx):
    """The ledger's parts sum to what the end-to-end benchmark counts (bench.e2e.step_bytes), with
    the distinct experts the step's routing actually hit."""
    from bench.e2e import step_bytes
    from bench.model import MODELS, Decoder

    m = Decoder(MODELS["tiny"], seed=4)
    routes = []
    m.step(torch.arange(T) + 7, ctx - 1, m.new_cache(T, ctx, dtype=torch.float64), method="reference", routes=routes)
    hit = sum(torch.unique(ti).numel() for ti in routes)
    led = ladder.step_ledger(m.cfg, T, ctx, hit)
    assert sum(led.values()) == step_bytes(m, T, ctx, routes)
    assert led["routed experts"] == hit * m.cfg.moe.expert_bytes
    if T == 1:
        assert hit == len(m.layers) * m.cfg.moe.K


def test_step_ledger_of_qwen3_at_one_token():
    """Qwen3-30B-A3B, T = 1: the H200's e2e_speed.csv counted the same bytes, at every context."""
    from bench.model import MODELS

    cfg = MODELS["qwen3-30b-a3b"]
    led = ladder.step_ledger(cfg, 1, 1024, cfg.layers * cfg.moe.K)
    assert led["routed experts"] == 48 * 8 * 3 * 2048 * 768 * 2
    assert led["KV cache"] == 48 * 2 * 1024 * 4 * 128 * 2
    rows = [r for r in ladder.results("e2e_speed.csv") if r["T"] == "1" and r["layers"] == "48"]
    assert rows
    for row in rows:
        led = ladder.step_ledger(cfg, 1, int(row["ctx"]), cfg.layers * cfg.moe.K)
        assert sum(led.values()) == int(row["bytes"]), row


def test_results_are_the_h200_csv():
    rows = ladder.results("speed.csv")
    assert rows and {r["gpu"] for r in rows} == {"NVIDIA H200"}
    assert 3.0 < ladder.read_ceiling_tbps() < 6.0


def test_pivot_and_table():
    rows = [{"p": "a", "T": "2", "v": "1"}, {"p": "a", "T": "10", "v": "2"}, {"p": "b", "T": "2", "v": "3"}]
    piv = ladder.pivot(rows, "p", "T", "v", fmt=str)
    assert piv == [{"p": "a", "2": "1", "10": "2"}, {"p": "b", "2": "3", "10": "–"}]
    assert ladder.table(piv).splitlines()[0].split() == ["p", "2", "10"]


def test_source_excerpt():
    text = ladder.source(kp._down_tile_3d, "acc = tl.zeros", "return acc")
    assert text.splitlines()[0].split(maxsplit=1)[1].startswith("acc = tl.zeros")
    assert "return acc" in text.splitlines()[-1]
    with pytest.raises(ValueError):
        ladder.source(kp.warp_down_kernel, "no such line")


def test_recorded_jobs_are_the_h200_launches_and_leave_no_trace():
    runtime_before, pdl_before = configs._runtime, wp.USE_PDL
    launches = ladder.recorded_jobs("warp", QWEN, 1)
    assert [ln.kernel for ln in launches] == ["warp_gate_up_kernel", "warp_down_kernel"]
    tuned = ladder.tuned_config("warp", QWEN, 1)
    gate_up = launches[0].job
    assert gate_up.constexprs["USE_PDL"] is True
    assert gate_up.constexprs["BLOCK_I"] == tuned["gate_up"]["BLOCK_I"]
    assert gate_up.num_warps == tuned["gate_up"]["num_warps"]
    assert launches[0].grid == (QWEN.K * QWEN.I // tuned["gate_up"]["BLOCK_I"],)
    # everything patched for the recording is back
    assert configs._runtime is runtime_before and wp.USE_PDL is pdl_before
    if warpdecode.INTERPRET:  # the H200 table read while recording is not left in the cache
        assert configs.load_tuned() == {}


def test_aten_ops_sees_the_loops_syncs():
    s = warpdecode.get_preset("tiny")
    w13, w2 = s.weights()
    x = torch.randn(2, s.H).to(torch.bfloat16)
    tw, ti = warpdecode.route(torch.randn(2, s.E), s.K)
    ops = ladder.aten_ops(warpdecode.loop.moe_loop, x, w13, w2, tw, ti)
    syncs = [n for n, view in ops if n in ladder.SYNC_OPS]
    assert len(syncs) == 1 + torch.unique(ti).numel()
