"""Launch overhead: ``k[1](x)`` of an empty flat kernel vs calling an empty ``numba.njit``
function, per call, over many calls; where PyTorch or JAX is installed, also the launch
with a CPU tensor of theirs for ``x`` (its NumPy view is made on every launch)."""

from __future__ import annotations

import importlib
import importlib.util

import numpy as np
from numba import njit

from . import kernels
from .common import Case, Record, measure, standalone

NAME = "launch"


@njit
def empty_numba(x):
    pass


def run(quick: bool) -> list[Record]:
    calls = 200 if quick else 5000
    x = np.zeros(16, np.float32)
    launch = kernels.empty[1]

    def tessera():
        for _ in range(calls):
            launch(x)

    def numba():
        for _ in range(calls):
            empty_numba(x)

    cases = [
        Case("tessera", tessera, inner=calls, first=lambda: launch(x)),
        Case("numba", numba, inner=calls, first=lambda: empty_numba(x)),
    ]
    for tool, make in FOREIGN:
        if importlib.util.find_spec(make[0]) is not None:  # optional: not a bench dependency
            cases.append(foreign_case(tool, make, launch, calls))
    return measure(NAME, "empty k[1](x)", f"{calls} calls", cases, quick)


# (tool, (module, function making a float32 host array of n elements))
FOREIGN = (("tessera (torch)", ("torch", "zeros")), ("tessera (jax)", ("jax.numpy", "zeros")))


def foreign_case(tool: str, make: tuple[str, str], launch, calls: int) -> Case:
    module, function = make
    x = getattr(importlib.import_module(module), function)(16)  # float32 in both

    def run():
        for _ in range(calls):
            launch(x)

    return Case(tool, run, inner=calls, first=lambda: launch(x))


if __name__ == "__main__":
    standalone(NAME, run)
