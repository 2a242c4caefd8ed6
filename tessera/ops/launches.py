"""``@kernel`` launches inside a traced function (``tessera.jit``, ``@graph.module``).

``k[grid](x, y)`` on traced tensors records a ``launch`` node instead of running: its
inputs are the tensors of the kernel's array parameters, its attributes the kernel, the
grid and the scalar arguments. A ``mut`` parameter is written, so the launch writes into a
``copy`` of the tensor passed (an elementwise node: it fuses with the op that made the
tensor, and is a kernel of its own only where the tensor is an argument or read again),
and a ``launch_result`` node stands for the written array from then on: the Python tensor
passed is rebound to it, as the array passed to an eager launch holds the kernel's
writes. A tensor that is an argument of the traced function is written back into the
caller's array (as ``x[:] = ...`` is), where the function may write it.

At run time (plan.py) the launch runs the kernel on the buffers of its inputs; replays of
a captured step (capture/) repeat it with the other recorded launches.
"""

from __future__ import annotations

import numbers

import numpy as np

from ..kernel import launch as kernel_launch
from .ir import Node
from .tensor import Tensor, current, user_loc


def record(kernel, grid: tuple[int, ...], args: tuple) -> bool:
    """Record ``kernel[grid](*args)`` into the graph being traced when an argument is one
    of its tensors (True); False when none is (the launch runs as usual)."""
    tensors = [a for a in args if isinstance(a, Tensor)]
    if not tensors:
        return False
    tracer = tensors[0].tracer
    if current() is not tracer or any(t.tracer is not tracer for t in tensors):
        raise tracer.fail(
            "launch", f"kernel '{kernel.name}' gets a tensor of another traced function"
        )
    params = kernel.params
    if len(args) > len(params):
        raise tracer.fail(
            "launch", f"kernel '{kernel.name}' takes {len(params)} arguments, got {len(args)}"
        )
    values, layout, writes = [], [], []
    copies: dict[int, object] = {}  # a tensor passed to a mut parameter: its copy
    for param, arg in zip(params, args):
        if param.kind == "array" and param.mutable and isinstance(arg, Tensor):
            if id(arg.value) not in copies:
                copies[id(arg.value)] = tracer.record("copy", [Tensor(tracer, arg.value)], {})
    for param, arg in zip(params, args):
        if param.kind == "array":
            if isinstance(arg, Tensor):  # one also passed to a mut parameter: its copy, as
                # an eager launch's parameters alias when given one array twice
                value = copies[id(arg.value)].value if id(arg.value) in copies else arg.value
            elif isinstance(arg, np.ndarray) and not param.mutable:
                value = tracer.capture("launch", arg)
            elif isinstance(arg, np.ndarray):
                raise tracer.fail(
                    "launch",
                    f"kernel '{kernel.name}' writes its parameter '{param.name}' (mut): pass "
                    "a tensor of the traced function (an argument, or a value it computed), "
                    "not an array from outside it",
                )
            else:
                raise tracer.fail(
                    "launch",
                    f"kernel '{kernel.name}': parameter '{param.name}' takes an array, "
                    f"got {type(arg).__name__}",
                )
            if param.mutable:
                writes.append((len(values), arg))
            layout.append(("array", len(values)))
            values.append(value)
        elif isinstance(arg, Tensor):
            raise tracer.fail(
                "launch",
                f"kernel '{kernel.name}': parameter '{param.name}' is a {param.kind}; a traced "
                "tensor's value is not known when the function is traced (pass a number)",
            )
        elif isinstance(arg, (numbers.Number, np.generic, str)) or param.kind == "constexpr":
            layout.append(("value", arg))
        else:
            raise tracer.fail(
                "launch",
                f"kernel '{kernel.name}': parameter '{param.name}' takes a number, "
                f"got {type(arg).__name__}",
            )
    attrs = {"kernel": kernel, "grid": grid, "layout": tuple(layout)}
    node = tracer.graph.add(Node("launch", tuple(values), attrs, (), values[0].dtype, user_loc()))
    for index, arg in writes:
        source = values[index]
        result = Node(
            "launch_result", (node,), {"index": index}, source.shape, source.dtype, node.loc
        )
        written = Tensor(tracer, tracer.graph.add(result))
        target = getattr(arg, "argument", None)
        if target is None and arg.value in tracer.graph.inputs:
            target = arg.value
        if target is not None:
            arg[:] = written  # into the caller's array, as an eager launch writes it
        else:
            arg.value = written.value
    return True


def run(node: Node, env: dict) -> None:
    """Launch a recorded kernel on its inputs' buffers (``env``: value id → array)."""
    arrays = [env[id(v)] for v in node.inputs]
    args = [arrays[item] if kind == "array" else item for kind, item in node.attrs["layout"]]
    node.attrs["kernel"][node.attrs["grid"]](*args)


def result(node: Node, env: dict) -> None:
    """A launch's written array: the buffer of the copy it wrote into."""
    launch = node.inputs[0]
    env[id(node)] = env[id(launch.inputs[node.attrs["index"]])]


kernel_launch.TRACED_LAUNCHES.append(record)
