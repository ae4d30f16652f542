"""Launch configurations: tuned tables, then the default rules (data: docs/design.md, "Launch configuration rules").

A table (``python -m warpdecode tune --shape``; the shipped ones: the checkout's ``python -m bench tune``) keys
``[T_max, config]`` buckets by family and layer shape: T takes the first bucket with T ≤ T_max, else the last. The
shipped ``tuned/<GPU>.json`` wins over the user's cache (:func:`cache_dir`) per family and shape. Reads are checked (a
bad file is skipped with one warning); writes are checked, locked, merged and replace the file whole.
``WARPDECODE_TUNED`` (on, ``cache`` or off; :func:`tables` wins) is read at import and by :func:`read_env`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import re
import warnings
from pathlib import Path

import triton

from . import _runtime
from ._runtime import ON_OFF, env_choice
from .kernels import warp_pair

try:
    import fcntl
except ImportError:  # Windows: tables are written in one replace, without the lock that merges writers
    fcntl = None

TUNED_DIR = Path(__file__).parent / "tuned"


def shape_key(H: int, I: int, E: int, K: int) -> str:  # noqa: E741
    return f"H={H},I={I},E={E},K={K}"


def tuned_file(gpu: str | None = None) -> Path:
    """The shipped table of ``gpu`` (default: this one)."""
    return TUNED_DIR / f"{(gpu or _runtime.gpu_name()).replace(' ', '_')}.json"


def cache_dir() -> Path:
    """The tuned-table cache: ``$WARPDECODE_CACHE_DIR``, ``$XDG_CACHE_HOME/warpdecode`` or ``~/.cache/warpdecode``."""
    if os.environ.get("WARPDECODE_CACHE_DIR"):
        return Path(os.environ["WARPDECODE_CACHE_DIR"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "warpdecode"


def cache_file(gpu: str | None = None) -> Path:
    """The user's cached table of ``gpu`` (default: this one), named like the shipped one."""
    return cache_dir() / tuned_file(gpu).name


#: What ``WARPDECODE_TUNED`` takes: an on/off switch (both tables, or neither), or ``cache``.
_SOURCES = {**{word: (on, on) for word, on in ON_OFF.items()}, "cache": (False, True)}
_tables_override: tuple[bool, bool] | None = None
_env_sources = _SOURCES["1"]  # what WARPDECODE_TUNED says, set by read_env()


def sources() -> tuple[bool, bool]:
    """(read the shipped table, read the cache): :func:`tables` where active, else ``$WARPDECODE_TUNED``."""
    return _tables_override if _tables_override is not None else _env_sources


@contextlib.contextmanager
def tables(shipped: bool = True, cache: bool = True):
    """Within the block, read the shipped table only if ``shipped``, the user's cache only if ``cache``."""
    global _tables_override
    before, _tables_override = _tables_override, (bool(shipped), bool(cache))
    try:
        yield
    finally:
        _tables_override = before


# --- checks: every configuration, from a table or a caller, before a kernel sees it
class ConfigError(ValueError):
    """A launch configuration or tuned table the kernels cannot run; the message says where and why."""


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_pow2(v) -> bool:
    return _is_int(v) and v >= 1 and not v & (v - 1)


#: The most warps one program has: 1024 threads, CUDA's limit per block on every architecture.
MAX_WARPS = 32

#: What a launch parameter must be: (test, the rule in words, why a kernel needs it).
RULES = {
    "pow2": (_is_pow2, "a power of two", "tl.arange spans a power of two"),
    "dot": (lambda v: _is_pow2(v) and v >= 16, "a power of two >= 16", "tl.dot takes 16 or more along each side"),
    "count": (lambda v: _is_int(v) and v >= 1, "an int >= 1",
              "it counts stages, programs or tiles: 0 or less runs nothing or divides by zero"),
    "warps": (lambda v: _is_pow2(v) and v <= MAX_WARPS, f"a power of two <= {MAX_WARPS}",
              "Triton lays a tile over a power of two of warps, at most 1024 threads a program"),
    "flag": (lambda v: isinstance(v, bool), "true or false", "it switches a form of the kernel on or off"),
}

#: Each kernel tile's launch parameters, (required, optional), by the rule each follows.
TILES = {
    "pair": ({"BLOCK_I": "pow2", "BLOCK_H": "pow2", "num_warps": "warps", "num_stages": "count"}, {"SUB_H": "pow2"}),
    "grouped": ({"BLOCK_I": "dot", "BLOCK_H": "dot", "num_warps": "warps", "num_stages": "count"}, {}),
    "gemm": ({"BLOCK_N": "dot", "BLOCK_K": "dot", "GROUP_M": "count", "num_warps": "warps", "num_stages": "count"},
             {"HALF_M": "flag", "SWAP_AB": "flag", "W_TMA": "flag"}),
    "expert": ({"BLOCK_M": "dot"}, {}),  # align pads each expert's rows to BLOCK_M, the GEMMs' M side
}

#: Columns per scale along the reduction axis of each FP8 weight format (warpdecode.quant).
FP8_GROUP_K = {"block128": 128, "mxfp8": 32}


def _object(d, where: str) -> dict:
    if not isinstance(d, dict):
        raise ConfigError(f"{where} must be a JSON object, got {d!r}")
    return d


def check_tile(tile, kind: str, where: str) -> dict:
    """A tile by :data:`RULES`, ``kind`` a :data:`TILES` name or a (required, optional) pair; other keys: notes."""
    required, optional = TILES[kind] if isinstance(kind, str) else kind
    _object(tile, where)
    for key, rule in {**required, **optional}.items():
        test, words, why = RULES[rule]
        if key not in tile and key in required:
            raise ConfigError(f"{where} lacks {key}")
        if key in tile and not test(tile[key]):
            raise ConfigError(f"{where}.{key} must be {words} ({why}), got {tile[key]!r}")
    return tile


def _part(cfg: dict, part: str, kind: str, where: str) -> dict:
    if part not in cfg:
        raise ConfigError(f"{where} lacks {part}")
    return check_tile(cfg[part], kind, f"{where}.{part}")


def check_warp(cfg, weights: str | None = None, where: str = "warp decode's config") -> dict:
    """Warp decode's config (``weights``: an FP8 format, steps in whole scale groups); else :class:`ConfigError`."""
    gate_up, down = _part(_object(cfg, where), "gate_up", "pair", where), _part(cfg, "down", "pair", where)
    if gate_up.get("SUB_H", gate_up["BLOCK_H"]) > gate_up["BLOCK_H"]:  # both powers of two: at most is divides
        raise ConfigError(f"{where}.gate_up.SUB_H must divide BLOCK_H={gate_up['BLOCK_H']} (a step is loaded in "
                          f"BLOCK_H / SUB_H slices), got {gate_up['SUB_H']}")
    for part, tile, key in (("gate_up", gate_up, "BLOCK_H"), ("down", down, "BLOCK_I")):
        if weights is not None and tile[key] % FP8_GROUP_K[weights]:
            raise ConfigError(f"{where}.{part}.{key} must be a multiple of {FP8_GROUP_K[weights]} (a step spans "
                              f"whole {weights} scale groups), got {tile[key]}")
    grouped = _object(cfg["grouped"], f"{where}.grouped") if "grouped" in cfg else {}
    for part in ("gate_up", "down"):
        if grouped.get(part) not in (None, {}):
            _part(grouped, part, "grouped", f"{where}.grouped")
    return cfg  # other entries are not read here: a "fused" one is bench/persistent.py's (ignored)


def check_expert(cfg, fp8: bool = False, weights: str | None = None, where: str = "the expert path's config") -> dict:
    """The expert config (``fp8``, ``weights`` FP8), tiles within shared memory; else :class:`ConfigError`."""
    block_m = check_tile(cfg, "expert", where)["BLOCK_M"]
    shared = _runtime.device_limits()["shared_per_block"]
    for part, accumulators in (("gate_up", 2), ("down", 1)):
        tile, at = _part(cfg, part, "gemm", where), f"{where}.{part}"
        if tile.get("HALF_M") and block_m < 32:
            raise ConfigError(f"{at}.HALF_M needs BLOCK_M >= 32 (a half-height tile is BLOCK_M / 2 rows and tl.dot "
                              f"takes 16 or more), got BLOCK_M={block_m}")
        for scaled, group, what in ((fp8, 128, "activation"), (weights, FP8_GROUP_K.get(weights), f"{weights} weight")):
            if scaled and tile["BLOCK_K"] > group:
                raise ConfigError(f"{at}.BLOCK_K must divide {group} (a K step takes one {what} scale), "
                                  f"got {tile['BLOCK_K']}")
        # the least shared memory the tile takes: its operands at one byte an element, num_stages − 1 buffers
        least = (block_m + accumulators * tile["BLOCK_N"]) * tile["BLOCK_K"] * max(1, tile["num_stages"] - 1)
        if least > shared:
            raise ConfigError(f"{at} needs at least {least} B of shared memory (its operand tiles at one byte an "
                              f"element, num_stages - 1 buffers); this GPU gives a program {shared} B")
    return cfg


def check_crossover(value, where: str = "crossover") -> int:
    """``auto``'s measured crossover: the largest T warp decode runs, an int >= 0."""
    if not (_is_int(value) and value >= 0):
        raise ConfigError(f"{where} must be an int >= 0 (the largest T warp decode runs), got {value!r}")
    return value


def check_evidence(value, where: str = "crossover_evidence") -> dict:
    """The times a crossover was measured from: {T: {"warp_us": µs or null, "expert_us": ...}}."""
    for T, times in _object(value, where).items():
        if not (T.isdigit() and int(T) >= 1):
            raise ConfigError(f"{where} key {T!r} must be a token count")
        for path, us in _object(times, f"{where}[{T}]").items():
            if not (us is None or (isinstance(us, (int, float)) and not isinstance(us, bool) and us >= 0)):
                raise ConfigError(f"{where}[{T}].{path} must be a time in µs or null, got {us!r}")
    return value


def check_buckets(buckets, check, where: str) -> list:
    """A shape's ``[[T_max, config], ...]``, ascending in T_max, each config checked by ``check``."""
    if not (isinstance(buckets, list) and buckets):
        raise ConfigError(f"{where} must be a non-empty list of [T_max, config] buckets, got {buckets!r}")
    last = 0
    for b in buckets:
        if not (isinstance(b, list) and len(b) == 2 and _is_int(b[0]) and b[0] > last):
            raise ConfigError(f"{where}: a bucket must be [T_max, config], T_max an int above the last bucket's "
                              f"({last}: the first with T <= T_max is taken), got {b!r}")
        check(b[1], where=f"{where} (T_max={b[0]}) config")
        last = b[0]
    return buckets


def _buckets_of(check, **options):
    return lambda entry, where: check_buckets(entry, functools.partial(check, **options), where)


#: How one shape's entry of each family is checked; a family ``<name>_<format>`` holds FP8 weights' entries.
FAMILY_CHECKS = {**{
    family + ("" if fmt is None else f"_{fmt}"): check for fmt in (None, *FP8_GROUP_K) for family, check in (
        ("warp", _buckets_of(check_warp, weights=fmt)), ("expert", _buckets_of(check_expert, weights=fmt)),
        ("expert_fp8", _buckets_of(check_expert, fp8=True, weights=fmt)), ("crossover", check_crossover),
        ("crossover_evidence", check_evidence))}}
#: Families merged shape by shape; any other top-level key is taken whole from the first table with it.
FAMILIES = tuple(FAMILY_CHECKS)

_SHAPE_KEY = re.compile(r"H=[1-9]\d*,I=[1-9]\d*,E=[1-9]\d*,K=[1-9]\d*")


def check_table(table, where: str = "tuned table") -> dict:
    """Every entry of a tuned table and its ``"triton"``; returns it, else :class:`ConfigError` naming ``where``."""
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must hold a JSON object of families, got {type(table).__name__}")
    for family, entries in table.items():
        if family == "triton":
            if not isinstance(entries, str):
                raise ConfigError(f"{where}: triton must be the Triton version tuned on, got {entries!r}")
            continue
        if family not in FAMILY_CHECKS:
            raise ConfigError(f"{where}: {family!r} is not a family of configs ({', '.join(FAMILIES)}) nor 'triton'")
        for key, entry in _object(entries, f"{where}: {family}").items():
            if not _SHAPE_KEY.fullmatch(key):
                raise ConfigError(f"{where}: {family} key {key!r} must be a layer shape, H=…,I=…,E=…,K=…")
            FAMILY_CHECKS[family](entry, f"{where}: {family} {key}")
    return table


# --- reading and writing tables
def read_table(path: Path) -> dict:
    """The checked table at ``path``, {} without a file; :class:`ConfigError` naming a bad or unreadable file."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path} cannot be read ({e})") from None
    if not text.strip():
        raise ConfigError(f"{path} is empty")
    try:
        table = json.loads(text)
    except ValueError as e:
        raise ConfigError(f"{path} is not JSON ({e})") from None
    return check_table(table, str(path))


_warned_tables: set = set()  # the faults already warned about, one warning each


def _read(path: Path) -> dict:
    """:func:`read_table`, or {} where the file is bad: named in one warning, so the defaults run."""
    try:
        return read_table(path)
    except ConfigError as e:
        if str(e) not in _warned_tables:
            _warned_tables.add(str(e))
            warnings.warn(f"warpdecode skips a tuned table: {e}. Its launches run on the defaults; "
                          "tuning again (`python -m warpdecode tune --shape` for the cache) overwrites the file",
                          stacklevel=3)
        return {}


def merge_tables(*tables_in_order: dict) -> dict:
    """One table from several, the first that has a family's shape winning that shape."""
    out: dict = {}
    for table in reversed(tables_in_order):
        for family, entries in table.items():
            merge = family in FAMILIES and isinstance(entries, dict)
            out[family] = {**out.get(family, {}), **entries} if merge else entries
    return out


#: Families valid only on the Triton release named by the table's ``"triton"`` (docs/design.md).
RELEASE_BOUND = tuple(family + suffix for family in ("warp", "crossover", "crossover_evidence")
                      for suffix in ("", *(f"_{fmt}" for fmt in FP8_GROUP_K)))


def release(version: str | None = None) -> str:
    """The major.minor of a Triton version (default: the running one), as a table's ``"triton"`` compares."""
    return ".".join(str(version or triton.__version__).split(".")[:2])


def other_release(table: dict) -> str | None:
    """The Triton version ``table`` was tuned on if another release than the running one, else None."""
    tuned_on = table.get("triton")
    return tuned_on if tuned_on and release(tuned_on) != release() else None


def for_this_release(table: dict) -> dict:
    """``table`` without its :data:`RELEASE_BOUND` families if tuned on another release."""
    return table if other_release(table) is None else {k: v for k, v in table.items() if k not in RELEASE_BOUND}


@functools.cache
def _load(gpu: str | None, shipped: bool, cache: bool) -> dict:
    # gpu None: this GPU, its name read once here rather than on every lookup
    return merge_tables(for_this_release(_read(tuned_file(gpu))) if shipped else {},
                        for_this_release(_read(cache_file(gpu))) if cache else {})


def load_tuned(gpu: str | None = None) -> dict:
    """This GPU's merged table (per :func:`sources`; empty in the interpreter), cached; ``cache_clear()`` rereads."""
    return {} if _runtime.INTERPRET else _load(gpu, *sources())


load_tuned.cache_clear = _load.cache_clear


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive ``flock`` on ``path``'s sidecar ``.<name>.lock``: one writer at a time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.name}.lock"), "a") as lock:
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield  # closing the file releases the lock


def _write(path: Path, table: dict) -> None:
    """Check ``table`` and write it in one ``os.replace`` from a per-process file beside ``path``."""
    check_table(table, f"the table for {path}")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(table, indent=1, sort_keys=True))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    load_tuned.cache_clear()


def update_table(path: Path, update) -> dict:
    """Merge ``update(current)`` into ``path`` under its lock (other releases' :data:`RELEASE_BOUND`
    entries dropped, a bad file overwritten with a warning); returns the table written."""
    with _locked(path):
        try:
            current = for_this_release(read_table(path))
        except ConfigError as e:
            warnings.warn(f"warpdecode overwrites a bad tuned table: {e}", stacklevel=2)
            current = {}
        table = {**merge_tables(update(current), current), "triton": triton.__version__}
        _write(path, table)
    return table


def bucket(table: dict, family: str, H, I, E, K, T) -> dict | None:  # noqa: E741
    """The config a call with T tokens takes from ``table`` (a tuned table), or None."""
    buckets = table.get(family, {}).get(shape_key(H, I, E, K))
    if not buckets:
        return None
    return next((dict(c) for t_max, c in buckets if T <= t_max), dict(buckets[-1][1]))


def _lookup(family: str, H, I, E, K, T):  # noqa: E741
    return bucket(load_tuned(), family, H, I, E, K, T)


def read_env() -> None:
    """Read ``WARPDECODE_TUNED`` again (done once at import)."""
    global _env_sources
    _env_sources = env_choice("WARPDECODE_TUNED", _SOURCES, (True, True))
    load_tuned.cache_clear()
    if os.environ.get("WARPDECODE_AUTOTUNE"):
        warnings.warn("WARPDECODE_AUTOTUNE is not read: warpdecode tunes nothing on first sight; tune a layer once "
                      "with python -m warpdecode tune --shape H I E K (or warpdecode.tune), and moe reads the cache",
                      stacklevel=2)


read_env()


def crossover_of(evidence: dict) -> int:
    """The largest T to which warp decode is no slower at every measured T of ``evidence`` (None: slower); or 0."""
    best = 0
    for T in sorted(evidence, key=int):
        warp, expert = evidence[T]["warp_us"], evidence[T]["expert_us"]
        if warp is None or (expert is not None and warp > expert):
            break
        best = int(T)
    return best


# --- the default rules; in the interpreter, small tiles that walk every masked tail
def _tile(rows: str, r: int, c: int, warps: int = 4, stages: int = 1) -> dict:
    """A tile of ``r`` rows along ``rows`` ("BLOCK_I" or "BLOCK_H") and ``c`` columns along the other."""
    return {rows: r, "BLOCK_H" if rows == "BLOCK_I" else "BLOCK_I": c, "num_warps": warps, "num_stages": stages}


def warp_config(H: int, I: int, E: int, K: int, T: int, *, weights: str | None = None) -> dict:  # noqa: E741
    """Warp decode's ``{"gate_up": ..., "down": ...}`` config: the tuned ``warp`` entry, else the defaults; for
    ``weights`` in an FP8 format, the ``warp_<format>`` entry, else :func:`default_warp_fp8`."""
    tuned = _lookup("warp" if weights is None else f"warp_{weights}", H, I, E, K, T)
    if tuned:
        return tuned
    if weights is not None:  # the interpreter's 128-column steps: past 128, H and I end in a partial step
        return ({"gate_up": _tile("BLOCK_I", 16, 128), "down": _tile("BLOCK_H", 16, 128)} if _runtime.INTERPRET
                else default_warp_fp8(H, I, K))
    if _runtime.INTERPRET:
        return {"gate_up": _tile("BLOCK_I", 16, min(256, triton.next_power_of_2(H))),
                "down": _tile("BLOCK_H", 16, min(256, triton.next_power_of_2(I)))}
    cfg = {"gate_up": _tile("BLOCK_I", 1, min(gate_up_columns(H), triton.next_power_of_2(H)), 1),
           "down": default_down(H, I, K)}
    if shares_experts(E, K, T):
        cfg["grouped"] = {}  # the grouped schedule, with its default tiles (default_grouped)
    return cfg


def gate_up_columns(H: int) -> int:
    """Gate/up columns per step: 1024 or 2048, fewer masked in the last step; 512 under ``warp_pair.TREE_SUMS``
    (a lane's sums as a tree). Data: docs/design.md, "Launch configuration rules"."""
    return 512 if warp_pair.TREE_SUMS else min((2048, 1024), key=lambda b: triton.cdiv(H, b) * b)


#: Weight bytes the down grid must have in flight to hold the read ceiling (Little's law, ~1.5 µs).
DOWN_IN_FLIGHT = 7e6


def default_down(H: int, I: int, K: int) -> dict:  # noqa: E741
    """The down kernel's default: 4 × 256 on four warps; 512 columns where a thread holds too few bytes in
    flight (K ≤ 4, I ≥ 1024: two warps; under :data:`DOWN_IN_FLIGHT`: four), 8 × 512 on 8 under ``K_FIRST``."""
    wide = _tile("BLOCK_H", 8, 512, 8) if warp_pair.K_FIRST else None
    if K <= 4 and I >= 1024:
        return wide or _tile("BLOCK_H", 4, 512, 2)
    if H * K * 256 * 2 < DOWN_IN_FLIGHT and I >= 512:
        return wide or _tile("BLOCK_H", 8, 512)
    return _tile("BLOCK_H", 4, 256)


def default_warp_fp8(H: int, I: int, K: int) -> dict:  # noqa: E741
    """The FP8 pair's defaults (rows share instructions): gate/up 4 rows × ≤ 1024 columns, one warp; down
    8 × 512 on four warps, or 4 × 1024 on two where K ≤ 4, I ≥ 2048. Data: docs/design.md."""
    return {"gate_up": _tile("BLOCK_I", 4, max(128, min(1024, triton.next_power_of_2(H))), 1),
            "down": _tile("BLOCK_H", 4, 1024, 2) if K <= 4 and I >= 2048 else _tile("BLOCK_H", 8, 512)}


#: T·K over distinct experts past which grouped wins, per down-tile form (docs/design.md).
GROUPED_SHARING_3D, GROUPED_SHARING_K_FIRST = 1.23, 1.25
GROUPED_SHARING = GROUPED_SHARING_K_FIRST if warp_pair.K_FIRST else GROUPED_SHARING_3D


def expected_distinct(E: int, K: int, T: int) -> float:
    """The distinct experts T tokens routed uniformly at random to K of E each touch, on average."""
    return E * (1 - (1 - K / E) ** T)


def shares_experts(E: int, K: int, T: int) -> bool:
    """Whether the default is grouped: T·K ≥ ``GROUPED_SHARING`` × expected distinct experts (no sync)."""
    return T > 1 and T * K >= GROUPED_SHARING * expected_distinct(E, K, T)


def default_grouped(wide: bool = False) -> dict:
    """Grouped gate/up default: 64 × 128, 4 warps, 3 stages; ``wide`` (FMAs) 32 × 32, 2 stages."""
    if _runtime.INTERPRET:
        return _tile("BLOCK_I", 16, 32)
    return _tile("BLOCK_I", 32, 32, 4, 2) if wide else _tile("BLOCK_I", 64, 128, 4, 3)


def default_grouped_down(wide: bool = False) -> dict:
    """Grouped down default: 128 × 64, 4 warps, 4 stages; ``wide`` (FMAs) 32 × 32, 2 stages."""
    if _runtime.INTERPRET:
        return _tile("BLOCK_H", 16, 16)
    return _tile("BLOCK_H", 32, 32, 4, 2) if wide else _tile("BLOCK_H", 128, 64, 4, 4)


def expert_config(H: int, I: int, E: int, K: int, T: int, *, fp8: bool = False, elem: int = 2,  # noqa: E741
                  weights: str | None = None) -> dict:
    """The expert config (BLOCK_M, GEMM tiles): tuned, else :func:`default_expert`; ``elem``: bytes per element."""
    family = "expert_fp8" if fp8 else "expert"
    tuned = _lookup(family if weights is None else f"{family}_{weights}", H, I, E, K, T)
    if tuned:
        return tuned
    if _runtime.INTERPRET:
        tile = {"BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1, "num_warps": 4, "num_stages": 1}
        return {"BLOCK_M": 16, "gate_up": dict(tile), "down": dict(tile)}
    return default_expert(H, I, E, K, T, fp8=fp8, elem=elem, group_k=FP8_GROUP_K.get(weights))


#: Shared memory a GEMM's epilogue and layout conversions take beside its pipelined tiles (bytes).
EPILOGUE_SHARED = 16384

#: FP32 accumulators per thread before spilling, operands from shared memory (wgmma, tcgen05).
ACC_REGS_PER_THREAD = 128


def acc_regs_per_thread(arch: int, elem: int) -> int:
    """:data:`ACC_REGS_PER_THREAD`, halved under mma.sync (sm_80, sm_120), quartered for FP32 (FMAs)."""
    if elem == 4:
        return ACC_REGS_PER_THREAD // 4
    return ACC_REGS_PER_THREAD if 90 <= arch < 120 else ACC_REGS_PER_THREAD // 2


#: FP8 weights with 16-bit activations: M tiles of at most this many rows where the rule gives up to twice as
#: many, since the expert path widens e4m3 to fp16 against fp16 rows there (``expert.F16_ROWS_MAX_BLOCK_M``) and
#: bf16 operands past it cost more than the weights read again by a second tile. Data: docs/design.md,
#: "Launch configuration rules".
FP8_WEIGHTS_MAX_BLOCK_M = 32

#: Triton < 3.8 cannot pipeline the FP8 gate/up GEMM transposed (SWAP_AB) for sm_100a.
SWAP_FP8_GATE_UP_SM100 = tuple(int(v) for v in triton.__version__.split(".")[:2]) >= (3, 8)


def default_expert(H: int, I: int, E: int, K: int, T: int, *, fp8: bool = False, elem: int = 2,  # noqa: E741
                   shared_per_block: int | None = None, group_k: int | None = None) -> dict:
    """The expert path's default from shape, T and device: vLLM's ``get_default_config`` tiles per GEMM,
    BLOCK_M and GROUP_M by pairs per expert, accumulators within :func:`acc_regs_per_thread`, stages then
    BLOCK_K fitted to ``shared_per_block`` at ``elem`` bytes, K steps within ``group_k`` (docs/design.md)."""
    limits = _runtime.device_limits()
    arch = limits.get("arch", 90)
    budget = (shared_per_block or limits["shared_per_block"]) - EPILOGUE_SHARED
    pairs_per_expert = T * K / max(E, 1)
    # twice the mean rows per expert: most experts fit one M tile; HALF_M where the upper half is padding
    block_m = min(128, max(16, triton.next_power_of_2(math.ceil(2 * pairs_per_expert))))
    if elem == 4:  # FP32 operands, on FMAs: 64 rows, eight warps, 32-column K steps (no spills)
        block_m = min(block_m, 64)
    # M tiles grouped only where one expert's rows span several; else grouping scatters the weight stream
    group_m = 8 if 2 * pairs_per_expert > 128 else 1
    # FP8 weights, 16-bit activations: tiles of fp16 rows where an expert's rows span at most two
    if group_k and not fp8 and elem == 2 and block_m <= 2 * FP8_WEIGHTS_MAX_BLOCK_M:
        block_m = min(block_m, FP8_WEIGHTS_MAX_BLOCK_M)
        group_m = 8 if 2 * pairs_per_expert > block_m else group_m
    acc_regs = acc_regs_per_thread(arch, elem)
    # most experts see at most one row: the tile transposed, weight rows on the tensor cores' M side; not FP8
    # weights with 16-bit activations, whose e4m3 tiles widened in registers run faster untransposed (the
    # tuners' swap steps, H200 and H100: 0.91x and 0.92x at T = 1, same tiles). Data: docs/design.md, SWAP_AB
    swap = pairs_per_expert <= 0.5 and elem == 2 and not (group_k and not fp8)
    swap_gate_up = swap and (SWAP_FP8_GATE_UP_SM100 or not fp8 or not 100 <= arch < 120)
    m_blocks = min(T * K, expected_distinct(E, K, T))  # the M tiles at decode: one per routed expert
    # a K step within one scale: 128 columns for FP8 activations, group_k for FP8 weights; FP32: 32
    k_max = min(32 if elem == 4 else 128 if fp8 else 256, group_k or 256)

    def tile(n: int, k: int, accumulators: int, swap: bool) -> dict:
        block_n = (128 if T <= 128 else 256) if n >= 4096 else (64 if T <= 64 or accumulators == 2 else 128)
        # vLLM's 64-deep K steps past T = 64 only for M tiles of 64 rows and more
        block_k = min(128 if (fp8 or k >= 4096 or T <= 64 or block_m <= 32) else 64, k_max)
        # few M tiles (decode): narrower N tiles, longer K steps, until the programs fill the GPU twice
        while block_m == 16 and block_n > 64 and m_blocks * triton.cdiv(n, block_n) < 2 * limits["sms"]:
            block_n //= 2
            block_k = min(2 * block_k, k_max, max(32, triton.next_power_of_2(k)))
        # eight warps past 8192 accumulators; from 8192 with FP8 operands (their scales sit beside the sums)
        n_acc = accumulators * block_m * block_n
        warps = 4 if (n_acc < 8192 if (fp8 or group_k) else n_acc <= 8192) and elem <= 2 else 8
        # FP8 weights: a product tile per K step before scaling; two at once for MXFP8 on sm_100
        held = accumulators * (2 if group_k else 1) * (2 if group_k and group_k < 128 and 100 <= arch < 120 else 1)
        while held * block_m * block_n > acc_regs * 32 * warps and block_n > 32:
            block_n //= 2
        block_n = min(block_n, max(32, triton.next_power_of_2(n)))
        # deep pipelines before long K steps: K shrinks to 64 first, then the stages to 2; FP32 32-row tiles 2.
        # 16-bit operands: a 16-row tile keeps its 128-deep K step on three stages, and a tile narrows to 128
        # columns before it gives up a stage. Data: docs/design.md, "Few, wide experts"
        stages = 2 if elem == 4 and block_m <= 32 else 4
        wide = elem == 2 and not fp8 and not group_k
        while (block_m * block_k + accumulators * block_k * block_n) * elem * stages > budget:
            if wide and block_m == 16 and block_k == 128 and stages > 3:
                stages -= 1
            elif block_k > 64:
                block_k //= 2
            elif wide and block_n > 128:
                block_n //= 2
            elif stages > 2:
                stages -= 1
            elif block_k > 32:
                block_k //= 2
            else:
                break
        cfg = {"BLOCK_N": block_n, "BLOCK_K": block_k, "GROUP_M": group_m, "num_warps": warps, "num_stages": stages,
               "HALF_M": block_m >= 32}
        return {**cfg, "SWAP_AB": True} if swap else cfg

    return {"BLOCK_M": block_m, "gate_up": tile(I, H, 2, swap_gate_up), "down": tile(H, I, 1, swap)}
