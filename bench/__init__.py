"""The lab beside the wheel: benchmarks (timing the public call, sweeps to tidy CSV), the report
and its figures, the FP8 and generate benchmarks, the minimal decoder, compiled-code inspection
and the notebooks' ledgers. It needs a checkout of the repository and is not shipped; run its
command line from the checkout's root: ``python -m bench --help``.

Everything here that times needs a CUDA GPU; the accuracy sweep also runs on the CPU.
"""

import warpdecode  # noqa: F401  first: decides GPU or CPU interpreter before any module here imports Triton
