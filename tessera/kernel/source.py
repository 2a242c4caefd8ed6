"""Reading a Python function's source: its AST, file and line numbers.

Kernels and helpers are compiled from their source text, so the function must be
defined in a file (a script, a module or a notebook cell that linecache knows). The text
is read once, when the decorator runs (:func:`source_text_of`), and every later compile
(another autotune config, another group shape, a kernel that calls a helper) parses that
text: a file edited after the decorator ran never changes what runs.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import weakref
from dataclasses import dataclass

from ..errors import SourceLoc, TesseraError

# the file name under which the operator layer registers the kernels it generates
# (tessera/ops/generated.py): what such a kernel reports is for tessera, not the user
GENERATED_PREFIX = "<tessera generated "


def generated(filename: str) -> bool:
    """Whether ``filename`` holds a kernel the operator layer generated."""
    return filename.startswith(GENERATED_PREFIX)


@dataclass
class SourceInfo:
    """Where a function's source lives: its AST, file and the line offset of the AST."""

    fn_node: ast.FunctionDef
    filename: str
    line_offset: int
    globals: dict

    @property
    def decorator_loc(self) -> SourceLoc:
        """The first line of the function's source: its decorator (or its ``def``), where
        errors in the decorator's options point."""
        return SourceLoc(self.filename, self.line_offset + 1, self.fn_node.col_offset)


@dataclass(frozen=True)
class SourceText:
    """A function's source lines as read when its decorator ran, where they start (1-based
    line) and the file they came from."""

    lines: tuple[str, ...]
    first_line: int
    filename: str


# per code object, the text read first: a factory's kernel made again later (another
# call of the factory) compiles what its first one did, whatever the file holds now
# (by identity: equal code objects of two files are two functions)
_texts: dict[int, tuple[weakref.ref, SourceText]] = {}


def source_text_of(fn: object, what: str) -> SourceText:
    """``fn``'s source text, read now (or when a function of the same code was first read)."""
    code = getattr(fn, "__code__", None)
    known = _texts.get(id(code))
    if known is not None and known[0]() is code:
        return known[1]
    try:
        lines, first_line = inspect.getsourcelines(fn)
        filename = inspect.getsourcefile(fn) or inspect.getfile(fn)
    except (OSError, TypeError) as exc:
        raise TesseraError(
            f"cannot read the source of {what} '{getattr(fn, '__name__', fn)}': {exc}; "
            "kernels must be defined in a file, not typed at an interactive prompt"
        ) from None
    text = SourceText(tuple(lines), first_line, filename)
    if code is not None:
        key = id(code)
        _texts[key] = (weakref.ref(code, lambda _, key=key: _texts.pop(key, None)), text)
    return text


def enclosing_names(fn: object) -> dict:
    """The names of the function that defines ``fn``, for a kernel made by a factory
    (``def make(BLOCK, dt): @kernel def k(x: dt[n]) ...``): its locals while it runs
    (annotations name them without capturing them) and ``fn``'s closure cells. Read when
    the decorator runs, as Python evaluates annotations when the ``def`` runs."""
    names: dict = {}
    frame = inspect.currentframe()
    try:
        while frame is not None:
            if fn.__code__ in frame.f_code.co_consts:
                if frame.f_code.co_flags & inspect.CO_NEWLOCALS:  # a function, not a module
                    names.update(frame.f_locals)
                break
            frame = frame.f_back
    finally:
        del frame
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            names[name] = cell.cell_contents
        except ValueError:  # a cell not yet filled
            pass
    return names


def source_info_of(
    fn: object, what: str, enclosing: dict | None = None, text: SourceText | None = None
) -> SourceInfo:
    """Parse ``fn``'s source (``text``, as captured by :func:`source_text_of`; by default
    read now) into a :class:`SourceInfo` whose lines match the file; names resolve in
    ``fn``'s globals, then in ``enclosing`` (a factory's names) over them."""
    text = source_text_of(fn, what) if text is None else text
    lines, first_line, filename = list(text.lines), text.first_line, text.filename
    source = textwrap.dedent("".join(lines))
    module = ast.parse(source)
    fn_node = next(
        (n for n in module.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None
    )
    if not isinstance(fn_node, ast.FunctionDef):
        raise TesseraError(f"{what} '{fn.__name__}' must be a plain 'def' function")
    fn_node.decorator_list = []
    indent = len(lines[0]) - len(lines[0].lstrip())
    if indent:  # dedent shifted columns; shift them back so carets line up with the file
        for node in ast.walk(fn_node):
            if hasattr(node, "col_offset"):
                node.col_offset += indent
            if getattr(node, "end_col_offset", None) is not None:
                node.end_col_offset += indent
    names = {**fn.__globals__, **enclosing} if enclosing else fn.__globals__
    return SourceInfo(fn_node, filename, first_line - 1, names)
