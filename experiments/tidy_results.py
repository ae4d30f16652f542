"""Convert experiment CSVs written in their scripts' own column layouts into the one schema of
``harness.COLUMNS`` (``experiments/results/<GPU>/<name>.csv``). The conversion is this code, not
hand edits: every field a source row has lands in a schema column or in ``detail``.

    python experiments/tidy_results.py --source DIR [--dest experiments/results/NVIDIA_H200]

``harness.SPECS`` names, per source file, the experiment file and version its rows belong to, which field
is the row's label and which its config. A source file already in the schema is copied as it is.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import harness


def convert(src: Path, dest: Path) -> int:
    experiment, version, label, config, rename, transform = harness.SPECS[src.name]
    rows = harness.read(src)
    if rows and set(rows[0]) <= set(harness.COLUMNS):  # tidy already (files from before a column was added too)
        out = rows
    else:
        out = [harness.tidy(transform(dict(r)) if transform else dict(r), experiment=experiment, version=version,
                            label=label, config=config, rename=rename) for r in rows]
    dest.parent.mkdir(parents=True, exist_ok=True)
    with dest.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=harness.COLUMNS)
        w.writeheader()
        w.writerows(out)
    return len(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--source", type=Path, required=True, help="a folder of CSVs in the scripts' own layouts")
    p.add_argument("--dest", type=Path, default=harness.HERE / "results" / "NVIDIA_H200")
    args = p.parse_args()
    for name in harness.SPECS:
        if (args.source / name).exists():
            print(f"{name}: {convert(args.source / name, args.dest / name)} rows")


if __name__ == "__main__":
    main()
