"""Register tiles in the CUDA code generator: what runs on the registers of a register
loop (passes/mainloop.py, passes/row_loop.py) instead of on tiles in shared memory.

A mixin of :class:`~.codegen.CudaCodegen`. After a top-level register loop, its tiles
stay in registers (``reg_tiles``: tile -> local array; ``reg_kinds``: ``acc`` for tiles in
the ``mma.sync`` C layout, ``row`` for row vectors, one value per row of a thread's
elements): the statements its epilogue plan lists run element by element on them (the
ordinary expression code, where a register tile read at the element being computed is
its register), and the first statement that needs one in shared memory gets them all
written there. The register loops use the same element-wise code inside their loops.
"""

from __future__ import annotations

from .... import dtypes as D
from ....tile import blocks as B
from ... import ir
from ...ir import TileType
from ..pysource import ctor
from . import mainloop, row_loop
from .acc_layout import AccLayout, register_loops, row_loops

ACC, ROW = "acc", "row"


class RegisterTiles:
    """Register-tile state and statements (initialised by :meth:`init_registers`)."""

    def init_registers(self, plans: list) -> None:
        epilogues = [p.epilogue for p in plans if p.epilogue is not None]
        for ep in epilogues:  # tiles that only ever live in registers
            self.unstaged |= ep.register_only
        self.fused_inits: dict[int, str] = {}  # statement id -> why it emits nothing
        for ep in epilogues:
            if ep.init is not None:
                self.fused_inits[id(ep.init)] = "its registers start the main loop"
        self.reg_tiles: dict[str, str] = {}  # tile name -> its registers (a local array)
        self.reg_kinds: dict[str, str] = {}  # tile name -> ACC or ROW
        self.reg_layout = None  # width -> the AccLayout of an acc tile of that width
        self.reg_epilogue = None  # the loop's epilogue plan (mainloop.Epilogue)
        self.reg_index: str | None = None  # the register of the element being computed
        self.row_index: str | None = None  # ... and of its row
        self.reg_elements = False  # element loops run over the registers
        self.index_tiles: dict[str, ir.Expr] = {}  # tiles computed from element indices

    def keep_registers(self, tiles: dict, kinds: dict, layout, epilogue) -> None:
        """After a register loop: ``tiles`` stay in registers for ``epilogue``."""
        self.reg_tiles, self.reg_kinds = dict(tiles), dict(kinds)
        self.reg_layout, self.reg_epilogue = layout, epilogue

    # ------------------------------------------------------------------ statements
    def lane_stmt(self, s: ir.Stmt) -> None:
        why = self.fused_inits.get(id(s))
        if why is not None:
            self.emit(f"# {self.name(s.target)}: {why}", s.loc)
            return
        if self.reg_tiles:
            ep = self.reg_epilogue
            if id(s) in ep.statements:
                self.register_statement(s)
                return
            if id(s) == ep.materialise:
                self.materialise_registers()
            elif getattr(s, "target", None) in self.reg_tiles:  # the general path's now
                del self.reg_tiles[s.target]
        super().lane_stmt(s)

    def register_statement(self, s: ir.Stmt) -> None:
        """A statement of a register loop's epilogue: a block store or an element-wise
        statement, each thread at its own elements."""
        call = ir.prim_call(s)
        if call is not None and call.prim.collective:  # tile.store_block
            self.reg_elements = True
            try:
                self.lower(call, s)
            finally:
                self.reg_elements = False
            return
        self.register_elementwise(s.target, s.value, s.loc)

    def register_array(self, name: str, t: TileType, loc=None) -> str:
        """The local array of register tile ``name`` (declared on first use)."""
        dest = self.reg_tiles.get(name)
        if dest is None:
            dest = f"_mr{len(self.lines)}"
            self.reg_kinds[name] = ACC if len(t.shape) == 2 else ROW
            count = self.register_count(t)
            self.emit(f"{dest} = cuda.local.array({count}, {ctor(t.dtype)})", loc)
            self.reg_tiles[name] = dest
        return dest

    def register_count(self, t: TileType) -> int:
        layout = self.reg_layout(t.shape[-1])
        return layout.registers if len(t.shape) == 2 else layout.row_regs

    def register_elementwise(self, target: str, value: ir.Expr, loc) -> None:
        """``target = value`` on registers: an acc tile element by element, a row tile row
        by row (values in registers read at the element or row computed)."""
        t = self.types[target]
        # in place: it reads register tiles only at the element (or row) it writes
        dest = self.register_array(target, t, loc)

        def body() -> None:
            code = self.conv(self.expr(value), value.type, t)
            index = self.reg_index if len(t.shape) == 2 else self.row_index
            self.emit(f"{dest}[{index}] = {code}", loc)

        self.reg_elements = True
        try:
            self.element_loops(t.shape, body)
        finally:
            self.reg_elements = False

    def register_element_loops(self, shape: tuple[int, ...], body) -> None:
        """Element loops over registers: an acc tile's elements, or a row tile's rows."""
        saved = self.element
        layout = self.reg_layout(shape[-1])

        def at(row: str, col: str, reg: str, row_reg: str) -> None:
            self.emit(f"_e0 = {row}")
            self.emit(f"_e1 = {col}")
            self.element, self.reg_index, self.row_index = ["_e0", "_e1"], reg, row_reg
            body()

        def at_row(row: str, row_reg: str) -> None:
            self.emit(f"_e0 = {row}")
            self.element, self.reg_index, self.row_index = ["_e0"], None, row_reg
            body()

        try:
            if len(shape) == 2:
                register_loops(self, layout, at)
            else:
                row_loops(self, layout, at_row)
        finally:
            self.element, self.reg_index, self.row_index = saved, None, None

    def materialise_registers(self) -> None:
        """Write every register tile into its shared tile (the rest of the kernel reads
        them there)."""
        tiles, self.reg_tiles = dict(self.reg_tiles), {}
        for name, regs in tiles.items():
            t = self.types[name]
            layout = self.reg_layout(t.shape[-1])
            tile = self.name(name)
            if self.reg_kinds[name] == ACC:
                register_loops(
                    self,
                    layout,
                    lambda row, col, reg, rr, tile=tile, regs=regs: self.emit(
                        f"{tile}[{row}, {col}] = {regs}[{reg}]"
                    ),
                )
            else:  # the four threads of a row's group write the same value
                row_loops(
                    self,
                    layout,
                    lambda row, rr, tile=tile, regs=regs: self.emit(
                        f"{tile}[{row}] = {regs}[{rr}]"
                    ),
                )
        self.emit("cuda.syncthreads()")

    def tile_read(self, name: str, shape: tuple[int, ...]) -> str:
        value = self.index_tiles.get(name) if self.row_index is not None else None
        if value is not None:  # an index tile: its value computed at the element
            tail = self.element[len(self.element) - len(shape) :]
            coords = ["0" if n == 1 else i for i, n in zip(tail, shape)]
            if isinstance(value, ir.PrimCall) and value.prim is B.arange:
                return f"np.int64({coords[0]})"
            with self.moved_element(lambda _: coords):
                return self.expr(value)
        regs = self.reg_tiles.get(name) if self.row_index is not None else None
        if regs is not None:
            if self.reg_kinds[name] == ACC:
                return f"{regs}[{self.reg_index}]"
            return f"{regs}[{self.row_index}]"
        return super().tile_read(name, shape)

    # ------------------------------------------------------------------ loops
    def register_mainloop(self, plan) -> None:
        """A planned tile.range GEMM loop (passes/mainloop.py, emitted by mainloop.py)."""
        ring = self.tile_temp(TileType(D.u8, (plan.ring_bytes,)))
        self.rings[ring] = plan.ring_bytes
        loop = plan.loop
        operands = mainloop.Operands(
            A=self.name(plan.A),
            B=self.name(plan.B),
            acc=self.name(plan.acc),
            ring=ring,
            row0=self.i64(plan.row0),
            col0=self.i64(plan.col0),
            start=self.i64(loop.start),
            stop=self.i64(loop.stop),
            step=self.i64(loop.step),
            tag=str(len(self.rings)),
            init=self.fill_code(plan.epilogue.init if plan.epilogue else None, plan.acc),
            keep=plan.epilogue is not None,
            chunks=self.chunks if id(loop) in self.launch_chunked else None,
            whole=bool(self.chunks and self.whole and id(loop) in self.launch_chunked),
        )
        self.emit(f"# tile.range (line {loop.loc.line}) as a register main loop", loop.loc)
        mainloop.emit(self, plan, operands)
        if operands.keep:
            layout = mainloop.layout(plan)
            self.keep_registers(
                {plan.acc: mainloop.accumulator(operands)},
                {plan.acc: ACC},
                lambda width: layout,
                plan.epilogue,
            )

    def register_row_loop(self, plan) -> None:
        """A planned register row loop (passes/row_loop.py, emitted by row_loop.py)."""
        ring = self.tile_temp(TileType(D.u8, (plan.ring_bytes,)))
        self.rings[ring] = plan.ring_bytes
        staging = self.tile_temp(TileType(D.u8, (plan.operand_bytes + 128,)))
        self.rings[staging] = plan.operand_bytes + 128
        self.emit(f"# tile.range (line {plan.loop.loc.line}) as a register row loop", plan.loop.loc)
        row_loop.emit(self, plan, ring, staging)

    def i64(self, e: ir.Expr) -> str:
        return self.conv(self.expr(e), e.type, ir.ScalarType(D.i64))

    def fill_code(self, init: ir.Assign | None, name: str) -> str | None:
        """The code of a fused ``tile.zeros``/``tile.full``'s value (None: no fill)."""
        if init is None:
            return None
        call = ir.prim_call(init)
        dtype = self.types[name].dtype
        if call.prim is B.zeros:
            return f"{ctor(dtype)}(0)"
        value = call.args[1]
        return self.conv(self.expr(value), value.type, ir.ScalarType(dtype))


def layout_of(inst, warp_m: int):
    """Acc tiles of a row loop: each warp whole rows and every column."""
    return lambda width: AccLayout(inst, warp_m, width)
