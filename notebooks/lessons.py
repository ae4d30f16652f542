"""The notebooks' helpers, in one import: ``from lessons import ladder, sweep, …``.

A notebook runs with ``notebooks/`` as its working directory (Jupyter, nbval), where the lab's
``bench`` package beside the wheel is not importable; this module puts the checkout's root first on
``sys.path`` (so the checkout's ``bench`` and ``warpdecode`` are the ones imported) and re-exports
what the lessons use: the ledgers and result readers (``ladder``), compiled-code inspection
(``compiled``), the float64 rounding emulation (``emulate``), the benchmarks (``sweep``, ``fp8``,
``e2e``, and the measured ``read_ceiling``), the expert path's gather and scatter as kernels of their
own (``unfused``), the persistent one-launch schedule (``persistent``), the decoder (``model``), and
the report's data, tables and figures (``data``, ``report``, ``plots``: matplotlib, Agg backend);
``poisoned``, a context in which every buffer ``warpdecode`` allocates starts as NaN (an element a
kernel never writes shows).
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import warpdecode  # noqa: E402, F401  first: decides GPU or CPU interpreter before any kernel exists
from bench import compiled, data, e2e, emulate, fp8, ladder, model, persistent, plots, report, sweep, unfused  # noqa: E402
from bench.e2e import layer_errors  # noqa: E402
from bench.model import MODELS  # noqa: E402
from bench.poison import poisoned  # noqa: E402  every buffer a call allocates starts as NaN, inside it
from bench.timing import read_ceiling  # noqa: E402

sweep.PROGRESS = False  # a lesson prints its results; progress bars would fill its saved outputs

__all__ = ["MODELS", "ROOT", "compiled", "data", "e2e", "emulate", "fp8", "ladder", "layer_errors", "model",
           "persistent", "plots", "poisoned", "read_ceiling", "report", "sweep", "unfused"]
