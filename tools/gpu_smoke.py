"""Quick GPU correctness pass over every preset and method (poisoned buffers, float64 reference).

    python tools/gpu_smoke.py [--presets ...] [--T 1 7 64]

Prints one line per case and exits non-zero if any case is unwritten, NaN or off its bound.
Small enough to run under ``compute-sanitizer --tool memcheck`` with ``--presets tiny gpt-oss-20b --T 3``.
"""

import argparse
import sys

import torch

import warpdecode as wd
from bench import persistent
from bench.poison import poisoned
from warpdecode.workload import make_layers

BOUND = {"loop": 12, "expert": 8, "expert_fp8": 120, "warp": 1.1, "warp_split": 1.1, "warp_fused": 1.1,
         "warp_bf16_act": 4, "auto": 8}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=wd.MODEL_PRESETS)
    p.add_argument("--T", type=int, nargs="+", default=[1, 7, 64])
    args = p.parse_args()
    failed = 0
    for name in args.presets:
        shape = wd.get_preset(name)
        w13, w2 = make_layers(shape, 1, seed=11)[0]
        for T in args.T:
            x = torch.randn(T, shape.H, device="cuda", dtype=torch.bfloat16)
            tw, ti = wd.route(torch.randn(T, shape.E, device="cuda"), shape.K, renormalize=shape.renormalize)
            ref = wd.reference_moe(x, w13, w2, tw, ti)
            floor = wd.rounding_floor(ref, torch.bfloat16)
            errs = {}
            for m, kw in [("loop", {}), ("expert", {}), ("expert_fp8", {"act_format": "fp8"}), ("warp", {}),
                          ("warp_split", {"schedule": "split"}), ("warp_fused", {"schedule": "fused"}),
                          ("warp_bf16_act", {"act_dtype": torch.bfloat16}), ("auto", {})]:
                method = m.split("_")[0]
                with poisoned():  # the persistent schedule: beside the package
                    y = (persistent.moe_fused(x, w13, w2, tw, ti) if kw.get("schedule") == "fused"
                         else wd.moe(x, w13, w2, tw, ti, method=method, **kw))
                torch.cuda.synchronize()
                r = wd.rel_error(y, ref) / floor
                errs[m] = r
                if not r <= BOUND[m]:
                    failed += 1
            ok = errs["expert"] / errs["warp"]
            print(f"{name:16s} T={T:4d} " + " ".join(f"{m}={v:.2f}" for m, v in errs.items())
                  + f"  expert/warp={ok:.2f}", flush=True)
        del w13, w2
        torch.cuda.empty_cache()
    torch.cuda.synchronize()
    for device, count, generation, timed_out in [(d, *b.tolist()) for d, b in persistent._barriers.items()]:
        print(f"grid barrier on cuda:{device}: count {count}, generation {generation}, timed out {timed_out}")
        failed += bool(timed_out or count)
    print("FAILED" if failed else "all cases within bounds", failed)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
