"""Every buffer a path allocates comes from :func:`empty`: while ``_POISON`` is set (``bench.poison.poisoned``,
beside the package) float buffers are NaN and integer ones an index no kernel may read, so an element never
written shows up.
"""

from __future__ import annotations

import torch

_POISON = False
INT_POISON = 2**30  # far outside any valid index


def empty(*shape, dtype, device) -> torch.Tensor:
    t = torch.empty(*shape, dtype=dtype, device=device)
    if _POISON:
        t.fill_(float("nan") if t.is_floating_point() else INT_POISON)
    return t
