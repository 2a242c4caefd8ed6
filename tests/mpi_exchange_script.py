"""Run under ``mpiexec -n 2`` or ``-n 4``: point-to-point transfers and all_to_all
(tessera/mesh/exchange.py) against NumPy, and their faults; writes ``ok`` (or the
failure) to ``<folder>/rank<r>.txt``."""

from __future__ import annotations

import os
import sys

import numpy as np
from mpi_run import report_outcome

import tessera
from tessera import dist


def data(rank: int, shape=(5, 3), dtype=np.float32) -> np.ndarray:
    return (np.arange(np.prod(shape)).reshape(shape) + 100 * rank).astype(dtype)


def check() -> None:
    mesh = dist.Mesh(axes=("x",), shape=(dist.size(),))
    r, n = mesh.rank, mesh.size("x")

    # a ring: every rank passes its array on and gets its left neighbour's
    got = dist.sendrecv(data(r), dst=(r + 1) % n, src=(r - 1) % n, axis="x")
    np.testing.assert_array_equal(got, data((r - 1) % n))

    # pairs: even ranks send (large: MPI's rendezvous protocol), odd ranks receive
    big = (600, 512)
    if r % 2 == 0 and r + 1 < n:
        dist.send(data(r, big, np.float64), dst=r + 1, axis="x")
    elif r % 2 == 1:
        out = np.zeros(big, np.float64)
        assert dist.recv(out, src=r - 1, axis="x") is out
        np.testing.assert_array_equal(out, data(r - 1, big, np.float64))

    # all_to_all along dim 1: block j of every rank goes to rank j
    x = np.stack([data(r * n + j, (4,)) for j in range(n)], axis=1)  # (4, n)
    y = dist.all_to_all(x, axis="x", dim=1)
    np.testing.assert_array_equal(y, np.stack([data(j * n + r, (4,)) for j in range(n)], axis=1))
    np.testing.assert_array_equal(dist.all_to_all(y, axis="x", dim=1), x)  # its own inverse

    # a receiver expecting another dtype: a mismatch naming both, not wrong bytes
    if r < 2:
        if r == 0:
            dist.send(np.ones(3, np.float32), dst=1, axis="x")
        else:
            try:
                dist.recv(np.zeros(3, np.float64), src=0, axis="x")
                raise AssertionError("no mismatch")
            except dist.CollectiveMismatch as exc:
                assert "rank 0 sent float32 (3,)" in str(exc), exc
                assert "receives into float64 (3,)" in str(exc), exc
    dist.barrier()

    # a recv whose sender never sends: a timeout naming it
    if r == 1:
        try:
            with tessera.config(collective_timeout=os.environ.get("FAULT_TIMEOUT", "2")):
                dist.recv(np.zeros(2), src=0, axis="x")
            raise AssertionError("no timeout")
        except dist.CollectiveTimeout as exc:
            assert exc.missing == [0] and "rank 0 did not take part" in str(exc), exc
    dist.barrier()


if __name__ == "__main__":
    report_outcome(check, f"{sys.argv[1]}/rank{dist.rank()}.txt")
