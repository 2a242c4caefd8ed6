"""Run under mpiexec by tests/test_threads.py: prints this rank's thread count as the
threads module chose it and as Numba's pool runs it, after the first mesh is made.

With ``from-mpi`` the launcher's count of ranks on the node (Hydra's MPI_LOCALNRANKS) is
removed first, so that only MPI's shared-memory communicator can supply it."""

from __future__ import annotations

import os
import sys

if sys.argv[1:] == ["from-mpi"]:
    os.environ.pop("MPI_LOCALNRANKS", None)

import tessera  # noqa: E402 - after the launcher's variable is gone
from tessera import dist  # noqa: E402

dist.Mesh(axes=("x",), shape=(dist.size(),))  # every rank: counts the ranks on this node

import numba  # noqa: E402 - imported after the mesh, as a script's first launch would

print(f"rank {dist.rank()}: numba {numba.get_num_threads()}; {tessera.runtime.threads.describe()}")
