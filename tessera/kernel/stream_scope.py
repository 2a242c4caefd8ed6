"""``graph.stream(name)``: the launches of ops and modules inside the block, and the
collectives, go to the stream called ``name`` on the target that runs them (a named CUDA
stream, made once; on the CPU and the debug target launches are synchronous, so they are
ordered anyway). The names live here, below the operator layer and the mesh, so that
both can read them."""

from __future__ import annotations

import contextlib
import threading

_local = threading.local()


@contextlib.contextmanager
def stream(name: str):
    """Scope this thread's op launches and collectives to the stream ``name``."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"graph.stream: name={name!r} must be a non-empty string")
    stack = _local.__dict__.setdefault("names", [])
    stack.append(name)
    try:
        yield name
    finally:
        stack.pop()


def current() -> str | None:
    """The innermost stream name of this thread, if any."""
    stack = getattr(_local, "names", None)
    return stack[-1] if stack else None
