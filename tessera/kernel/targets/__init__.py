"""The targets, one registry: a target is a folder here plus its line below.

Each folder has the same file roles: ``__init__`` (the :class:`~.target.Target`),
``codegen`` (IR → the target's code), ``lowerings`` (one per primitive), ``program`` (a
built specialisation that runs launches) and ``runtime`` (what its code calls at run
time). ``pysource.py`` and ``semantics.py`` beside them are shared by the targets that
generate Python for Numba.
"""

from __future__ import annotations

from ...errors import LaunchError
from ..pipeline import PASS_NAMES, SHARED_PASSES
from .cpu import CPU
from .cuda import CUDA
from .cuda.streams import Event, event, stream
from .debug import DEBUG
from .target import Target

__all__ = [
    "DEVICE_CHOICE",
    "HOST_CHOICE",
    "TARGETS",
    "Event",
    "Target",
    "event",
    "resolve",
    "stream",
    "synchronize",
]

TARGETS: dict[str, Target] = {t.name: t for t in (CPU, DEBUG, CUDA)}
AUTO = "auto"
AUTO_ORDER = (CUDA, CPU)  # ``auto``: the first that accepts the arguments
# the target a launch runs on when all its arrays are NumPy arrays (the launch fast path)
HOST_CHOICE: dict[str, Target] = {AUTO: CPU, **TARGETS}
DEVICE_TARGET: Target = CUDA  # the target that makes and wraps GPU arrays (ops/kinds.py)
# the target of a launch whose arrays are GPU arrays, under each setting that allows them
DEVICE_CHOICE: dict[str, Target] = {
    name: t for name, t in {AUTO: CUDA, **TARGETS}.items() if t.device_arrays
}


def resolve(name: str, args: tuple, kernel: str) -> Target:
    """The target a launch with ``args`` runs on under the setting ``name``."""
    if name == AUTO:
        return next(t for t in AUTO_ORDER if t.accepts(args))
    target = TARGETS.get(name)
    if target is None:
        choices = ", ".join((AUTO, *TARGETS))
        raise LaunchError(kernel, f"unknown target {name!r} (TESSERA_TARGET); choose {choices}")
    return target


def stage_owner(stage: str) -> Target | None:
    """The target whose pipeline shows inspection stage ``stage``: the IR and the shared
    passes are shown as the CPU compiles them, a target's own passes and stages by it."""
    if stage == "ir" or stage in {p.name for p in SHARED_PASSES}:
        return CPU
    for t in TARGETS.values():
        if stage in t.stages or stage in {p.name for p in t.passes}:
            return t
    return None if stage not in PASS_NAMES else CPU


def synchronize() -> None:
    """Wait until all queued work of every target is done (GPU launches are
    asynchronous; CPU and debug launches finish before they return)."""
    for t in TARGETS.values():
        t.synchronize()
