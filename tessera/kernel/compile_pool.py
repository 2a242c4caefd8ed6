"""Compiling independent kernels side by side, in worker processes (docs/autotune.md).

An autotune sweep compiles every config it measures, and a graph module (or an op such
as a split attention) several generated kernels; one at a time, that is seconds of Numba
and LLVM (or NVVM and ptxas) each. :func:`compile_all` runs such a batch of compile
jobs (a target's ``compile_jobs``: the CPU's and CUDA's; picklable, each with ``run()``,
which compiles in a worker and writes the compiled code to the disk cache, and
``compile_here()``, the same in this process) ``TESSERA_COMPILE_WORKERS`` at a time:
this process and worker processes take them from one queue. A worker returns no code:
the launches that need it find its entry in the disk cache and load it exactly as a warm
start does, through every check of the cache's trust model (kernel/disk_cache.py: the MAC
under this user's key, the header naming this kernel, key and environment). Nothing a
worker says is taken on trust.

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
* **When it runs**: a batch of two jobs or more, two compilers or more allowed, the disk
  cache on. The workers are started for the batch and stopped after it. Starting one
  costs about a second (Python's, Tessera's and Numba's imports, and Numba's first
  compile); it takes a job only once that is done, and meanwhile this process compiles,
  so a batch of cheap jobs that this process finishes alone costs nothing but the start
  of workers that are then killed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pickle
import re
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

from ..config import count_or_auto
from ..config import get as setting
from ..errors import CompileWorkerWarning
from ..observe import stats
from ..runtime import launchers, threads
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
    """How many compiles a batch runs at once, this process's included
    (``TESSERA_COMPILE_WORKERS``; 1: none but this process's, one after another). ``auto``
    is this process's share of the cores (those it may run on, divided among the ranks a
    launcher put on this node), but no more than the cores idle now (:func:`idle_cores`):
    on a machine that others keep busy, more compiles at once only slow each other down."""
    count = count_or_auto(setting("compile_workers"), "TESSERA_COMPILE_WORKERS")
    if count is None:
        ranks = launchers.ranks_on_node() or 1
        share = max(1, threads.usable_cores() // max(ranks, 1))
        return max(1, min(share, idle_cores()))
    return count


IDLE_SAMPLE_S = 0.05  # how long idle_cores watches the cores
STAT = "/proc/stat"


def idle_cores() -> int:
    """The cores idle now: the idle time of the cores this process may run on over
    IDLE_SAMPLE_S seconds (/proc/stat, core by core; this process sleeps meanwhile, so its
    own core counts as idle), in cores, rounded down but for 0.4 of a core (1.7 idle cores
    are 2: the second compiler finds most of a core; 1.5 are 1). Where there is no
    /proc/stat, the 1-minute load average less this process's 1 and half a core of slack,
    rounded down — a rule that lags (the average still counts processes that ended seconds
    ago) and chose two compilers on the 2-core VM at loads of 1.7-2.4, where one other
    process kept a core busy and two lost (bench/README.md)."""
    idle = _sampled_idle(IDLE_SAMPLE_S)
    if idle is not None:
        return max(int(idle + 0.4), 0)
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return threads.node_cores()
    return threads.node_cores() - max(int(load - 1.5), 0)


def _sampled_idle(seconds: float) -> float | None:
    """Idle cores (a fraction of each, added) of this process's cores over ``seconds``,
    or None where /proc/stat cannot tell (not Linux, unreadable, cores it does not list)."""
    before = _core_times()
    if before is None:
        return None
    time.sleep(seconds)
    after = _core_times()
    if after is None:
        return None
    try:
        mine = os.sched_getaffinity(0)
    except AttributeError:
        mine = set(before)
    return idle_between(before, after, mine)


def idle_between(before: dict, after: dict, cores) -> float | None:
    """The idle cores between two :func:`_core_times` readings, over ``cores``."""
    idle = 0.0
    for core in cores:
        if core not in before or core not in after:
            return None
        spent = after[core][1] - before[core][1]
        rested = after[core][0] - before[core][0]
        idle += rested / spent if spent > 0 else 1.0
    return idle


def _core_times(text: str | None = None) -> dict[int, tuple[int, int]] | None:
    """Each core's (idle, total) clock ticks from /proc/stat (or ``text``): idle counts
    the idle and I/O-wait columns, total those and user, nice, system, irq, softirq and
    steal (time a hypervisor gave another machine is not idle for us)."""
    if text is None:
        try:
            with open(STAT) as f:
                text = f.read()
        except OSError:
            return None
    times = {}
    for line in text.splitlines():
        found = _CORE_LINE.match(line)  # one core's line (not the first, of them all)
        if found is None:
            continue
        try:
            ticks = [int(v) for v in found.group(2).split()[:8]]
            times[int(found.group(1))] = (ticks[3] + ticks[4], sum(ticks))
        except (ValueError, IndexError):
            return None
    return times or None


_CORE_LINE = re.compile(r"cpu(\d+)\s+(.*)")


def compile_all(jobs: list, what: str) -> dict | None:
    """Run ``jobs``, this process and worker processes side by side, and wait for them
    (``what`` names the batch in messages: "kernel 'k'"). None when they are left to the
    launches (fewer than two jobs or compilers); else a summary: ``workers`` (processes
    started), ``seconds``, ``here`` and ``in_workers`` (the jobs compiled in this process
    and by the workers) and ``left`` (title and why, of each job left to its launch)."""
    jobs = _distinct(jobs)
    count = min(workers(), len(jobs))
    if count < 2 or not disk_cache.enabled():
        return None
    start = time.perf_counter()
    # what the batch's jobs need set up in a worker before it takes one (CUDA: numba-cuda)
    warm = tuple(dict.fromkeys(fn for job in jobs for fn in getattr(job, "warm_ups", ())))
    pool = _Pool(jobs, count, warm)
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


def _distinct(jobs: list) -> list:
    """``jobs`` less those writing an entry an earlier one writes (a module that launches
    one kernel twice with the same types, a sweep's configs that generate the same code)."""
    seen, out = set(), []
    for job in jobs:
        path = getattr(job, "path", None)
        if path is None or path not in seen:
            seen.add(path)
            out.append(job)
    return out


class _Lost(Exception):
    """A worker stopped answering: it exited (crashed, killed) or its pipe broke."""


class _Worker:
    """One worker process: it reads the batch's warm-ups (a pickled tuple of functions, run
    after Numba's first compile) and says it is ready, then jobs go in as pickles on its
    stdin and answers come back as JSON lines on its stdout; its stderr is a temporary
    file (read when it fails)."""

    def __init__(self, warm: tuple = ()) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TESSERA_")}
        self.errors = tempfile.TemporaryFile()
        self.asked = False  # whether it was given a job (one that was not is killed at once)
        self.process = subprocess.Popen(
            [sys.executable, "-c", WORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errors,
            env=env,
        )
        try:
            self.process.stdin.write(pickle.dumps(warm, protocol=pickle.HIGHEST_PROTOCOL))
            self.process.stdin.flush()
        except OSError:  # it died at once: ready() says so
            pass

    def ready(self) -> None:
        """Wait until the worker can compile at full speed (raises :class:`_Lost`)."""
        self._reply()

    def ask(self, job) -> tuple[bool, str]:
        try:
            data = pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001 - something of this process's in the job
            return False, f"cannot be sent to a worker ({type(exc).__name__}: {_first_line(exc)})"
        self.asked = True
        try:
            self.process.stdin.write(data)
            self.process.stdin.flush()
        except (OSError, ValueError) as exc:  # a broken pipe, or closed by stop()
            raise _Lost(str(exc)) from None
        reply = self._reply()
        return bool(reply["ok"]), str(reply["text"])

    def _reply(self) -> dict:
        try:
            line = self.process.stdout.readline()
        except (OSError, ValueError) as exc:
            raise _Lost(str(exc)) from None
        if not line:
            raise _Lost(self.status())
        try:
            reply = json.loads(line)
            if not isinstance(reply, dict) or not (
                {"ok", "text"} <= reply.keys() or "ready" in reply
            ):
                raise ValueError(reply)
            return reply
        except ValueError:
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
        if kill or not self.asked:  # an idle worker may still be importing: no need to wait
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
    """This process and worker processes taking jobs from one queue; one thread per worker
    feeds it. A worker takes a job only once it is ready, so that a batch this process
    finishes alone while the workers start costs nothing but their start."""

    def __init__(self, jobs: list, count: int, warm: tuple = ()):
        self.jobs = jobs
        self.pending = list(range(len(jobs)))  # job numbers not taken yet, taken from the front
        self.in_flight = 0  # jobs taken by workers and not answered
        self.lock = threading.Lock()
        self.replies: dict[int, tuple[bool, str]] = {}  # job number → (written, what)
        self.here: set[int] = set()  # the jobs this process compiled itself
        self.lost: list[tuple[_Worker, str]] = []
        self.changed = threading.Event()
        self.workers: list[_Worker] = []
        self.threads: list[threading.Thread] = []
        self.killed = False
        self.count = count
        self.warm = warm

    def _take(self) -> int | None:
        with self.lock:
            if not self.pending or self.killed:
                return None
            self.in_flight += 1
            return self.pending.pop(0)

    def run(self, what: str) -> None:
        for _ in range(self.count - 1):
            try:
                worker = _Worker(self.warm)
            except OSError as exc:  # no interpreter to start, or no processes left
                warnings.warn(
                    f"tessera: cannot start a compile worker for {what} ({exc}); compiling "
                    "in this process",
                    CompileWorkerWarning,
                    stacklevel=4,
                )
                break
            self.workers.append(worker)
            thread = threading.Thread(target=self._feed, args=(worker,), daemon=True)
            self.threads.append(thread)
            thread.start()
        while HERE:  # this process is a compiler too, while the workers start and run
            k = self._take()
            if k is None:
                break
            try:
                self.replies[k] = (True, self.jobs[k].compile_here())
                self.here.add(k)
            except Exception as exc:  # noqa: BLE001 - the launch compiles it again, and raises
                self.replies[k] = (False, f"{type(exc).__name__}: {_first_line(exc)}")
            finally:
                with self.lock:
                    self.in_flight -= 1
        answered, last = -1, time.monotonic()
        while any(t.is_alive() for t in self.threads):
            with self.lock:
                if not self.pending and not self.in_flight:
                    break  # every job answered; workers still starting are not waited for
                done = len(self.replies) + len(self.lost)
            if done != answered:
                answered, last = done, time.monotonic()
            elif time.monotonic() - last > STALL_S:
                self.killed = True
                warnings.warn(
                    f"tessera: the compile workers of {what} finished nothing in {STALL_S:.0f} "
                    "s; stopping them and compiling the rest in this process",
                    CompileWorkerWarning,
                    stacklevel=4,
                )
                return
            self.changed.wait(0.05)
            self.changed.clear()
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
            worker.ready()
            while (k := self._take()) is not None:
                try:
                    self.replies[k] = worker.ask(self.jobs[k])
                finally:
                    with self.lock:
                        self.in_flight -= 1
                if not self.replies[k][0]:
                    log.debug("compile worker output:\n%s", worker.stderr_tail())
        except _Lost as exc:
            if not self.killed:
                self.lost.append((worker, str(exc)))
        finally:
            self.changed.set()

    def unanswered(self) -> list:
        return [job for k, job in enumerate(self.jobs) if k not in self.replies]

    def stop(self) -> None:
        """Let every worker exit (kill those never asked, and all where the pool stalled
        or was interrupted)."""
        with self.lock:
            busy = self.in_flight > 0
            self.killed = True  # no thread takes another job
        for worker in self.workers:
            worker.stop(busy)
        for thread in self.threads:
            thread.join(timeout=5)


def serve() -> None:
    """A worker's main loop: warm up (Numba, then the functions the batch's jobs name), say
    it is ready, then run each job read from stdin and answer each with a JSON line
    ``{"ok", "text"}``; exit at end of input. Whatever the compile prints goes to stderr."""
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # stray prints must not garble the answers
    _warm_up()
    try:
        for warm_up in pickle.load(sys.stdin.buffer):
            warm_up()
    except EOFError:
        return
    except Exception:  # noqa: BLE001 - a job meets the same problem, and says so
        logging.getLogger("tessera").exception("compile worker warm-up failed")
    answers.write(json.dumps({"ready": True}) + "\n")
    answers.flush()
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


def _warm_up() -> None:
    """Numba's first compile of a process sets up its typing and target contexts (about
    half a second): done before the worker says it is ready, so that a job it takes is
    not slower than this process would compile it."""
    import numba

    numba.njit(lambda v: v + 1).compile((numba.int64,))


def _first_line(exc: Exception) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else ""
