"""One autotune sweep: snapshot, trials, output checks, timing, the table and the winner.

The sweep owns the caller's ``mut`` arguments while it runs: it copies them first,
restores them before every trial launch, compares each config's outputs with the first
valid config's, and restores them once more at the end (the tuner then launches the
winner on the original data).
"""

from __future__ import annotations

import sys

import numpy as np

from ..config import get as setting
from ..errors import AutotuneError, TesseraError
from ..kernel import compile_pool
from ..kernel.kernel import Kernel
from ..observe.failures import expected
from ..observe.observers import stage
from ..observe.stats import bump
from .space import Config
from .timing import median, outputs_agree, progress, time_launches

NOISE = 0.05  # a runner-up this close (relative median) is flagged as a tie within noise


class Sweep:
    def __init__(self, tuner, grid, args: tuple):
        self.tuner = tuner
        self.grid = grid
        self.args = args
        self.mut = [a for p, a in zip(tuner.params, args) if p.kind == "array" and p.mutable]
        self.snapshot = [_copy(a) for a in self.mut]
        self.reference: list | None = None  # the first valid config's outputs
        self.results: dict[Config, tuple] = {}  # config → (median, times) of valid ones
        self.failures: dict[Config, str] = {}
        self.table: list[dict] = []
        self.tried = 0

    def timed_with_events(self, kernel: Kernel) -> bool:
        """Whether trials run asynchronously (a real GPU): then events time them."""
        return kernel.target_for(self.args).timed_with_events()

    def restore(self) -> None:
        for a, saved in zip(self.mut, self.snapshot):
            _put(a, saved)

    def measure(self, c: Config) -> float | None:
        """Run config ``c``'s trials; its median seconds, or None (reason recorded)."""
        t = self.tuner
        self.tried += 1
        progress(t.name, self.tried, len(t.configs))
        kernel = t.kernel_for(c)
        if not isinstance(kernel, Kernel):
            self.failures[c] = kernel
            return None
        launch = kernel[t.grid_for(self.grid, c)]

        def run() -> None:
            launch(*self.args)
            bump("autotune_trials")

        try:
            self.restore()
            with expected():  # a config that fails is a row of the table, not a crash
                run()  # the first launch compiles, and its outputs are checked
            outputs = [_host(a) for a in self.mut]
            if t.check and self.reference is not None:
                why = outputs_agree(self.reference, outputs, t.rtol, t.atol)
                if why is not None:
                    self.failures[c] = f"gives a different result than {self.first}: {why}"
                    return None
            if self.reference is None:
                self.reference, self.first = outputs, c
            with stage("autotune trial", t.name, config=dict(c.items())) as fields:
                if t.measure_hook is not None:
                    times = list(t.measure_hook(run, c))
                else:
                    events = self.timed_with_events(kernel)
                    times = time_launches(run, self.restore, events=events)
                fields.update(median_s=median(times), reps=len(times))
        except TesseraError as exc:
            self.failures[c] = f"fails: {str(exc).splitlines()[0]}"
            return None
        finally:
            self.restore()
        self.results[c] = (median(times), times)
        return self.results[c][0]

    def compile_ahead(self) -> None:
        """Compile the configs the strategy will measure side by side (this process and
        worker processes: kernel/compile_pool.py, ``TESSERA_COMPILE_WORKERS``) before the
        first trial, so that no trial shares the cores with a compile. Only a head start:
        a config it cannot prepare, or that fails to compile, compiles at its first trial
        as it would without workers, and raises there what it would raise."""
        t = self.tuner
        planned = getattr(t.strategy, "planned", None)
        configs = planned(t.configs) if planned is not None else []
        if len(configs) < 2 or compile_pool.workers() < 2:
            return
        jobs = []
        for c in configs:
            kernel = t.kernel_for(c)
            if not isinstance(kernel, Kernel):
                continue
            try:
                jobs += kernel.compile_jobs(t.grid_for(self.grid, c), self.args)
            except Exception:  # noqa: BLE001 - its trial meets it again, and reports it
                continue
        compile_pool.compile_all(jobs, f"kernel '{t.name}'")

    def run(self) -> Config:
        t = self.tuner
        self.compile_ahead()
        try:
            t.strategy.search(t.configs, self.measure)
        finally:
            self.restore()
        if not self.results:
            raise AutotuneError(
                f"kernel '{t.name}': every config failed:\n" + t._reasons(self.failures)
                if self.failures
                else f"kernel '{t.name}': the strategy measured no config"
            )
        order = {c: k for k, c in enumerate(t.configs)}
        winner = min(self.results, key=lambda c: (self.results[c][0], order[c]))
        self.table = self._table(winner)
        if setting("autotune_verbose") == "1":
            self.report(winner)
        return winner

    def _table(self, winner: Config) -> list[dict]:
        rows = []
        for c in self.tuner.configs:
            row = {"config": dict(c.items())}
            if c in self.results:
                med, times = self.results[c]
                row.update(
                    median_s=med,
                    min_s=min(times),
                    max_s=max(times),
                    reps=len(times),
                    status="winner" if c == winner else "ok",
                )
            elif c in self.failures:
                row.update(status=self.failures[c])
            else:
                row.update(status="not measured")
            rows.append(row)
        return rows

    def report(self, winner: Config, out=None) -> None:
        """The table of every config with its time; flags a winner within noise."""
        out = out or sys.stderr
        out.write(f"autotune {self.tuner.name}:\n")
        for row in self.table:
            config = ", ".join(f"{k}={v}" for k, v in row["config"].items())
            if "median_s" in row:
                mark = "  <- winner" if row["status"] == "winner" else ""
                out.write(
                    f"  {config:<28} {row['median_s'] * 1e3:9.3f} ms "
                    f"(min {row['min_s'] * 1e3:.3f}, {row['reps']} reps){mark}\n"
                )
            else:
                out.write(f"  {config:<28} {row['status']}\n")
        ranked = sorted(self.results.values(), key=lambda r: r[0])
        if len(ranked) > 1 and ranked[1][0] <= ranked[0][0] * (1 + NOISE):
            out.write(
                f"  note: the runner-up is within {NOISE:.0%} of the winner: the choice "
                "is within measurement noise\n"
            )
        out.flush()


def _copy(a):
    if isinstance(a, np.ndarray):
        return a.copy()
    if hasattr(a, "copy_to_host"):  # a numba-cuda device array
        return a.copy_to_host()
    return a.copy()


def _put(a, saved) -> None:
    if isinstance(a, np.ndarray):
        a[...] = saved
    elif hasattr(a, "copy_to_device"):
        a.copy_to_device(saved)
    else:
        a[...] = saved


def _host(a) -> np.ndarray:
    if isinstance(a, np.ndarray):
        return a.copy()
    if hasattr(a, "copy_to_host"):
        return a.copy_to_host()
    return np.asarray(a.get() if hasattr(a, "get") else a).copy()
