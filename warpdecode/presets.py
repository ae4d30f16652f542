"""MoE layer shapes of real models (routed experts only), plus small ones for the CPU.
The symbols (T, E, K, H, I) and the weights' layout: README.md, "Symbols"."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class MoEShape:
    """One MoE layer's routed-expert shape."""

    name: str
    H: int  # hidden size
    I: int  # noqa: E741  intermediate size of one expert
    E: int  # routed experts
    K: int  # experts per token
    renormalize: bool = True  # top-K weights renormalised to sum to 1 (Qwen3, Mixtral)

    @property
    def expert_bytes(self) -> int:
        """Bytes of one expert's weights in bf16: gate, up and down, (2I·H + H·I)·2."""
        return 3 * self.I * self.H * 2

    @property
    def layer_bytes(self) -> int:
        """Bytes of all E experts' weights in bf16."""
        return self.E * self.expert_bytes

    def weights(self, *, dtype=torch.bfloat16, device=None, seed: int = 0, scale: float | None = None):
        """Random ``(w13, w2)`` (std 1/sqrt(fan_in)) drawn on ``device`` in ``dtype``; seeded per device kind."""
        device = torch.device(device) if device is not None else torch.device("cpu")
        g = torch.Generator(device=device).manual_seed(seed)
        s13 = scale if scale is not None else self.H**-0.5
        s2 = scale if scale is not None else self.I**-0.5
        w13 = torch.randn(self.E, 2 * self.I, self.H, generator=g, device=device, dtype=dtype).mul_(s13)
        w2 = torch.randn(self.E, self.H, self.I, generator=g, device=device, dtype=dtype).mul_(s2)
        return w13, w2


PRESETS: dict[str, MoEShape] = {
    p.name: p
    for p in [
        MoEShape("qwen3-30b-a3b", H=2048, I=768, E=128, K=8),
        MoEShape("qwen3-235b-a22b", H=4096, I=1536, E=128, K=8),
        MoEShape("deepseek-v3", H=7168, I=2048, E=256, K=8),
        MoEShape("mixtral-8x7b", H=4096, I=14336, E=8, K=2),
        MoEShape("gpt-oss-20b", H=2880, I=2880, E=32, K=4),
        MoEShape("olmoe-1b-7b", H=2048, I=1024, E=64, K=8, renormalize=False),
        # For the CPU interpreter: odd H and I, prime E, so every masked tail is exercised.
        MoEShape("tiny", H=160, I=88, E=7, K=3),
    ]
}

#: Presets of real models, in the order tables and figures list them.
MODEL_PRESETS = [n for n in PRESETS if n != "tiny"]


def get_preset(name: str) -> MoEShape:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {name!r}") from None
