"""Specialisation keys and the in-memory cache of compiled programs (LANGUAGE.md §4).

A key is everything that changes the generated code: the grid's rank, each array's
layout, writability and alignment (Numba specialises on them), and constexpr values.
Dtypes and ranks are fixed by the signature, so they need not be in the key; the
target is implied by the cache's owner.
"""

from __future__ import annotations

import threading


class SpecialisationCache:
    """Thread-safe map from specialisation key to a compiled program."""

    def __init__(self) -> None:
        self.programs: dict[tuple, object] = {}
        self._lock = threading.Lock()

    def get(self, key: tuple) -> object | None:
        return self.programs.get(key)

    def put(self, key: tuple, program: object) -> None:
        with self._lock:
            self.programs.setdefault(key, program)

    def __len__(self) -> int:
        return len(self.programs)
