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
# uses a fresh directory of its own, never the user's cache; it is removed at the end. A
# run's pytest-xdist workers share their controller's (the cache is made for processes
# that share it: a kernel one worker compiled, another loads).
_SHARED_CACHE = "_TESSERA_TEST_CACHE_DIR"  # (not a TESSERA_* name: no setting)
if "PYTEST_XDIST_WORKER" in os.environ and os.environ.get(_SHARED_CACHE):
    _CACHE_DIR = os.environ[_SHARED_CACHE]
else:
    _CACHE_DIR = os.environ[_SHARED_CACHE] = tempfile.mkdtemp(prefix="tessera-test-cache-")
    atexit.register(shutil.rmtree, _CACHE_DIR, ignore_errors=True)
os.environ["TESSERA_CACHE_DIR"] = _CACHE_DIR
# Autotune sweeps compile in this process unless a test asks for workers: "auto" follows
# the machine's load, and the suite's counts of compiles must not (test_compile_workers.py
# sets its own counts)
os.environ.setdefault("TESSERA_COMPILE_WORKERS", "1")
refresh_settings()  # settings are read once; this one may have been read already


@pytest.fixture(scope="module")
def frozen_heap():
    """``gc.freeze()`` for a module whose tests call ``gc.collect()`` to see what their
    own objects' finalizers do: a full collection then scans only the objects made since,
    not the suite's whole heap (seconds a call late in the suite)."""
    gc.freeze()
    yield
    gc.unfreeze()


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """After each test (its fixtures torn down): collect its garbage, then
    ``gc.freeze()`` what is left. A worker holds every compiled kernel of its files (1-2
    GB of objects), and each of Python's full collections scanned all of it: measured in
    one process over the ops, gradient and example tests, 63 s of 383 went to 35 full
    collections. Frozen, what earlier tests left is not scanned again (that run: 382 →
    337 s); a test's own objects are collected as before (nothing is frozen while it
    runs). What a later test drops of the frozen objects is freed by reference counting,
    or kept if it is in a cycle: memory, not results."""
    yield
    gc.collect()
    gc.freeze()


@pytest.fixture
def cache_dir(tmp_path):
    """A disk cache of the test's own (``tmp_path / "cache"``), switched on."""
    with tessera.config(cache_dir=str(tmp_path / "cache"), cache="on"):
        yield tmp_path / "cache"


MAX_WORKERS = 4  # each holds its compiled kernels (1-2 GB); mpiexec tests add ranks


def _distributed(config) -> bool:
    """Whether this run hands its tests to pytest-xdist workers (or is one of them)."""
    worker = hasattr(config, "workerinput") or "PYTEST_XDIST_WORKER" in os.environ
    return worker or bool(getattr(config.option, "numprocesses", 0))


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """A run of the whole suite goes to pytest-xdist's workers, one per core up to
    ``MAX_WORKERS`` (the suite is mostly Numba compiling, one core a process), a file to a
    worker; a run of chosen files or tests stays in this process. ``-n N`` (``-n 0``: no
    workers) overrides. Without pytest-xdist everything runs here."""
    if not config.pluginmanager.hasplugin("xdist") or SIMULATOR or _distributed(config):
        return  # (a worker: its run's options came from the controller)
    if config.option.numprocesses is None and not config.option.collectonly:
        whole = all(os.path.isdir(arg) for arg in config.args) if config.args else True
        config.option.numprocesses = min(_usable_cores(), MAX_WORKERS) if whole else 0
        if config.option.numprocesses == 1:
            config.option.numprocesses = 0
    if config.option.numprocesses and config.option.dist in ("no", "load"):
        config.option.dist = "loadfile"  # a file's tests share its module state
        config.option.loadscopereorder = False  # collection order (the simulator's first)


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # (not on every platform)
        return os.cpu_count() or 1


def pytest_collection_modifyitems(session, config, items):
    """The simulator's test waits for its process. In one process it runs last, so that
    this process runs the other tests meanwhile (the process was started when collection
    ended); with workers it goes first, so that its worker starts the process at once and
    the others run the rest beside it."""
    waiting = [item for item in items if item.path.name == "test_cuda_simulator.py"]
    if waiting:
        others = [item for item in items if item not in waiting]
        items[:] = waiting + others if _distributed(config) else others + waiting


def pytest_collection_finish(session):
    """Start the simulator's run (tests/test_cuda_simulator.py) as soon as the suite is
    collected, so that it runs beside the other tests instead of after them (with
    workers, its test starts it: it is the first to run)."""
    if SIMULATOR or session.config.option.collectonly or _distributed(session.config):
        return
    if any(item.path.name == "test_cuda_simulator.py" for item in session.items):
        from test_cuda_simulator import pytestmark, start_simulator_run

        if not pytestmark.args[0]:  # (skipped where numba-cuda is missing)
            session.config._simulator_run = start_simulator_run()
