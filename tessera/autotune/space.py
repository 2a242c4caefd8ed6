"""Search spaces and search strategies.

A space is the product of each parameter's candidate values, in the order written
(``dict(BM=[128, 256], stages=[2, 3])`` gives BM=128/stages=2, 128/3, 256/2, 256/3), so
"the earlier config" is well defined and ties are reproducible. ``prune`` trims it.

A *strategy* decides which configs are measured. It is any object with::

    def search(self, configs: list[Config], measure) -> None

that calls ``measure(config)`` for the configs it wants; ``measure`` returns the median
seconds of a valid config, or None if the config failed (its reason is recorded). The
tuner then picks the fastest measured config. A strategy that also has
``planned(configs) -> list[Config]``, the configs its search will measure, has them
compiled side by side before the first trial (``TESSERA_COMPILE_WORKERS``).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterable
from typing import Protocol

from ..errors import TesseraError


class Config:
    """One point of a space: ``c.BM``, ``c["BM"]``, ``dict(c)``."""

    __slots__ = ("_values",)

    def __init__(self, values: dict[str, object]):
        object.__setattr__(self, "_values", dict(values))

    def __getattr__(self, name: str) -> object:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"config has no parameter {name!r}") from None

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("a config is read-only")

    def __getitem__(self, name: str) -> object:
        return self._values[name]

    def keys(self):
        return self._values.keys()

    def items(self):
        return self._values.items()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Config) and other._values == self._values

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._values.items())))

    def __repr__(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self._values.items())


def expand(space: dict[str, Iterable[object]]) -> list[Config]:
    """Every config of ``space``, in space order."""
    if not space:
        raise TesseraError("an autotune space needs at least one parameter")
    names = list(space)
    values = [list(space[n]) for n in names]
    for name, options in zip(names, values):
        if not options:
            raise TesseraError(f"autotune parameter {name!r} has no candidate values")
        for v in options:
            if not isinstance(v, (bool, int, float)):
                raise TesseraError(
                    f"autotune parameter {name!r} value {v!r} is not an int, float or bool"
                )
    return [Config(dict(zip(names, combo))) for combo in itertools.product(*values)]


def prune(configs: list[Config], rule: Callable | None) -> list[Config]:
    """Apply ``prune=``: a predicate on one config, or a function of the whole list."""
    if rule is None:
        return configs
    try:
        kept = rule(configs)
    except (TypeError, AttributeError):
        kept = None
    if isinstance(kept, list):
        return [c for c in kept if c in configs]
    return [c for c in configs if rule(c)]


class Strategy(Protocol):
    def search(self, configs: list[Config], measure: Callable[[Config], float | None]) -> None: ...


class GridSearch:
    """Measure every config, in space order (the default)."""

    def search(self, configs, measure) -> None:
        for c in configs:
            measure(c)

    def planned(self, configs: list[Config]) -> list[Config]:
        """The configs :meth:`search` measures (compiled ahead, side by side)."""
        return list(configs)


class RandomSearch:
    """Measure ``budget`` configs drawn without replacement, with a fixed seed so a sweep
    is reproducible (then kept in space order, so ties still go to the earlier one)."""

    def __init__(self, budget: int, seed: int = 0):
        if budget < 1:
            raise TesseraError("strategy 'random' needs budget >= 1")
        self.budget = budget
        self.seed = seed

    def search(self, configs, measure) -> None:
        for c in self.planned(configs):
            measure(c)

    def planned(self, configs: list[Config]) -> list[Config]:
        """The configs :meth:`search` measures, in space order."""
        picked = random.Random(self.seed).sample(
            range(len(configs)), min(self.budget, len(configs))
        )
        return [configs[k] for k in sorted(picked)]


def make_strategy(strategy: object, budget: int | None) -> Strategy:
    if strategy in (None, "grid"):
        return GridSearch()
    if strategy == "random":
        if budget is None:
            raise TesseraError("strategy='random' needs budget=N (how many configs to try)")
        return RandomSearch(budget)
    if hasattr(strategy, "search"):
        return strategy
    raise TesseraError(
        f"strategy {strategy!r} is not 'grid', 'random' or an object with a search() method"
    )
