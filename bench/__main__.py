"""The lab's command line, run from the root of a warpdecode checkout:
``python -m bench <command> …``; ``--help`` lists the commands, and ``python -m bench <command>
--help`` explains each option. It needs the checkout (``results/``, ``README.md``, ``docs/``,
``figures/``, the shipped ``warpdecode/tuned/``), which the wheel does not hold; the installed package's
own command line is ``python -m warpdecode tune --shape H I E K``.

Without a CUDA GPU the kernels run in Triton's CPU interpreter: the commands that can, run a
small preset and report error only, and say which options they cannot honour there.
Commands that read or write benchmark data find the checkout from the current directory
upward; ``--root`` names it instead.
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

import torch

from bench.cli import each_in_own_process, on_gpu, parse, say_ignored, subcommands
from warpdecode import _runtime
from warpdecode.__main__ import PATHS as PACKAGE_PATHS
from warpdecode.__main__ import tokens
from warpdecode.presets import MODEL_PRESETS, PRESETS, get_preset

ALL_T = [1, 2, 4, 8, 16, 32, 64, 128, 256]
SWEEPS = ["speed", "stages", "accuracy"]
E2E_PARTS = ["speed", "errors", "generate"]
CPU_PRESET = "tiny"  # what the interpreter runs: odd sizes, prime E, fast enough
#: tune's steps: the package tuner's, and the persistent schedule's (bench/persistent.py) after the pair's
PATHS = [PACKAGE_PATHS[0], "fused", *PACKAGE_PATHS[1:]]


def table(rows, cols):
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in cols]
    lines = ["  ".join(c.rjust(w) for c, w in zip(cols, widths, strict=False))]
    lines += ["  ".join(str(r[c]).rjust(w) for c, w in zip(cols, widths, strict=False)) for r in rows]
    return "\n".join(lines)


def cmd_compare(args):
    from bench import sweep

    gpu = on_gpu()
    preset = args.preset
    if not gpu:
        instead = f"the {CPU_PRESET!r} preset" + (f" instead of {preset!r}" if preset != CPU_PRESET else "")
        print(f"No CUDA GPU: kernels run in Triton's CPU interpreter, so this runs {instead} and reports error "
              "only (no timings).")
        say_ignored(args, {"reps": "no timings without a CUDA GPU"})
        preset = CPU_PRESET
    shape = get_preset(preset)
    Ts = args.T or ([1, 8, 64] if gpu else [1, 4, 16])
    print(f"{shape.name}: H={shape.H} I={shape.I} E={shape.E} K={shape.K}, bf16, on {_runtime.gpu_name()}")
    methods = ["loop", "expert", "warp"]
    acc = sweep.accuracy([shape], Ts, methods + ["expert_fp8"], seeds=1, device=_runtime.DEFAULT_DEVICE.type)
    for r in acc:
        r["error"] = f"{r['error']:.3e}"
        r["error/floor"] = f"{r['error_over_floor']:.2f}"
    print("\nError against the float64 reference (floor = the float64 result rounded once to bf16):")
    print(table(acc, ["T", "method", "error", "error/floor"]))
    if not gpu:
        return
    from bench.timing import read_ceiling

    ceiling = read_ceiling(2.0)
    rows = sweep.speed([shape], Ts, methods, ceiling_tbps=ceiling, reps=args.reps)
    for r in rows:
        r["time_us"] = r["median_us"]
        r["TB/s"] = r["achieved_TBps"]
        r["of ceiling"] = f"{100 * r['frac_ceiling']:.1f}%"
    print(f"\nTime per warpdecode.moe call (median of {args.reps} CUDA-graph replays over {rows[0]['layers']} layer "
          f"copies); read ceiling measured now: {ceiling:.2f} TB/s")
    print(table(rows, ["T", "method", "time_us", "floor_us", "TB/s", "of ceiling"]))


def _bench_cpu(args):
    """bench without a GPU: the accuracy sweep on the tiny preset, nothing timed."""
    from bench import data, sweep

    print(f"No CUDA GPU: running the accuracy sweep on the {CPU_PRESET!r} preset in Triton's CPU interpreter; "
          "no timings are claimed.", flush=True)
    timing = "timings need a CUDA GPU"
    say_ignored(args, {"presets": f"the CPU interpreter runs the {CPU_PRESET!r} preset "
                                  f"({', '.join(args.presets or [])} need a GPU)",
                       "methods": "they choose what the speed sweep times; " + timing,
                       "stage_T": "the stage sweep is timed; " + timing, "reps": timing,
                       "in_process": "only timed runs are split into processes",
                       "root": "a CPU run writes only where --out says"})
    if "what" in args.given:
        skipped = [w for w in args.what if w != "accuracy"]
        if skipped:
            print(f"--what {' '.join(skipped)} ignored: {timing}", flush=True)
        if "accuracy" not in args.what:
            sys.exit("bench: nothing to run without a CUDA GPU (only --what accuracy runs on the CPU)")
    rows = sweep.accuracy([get_preset(CPU_PRESET)], args.T or [1, 4], ["loop", "expert", "warp", "expert_fp8"],
                          seeds=1, device="cpu")
    print(table([{**r, "error_over_floor": f"{r['error_over_floor']:.2f}"} for r in rows],
                 ["T", "method", "error_over_floor"]))
    if args.out:
        data.merge_write(Path(args.out) / "accuracy.csv", rows)
        print(f"wrote {Path(args.out) / 'accuracy.csv'}")
    else:
        print("nothing written (--out DIR writes accuracy.csv there)")


def cmd_bench(args):
    from bench import data, sweep

    if not on_gpu():
        return _bench_cpu(args)
    shapes = [get_preset(p) for p in (args.presets or MODEL_PRESETS)]
    out = Path(args.out) if args.out else data.gpu_dir(torch.cuda.get_device_name(), args.root)  # fails early
    if len(shapes) > 1 and not args.in_process:  # each measures its own read ceiling, which its rows carry
        each_in_own_process(bench_argv, args, [s.name for s in shapes])
        return
    from bench.timing import copy_ceiling, read_ceiling

    Ts = args.T or ALL_T
    ceiling = read_ceiling(4.0)
    copy = copy_ceiling(4.0)
    print(f"ceiling: read {ceiling:.3f} TB/s, copy {copy:.3f} TB/s", flush=True)
    ceiling_row = {**sweep.meta(), "read_TBps": round(ceiling, 4), "copy_TBps": round(copy, 4)}
    data.merge_write(out / "ceiling.csv", [ceiling_row])
    if "speed" in args.what:
        rows = sweep.speed(shapes, Ts, args.methods, ceiling_tbps=ceiling, reps=args.reps, kernels=True)
        data.merge_write(out / "speed.csv", rows)
        print(table(rows, ["preset", "T", "method", "median_us", "floor_us", "frac_ceiling", "error_over_floor",
                            "overhead"]))
    if "stages" in args.what:
        data.merge_write(out / "stages.csv", sweep.stages(shapes, args.stage_T, reps=args.reps))
    if "accuracy" in args.what:
        rows = sweep.accuracy(shapes, [t for t in Ts if t <= 64], ["loop", "expert", "expert_fp8", "warp",
                                                                     "warp_bf16_act", "grouped_mm"])
        data.merge_write(out / "accuracy.csv", rows)
    print(f"wrote {out}")


def bench_argv(args, preset: str) -> list[str]:
    """The command line that benchmarks one preset, in a process of its own, as ``args`` asks."""
    argv = [sys.executable, "-m", "bench", "bench", "--presets", preset, "--in-process",
            "--stage-T", *map(str, args.stage_T), "--methods", *args.methods, "--what", *args.what,
            "--reps", str(args.reps)]
    argv += ["--T", *map(str, args.T)] if args.T else []
    argv += ["--root", str(args.root)] if args.root else []
    return argv + (["--out", args.out] if args.out else [])


def cmd_tune(args):
    from bench import persistent

    if not on_gpu():
        sys.exit("tune needs a CUDA GPU: it times launch configs, and the CPU interpreter times nothing")
    presets = args.presets or MODEL_PRESETS
    if len(presets) > 1 and not args.in_process:
        each_in_own_process(lambda args, preset: [sys.executable, "-m", "bench", "tune", "--presets", preset,
                                                  "--in-process", "--paths", *args.paths]
                            + (["--weights", args.weights] if args.weights else []), args, presets)
        return
    if args.weights:  # FP8 experts: the expert path's tiles on them, and their crossover with the FP8 pair
        from warpdecode import tuner

        paths = tuner.FP8_PATHS if args.paths == PATHS else args.paths  # other steps: tuner.check_weights names them
        tuner.tune(presets, paths=list(paths), crossover=True, weights=args.weights)
        return
    persistent.tune(presets, paths=args.paths)


def cmd_e2e(args):
    from bench import data

    gpu = on_gpu()
    what = args.what or E2E_PARTS
    if gpu:
        name = args.model
        out = Path(args.out) if args.out else data.gpu_dir(torch.cuda.get_device_name(), args.root)
    else:
        instead = f"the {CPU_PRESET!r} model" + (f" instead of {args.model!r}" if args.model != CPU_PRESET else "")
        print(f"No CUDA GPU: the layer-error study on {instead} in Triton's CPU interpreter; no timings.", flush=True)
        timed = [w for w in what if w != "errors"]
        if timed and args.what:
            print(f"--what {' '.join(timed)} ignored: decode speed and HF generate are timed, which needs a CUDA GPU",
                  flush=True)
        say_ignored(args, {"layers": f"the {CPU_PRESET!r} model runs all its layers",
                           "T": "it sets decode speed's token counts (timed)",
                           "ctx": "it sets decode speed's contexts (timed)",
                           **dict.fromkeys(("hf_models", "hf_layers", "hf_batch", "hf_compile", "hf_impls",
                                            "hf_new_tokens", "hf_repeats", "hf_rows"), "HF generate is timed"),
                           "root": "a CPU run writes only where --out says"})
        if "errors" not in what:
            sys.exit("e2e: nothing to run without a CUDA GPU (only --what errors runs on the CPU)")
        what = ["errors"]
        name = CPU_PRESET
        out = Path(args.out) if args.out else None
    if "errors" in what:
        from bench.e2e import layer_errors

        rows = layer_errors(name, T=args.err_T, steps=args.steps, layers=args.layers if gpu else None,
                            device=_runtime.DEFAULT_DEVICE.type, compile=args.compile and gpu,
                            progress_bar=True)
        for r in rows:
            if r["layer"] == "logits" or int(r["layer"]) % max(1, len(rows) // 24) == 0:
                print(f"{r['method']:7s} layer {r['layer']!s:>6}: error {r['error']:.3e}")
        if out:
            data.merge_write(out / "e2e_errors.csv", rows)
    if "speed" in what:
        from bench.e2e import decode_speed
        from bench.timing import read_ceiling

        decode_speed(name, args.T, args.ctx, ["expert", "warp", "auto"], layers=args.layers,
                     ceiling_tbps=read_ceiling(), compile=args.compile,
                     emit=lambda row: data.merge_write(out / "e2e_speed.csv", [row]))
    if "generate" in what:
        from bench import hf_generate as hg

        def emit(row):
            data.merge_write(out / "hf_generate.csv", [row])

        for hf_model in args.hf_models:
            layers = None if args.hf_layers is None else min(args.hf_layers,
                                                             hg.MODELS[hf_model][2]["num_hidden_layers"])
            if len(args.hf_impls) > 1 and not args.hf_rows:  # each implementation in processes of its own
                torch.cuda.empty_cache()
                hg.generate_in_processes(partial(generate_argv, args, hf_model), args.hf_impls, args.hf_repeats,
                                         layers=layers, emit=emit)
                continue
            outs = {}
            rows = hg.generate_speed(name=hf_model, layers=layers, batches=args.hf_batch,
                                     new_tokens=args.hf_new_tokens, impls=args.hf_impls, repeats=args.hf_repeats,
                                     compile=args.hf_compile, emit=None if args.hf_rows else emit, outs=outs)
            if args.hf_rows:  # for the process that started this one
                hg.save_rows(Path(args.hf_rows), rows, outs)
                print(f"wrote {args.hf_rows}")
                return
            torch.cuda.empty_cache()
    print(f"wrote {out}" if out else "nothing written (--out DIR writes e2e_errors.csv there)")


def generate_argv(args, hf_model: str, impl: str, layers: int | None, rows: Path) -> list[str]:
    """The command line that measures generate on ``hf_model`` with one experts implementation, in
    a process of its own, one timed call per batch, its rows and tokens saved to ``rows``."""
    argv = [sys.executable, "-m", "bench", "e2e", "--what", "generate", "--hf-models", hf_model,
            "--hf-impls", impl, "--hf-batch", *map(str, args.hf_batch), "--hf-compile", args.hf_compile,
            "--hf-new-tokens", str(args.hf_new_tokens), "--hf-repeats", "1", "--hf-rows", str(rows)]
    argv += ["--hf-layers", str(layers)] if layers is not None else []
    argv += ["--root", str(args.root)] if args.root else []
    return argv + (["--out", args.out] if args.out else [])


def cmd_report(args):
    from bench import data, report

    gpu = args.gpu or (torch.cuda.get_device_name() if on_gpu() else "NVIDIA H200")
    try:
        if args.only == "crossover":
            report.require_data(gpu, args.root, needed=("speed.csv",))
            path = report.tuned_path(gpu, args.root)
            if args.dry_run:
                print(f"would write {path}: the auto crossover {report.crossover_table(gpu, args.root)['crossover']}")
            else:
                print(f"wrote {path}: the auto crossover {report.write_crossover(gpu, args.root)}")
        else:
            report.main(gpu, args.root, dry_run=args.dry_run)
    except (data.NoCheckout, report.NoData) as e:
        sys.exit(f"report: {e}")


def build_parser() -> argparse.ArgumentParser:
    p, add_parser = subcommands("python -m bench", __doc__)
    presets = sorted(PRESETS)
    root_help = ("the warpdecode checkout whose results/ to use (default: the nearest folder at or above the "
                 "current directory holding README.md and results/)")

    c = add_parser("compare", help="the three paths on one preset: error vs float64; time, bandwidth on a GPU",
                       description="The expert loop, the expert-centric path and warp decode on one preset: error "
                                   "against the float64 reference, and on a GPU time per layer call and bandwidth. "
                                   f"Without a GPU it runs the {CPU_PRESET!r} preset and times nothing.")
    c.add_argument("--preset", default="qwen3-30b-a3b", choices=presets, metavar="PRESET",
                   help=f"the layer shape (default qwen3-30b-a3b; {CPU_PRESET!r} without a GPU); one of {presets}")
    c.add_argument("--T", type=tokens, nargs="+", help="token counts (default 1 8 64; 1 4 16 on the CPU)")
    c.add_argument("--reps", type=int, default=100, help="CUDA-graph replays per timing (default 100; GPU only)")
    c.set_defaults(fn=cmd_compare)

    b = add_parser("bench", help="the published sweeps (speed, stages, accuracy) to results/<GPU>/*.csv",
                       description="Benchmark sweeps to tidy CSV in <checkout>/results/<GPU>/ (or --out). On a GPU "
                                   "each preset runs in a process of its own. Without a GPU: the accuracy sweep on "
                                   f"the {CPU_PRESET!r} preset only, written only with --out; the options that only "
                                   "timings use are ignored, and it says so.")
    b.add_argument("--presets", nargs="+", choices=presets, metavar="PRESET",
                   help=f"layer shapes to sweep (default: every model preset; GPU only); from {presets}")
    b.add_argument("--T", type=tokens, nargs="+", help=f"token counts (default {' '.join(map(str, ALL_T))}; the "
                                                    "accuracy sweep takes those ≤ 64; 1 4 on the CPU)")
    b.add_argument("--stage-T", type=tokens, nargs="+", default=[1, 8, 64, 256],
                   help="token counts of the expert path's stage breakdown (default 1 8 64 256; GPU only)")
    b.add_argument("--methods", nargs="+", default=["loop", "expert", "warp", "auto", "grouped_mm"],
                   help="methods the speed sweep times: warpdecode's through warpdecode.moe, each with its bare "
                        "kernels beside it (rows <method>_kernels; overhead: public / kernels); grouped_mm is "
                        "transformers' (default loop expert warp auto grouped_mm; GPU only)")
    b.add_argument("--what", nargs="+", default=SWEEPS, choices=SWEEPS,
                   help="which sweeps: speed (time per layer call), stages (the expert path stage by stage), "
                        "accuracy (error against float64) (default all three; only accuracy runs on the CPU)")
    b.add_argument("--reps", type=int, default=100, help="CUDA-graph replays per timing (default 100; GPU only)")
    b.add_argument("--out", help="output folder (default <checkout>/results/<GPU>; without a GPU nothing is written "
                                 "unless this is given)")
    b.add_argument("--root", help=root_help)
    b.add_argument("--in-process", action="store_true",
                   help="run every preset in this process (by default, on a GPU, each preset runs in a process "
                        "of its own: what an earlier preset allocated changes later timings)")
    b.set_defaults(fn=cmd_bench)

    t = add_parser("tune", help="search launch configs for the presets into warpdecode/tuned/<GPU>.json",
                   description="Time launch configurations on this GPU and write the fastest per token bucket of "
                               "each preset, in bf16 at the default token buckets, into warpdecode/tuned/<GPU>.json "
                               "(the shipped table; the auto crossover comes from report). Each preset runs in a "
                               "process of its own. Needs a CUDA GPU; any other layer: python -m warpdecode tune "
                               "--shape H I E K.")
    t.add_argument("--presets", nargs="+", choices=presets, metavar="PRESET",
                   help=f"layer shapes to tune (default: every model preset); from {presets}")
    t.add_argument("--paths", nargs="+", default=PATHS, choices=PATHS,
                   help="the tuner's steps, as python -m warpdecode tune --help explains them, and fused: the "
                        "persistent warp schedule (bench/persistent.py), against the tuned pair (default all: "
                        f"{' '.join(PATHS)})")
    t.add_argument("--weights", choices=["block128", "mxfp8"],
                   help="FP8 experts of this format: the expert path's tiles (expert, expert_swap of --paths) and "
                        "the crossover with the FP8 pair, as the <family>_<format> entries (the FP8 pair's "
                        "tiles: python -m bench.fp8)")
    t.add_argument("--in-process", action="store_true",
                   help="tune every preset in this process (by default each preset gets a process of its own)")
    t.set_defaults(fn=cmd_tune)

    e = add_parser("e2e", help="whole decode steps: tokens/s, per-layer error vs float64, HF generate",
                       description="The minimal decoder (bench.model) end to end: decode tokens/s per MoE "
                                   "method (speed), every layer's error against the same model in float64 "
                                   "(errors), and Hugging Face generate with grouped_mm against warpdecode "
                                   "(generate: a static cache and the decode step compiled with CUDA graphs, "
                                   "tokens/s, the expert layers' share and Amdahl's prediction). "
                                   f"Without a GPU: errors only, on the {CPU_PRESET!r} model, with "
                                   "a progress bar.")
    e.add_argument("--model", default="qwen3-30b-a3b",
                   help=f"decoder config from bench.model.MODELS (default qwen3-30b-a3b; {CPU_PRESET!r} on "
                        "the CPU)")
    e.add_argument("--layers", type=int, help="use only the first N layers (default: all; GPU only)")
    e.add_argument("--what", nargs="+", choices=E2E_PARTS,
                   help="which parts: speed, errors, generate (default all three; only errors runs on the CPU)")
    e.add_argument("--T", type=tokens, nargs="+", default=[1, 4, 16, 64],
                   help="tokens per decode step for speed (default 1 4 16 64; GPU only)")
    e.add_argument("--ctx", type=int, nargs="+", default=[512, 4096],
                   help="context lengths (filled KV cache) for speed (default 512 4096; GPU only)")
    e.add_argument("--err-T", type=tokens, default=4, help="tokens per decode step for errors (default 4)")
    e.add_argument("--steps", type=int, default=8, help="decode steps fed to the error study (default 8)")
    hf_models = ["qwen3-30b-a3b", "olmoe-1b-7b", "mixtral-8x7b"]
    e.add_argument("--hf-models", nargs="+", default=hf_models[:1], choices=hf_models, metavar="MODEL",
                   help=f"Hugging Face model configurations for generate, random weights (default qwen3-30b-a3b; "
                        f"from {hf_models}; GPU only)")
    e.add_argument("--hf-layers", type=int,
                   help="layers of each model for generate, at most its own (default: as many as the GPU's free "
                        "memory holds; GPU only)")
    e.add_argument("--hf-batch", type=tokens, nargs="+", default=[1, 4, 16],
                   help="sequences per generate call (default 1 4 16; GPU only)")
    e.add_argument("--hf-compile", default="reduce-overhead", choices=["reduce-overhead", "none"],
                   help="reduce-overhead: a static cache and the decode step through torch.compile with CUDA graphs "
                        "(fullgraph), as transformers documents; none: eager with the dynamic cache (default "
                        "reduce-overhead; GPU only)")
    e.add_argument("--hf-impls", nargs="+", default=["grouped_mm", "warpdecode"],
                   choices=["grouped_mm", "warpdecode", "no_experts"],
                   help="experts implementations for generate (default grouped_mm warpdecode; no_experts: the bound, "
                        "expert layers that do no work; GPU only); with more than one, each runs in a fresh process "
                        "per round, alternating in this order over --hf-repeats rounds, and the rows merge (the "
                        "median per implementation)")
    e.add_argument("--hf-new-tokens", type=int, default=64, help="tokens generated per call (default 64; GPU only)")
    e.add_argument("--hf-repeats", type=int, default=3,
                   help="timed generate calls after the warm-up, the median taken: with several --hf-impls, rounds "
                        "of one process per implementation, one timed call each (default 3; GPU only)")
    e.add_argument("--hf-rows", metavar="PATH",
                   help="measure in this process and save the rows and generated tokens to PATH for the process "
                        "that started this one, writing no CSV (what a round of several --hf-impls runs)")
    e.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True,
                   help="run each layer's dense code (norms, QKV, RoPE, residual, routing) through torch.compile "
                        "(the default; --no-compile runs it eagerly), so that the step measures the MoE layers "
                        "rather than eager PyTorch's launches; attention and the MoE layer stay as they are "
                        "(falls back to eager, with a warning)")
    e.add_argument("--out", help="output folder (default <checkout>/results/<GPU>; without a GPU nothing is written "
                                 "unless this is given)")
    e.add_argument("--root", help=root_help)
    e.set_defaults(fn=cmd_e2e)

    r = add_parser("report", help="regenerate the crossover, the published tables and the figures from the CSV",
                       description="From <checkout>/results/<GPU>/*.csv: the auto crossover into "
                                   "warpdecode/tuned/<GPU>.json, the generated blocks of README.md and "
                                   "docs/results.md (headline, results, accuracy, targets, schedules, generate, "
                                   "defaults) and figures/*.png. Computes everything first and "
                                   "names each file it writes; with no data for the GPU it writes nothing and exits "
                                   "non-zero.")
    r.add_argument("--gpu", default=None, help="results of which GPU (default: this one, else NVIDIA H200)")
    r.add_argument("--root", help="the warpdecode checkout to regenerate (default: the nearest folder at or above "
                                  "the current directory holding README.md and results/)")
    r.add_argument("--only", choices=["crossover"], help="only derive the auto crossover table")
    r.add_argument("--dry-run", action="store_true", help="say what would be written, write nothing")
    r.set_defaults(fn=cmd_report)
    return p
    return p


def main(argv=None):
    from bench import data

    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse(build_parser(), argv)
    try:
        args.fn(args)
    except data.NoCheckout as e:
        sys.exit(f"{args.cmd}: {e}")


if __name__ == "__main__":
    main()
