"""Errors a Tessera user sees.

Every error raised for a kernel names the kernel; an error that comes from kernel source
also carries a :class:`SourceLoc` and renders ``file:line:col``, the source line and a
caret under the offending column, the way a compiler would.
"""

from __future__ import annotations

import contextlib
import linecache
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class SourceLoc:
    """A position in a user's Python file (1-based line, 0-based column)."""

    file: str
    line: int
    col: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col + 1}"

    def source_line(self) -> str:
        return linecache.getline(self.file, self.line).rstrip("\n")

    def render(self) -> str:
        """``file:line:col`` then the line and a caret under the column."""
        text = self.source_line()
        if not text:
            return str(self)
        stripped = text.lstrip()
        indent = len(text) - len(stripped)
        caret = " " * max(self.col - indent, 0) + "^"
        return f"{self}\n    {stripped}\n    {caret}"


class TesseraError(Exception):
    """Base class of every error Tessera raises on purpose."""


class KernelError(TesseraError):
    """A problem found in a kernel's source when it is compiled.

    ``notes`` are extra locations (for instance the lane-dependent condition that makes a
    collective divergent) rendered after the main one.
    """

    def __init__(
        self,
        kernel: str,
        message: str,
        loc: SourceLoc | None = None,
        notes: tuple[tuple[str, SourceLoc], ...] = (),
    ):
        self.kernel = kernel
        self.message = message
        self.loc = loc
        self.notes = notes
        super().__init__(located(kernel, message, loc, notes))


def located(
    kernel: str,
    message: str,
    loc: SourceLoc | None,
    notes: tuple[tuple[str, SourceLoc], ...] = (),
) -> str:
    """A message about ``kernel``, then ``loc`` rendered (``file:line:col``, the line and
    a caret), then each note with its location."""
    parts = [f"in kernel '{kernel}': {message}"]
    if loc is not None:
        parts.append(loc.render())
    for text, note_loc in notes:
        parts.append(f"note: {text}\n{note_loc.render()}")
    return "\n".join(parts)


class InternalError(TesseraError):
    """Tessera failed on something it should have handled: a bug in Tessera, not in the
    kernel. Names the kernel, and the statement being compiled where that is known;
    ``TESSERA_TRACEBACK=full`` shows the internal exception behind it."""

    def __init__(self, kernel: str, exc: BaseException, loc: SourceLoc | None = None):
        self.kernel = kernel
        self.loc = loc
        self.message = (
            f"internal error ({type(exc).__name__}: {exc}); this is a bug in Tessera: please "
            "report it with the traceback TESSERA_TRACEBACK=full shows"
        )
        super().__init__(located(kernel, self.message, loc))


@contextlib.contextmanager
def internal_errors(kernel: str, loc: SourceLoc | None) -> Iterator[None]:
    """Inside this block, an exception that is not a TesseraError — a bug — becomes an
    :class:`InternalError` about ``kernel`` at ``loc`` (its cause: the exception)."""
    try:
        yield
    except TesseraError:
        raise
    except Exception as exc:
        raise InternalError(kernel, exc, loc) from exc


class LaunchError(TesseraError):
    """A launch was refused before anything ran; no argument was modified."""

    def __init__(self, kernel: str, message: str):
        self.kernel = kernel
        self.message = message
        super().__init__(f"launch of kernel '{kernel}': {message}")


class KernelRuntimeError(TesseraError):
    """A kernel failed while running (for instance a bounds check on a fast target)."""


class SanitizerError(KernelRuntimeError):
    """A bug the debug target (or a bounds-checked launch) found while a kernel ran.

    The message names the kernel, the group and lane(s), and ``file:line`` of each
    statement involved. ``kind`` says which check fired.
    """

    kind = "sanitizer"

    def __init__(self, kernel: str, message: str, where: tuple[tuple[str, SourceLoc], ...] = ()):
        self.kernel = kernel
        self.message = message
        self.where = where
        parts = [f"in kernel '{kernel}': {message}"]
        for text, loc in where:
            parts.append(f"{text}: {loc.render()}" if text else loc.render())
        super().__init__("\n".join(parts))


class OutOfBoundsError(SanitizerError):
    kind = "bounds"


class KernelAssertionError(SanitizerError):
    """An ``assert`` in a kernel failed (checked on the debug target and in bounds-checked
    launches); the message names the group, the lane, the assert's message and line."""

    kind = "assert"


class UninitializedReadError(SanitizerError):
    kind = "initcheck"


class RaceError(SanitizerError):
    kind = "race"


class AsyncCopyError(SanitizerError):
    kind = "cp_async"


class DivergenceError(SanitizerError):
    kind = "divergence"


class KernelArithmeticError(SanitizerError):
    kind = "arithmetic"


class DistError(TesseraError):
    """A problem between the ranks of a distributed job."""


class CollectiveTimeout(DistError):
    """Some ranks never reached a collective within TESSERA_COLLECTIVE_TIMEOUT seconds.

    ``collective``, ``seq`` (its number on the axis, from 1), ``axis`` and ``missing``
    (world ranks that did not arrive; empty where that is not known, as in autotune's
    agreement, ``collective="autotune agreement"`` on axis ``"world"``) say which; the
    message says what each was doing.
    """

    def __init__(self, message: str, collective: str, seq: int, axis: str, missing: list[int]):
        super().__init__(message)
        self.collective, self.seq, self.axis, self.missing = collective, seq, axis, missing


class RankExited(CollectiveTimeout):
    """A rank on this node exited without reaching a collective that this one waits on:
    the collective can never complete, so the wait ends at its next check of the members
    (after one second, then 4 s, 16 s, ...) instead of at TESSERA_COLLECTIVE_TIMEOUT.
    ``missing`` names the ranks that exited. A :class:`CollectiveTimeout`, so code that
    handles timeouts handles it too; ranks on other nodes are not seen exiting (their
    launcher ends the job, or the timeout does)."""


class RankLost(CollectiveTimeout):
    """A member of the axis sent no heartbeat for three intervals of
    TESSERA_DIST_HEARTBEAT (10 s): its process is stopped, dead, hung with the
    interpreter's lock held, or cut off, on this node or another. A wait on a collective
    ends at its next check of the members (after 1 s, 4 s, 16 s, ...) instead of at
    TESSERA_COLLECTIVE_TIMEOUT. ``missing`` names the lost ranks."""


class TransportError(DistError):
    """A collective failed in the library that moves its data (an MPI error, or one
    injected with TESSERA_DIST_FAULT_INJECT), on every member of the axis alike: the
    member that met the failure tells the others, so none waits for the timeout. Under
    the fault policy ``retry`` the collective runs once more on a degraded path first
    (docs/distributed.md, "Fault policy"). ``collective``, ``seq``, ``axis`` and ``rank``
    (the world rank the failure happened on; None where not known) say which."""

    def __init__(self, message: str, collective: str, seq: int, axis: str, rank: int | None):
        super().__init__(message)
        self.collective, self.seq, self.axis, self.rank = collective, seq, axis, rank


class CollectiveMismatch(DistError):
    """The ranks called different collectives, or the same one with arguments that
    change what goes over the wire (op, dtype, shape, dim, root, ...); raised on every
    rank, naming what each passed, before any result is delivered. Every collective is
    checked (docs/distributed.md, "Faults"): an all_reduce by a stamp inside its message,
    the others by a fingerprint exchanged with them, an all_gather with its block
    lengths; under TESSERA_DIST_DEBUG=1 before any data moves. Also raised by
    all_reduce_coalesced's bucket agreement on one node and autotune's agreement on a
    winner."""


class TesseraWarning(UserWarning):
    """Base class of the warnings Tessera issues (filter them with this class)."""


class FaultWarning(TesseraWarning):
    """An axis went on after a transport failure on a degraded path (fault policy
    ``retry``; docs/distributed.md, "Fault policy"): once per failure."""


class CacheWarning(TesseraWarning):
    """The disk cache could not be used for one entry (corrupt, unreadable, unwritable, or
    failing a check of the trust model: another kernel's, not sealed with the user's key,
    not a regular file), or at all (a directory or key file that others can write or read);
    the kernel is compiled instead, so the warning costs time, never correctness."""


class CompileWorkerWarning(TesseraWarning):
    """A compile worker (``TESSERA_COMPILE_WORKERS``, docs/autotune.md) stopped before it
    answered: it crashed, was killed, or compiled nothing for too long. The kernels it left
    are compiled in the launching process instead, so the warning costs time, never
    correctness."""


class CaptureError(TesseraError):
    """A ``tessera.jit(capture_graph=True)`` step cannot be captured or replayed as
    called: the message names the function, the parameter, op or kernel, and why."""


class CaptureWarning(TesseraWarning):
    """A ``tessera.jit`` step runs eagerly instead of from a captured graph (its capture
    failed, or its shapes changed past ``max_graphs``); said once per cause."""


class AOTError(KernelError):
    """A kernel cannot be compiled ahead of time (``tessera.aot``): the message names the
    kernel and why (a feature AOT code cannot hold, a missing constexpr, an unknown arch)
    and, where the cause is in the kernel's source, ``file:line`` and the line."""


class AutotuneError(TesseraError):
    """No config of a sweep could run (the message lists every reason)."""


class SettingError(TesseraError, ValueError):
    """A ``TESSERA_*`` setting (environment or ``tessera.config``) has a value it cannot
    take."""


class SettingWarning(TesseraWarning):
    """A ``TESSERA_*`` setting (environment or TESSERA_CONFIG's file) that Tessera does not
    know, or a value it cannot take: said once, naming the accepted values, and the setting
    keeps its default."""
