"""Progress output shared by the bench modules.

Lives apart from runner.py so compare.py can report progress without importing the
runner that imports it (no import circle). Writes to stderr so stdout stays the
machine-readable result.
"""

from __future__ import annotations

import sys


def log(msg: str) -> None:
    """Print one progress line to stderr, flushed at once."""
    print(msg, file=sys.stderr, flush=True)
