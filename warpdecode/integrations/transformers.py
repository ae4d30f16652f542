"""Warp decode as a transformers 5 experts implementation (``ExpertsInterface``)::

    import warpdecode.integrations.transformers as wd_hf
    wd_hf.register()                                   # explicit: importing registers nothing
    model.set_experts_implementation("warpdecode")

``method="auto"`` per call; experts in the fused layout: ``gate_up_proj`` (E, 2I, H) gate rows then
up rows, ``down_proj`` (E, H, I), no bias, not transposed.
"""

from __future__ import annotations

import torch

from ..api import run_auto
from ..checks import check_kernel_device, check_moe_inputs

NAME = "warpdecode"


def warpdecode_experts_forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                               top_k_weights: torch.Tensor) -> torch.Tensor:
    """The ``ExpertsInterface`` signature: ``(module, hidden_states (T, H), top_k_index (T, K),
    top_k_weights (T, K)) -> (T, H)``."""
    if getattr(self, "has_bias", False) or getattr(self, "is_transposed", False) or not getattr(self, "has_gate", True):
        raise NotImplementedError(
            f"{type(self).__name__}: warpdecode takes gated experts with gate_up_proj (E, 2I, H) and down_proj "
            "(E, H, I), without bias and not transposed; use another experts_implementation for this model")
    if not getattr(self, "is_concatenated", True):
        raise NotImplementedError(f"{type(self).__name__}: interleaved gate/up rows are not supported")
    x = hidden_states.contiguous()
    w13, w2 = self.gate_up_proj, self.down_proj
    if torch.is_grad_enabled() and any(t.requires_grad for t in (x, w13, w2, top_k_weights)):
        raise RuntimeError(
            f"{type(self).__name__}: the warpdecode experts implementation computes no gradients; generate "
            "under torch.no_grad() (transformers' generate does), or train with another experts_implementation")
    topk_weights = top_k_weights.float().contiguous()  # no copy where the router's weights are FP32 already
    topk_ids = top_k_index.contiguous()  # int64 as transformers gives them: the kernels read them unnarrowed
    # shapes checked here, ids in the kernels (kernels/ids.py): expert parallelism's slots of other
    # ranks (id E, weight 0) are skipped; a bad id with a nonzero weight makes its token NaN
    d = check_moe_inputs(x, w13, w2, topk_weights, topk_ids)
    check_kernel_device(x)
    if d.T == 0:
        return torch.zeros_like(hidden_states)
    if torch.compiler.is_compiling():  # traced (torch.compile): the one operator, as warpdecode.moe traces
        y = torch.ops.warpdecode.moe(x, w13, w2, topk_weights, topk_ids, "auto", None, "native", None, False, False)
    else:
        y = run_auto(x, w13, w2, topk_weights, topk_ids)
    return y.to(hidden_states.dtype)


def register() -> None:
    """Add ``"warpdecode"`` to transformers' experts implementations (idempotent)."""
    from transformers.integrations.moe import ExpertsInterface

    ExpertsInterface.register(NAME, warpdecode_experts_forward)
