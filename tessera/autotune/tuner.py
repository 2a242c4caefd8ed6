"""``@kernel.autotune``: sweep a space of compile-time parameters, safely.

Safe means: every ``mut`` argument is snapshotted before the sweep and restored before
each trial, every candidate's output is checked against the first valid candidate's (an
autotuner must never pick a config that computes something else), and after the sweep
the winner runs once on the original data — the caller sees exactly one launch's effect.
Winners are cached in memory and on disk (store.py); under MPI one rank decides and
broadcasts, so every rank launches the same config (world.py, with the collectives'
timeout and a check that every rank launches the same key).

Timing (docs/autotune.md): each trial restores the inputs, launches, and waits for the
launch to finish (``tessera.synchronize()``, which waits for CUDA work); repetitions run
until ``min_reps`` and a time budget are both met, or ``max_reps``; the median decides.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import warnings
from collections.abc import Callable, Iterator

from ..arrays import host_arrays
from ..config import get as setting
from ..dtypes import ShardedDim, Symbol
from ..errors import AutotuneError, CacheWarning, TesseraError
from ..kernel.kernel import Kernel
from ..kernel.source import enclosing_names, source_text_of
from ..observe.tracebacks import entry_point
from . import store
from .space import Config, expand, make_strategy, prune
from .sweep import Sweep
from .world import agree

log = logging.getLogger("tessera")


class Autotuned:
    """A kernel with a space of compile-time parameters. Launch it like a kernel; the
    grid may be a function of the config: ``k[lambda c: n // c.BM](...)``."""

    def __init__(
        self,
        fn,
        space,
        key,
        *,
        tile,
        shared,
        num_warps,
        prune_rule,
        strategy,
        budget,
        check,
        rtol,
        atol,
        scope,
        measure,
        target,
        flops,
    ):
        self.fn = fn
        self.name = fn.__name__
        self.enclosing = enclosing_names(fn)  # a factory's names, while its frame exists
        self.source = source_text_of(fn, "kernel")  # every config compiles this text
        self.configs = prune(expand(space), prune_rule)
        if not self.configs:
            raise AutotuneError(f"kernel '{self.name}': prune= removed every config")
        self.space = {k: list(v) for k, v in space.items()}
        self.key_names = list(key or [])
        self.tile, self.shared, self.num_warps = tile, shared, num_warps
        self.strategy = make_strategy(strategy, budget)
        self.check, self.rtol, self.atol = check, rtol, atol
        if scope not in ("world", "rank"):
            raise TesseraError(f"scope={scope!r} must be 'world' or 'rank'")
        self.scope = scope
        self.measure_hook = measure
        self.target = target
        self.flops = flops  # each config's kernel declares it: profiles show GFLOP/s
        self._kernels: dict[Config, Kernel | str] = {}
        self._winners: dict[str, Config] = {}
        self.last_table: list[dict] = []
        first = self.kernel_for(self.configs[0])
        if isinstance(first, str):  # the first config may fail; the signature is shared
            first = next(
                (k for k in map(self.kernel_for, self.configs) if not isinstance(k, str)), None
            )
        if first is None:
            raise AutotuneError(
                f"kernel '{self.name}': no config compiles:\n"
                + self._reasons({c: self._kernels[c] for c in self.configs})
            )
        self.params = first.params

    def __repr__(self) -> str:
        return f"<tessera.autotune {self.name} over {len(self.configs)} configs>"

    def __call__(self, *args: object) -> None:
        raise TesseraError(
            f"kernel '{self.name}' must be launched with a grid: {self.name}[grid](...)"
        )

    def __getitem__(self, grid) -> Callable[..., None]:
        return functools.partial(self.run, grid)

    @entry_point
    def run(self, grid, *args: object) -> None:
        """What ``k[grid](*args)`` calls: :meth:`launch`, an error leaving with the
        caller's frames only (tessera/tracebacks.py)."""
        self.launch(grid, args)

    # ------------------------------------------------------------------ configs
    def kernel_for(self, c: Config) -> Kernel | str:
        """The compiled-on-demand kernel of config ``c``, or why it cannot exist."""
        if c not in self._kernels:
            try:
                tile = self.tile(c) if callable(self.tile) else self.tile
                shared = self.shared(c) if callable(self.shared) else self.shared
                warps = self.num_warps(c) if callable(self.num_warps) else self.num_warps
                self._kernels[c] = Kernel(
                    self.fn,
                    tile=tile,
                    shared=shared,
                    num_warps=warps,
                    target=self.target,
                    flops=self.flops,
                    constants=dict(c.items()),
                    enclosing=self.enclosing,
                    source=self.source,
                )
            except TesseraError as exc:
                self._kernels[c] = f"does not compile: {_first_line(exc)}"
        return self._kernels[c]

    @staticmethod
    def grid_for(grid, c: Config):
        return grid(c) if callable(grid) else grid

    # ------------------------------------------------------------------ keys
    def key(self, args: tuple) -> dict:
        """What a cached winner is valid for (docs/autotune.md: source, space, key values,
        dtypes, target, device)."""
        symbols, dtypes = {}, {}
        for p, a in zip(self.params, args):
            if p.kind != "array":
                continue
            dtypes[p.name] = p.dtype.name
            for dim, extent in zip(p.dims, getattr(a, "shape", ())):
                sym = dim.symbol.name if isinstance(dim, ShardedDim) else getattr(dim, "name", None)
                if isinstance(dim, (Symbol, ShardedDim)) and sym not in symbols:
                    symbols[sym] = int(extent)
        values = {}
        for name in self.key_names:
            if name in symbols:
                values[name] = symbols[name]
            elif name in dtypes:
                values[name] = dtypes[name]
            else:
                raise TesseraError(
                    f"kernel '{self.name}': key {name!r} is neither a symbol "
                    f"of the signature ({', '.join(symbols)}) nor an array"
                )
        first = next(k for k in self._kernels.values() if isinstance(k, Kernel))
        target = first.target_for(args)
        return {
            "kernel": self.name,
            "source": first.ir.source_hash,
            "space": self.space,
            "key": values,
            "dtypes": dtypes,
            "target": target.name,
            "device": target.device_name(),
        }

    def best_config(self, *args: object) -> dict | None:
        """The cached winner for these arguments (memory, then disk), without tuning."""
        key = self.key(args)
        digest = store.key_digest(key)
        if digest in self._winners:
            return dict(self._winners[digest].items())
        config = self.stored_winner(store.load(self.name, key), "ignoring it")
        return None if config is None else dict(config.items())

    def stored_winner(self, entry: dict | None, instead: str) -> Config | None:
        """The config a cached entry names, if it is exactly one of this space's configs
        (same names, same values of the same types: ``128.0`` is not ``128``) and it
        compiles; else None, with a warning that says why and what is done ``instead``.
        A stale or edited entry is never launched."""
        if entry is None:
            return None
        stored = entry["config"]
        config = next((c for c in self.configs if _same_config(c, stored)), None)
        if config is None:
            why = "not a config of the current space"
        elif isinstance(self.kernel_for(config), str):
            why = self.kernel_for(config)
        else:
            return config
        warnings.warn(
            f"ignoring the autotune cache's winner {stored!r} for kernel '{self.name}': {why}; "
            f"{instead}",
            CacheWarning,
            stacklevel=4,
        )
        return None

    # ------------------------------------------------------------------ launch
    def launch(self, grid, args: tuple) -> None:
        key = self.key(args)
        digest = store.key_digest(key)
        winner = self._winners.get(digest)
        if winner is None:
            winner = agree(self.scope, lambda: self._decide(grid, args, key), key)
            self._winners[digest] = winner
        else:  # cached: a plain launch
            pass
        kernel = self.kernel_for(winner)
        kernel[self.grid_for(grid, winner)](*args)

    def _decide(self, grid, args: tuple, key: dict) -> Config:
        """The winner for ``key``: from the disk cache, else the first valid config when
        tuning is off, else a sweep. Leaves every argument as it found it."""
        mode = setting("autotune")
        entry = store.load(self.name, key) if mode != "retune" else None
        instead = "using the first config that compiles" if mode == "off" else "tuning again"
        config = self.stored_winner(entry, instead)
        if config is not None:
            log.info("autotune %s: %s, the cached winner", self.name, config)
            return config
        if mode == "off":
            first = next(c for c in self.configs if isinstance(self.kernel_for(c), Kernel))
            log.info(
                "autotune %s: %s, the first valid config (TESSERA_AUTOTUNE=off)", self.name, first
            )
            return first
        # PyTorch and JAX host tensors as their NumPy views: what the sweep snapshots
        sweep = Sweep(self, grid, host_arrays(self.name, self.params, args))
        winner = sweep.run()
        log.info("autotune %s: %s won a sweep of %d configs", self.name, winner, len(sweep.table))
        self.last_table = sweep.table
        for found in _collectors:
            found.append({"kernel": self.name, "key": key["key"], "table": sweep.table})
        store.save(self.name, key, dict(winner.items()), sweep.table)
        return winner

    @staticmethod
    def _reasons(failures: dict) -> str:
        return "\n".join(f"  {c}: {why}" for c, why in failures.items())


_collectors: list[list[dict]] = []


@contextlib.contextmanager
def collecting_sweeps() -> Iterator[list[dict]]:
    """A list to which every sweep of this process appends ``{"kernel", "key", "table"}``
    (its ``key`` values and its table) while the block runs; ``tessera tune --plot``
    draws them."""
    found: list[dict] = []
    _collectors.append(found)
    try:
        yield found
    finally:
        _collectors.remove(found)


def _same_config(config: Config, stored: dict) -> bool:
    """Whether ``stored`` (from a file) names exactly ``config``, types included."""
    return stored.keys() == config.keys() and all(
        type(stored[name]) is type(value) and stored[name] == value
        for name, value in config.items()
    )


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0]
