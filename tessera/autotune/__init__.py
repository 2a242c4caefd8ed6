"""Autotuning (``@kernel.autotune``): see docs/autotune.md.

@kernel.autotune(space=dict(BM=[128, 256], stages=[2, 3]), key=["m"],
                 tile=lambda c: (c.BM,), shared=lambda c: 2 * c.BM * 2)
def axpy_tiled(X: f16[m], Y: mut[f16[m]], alpha: f16):
    ...                                  # BM and stages are constants in the body

axpy_tiled[lambda c: -(-m // c.BM)](X, Y, 0.5)
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import AutotuneError
from ..observe.tracebacks import entry_point
from .space import Config, GridSearch, RandomSearch
from .tuner import Autotuned


def autotune(
    space: dict,
    key: list[str] | None = None,
    *,
    tile=None,
    shared=None,
    num_warps=None,
    prune: Callable | None = None,
    strategy: object = "grid",
    budget: int | None = None,
    check: bool = True,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    scope: str = "world",
    measure: Callable | None = None,
    target: str | None = None,
    flops: Callable[..., float] | None = None,
) -> Callable[[Callable], Autotuned]:
    """Declare a kernel tuned over ``space`` (see docs/autotune.md for every option).

    ``tile``/``shared``/``num_warps`` may be functions of the config; ``check`` compares
    each config's outputs with the first valid one's (exact for integers, ``rtol``/``atol``
    for floats);
    ``measure(run, config) -> list of seconds`` replaces the default timing; ``flops``
    is every config's ``@kernel(flops=...)``, so profiles and metrics show GFLOP/s.
    """

    options = dict(
        tile=tile,
        shared=shared,
        num_warps=num_warps,
        prune_rule=prune,
        strategy=strategy,
        budget=budget,
        check=check,
        rtol=rtol,
        atol=atol,
        scope=scope,
        measure=measure,
        target=target,
        flops=flops,
    )

    @entry_point
    def wrap(fn: Callable) -> Autotuned:
        return Autotuned(fn, space, key, **options)

    return wrap


__all__ = ["AutotuneError", "Autotuned", "Config", "GridSearch", "RandomSearch", "autotune"]
