"""Run under mpiexec by tests/test_threads.py: prints this rank's thread count as the
threads module chose it and as Numba's pool runs it, after the world is made."""

from __future__ import annotations

import tessera
from tessera import dist

dist.size()  # makes the MPI world, which counts the ranks on this node

import numba  # noqa: E402 - imported after the world, as a script's first launch would

print(f"rank {dist.rank()}: numba {numba.get_num_threads()}; {tessera.threads.describe()}")
