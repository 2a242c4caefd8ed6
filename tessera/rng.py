"""Random streams whose state lives in memory: ``tessera.rng.Generator`` (docs/ops.md,
"Dropout"; docs/capture.md).

``op.dropout(x, p, seed)`` with an int seed draws the same mask on every call, by design
(the mask is a pure function of the seed and the element index). A ``Generator(seed)``
keeps ``(seed, offset)`` in two 0-d i64 arrays that the kernels read when they run:
``op.dropout(x, p, gen)`` keeps element ``i`` where Philox 4x32-10 of counter ``offset +
i`` (plus the draws before it in the same call) and key ``seed`` is at least ``p``, and
each call advances ``offset`` by the elements it drew, after its kernels ran. So every
call, and every replay of a captured step, draws a new mask; a call's forward and
backward (``graph.grad``) see one offset; offset 0 reproduces ``op.dropout(x, p, seed)``.
"""

from __future__ import annotations

import threading

import numpy as np

from .errors import TesseraError


class Generator:
    """``Generator(seed)``: a stream of Philox numbers at ``offset`` (starting at 0)."""

    def __init__(self, seed: int, offset: int = 0):
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TesseraError(f"Generator(seed={seed!r}): the seed is an int in [0, 2**63)")
        if not 0 <= int(seed) < 2**63 or not 0 <= int(offset) < 2**63:
            raise TesseraError(
                f"Generator(seed={seed!r}, offset={offset!r}): both are ints in [0, 2**63)"
            )
        self.seed_array = np.array(int(seed), np.int64)  # 0-d: kernels read them
        self.offset_array = np.array(int(offset), np.int64)
        self._lock = threading.Lock()

    @property
    def seed(self) -> int:
        return int(self.seed_array)

    @property
    def offset(self) -> int:
        """The counter the next draw starts at."""
        return int(self.offset_array)

    def advance(self, draws: int) -> None:
        """Move the stream past ``draws`` numbers (what a call of op.dropout does)."""
        with self._lock:
            self.offset_array[...] = (int(self.offset_array) + int(draws)) % 2**63

    def __repr__(self) -> str:
        return f"tessera.rng.Generator(seed={self.seed}, offset={self.offset})"


__all__ = ["Generator"]
