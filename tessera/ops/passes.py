"""The operator layer's pass list, in order, each a named stage (``TESSERA_DUMP=graph,
fused,kernels`` writes them; ``module.graph(...)`` prints them):

* ``graph``: canonicalise — a transpose read only by matmuls becomes the matmul's
  ``trans_a``/``trans_b`` (the tile loads read the block transposed); ``softmax(q @ k.T
  [* c]) @ v`` becomes one ``attention`` node (a flash-attention kernel); nodes no output
  needs are dropped;
  where the arrays live on a GPU, an ``attention`` node whose query groups alone would
  leave the GPU's SMs idle becomes an ``attention_split`` over shares of the keys and an
  ``attention_combine`` of the shares (:func:`split_keys`);
* ``fused``: fuse.py's groups;
* ``kernels``: codegen.py's sources, defined as kernels (generated.py).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from .. import dtypes as D
from ..kernel import stages
from . import attention_code, codegen, generated
from .fuse import Group, fuse
from .ir import Const, Graph, Node

STAGES = ("graph", "fused", "kernels")
# groups without a generated kernel (the transforms run fft_core.py's kernels)
VIEWS = ("reshape", "launch", "launch_result", "collective", "fft")
stages.EXTRA_STAGES.extend(s for s in STAGES if s not in stages.EXTRA_STAGES)
_dumped = itertools.count(1)


# each group kind's code generator
LOWER = {
    "elementwise": codegen.elementwise,
    "reduce": codegen.reduce,
    "softmax": codegen.softmax,
    "cross_entropy": codegen.cross_entropy,
    "transpose": codegen.transpose,
    "norm": codegen.norm,
    "matmul": codegen.matmul,
    "attention": attention_code.attention,
    "attention_split": attention_code.attention_split,
    "attention_combine": attention_code.attention_combine,
    "attention_lse": attention_code.attention_lse,
    "attention_grad": attention_code.attention_grad,
}


@dataclass
class Lowered:
    graph: Graph
    groups: list[Group]
    sources: list[codegen.Source | None]  # None: a group without a kernel (a view)
    kernels: list  # the Kernel of each source (or None)
    calls: list | None = None  # how plan.py launches each group, worked out on first run

    def text(self) -> str:
        out = [str(self.graph), "", "fused groups:"]
        for i, g in enumerate(self.groups):
            made = f" -> kernel {self.sources[i].name}" if self.sources[i] else " (a view)"
            if g.kind == "fft":
                made = " -> the transform's kernels (fft_core.py)"
            out.append(f"  [{i}] {g.describe()}{made}")
        return "\n".join(out)


def canonicalise(graph: Graph) -> Graph:
    for n in graph.nodes:
        if n.op != "matmul":
            continue
        for side, operand in (("trans_a", 0), ("trans_b", 1)):
            v = n.inputs[operand]
            if isinstance(v, Node) and v.op == "transpose":
                inputs = list(n.inputs)
                inputs[operand] = v.inputs[0]
                n.inputs = tuple(inputs)
                n.attrs[side] = True
    _fold_attention(graph)
    needed: set[int] = set()
    work = [v for v in graph.outputs if isinstance(v, Node)]
    while work:
        n = work.pop()
        if id(n) not in needed:
            needed.add(id(n))
            work.extend(v for v in n.inputs if isinstance(v, Node))
    graph.nodes = [n for n in graph.nodes if id(n) in needed]
    return graph


def _fold_attention(graph: Graph) -> None:
    """``matmul(softmax(matmul(q, k.T) [* c]), v)`` → one ``attention`` node (a flash-
    attention kernel: the scores are never stored), when nothing else reads the scores
    or the probabilities."""
    users = graph.users()
    results = {id(v) for v in graph.outputs}

    def only_for(n: Node, reader: Node) -> bool:
        return id(n) not in results and users[n] == [reader]

    for n in graph.nodes:
        if n.op != "matmul" or n.attrs.get("trans_a") or n.attrs.get("trans_b"):
            continue
        p, v = n.inputs
        if not (isinstance(p, Node) and p.op == "softmax" and only_for(p, n)):
            continue
        s, scale = p.inputs[0], 1.0
        if isinstance(s, Node) and s.op == "mul" and only_for(s, p):
            consts = [c for c in s.inputs if isinstance(c, Const)]
            if len(consts) != 1:
                continue
            scale = float(consts[0].value)
            (s,) = [x for x in s.inputs if not isinstance(x, Const)]
        if not (isinstance(s, Node) and s.op == "matmul" and s.attrs.get("trans_b")):
            continue
        if s.attrs.get("trans_a") or id(s) in results or len(users[s]) != 1:
            continue
        q, k = s.inputs
        if any(len(x.shape) != 2 for x in (q, k, v)):
            continue
        if v.dtype != q.dtype or k.dtype != q.dtype or q.shape[1] > 128 or v.shape[1] > 128:
            continue
        if q.dtype.itemsize > 4:  # f64 attention stays three ops in f64 (no flash kernel)
            continue
        n.op, n.inputs, n.attrs = "attention", (q, k, v), {"scale": scale, "causal": False}


def split_keys(graph: Graph) -> None:
    """Each ``attention`` node that ``attention_code.key_splits`` splits becomes two: the
    keys' shares (``attention_split``, f32 results and log-sum-exps) and their combination
    (``attention_combine``, which takes the node's place for its readers)."""
    for n in list(graph.nodes):
        if n.op != "attention":
            continue
        q, k, v = n.inputs
        plan = attention_code.split_plan(q.shape[0], k.shape[0], n.attrs.get("causal", False))
        if plan is None:
            continue
        splits, bm, share, padded = plan
        attrs = {**n.attrs, "splits": splits, "rows": bm, "share": share}
        split = Node(
            "attention_split", (q, k, v), attrs, (2 * splits * padded, v.shape[1]), D.f32, n.loc
        )
        split.number = max(x.number for x in graph.nodes) + 1  # (no other node's number)
        n.op, n.inputs, n.attrs = "attention_combine", (split,), {}
        graph.nodes.insert(graph.nodes.index(n), split)


# kinds whose kernels are shaped for where the arrays live (a ``device`` keyword)
DEVICE_SHAPED = ("attention", "matmul", "softmax", "norm", "cross_entropy")


def lower(graph: Graph, device: bool = False) -> Lowered:
    """Run the passes; dump the stages ``TESSERA_DUMP`` names. ``device``: the arrays
    live on a GPU (some kinds choose their blocks for it: ``DEVICE_SHAPED``)."""
    requested = [s for s in stages.named_dumps() if s in STAGES]
    graph = canonicalise(graph)
    if device:
        split_keys(graph)
    groups = fuse(graph)
    sources: list[codegen.Source | None] = []
    for i, g in enumerate(groups):
        if g.kind in VIEWS:
            sources.append(None)
            continue
        name = f"{_identifier(graph.name)}_{i}_{g.kind}"
        shaped = {"device": device} if g.kind in DEVICE_SHAPED else {}
        sources.append(LOWER[g.kind](g, name, **shaped))
    kernels = [generated.define(s) if s is not None else None for s in sources]
    lowered = Lowered(graph, groups, sources, kernels)
    if requested:
        number = next(_dumped)
        texts = {
            "graph": str(graph),
            "fused": lowered.text(),
            "kernels": "\n".join(s.text for s in sources if s is not None),
        }
        for stage in requested:
            stages.write(_identifier(graph.name), number, stage, texts[stage])
    return lowered


def _identifier(name: str) -> str:
    out = "".join(c if c.isalnum() else "_" for c in name)
    return out if out and not out[0].isdigit() else "g_" + out
