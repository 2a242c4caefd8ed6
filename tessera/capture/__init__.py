"""Traced steps, captured and replayed: ``tessera.jit`` (docs/capture.md).

``function.py`` is the jit function (tracing per key, warm-up, capture, replay, the
public surface); ``replay.py`` records one step's launches and replays them.
"""

from __future__ import annotations

from .function import JitFunction, jit

__all__ = ["JitFunction", "jit"]
