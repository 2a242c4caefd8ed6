"""The kernel-test suite on the cuda target, under numba-cuda's simulator.

The simulator must be enabled before Numba is imported, so this test starts a pytest
process of its own with ``NUMBA_ENABLE_CUDASIM=1``, where ``target`` is ``cuda`` only,
and runs every target-parametrised test there.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))

pytestmark = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or importlib.util.find_spec("numba.cuda") is None,
    reason="already inside the simulator run, or numba-cuda is not installed",
)


def test_kernel_suite_passes_on_the_cuda_simulator():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-x",
            "-p",
            "no:cacheprovider",
            HERE,
            "-k",
            "cuda",
            "--timeout=900",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
        cwd=os.path.dirname(HERE),
    )
    tail = "\n".join(result.stdout.splitlines()[-40:])
    assert result.returncode == 0, f"simulator run failed:\n{tail}\n{result.stderr[-2000:]}"
    assert " passed" in tail
