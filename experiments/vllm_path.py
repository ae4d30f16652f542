"""vLLM's Triton MoE path (``fused_experts``), imported from the folder ``tools/vllm_bundle.sh`` builds
from a vLLM wheel, on a machine where vLLM itself is not installed:

    import vllm_path
    v = vllm_path.load()                     # $VLLM_BUNDLE, else ~/vllm, else .vllm/ in the checkout
    print(v.describe())                      # vLLM's version, the platform, each op's origin
    y = v.fused_experts(x, w13, w2, topk_weights, topk_ids)                         # bf16
    y = v.fused_experts(x, q13, q2, topk_weights, topk_ids,                          # FP8 block-128 w8a8
                        quant_config=v.fp8_block_quant_config(s13, s2))

What ``fused_experts`` runs for decode (``fused_moe.fused_experts_impl``), and where each op lives:

    config      try_get_optimal_moe_config: the JSON tuned for (E, N = I, the GPU) if vLLM ships one,
                the batch size nearest T; else get_default_config
    quantize    FP8 only: activations per token group of 128 to e4m3 with one fp32 scale each
                (per_token_group_quant_fp8 → torch.ops._C.per_token_group_fp8_quant)
    align       moe_align_block_size → torch.ops._moe_C.moe_align_block_size; skipped where
                T·K·4 ≤ E (each (token, slot) its own block: ``naive_block_assignment``)
    GEMM 1      fused_moe_kernel (Triton): x gathered, times w13 of each block's expert
    activation  torch.ops._C.silu_and_mul: silu(gate) · up
    quantize    FP8 only: the intermediate, as above
    GEMM 2      fused_moe_kernel: times w2, each row scaled by its routing weight
    sum         torch.ops._moe_C.moe_sum: the K rows of each token

    torch.ops._C.silu_and_mul, _C.per_token_group_fp8_quant          vllm/_C_stable_libtorch.abi3.so
    torch.ops._moe_C.moe_align_block_size, _moe_C.moe_sum              vllm/_moe_C_stable_libtorch.abi3.so

Both libraries are built on torch's stable ABI; torch 2.11 exports every symbol they import. Where
one cannot load (a CPU-only torch without CUDA 13's runtime) or its kernel cannot launch, its ops
are replaced by the substitutes below, each named in :meth:`VllmPath.describe` and in every row
that used it; the GEMMs are vLLM's own Triton kernel either way.

Modules the bundle leaves out (engine configuration, distributed state: ``STUBBED`` in
tools/vllm_bundle.py) are stood in for by placeholders at import; once the import is done, calling
one raises, so none of them takes part in a call.
"""

from __future__ import annotations

import abc
import importlib
import importlib.abc
import importlib.machinery
import json
import lzma
import os
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]

#: Each compiled op the path calls: (namespace, name), its schema (as the library registers it).
OPS = {
    ("_C", "silu_and_mul"): "silu_and_mul(Tensor(a!) result, Tensor input) -> ()",
    ("_C", "per_token_group_fp8_quant"): (
        "per_token_group_fp8_quant(Tensor input, Tensor(a!) output_q, Tensor(b!) output_s, int group_size, "
        "float eps, float fp8_min, float fp8_max, bool scale_ue8m0, bool dummy_is_scale_transposed, "
        "bool dummy_is_tma_aligned) -> ()"),
    ("_moe_C", "moe_align_block_size"): (
        "moe_align_block_size(Tensor topk_ids, int num_experts, int block_size, Tensor(a!) sorted_token_ids, "
        "Tensor(b!) experts_ids, Tensor(c!) num_tokens_post_pad, Tensor? maybe_expert_map, "
        "Tensor(d!)? scatter_idx=None) -> ()"),
    ("_moe_C", "moe_sum"): ("moe_sum(Tensor input, Tensor(a!) output, Tensor? topk_ids=None, "
                            "Tensor? expert_map=None) -> ()"),
}
LIBRARY = {"_C": "_C_stable_libtorch", "_moe_C": "_moe_C_stable_libtorch"}


# -- placeholders for the modules the bundle leaves out ----------------------------------------------
_ARMED = False


class _StubMeta(abc.ABCMeta):
    """A placeholder class: any attribute is another placeholder, a call at import time returns one
    (or, with one callable argument, that argument: a decorator), and once armed a call raises."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        child = _stub(f"{cls.__qualname__}.{name}")
        type.__setattr__(cls, name, child)
        return child

    def __call__(cls, *args, **kwargs):
        if "_vllm_stub" not in cls.__dict__:  # a real class deriving from a placeholder
            return super().__call__(*args, **kwargs)
        if _ARMED:
            raise RuntimeError(f"{cls.__qualname__} stands in for a module tools/vllm_bundle.py leaves out "
                               "(STUBBED), and the vLLM path called it")
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        return _stub(f"{cls.__qualname__}()")

    def __getitem__(cls, item):
        return cls

    def register(cls, *args, **kwargs):  # ABCMeta's name: on a placeholder, a placeholder attribute like any other
        if "_vllm_stub" not in cls.__dict__:
            return super().register(*args, **kwargs)
        return _StubMeta.__getattr__(cls, "register")(*args, **kwargs)

    def __iter__(cls):
        return iter(())


def _stub(qualname: str) -> type:
    return _StubMeta(qualname.rsplit(".", 1)[-1], (), {"_vllm_stub": True, "__qualname__": qualname})


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _stub(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


def _first_rank() -> bool:
    """vllm.distributed.parallel_state's ``is_local_first_rank`` / ``is_global_first_rank`` where
    torch.distributed is not initialised (one process): True. vLLM's logger asks before logging once."""
    return True


#: The only placeholders that answer a call: {module: {name: function}}.
ANSWERS = {"vllm.distributed.parallel_state": {"is_local_first_rank": _first_rank,
                                               "is_global_first_rank": _first_rank}}


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Placeholder modules for the names under ``prefixes``, found after every real finder."""

    def __init__(self, prefixes):
        self.prefixes, self.made = tuple(prefixes), []

    def find_spec(self, name, path=None, target=None):
        if any(name == p or name.startswith(p + ".") for p in self.prefixes):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        m = _StubModule(spec.name)
        m.__path__ = []
        self.made.append(spec.name)
        return m

    def exec_module(self, module):
        for name, fn in ANSWERS.get(module.__name__, {}).items():
            setattr(module, name, fn)


# -- the substitutes -----------------------------------------------------------------------------------
# Used only where the compiled op cannot load or launch. Each computes what vLLM's CUDA kernel
# computes, rounding where it rounds.

def silu_and_mul(result, input):
    """_C::silu_and_mul: silu(gate) in fp32 rounded to the dtype, times up, rounded (the CUDA kernel's
    ``ACT_FN(x) * y`` in scalar_t)."""
    d = input.shape[-1] // 2
    act = torch.nn.functional.silu(input[..., :d].float()).to(input.dtype)
    result.copy_((act.float() * input[..., d:].float()).to(result.dtype))


def moe_sum(input, output, topk_ids=None, expert_map=None):
    """_moe_C::moe_sum: out[t] = Σ_k in[t, k]; for K ≤ 4 the CUDA kernel adds in the dtype, one
    rounding per add, else it calls torch's sum (fp32 accumulation, one rounding)."""
    assert topk_ids is None and expert_map is None, "the substitute moe_sum takes no expert map"
    K = input.shape[1]
    if 2 <= K <= 4:
        acc = input[:, 0]
        for k in range(1, K):
            acc = (acc.float() + input[:, k].float()).to(input.dtype)
        output.copy_(acc)
    else:
        torch.sum(input, dim=1, out=output)


def moe_align_block_size(topk_ids, num_experts, block_size, sorted_token_ids, experts_ids, num_tokens_post_pad,
                         maybe_expert_map=None, scatter_idx=None):
    """_moe_C::moe_align_block_size in torch ops (no host sync: a CUDA graph captures it). Each expert's
    (token, slot) indices (flat, ``t·K + j``) are padded to a multiple of ``block_size`` with the
    value T·K; ``experts_ids[b]`` is block b's expert; ``num_tokens_post_pad`` the padded total.
    Within an expert the indices ascend (the CUDA kernel's order may differ; no output depends on it)."""
    assert maybe_expert_map is None and scatter_idx is None, "the substitute align takes no expert map"
    flat = topk_ids.reshape(-1).long()
    n = flat.numel()
    counts = torch.zeros(num_experts, dtype=torch.long, device=flat.device).index_add_(0, flat, torch.ones_like(flat))
    padded = (counts + block_size - 1) // block_size * block_size
    pad_end = torch.cumsum(padded, 0)
    pad_start = pad_end - padded
    cnt_start = torch.cumsum(counts, 0) - counts
    order = torch.argsort(flat, stable=True)
    e = flat[order]
    pos = pad_start[e] + torch.arange(n, device=flat.device) - cnt_start[e]
    sorted_token_ids.fill_(n)
    sorted_token_ids.index_copy_(0, pos, order.to(sorted_token_ids.dtype))
    blocks = torch.arange(experts_ids.numel(), device=flat.device) * block_size
    experts_ids.copy_(torch.searchsorted(pad_end, blocks, right=True).clamp_(max=num_experts - 1))
    num_tokens_post_pad.copy_(pad_end[-1:])


def per_token_group_fp8_quant(input, output_q, output_s, group_size, eps, fp8_min, fp8_max, scale_ue8m0,
                              dummy_is_scale_transposed, dummy_is_tma_aligned):
    """_C::per_token_group_fp8_quant as vLLM's own Triton fallback computes it (``per_token_group_quant_fp8``'s
    branch for non-CUDA platforms: the same kernel and launch), row-major scales."""
    assert not dummy_is_scale_transposed, "the substitute writes row-major scales"
    from vllm.model_executor.layers.quantization.utils.fp8_utils import _per_token_group_quant_fp8
    from vllm.triton_utils import triton

    M = input.numel() // group_size
    BLOCK = triton.next_power_of_2(group_size)
    _per_token_group_quant_fp8[(M,)](input, output_q, output_s, group_size, input.shape[1], input.stride(0), eps,
                                     fp8_min=fp8_min, fp8_max=fp8_max, use_ue8m0=scale_ue8m0, BLOCK=BLOCK,
                                     num_warps=min(max(BLOCK // 256, 1), 8), num_stages=1)


SUBSTITUTES = {("_C", "silu_and_mul"): silu_and_mul, ("_C", "per_token_group_fp8_quant"): per_token_group_fp8_quant,
               ("_moe_C", "moe_align_block_size"): moe_align_block_size, ("_moe_C", "moe_sum"): moe_sum}
_LIBS: list = []  # the torch.library objects holding substitutes (they must outlive their registrations)


def _has_op(ns: str, name: str) -> bool:
    try:
        getattr(getattr(torch.ops, ns), name)
        return True
    except (AttributeError, RuntimeError):
        return False


def _substitute(ns: str, name: str, key: str | None = None):
    """Register the substitute as the op's kernel: for every device where the library did not load
    (``key`` None: the op is defined here), else for dispatch key ``key`` beside (or over) the
    compiled kernels ("CPU" on a machine without a GPU, "CUDA" where a compiled kernel cannot launch)."""
    if key:
        lib = torch.library.Library(ns, "IMPL")
        lib.impl(name, SUBSTITUTES[ns, name], key)
    else:
        lib = torch.library.Library(ns, "FRAGMENT")
        lib.define(OPS[ns, name])
        lib.impl(name, SUBSTITUTES[ns, name], "CompositeExplicitAutograd")
    _LIBS.append(lib)


# -- loading -------------------------------------------------------------------------------------------

@dataclass
class VllmPath:
    """The imported path: ``fused_experts`` and the pieces the experiment reports on."""

    bundle: Path
    manifest: dict
    fused_moe: types.ModuleType  # vllm.model_executor.layers.fused_moe.fused_moe
    platform: object
    origin: dict = field(default_factory=dict)  # "ns::op" -> "vllm" or "substitute (why)"
    load_errors: dict = field(default_factory=dict)  # library -> the error that kept it out
    stubs: list = field(default_factory=list)
    platform_note: str = ""

    def fused_experts(self, x, w1, w2, topk_weights, topk_ids, *, quant_config=None):
        return self.fused_moe.fused_experts(x, w1, w2, topk_weights, topk_ids, quant_config=quant_config)

    def fp8_block_quant_config(self, w1_scale, w2_scale, block=(128, 128)):
        """vLLM's quant config for FP8 w8a8 with block-scaled weights (activations quantized per token
        group of ``block[1]`` as the path runs)."""
        from vllm.model_executor.layers.fused_moe.config import fp8_w8a8_moe_quant_config

        return fp8_w8a8_moe_quant_config(w1_scale, w2_scale, block_shape=list(block))

    def config(self, w1_shape, w2_shape, top_k: int, T: int, x_dtype=torch.bfloat16, *, fp8: bool = False,
               block_shape=None) -> dict:
        """The launch config vLLM picks for T tokens (as ``fused_experts_impl`` asks for it), and the file
        it came from, or ``get_default_config`` (``source``)."""
        from vllm.model_executor.layers.fused_moe.config import _get_config_dtype_str

        fm = self.fused_moe
        dtype = _get_config_dtype_str(use_fp8_w8a8=fp8, use_int8_w8a16=False, use_int4_w4a16=False, dtype=x_dtype)
        cfg = dict(fm.try_get_optimal_moe_config(tuple(w1_shape), tuple(w2_shape), top_k, dtype, T, block_shape))
        E, N = fm._moe_config_shape(tuple(w2_shape), dtype)
        has = fm.has_configured_moe_config(tuple(w2_shape), dtype, T, block_shape)
        name = fm.get_config_file_name(E, N, dtype, block_shape)
        cfg["source"] = name if has else "get_default_config"
        return cfg

    @property
    def complete(self) -> bool:
        """Every op the path calls is registered (compiled or substituted)."""
        return not any(o.startswith("missing") for o in self.origin.values())

    @property
    def substituted(self) -> list[str]:
        return [op for op, o in self.origin.items() if o.startswith("substitute")]

    def label(self) -> str:
        """``vllm`` or, where substitutes ran, ``vllm+subst(op,…)``: the row's variant names them."""
        subs = [op.split("::")[1] for op in self.substituted]
        return "vllm" if not subs else f"vllm+subst({','.join(subs)})"

    def describe(self) -> str:
        note = f" ({self.platform_note})" if self.platform_note else ""
        lines = [f"vLLM {self.manifest['vllm']} from {self.bundle} (fatbins cut to sm_{self.manifest['arch']}), "
                 f"platform {type(self.platform).__name__}{note}"]
        for (ns, name) in OPS:
            lines.append(f"  {ns}::{name:24s} {self.origin[f'{ns}::{name}']}")
        for lib, err in self.load_errors.items():
            lines.append(f"  {lib} did not load: {err}")
        answers = [f"{m}.{n}" for m, fns in ANSWERS.items() for n in fns]
        lines.append(f"  placeholders for {len(self.stubs)} left-out modules (calling one raises), but for "
                     f"{', '.join(answers)} (True: one process): {', '.join(self.stubs)}")
        return "\n".join(lines)

    def probe(self, device="cuda"):
        """Launch each compiled op once on a small input, synchronised: an op whose kernel cannot run here
        (no image for this GPU) is replaced by its substitute, and :attr:`origin` says so."""
        dev = torch.device(device)
        x = torch.randn(4, 256, device=dev, dtype=torch.bfloat16)
        ids = torch.randint(0, 8, (4, 2), device=dev, dtype=torch.int32)
        runs = {
            "_C::silu_and_mul": lambda: torch.ops._C.silu_and_mul(torch.empty(4, 128, device=dev, dtype=x.dtype), x),
            "_C::per_token_group_fp8_quant": lambda: torch.ops._C.per_token_group_fp8_quant(
                x, torch.empty(4, 256, device=dev, dtype=torch.float8_e4m3fn),
                torch.empty(4, 2, device=dev, dtype=torch.float32), 128, 1e-10, -448.0, 448.0, False, False, False),
            "_moe_C::moe_align_block_size": lambda: torch.ops._moe_C.moe_align_block_size(
                ids, 8, 16, torch.empty(8 + 8 * 15, device=dev, dtype=torch.int32),
                torch.empty(8, device=dev, dtype=torch.int32), torch.empty(1, device=dev, dtype=torch.int32), None),
            "_moe_C::moe_sum": lambda: torch.ops._moe_C.moe_sum(x.view(2, 2, 256), torch.empty(2, 256, device=dev,
                                                                                                  dtype=x.dtype)),
        }
        for op, run in runs.items():
            if self.origin[op] != "vllm":
                continue
            try:
                run()
                torch.cuda.synchronize(dev)
            except Exception as e:  # noqa: BLE001  the op's kernel cannot run on this device
                ns, name = op.split("::")
                _substitute(ns, name, "CUDA")
                self.origin[op] = f"substitute (the compiled kernel failed: {type(e).__name__}: {str(e)[:120]})"


def _cuda_platform_where_nvml_fails() -> str:
    """vLLM detects CUDA through NVML; where NVML does not answer but torch sees a GPU, set the platform
    vLLM would have picked (``CudaPlatform``) before anything resolves it, and say so."""
    import vllm.platforms as platforms

    if not torch.cuda.is_available() or platforms._current_platform is not None:
        return ""
    found = platforms.resolve_current_platform_cls_qualname()
    if found == "vllm.platforms.cuda.CudaPlatform":
        return ""
    from vllm.platforms.cuda import CudaPlatform

    platforms._current_platform = CudaPlatform()
    return f"set by vllm_path: vLLM's detection found {found} (NVML did not answer)"


def default_bundle() -> Path:
    for p in (os.environ.get("VLLM_BUNDLE"), Path.home() / "vllm", ROOT / ".vllm"):
        if p and (Path(p) / "MANIFEST.json").exists():
            return Path(p)
    raise FileNotFoundError("no vLLM bundle: build one with `bash tools/vllm_bundle.sh` (.vllm/), or set VLLM_BUNDLE")


_LOADED: VllmPath | None = None


def load(bundle: str | Path | None = None, *, substitutes: bool = True) -> VllmPath:
    """Import vLLM's fused_moe from ``bundle`` (once per process). ``substitutes``: stand the
    substitutes in for ops whose library cannot load (else such an op is missing and raises)."""
    global _LOADED, _ARMED
    if _LOADED is not None:
        return _LOADED
    bundle = Path(bundle).expanduser() if bundle else default_bundle()
    manifest = json.loads((bundle / "MANIFEST.json").read_text())
    for lib in manifest["libraries"]:
        so = bundle / "vllm" / f"{lib}.abi3.so"
        if not so.exists():
            with lzma.open(so.with_name(so.name + ".xz")) as f:
                so.write_bytes(f.read())
    if "vllm" in sys.modules and not str(getattr(sys.modules["vllm"], "__file__", "")).startswith(str(bundle)):
        raise RuntimeError(f"a vllm package is imported already ({sys.modules['vllm']}): the bundle must be the one")
    sys.path.insert(0, str(bundle))
    finder = _StubFinder(manifest["stubbed"])
    sys.meta_path.append(finder)
    load_errors = {}
    for lib in LIBRARY.values():  # vllm.platforms.cuda imports _C_stable_libtorch at module level
        try:
            importlib.import_module(f"vllm.{lib}")
        except ImportError as e:
            load_errors[lib] = str(e)
            sys.modules[f"vllm.{lib}"] = types.ModuleType(f"vllm.{lib}")  # an empty stand-in: its ops are missing
    platform_note = _cuda_platform_where_nvml_fails()
    fm = importlib.import_module("vllm.model_executor.layers.fused_moe.fused_moe")
    from vllm.platforms import current_platform

    _ARMED = True
    path = VllmPath(bundle, manifest, fm, current_platform, load_errors=load_errors, stubs=sorted(finder.made),
                    platform_note=platform_note)
    for (ns, name) in OPS:
        op = f"{ns}::{name}"
        if _has_op(ns, name) and torch.cuda.is_available():
            path.origin[op] = "vllm"
        elif _has_op(ns, name) and substitutes:  # compiled for CUDA only: the CPU runs the substitute
            _substitute(ns, name, "CPU")
            path.origin[op] = "substitute on the CPU (the compiled op loaded; its kernels are CUDA's)"
        elif substitutes:
            _substitute(ns, name)
            path.origin[op] = f"substitute ({LIBRARY[ns]} did not load)"
        else:
            path.origin[op] = f"missing ({LIBRARY[ns]} did not load)"
    _LOADED = path
    return path
