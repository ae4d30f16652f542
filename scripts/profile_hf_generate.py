"""Where a Hugging Face ``generate`` step spends its host time, per experts implementation.

    python scripts/profile_hf_generate.py [--batch 1] [--tokens 16]

At batch 1 HF's eager ``generate`` is bound by the CPU (Python and kernel launches), not by the
GPU; cProfile of the decode loop shows which functions cost what, for ``grouped_mm`` and for
``warpdecode``.
"""

import argparse
import cProfile
import pstats

import torch

from warpdecode.bench.hf_generate import make_model
from warpdecode.integrations.transformers import register


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--layers", type=int, default=8)
    args = p.parse_args()
    register()
    model = make_model(args.layers)
    ids = torch.randint(0, model.config.vocab_size, (args.batch, 32), device="cuda")
    kw = dict(max_new_tokens=args.tokens, min_new_tokens=args.tokens, do_sample=False)
    for impl in ("grouped_mm", "warpdecode"):
        model.set_experts_implementation(impl)
        with torch.no_grad():
            model.generate(ids, **kw)
            torch.cuda.synchronize()
            prof = cProfile.Profile()
            prof.enable()
            model.generate(ids, **kw)
            torch.cuda.synchronize()
            prof.disable()
        print(f"\n===== {impl}: batch {args.batch}, {args.tokens} new tokens, {args.layers} layers")
        pstats.Stats(prof).sort_stats("tottime").print_stats(22)


if __name__ == "__main__":
    main()
