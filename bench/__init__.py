"""Tessera's benchmarks: ``python -m bench [names...] [--quick] [--plot]`` (see README.md).

GNU OpenMP's default wait policy (spin, then sleep) costs about 8 ms per parallel call on
the small shared machines this runs on, for Tessera and Numba alike, which would drown
every small measurement; unless OMP_WAIT_POLICY is already set or ``--omp-default`` is
given, the benchmarks run with ``OMP_WAIT_POLICY=PASSIVE``. This must happen before Numba
starts its thread pool, hence here.
"""

import os
import sys

if "--omp-default" not in sys.argv:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
