"""``tessera.kernel``: the decorator users write, ``@kernel`` and ``@kernel.autotune``.

The kernel compiler must not know about the autotuner (it sits below it), so the one
public decorator that offers both is defined here, above the two, as a small object with
a method for each spelling rather than an attribute patched onto a function.
"""

from __future__ import annotations

from .autotune import autotune as _autotune
from .kernel import kernel as kernel_module
from .observe.tracebacks import entry_point


class KernelDecorator:
    """``@kernel``, ``@kernel(tile=..., shared=..., target=..., boundscheck=...)`` and
    ``@kernel.autotune(space=..., ...)`` (docs/language.md, docs/autotune.md)."""

    @entry_point
    def __call__(self, *args: object, **options: object):
        """Declare a kernel: ``@kernel`` (flat) or ``@kernel(tile=(128,), shared=8 * KiB)``;
        see :func:`tessera.kernel.kernel.kernel`."""
        return kernel_module.kernel(*args, **options)

    @staticmethod
    def autotune(space: dict, key: list[str] | None = None, **options: object):
        """Declare a kernel tuned over ``space``; see :func:`tessera.autotune.autotune`."""
        return _autotune(space, key, **options)

    def __repr__(self) -> str:
        return "<tessera.kernel decorator>"


kernel = KernelDecorator()
