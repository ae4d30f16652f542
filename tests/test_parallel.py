"""Tensor- and expert-parallel warp decode (warpdecode.parallel) on the CPU: 2 and 4 processes over
gloo, kernels in Triton's interpreter, each rank's y against the float64 reference of the whole
layer; and the layouts that cannot work, refused before anything launches."""

from __future__ import annotations

import os
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import warpdecode as wd
from warpdecode import parallel

SHAPE = dict(H=40, I=24, E=8, K=3)  # I divisible by 2 and 4, E by 2 and 4


def _inputs(T: int, dtype=torch.bfloat16):
    shape = wd.MoEShape("par", **SHAPE)
    w13, w2 = shape.weights(dtype=dtype, seed=21)
    g = torch.Generator().manual_seed(22 + T)
    x = torch.randn(T, SHAPE["H"], generator=g).to(dtype)
    tw, ids = wd.route(torch.randn(T, SHAPE["E"], generator=g), SHAPE["K"])
    return x, w13, w2, tw, ids


def _worker(rank: int, world: int, init: str, out: str, layout: str, method: str):
    os.environ["TRITON_INTERPRET"] = "1"
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        results = {}
        with torch.no_grad():
            for T in (1, 3, 8):
                x, w13, w2, tw, ids = _inputs(T)
                layer = parallel.ParallelMoE(w13, w2, layout, method=method)
                results[T] = layer(x, tw, ids)
        torch.save(results, f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("layout", ["tp", "ep"])
def test_every_rank_gets_the_whole_layer(layout, world):
    method = "warp"
    with tempfile.TemporaryDirectory() as d:
        init, out = f"file://{d}/rendezvous", f"{d}/y"
        mp.spawn(_worker, args=(world, init, out, layout, method), nprocs=world, join=True)
        ranks = [torch.load(f"{out}.{r}") for r in range(world)]
    for T in (1, 3, 8):
        x, w13, w2, tw, ids = _inputs(T)
        ref = wd.reference_moe(x, w13, w2, tw, ids)
        floor = wd.rounding_floor(ref, torch.bfloat16)
        for r in range(world):
            y = ranks[r][T]
            assert y.shape == (T, SHAPE["H"]) and y.dtype == torch.bfloat16 and not y.isnan().any()
            assert torch.equal(y, ranks[0][T]), (layout, world, T, r)  # one all-reduce: the same bits everywhere
            # the partials are summed in FP32 and rounded once, as on one GPU
            assert wd.rel_error(y, ref) <= 1.1 * floor + 1e-7, (layout, world, T, wd.rel_error(y, ref) / floor)


def test_layouts_that_cannot_shard_are_refused_by_name():
    _, w13, w2, _, _ = _inputs(1)
    with pytest.raises(ValueError, match=r"tp=5 must divide the intermediate size I=24"):
        parallel.shard_tp(w13, w2, 0, 5)
    with pytest.raises(ValueError, match=r"ep=3 must divide the number of experts E=8"):
        parallel.shard_ep(w13, w2, 0, 3)
    with pytest.raises(ValueError, match=r"rank=2 must lie in \[0, tp=2\)"):
        parallel.shard_tp(w13, w2, 2, 2)


def test_the_tp_slices_put_the_layer_back_together():
    _, w13, w2, _, _ = _inputs(1)
    parts = [parallel.shard_tp(w13, w2, r, 4) for r in range(4)]
    I = SHAPE["I"]  # noqa: E741
    gate = torch.cat([p[0][:, : I // 4] for p in parts], dim=1)
    up = torch.cat([p[0][:, I // 4:] for p in parts], dim=1)
    assert torch.equal(torch.cat([gate, up], dim=1), w13)
    assert torch.equal(torch.cat([p[1] for p in parts], dim=2), w2)


def test_without_a_process_group_it_says_so():
    x, w13, w2, tw, ids = _inputs(1)
    with pytest.raises(RuntimeError, match="torch.distributed initialized"), torch.no_grad():
        parallel.moe_tp(x, w13, w2, tw, ids)


def _disagreeing_worker(rank: int, world: int, init: str, out: str):
    os.environ["TRITON_INTERPRET"] = "1"
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        _, w13, w2, _, _ = _inputs(1)
        try:
            parallel.ParallelMoE(w13, w2, "tp" if rank == 0 else "ep")
            msg = "built"
        except ValueError as e:
            msg = str(e)
        with open(f"{out}.{rank}", "w") as f:
            f.write(msg)
    finally:
        dist.destroy_process_group()


def test_ranks_that_disagree_on_the_layout_are_refused_on_every_rank():
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(_disagreeing_worker, args=(2, f"file://{d}/rendezvous", f"{d}/msg"), nprocs=2, join=True)
        msgs = [open(f"{d}/msg.{r}").read() for r in range(2)]
    assert all(m.startswith("the ranks disagree on the layer or the layout") for m in msgs), msgs
