"""Graphs of ops (docs/ops.md): ``from tessera import graph``.

``@graph.module(name)`` traces a function of arrays once per signature, fuses its ops
into generated kernels and runs them; ``@graph.kernel`` does the same for a function
that assigns its results into arguments (``C[:] = ...``); ``graph.grad(f, argnums)``
and ``graph.value_and_grad`` differentiate a function of ops returning a scalar;
``with graph.stream(name):`` sends the launches inside to a named stream.
"""

from __future__ import annotations

from .kernel.stream_scope import stream
from .ops.module import Module, grad, module, value_and_grad
from .ops.module import graph_kernel as kernel

__all__ = ["Module", "grad", "kernel", "module", "stream", "value_and_grad"]
