"""Fusion: the graph's nodes partitioned into groups, each of which becomes one kernel.

Nodes are visited in trace order and a node joins the group made last when it can (so a
group never waits on a later one, and the groups run in the order they were made):

* an elementwise node joins an elementwise group of its shape (chains, and siblings over
  the same elements, become one kernel), or a matmul group of its shape as an epilogue
  (bias, activation, scale, cast, residual: any input that broadcasts to the product's
  shape, loaded as a tile);
* a reduction takes the elementwise group that makes its input as a prologue, when
  nothing else reads those values;
* everything else starts a group of its own kind; a reshape is a view, no kernel.

A value leaves its group (is stored) when a node of another group or the graph's result
reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .declare import OPS
from .ir import Const, Graph, Node, Value


@dataclass(eq=False)
class Group:
    kind: str  # elementwise | matmul | reduce | softmax | transpose | reshape
    nodes: list[Node] = field(default_factory=list)
    outputs: list[Node] = field(default_factory=list)  # values stored for other readers
    shape: tuple[int, ...] = ()  # the shape every node of an elementwise/epilogue shares
    closed: bool = False

    @property
    def head(self) -> Node:
        """The node that gives the group its kind (the matmul, the reduction...)."""
        return self.nodes[0] if self.kind != "reduce" else self.nodes[-1]

    def inputs(self) -> list[Value]:
        """The values the group reads from outside (graph inputs or other groups)."""
        inside = set(self.nodes)
        seen: list[Value] = []
        for n in self.nodes:
            for v in n.inputs:
                if isinstance(v, Node) and v in inside:
                    continue
                if isinstance(v, Const) or any(v is s for s in seen):
                    continue
                seen.append(v)
        return seen

    def describe(self) -> str:
        ops = " → ".join(f"{n.op} {n.ref()}" for n in self.nodes)
        outs = ", ".join(n.ref() for n in self.outputs)
        return f"{self.kind}: {ops}  (stores {outs})"


def fuse(graph: Graph) -> list[Group]:
    users = graph.users()
    results = {id(v) for v in graph.outputs}
    group_of: dict[Node, Group] = {}
    groups: list[Group] = []

    def read_outside(n: Node) -> bool:
        return id(n) in results or any(group_of.get(u) is not group_of[n] for u in users[n])

    for n in graph.nodes:
        kind = OPS[n.op].kind
        last = groups[-1] if groups else None
        target = None
        if last is not None and not last.closed:
            if kind == "elementwise" and n.shape == last.shape:
                if last.kind == "elementwise" or (
                    last.kind == "matmul"
                    and n.op not in ("full", "expand", "dropout", "dropout_gen", "causal")
                    and not any(v.dtype is not None and v.dtype.kind == "c" for v in n.inputs)
                    and all(_tile_operand(v, n.shape) for v in n.inputs)
                ):
                    target = last
            elif kind == "reduce" and last.kind == "elementwise" and n.inputs[0] in last.nodes:
                if n.inputs[0].shape == last.shape and not any(
                    id(m) in results or any(u not in last.nodes and u is not n for u in users[m])
                    for m in last.nodes
                ):
                    target = last
                    last.kind, last.closed = "reduce", True
        if target is None:
            target = Group(kind, shape=n.shape, closed=kind not in ("elementwise", "matmul"))
            groups.append(target)
        target.nodes.append(n)
        group_of[n] = target
    for g in groups:
        g.outputs = [n for n in g.nodes if read_outside(n)]
    return groups


def _tile_operand(v: Value, shape: tuple[int, ...]) -> bool:
    """Whether an epilogue can load ``v`` as a tile beside a product of ``shape``."""
    return isinstance(v, Const) or epilogue_layout(v.shape, shape) is not None


def epilogue_layout(vshape: tuple[int, ...], shape: tuple[int, ...]) -> tuple[str, tuple] | None:
    """How an operand of ``vshape`` broadcasts over a (batch of) ``(M, N)`` product(s) of
    ``shape``: ``("full" | "row" | "col" | "one", its batch dims)``, or None when it is
    not one of those (then it is not fused)."""
    *batch, m, n = shape
    if len(vshape) > len(shape) or any(
        d not in (1, e) for d, e in zip(reversed(vshape), reversed(shape))
    ):
        return None
    tail = ((1,) * 2 + vshape)[-2:]
    vbatch = vshape[:-2]
    if tail == (m, n):
        return "full", vbatch
    if tail == (1, n) and n != 1:
        return "row", vbatch
    if tail == (m, 1) and m != 1:
        return "col", vbatch
    if tail == (1, 1):
        return "one", vbatch
    return None
