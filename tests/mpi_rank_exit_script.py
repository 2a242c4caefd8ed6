"""Run under ``tessera run -n 2`` with a mode and a folder: how a rank leaves the job.

* ``exit0``: after a first all_reduce, rank 1 ends its process with ``os._exit(0)`` (no
  exit handlers, no MPI_Finalize) while rank 0 goes on to the next collective.
* ``finish``: both ranks finish normally (the job succeeds).
"""

from __future__ import annotations

import os
import sys

import numpy as np

from tessera import dist


def main(mode: str, folder: str) -> None:
    mesh = dist.Mesh(axes=("x",), shape=(dist.size(),))
    dist.all_reduce(np.ones(3), axis="x")
    if mode == "exit0" and mesh.rank == 1:
        os._exit(0)
    dist.all_reduce(np.ones(3), axis="x")
    with open(f"{folder}/rank{mesh.rank}.txt", "w") as f:
        f.write("finished")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
