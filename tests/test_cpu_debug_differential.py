"""The CPU target against the debug target on generated grouped kernels, bit for bit.

The CPU target cuts a grouped kernel into lane loops between collectives (region
formation) and keeps a lane's values in per-lane slots only where they cross regions;
the debug target runs every lane as a program of its own. Hypothesis writes small
kernels as source text that stress the difference: names reused for unrelated values in
different regions, uniform loops (``for i in range(2)``), lane-dependent loops, loops
whose counter lanes also hold, ``while``, ``break`` and ``continue``, ``if`` on the lane,
two shared arrays across ``tbarrier()`` and ``tile.sum``.

All arithmetic is on i64 (exact, wrapping alike on both targets) and every shared access
is race-free by construction: in each barrier epoch a lane writes only its own slots of
one array and reads the other anywhere. So the debug target's checks pass and the two
targets must agree exactly. Every index is reduced modulo its extent, even where the
value is known to be in range, so that a miscompiled counter gives a wrong answer, not a
crash.
"""

from __future__ import annotations

import hashlib
import importlib.util

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tessera

NAMES = ("a", "b", "i", "j")  # every variable a generated kernel assigns: all reused
SLOTS = 2  # slots each lane owns in each shared array
GROUPS = 2
N = 7  # length of the input x
OUT = len(NAMES) + 2 * SLOTS  # per lane: the variables, then its slots of s0 and s1

HEADER = """\
from __future__ import annotations

from tessera import group_linear_id, group_tile_count, i64, kernel, mut, tbarrier, tile
from tessera import tshared


@kernel(tile={tile})
def gen(x: i64[n], out: mut[i64[grid_groups, {lanes}, {out}]]):
    lane = tile.linear_id()
    g = group_linear_id()
    s0 = tshared.alloc[i64]({size})
    s1 = tshared.alloc[i64]({size})
    a = lane
    b = g + 1
    i = 0
    j = lane % 2
    for i in range({slots}):
        s0[lane + {lanes} * (i % {slots})] = x[(lane + i) % n]
        s1[lane + {lanes} * (i % {slots})] = lane * i + g
    tbarrier()
"""

FOOTER = """\
    out[g, lane, 0] = a
    out[g, lane, 1] = b
    out[g, lane, 2] = i
    out[g, lane, 3] = j
    for i in range({slots}):
        out[g, lane, 4 + i % {slots}] = s0[lane + {lanes} * (i % {slots})]
        out[g, lane, {slots} + 4 + i % {slots}] = s1[lane + {lanes} * (i % {slots})]
"""


class _Writer:
    """Draws one kernel's body. ``w`` is the array the current epoch writes (own slots
    only), ``r`` the one it reads; ``loop`` is the innermost generated loop's kind
    (``break`` and ``continue`` leave it; a ``while`` takes no ``continue``, which would
    skip its increment); ``fixed`` holds the counters of enclosing ``while`` loops."""

    def __init__(self, draw, lanes: int):
        self.draw = draw
        self.lanes = lanes
        self.lines: list[str] = []

    def pick(self, options):
        return self.draw(st.sampled_from(options))

    def number(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))

    def emit(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    # ------------------------------------------------------------------ expressions
    def expr(self, w: str, r: str, depth: int = 2) -> str:
        leaves = ("const", "lane", "group", "name", "name")
        kind = self.pick(leaves if depth == 0 else leaves + ("op", "scale", "mod", "load"))
        if kind == "const":
            return str(self.number(0, 5))
        if kind == "lane":
            return "lane"
        if kind == "group":
            return "g"
        if kind == "name":
            return self.pick(NAMES)
        sub = self.expr(w, r, depth - 1)
        if kind == "op":
            return f"({sub} {self.pick(('+', '-', '^'))} {self.expr(w, r, depth - 1)})"
        if kind == "scale":
            return f"({sub} * {self.number(2, 3)})"
        if kind == "mod":
            return f"({sub} % {self.number(2, 5)})"
        array = self.pick(("x", "r", "w"))
        if array == "x":
            return f"x[{sub} % n]"
        if array == "r":
            return f"{r}[{sub} % {self.lanes * SLOTS}]"
        return self.own(w, sub)

    def own(self, w: str, sub: str) -> str:
        return f"{w}[lane + {self.lanes} * ({sub} % {SLOTS})]"

    def cond(self, w: str, r: str) -> str:
        return self.pick(
            (
                f"lane % 2 == {self.number(0, 1)}",
                f"lane < {self.number(1, self.lanes - 1)}",
                "g == 0",
                f"{self.expr(w, r, 1)} % 3 == 0",
            )
        )

    # ------------------------------------------------------------------ statements
    def block(self, depth, w, r, loop=None, fixed=(), nest=0) -> None:
        for _ in range(self.number(1, 3)):
            self.stmt(depth, w, r, loop, fixed, nest)

    def target(self, fixed) -> str:
        return self.pick([n for n in NAMES if n not in fixed])

    def stmt(self, depth, w, r, loop, fixed, nest) -> None:
        kinds = ["assign", "assign", "add", "store"]
        if nest < 2:
            kinds += ["if", "uniform_for", "lane_for", "strided_for", "while"]
        if loop is not None:
            kinds.append("leave")
        kind = self.pick(kinds)
        if kind in ("assign", "add"):
            op = "=" if kind == "assign" else "+="
            self.emit(depth, f"{self.target(fixed)} {op} {self.expr(w, r)}")
        elif kind == "store":
            self.emit(depth, f"{self.own(w, self.expr(w, r, 1))} = {self.expr(w, r)}")
        elif kind == "if":
            self.emit(depth, f"if {self.cond(w, r)}:")
            self.block(depth + 1, w, r, loop, fixed, nest + 1)
            if self.draw(st.booleans()):
                self.emit(depth, "else:")
                self.block(depth + 1, w, r, loop, fixed, nest + 1)
        elif kind == "leave":
            leave = "break" if loop == "while" else self.pick(("break", "continue"))
            self.emit(depth, f"if {self.cond(w, r)}:")
            self.emit(depth + 1, leave)
        elif kind == "while":
            v = self.target(fixed)
            self.emit(depth, f"{v} = {self.expr(w, r, 1)} % 3")
            self.emit(depth, f"while {v} < 3:")
            self.block(depth + 1, w, r, "while", (*fixed, v), nest + 1)
            self.emit(depth + 1, f"{v} += 1")
        else:
            bounds = {
                "uniform_for": str(self.number(1, 3)),
                "lane_for": self.pick(("lane % 3", f"{self.expr(w, r, 1)} % 3")),
                "strided_for": f"lane + {self.number(0, 2)}, 9, group_tile_count()",
            }[kind]
            self.emit(depth, f"for {self.target(fixed)} in range({bounds}):")
            self.block(depth + 1, w, r, "for", fixed, nest + 1)

    def epoch(self, depth: int, phase: int) -> None:
        """Statements between two barriers, then the barrier; maybe a ``tile.sum``
        first (a collective: only where every lane is)."""
        w, r = ("s0", "s1") if phase % 2 == 0 else ("s1", "s0")
        if self.draw(st.booleans()):
            self.emit(depth, f"{self.target(())} = tile.sum({self.expr(w, r)})")
        self.block(depth, w, r)
        self.emit(depth, "tbarrier()")

    def phases(self) -> None:
        phase = 0
        for _ in range(self.number(1, 3)):
            if self.draw(st.booleans()):  # a uniform loop with barriers in its body
                self.emit(1, f"for {self.target(())} in range({self.number(1, 2)}):")
                self.epoch(2, phase)
                self.epoch(2, phase + 1)
                phase += 2
            else:
                self.epoch(1, phase)
                phase += 1


@st.composite
def kernels(draw) -> tuple[str, int]:
    """The source of a generated kernel module and its group's lane count."""
    tile = draw(st.sampled_from(((4,), (2, 3))))
    lanes = int(np.prod(tile))
    writer = _Writer(draw, lanes)
    writer.phases()
    fill = {"tile": tile, "lanes": lanes, "out": OUT, "size": lanes * SLOTS, "slots": SLOTS}
    body = "\n".join(writer.lines) + "\n"
    return HEADER.format(**fill) + body + FOOTER.format(**fill), lanes


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("generated_kernels")


def load(folder, source: str):
    """Import a generated module from a file: kernels compile from their source file."""
    name = "gen_" + hashlib.sha256(source.encode()).hexdigest()[:16]
    path = folder / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.gen


def run(k, target: str, x: np.ndarray, lanes: int) -> np.ndarray:
    out = np.full((GROUPS, lanes, OUT), -1, np.int64)
    with tessera.config(target=target):
        k[GROUPS](x, out)
    return out


@settings(
    max_examples=12,  # each compiles twice (~7 s on a 2-core machine); derandomized
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(kernels())
def test_cpu_and_debug_agree_on_generated_grouped_kernels(folder, case):
    source, lanes = case
    k = load(folder, source)
    x = np.arange(N, dtype=np.int64) * 7 - 10
    cpu, debug = run(k, "cpu", x, lanes), run(k, "debug", x, lanes)
    assert np.array_equal(cpu, debug), f"cpu and debug differ on:\n{source}"
