"""The attention kernel of examples/flash_attention.py, for bench/tiles.py (benchmarks
are never imported by the tests, examples are run by them: the kernel is loaded from the
example's file so there is one copy)."""

from __future__ import annotations

import runpy
from pathlib import Path

_EXAMPLE = runpy.run_path(str(Path(__file__).parent.parent / "examples" / "flash_attention.py"))
attention = _EXAMPLE["attention"]
reference = _EXAMPLE["reference"]
