"""The installed command line, ``python -m warpdecode tune``; the benchmarks need a checkout: ``python -m bench``."""

from __future__ import annotations

import argparse
import subprocess
import sys

from . import _runtime
from .presets import MODEL_PRESETS, PRESETS

#: The commands that moved to the checkout's ``bench`` package.
IN_CHECKOUT = ("compare", "bench", "e2e", "report")
PATHS = ["warp", "fused", "grouped", "expert", "expert_swap"]


def tokens(text: str) -> int:
    """argparse type of a token count: an int >= 1 (argparse names the option in its error)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"a token count must be an integer >= 1, got {text!r}")
    return value


def each_in_own_process(argv_of, args, presets: list[str]):
    """One process per preset, so that none inherits another's memory history (docs/design.md)."""
    for preset in presets:
        print(f"== {preset}, in a process of its own", flush=True)
        subprocess.run(argv_of(args, preset), check=True)


def cmd_tune(args):
    from . import tuner as tune

    if args.shape and args.presets:
        sys.exit("tune: --shape or --presets, not both")
    if args.shape:
        try:
            tune.require_gpu("tune --shape")
            for shape in args.shape:
                tune.tune_shape(*shape, dtype=args.dtype or "bf16", Ts=args.T, paths=args.paths)
        except (RuntimeError, ValueError) as e:
            sys.exit(f"tune: {e}")
        return
    ignored = {"dtype": "the presets are tuned in bf16", "T": "the presets take the default token buckets"}
    for option, why in ignored.items():
        if getattr(args, option) is not None:
            print(f"--{option} ignored: {why}", flush=True)
    if _runtime.DEFAULT_DEVICE.type != "cuda":
        sys.exit("tune needs a CUDA GPU: it times launch configs, and the CPU interpreter times nothing")
    presets = args.presets or MODEL_PRESETS
    if len(presets) > 1 and not args.in_process:
        each_in_own_process(lambda args, preset: [sys.executable, "-m", "warpdecode", "tune", "--presets", preset,
                                                  "--in-process", "--paths", *args.paths], args, presets)
        return
    tune.tune(presets, paths=args.paths)


def build_parser() -> argparse.ArgumentParser:
    def wide(prog, cls=argparse.HelpFormatter):  # 100 columns: each command's line in --help on one line
        return cls(prog, width=100, max_help_position=30)

    p = argparse.ArgumentParser(prog="python -m warpdecode", description=__doc__,
                                formatter_class=lambda prog: wide(prog, argparse.RawDescriptionHelpFormatter))
    sub = p.add_subparsers(dest="cmd", required=True, title="commands", metavar="<command>")
    presets = sorted(PRESETS)
    t = sub.add_parser("tune", formatter_class=wide,
                       help="search launch configs on this GPU: presets, or --shape to a cache",
                       description="Time launch configurations on this GPU and write the fastest per token bucket: "
                                   "for --presets into warpdecode/tuned/<GPU>.json (the shipped table); for --shape "
                                   "H I E K (any layer) into the user's cache, $WARPDECODE_CACHE_DIR (default "
                                   "$XDG_CACHE_HOME/warpdecode or ~/.cache/warpdecode), with the auto crossover "
                                   "measured at the tuned T's; warpdecode.moe reads it after the shipped table. "
                                   "Needs a CUDA GPU.")
    t.add_argument("--presets", nargs="+", choices=presets, metavar="PRESET",
                   help=f"layer shapes to tune (default: every model preset); from {presets}")
    t.add_argument("--shape", nargs=4, type=int, metavar=("H", "I", "E", "K"), action="append",
                   help="a layer shape, any: hidden size, expert intermediate size, experts, experts per token; "
                        "written to the user's cache (repeat it for several shapes)")
    t.add_argument("--dtype", choices=["bf16", "fp16"],
                   help="the dtype timed with --shape (default bf16; tables are keyed by shape)")
    t.add_argument("--T", type=tokens, nargs="+",
                   help="with --shape, the token buckets to tune (default 1 2 4 8 16 for warp decode, "
                        "1 8 32 128 256 for the expert path; warp decode takes those ≤ 16)")
    t.add_argument("--paths", nargs="+", default=PATHS, choices=PATHS,
                   help="warp: the two-kernel pair; fused: the persistent warp schedule, against the tuned pair; "
                        "grouped: each routed expert's rows read once for all its tokens, against the tuned pair; "
                        "expert: the expert path's GEMM tiles; "
                        "expert_swap: SWAP_AB on the tuned expert tiles (default warp fused grouped expert "
                        "expert_swap)")
    t.add_argument("--in-process", action="store_true",
                   help="tune every preset in this process (by default each preset gets a process of its own)")
    t.set_defaults(fn=cmd_tune)
    return p


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in IN_CHECKOUT:
        sys.exit(f"{argv[0]} needs a checkout of warpdecode: run `python -m bench {argv[0]}` from its root")
    args = build_parser().parse_args(argv)
    args.fn(args)


if __name__ == "__main__":
    main()
