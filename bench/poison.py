"""``with poisoned():`` every buffer warpdecode allocates (``warpdecode._alloc.empty``) starts as NaN, an
integer one as an index no kernel may read (``_alloc.INT_POISON``), so an element a kernel never writes
shows up. For tests, benchmarks and lessons: it costs a fill per buffer.
"""

from __future__ import annotations

import contextlib

from warpdecode import _alloc


@contextlib.contextmanager
def poisoned():
    """Poison every buffer the paths allocate while the block runs."""
    saved, _alloc._POISON = _alloc._POISON, True
    try:
        yield
    finally:
        _alloc._POISON = saved
