"""Helpers the benches share to report figures: percentiles and the machine's load.

The benches run as scripts (`.venv/bin/python bench/bench_x.py`), so this module is imported as
`figures` from the bench directory.
"""

from __future__ import annotations

import os
from collections.abc import Sequence


def pct(values: Sequence[float], q: float) -> float:
    """The `q` quantile (0..1) of `values` (nearest rank, no interpolation)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def load_note() -> str:
    """The load averages and CPU count, to read figures against the machine's noise."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} CPUs)"
