"""Crash capture (``TESSERA_CRASH_DIR``): what a failure needs to be understood elsewhere.

On a failed launch (a kernel error, a debug-target finding, a bounds check), a
``CollectiveTimeout`` or a fatal signal, Tessera writes ``DIR/<time>-<kernel>/``:

* ``error.txt`` — the error as the user saw it; ``log.txt`` — the log tail before it;
* ``metadata.json`` — kernel name, file:line, signature, grid, target, constexprs, the
  arguments' shapes, dtypes and scalar values, and whether their data was kept;
* ``kernel.py`` — the kernel as a file of its own (``kernel_source.py``); ``ir.txt`` — its
  typed IR for these arguments (``k.inspect("ir", ...)``);
* ``args.npz`` — the arrays as they were before the launch, up to ``TESSERA_CRASH_MAX_MB``
  (a failed launch modifies nothing: checked targets run on copies of ``mut`` arrays);
* ``settings.json`` (every setting and its source) and ``versions.json``.

``tessera pack-repro`` zips such a directory with a replay script (``repro.py``). A fatal
signal cannot run Python, so for it ``faulthandler`` writes the stacks of every thread into
``DIR/fatal-<time>-<pid>.txt`` (removed at exit when nothing happened).

Capturing never masks the error: every step that fails is noted in the capture instead,
and the failure reaches the user unchanged (``tessera/failures.py``).
"""

from __future__ import annotations

import atexit
import faulthandler
import inspect
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from .. import config
from ..arrays import host_view
from ..config import get as setting
from ..config import get_int
from ..errors import LaunchError, TesseraError
from ..kernel.source import source_text_of
from ..version import __version__
from . import failures, log, repro_pack
from .kernel_source import standalone

FILES = ("error.txt", "metadata.json", "kernel.py", "ir.txt", "settings.json", "versions.json")


def versions() -> dict[str, str]:
    """The versions a repro depends on (numba imported only if the program did)."""
    out = {"tessera": __version__, "python": platform.python_version(), "numpy": np.__version__}
    for name in ("numba", "llvmlite", "ml_dtypes", "mpi4py"):
        module = sys.modules.get(name)
        if module is not None:
            out[name] = getattr(module, "__version__", "?")
    out["platform"] = platform.platform()
    out["machine"] = platform.machine()
    return out


def capture(error: BaseException, kernel=None, grid=None, args=None, outputs=None) -> Path | None:
    """Write a capture of ``error`` (with the launch of ``kernel`` over ``grid`` with
    ``args``, where it happened in one) under TESSERA_CRASH_DIR; its directory, or None
    when the setting is empty. ``outputs``: the ``mut`` arrays after a launch that
    worked (:func:`record`), for a replay to compare with."""
    root = setting("crash_dir")
    if not root:
        return None
    what = kernel.name if kernel is not None else getattr(error, "collective", "failure")
    folder = _new_folder(Path(root), what)
    notes: list[str] = []
    meta: dict = {
        "error_type": None if error is None else type(error).__name__,
        "error_kind": getattr(error, "kind", ""),
    }
    if error is not None:
        (folder / "error.txt").write_text(f"{type(error).__name__}: {error}\n")
    for field in ("collective", "seq", "axis", "missing"):
        if hasattr(error, field):
            meta[field] = getattr(error, field)
    if kernel is not None:
        meta.update(_launch(folder, kernel, tuple(grid), tuple(args), notes))
    if outputs is not None:
        np.savez(folder / "outputs.npz", **{f"arg{i}": a for i, a in outputs.items()})
        meta["outputs"] = sorted(f"arg{i}" for i in outputs)
    meta["notes"] = notes
    (folder / "metadata.json").write_text(json.dumps(meta, indent=1, default=str) + "\n")
    rows = [{"name": n, "value": v, "source": s} for n, v, s in config.report()]
    (folder / "settings.json").write_text(json.dumps(rows, indent=1) + "\n")
    (folder / "versions.json").write_text(json.dumps(versions(), indent=1) + "\n")
    (folder / "log.txt").write_text("\n".join(log.tail()) + "\n")
    # sealed last: `tessera replay` runs a capture this user sealed here without asking
    _noted(lambda: repro_pack.seal_folder(folder), [], "seal")
    log.LOGGER.warning("capture of %s written to %s", what, folder)
    return folder


def record(kernel, grid, *args) -> Path | None:
    """Launch ``kernel[grid](*args)`` and capture it with its outputs (the ``mut`` arrays
    after the launch), so a replay on another target or machine can compare results; a
    launch that fails is captured as any failure is. The capture's directory."""
    grid = grid if isinstance(grid, tuple) else (grid,)
    before = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    kernel[grid](*args)
    mutable = {i for i, p in enumerate(kernel.params) if p.kind == "array" and p.mutable}
    outputs = {i: np.asarray(args[i]) for i in sorted(mutable)}
    return capture(None, kernel, grid, before, outputs)


def _launch(folder: Path, kernel, grid: tuple, args: tuple, notes: list[str]) -> dict:
    """The launch's part of a capture: metadata, kernel.py, ir.txt and args.npz."""
    fn = kernel.fn
    meta: dict = {
        "kernel": kernel.name,
        "signature": repr(kernel),
        "defined": f"{inspect.getsourcefile(fn)}:{fn.__code__.co_firstlineno}",
        "grid": list(grid),
        "kernel_target": kernel.target,
        "boundscheck": kernel.boundscheck,
    }
    steps = {
        "target": lambda: kernel.target_for(args).name,
        "source": lambda: "".join(source_text_of(fn, "kernel").lines),  # as compiled
        "constexprs": lambda: {
            p.name: a for p, a in zip(kernel.params, args) if p.kind == "constexpr"
        },
    }
    for name, step in steps.items():
        meta[name] = _noted(step, notes, name)
    text, missing = _noted(lambda: standalone(fn), notes, "kernel.py") or ("", [])
    if text:
        (folder / "kernel.py").write_text(text)
    if missing:
        notes.append(f"kernel.py: names it reads that could not be written out: {missing}")
    ir = _noted(lambda: kernel.inspect("ir", *args, grid=grid), notes, "ir")
    (folder / "ir.txt").write_text(str(ir) + "\n" if ir is not None else "(see notes)\n")
    meta["args"] = _arguments(folder, kernel, args, notes)
    return meta


def _arguments(folder: Path, kernel, args: tuple, notes: list[str]) -> list[dict]:
    """Each argument described; the arrays' data into args.npz within TESSERA_CRASH_MAX_MB."""
    described, arrays = [], {}
    budget = get_int("crash_max_mb") * 2**20
    for i, a in enumerate(args):
        name = kernel.params[i].name if i < len(kernel.params) else f"extra{i}"
        view = host_view(a)  # a PyTorch or JAX host tensor: kept as NumPy keeps it
        a = a if view is None else view
        if hasattr(a, "shape") and hasattr(a, "dtype"):
            host = a if isinstance(a, np.ndarray) else _to_host(a)
            row = {"name": name, "kind": "array", "shape": list(a.shape), "dtype": str(a.dtype)}
            if host is not None and host.nbytes <= budget:
                budget -= host.nbytes
                arrays[f"arg{i}"] = host
                row["data"] = f"arg{i}"
            described.append(row)
        else:
            described.append({"name": name, "kind": "scalar", "value": _scalar(a)})
    if len(arrays) < sum(1 for r in described if r["kind"] == "array"):
        notes.append("some arrays' data is over TESSERA_CRASH_MAX_MB or on a GPU: not kept")
    if arrays:
        np.savez(folder / "args.npz", **arrays)
    return described


def _to_host(a) -> np.ndarray | None:
    copy = getattr(a, "copy_to_host", None)
    return copy() if callable(copy) else None


def _scalar(a: object) -> object:
    if isinstance(a, np.generic):
        return a.item()
    return a if isinstance(a, (bool, int, float)) else repr(a)


def _noted(step, notes: list[str], what: str):
    """``step()``, or None with a note of why it failed (a capture never raises)."""
    try:
        return step()
    except Exception as exc:
        notes.append(
            f"{what}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        )
        return None


def _new_folder(root: Path, what: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S") + f".{int(time.time() * 1000) % 1000:03d}"
    rank = os.environ.get("PMI_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK")
    what = "".join(c if c.isalnum() or c in "_-" else "_" for c in what)
    base = f"{stamp}-{what}" + (f"-rank{rank}" if rank is not None else "")
    for n in range(1000):
        folder = root / (base if n == 0 else f"{base}-{n}")
        try:
            folder.mkdir(parents=True)
            return folder
        except FileExistsError:
            continue
    raise FileExistsError(root / base)


def _on_failure(error: BaseException, kernel=None, grid=None, args=None) -> None:
    """The listener (``tessera/failures.py``): a refused launch (LaunchError: the message
    says all there is) is not captured; every other failure is."""
    if isinstance(error, LaunchError) or not isinstance(error, TesseraError):
        return
    capture(error, kernel, grid, args)


_fatal: list = []


def watch_fatal_signals() -> None:
    """Under TESSERA_CRASH_DIR, let faulthandler write a fatal signal's stacks to a file
    there (the process cannot run Python then); removed at exit when still empty."""
    root = setting("crash_dir")
    if not root or _fatal:
        return
    path = Path(root) / f"fatal-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
    try:  # a bad directory is a warning: import tessera must never fail on it
        Path(root).mkdir(parents=True, exist_ok=True)
        handle = open(path, "w")  # noqa: SIM115 - open for the life of the process
    except OSError as exc:
        config.warn_once(
            f"crash_dir:{root}",
            f"TESSERA_CRASH_DIR={root!r} cannot be used ({exc.strerror or exc}); failures and "
            "fatal signals are not captured there",
        )
        return
    _fatal.append((path, handle))
    faulthandler.enable(handle, all_threads=True)
    atexit.register(_forget_fatal_file)


def forget_fatal_signals() -> None:
    """Stop writing fatal signals' stacks to the crash directory; the (empty) file goes."""
    if _fatal:
        faulthandler.disable()
    _forget_fatal_file()


def _forget_fatal_file() -> None:
    for path, handle in _fatal:
        handle.close()
        if path.exists() and path.stat().st_size == 0:
            path.unlink()
    _fatal.clear()


failures.listen(_on_failure)
watch_fatal_signals()
