"""Run under ``mpiexec -n 4``: sharded tensors on a 2 x 2 mesh; writes ``ok`` (or the
failure) to ``<folder>/rank<r>.txt``."""

from __future__ import annotations

import sys

import numpy as np
from mpi_run import report_outcome

from tessera import dist


def check() -> None:
    mesh = dist.Mesh(axes=("tp", "pp"), shape=(2, 2))
    full = np.arange(5 * 7, dtype=np.float32).reshape(5, 7)
    spec = dist.ShardSpec(partition=("row", "col"), mesh_axes=("tp", "pp"))
    w = dist.from_global(full, spec, mesh)
    rows = np.array_split(np.arange(5), 2)[mesh.index("tp")]
    cols = np.array_split(np.arange(7), 2)[mesh.index("pp")]
    assert w.local_shape == (len(rows), len(cols))
    assert np.array_equal(w.local, full[np.ix_(rows, cols)])
    assert np.array_equal(w.gather(), full)
    replicated = dist.from_global(full, dist.ShardSpec(), mesh)
    assert replicated.local_shape == (5, 7)
    z = dist.tensor(
        shape=(4, 6),
        layout=dist.ShardSpec(partition=(1,), mesh_axes=("pp",)),
        mesh=mesh,
        dtype="f64",
    )
    assert z.local.dtype == np.float64 and z.local_shape == (4, 3)


if __name__ == "__main__":
    report_outcome(check, f"{sys.argv[1]}/rank{dist.rank()}.txt")
