"""Puts the checkout's root first on ``sys.path``, so that ``python experiments/X.py`` (run from the
root, with experiments/ on the path instead) imports the lab's ``bench`` package; the scripts
import it before ``bench``, most through ``harness``."""

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[1])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
