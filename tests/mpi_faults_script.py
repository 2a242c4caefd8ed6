"""Run under ``mpiexec -n 2`` or ``-n 4`` with a mode: a planted fault that the ranks must
turn into an error (not a hang). Writes what each rank saw to ``<folder>/rank<r>.txt``.

* ``skip``: the last rank skips an all_reduce and sleeps; the others must raise
  CollectiveTimeout naming it within FAULT_TIMEOUT seconds (an environment variable).
* ``skip_coalesced``: the same with all_reduce_coalesced (its shared-memory path).
* ``mismatch_coalesced``: the ranks pass all_reduce_coalesced arrays of different sizes.
* ``raise``: rank 1 raises before a collective; the job must end.
* ``die``: the last rank's process exits abruptly before a collective; the job must end.
* ``die_unnoticed``: the same, under a launcher that does not end the job; the others
  must see the exit (``dist.RankExited``) long before the timeout.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

import tessera
from tessera import dist


def main(mode: str, folder: str) -> None:
    mesh = dist.Mesh(axes=("x",), shape=(dist.size(),))
    last = mesh.size("x") - 1

    def report(text: str) -> None:  # atomic: another rank's abort may kill this one
        path = f"{folder}/rank{mesh.rank}.txt"
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)

    dist.all_reduce(np.ones(3), axis="x")  # one collective that everyone reaches
    if mode.startswith("skip"):
        if mesh.rank == last:
            report("skipped")
            time.sleep(30)
            return
        started = time.monotonic()
        try:  # only this collective gets the short timeout: start-up skew is not a fault
            with tessera.config(collective_timeout=os.environ["FAULT_TIMEOUT"]):
                if mode == "skip_coalesced":
                    dist.all_reduce_coalesced([np.ones(3), np.ones(2)], axis="x")
                else:
                    dist.all_reduce(np.ones(3), axis="x")
            report("no error")
        except dist.CollectiveTimeout as exc:
            took = time.monotonic() - started
            report(
                f"{type(exc).__name__} {exc.collective} {exc.seq} {exc.axis} "
                f"{exc.missing} {took:.1f}\n{exc}"
            )
            raise
    elif mode == "mismatch_coalesced":
        try:
            dist.all_reduce_coalesced([np.ones(3 + mesh.rank, np.float32)], axis="x")
            report("no error")
        except dist.CollectiveMismatch as exc:
            report(f"{type(exc).__name__}\n{exc}")
    elif mode == "raise":
        if mesh.rank == 1:
            report("raising")
            raise RuntimeError("planted failure on rank 1")
        dist.all_reduce(np.ones(3), axis="x")
        report("no error")
    elif mode == "die":
        if mesh.rank == last:
            report("dying")
            os._exit(3)
        dist.all_reduce(np.ones(3), axis="x")
        report("no error")
    elif mode == "die_unnoticed":
        if mesh.rank == last:
            report("dying")
            os._exit(3)
        started = time.monotonic()
        try:
            dist.all_reduce(np.ones(3), axis="x")
            report("no error")
        except dist.RankExited as exc:
            took = time.monotonic() - started
            report(f"{type(exc).__name__} {exc.missing} {took:.1f}\n{exc}")
            raise


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
