"""The kernel-test suite on the cuda target, under numba-cuda's simulator.

The simulator must be enabled before Numba is imported, so this test starts a pytest
process of its own with ``NUMBA_ENABLE_CUDASIM=1``, where ``target`` is ``cuda`` only,
and runs every target-parametrised test there. In a whole-suite run, conftest.py starts
that process when collection ends, so it runs beside the other tests (on a second core)
and this test only waits for it.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))

pytestmark = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or importlib.util.find_spec("numba.cuda") is None,
    reason="already inside the simulator run, or numba-cuda is not installed",
)


def simulator_command() -> list[str]:
    return [
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
        "-p",  # in this process alone: the suite's own workers use the other cores
        "no:xdist",
    ]


def start_simulator_run() -> tuple:
    """The simulator's pytest process, started now, and the files its output goes to
    (files, not pipes: a pipe nobody reads yet would stall it)."""
    out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    run = subprocess.Popen(
        simulator_command(),
        env=dict(os.environ, NUMBA_ENABLE_CUDASIM="1"),
        stdout=out,
        stderr=err,
        text=True,
        cwd=os.path.dirname(HERE),
    )
    return run, out, err


@pytest.mark.timeout(2400)  # it waits for the whole run (2100 s at most, below)
def test_kernel_suite_passes_on_the_cuda_simulator(request):
    run, out, err = getattr(request.config, "_simulator_run", None) or start_simulator_run()
    try:
        run.wait(timeout=2100)
    except subprocess.TimeoutExpired:
        run.kill()
        run.wait()
    out.seek(0)
    err.seek(0)
    stdout, stderr = out.read(), err.read()
    tail = "\n".join(stdout.splitlines()[-40:])
    assert run.returncode == 0, f"simulator run failed:\n{tail}\n{stderr[-2000:]}"
    assert " passed" in tail
