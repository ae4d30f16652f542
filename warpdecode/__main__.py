"""The installed command line, ``python -m warpdecode tune --shape H I E K``; the benchmarks and the presets'
shipped table need a checkout: ``python -m bench``."""

from __future__ import annotations

import argparse
import sys

#: The commands that moved to the checkout's ``bench`` package.
IN_CHECKOUT = ("compare", "bench", "e2e", "report")
#: What ``tune`` without ``--shape`` says: tuning the presets writes the shipped table, which lives in the checkout.
TUNE_PRESETS = ("tune without --shape tunes the presets into the shipped table, which needs a checkout of warpdecode: "
                "run `python -m bench tune` from its root; `python -m warpdecode tune --shape H I E K` tunes a layer "
                "into your cache")
PATHS = ["warp", "grouped", "expert", "expert_swap"]
FORMATS = ["block128", "mxfp8"]  # warpdecode.quant.FORMATS, named here so --help imports no torch


def tokens(text: str) -> int:
    """argparse type of a token count: an int >= 1 (argparse names the option in its error)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"a token count must be an integer >= 1, got {text!r}")
    return value


def cmd_tune(args):
    from . import tuner as tune

    try:
        tune.require_gpu("tune --shape")
        for shape in args.shape:
            tune.tune_shape(*shape, dtype=args.dtype or "bf16", Ts=args.T, paths=args.paths, weights=args.weights)
    except (RuntimeError, ValueError) as e:
        sys.exit(f"tune: {e}")


def build_parser() -> argparse.ArgumentParser:
    def wide(prog, cls=argparse.HelpFormatter):  # 100 columns: each command's line in --help on one line
        return cls(prog, width=100, max_help_position=30)

    p = argparse.ArgumentParser(prog="python -m warpdecode", description=__doc__,
                                formatter_class=lambda prog: wide(prog, argparse.RawDescriptionHelpFormatter))
    sub = p.add_subparsers(dest="cmd", required=True, title="commands", metavar="<command>")
    t = sub.add_parser("tune", formatter_class=wide,
                       help="search launch configs on this GPU for --shape H I E K into the user's cache",
                       description="Time launch configurations on this GPU and write the fastest per token bucket "
                                   "for --shape H I E K (any layer) into the user's cache, $WARPDECODE_CACHE_DIR "
                                   "(default $XDG_CACHE_HOME/warpdecode or ~/.cache/warpdecode), with the auto "
                                   "crossover measured at the tuned T's; warpdecode.moe reads it after the shipped "
                                   "table. Needs a CUDA GPU. The presets' shipped table is tuned from a checkout: "
                                   "python -m bench tune.")
    t.add_argument("--shape", nargs=4, type=int, metavar=("H", "I", "E", "K"), action="append",
                   help="a layer shape, any: hidden size, expert intermediate size, experts, experts per token; "
                        "written to the user's cache (repeat it for several shapes)")
    t.add_argument("--dtype", choices=["bf16", "fp16"],
                   help="the dtype timed (default bf16; tables are keyed by shape)")
    t.add_argument("--T", type=tokens, nargs="+",
                   help="the token buckets to tune (default 1 2 4 8 16 for warp decode, "
                        "1 8 32 128 256 for the expert path; warp decode takes those ≤ 16)")
    t.add_argument("--weights", choices=FORMATS,
                   help="FP8 weights of this format (warpdecode.quantize_experts, experts_from_checkpoint): the "
                        "expert path's tiles and the crossover for them (default: 16-bit weights)")
    t.add_argument("--paths", nargs="+", default=PATHS, choices=PATHS,
                   help="warp: the two-kernel pair; "
                        "grouped: each routed expert's rows read once for all its tokens, against the tuned pair; "
                        "expert: the expert path's GEMM tiles; "
                        "expert_swap: SWAP_AB on the tuned expert tiles (default warp grouped expert expert_swap; "
                        "with --weights, expert expert_swap)")
    t.set_defaults(fn=cmd_tune)
    return p


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in IN_CHECKOUT:
        sys.exit(f"{argv[0]} needs a checkout of warpdecode: run `python -m bench {argv[0]}` from its root")
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if not args.shape:
        sys.exit(TUNE_PRESETS)
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    args.fn(args)


if __name__ == "__main__":
    main()
