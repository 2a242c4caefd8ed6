"""Helpers for the compile-error tests: find a marked source line and check that an
error message points at it with ``file:line:col``, the line and a caret.

An offending line carries a unique ``# E:<marker>`` comment at its end; the expected line
number and column are computed from the test file's text, so tests survive edits.
"""

from __future__ import annotations

import functools

import pytest

import tessera


@functools.cache
def _lines(file: str) -> tuple[str, ...]:
    with open(file) as f:
        return tuple(f.read().splitlines())


def where(file: str, marker: str, token: str) -> tuple[int, int, str]:
    """(1-based line, 0-based column of ``token``, text) of the line marked ``# E:marker``."""
    tag = f"# E:{marker}"
    lines = _lines(file)
    hits = [k for k, text in enumerate(lines) if text.rstrip().endswith(tag)]
    assert len(hits) == 1, f"marker {tag!r} must be on exactly one line, found {len(hits)}"
    text = lines[hits[0]]
    assert token in text, (token, text)
    return hits[0] + 1, text.index(token), text


def assert_points_at(msg: str, file: str, marker: str, token: str) -> None:
    """``msg`` has ``file:line:col`` on a line of its own, then the source line, then a
    caret under the first character of ``token``."""
    line, col, text = where(file, marker, token)
    header = f"{file}:{line}:{col + 1}"
    lines = msg.splitlines()
    assert header in lines, f"expected a line {header!r} in:\n{msg}"
    k = lines.index(header)
    shown = lines[k + 1]
    assert shown.strip() == text.strip(), msg
    caret = lines[k + 2]
    assert caret.strip() == "^", msg
    shown_indent = len(shown) - len(shown.lstrip())
    source_indent = len(text) - len(text.lstrip())
    assert caret.index("^") - shown_indent == col - source_indent, msg


def compile_error(fn, **options) -> tessera.KernelError:
    """Decorate ``fn``; the decoration itself must raise a KernelError naming ``fn``."""
    decorate = tessera.kernel(**options) if options else tessera.kernel
    with pytest.raises(tessera.KernelError) as info:
        decorate(fn)
    err = info.value
    assert err.kernel == fn.__name__
    assert f"'{fn.__name__}'" in str(err)
    return err
