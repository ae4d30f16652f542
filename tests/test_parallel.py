"""Tensor- and expert-parallel warp decode (warpdecode.parallel) on the CPU: 2 and 4 processes over
gloo, kernels in Triton's interpreter, each rank's y against the float64 reference of the whole
layer; and the layouts that cannot work, refused before anything launches."""

from __future__ import annotations

import os
import tempfile
from datetime import timedelta
from unittest import mock

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import warpdecode as wd
from warpdecode import parallel

SHAPE = dict(H=40, I=24, E=8, K=3)  # I divisible by 2 and 4, E by 2 and 4


def _inputs(T: int, dtype=torch.bfloat16, shape: dict = SHAPE):
    layer = wd.MoEShape("par", **shape)
    w13, w2 = layer.weights(dtype=dtype, seed=21)
    g = torch.Generator().manual_seed(22 + T)
    x = torch.randn(T, shape["H"], generator=g).to(dtype)
    tw, ids = wd.route(torch.randn(T, shape["E"], generator=g), shape["K"])
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


# tp over two ranks; ep over four, where at T = 1 (K = 3 of 8 experts, two a rank) a rank holds no routed
# expert and adds zeros
@pytest.mark.parametrize("layout,world", [("tp", 2), ("ep", 4)], ids=["tp-2", "ep-4"])
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


# ---------------------------------------------------------------------------------------------
# what one rank does wrong: every rank hears of it before any data collective


def _outcome(fn) -> str:
    try:
        with torch.no_grad():
            fn()
        return "ok"
    except Exception as e:  # the message each rank got
        return f"{type(e).__name__}: {e}"


def _faulty_worker(rank: int, world: int, init: str, out: str):
    os.environ["TRITON_INTERPRET"] = "1"
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world, timeout=timedelta(seconds=60))
    try:
        x, w13, w2, tw, ids = _inputs(2)
        w13_r, w2_r = parallel.shard_tp(w13, w2, rank, world)
        w13_e, w2_e, first = parallel.shard_ep(w13, w2, rank, world)
        E = SHAPE["E"]
        bad_ids = ids.clone()
        if rank == 1:
            bad_ids[0, 0] = E
        x_t, _, _, tw_t, ids_t = _inputs(1 + rank)  # T = 1 on rank 0, 2 on rank 1
        _, _, _, tw_o, ids_o = _inputs(3 + rank)  # other routing on rank 1
        got = {
            "T": _outcome(lambda: parallel.moe_tp(x_t, w13_r, w2_r, tw_t, ids_t, method="warp")),
            "dtype": _outcome(lambda: parallel.moe_tp(x.float() if rank else x, w13_r.float() if rank else w13_r,
                                                      w2_r.float() if rank else w2_r, tw, ids, method="warp")),
            "id tp": _outcome(lambda: parallel.moe_tp(x, w13_r, w2_r, tw, bad_ids, method="warp")),
            "id ep": _outcome(lambda: parallel.moe_ep(x, w13_e, w2_e, tw, bad_ids, first_expert=first,
                                                      num_experts=E, method="warp")),
            "routing": _outcome(lambda: parallel.moe_tp(x, w13_r, w2_r, tw_o[:2], ids_o[:2], method="warp",
                                                        check_routing=True)),
        }
        unchecked = ids.clone()
        unchecked[0, 0] = E  # on every rank, where nothing may be read back (capture): token 0 comes out NaN
        with torch.no_grad(), mock.patch.object(parallel, "_unchecked", lambda x: True):
            got["unchecked ep"] = parallel.moe_ep(x, w13_e, w2_e, tw, unchecked, first_expert=first, num_experts=E,
                                                  method="warp").isnan().any(1).tolist()
        with torch.no_grad():  # and the group is still in step: a good call gives the layer
            got["after"] = parallel.moe_ep(x, w13_e, w2_e, tw, ids, first_expert=first, num_experts=E,
                                           method="warp", check_routing=True)
        torch.save(got, f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


def test_a_fault_on_one_rank_raises_on_every_rank():
    """Ranks that disagree on T aborted a process inside gloo; an out-of-range id on one rank left the
    others with "Connection closed by peer"; other routing on one rank gave a wrong y silently. Now the
    ranks agree before any data collective, and every rank raises an error that says what differs."""
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(_faulty_worker, args=(2, f"file://{d}/rendezvous", f"{d}/got"), nprocs=2, join=True)
        got = [torch.load(f"{d}/got.{r}") for r in range(2)]
    for r in range(2):
        assert got[r]["T"].startswith("ValueError: the ranks disagree on the call's inputs (T): rank 0: layout=tp, "
                                      "T=1"), got[r]["T"]
        assert "(x.dtype): " in got[r]["dtype"] and "x.dtype=torch.float32" in got[r]["dtype"], got[r]["dtype"]
        assert got[r]["routing"] == ("ValueError: the ranks disagree on the routing: rank 1 holds other topk_ids or "
                                     "topk_weights than rank 0; every rank must be given the same routing")
    for case, name in (("id tp", "E=8"), ("id ep", "num_experts=8")):
        assert got[1][case].startswith(f"ValueError: topk_ids must lie in [0, {name}), got values in ["), got[1][case]
        assert got[0][case] == ("ValueError: warpdecode.parallel: rank 1 of the group refused its inputs (the error "
                                "is raised there); no rank computes the layer"), got[0][case]
    assert got[0]["unchecked ep"] == got[1]["unchecked ep"] == [True, False]
    x, w13, w2, tw, ids = _inputs(2)
    ref = wd.reference_moe(x, w13, w2, tw, ids)
    assert torch.equal(got[0]["after"], got[1]["after"])
    assert wd.rel_error(got[0]["after"], ref) <= 1.1 * wd.rounding_floor(ref, torch.bfloat16) + 1e-7


def _fp8_worker(rank: int, world: int, init: str, out: str):
    os.environ["TRITON_INTERPRET"] = "1"
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world, timeout=timedelta(seconds=60))
    try:
        x, w13, w2, tw, ids = _inputs(2, shape=FP8_SHAPE)
        q13, q2 = wd.quantize_experts(w13, w2, format="mxfp8")
        got = {}
        for layout in ("tp", "ep"):
            with torch.no_grad():
                got[layout] = parallel.ParallelMoE(q13, q2, layout, method="warp")(x, tw, ids)
        w13_r, w2_r = parallel.shard_tp(q13, q2, rank, world)
        got["grad mode"] = parallel.moe_tp(x, w13_r, w2_r, tw, ids, method="expert")  # grad mode on, nothing needs one
        b13, b2 = wd.quantize_experts(w13, w2, format="block128")
        got["block128 tp"] = _outcome(lambda: parallel.ParallelMoE(b13, b2, "tp"))
        torch.save(got, f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


FP8_SHAPE = dict(H=64, I=64, E=4, K=2)  # I / 2 = 32: one MXFP8 scale group per rank's slice


def test_fp8_weights_shard_both_ways():
    """FP8 weights through both layouts (tp raised a TypeError, "not subscriptable"; moe_tp in grad
    mode an AttributeError), each rank's y against the float64 reference of the whole layer; and a
    slice that would cut a scale group, refused by name on every rank."""
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(_fp8_worker, args=(2, f"file://{d}/rendezvous", f"{d}/got"), nprocs=2, join=True)
        got = [torch.load(f"{d}/got.{r}") for r in range(2)]
    x, w13, w2, tw, ids = _inputs(2, shape=FP8_SHAPE)
    q13, q2 = wd.quantize_experts(w13, w2, format="mxfp8")
    ref = wd.reference_moe(x, q13, q2, tw, ids)
    floor = wd.rounding_floor(ref, torch.bfloat16)
    for r in range(2):
        for case in ("tp", "ep"):
            assert torch.equal(got[r][case], got[0][case]) and wd.rel_error(got[r][case], ref) <= 1.1 * floor + 1e-7
        assert wd.rel_error(got[r]["grad mode"], ref) < 2e-2  # the expert path rounds its intermediate
        assert got[r]["block128 tp"] == ("ValueError: tp=2 must cut I=64 into whole block128 scale groups: I/tp=32 "
                                         "must be a multiple of 128"), got[r]["block128 tp"]
