"""What ``moe`` does with inputs an operator meets inside real models: tensors that need gradients
(a clear error, never a silent ``None``), meta tensors (the output's shape, no kernel), views with a
pending negation (rejected by name), several Python threads at once (correct), and, through the
transformers integration, expert-parallel sentinel ids (skipped, never read past ``w13``)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
import torch

import warpdecode as wd
from warpdecode import api
from warpdecode.integrations import transformers as wd_hf

DEV = wd.DEFAULT_DEVICE
KERNEL_METHODS = ["warp", "expert", "auto"]


def _layer(T=3, H=40, I=24, E=5, K=2, dtype=torch.float32, seed=0):  # noqa: E741
    shape = wd.MoEShape("policy", H=H, I=I, E=E, K=K)
    w13, w2 = (w.to(DEV) for w in shape.weights(dtype=dtype, seed=seed))
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(T, H, generator=g).to(dtype).to(DEV)
    tw, ids = wd.route(torch.randn(T, E, generator=g).to(DEV), K)
    return x, w13, w2, tw, ids


@pytest.mark.parametrize("method", KERNEL_METHODS)
@pytest.mark.parametrize("which", ["x", "w13", "topk_weights"])
def test_a_gradient_that_would_be_dropped_is_an_error(method, which):
    x, w13, w2, tw, ids = _layer()
    args = dict(x=x, w13=w13, w2=w2, topk_weights=tw)
    args[which] = args[which].clone().requires_grad_(True)
    with pytest.raises(RuntimeError, match="computes no gradients"):
        wd.moe(args["x"], args["w13"], args["w2"], args["topk_weights"], ids, method=method)
    with torch.no_grad():  # decode: no gradient asked for
        y = wd.moe(args["x"], args["w13"], args["w2"], args["topk_weights"], ids, method=method)
    assert wd.rel_error(y, wd.reference_moe(x, w13, w2, tw, ids)) < 1e-5


def test_loop_carries_gradients_that_match_float64():
    x, w13, w2, tw, ids = _layer()
    leaves = [t.clone().double().requires_grad_(True) for t in (x, w13, w2, tw)]
    wd.moe(*[t.float() for t in leaves], ids, method="loop").sum().backward()
    ref = [t.detach().clone().requires_grad_(True) for t in leaves]
    wd.reference_moe(*ref, ids).sum().backward()
    for got, want in zip(leaves, ref, strict=True):
        assert got.grad is not None and wd.rel_error(got.grad, want.grad) < 1e-5


@pytest.mark.parametrize("method", ["loop", *KERNEL_METHODS])
def test_meta_tensors_give_the_output_shape(method):
    x, w13, w2, tw, ids = (t.to("meta") for t in _layer(T=7, dtype=torch.bfloat16))
    y = wd.moe(x, w13, w2, tw, ids, method=method)
    assert y.device.type == "meta" and y.shape == (7, 40) and y.dtype == torch.bfloat16


@pytest.mark.parametrize("which", ["x", "w13", "w2", "topk_weights"])
def test_a_pending_negation_is_rejected_by_name(which):
    x, w13, w2, tw, ids = _layer()
    args = dict(x=x, w13=w13, w2=w2, topk_weights=tw)
    args[which] = torch._neg_view(args[which])
    with pytest.raises(ValueError, match=f"^{which} is a view with a pending negation"):
        wd.moe(args["x"], args["w13"], args["w2"], args["topk_weights"], ids, method="warp")
    resolved = {k: v.resolve_neg() for k, v in args.items()}
    y = wd.moe(resolved["x"], resolved["w13"], resolved["w2"], resolved["topk_weights"], ids, method="warp")
    want = wd.reference_moe(resolved["x"], resolved["w13"], resolved["w2"], resolved["topk_weights"], ids)
    assert wd.rel_error(y, want) < 1e-5


def test_threads_calling_at_once_each_get_their_layer():
    layers = [_layer(T=t, seed=t) for t in (1, 2, 3, 4)]
    out, errors = {}, []

    def work(i, method):
        try:
            x, w13, w2, tw, ids = layers[i]
            out[(i, method)] = wd.rel_error(wd.moe(x, w13, w2, tw, ids, method=method),
                                            wd.reference_moe(x, w13, w2, tw, ids))
        except Exception as e:  # noqa: BLE001  (reported below, with the thread's inputs)
            errors.append((i, method, repr(e)))

    threads = [threading.Thread(target=work, args=(i, m)) for i in range(4) for m in ("expert", "warp")] * 1
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(out) == 8 and max(out.values()) < 1e-5, out


@pytest.mark.parametrize("sentinel", ["num_local_experts", "large"])
def test_expert_parallel_sentinel_ids_are_skipped(sentinel):
    """transformers' expert parallelism names experts on other ranks by the id num_local_experts
    (weight 0). Those slots add nothing, and nothing reads past w13 (a large id included)."""
    x, w13, w2, tw, ids = _layer(T=4, E=5, K=3)
    bad = torch.tensor([[1, 0, 0], [0, 0, 1], [0, 1, 0], [1, 1, 1]], dtype=torch.bool, device=ids.device)
    ep_ids = torch.where(bad, 5 if sentinel == "num_local_experts" else 10**9, ids.long())
    ep_tw = torch.where(bad, 0.0, tw)
    module = SimpleNamespace(gate_up_proj=w13, down_proj=w2)
    with torch.no_grad():
        y = wd_hf.warpdecode_experts_forward(module, x, ep_ids, ep_tw)
    want = wd.reference_moe(x, w13, w2, ep_tw, torch.where(bad, 0, ids.long()))  # weight 0: no share
    assert not y.isnan().any() and wd.rel_error(y, want) < 1e-5


def test_the_integration_refuses_to_drop_gradients():
    x, w13, w2, tw, ids = _layer()
    module = SimpleNamespace(gate_up_proj=w13.clone().requires_grad_(True), down_proj=w2)
    with pytest.raises(RuntimeError, match="computes no gradients"):
        wd_hf.warpdecode_experts_forward(module, x, ids, tw)


def _routed(T, E=7, K=3, H=40, I=24, seed=5):  # noqa: E741
    g = torch.Generator().manual_seed(seed)
    return torch.randn(T, H, generator=g).to(DEV), *wd.route(torch.randn(T, E, generator=g).to(DEV), K)


@pytest.mark.parametrize("method", ["auto", "warp"])
def test_batch_invariant_gives_each_token_the_same_bits_in_any_batch(method):
    """Token rows computed alone (T = 1) and inside batches of 2…64 other tokens, in two orders:
    bitwise the same with batch_invariant=True."""
    shape = wd.MoEShape("bi", H=40, I=24, E=7, K=3)
    w13, w2 = (w.to(DEV).to(torch.bfloat16) for w in shape.weights(dtype=torch.float32, seed=3))
    x, tw, ids = _routed(64)
    x = x.to(torch.bfloat16)
    alone = torch.cat([wd.moe(x[t:t + 1], w13, w2, tw[t:t + 1], ids[t:t + 1], method=method, batch_invariant=True)
                       for t in range(8)])
    for T in (2, 8, 64):
        y = wd.moe(x[:T], w13, w2, tw[:T], ids[:T], method=method, batch_invariant=True)
        assert torch.equal(y[: min(T, 8)], alone[: min(T, 8)]), T
        perm = torch.randperm(T, generator=torch.Generator().manual_seed(T))
        yp = wd.moe(x[:T][perm], w13, w2, tw[:T][perm], ids[:T][perm], method=method, batch_invariant=True)
        assert torch.equal(yp, y[perm]), T
    assert wd.rel_error(y, wd.reference_moe(x, w13, w2, tw, ids)) <= 1.1 * wd.rounding_floor(
        wd.reference_moe(x, w13, w2, tw, ids), torch.bfloat16) + 1e-6


@pytest.mark.parametrize("kw", [dict(method="expert"), dict(method="loop"), dict(method="warp", schedule="grouped")])
def test_batch_invariant_refuses_what_it_cannot_promise(kw):
    x, w13, w2, tw, ids = _layer()
    with pytest.raises(ValueError, match="batch_invariant|grouped"):
        wd.moe(x, w13, w2, tw, ids, batch_invariant=True, **kw)


def test_deterministic_never_runs_the_grouped_schedule(monkeypatch):
    """The grouped schedule (FP32 atomics) is the one that can change an output's last bit between
    runs; with deterministic=True a config that picks it runs the pair, and asking for it is an error."""
    from warpdecode import api

    ran = []
    monkeypatch.setattr(api, "moe_warp", lambda *a, schedule=None, **k: ran.append(schedule) or a[0])
    monkeypatch.setattr(api.configs, "warp_config", lambda *a: {"gate_up": {}, "down": {}, "grouped": {}})
    x, w13, w2, tw, ids = _layer(T=4)
    wd.moe(x, w13, w2, tw, ids, method="warp", deterministic=True)
    assert ran == ["split"]
    with pytest.raises(ValueError, match="neither deterministic"):
        wd.moe(x, w13, w2, tw, ids, method="warp", schedule="grouped", deterministic=True)


def test_batch_invariant_runs_the_pair_at_one_tokens_tiles_whatever_the_batch(monkeypatch):
    """On a GPU the tuned tiles (and the schedule) change with T; batch_invariant=True takes T = 1's
    pair tiles at every T, so no sum's order depends on the batch (the bitwise check on the GPU:
    tests/test_gpu.py)."""
    from warpdecode import api

    tiles = {1: {"gate_up": {"BLOCK_I": 1}, "down": {"BLOCK_H": 4}},
             8: {"gate_up": {"BLOCK_I": 4}, "down": {"BLOCK_H": 8}, "grouped": {}}}
    monkeypatch.setattr(api.configs, "warp_config", lambda H, I, E, K, T: tiles[1 if T == 1 else 8])  # noqa: E741
    ran = []
    monkeypatch.setattr(api, "moe_warp", lambda *a, config=None, schedule=None, **k: ran.append((config, schedule))
                        or a[0])
    for T in (1, 3, 8, 64):
        x, w13, w2, tw, ids = _layer(T=T)
        wd.moe(x, w13, w2, tw, ids, batch_invariant=True)
    assert ran == [({"gate_up": {"BLOCK_I": 1}, "down": {"BLOCK_H": 4}}, "split")] * 4


@pytest.mark.parametrize("method", ["warp", "expert"])
def test_moe_traces_whole_under_torch_compile(method):
    """fullgraph=True: moe is one operator (warpdecode::moe) with a fake kernel for its shape, and
    nothing else enters the graph (the validation runs at trace time, the ids are guarded in the
    kernels); the result is eager's bits, and ids outside [0, E) give NaN rows there as in eager.
    ``strict=True`` adds its device-side assert to the graph."""
    from torch._dynamo.testing import CompileCounterWithBackend

    x, w13, w2, tw, ids = _layer(T=3)
    torch._dynamo.reset()
    cnt = CompileCounterWithBackend("eager")
    f = torch.compile(lambda x, tw, ids: wd.moe(x, w13, w2, tw, ids, method=method), fullgraph=True, backend=cnt)
    assert torch.equal(f(x, tw, ids), wd.moe(x, w13, w2, tw, ids, method=method))
    calls = [n.target for n in cnt.graphs[0].graph.nodes if n.op == "call_function"]
    assert len(calls) == 1 and "warpdecode.moe" in str(calls[0]), calls
    assert torch.isnan(f(x, tw, torch.full_like(ids, 5))).all()
    torch._dynamo.reset()
    strict = torch.compile(lambda x, tw, ids: wd.moe(x, w13, w2, tw, ids, method=method, strict=True),
                           fullgraph=True)
    with pytest.raises(RuntimeError, match=r"topk_ids must lie in \[0, E=5\)"):
        strict(x, tw, torch.full_like(ids, 5))
    assert torch.library.opcheck(torch.ops.warpdecode.moe.default, (x, w13, w2, tw, ids.to(torch.int32), method,
                                                                   None, "native", None, False, False),
                                 test_utils=("test_schema", "test_faketensor")) is not None
    # at trace time the clear error ends the trace (under fullgraph, Dynamo reports it as the exception it saw)
    with pytest.raises(Exception, match=r"method must be one of \('loop', 'expert', 'warp', 'auto'\), got 'nope'"):
        torch.compile(lambda x: wd.moe(x, w13, w2, tw, ids, method="nope"), fullgraph=True)(x)


# ---------------------------------------------------------------------------------------------
# FP8 weights under torch.compile: warpdecode::moe_fp8

#: every way moe reads FP8 weights: dequantized (loop), the weight-only and w8a8 expert path, warp decode's two
#: schedules, auto
FP8_VARIANTS = [dict(method="loop"), dict(method="expert"), dict(method="expert", act_format="fp8"),
                dict(method="warp"), dict(method="warp", schedule="grouped"), dict(method="auto")]


def _fp8_layer(fmt, seed=0):
    """(x, w13, w2, topk_weights, topk_ids), T = 2, H = I = 32, E = 3, K = 2, in bf16 with the weights
    in FP8 ``fmt`` (one 32-column MXFP8 group, partial 128 × 128 blocks)."""
    x, w13, w2, tw, ids = _layer(T=2, H=32, I=32, E=3, K=2, dtype=torch.bfloat16, seed=seed)
    return (x, *wd.quantize_experts(w13, w2, fmt), tw, ids)


def _moe_fp8_nodes(gm) -> int:
    return sum(n.op == "call_function" and "warpdecode.moe_fp8" in str(n.target) for n in gm.graph.nodes)


@pytest.mark.parametrize("fmt", wd.quant.FORMATS)
def test_fp8_moe_traces_whole_under_torch_compile(fmt):
    """fullgraph=True with FP8 weight objects as the compiled function's inputs, through Dynamo's
    eager and aot_eager backends: each moe call is one operator, warpdecode::moe_fp8 (the e4m3
    tensors, their scales, the format), for every method that reads FP8 weights, and gives eager's
    bits. The ids are guarded in the kernels (no host sync, nothing else in the graph)."""
    from torch._dynamo.testing import CompileCounterWithBackend

    x, q13, q2, tw, ids = _fp8_layer(fmt)
    want = [wd.moe(x, q13, q2, tw, ids, **kw) for kw in FP8_VARIANTS]
    for backend in ("eager", "aot_eager"):
        cnt = CompileCounterWithBackend(backend)
        torch._dynamo.reset()
        f = torch.compile(lambda x, q13, q2, tw, ids: [wd.moe(x, q13, q2, tw, ids, **kw) for kw in FP8_VARIANTS],
                          fullgraph=True, backend=cnt)
        for got, y, kw in zip(f(x, q13, q2, tw, ids), want, FP8_VARIANTS, strict=True):
            assert torch.equal(got, y), (backend, kw)
        assert cnt.frame_count == 1 and _moe_fp8_nodes(cnt.graphs[0]) == len(FP8_VARIANTS), backend
    for y in f(x, q13, q2, tw, torch.full_like(ids, 3)):  # ids outside [0, E): NaN, guarded in the kernels
        assert torch.isnan(y).all()
    torch._dynamo.reset()


def test_fp8_weights_held_by_a_module_trace_too():
    """The form a model takes: the FP8 pair as attributes of a module, compiled whole (aot_eager).
    Another module with another pair of the same shapes runs the same graph (no recompile)."""
    from torch._dynamo.testing import CompileCounterWithBackend

    class Experts(torch.nn.Module):
        def __init__(self, w13, w2):
            super().__init__()
            self.w13, self.w2 = w13, w2

        def forward(self, x, tw, ids):
            return wd.moe(x, self.w13, self.w2, tw, ids, method="warp") * 2

    cnt = CompileCounterWithBackend("aot_eager")
    torch._dynamo.reset()
    for seed in (0, 1):
        x, q13, q2, tw, ids = _fp8_layer("block128", seed=seed)
        got = torch.compile(Experts(q13, q2), fullgraph=True, backend=cnt)(x, tw, ids)
        assert torch.equal(got, wd.moe(x, q13, q2, tw, ids, method="warp") * 2), seed
    assert cnt.frame_count == 1
    torch._dynamo.reset()


@pytest.mark.parametrize("fmt", wd.quant.FORMATS)
def test_fp8_operator_schema_fake_kernel_and_meta_tensors(fmt):
    """warpdecode::moe_fp8's schema and fake kernel pass opcheck; with every tensor on the meta
    device, moe (eager and the operator itself) gives the output's shape and dtype without a kernel."""
    x, q13, q2, tw, ids = _fp8_layer(fmt)
    args = (x, q13.weight, q13.scale, q2.weight, q2.scale, fmt, tw, ids.to(torch.int32), "warp", None, "native", None,
            False, False)
    # (opcheck's test_schema compares inputs with allclose, which has no float8 kernel: the schema's
    # promise, no argument mutated or aliased, is read off it instead)
    assert torch.library.opcheck(torch.ops.warpdecode.moe_fp8.default, args, test_utils=("test_faketensor",))
    assert all(a.alias_info is None for a in torch.ops.warpdecode.moe_fp8.default._schema.arguments)
    m13, m2 = wd.experts_from_checkpoint(q13.weight.to("meta"), q13.scale.to("meta"), q2.weight.to("meta"),
                                         q2.scale.to("meta"), format=fmt)
    mx, mtw, mids = (t.to("meta") for t in (x, tw, ids))
    for kw in FP8_VARIANTS:
        y = wd.moe(mx, m13, m2, mtw, mids, **kw)
        assert y.device.type == "meta" and y.shape == (2, 32) and y.dtype == torch.bfloat16, kw
    meta_args = tuple(a.to("meta") if isinstance(a, torch.Tensor) else a for a in args)
    y = torch.ops.warpdecode.moe_fp8(*meta_args)
    assert y.device.type == "meta" and y.shape == (2, 32) and y.dtype == torch.bfloat16


def test_fp8_checks_run_at_trace_time():
    """Under fullgraph=True the FP8 pair's checks end the trace with their clear errors, naming the
    argument (Dynamo reports each as the exception it saw)."""
    x, q13, q2, tw, ids = _fp8_layer("block128")
    _, w13, w2, _, _ = _layer(T=2, H=32, I=32, E=3, K=2, dtype=torch.bfloat16)
    m13, m2 = wd.quantize_experts(w13, w2, "mxfp8")
    stale = wd.quant.BlockFP8Weights.wrap(q2.weight, q2.scale[:, :, :0], dtype=torch.bfloat16, gate_up=False,
                                          name="w2")  # scales cut after the pair was built
    for (xx, a, b), kw, message in [
            ((x, q13, w2), {}, "w13 is FP8 weights but w2 is not"),
            ((x, q13, m2), {}, "one FP8 format"),
            ((x.half(), q13, q2), {}, "w13 holds FP8 weights for torch.bfloat16 activations"),
            ((x, q13, stale), {}, r"w2: block128 scales of a weight \(3, 32, 32\) must have shape \(3, 1, 1\)")]:
        torch._dynamo.reset()
        f = torch.compile(lambda x, a, b, kw=kw: wd.moe(x, a, b, tw, ids, **kw), fullgraph=True, backend="eager")
        with pytest.raises(Exception, match=message):
            f(xx, a, b)
    torch._dynamo.reset()


def test_the_fp8_device_check_runs_at_trace_time(monkeypatch):
    """On a GPU, FP8 weights' capability check reads the device at trace time as a constant (Dynamo
    cannot trace torch.cuda.get_device_capability, stood in for here by a query that refuses to be
    traced): an Ampere GPU ends the trace with the reason, an Ada or Hopper one traces nothing."""
    from warpdecode import api

    def capability(device=None):
        torch._dynamo.graph_break()  # eager: nothing; traced under fullgraph: an error, as Dynamo gives the real one
        return cap

    monkeypatch.setattr(torch.cuda, "get_device_capability", capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100")
    f = torch.compile(lambda t: api.check_fp8_device(torch.device("cuda", 0), "FP8 weights") or t + 1, fullgraph=True,
                      backend="eager")
    cap = (8, 0)
    torch._dynamo.reset()
    with pytest.raises(Exception, match=r"FP8 weights needs a GPU with FP8 tensor cores.*A100 is 8\.0"):
        f(torch.ones(2))
    cap = (9, 0)
    torch._dynamo.reset()
    assert torch.equal(f(torch.ones(2)), torch.full((2,), 2.0))
    torch._dynamo.reset()


def test_import_leaves_dynamo_unloaded_and_gpu_query_marked_as_the_decorator_marks():
    """``import warpdecode`` costs little beyond torch: it does not import Dynamo (about a second),
    which torch.compiler.assume_constant_result would; the device query carries exactly the mark
    that decorator sets, so Dynamo still folds it into a constant at trace time."""
    import subprocess
    import sys

    code = "import sys, warpdecode; assert 'torch._dynamo' not in sys.modules, 'import warpdecode imported Dynamo'"
    subprocess.run([sys.executable, "-c", code], check=True)

    def query():
        return 0

    marked = torch.compiler.assume_constant_result(query)
    assert vars(marked) == {k: v for k, v in vars(api._gpu).items() if k.startswith("_dynamo")}
