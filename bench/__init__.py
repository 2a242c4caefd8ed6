"""Tessera's benchmarks: ``python -m bench [names...] [--quick] [--plot]`` (see README.md).

GNU OpenMP's default wait policy (spin, then sleep) costs about 8 ms per parallel call on
the small shared machines this runs on, for Tessera and Numba alike, which would drown
every small measurement; unless OMP_WAIT_POLICY is already set or ``--omp-default`` is
given, the benchmarks run with ``OMP_WAIT_POLICY=PASSIVE``. This must happen before Numba
starts its thread pool, hence here.

OpenBLAS (NumPy's BLAS) has the same habit the other way round: after each call its idle
threads spin for 2**28 cycles (about 0.1 s), so a Tessera launch timed right after a
NumPy matmul shares its cores with a spinning thread (a 1024³ GEMM took 40 ms instead of
16.5 ms, NumPy's own time unchanged). Interleaved side-by-side timing would then measure
that, not either library, so the benchmarks set ``OPENBLAS_THREAD_TIMEOUT=4`` (OpenBLAS's
shortest spin) unless it is set; NumPy is imported after this.
"""

import os
import sys

if "--omp-default" not in sys.argv:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
