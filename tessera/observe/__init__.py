"""Seeing what Tessera does (docs/observability.md): timing, profiles, traces, metrics
files and NVTX ranges, logging, crash capture and repro packs. The launch path and the
collectives report to ``tessera.observe.observers``; the observers here listen."""

from .bench import BenchResult, bench
from .crash import capture, record
from .log import LOGGER, tail
from .metrics import Metrics, metrics
from .profile import Profile, profile
from .session import STARTED
from .trace import Trace, trace

__all__ = [
    "LOGGER",
    "STARTED",
    "BenchResult",
    "Metrics",
    "Profile",
    "Trace",
    "bench",
    "capture",
    "metrics",
    "profile",
    "record",
    "tail",
    "trace",
]
