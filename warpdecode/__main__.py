"""Command line: ``python -m warpdecode {compare,bench,tune,report} …`` (``--help`` on each)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import torch

from . import _runtime
from .presets import MODEL_PRESETS, PRESETS, get_preset

ALL_T = [1, 2, 4, 8, 16, 32, 64, 128, 256]


def _table(rows, cols):
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in cols]
    lines = ["  ".join(c.rjust(w) for c, w in zip(cols, widths, strict=False))]
    lines += ["  ".join(str(r[c]).rjust(w) for c, w in zip(cols, widths, strict=False)) for r in rows]
    return "\n".join(lines)


def cmd_compare(args):
    from .bench import sweep

    on_gpu = _runtime.DEFAULT_DEVICE.type == "cuda"
    preset = args.preset
    if not on_gpu:
        print("No CUDA GPU: kernels run in Triton's CPU interpreter, so this uses the 'tiny' preset and "
              "reports error only (no timings).")
        preset = "tiny"
    shape = get_preset(preset)
    Ts = args.T or ([1, 8, 64] if on_gpu else [1, 4, 16])
    print(f"{shape.name}: H={shape.H} I={shape.I} E={shape.E} K={shape.K}, bf16, on {_runtime.gpu_name()}")
    methods = ["loop", "expert", "warp"]
    acc = sweep.accuracy([shape], Ts, methods + ["expert_fp8"], seeds=1, device=_runtime.DEFAULT_DEVICE.type)
    for r in acc:
        r["error"] = f"{r['error']:.3e}"
        r["error/floor"] = f"{r['error_over_floor']:.2f}"
    print("\nError against the float64 reference (floor = the float64 result rounded once to bf16):")
    print(_table(acc, ["T", "method", "error", "error/floor"]))
    if not on_gpu:
        return
    from .bench.timing import read_ceiling

    ceiling = read_ceiling(2.0)
    rows = sweep.speed([shape], Ts, methods, ceiling_tbps=ceiling, reps=args.reps)
    for r in rows:
        r["time_us"] = r["median_us"]
        r["TB/s"] = r["achieved_TBps"]
        r["of ceiling"] = f"{100 * r['frac_ceiling']:.1f}%"
    print(f"\nTime per layer call (median of {args.reps} CUDA-graph replays over {rows[0]['layers']} layer copies); "
          f"read ceiling measured now: {ceiling:.2f} TB/s")
    print(_table(rows, ["T", "method", "time_us", "floor_us", "TB/s", "of ceiling"]))


def cmd_bench(args):
    from .bench import data, sweep

    shapes = [get_preset(p) for p in (args.presets or MODEL_PRESETS)]
    if _runtime.DEFAULT_DEVICE.type != "cuda":
        print("No CUDA GPU: running the accuracy sweep on the 'tiny' preset in Triton's CPU interpreter; "
              "no timings are claimed.")
        rows = sweep.accuracy([get_preset("tiny")], args.T or [1, 4], ["loop", "expert", "warp", "expert_fp8"],
                              seeds=1, device="cpu")
        print(_table([{**r, "error_over_floor": f"{r['error_over_floor']:.2f}"} for r in rows],
                     ["T", "method", "error_over_floor"]))
        if args.out:
            data.merge_write(Path(args.out) / "accuracy.csv", rows)
        return
    if len(shapes) > 1 and not args.in_process:  # each measures its own read ceiling, which its rows carry
        _each_in_own_process(bench_argv, args, [s.name for s in shapes])
        return
    from .bench.timing import copy_ceiling, read_ceiling

    out = Path(args.out) if args.out else data.gpu_dir(torch.cuda.get_device_name())
    Ts = args.T or ALL_T
    ceiling = read_ceiling(4.0)
    copy = copy_ceiling(4.0)
    print(f"ceiling: read {ceiling:.3f} TB/s, copy {copy:.3f} TB/s", flush=True)
    ceiling_row = {**sweep.meta(), "read_TBps": round(ceiling, 4), "copy_TBps": round(copy, 4)}
    data.merge_write(out / "ceiling.csv", [ceiling_row])
    if "speed" in args.what:
        rows = sweep.speed(shapes, Ts, args.methods, ceiling_tbps=ceiling, reps=args.reps)
        data.merge_write(out / "speed.csv", rows)
        print(_table(rows, ["preset", "T", "method", "median_us", "floor_us", "frac_ceiling", "error_over_floor"]))
    if "stages" in args.what:
        data.merge_write(out / "stages.csv", sweep.stages(shapes, args.stage_T, reps=args.reps))
    if "accuracy" in args.what:
        rows = sweep.accuracy(shapes, [t for t in Ts if t <= 64], ["loop", "expert", "expert_fp8", "warp",
                                                                     "warp_bf16_act", "grouped_mm"])
        data.merge_write(out / "accuracy.csv", rows)
    print(f"wrote {out}")


def bench_argv(args, preset: str) -> list[str]:
    """The command line that benchmarks one preset, in a process of its own, as ``args`` asks."""
    argv = [sys.executable, "-m", "warpdecode", "bench", "--presets", preset, "--in-process",
            "--stage-T", *map(str, args.stage_T), "--methods", *args.methods, "--what", *args.what,
            "--reps", str(args.reps)]
    argv += ["--T", *map(str, args.T)] if args.T else []
    return argv + (["--out", args.out] if args.out else [])


def tune_argv(args, preset: str) -> list[str]:
    """The command line that tunes one preset, in a process of its own (it merges its buckets into
    the table file and writes it)."""
    return [sys.executable, "-m", "warpdecode", "tune", "--presets", preset, "--in-process", "--paths", *args.paths]


def _each_in_own_process(argv_of, args, presets: list[str]):
    """One process per preset, for ``bench`` and ``tune``. What a process allocated and freed
    before changes later timings: Mixtral's warp decode at T=1 took 184 µs after DeepSeek-V3's
    layers had come and gone in the same process and 162 µs in a fresh one (results/NOTES.md), so
    no preset inherits another's memory history."""
    for preset in presets:
        print(f"== {preset}, in a process of its own", flush=True)
        subprocess.run(argv_of(args, preset), check=True)


def cmd_tune(args):
    from .bench import tune

    if _runtime.DEFAULT_DEVICE.type != "cuda":
        sys.exit("tune needs a CUDA GPU")
    presets = args.presets or MODEL_PRESETS
    if len(presets) > 1 and not args.in_process:
        _each_in_own_process(tune_argv, args, presets)
        return
    tune.tune(presets, paths=args.paths)


def cmd_e2e(args):
    from .bench import data

    on_gpu = _runtime.DEFAULT_DEVICE.type == "cuda"
    if not on_gpu:
        print("No CUDA GPU: the layer-error study on the 'tiny' model in Triton's CPU interpreter; no timings.")
    out = Path(args.out) if args.out else (data.gpu_dir(torch.cuda.get_device_name()) if on_gpu else None)
    name = args.model if on_gpu else "tiny"
    if "errors" in args.what:
        from .bench.e2e import layer_errors

        rows = layer_errors(name, T=args.err_T, steps=args.steps, layers=args.layers if on_gpu else None,
                            device=_runtime.DEFAULT_DEVICE.type, compile=args.compile)
        for r in rows:
            if r["layer"] == "logits" or int(r["layer"]) % max(1, len(rows) // 24) == 0:
                print(f"{r['method']:7s} layer {r['layer']!s:>6}: error {r['error']:.3e}")
        if out:
            data.merge_write(out / "e2e_errors.csv", rows)
    if not on_gpu:
        return
    if "speed" in args.what:
        from .bench.e2e import decode_speed
        from .bench.timing import read_ceiling

        decode_speed(name, args.T, args.ctx, ["expert", "warp", "auto"], layers=args.layers,
                     ceiling_tbps=read_ceiling(), compile=args.compile,
                     emit=lambda row: data.merge_write(out / "e2e_speed.csv", [row]))
    if "generate" in args.what:
        from .bench.hf_generate import generate_speed

        data.merge_write(out / "hf_generate.csv", generate_speed(layers=args.hf_layers))
    print(f"wrote {out}")


def cmd_report(args):
    from .bench import report

    args.gpu = args.gpu or (torch.cuda.get_device_name() if _runtime.DEFAULT_DEVICE.type == "cuda" else "NVIDIA H200")
    if args.only == "crossover":
        print("crossover:", report.write_crossover(args.gpu))
    else:
        report.main(args.gpu)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m warpdecode", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)

    c = sub.add_parser("compare", help="the three paths on one preset: error vs float64; time and bandwidth on a GPU")
    c.add_argument("--preset", default="qwen3-30b-a3b", choices=sorted(PRESETS))
    c.add_argument("--T", type=int, nargs="+", help="token counts (default 1 8 64; 1 4 16 on the CPU)")
    c.add_argument("--reps", type=int, default=100)
    c.set_defaults(fn=cmd_compare)

    b = sub.add_parser("bench", help="sweeps to CSV under results/<GPU>/ (speed, stage breakdown, accuracy)")
    b.add_argument("--presets", nargs="+", choices=sorted(PRESETS))
    b.add_argument("--T", type=int, nargs="+", help=f"token counts (default {ALL_T})")
    b.add_argument("--stage-T", type=int, nargs="+", default=[1, 8, 64, 256])
    b.add_argument("--methods", nargs="+", default=["loop", "expert", "warp", "auto", "grouped_mm"])
    sweeps = ["speed", "stages", "accuracy"]
    b.add_argument("--what", nargs="+", default=sweeps, choices=sweeps)
    b.add_argument("--reps", type=int, default=100)
    b.add_argument("--out", help="output folder (default results/<GPU>; on a CPU nothing is written unless given)")
    b.add_argument("--in-process", action="store_true",
                   help="run every preset in this process (by default, on a GPU, each preset runs in a process "
                        "of its own: what an earlier preset allocated changes later timings)")
    b.set_defaults(fn=cmd_bench)

    t = sub.add_parser("tune", help="search launch configs on this GPU, write warpdecode/tuned/<GPU>.json")
    t.add_argument("--presets", nargs="+", choices=sorted(PRESETS))
    t.add_argument("--paths", nargs="+", default=["warp", "fused", "grouped", "expert", "expert_swap"],
                   choices=["warp", "expert", "fused", "grouped", "expert_swap"],
                   help="warp: the two-kernel pair; fused: the persistent warp schedule, against the tuned pair; "
                        "grouped: each routed expert's rows read once for all its tokens, against the tuned pair; "
                        "expert: the expert path's GEMM tiles; "
                        "expert_swap: SWAP_AB on the tuned expert tiles")
    t.add_argument("--in-process", action="store_true",
                   help="tune every preset in this process (by default each preset gets a process of its own)")
    t.set_defaults(fn=cmd_tune)

    e = sub.add_parser("e2e", help="whole decode steps: tokens/s per method, per-layer error vs float64, HF generate")
    e.add_argument("--model", default="qwen3-30b-a3b")
    e.add_argument("--layers", type=int, help="use only the first N layers (default: all)")
    parts = ["speed", "errors", "generate"]
    e.add_argument("--what", nargs="+", default=parts, choices=parts)
    e.add_argument("--T", type=int, nargs="+", default=[1, 4, 16, 64])
    e.add_argument("--ctx", type=int, nargs="+", default=[512, 4096])
    e.add_argument("--err-T", type=int, default=4)
    e.add_argument("--steps", type=int, default=8, help="decode steps fed to the error study")
    e.add_argument("--hf-layers", type=int, default=8)
    e.add_argument("--compile", action="store_true",
                   help="run each layer's dense code (norms, QKV, RoPE, residual, routing) through torch.compile; "
                        "attention and the MoE layer stay as they are (falls back to eager, with a warning)")
    e.add_argument("--out")
    e.set_defaults(fn=cmd_e2e)

    r = sub.add_parser("report", help="figures, README table and the auto crossover, from the CSV")
    r.add_argument("--gpu", default=None, help="results of which GPU (default: this one, else NVIDIA H200)")
    r.add_argument("--only", choices=["crossover"], help="only derive the auto crossover table")
    r.set_defaults(fn=cmd_report)

    args = p.parse_args(argv)
    args.fn(args)


if __name__ == "__main__":
    main()
