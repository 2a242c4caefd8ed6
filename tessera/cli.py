"""The ``tessera`` command: ``tessera info`` and ``tessera demo``."""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import shutil
import sys


def info(out=print) -> None:
    """Versions, threads and which targets this machine can use."""
    import llvmlite
    import numba
    import numpy

    from . import __version__

    out(f"tessera   {__version__}")
    out(f"python    {platform.python_version()} ({sys.executable})")
    out(f"numba     {numba.__version__}")
    out(f"llvmlite  {llvmlite.__version__}")
    out(f"numpy     {numpy.__version__}")
    out(
        f"cpu       {platform.machine()}, {os.cpu_count()} cores, "
        f"{numba.get_num_threads()} Numba threads ({numba.config.THREADING_LAYER} layer)"
    )
    out("targets:")
    out("  cpu            usable")
    cuda_spec = importlib.util.find_spec("numba.cuda")
    if cuda_spec is None:
        out("  cuda GPU       no (numba-cuda is not installed)")
        out("  cuda simulator no (numba-cuda is not installed)")
    else:
        try:
            from numba import cuda

            gpu = cuda.is_available()
        except Exception as exc:  # a broken driver install must not break `info`
            gpu, why = False, str(exc).splitlines()[0]
        else:
            why = "no CUDA GPU or driver found"
        out(f"  cuda GPU       {'usable' if gpu else 'no (' + why + ')'}")
        out("  cuda simulator available with NUMBA_ENABLE_CUDASIM=1")
    mpi = importlib.util.find_spec("mpi4py") is not None
    mpiexec = shutil.which("mpiexec")
    out(
        f"mpi       mpi4py {'installed' if mpi else 'not installed'}; "
        f"mpiexec {'at ' + mpiexec if mpiexec else 'not found'}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tessera", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="versions, threads and usable targets")
    sub.add_parser("demo", help="run the demo kernels, check them against NumPy, time them")
    args = parser.parse_args(argv)
    if args.command == "info":
        info()
        return 0
    from .demo import run

    return 0 if run() else 1


if __name__ == "__main__":
    sys.exit(main())
