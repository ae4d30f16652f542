"""What the notebooks in ``notebooks/`` share, so that none of them holds the only copy of it.

- :data:`SETTINGS`: what a notebook runs here: the real Qwen3-30B-A3B layer on a GPU, the
  ``tiny`` preset (odd sizes, prime E) at small T in Triton's CPU interpreter.
- :data:`BOUNDS`: the most error, in multiples of the bf16 rounding floor, each method may show
  in a notebook cell's assertion, on each kind of device.
- Byte ledgers: :func:`decode_bytes`, :func:`bytes_needed`, :func:`expected_distinct`, :func:`floor_us`.
- :func:`tuning_note`: where a layer's launch configurations come from, and how to tune it here.
- The measured results: :func:`results` reads a checkout's ``results/<GPU>/*.csv``,
  :func:`experiment_results` its ``experiments/results/<GPU>/*.csv`` (the checkout: the one
  around the current working directory, or ``root``); :func:`pivot` and :func:`table` lay rows
  out as text.
- Views of the kernels: :func:`source` (numbered lines of a kernel), :func:`recorded_jobs`
  (the launches a path makes for a shape, as on an H200, ready for
  :func:`bench.compiled.compile_many`).
- :func:`project`: a measured time projected onto a GPU with more bandwidth (a projection,
  never a measurement).
"""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass

import torch

from bench import compiled, data
from warpdecode import _runtime, configs
from warpdecode.configs import expected_distinct  # noqa: F401  (the notebooks call ladder.expected_distinct)
from warpdecode.presets import MoEShape, get_preset
from warpdecode.workload import LayerInputs

#: Whose measurements the notebooks show where they cannot measure (no GPU), and quote beside
#: their own measurements where they can.
RESULTS_GPU = "NVIDIA H200"

#: Datasheet HBM bandwidth in TB/s, for projections only (every fraction of a ceiling in this
#: repository uses the ceiling measured on the GPU itself).
DATASHEET_TBPS = {"NVIDIA H200": 4.8, "NVIDIA B200": 8.0}


@dataclass(frozen=True)
class Settings:
    on_gpu: bool
    device: torch.device
    gpu: str  # what the kernels run on
    preset: str  # the layer the notebooks run
    Ts: tuple  # token counts the notebooks run (small on the CPU: the interpreter is slow)
    reps: int  # timed replays per measurement (GPU only)


def _settings() -> Settings:
    on_gpu = _runtime.DEFAULT_DEVICE.type == "cuda"
    if on_gpu:
        return Settings(True, _runtime.DEFAULT_DEVICE, _runtime.gpu_name(), "qwen3-30b-a3b", (1, 8, 64), 50)
    return Settings(False, _runtime.DEFAULT_DEVICE, _runtime.gpu_name(), "tiny", (1, 4), 0)


SETTINGS = _settings()

#: The most error / floor (floor = warpdecode.rounding_floor(ref, bf16)) a notebook accepts, bf16.
#: GPU: the model presets; the largest values in results/NVIDIA_H200/accuracy.csv (every preset,
#: T = 1…64, 2 seeds) are warp 1.00, warp_bf16_act 1.46, expert 3.03, loop 3.75, expert_fp8 30.1,
#: grouped_mm (Hugging Face transformers) 2.71.
#: CPU: the tiny preset (K = 3) in the interpreter, calibrated like tests/test_accuracy.py's
#: table (its small outputs make the floor a noisier statistic; FP8 spreads most).
BOUNDS = {
    "gpu": {"warp": 1.1, "warp_bf16_act": 1.8, "expert": 3.5, "loop": 4.5, "expert_fp8": 36.0, "grouped_mm": 3.5},
    "cpu": {"warp": 1.1, "warp_bf16_act": 2.2, "expert": 3.5, "loop": 4.8, "expert_fp8": 60.0},
}


def bound(method: str) -> float:
    """This device's bound on error / floor for ``method`` (see :data:`BOUNDS`)."""
    return BOUNDS["gpu" if SETTINGS.on_gpu else "cpu"][method]


# ---------------------------------------------------------------------------------------------
# byte ledgers


def decode_bytes(shape: MoEShape, topk_ids: torch.Tensor, elem: int = 2) -> int:
    """The fewest bytes one call must move (the benchmark's own count,
    :func:`bytes_needed`): each distinct routed expert's weights once,
    the activations in, the output out, the routing in."""
    T = topk_ids.shape[0]
    x = torch.empty(T, shape.H, device="meta")
    return bytes_needed(shape, LayerInputs(x, None, None, topk_ids), elem)


def floor_us(nbytes: float, tbps: float) -> float:
    """The time ``nbytes`` take at ``tbps`` TB/s, in µs: no memory-bound kernel can beat it."""
    return nbytes / (tbps * 1e12) * 1e6


def bytes_needed(shape: MoEShape, inp: LayerInputs, elem: int = 2) -> int:
    """The fewest bytes one call moves: each distinct routed expert's weights once, x, y and the routing."""
    distinct = torch.unique(inp.topk_ids).numel()
    T = inp.x.shape[0]
    return (distinct * 3 * shape.I * shape.H * elem + 2 * T * shape.H * elem
            + inp.topk_ids.numel() * 8)


def tuning_note(shapes) -> str:
    """One line on where ``shapes``' launch configurations come from (:mod:`warpdecode.configs`), with the
    command that tunes those with none."""
    shapes = list(shapes)
    if configs._runtime.INTERPRET:
        return "launch configurations: the CPU interpreter's small tiles (nothing to tune without a GPU)"
    table = configs.load_tuned()
    missing = [s for s in shapes if not all(configs.shape_key(s.H, s.I, s.E, s.K) in table.get(f, {})
                                            for f in ("warp", "expert"))]
    gpu = configs._runtime.gpu_name()
    if not missing:
        return (f"launch configurations: tuned for {gpu} ({configs.tuned_file().name} shipped, or "
                f"{configs.cache_file()})")
    names = ", ".join(getattr(s, "name", configs.shape_key(s.H, s.I, s.E, s.K)) for s in missing)
    command = "python -m warpdecode tune " + " ".join(f"--shape {s.H} {s.I} {s.E} {s.K}" for s in missing)
    shipped = configs._read(configs.tuned_file()) if configs.sources()[0] else {}
    other = (f" (the shipped table is Triton {shipped['triton']}'s; warp decode's entries and the crossover hold only "
             f"on that release, this is {configs.triton.__version__})" if configs.other_release(shipped) else "")
    return (f"launch configurations: no tuned table for {names} on {gpu}{other}, so the defaults run (rules of the "
            f"shape, T and this GPU's limits); to tune them here, remembered in {configs.cache_dir()}: {command}")


def step_ledger(cfg, T: int, ctx: int, experts_read: float, *, layers: int | None = None,
                elem: int = 2) -> dict[str, float]:
    """The fewest bytes one decode step of the minimal decoder (``bench.model``, config
    ``cfg``, its first ``layers`` layers) must move, by part: T tokens at position ``ctx − 1``,
    ``experts_read`` distinct routed experts summed over the layers (T = 1: exactly K per layer; see
    :func:`expected_distinct` otherwise). The parts add up to ``bench.e2e.step_bytes``."""
    L = layers or cfg.layers
    H, hd, nq, nkv, E = cfg.hidden, cfg.head_dim, cfg.heads, cfg.kv_heads, cfg.moe.E
    per_layer = 2 * H + 2 * hd + (nq + 2 * nkv) * hd * H + H * nq * hd + E * H  # norms, q/k/v/o, router
    return {
        "attention, norms, routers": L * per_layer * elem,
        "LM head": (cfg.vocab * H + H) * elem,
        "routed experts": experts_read * 3 * cfg.moe.I * H * elem,  # gate, up, down
        "KV cache": L * 2 * T * ctx * nkv * hd * elem,
        "embedding rows": T * H * elem,
    }


# ---------------------------------------------------------------------------------------------
# measured results


def results(name: str, gpu: str = RESULTS_GPU, root=None) -> list[dict]:
    """Rows of ``<root>/results/<gpu>/<name>`` (speed.csv, stages.csv, accuracy.csv, ceiling.csv,
    e2e_*.csv), as strings; ``root`` defaults to the checkout around the current working directory
    (:func:`bench.data.checkout`)."""
    return data.read(data.gpu_dir(gpu, root) / name)


def experiment_results(name: str, gpu: str = RESULTS_GPU, root=None) -> list[dict]:
    """Rows of an experiment's CSV, ``<root>/experiments/results/<gpu>/<name>``, as strings, in the
    experiments' one schema (``experiments/harness.py``: ``variant``, ``config``, ``us``,
    ``frac_ceiling``, …), with the keys of each row's ``detail`` (what else that experiment
    recorded, a dict literal) added as columns of their own."""
    rows = data.read(data.experiment_csv(gpu, name, root))
    for r in rows:
        detail = r.get("detail") or "{}"
        extra = ast.literal_eval(detail) if detail.startswith("{") else {}
        r.update({k: str(v) for k, v in extra.items() if k not in r})
    return rows


def read_ceiling_tbps(gpu: str = RESULTS_GPU, root=None) -> float:
    """The streaming-read ceiling measured on ``gpu`` in the benchmark run (ceiling.csv)."""
    return float(results("ceiling.csv", gpu, root)[0]["read_TBps"])


def pivot(rows: list[dict], row: str, col: str, value: str, fmt=lambda v: f"{float(v):.1f}") -> list[dict]:
    """Rows × columns table of ``value``: one output row per distinct ``row`` value (first-seen
    order), one column per distinct ``col`` value (numeric order where numeric)."""
    cols = sorted({r[col] for r in rows}, key=lambda c: (not str(c).isdigit(), int(c) if str(c).isdigit() else c))
    out = {}
    for r in rows:
        out.setdefault(r[row], {row: r[row]})[str(r[col])] = fmt(r[value])
    return [{row: k, **{str(c): v.get(str(c), "–") for c in cols}} for k, v in out.items()]


def table(rows: list[dict], cols: list[str] | None = None) -> str:
    """Rows as a right-aligned text table."""
    if not rows:
        return "(no rows)"
    cols = cols or list(rows[0])
    cells = [[str(c) for c in cols]] + [[str(r.get(c, "")) for c in cols] for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(cols))]
    return "\n".join("  ".join(v.rjust(w) for v, w in zip(line, widths, strict=True)) for line in cells)


# ---------------------------------------------------------------------------------------------
# views of the kernels


def source(kernel, start: str | None = None, stop: str | None = None) -> str:
    """Numbered source lines of ``kernel`` (a @triton.jit function or a plain one), from the first
    line containing ``start`` through the first line after it containing ``stop``."""
    fn = getattr(kernel, "fn", kernel)
    lines, first = inspect.getsourcelines(fn)
    i = next((k for k, ln in enumerate(lines) if start in ln), None) if start else 0
    if i is None:
        raise ValueError(f"{start!r} not in {fn.__name__}")
    j = next((k for k in range(i, len(lines)) if stop in lines[k]), None) if stop else len(lines) - 1
    if j is None:
        raise ValueError(f"{stop!r} not in {fn.__name__} after {start!r}")
    return "".join(f"{first + k:4d} {lines[k]}" for k in range(i, j + 1)).rstrip("\n")


def recorded_jobs(path: str, shape: MoEShape | str, T: int, *, gpu_name: str = RESULTS_GPU, dtype=torch.bfloat16,
                  config: dict | None = None, **options) -> list[compiled.Launch]:
    """:func:`bench.compiled.record_launches`, on the GPU the results come from by default."""
    s = get_preset(shape) if isinstance(shape, str) else shape
    return compiled.record_launches(path, s, T, gpu_name=gpu_name, dtype=dtype, config=config, **options)


def tuned_config(family: str, shape: MoEShape | str, T: int, gpu_name: str = RESULTS_GPU) -> dict | None:
    """The bucket of ``warpdecode/tuned/<gpu_name>.json`` a call with T tokens takes (what
    ``configs.warp_config`` / ``expert_config`` return on that GPU), read on any machine and checked
    (``configs.read_table``)."""
    s = get_preset(shape) if isinstance(shape, str) else shape
    return configs.bucket(configs.read_table(configs.tuned_file(gpu_name)), family, s.H, s.I, s.E, s.K, T)


# ---------------------------------------------------------------------------------------------
# projection


def project(median_us: float, floor_us: float, bandwidth_ratio: float) -> float:
    """A measured time split in two, projected onto a GPU with ``bandwidth_ratio`` × the memory
    bandwidth: the byte floor (bytes / measured read ceiling) shrinks by that ratio, the rest
    (launches, ramp-up, the last wave, latency) is assumed to stay as it is. A projection, never a
    measurement; if the rest shrinks too, the projected gaps between methods shrink with it."""
    return floor_us / bandwidth_ratio + (median_us - floor_us)


# ---------------------------------------------------------------------------------------------
# counting what eager PyTorch does


#: aten ops whose output size depends on the data, so the host must wait for the device.
SYNC_OPS = {"_unique2", "unique_dim", "unique_consecutive", "nonzero", "_local_scalar_dense", "item"}


def aten_ops(fn, *args, **kwargs) -> list[tuple[str, bool]]:
    """Call ``fn`` and return the aten ops it dispatched, in order, as (name, is_view). An op that
    is not a view launches (at least) one kernel on a GPU; views only change metadata."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append((func.overloadpacket.__name__, bool(func.is_view)))
            return func(*args, **(kwargs or {}))

    with _Count() as c:
        fn(*args, **kwargs)
    return c.ops


def expert_stage_bytes(shape: MoEShape, topk_ids: torch.Tensor, block_m: int, elem: int = 2) -> dict[str, int]:
    """Bytes each stage of the expert-centric path reads plus writes for one call (bf16, no FP8):
    what it must touch, ignoring caches' help. The GEMMs neither read nor write padding rows (vLLM's
    ``token_mask``); the gather stage writes them, as zeros."""
    T, K = topk_ids.shape
    H, I, E = shape.H, shape.I, shape.E  # noqa: E741
    counts = torch.bincount(topk_ids.flatten().long().cpu(), minlength=E)
    hit = int((counts > 0).sum())
    rows = int(((counts + block_m - 1) // block_m * block_m).sum())  # num_tokens_post_padded
    from warpdecode.expert import max_padded_rows

    EM = max_padded_rows(T * K, E, block_m)
    pairs = T * K
    return {
        "1 route": T * E * 4 + pairs * (4 + 4),  # logits in; weights and ids out
        "2 align": pairs * 4 + EM * 4 + EM // block_m * 4 + 4,  # ids in; the three index arrays out
        "3 gather": pairs * H * elem + rows * H * elem,  # token rows in; padded expert-major rows out
        "4 quantize": 0,  # bf16: nothing to do, no launch
        "5 gate/up GEMM": hit * 2 * I * H * elem + pairs * H * elem + pairs * I * elem,
        "6 down GEMM": hit * H * I * elem + pairs * I * elem + pairs * 4 + pairs * H * elem,
        "7 scatter": 2 * pairs * H * elem,
        "8 combine": pairs * H * elem + T * H * elem,
    }


def warp_kernel_bytes(shape: MoEShape, topk_ids: torch.Tensor, act_elem: int = 4, elem: int = 2) -> dict[str, dict]:
    """Bytes each warp-decode kernel streams (every (token, slot) pair reads its expert's rows on its
    own) and the fewest it must move (each distinct expert's rows once), with the FP32 intermediate."""
    T, K = topk_ids.shape
    H, I = shape.H, shape.I  # noqa: E741
    pairs = T * K
    hit = torch.unique(topk_ids).numel()
    act = pairs * I * act_elem  # the intermediate, written by kernel 1 and read by kernel 2
    return {
        "gate/up kernel": {"streamed": pairs * 2 * I * H * elem + T * H * elem + pairs * 4 + act,
                           "must move": hit * 2 * I * H * elem + T * H * elem + pairs * 4 + act},
        "down kernel": {"streamed": pairs * H * I * elem + act + pairs * 8 + T * H * elem,
                        "must move": hit * H * I * elem + act + pairs * 8 + T * H * elem},
    }
