"""Run under ``mpiexec -n 2`` with TESSERA_TRACE and TESSERA_METRICS set: each rank
launches a kernel and all-reduces, and writes ``ok`` (or the failure) to
``<folder>/rank<r>.txt``; the trace and metrics files are written at exit."""

from __future__ import annotations

import sys

import numpy as np
from mpi_run import report_outcome
from observe_kernels import make_axpy

from tessera import dist


def check() -> None:
    dist.Mesh(axes=("dp",), shape=(dist.size(),))
    x, y = np.ones(128, np.float32), np.zeros(128, np.float32)
    make_axpy()[128](x, y, float(dist.rank() + 1))
    total = dist.all_reduce(y, axis="dp")
    assert np.array_equal(total, np.full(128, 3.0, np.float32))


if __name__ == "__main__":
    report_outcome(check, f"{sys.argv[1]}/rank{dist.rank()}.txt")
