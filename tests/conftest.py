"""Shared fixtures: the target matrix and a deterministic random generator."""

from __future__ import annotations

import atexit
import gc
import os
import shutil
import sys
import tempfile

import numpy as np
import pytest

import tessera
from tessera.config import refresh as refresh_settings
from tessera.kernel.targets import TARGETS as REGISTERED

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # so every test module can ``import classic_kernels``
    sys.path.insert(0, HERE)

# Targets every semantic test runs on. numba-cuda's simulator must be switched on before
# Numba is imported, so the cuda target runs in a pytest process of its own
# (tests/test_cuda_simulator.py starts it), where it is the only target.
SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
TARGETS = [name for name, t in REGISTERED.items() if t.semantic_tests(SIMULATOR)]


@pytest.fixture(params=TARGETS)
def target(request):
    """Run the test with ``tessera.config(target=...)`` set to each target in turn."""
    with tessera.config(target=request.param):
        yield request.param


@pytest.fixture
def rng():
    return np.random.default_rng(0)


# The disk cache: the suite, and every subprocess it starts (they inherit the environment),
# uses a fresh directory of its own, never the user's cache; it is removed at the end.
_CACHE_DIR = tempfile.mkdtemp(prefix="tessera-test-cache-")
os.environ["TESSERA_CACHE_DIR"] = _CACHE_DIR
# Autotune sweeps compile in this process unless a test asks for workers: "auto" follows
# the machine's load, and the suite's counts of compiles must not (test_compile_workers.py
# sets its own counts)
os.environ.setdefault("TESSERA_COMPILE_WORKERS", "1")
refresh_settings()  # settings are read once; this one may have been read already
atexit.register(shutil.rmtree, _CACHE_DIR, ignore_errors=True)


@pytest.fixture(scope="module")
def frozen_heap():
    """``gc.freeze()`` for a module whose tests call ``gc.collect()`` to see what their
    own objects' finalizers do: a full collection then scans only the objects made since,
    not the suite's whole heap (seconds a call late in the suite)."""
    gc.freeze()
    yield
    gc.unfreeze()


@pytest.fixture
def cache_dir(tmp_path):
    """A disk cache of the test's own (``tmp_path / "cache"``), switched on."""
    with tessera.config(cache_dir=str(tmp_path / "cache"), cache="on"):
        yield tmp_path / "cache"


def pytest_collection_modifyitems(session, config, items):
    """The simulator's test only waits for its process (started when collection ends):
    it runs last, so that this process runs the other tests meanwhile instead of idling
    (on 2 cores the whole suite is about as long as this process's share)."""
    waiting = [item for item in items if item.path.name == "test_cuda_simulator.py"]
    if waiting:
        items[:] = [item for item in items if item not in waiting] + waiting


def pytest_collection_finish(session):
    """Start the simulator's run (tests/test_cuda_simulator.py) as soon as the suite is
    collected, so that it runs beside the other tests instead of after them."""
    if SIMULATOR or session.config.option.collectonly:
        return
    if any(item.path.name == "test_cuda_simulator.py" for item in session.items):
        from test_cuda_simulator import pytestmark, start_simulator_run

        if not pytestmark.args[0]:  # (skipped where numba-cuda is missing)
            session.config._simulator_run = start_simulator_run()
