"""The graph IR: inputs, constants and op nodes in topological order, each with a static
shape and dtype and the user's source line that made it."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..dtypes import DType
from ..errors import SourceLoc


@dataclass(eq=False)
class Input:
    """An argument of the traced function (an array at run time)."""

    index: int
    name: str
    shape: tuple[int, ...]
    dtype: DType

    def ref(self) -> str:
        return self.name


@dataclass(eq=False)
class Const:
    """A Python number in an expression: it takes the dtype of the tensor it meets."""

    value: float | int
    shape: tuple[int, ...] = ()
    dtype: DType | None = None

    def ref(self) -> str:
        return repr(self.value)


@dataclass(eq=False)
class Node:
    """One op applied to values: ``op`` names its declaration (declare.py)."""

    op: str
    inputs: tuple[Value, ...]
    attrs: dict
    shape: tuple[int, ...]
    dtype: DType
    loc: SourceLoc | None
    number: int = 0

    def ref(self) -> str:
        return f"%{self.number}"


Value = Input | Const | Node


@dataclass(eq=False)
class Graph:
    """A traced function: its inputs, nodes (topological), outputs and, for a
    ``@graph.kernel``, which input each output is written into."""

    name: str
    inputs: list[Input]
    nodes: list[Node] = field(default_factory=list)
    outputs: list[Value] = field(default_factory=list)
    written: dict[int, int] = field(default_factory=dict)  # output index → input index
    returns_tuple: bool = False  # the traced function returned a tuple of results
    captured: list = field(default_factory=list)  # arrays read from outside: the last inputs
    after: list = field(default_factory=list)  # host steps after every run (a Generator's advance)
    draws: dict = field(default_factory=dict)  # id(Generator) → the numbers one run draws

    def add(self, node: Node) -> Node:
        node.number = len(self.nodes)
        self.nodes.append(node)
        return node

    def users(self) -> dict[Node, list[Node]]:
        """Each node's consumers (nodes only; outputs are separate)."""
        out: dict[Node, list[Node]] = {n: [] for n in self.nodes}
        for n in self.nodes:
            for v in n.inputs:
                if isinstance(v, Node) and n not in out[v]:
                    out[v].append(n)
        return out

    def __str__(self) -> str:
        lines = [f"graph {self.name}(" + ", ".join(_typed(i) for i in self.inputs) + ")"]
        for n in self.nodes:
            args = ", ".join(v.ref() for v in n.inputs)
            attrs = "".join(f", {k}={v!r}" for k, v in n.attrs.items())
            where = f"  # {n.loc.file.rsplit('/', 1)[-1]}:{n.loc.line}" if n.loc else ""
            lines.append(f"  {n.ref()} = {n.op}({args}{attrs}) : {_type(n)}{where}")
        outs = ", ".join(v.ref() for v in self.outputs)
        lines.append(f"  return {outs}")
        for o, i in self.written.items():
            lines.append(f"  # output {o} is written into {self.inputs[i].name}")
        return "\n".join(lines)


def _type(v) -> str:
    return f"{v.dtype.name}[{', '.join(map(str, v.shape))}]"


def _typed(i: Input) -> str:
    return f"{i.name}: {_type(i)}"
