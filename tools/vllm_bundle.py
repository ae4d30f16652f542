"""The part of a vLLM wheel that its Triton ``fused_experts`` path needs, as a folder small enough to
carry to the GPU machine beside the checkout (``tools/vllm_bundle.sh`` runs this; the folder's use is
``experiments/vllm_path.py``).

What goes in, and why:

    python      the modules the path imports at module level, found by following the imports from
                ENTRY, unmodified; a module under one of STUBBED is left out (the importer in
                experiments/vllm_path.py stands a placeholder in for it, which raises if anything calls
                it once the import is done); a package under BARE keeps its folder but not its
                ``__init__.py``, which imports the whole layer stack
    hook        ``fused_moe/__init__.py`` holds only the real file's override hook (``_config``,
                ``override_config``, ``get_config``), copied verbatim: ``try_get_optimal_moe_config``
                imports ``get_config`` from the package at each call
    configs     every tuned-config JSON under ``fused_moe/configs/`` (the lookup is by E, N, GPU name)
    metadata    ``vllm-<version>.dist-info/METADATA``: vLLM's platform detection reads its version
    .so         ``_C_stable_libtorch`` (silu_and_mul, per_token_group_fp8_quant) and
                ``_moe_C_stable_libtorch`` (moe_align_block_size, moe_sum), each fatbin cut to the
                code ``ARCH`` runs (its sm_90 cubins, or the PTX the driver JIT-compiles for a kernel
                that has none), the host code byte-identical, xz-compressed

    python3 tools/vllm_bundle.py WHEEL OUT [--arch 90]
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import lzma
import re
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

#: Where the import walk starts: the path itself, the platform classes vLLM resolves by name
#: (``vllm.platforms.cuda``; ``vllm.platforms.cpu`` for the CPU check), and modules it imports inside
#: functions on the decode path (NVML for the device name, DeepGEMM's scale format query).
ENTRY = ["vllm", "vllm.model_executor.layers.fused_moe.fused_moe", "vllm.platforms.cuda", "vllm.platforms.cpu",
         "vllm.third_party.pynvml", "vllm.utils.deep_gemm", "vllm.triton_utils.allocation"]

#: Modules (and everything under them) imported at module level for type annotations, engine
#: configuration, distributed state, ROCm, or the modular kernel's engine plumbing: never called
#: on the path ``fused_experts`` takes. Each pulls in pydantic-based configs or the engine.
STUBBED = ["vllm.config", "vllm.distributed", "vllm.v1", "vllm.model_executor.parameter",
           "vllm.model_executor.utils", "vllm.model_executor.layers.fused_moe.moe_output",
           "vllm.model_executor.layers.fused_moe.routed_experts_capturer",
           "vllm.model_executor.layers.fused_moe.runner"]

#: Packages whose folders are kept without their ``__init__.py`` (namespace packages).
BARE = ["vllm.model_executor", "vllm.model_executor.layers", "vllm.model_executor.layers.fused_moe",
        "vllm.model_executor.layers.quantization", "vllm.model_executor.layers.quantization.utils"]

#: The override hook the path reads from ``fused_moe/__init__.py``.
HOOK_PACKAGE, HOOK_NAMES = "vllm.model_executor.layers.fused_moe", ("_config", "override_config", "get_config")

#: The compiled ops and the library holding each.
LIBRARIES = {"_C_stable_libtorch": ["_C::silu_and_mul", "_C::per_token_group_fp8_quant"],
             "_moe_C_stable_libtorch": ["_moe_C::moe_align_block_size", "_moe_C::moe_sum"]}

FATBIN_MAGIC = 0xBA55ED50
ELF, PTX = 2, 1  # fatbin entry kinds


def _under(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _imports(tree: ast.Module, module: str, is_package: bool) -> list[str]:
    """Names a module imports when it runs (its own and ``from``'s targets), not those under
    ``if TYPE_CHECKING`` nor inside functions."""
    out = []

    def visit(nodes):
        for n in nodes:
            if isinstance(n, ast.If):
                if "TYPE_CHECKING" in ast.unparse(n.test):
                    visit(n.orelse)
                else:
                    visit(n.body)
                    visit(n.orelse)
            elif isinstance(n, ast.Try):
                visit(n.body)
                for h in n.handlers:
                    visit(h.body)
                visit(n.orelse)
                visit(n.finalbody)
            elif isinstance(n, ast.With):
                visit(n.body)
            elif isinstance(n, ast.Import):
                out.extend(a.name for a in n.names)
            elif isinstance(n, ast.ImportFrom):
                base = n.module or ""
                if n.level:
                    parts = module.split(".") if is_package else module.split(".")[:-1]
                    parts = parts[:len(parts) - (n.level - 1)]
                    base = ".".join(parts + ([n.module] if n.module else []))
                out.append(base)
                out.extend(f"{base}.{a.name}" for a in n.names)

    visit(tree.body)
    return out


def python_closure(files: dict[str, bytes]) -> tuple[dict[str, str], set[str]]:
    """({module: path in the wheel} to ship, {stubbed module names met}), walking from ENTRY."""
    def path_of(mod):
        base = mod.replace(".", "/")
        for p in (f"{base}/__init__.py", f"{base}.py"):
            if p in files:
                return p
        return None

    ship, stubs, todo = {}, set(), list(ENTRY)
    while todo:
        mod = todo.pop()
        if mod in ship:
            continue
        if _under(mod, STUBBED):
            stubs.add(mod)
            continue
        path = path_of(mod)
        if path is None:  # an attribute imported with ``from``, not a module
            continue
        ship[mod] = path
        parts = mod.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) not in BARE]
        tree = ast.parse(files[path])
        todo += [m for m in _imports(tree, mod, path.endswith("__init__.py")) if m.split(".")[0] == "vllm"]
    return ship, stubs


def hook_source(init_py: bytes) -> str:
    """The override hook's statements of ``fused_moe/__init__.py``, verbatim, with the imports they use."""
    text = init_py.decode()
    tree = ast.parse(text)
    keep = []
    for n in tree.body:
        names = ({t.id for t in getattr(n, "targets", []) if isinstance(t, ast.Name)}
                 | ({n.target.id} if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) else set())
                 | ({n.name} if isinstance(n, ast.FunctionDef) else set()))
        if names & set(HOOK_NAMES):
            first = min([n.lineno] + [d.lineno for d in getattr(n, "decorator_list", [])])
            keep.append("\n".join(text.splitlines()[first - 1:n.end_lineno]))
    found = " ".join(HOOK_NAMES)
    assert len(keep) == len(HOOK_NAMES), f"fused_moe/__init__.py: expected {found}, kept {len(keep)} statements"
    return ("# The override hook of vLLM's fused_moe/__init__.py, copied verbatim by tools/vllm_bundle.py; the\n"
            "# rest of that file (imports of the whole layer stack) is left out.\n"
            "from contextlib import contextmanager\nfrom typing import Any\n\n" + "\n\n\n".join(keep) + "\n")


# -- fatbins ----------------------------------------------------------------------------------------
# .nv_fatbin holds fatbins back to back (8-byte aligned), each a 16-byte header (magic u32, version
# u16, header size u16, size u64) and entries, each a header (kind u16, version u16, header size
# u32, padded payload size u32, ..., sm arch u32 at byte 28) and its payload.

def _section(path: Path, name: str) -> tuple[int, int]:
    out = subprocess.run(["readelf", "-S", "-W", str(path)], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        m = re.match(r"\s*\[\s*\d+\]\s+(\S+)\s+\S+\s+[0-9a-f]+\s+([0-9a-f]+)\s+([0-9a-f]+)", line)
        if m and m.group(1) == name:
            return int(m.group(2), 16), int(m.group(3), 16)
    raise ValueError(f"{path}: no section {name}")


def fatbins(data: bytes | bytearray, start: int, size: int) -> list[tuple[int, int, list]]:
    """[(offset, total size, [(entry offset, kind, entry size, sm)])] of the fatbins in a section."""
    out, i = [], start
    while i + 16 <= start + size:
        magic, _, hsz, fsz = struct.unpack_from("<IHHQ", data, i)
        if magic != FATBIN_MAGIC:
            i += 8
            continue
        entries, j = [], i + hsz
        while j < i + hsz + fsz:
            kind, _, ehsz, padded = struct.unpack_from("<HHII", data, j)
            entries.append((j, kind, ehsz + padded, struct.unpack_from("<I", data, j + 28)[0]))
            j += ehsz + padded
        out.append((i, hsz + fsz, entries))
        i += hsz + fsz
    return out


def cut_fatbins(data: bytearray, start: int, size: int, arch: int) -> dict:
    """Cut each fatbin of the section at ``start`` (``size`` bytes) of ``data``, in place, to what an
    sm_``arch`` GPU runs: its sm_``arch`` cubins, or, where a kernel has none, its newest PTX at or
    below ``arch`` (the driver JIT-compiles it, as it would from the full fatbin). The kept entries
    move to the fatbin's front, its size is rewritten and the rest of its bytes zeroed; nothing
    outside the section changes. Returns counts for the manifest."""
    stats = {"fatbins": 0, "cubins_kept": 0, "ptx_kept": 0, "entries_dropped": 0, "fatbin_bytes": size, "kept_bytes": 0}
    for off, total, entries in fatbins(data, start, size):
        keep = [e for e in entries if e[1] == ELF and e[3] == arch]
        if not keep:
            ptx = [e for e in entries if e[1] == PTX and e[3] <= arch]
            keep = [e for e in ptx if e[3] == max(p[3] for p in ptx)] if ptx else []
        blob = b"".join(bytes(data[e[0]:e[0] + e[2]]) for e in keep)
        hsz = struct.unpack_from("<H", data, off + 6)[0]
        struct.pack_into("<Q", data, off + 8, len(blob))
        data[off + hsz:off + total] = blob + bytes(total - hsz - len(blob))
        stats["fatbins"] += 1
        stats["cubins_kept"] += sum(e[1] == ELF for e in keep)
        stats["ptx_kept"] += sum(e[1] == PTX for e in keep)
        stats["entries_dropped"] += len(entries) - len(keep)
        stats["kept_bytes"] += hsz + len(blob)
    again = fatbins(data, start, size)
    assert all(e[3] == arch or e[1] == PTX for _, _, es in again for e in es), "a foreign cubin is left"
    assert sum(len(es) for _, _, es in again) == stats["cubins_kept"] + stats["ptx_kept"]
    return stats


def keep_arch(src: Path, dst: Path, arch: int) -> dict:
    """``src`` with its .nv_fatbin cut to sm_``arch`` (:func:`cut_fatbins`), written to ``dst``."""
    data = bytearray(src.read_bytes())
    stats = cut_fatbins(data, *_section(src, ".nv_fatbin"), arch)
    dst.write_bytes(bytes(data))
    return stats


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("wheel", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--arch", type=int, default=90, help="the GPU's sm version whose code the .so files keep")
    p.add_argument("--limit-mib", type=float, default=58.0, help="fail if the folder is larger")
    a = p.parse_args(argv)

    with zipfile.ZipFile(a.wheel) as z:
        files = {n: z.read(n) for n in z.namelist() if n.endswith(".py")}
        ship, stubs = python_closure(files)
        if a.out.exists():
            shutil.rmtree(a.out)
        a.out.mkdir(parents=True)
        for path in ship.values():
            (a.out / path).parent.mkdir(parents=True, exist_ok=True)
            (a.out / path).write_bytes(files[path])
        hook = a.out / HOOK_PACKAGE.replace(".", "/") / "__init__.py"
        hook.write_text(hook_source(files[HOOK_PACKAGE.replace(".", "/") + "/__init__.py"]))
        configs = [n for n in z.namelist() if n.startswith("vllm/model_executor/layers/fused_moe/configs/")
                   and n.endswith(".json")]
        for n in configs:
            (a.out / n).parent.mkdir(parents=True, exist_ok=True)
            (a.out / n).write_bytes(z.read(n))
        meta = next(n for n in z.namelist() if re.fullmatch(r"vllm-[^/]+\.dist-info/METADATA", n))
        (a.out / meta).parent.mkdir(parents=True)
        (a.out / meta).write_bytes(z.read(meta))
        version = re.search(rb"^Version: (\S+)", z.read(meta), re.M).group(1).decode()
        libs = {}
        for lib in LIBRARIES:
            name = f"vllm/{lib}.abi3.so"
            raw = a.out / (name + ".full")
            raw.write_bytes(z.read(name))
            cut = a.out / name
            stats = keep_arch(raw, cut, a.arch)
            raw.unlink()
            with lzma.open(a.out / (name + ".xz"), "wb", preset=9 | lzma.PRESET_EXTREME) as f:
                f.write(cut.read_bytes())
            libs[lib] = {"ops": LIBRARIES[lib], "wheel_bytes": z.getinfo(name).file_size,
                         "sha256_cut": hashlib.sha256(cut.read_bytes()).hexdigest(),
                         "xz_bytes": (a.out / (name + ".xz")).stat().st_size, **stats}
            cut.unlink()

    manifest = {"vllm": version, "wheel": a.wheel.name,
                "wheel_sha256": hashlib.sha256(a.wheel.read_bytes()).hexdigest(), "arch": a.arch,
                "modules": sorted(ship), "stubbed": STUBBED, "stubs_met": sorted(stubs),
                "bare": BARE, "hook": f"{HOOK_PACKAGE}: {', '.join(HOOK_NAMES)}", "configs": len(configs),
                "libraries": libs}
    (a.out / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    total = sum(f.stat().st_size for f in a.out.rglob("*") if f.is_file())
    print(f"vLLM {version}: {len(ship)} modules, {len(stubs)} stubbed imports, {len(configs)} configs")
    for lib, s in libs.items():
        print(f"  {lib}: {s['wheel_bytes'] / 2**20:.1f} MiB in the wheel; fatbin {s['fatbin_bytes'] / 2**20:.1f} → "
              f"{s['kept_bytes'] / 2**20:.1f} MiB ({s['cubins_kept']} sm_{a.arch} cubins, {s['ptx_kept']} PTX, "
              f"{s['entries_dropped']} entries dropped); xz {s['xz_bytes'] / 2**20:.1f} MiB")
    print(f"{a.out}: {total / 2**20:.1f} MiB")
    if total > a.limit_mib * 2**20:
        print(f"larger than {a.limit_mib} MiB", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
