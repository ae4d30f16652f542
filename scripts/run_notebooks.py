"""Execute notebooks in place, top to bottom in a fresh kernel each, and fail loudly on any error.

    python scripts/run_notebooks.py                     # every notebooks/*.ipynb
    python scripts/run_notebooks.py notebooks/03_*.ipynb

Each notebook runs with its own folder as the working directory (as Jupyter does), under the
``python3`` kernel, with a time limit per cell. The outputs are written back into the .ipynb, so
on a GPU this is how the committed outputs are made. The .py twins (jupytext py:percent) are the
source: run ``jupytext --sync notebooks/*.py`` first if a twin changed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

REPO = Path(__file__).resolve().parents[1]


def run(path: Path, timeout: int, kernel: str) -> float:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name=kernel, allow_errors=False,
                            resources={"metadata": {"path": str(path.parent)}})
    t0 = time.time()
    try:
        client.execute()
    finally:  # keep what ran, the failing cell's traceback included, for reading
        nbformat.write(nb, path)
    return time.time() - t0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("notebooks", nargs="*", type=Path, help="default: notebooks/*.ipynb")
    p.add_argument("--timeout", type=int, default=900, help="seconds per cell (default 900)")
    p.add_argument("--kernel", default="python3")
    args = p.parse_args(argv)
    paths = args.notebooks or sorted((REPO / "notebooks").glob("*.ipynb"))
    if not paths:
        print("no notebooks found", file=sys.stderr)
        return 1
    failed = []
    for path in paths:
        path = path.resolve()
        print(f"running {path.relative_to(REPO) if path.is_relative_to(REPO) else path} ...", flush=True)
        try:
            seconds = run(path, args.timeout, args.kernel)
        except CellExecutionError as e:
            print(f"FAILED {path.name}:\n{e}", file=sys.stderr, flush=True)
            failed.append(path.name)
            continue
        print(f"  ok in {seconds:.0f} s", flush=True)
    if failed:
        print(f"\n{len(failed)} of {len(paths)} notebooks failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    print(f"\nall {len(paths)} notebooks ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())
