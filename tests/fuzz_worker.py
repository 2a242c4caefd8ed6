"""The child process of tests/test_mutation_fuzz.py: imports one mutated kernel module at a
time, launches its kernel on the debug and cpu targets and judges what happened.

It runs apart from the test so that a crash (a segfault in compiled code) or a hang is
seen by the test as such instead of taking pytest down with it. Requests and answers are
JSON lines on stdin and on the stdout the process started with (the kernel's own prints,
and Numba's, go to stderr).

The verdict is "ok" when the outcome is one a user may see: success with the same
results on both targets, or a TesseraError naming the kernel (a KernelError pointing
into the mutated file). Anything else is a "violation": another exception type, targets
that disagree, an error that does not name the kernel or has no location.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import queue
import signal
import subprocess
import sys
import threading
import traceback

import ml_dtypes
import numpy as np

import tessera
from tessera import dtypes as D
from tessera.kernel.signature import GRID_GROUPS

DEBUG_SECONDS = 1.5  # a debug launch running longer runs a (mutated) long loop: not a bug
_FLAT_EXTENT = 8  # the elements of a flat kernel's arrays along each axis
MAX_ELEMENTS = 2**20  # a mutated dim may ask for more: such a launch is not tried


class _Slow(BaseException):
    """Raised by the alarm in a debug launch that runs too long (not an Exception, so no
    ``except Exception`` in Tessera can turn it into something else)."""


def _alarm(signum, frame):
    raise _Slow()


# ----------------------------------------------------------------------------- arguments


def _array(dtype: D.DType, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if dtype == D.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if dtype.is_int:
        return rng.integers(1, 8, shape).astype(dtype.np_dtype)
    values = np.round(rng.standard_normal(shape) * 4, 2)
    if dtype == D.bf16:
        return values.astype(ml_dtypes.bfloat16)
    return values.astype(dtype.np_dtype)


def _extent(dim, grid: tuple[int, ...] | None, extent: int) -> int:
    if isinstance(dim, int):
        return dim
    return math.prod(grid) if grid and str(dim) == GRID_GROUPS else extent


def arguments(k) -> tuple[tuple, tuple[int, ...]] | None:
    """Small valid arguments for kernel ``k`` and a grid that covers them: a flat kernel
    runs one tile per element of its first array; a grouped kernel two groups of a 1-D
    group shape (its arrays as long as both), else one group (arrays as wide as it).
    None when an array would be too large (a mutated literal dim)."""
    rng = np.random.default_rng(0)
    if not k.grouped:
        grid, extent = None, _FLAT_EXTENT
    elif len(k.options.tile) == 1:
        grid, extent = (2,), 2 * k.options.tile[0]
    else:
        grid, extent = (1,) * len(k.options.tile), max(k.options.tile)
    args, first_shape = [], None
    for p in k.params:
        if p.kind == "array":
            shape = tuple(_extent(d, grid, extent) for d in p.dims)
            if math.prod(shape) > MAX_ELEMENTS:
                return None
            first_shape = first_shape or shape
            args.append(_array(p.dtype, shape, rng))
        elif p.kind == "scalar":
            args.append(True if p.dtype == D.bool_ else 3 if p.dtype.is_int else 1.5)
        else:
            args.append(2)
    return tuple(args), grid or (first_shape or (extent,))[:3]


def _copies(args: tuple) -> tuple:
    return tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)


# ----------------------------------------------------------------------------- judging


class Violation(Exception):
    """An outcome a user must never see; ``cause`` is the exception behind it, if any."""

    def __init__(self, message: str, cause: BaseException | None = None):
        super().__init__(message)
        self.cause = cause

    def detail(self) -> str:
        if self.cause is None:
            return traceback.format_exc()
        return "".join(traceback.format_exception(self.cause))


def _innermost_file(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    return frames[-1].filename if frames else ""


def _check_error(exc: BaseException, name: str, path: str, where: str) -> str:
    """The outcome's description if ``exc`` is an error a user may see, else raise."""
    if isinstance(exc, tessera.InternalError):  # a TesseraError, but a bug all the same
        raise Violation(f"{where}: {exc}", exc)
    if isinstance(exc, tessera.TesseraError):
        if f"'{name}'" not in str(exc):
            raise Violation(f"{where}: {type(exc).__name__} does not name '{name}': {exc}", exc)
        if isinstance(exc, tessera.KernelError):
            if exc.loc is None or exc.loc.file != path:
                raise Violation(f"{where}: KernelError located at {exc.loc}: {exc}", exc)
        return type(exc).__name__
    if _innermost_file(exc) == path:
        return f"python {type(exc).__name__}"  # Python itself, running the user's module
    raise Violation(f"{where}: raw {type(exc).__name__}: {exc}", exc)


def _launch(k, target: str, args: tuple, grid: tuple, checked: bool = False):
    """Launch on ``target``; (None, arrays) or (the error, None)."""
    args = _copies(args)
    try:
        with tessera.config(target=target, boundscheck=int(checked)):
            k[grid](*args)
    except Exception as exc:
        return exc, None
    return None, [a for a in args if isinstance(a, np.ndarray)]


def _debug_launch(k, args: tuple, grid: tuple):
    """The debug launch, stopped after DEBUG_SECONDS: ("slow", None) when the kernel ran
    that long (a mutated loop may never end); a slow *compile* is a violation."""
    signal.setitimer(signal.ITIMER_REAL, DEBUG_SECONDS)
    try:
        return _launch(k, "debug", args, grid)
    except _Slow as exc:
        running = any(
            f.name == "run" and f.filename.endswith(os.path.join("debug", "program.py"))
            for f in traceback.extract_tb(exc.__traceback__)
        )
        if not running:
            raise Violation(f"the debug target compiled for over {DEBUG_SECONDS}s") from None
        return "slow", None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype.kind in "biu":
        return a.tobytes() == b.tobytes()
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return bool(np.allclose(a64, b64, rtol=1e-5, atol=1e-6, equal_nan=True))


def judge(path: str, name: str) -> str:
    """What happened to kernel ``name`` of the module at ``path`` (raises Violation)."""
    spec = importlib.util.spec_from_file_location(f"fuzz_{abs(hash(path)):x}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        return "decoration: " + _check_error(exc, name, path, "decoration")
    k = getattr(module, name, None)
    if not isinstance(k, tessera.Kernel):
        return "the mutation replaced the kernel"  # e.g. the decorator's name swapped
    launch = arguments(k)
    if launch is None:
        return "arguments too large to try"
    args, grid = launch
    error, debug_out = _debug_launch(k, args, grid)
    if error == "slow":  # compile for the cpu all the same: Numba must accept the kernel
        try:
            with tessera.config(target="cpu"):
                k.inspect("llvm", *args, grid=grid)
        except Exception as exc:
            return "debug slow; cpu compile: " + _check_error(exc, name, path, "cpu compile")
        return "debug slow; cpu compiles"
    if error is not None:
        debug_what = _check_error(error, name, path, "debug launch")
        compile_error = isinstance(error, (tessera.KernelError, tessera.LaunchError))
        cpu_error, _ = _launch(k, "cpu", args, grid, checked=True)
        if cpu_error is None:
            if compile_error:
                raise Violation(f"the debug target refused ({error}) but the cpu ran", error)
            return f"debug {debug_what}; cpu ran"
        cpu_what = _check_error(cpu_error, name, path, "cpu launch")
        return f"debug {debug_what}; cpu {cpu_what}"
    cpu_error, cpu_out = _launch(k, "cpu", args, grid)
    if cpu_error is not None:
        what = _check_error(cpu_error, name, path, "cpu launch")
        raise Violation(f"the debug target ran but the cpu raised {what}: {cpu_error}", cpu_error)
    for index, (a, b) in enumerate(zip(debug_out, cpu_out)):
        if not _same(a, b):
            raise Violation(f"array argument {index}: debug gave {a!r}, cpu gave {b!r}")
    return "ran: cpu == debug"


class WorkerProcess:
    """The test's handle on a worker: ``ask`` sends one mutated module and waits for the
    verdict; a worker that dies or does not answer in time is replaced, and the answer
    is a violation (a crash or a hang)."""

    def __init__(self, answer_seconds: float):
        self.answer_seconds = answer_seconds
        self._start()

    def _start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.answers: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, args=(self.proc, self.answers), daemon=True).start()

    @staticmethod
    def _read(proc: subprocess.Popen, answers: queue.Queue) -> None:
        for line in proc.stdout:
            answers.put(json.loads(line))
        answers.put(None)

    def ask(self, path: str, kernel: str) -> dict:
        self.proc.stdin.write(json.dumps({"path": path, "kernel": kernel}) + "\n")
        self.proc.stdin.flush()
        try:
            answer = self.answers.get(timeout=self.answer_seconds)
        except queue.Empty:
            self.close()
            self._start()
            return {"verdict": "violation", "what": f"hang: no answer in {self.answer_seconds}s"}
        if answer is None:
            code = self.proc.wait()
            self._start()
            return {"verdict": "violation", "what": f"crash: the worker died (exit {code})"}
        return answer

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def main() -> None:
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # prints (the kernel's, Numba's) must not mix into the answers
    sys.stdout = sys.stderr
    signal.signal(signal.SIGALRM, _alarm)
    for line in sys.stdin:
        request = json.loads(line)
        try:
            answer = {"verdict": "ok", "what": judge(request["path"], request["kernel"])}
        except Violation as v:
            answer = {"verdict": "violation", "what": str(v), "detail": v.detail()}
        except Exception as exc:  # a raw error in the worker's own judging: report it
            answer = {"verdict": "violation", "what": repr(exc), "detail": traceback.format_exc()}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
