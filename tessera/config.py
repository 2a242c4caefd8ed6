"""Every ``TESSERA_*`` setting, typed and documented in one place.

Settings are read from the environment when first asked for and can be overridden for a
block of code with :func:`config`, which is how tests scope them::

    with tessera.config(target="cpu"):
        k[n](x, y)
"""

from __future__ import annotations

import contextlib
import difflib
import logging
import os
import sys
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

from . import policy_file
from .errors import SettingError, SettingWarning

BOOLEANS = {("0", "1"): ("1", "0"), ("on", "off"): ("on", "off")}  # choices: (true, false)
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
LOG_LEVELS = ("", "WARNING", "INFO", "DEBUG")
CONFIG_ENV = "TESSERA_CONFIG"  # a .toml or .json file of settings (environment overrides it)
log = logging.getLogger("tessera")


@dataclass(frozen=True)
class Setting:
    name: str
    env: str
    default: str
    choices: tuple[str, ...] | None
    doc: str
    kind: str = "text"  # "int", "target"; a setting whose choices are BOOLEANS is a bool
    minimum: int | None = None  # of an "int" setting

    @property
    def accepted(self) -> str:
        """The values this setting accepts, in words (for errors and warnings)."""
        if self.choices in BOOLEANS:
            return "1/0, true/false, yes/no or on/off (any case)"
        if self.choices is not None:
            return ", ".join(repr(c) if not c else c for c in self.choices)
        if self.minimum is not None:
            return f"an integer of at least {self.minimum}"
        return {
            "int": "an integer",
            "target": "auto or a target name",
            "level": "info, debug, warning or nothing (any case)",
        }.get(self.kind, "text")


SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in (
        Setting(
            "target",
            "TESSERA_TARGET",
            "auto",
            None,  # the target registry checks the name (tessera/kernel/targets/)
            "Target for launches: 'auto' picks from the arrays, or name one (cpu, debug, cuda); "
            "lower-cased, so 'Debug' is 'debug'.",
            "target",
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
            "int",
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
            "compile_workers",
            "TESSERA_COMPILE_WORKERS",
            "auto",
            None,  # checked where it is read (kernel/compile_pool.py): auto or a count
            "Compiles an autotune sweep runs at once (CPU target, disk cache on): this "
            "process and N-1 worker processes. auto: this process's cores (divided among "
            "the ranks on the node), at most the cores idle now (by the load average); 1: "
            "no workers, each config compiles in this process when its trial needs it.",
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
            "Compiled specialisations a kernel keeps in memory (at least 1); past this the "
            "least recently launched one is dropped and freed (the disk cache still has it).",
            "int",
            minimum=1,
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
            "dist_algo",
            "TESSERA_DIST_ALGO",
            "auto",
            ("auto", "ring", "tree", "rd", "library"),
            "Algorithm of the collectives that have none given (algorithm=): auto takes the "
            "least cost under the alpha-beta model of the axis's links; ring, tree, rd "
            "(recursive doubling) are Tessera's own over MPI point-to-point; library is the "
            "MPI or NCCL collective. A collective without the algorithm named runs auto.",
        ),
        Setting(
            "dist_fault",
            "TESSERA_DIST_FAULT",
            "raise",
            ("raise", "retry", "shrink"),
            "What a collective that fails in its transport does (a mesh's fault= overrides "
            "it; the same on every rank): raise TransportError on every member; retry it "
            "once on new communicators and Tessera's own algorithms, which the axis keeps "
            "(mesh.health()); shrink needs an MPI with ULFM (an error at mesh creation "
            "without one). docs/distributed.md, 'Fault policy'.",
        ),
        Setting(
            "dist_heartbeat",
            "TESSERA_DIST_HEARTBEAT",
            "10",
            None,
            "Seconds between the heartbeats each rank sends the other members of its mesh "
            "axes (a thread; needs MPI_THREAD_MULTIPLE): a member silent for 3 intervals is "
            "lost, and a wait on it ends with RankLost instead of at the collective timeout. "
            "0 or 'off': no heartbeats. docs/distributed.md, 'Faults'.",
        ),
        Setting(
            "dist_fault_inject",
            "TESSERA_DIST_FAULT_INJECT",
            "",
            None,
            "For tests: faults to inject, separated by ';': 'transport@seq=N[,rank=R][,axis=A]' "
            "(collective N fails in its transport), 'rank=R@seq=N:exit' (rank R ends its "
            "process at collective N), 'rank=R@seq=N:stall' (rank R stops there for ever), "
            "'rank=R@seq=N:freeze' (rank R's process is stopped: no heartbeats).",
        ),
        Setting(
            "trace",
            "TESSERA_TRACE",
            "",
            None,
            "A file (trace.json) to write a Chrome trace of the whole process to at exit: "
            "compile stages, disk-cache loads, launches, collectives, autotune trials, "
            "graph-module runs (Perfetto opens it). Under MPI each rank writes its own "
            "(trace.rank3.json); `tessera trace merge` joins them (docs/observability.md).",
        ),
        Setting(
            "metrics",
            "TESSERA_METRICS",
            "",
            None,
            "A file (metrics.jsonl or metrics.csv) that gets one record per launch and "
            "collective: time, kernel, target, grid, seconds, bytes, GB/s, GFLOP/s, rank. "
            "Under MPI each rank writes its own (metrics.rank3.jsonl); `tessera metrics "
            "summary FILE` prints p50/p95 per kernel.",
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
            "cpu_vector_bits",
            "TESSERA_CPU_VECTOR_BITS",
            "auto",
            ("auto", "256", "512"),
            "Vector width the CPU target asks LLVM to prefer: auto is 512 for kernels that "
            "call exp, log, tanh or erf on a CPU with AVX-512 (LLVM alone picks 256 there) "
            "and LLVM's choice otherwise; 256 or 512: for every kernel.",
        ),
        Setting(
            "deterministic",
            "TESSERA_DETERMINISTIC",
            "0",
            ("0", "1"),
            "1: reductions in collectives run in rank order, bitwise identical every run.",
        ),
        Setting(
            "log",
            "TESSERA_LOG",
            "",
            None,
            "info or debug: a handler on logger 'tessera' prints its records at that level "
            "to stderr (compiles with their seconds, disk-cache hits and misses, autotune "
            "decisions, collective timeouts); empty: Tessera adds no handler.",
            "level",
        ),
        Setting(
            "crash_dir",
            "TESSERA_CRASH_DIR",
            "",
            None,
            "A directory: a failed launch, a debug-target finding, a CollectiveTimeout or a "
            "fatal signal writes a capture there (IR, metadata, arguments, settings, "
            "versions, log tail) that `tessera pack-repro` turns into a repro pack.",
        ),
        Setting(
            "crash_max_mb",
            "TESSERA_CRASH_MAX_MB",
            "64",
            None,
            "Megabytes of argument data a crash capture writes at most; past it only the "
            "shapes and dtypes are kept.",
            "int",
        ),
    )
}

_overrides = threading.local()
_active = [0]  # how many config() blocks are open in all threads
_ints: dict[str, int] = {}
_from_env: dict[
    str, str
] = {}  # values from the environment or file, read once (os.environ is slow)
_sources: dict[str, str] = {}  # where each of those came from: default, file PATH, environment
_file: dict[str, object] = {}  # TESSERA_CONFIG's settings, read once
_loaded = [False]
_warned: set[str] = set()
_lock = threading.RLock()


def count_or_auto(value: str, variable: str) -> int | None:
    """A setting that takes ``auto`` (None) or a count of at least 1 (``TESSERA_THREADS``,
    ``TESSERA_COMPILE_WORKERS``); anything else a SettingError naming ``variable``."""
    if value.strip().lower() == "auto":
        return None
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise SettingError(f"{variable}={value!r} must be 'auto' or a count >= 1")
    return count


def parse(setting: Setting, value: object) -> str:
    """``value`` in the setting's canonical spelling, or a SettingError naming the setting
    and what it accepts: booleans take 1/0, true/false, yes/no, on/off in any case;
    choices and targets are lower-cased; ints must be integers."""
    text = str(value).strip()
    if isinstance(value, bool):
        text = "1" if value else "0"
    lowered = text.lower()
    if setting.choices in BOOLEANS:
        true, false = BOOLEANS[setting.choices]
        if lowered in _TRUE:
            return true
        if lowered in _FALSE:
            return false
    elif setting.choices is not None:
        if lowered in setting.choices:
            return lowered
        if setting.choices[:2] == ("on", "off") and lowered in _TRUE + _FALSE:
            return "on" if lowered in _TRUE else "off"  # autotune: on, off or retune
    elif setting.kind == "target":
        return lowered
    elif setting.kind == "level":
        if text.upper() in LOG_LEVELS:
            return text.upper()
    elif setting.kind == "int":
        try:
            number = int(text)
        except ValueError:
            number = None
        if number is not None and (setting.minimum is None or number >= setting.minimum):
            return text
    else:
        return text
    raise SettingError(f"{setting.env}={text!r} is not a valid value; it takes {setting.accepted}")


def warn_once(key: str, message: str) -> None:
    """A SettingWarning and a log record, once per process for each ``key``: a mistyped
    setting must never be silently off, nor repeat on every launch."""
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    log.warning(message, extra={"shown_as_warning": True})
    warnings.warn(message, SettingWarning, stacklevel=_callers_level())


def _callers_level() -> int:
    """The ``stacklevel`` (for a warning raised in the caller of this function) of the
    first frame outside tessera and the import machinery: the user's line, whatever the
    depth of the tessera calls in between."""
    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame, level = sys._getframe(2), 2  # (1 would be warn_once itself)
    while frame is not None and (frame.f_code.co_filename.startswith((package, "<frozen "))):
        frame, level = frame.f_back, level + 1
    return level


def _load() -> None:
    """Read TESSERA_CONFIG's file and look for TESSERA_* names no setting has (once)."""
    with _lock:
        if _loaded[0]:
            return
        _loaded[0] = True
        _file.clear()
        path = os.environ.get(CONFIG_ENV, "")
        if path:
            _file.update(_read_file(path))
        known = {s.env for s in SETTINGS.values()} | {CONFIG_ENV}
        names = ", ".join(sorted(known))
        for env in sorted(os.environ):
            if env.startswith("TESSERA_") and env not in known:
                close = difflib.get_close_matches(env, known, 1)
                hint = f"did you mean {close[0]}? " if close else ""
                warn_once(
                    env, f"{env} is not a Tessera setting (ignored); {hint}the settings are {names}"
                )


def _read_file(path: str) -> dict[str, object]:
    """The settings of a .toml or .json policy file, by setting name (its top level, or a
    ``[tessera]`` table); a file that cannot be read or an unknown name warns."""
    try:
        data = policy_file.read(path)
    except (OSError, ValueError) as exc:  # UnicodeDecodeError and TOML's errors included
        warn_once(path, f"{CONFIG_ENV}={path!r} cannot be read ({exc}); it is ignored")
        return {}
    if isinstance(data.get("tessera"), dict):
        data = data["tessera"]
    out = {}
    for key, value in data.items():
        name = key.lower().removeprefix("tessera_")
        if name in SETTINGS:
            out[name] = value
        else:
            warn_once(
                f"{path}:{key}",
                f"{path}: {key!r} is not a Tessera setting (ignored); the settings are "
                f"{', '.join(sorted(SETTINGS))}",
            )
    return out


def _resolve(name: str) -> tuple[str, str]:
    """(value, source) from the environment, else the file, else the default; a value a
    setting cannot take warns once and the next source decides."""
    _load()
    setting = SETTINGS[name]
    candidates = [
        ("environment", os.environ.get(setting.env)),
        (f"file {os.environ.get(CONFIG_ENV)}", _file.get(name)),
    ]
    for source, raw in candidates:
        if raw is None:
            continue
        try:
            return parse(setting, raw), source
        except SettingError as error:
            where = "" if source == "environment" else f" (in {source[5:]})"
            warn_once(f"{setting.env}={raw!r}", f"{error}{where}; it is ignored")
    return setting.default, "default"


def get(name: str) -> str:
    """The current value of setting ``name`` (override, then environment, then file, then
    default)."""
    if _active[0]:  # some thread has overrides: look at this thread's
        for frame in reversed(_stack()):
            if name in frame:
                return frame[name]
    value = _from_env.get(name)
    if value is None:
        value, source = _resolve(name)
        _sources[name] = source
        _from_env[name] = value
    return value


def source(name: str) -> str:
    """Where setting ``name``'s current value comes from: ``default``, ``file PATH``,
    ``environment`` or ``config()`` (a scope in this thread)."""
    if _active[0] and any(name in frame for frame in _stack()):
        return "config()"
    get(name)
    return _sources[name]


def report() -> list[tuple[str, str, str]]:
    """Every setting as (environment name, value, source), for ``tessera info`` and crash
    captures."""
    return [(s.env, get(name), source(name)) for name, s in SETTINGS.items()]


def refresh() -> None:
    """Re-read the ``TESSERA_*`` environment variables and TESSERA_CONFIG's file (they are
    read once, at first use); a problem found again warns again."""
    with _lock:
        _from_env.clear()
        _sources.clear()
        _launch_cache.clear()
        _loaded[0] = False
        _warned.clear()


def _stack() -> list[dict[str, str]]:
    if not hasattr(_overrides, "stack"):
        _overrides.stack = []
    return _overrides.stack


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
    if cached is None:
        cached = _ints[value] = int(value)  # parse() let only integers through
    return cached


@contextlib.contextmanager
def config(**settings: object) -> Iterator[None]:
    """Override settings inside a ``with`` block (thread-local); values are parsed as the
    environment's are (``boundscheck=True`` is ``"1"``), and a bad one is a SettingError."""
    frame: dict[str, str] = {}
    for name, value in settings.items():
        if name not in SETTINGS:
            raise SettingError(f"unknown Tessera setting {name!r}; known: {sorted(SETTINGS)}")
        try:
            frame[name] = parse(SETTINGS[name], value)
        except SettingError:
            raise SettingError(
                f"tessera.config({name}={value!r}): it takes {SETTINGS[name].accepted}"
            ) from None
    _stack().append(frame)
    _active[0] += 1
    try:
        yield
    finally:
        _active[0] -= 1
        _stack().pop()
