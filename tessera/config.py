"""Every ``TESSERA_*`` setting, typed and documented in one place.

Settings are read from the environment when first asked for and can be overridden for a
block of code with :func:`config`, which is how tests scope them::

    with tessera.config(target="cpu"):
        k[n](x, y)
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from .errors import SettingError


@dataclass(frozen=True)
class Setting:
    name: str
    env: str
    default: str
    choices: tuple[str, ...] | None
    doc: str


SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in (
        Setting(
            "target",
            "TESSERA_TARGET",
            "auto",
            None,  # the target registry checks the name (tessera/kernel/targets/)
            "Target for launches: 'auto' picks from the arrays, or name one (cpu, debug, cuda).",
        ),
        Setting(
            "boundscheck",
            "TESSERA_BOUNDSCHECK",
            "0",
            ("0", "1"),
            "1: the CPU target checks every index and raises an error naming the kernel, "
            "the array and the line (slower).",
        ),
        Setting(
            "debug_nan",
            "TESSERA_DEBUG_NAN",
            "0",
            ("0", "1"),
            "1: the debug target reports the first operation that makes a NaN from "
            "non-NaN operands.",
        ),
        Setting(
            "parallel_threshold",
            "TESSERA_PARALLEL_THRESHOLD",
            "32768",
            None,
            "Launches with fewer lanes than this run on one core: starting the thread "
            "pool costs more than such a launch.",
        ),
        Setting(
            "cache",
            "TESSERA_CACHE",
            "on",
            ("on", "off"),
            "off: compiled kernels are kept in memory only, nothing is read from or "
            "written to the disk cache.",
        ),
        Setting(
            "cache_dir",
            "TESSERA_CACHE_DIR",
            "",
            None,
            "Directory of the disk cache; empty: the user's cache directory "
            "($XDG_CACHE_HOME/tessera, ~/.cache/tessera, ~/Library/Caches/tessera, "
            "%LOCALAPPDATA%\\tessera\\Cache). Created 0700; refused unless owned by the "
            "user and writable by nobody else (docs/targets.md, trust model).",
        ),
        Setting(
            "explain_recompile",
            "TESSERA_EXPLAIN_RECOMPILE",
            "0",
            ("0", "1"),
            "1: each new specialisation of a kernel after its first logs (logger "
            "'tessera', WARNING) which part of the key changed.",
        ),
        Setting(
            "kernel_cache_size",
            "TESSERA_KERNEL_CACHE_SIZE",
            "256",
            None,
            "Compiled specialisations a kernel keeps in memory; past this the least "
            "recently launched one is dropped (the disk cache still has it).",
        ),
        Setting(
            "dump",
            "TESSERA_DUMP",
            "",
            None,
            "Comma-separated compiler stages (ir, regions, cpu) to write to files when a "
            "specialisation is built.",
        ),
        Setting(
            "dump_dir",
            "TESSERA_DUMP_DIR",
            "",
            None,
            "Where TESSERA_DUMP writes its files (default: the current directory).",
        ),
        Setting(
            "traceback",
            "TESSERA_TRACEBACK",
            "short",
            ("short", "full"),
            "short: the traceback of a Tessera error ends at the user's own line (Tessera's "
            "frames are left out); full: every frame is kept, for reporting a bug in Tessera.",
        ),
        Setting(
            "autotune",
            "TESSERA_AUTOTUNE",
            "on",
            ("on", "off", "retune"),
            "off: autotuned kernels use the cached winner or their first valid config, "
            "without trials; retune: sweep again even where the cache has a winner.",
        ),
        Setting(
            "autotune_verbose",
            "TESSERA_AUTOTUNE_VERBOSE",
            "0",
            ("0", "1"),
            "1: print every sweep's table of configs and times.",
        ),
        Setting(
            "collective_timeout",
            "TESSERA_COLLECTIVE_TIMEOUT",
            "300",
            None,
            "Seconds a collective (or autotune's agreement between ranks) waits for the "
            "other ranks before raising CollectiveTimeout (naming the ranks that did not "
            "arrive): a finite number > 0; 0 or 'off' waits for ever. Anything else, nan "
            "and inf included, is an error.",
        ),
        Setting(
            "dist_debug",
            "TESSERA_DIST_DEBUG",
            "0",
            ("0", "1"),
            "1: before each collective the ranks compare a 16-byte fingerprint of the "
            "call (kind, op, dtype, shape, dim, root, deterministic, backend) in one small "
            "all-gather; a mismatch raises CollectiveMismatch on every rank, naming what "
            "each called. 0 (default): no extra exchange, which would add 40-100 % to a "
            "1 KB all_reduce on 2 ranks (python -m bench.dist_check). all_gather checks "
            "either way, with the block lengths it exchanges anyway.",
        ),
        Setting(
            "dist_shared_memory",
            "TESSERA_DIST_SHARED_MEMORY",
            "on",
            ("on", "off"),
            "on: all_reduce_coalesced reduces host buckets in memory shared by the ranks "
            "when every rank of the axis is on one node; off: always through MPI's "
            "all-reduce.",
        ),
        Setting(
            "dist_backend",
            "TESSERA_DIST_BACKEND",
            "auto",
            ("auto", "mpi", "nccl"),
            "Backend of the collectives: auto picks mpi for host arrays and nccl for GPU "
            "arrays; mpi or nccl forces one.",
        ),
        Setting(
            "launcher",
            "TESSERA_LAUNCHER",
            "auto",
            ("auto", "mpi", "single"),
            "auto: MPI's world when a launcher's variables (mpiexec, srun, Flux, PALS, "
            "torchrun) are set, and an error when MPI's world is not the size the launcher "
            "says; mpi: always MPI's world, without that comparison; single: a world of one "
            "process, whatever started it.",
        ),
        Setting(
            "threads",
            "TESSERA_THREADS",
            "auto",
            None,
            "Threads of a parallel CPU launch: auto is the node's cores divided by the ranks "
            "on the node (NUMBA_NUM_THREADS, when set, wins); a number sets it. Read at "
            "import tessera, before the thread pool starts.",
        ),
        Setting(
            "deterministic",
            "TESSERA_DETERMINISTIC",
            "0",
            ("0", "1"),
            "1: reductions in collectives run in rank order, bitwise identical every run.",
        ),
    )
}

_overrides = threading.local()
_active = [0]  # how many config() blocks are open in all threads
_ints: dict[str, int] = {}


def _stack() -> list[dict[str, str]]:
    if not hasattr(_overrides, "stack"):
        _overrides.stack = []
    return _overrides.stack


def get(name: str) -> str:
    """The current value of setting ``name`` (override, then environment, then default)."""
    if _active[0]:  # some thread has overrides: look at this thread's
        for frame in reversed(_stack()):
            if name in frame:
                return frame[name]
    value = _from_env.get(name)
    if value is None:
        setting = SETTINGS[name]
        value = os.environ.get(setting.env, setting.default)
        if setting.choices is not None and value not in setting.choices:
            raise SettingError(
                f"{setting.env}={value!r} is not a valid value; choose one of "
                f"{', '.join(setting.choices)}"
            )
        _from_env[name] = value
    return value


_from_env: dict[str, str] = {}  # environment values, read once: os.environ is slow to query


def refresh() -> None:
    """Re-read the ``TESSERA_*`` environment variables (they are read once, at first use)."""
    _from_env.clear()
    _launch_cache.clear()


_launch_cache: list[tuple[str, bool, int]] = []


def launch_settings() -> tuple[str, bool, int]:
    """(target, boundscheck, parallel_threshold) for a launch, in one call: launches are
    the hot path, and outside ``config()`` blocks the answer only changes on refresh()."""
    if not _active[0] and _launch_cache:
        return _launch_cache[0]
    values = (get("target"), get("boundscheck") == "1", get_int("parallel_threshold"))
    if not _active[0]:
        _launch_cache[:] = [values]
    return values


def get_int(name: str) -> int:
    value = get(name)
    cached = _ints.get(value)
    if cached is not None:
        return cached
    try:
        _ints[value] = int(value)
        return _ints[value]
    except ValueError:
        raise SettingError(f"{SETTINGS[name].env}={value!r} is not an integer") from None


@contextlib.contextmanager
def config(**settings: object) -> Iterator[None]:
    """Override settings inside a ``with`` block (thread-local)."""
    frame: dict[str, str] = {}
    for name, value in settings.items():
        if name not in SETTINGS:
            raise SettingError(f"unknown Tessera setting {name!r}; known: {sorted(SETTINGS)}")
        choices = SETTINGS[name].choices
        if choices is not None and str(value) not in choices:
            raise SettingError(f"setting {name}={value!r} must be one of {choices}")
        frame[name] = str(value)
    _stack().append(frame)
    _active[0] += 1
    try:
        yield
    finally:
        _active[0] -= 1
        _stack().pop()
