"""Compiling independent kernels side by side, in worker processes (docs/autotune.md).

An autotune sweep compiles every config it measures; one at a time, that is seconds of
Numba and LLVM each. :func:`compile_all` hands such a batch of compile jobs (a target's
``compile_jobs``: picklable, each with ``run()``, which writes the compiled code to the
disk cache) to ``TESSERA_COMPILE_WORKERS`` worker processes and waits for them. It does
not return compiled code: the launches that need it then find their entries in the disk
cache and load them exactly as a warm start does, through every check of the cache's
trust model (kernel/disk_cache.py: the MAC under this user's key, the header naming this
kernel, key and environment). Nothing a worker says is taken on trust.

* **Fresh interpreters**, not forks: Numba's and LLVM's state is not fork-safe once
  threads exist. A worker is ``python -c`` importing Tessera only (never the user's
  ``__main__``, which multiprocessing's "spawn" would re-run), with this process's
  environment but for the ``TESSERA_*`` variables: each job carries this process's
  settings instead (those of ``tessera.config`` blocks included).
* **Failures cost time, never correctness.** A job that fails in a worker (its compile
  raised, or its entry could not be written) is left to the launch that needs it, which
  compiles it in this process as if there were no workers: an error is then raised by
  that launch, the same error (kernel, file:line) as without workers. A worker that
  dies, or a pool that finishes no job for :data:`STALL_S` seconds, is stopped with a
  :class:`~tessera.errors.CompileWorkerWarning`, and its jobs are compiled in this process.
* **When it runs**: a batch of two jobs or more, with two workers or more allowed. The
  workers are started for the batch and stopped after it (starting one costs Python's
  and Numba's imports, about a second, paid once per batch and worker).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pickle
import queue
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

from .. import launchers, stats, threads
from ..config import get as setting
from ..errors import CompileWorkerWarning, SettingError
from . import disk_cache

log = logging.getLogger("tessera")
STALL_S = disk_cache.LOCK_WAIT_S  # no job finished for this long: the workers are stopped
_ROOT = str(Path(__file__).resolve().parent.parent.parent)  # where this tessera is imported from
WORKER = (
    f"import sys; r = {_ROOT!r}; sys.path.insert(0, r) if r not in sys.path else None; "
    "from tessera.kernel.compile_pool import serve; serve()"
)
HERE = True  # this process compiles jobs too, while its workers start (tests switch it off)
_LOG_TAIL = 2000  # characters of a worker's stderr kept in the log when it fails


def workers() -> int:
    """How many worker processes a batch may use (``TESSERA_COMPILE_WORKERS``): ``auto``
    is the cores this process may run on, divided among the ranks a launcher put on this
    node; 1 means none (every kernel compiles in the launching process)."""
    value = setting("compile_workers").strip().lower()
    if value == "auto":
        ranks = launchers.ranks_on_node() or 1
        return max(1, threads.usable_cores() // max(ranks, 1))
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise SettingError(f"TESSERA_COMPILE_WORKERS={value!r} must be 'auto' or a count >= 1")
    return count


def compile_all(jobs: list, what: str) -> dict | None:
    """Run ``jobs``, this process and worker processes side by side, and wait for them
    (``what`` names the batch in messages: "kernel 'k'"). None when they are left to the
    launches (fewer than two jobs or compilers); else a summary: ``workers`` (processes
    started), ``seconds``, ``here`` and ``in_workers`` (the jobs compiled in this process
    and by the workers) and ``left`` (title and why, of each job left to its launch)."""
    count = min(workers(), len(jobs))
    if count < 2 or not disk_cache.enabled():
        return None
    start = time.perf_counter()
    pool = _Pool(jobs, count)
    try:
        pool.run(what)
    finally:
        pool.stop()
    compiled = [k for k, (ok, _) in pool.replies.items() if ok and k not in pool.here]
    left = [(jobs[k].title, why) for k, (ok, why) in pool.replies.items() if not ok]
    left += [(job.title, "not compiled: the workers stopped") for job in pool.unanswered()]
    stats.bump("worker_compiles", len(compiled))
    seconds = time.perf_counter() - start
    log.info(
        "compiled %s: %d jobs here and %d in %d worker processes in %.2f s",
        what,
        len(pool.here),
        len(compiled),
        count - 1,
        seconds,
    )
    for title, why in left:
        log.info("compile worker left %s to the launch that needs it: %s", title, why)
    return {
        "workers": count - 1,
        "seconds": seconds,
        "here": len(pool.here),
        "in_workers": len(compiled),
        "left": left,
    }


class _Lost(Exception):
    """A worker stopped answering: it exited (crashed, killed) or its pipe broke."""


class _Worker:
    """One worker process: jobs go in as pickles on its stdin, answers come back as JSON
    lines on its stdout; its stderr is a temporary file (read when it fails)."""

    def __init__(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TESSERA_")}
        self.errors = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            [sys.executable, "-c", WORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errors,
            env=env,
        )

    def ask(self, job) -> tuple[bool, str]:
        try:
            pickle.dump(job, self.process.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self.process.stdin.flush()
            line = self.process.stdout.readline()
        except (OSError, ValueError) as exc:  # a broken pipe, or closed by stop()
            raise _Lost(str(exc)) from None
        if not line:
            raise _Lost(self.status())
        try:
            reply = json.loads(line)
            return bool(reply["ok"]), str(reply["text"])
        except (ValueError, KeyError, TypeError):
            raise _Lost(f"it answered {line[:200]!r}") from None

    def status(self) -> str:
        code = self.process.poll()
        if code is None:
            return "it closed its output"
        return f"it exited with status {code}" + (" (a signal)" if code < 0 else "")

    def stderr_tail(self) -> str:
        with contextlib.suppress(OSError, ValueError):
            self.errors.seek(0, os.SEEK_END)
            self.errors.seek(max(self.errors.tell() - _LOG_TAIL, 0))
            return self.errors.read().decode(errors="replace")
        return ""

    def stop(self, kill: bool) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.process.stdin.close()  # the worker's signal to exit
        if kill:
            self.process.kill()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        with contextlib.suppress(OSError, ValueError):
            self.process.stdout.close()
        self.errors.close()


class _Pool:
    """Worker processes, one thread each feeding it jobs from one queue."""

    def __init__(self, jobs: list, count: int):
        self.jobs = jobs
        self.pending: queue.SimpleQueue = queue.SimpleQueue()
        for k in range(len(jobs)):
            self.pending.put(k)
        self.replies: dict[int, tuple[bool, str]] = {}  # job number → (written, what)
        self.lost: list[tuple[_Worker, str]] = []
        self.changed = threading.Event()
        self.workers: list[_Worker] = []
        self.threads: list[threading.Thread] = []
        self.here: set[int] = set()  # the jobs this process compiled itself
        self.killed = False
        self.count = count

    def run(self, what: str) -> None:
        for _ in range(self.count - 1):
            worker = _Worker()
            self.workers.append(worker)
            thread = threading.Thread(target=self._feed, args=(worker,), daemon=True)
            self.threads.append(thread)
            thread.start()
        while HERE:  # this process is a compiler too, while the workers start and run
            try:
                k = self.pending.get_nowait()
            except queue.Empty:
                break
            try:
                self.replies[k] = (True, self.jobs[k].compile_here())
                self.here.add(k)
            except Exception as exc:  # noqa: BLE001 - the launch compiles it again, and raises
                self.replies[k] = (False, f"{type(exc).__name__}: {_first_line(exc)}")
        answered, last = 0, time.monotonic()
        while any(t.is_alive() for t in self.threads):
            self.changed.wait(0.5)
            self.changed.clear()
            if len(self.replies) + len(self.lost) != answered:
                answered, last = len(self.replies) + len(self.lost), time.monotonic()
            elif time.monotonic() - last > STALL_S:
                self.killed = True
                warnings.warn(
                    f"tessera: the compile workers of {what} finished nothing in {STALL_S:.0f} "
                    "s; stopping them and compiling the rest in this process",
                    CompileWorkerWarning,
                    stacklevel=4,
                )
                return
        for worker, why in self.lost:
            warnings.warn(
                f"tessera: a compile worker of {what} stopped ({why}); compiling what it left "
                "in this process",
                CompileWorkerWarning,
                stacklevel=4,
            )
            log.debug("the compile worker's last output:\n%s", worker.stderr_tail())

    def _feed(self, worker: _Worker) -> None:
        try:
            while not self.killed:
                try:
                    k = self.pending.get_nowait()
                except queue.Empty:
                    return
                try:
                    self.replies[k] = worker.ask(self.jobs[k])
                except _Lost as exc:
                    self.lost.append((worker, str(exc)))
                    return
                if not self.replies[k][0]:
                    log.debug("compile worker output:\n%s", worker.stderr_tail())
        finally:
            self.changed.set()

    def unanswered(self) -> list:
        return [job for k, job in enumerate(self.jobs) if k not in self.replies]

    def stop(self) -> None:
        """Let every worker exit (kill them where the pool stalled or was interrupted)."""
        kill = self.killed or any(t.is_alive() for t in self.threads)
        for worker in self.workers:
            worker.stop(kill)
        for thread in self.threads:
            thread.join(timeout=5)


def serve() -> None:
    """A worker's main loop: run each job read from stdin, answer each with a JSON line
    ``{"ok", "text"}``; exit at end of input. Whatever the compile prints goes to stderr."""
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # stray prints must not garble the answers
    jobs = sys.stdin.buffer
    while True:
        try:
            job = pickle.load(jobs)
        except EOFError:
            return
        try:
            reply = {"ok": True, "text": job.run()}
        except Exception as exc:  # the launch that needs it compiles it, and raises if it must
            logging.getLogger("tessera").exception("compile job failed")
            reply = {"ok": False, "text": f"{type(exc).__name__}: {_first_line(exc)}"}
        answers.write(json.dumps(reply) + "\n")
        answers.flush()


def _first_line(exc: Exception) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else ""
