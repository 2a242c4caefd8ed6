"""Seeing what Tessera does: timing, profiles, traces, metrics files and NVTX ranges
(docs/observability.md). The launch path and the collectives report to ``tessera.observers``;
the observers here listen."""

from .bench import BenchResult, bench
from .metrics import Metrics, metrics
from .profile import Profile, profile
from .session import STARTED
from .trace import Trace, trace

__all__ = [
    "STARTED",
    "BenchResult",
    "Metrics",
    "Profile",
    "Trace",
    "bench",
    "metrics",
    "profile",
    "trace",
]
