"""The debug target: the reference executor, lane by lane, with sanitizers
(docs/debugging.md). Never picked by ``auto``; slow by design. Arrays keep their own
element types (f16 and bf16 included) and its programs are interpreted, never compiled.
"""

from __future__ import annotations

from ....observe import stats
from ..target import BuildOptions, Target
from .lowerings import LOWERINGS
from .program import DebugProgram


class DebugTarget(Target):
    def build(self, spec, grid_ndim: int, key: tuple, options: BuildOptions, call_args: tuple):
        stats.bump("compiles")
        return DebugProgram(spec, grid_ndim, self)


DEBUG = DebugTarget(
    "debug",
    "the reference interpreter with sanitizers",
    lowerings=LOWERINGS,
    replays=False,  # every call of a jit step runs eagerly, with the sanitizers
)
