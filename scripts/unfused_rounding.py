"""The ≥ 2× accuracy claim against the expert-centric path depends on where that path rounds.

    python scripts/unfused_rounding.py

The expert-centric path here fuses SiLU·up into its gate/up GEMM and rounds the intermediate once
(the issue's stage 5). vLLM's fused_moe stores gate and up in bf16, then silu_and_mul stores the
intermediate again, and HF's grouped_mm does the same. warpdecode.emulate computes both in float64
with exactly those roundings (CPU, a few seconds), on Mixtral-like (K = 2), gpt-oss-like (K = 4)
and Qwen-like (K = 8) shapes scaled down: error(expert) / error(warp) for each.
"""

import torch

import warpdecode
from warpdecode import emulate as em


def main():
    g = torch.Generator().manual_seed(0)
    for H, I, E, K in [(512, 1792, 8, 2), (512, 512, 16, 4), (512, 192, 64, 8)]:  # noqa: E741
        w13 = (torch.randn(E, 2 * I, H, generator=g) * H**-0.5).to(torch.bfloat16)
        w2 = (torch.randn(E, H, I, generator=g) * I**-0.5).to(torch.bfloat16)
        x = torch.randn(16, H, generator=g).to(torch.bfloat16)
        tw, ti = warpdecode.route(torch.randn(16, E, generator=g), K)
        ref = warpdecode.reference_moe(x, w13, w2, tw, ti)
        err = {p: warpdecode.rel_error(em.emulate(x, w13, w2, tw, ti, em.PATHS[p]), ref)
               for p in ("warp", "expert", "expert_unfused")}
        print(f"H={H} I={I} E={E} K={K}: error(expert) / error(warp) = {err['expert'] / err['warp']:.2f} "
              f"(SiLU·up fused, as here); {err['expert_unfused'] / err['warp']:.2f} (gate and up rounded first, "
              "as vLLM and HF)")


if __name__ == "__main__":
    main()
