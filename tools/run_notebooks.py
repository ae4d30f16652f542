"""Execute notebooks top to bottom, in a fresh kernel each, and fail loudly on any error.

    python tools/run_notebooks.py                       # every notebooks/*.ipynb
    python tools/run_notebooks.py notebooks/03_*.ipynb
    python tools/run_notebooks.py --out /tmp/nb         # the executed copies go to /tmp/nb

Where the executed notebooks go: the committed .ipynb files carry the outputs of one run on a
CUDA GPU, so

- on a CUDA GPU (warpdecode compiles its kernels), each is written back in place, by default;
- without one (Triton's CPU interpreter), each is written to build/notebooks/ by default, and
  ``--in-place`` is refused: a CPU run never overwrites the GPU outputs;
- ``--out DIR``, on either, writes the executed copies to DIR and leaves the originals alone.

Each notebook runs with its own folder as the working directory (as Jupyter does), under the
``python3`` kernel, with a time limit per cell; a notebook that fails is still written (to the
same place), its failing cell's traceback included. The .py twins (jupytext py:percent) are the
source: run ``jupytext --sync notebooks/[0-9]*.py`` first if a twin changed.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]  # this tool lives in the checkout, beside the notebooks
CPU_OUT = REPO / "build" / "notebooks"


def on_gpu() -> bool:
    """Whether the notebooks' kernels would compile for a CUDA GPU here (the decision the kernel
    processes make, from the same environment), i.e. whether their outputs are a GPU run's."""
    from warpdecode import _runtime

    return _runtime.DEFAULT_DEVICE.type == "cuda"


def destination(args) -> Path | None:
    """The folder the executed notebooks go to; None: in place. Exits when a CPU run is asked to
    write in place."""
    if args.out:
        return Path(args.out).resolve()
    gpu = on_gpu()
    if args.in_place and not gpu:
        sys.exit("refusing --in-place without a CUDA GPU: the committed notebooks carry a GPU run's outputs "
                 "(pass --out DIR, or leave both out to write to build/notebooks/)")
    return None if gpu else CPU_OUT


def execute(nb, path: Path, timeout: int, kernel: str) -> None:
    """Run every cell of ``nb`` (read from ``path``) in a fresh kernel in ``path``'s folder."""
    from nbclient import NotebookClient

    NotebookClient(nb, timeout=timeout, kernel_name=kernel, allow_errors=False,
                   resources={"metadata": {"path": str(path.parent)}}).execute()


#: stderr lines a library prints while it works (tqdm's bars and its notice that ipywidgets is missing):
#: dropped from the saved outputs, which keep what the cells print.
PROGRESS_LINES = re.compile(r"\d+%\|.*\|.*(it/s|s/it)|TqdmWarning|from \.autonotebook import|^\s*$")


def _progress_only(out) -> bool:
    return out.get("name") == "stderr" and all(PROGRESS_LINES.search(line)
                                               for line in re.split(r"[\r\n]", out.get("text", "")))


def drop_progress(nb) -> int:
    """Remove from ``nb``'s outputs every stderr stream made only of :data:`PROGRESS_LINES`; returns how many."""
    dropped = 0
    for cell in nb.cells:
        if "outputs" in cell:
            kept = [out for out in cell.outputs if not _progress_only(out)]
            dropped += len(cell.outputs) - len(kept)
            cell.outputs = kept
    return dropped


def run(path: Path, target: Path, timeout: int, kernel: str) -> float:
    """Execute ``path`` and write the executed notebook to ``target``; returns the seconds it took."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    t0 = time.time()
    try:
        execute(nb, path, timeout, kernel)
    finally:  # keep what ran, the failing cell's traceback included, for reading
        target.parent.mkdir(parents=True, exist_ok=True)
        drop_progress(nb)
        nbformat.write(nb, target)
    return time.time() - t0


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def main(argv=None) -> int:
    from nbclient.exceptions import CellExecutionError

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("notebooks", nargs="*", type=Path, help="the .ipynb files to run (default: notebooks/*.ipynb)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--out", metavar="DIR",
                       help="write the executed notebooks to DIR, leaving the originals alone (default: in place on "
                            "a CUDA GPU, build/notebooks/ without one)")
    where.add_argument("--in-place", action="store_true",
                       help="write the executed notebooks over the originals (the default on a CUDA GPU; refused "
                            "without one)")
    p.add_argument("--timeout", type=int, default=900, help="seconds per cell (default 900)")
    p.add_argument("--kernel", default="python3", help="the Jupyter kernel to run them under (default python3)")
    args = p.parse_args(argv)
    paths = [path.resolve() for path in args.notebooks] or sorted((REPO / "notebooks").glob("*.ipynb"))
    if not paths:
        print("no notebooks found", file=sys.stderr)
        return 1
    out = destination(args)
    print(f"writing the executed notebooks {'in place' if out is None else 'to ' + _shown(out)}", flush=True)
    failed = []
    for path in paths:
        target = path if out is None else out / path.name
        print(f"running {_shown(path)} -> {_shown(target)} ...", flush=True)
        try:
            seconds = run(path, target, args.timeout, args.kernel)
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
