"""Generated kernel source → a :class:`~tessera.Kernel`, as if the user had written it.

The text is registered with ``linecache`` under a name of its own, so the front end reads
it like a file (errors and ``inspect`` show the generated lines) and the disk cache keys
it by its text like any kernel. One Kernel per distinct text, for the process.
"""

from __future__ import annotations

import hashlib
import linecache
import math
import threading

from .. import dtypes as D
from .. import tile as tile_module
from ..autotune import Autotuned, autotune
from ..kernel.kernel import Kernel, kernel
from ..kernel.philox import philox_uniform
from ..kernel.source import GENERATED_PREFIX
from ..tile import group_id
from .codegen import Source, shared_kib

_NAMESPACE = {
    "math": math,
    "tile": tile_module,
    "group_id": group_id,
    "kernel": kernel,
    "autotune": autotune,
    "shared_kib": shared_kib,
    "mut": D.mut,
    "KiB": D.KiB,
    "philox_uniform": philox_uniform,
    **{d.name: d for d in (*D.ALL_DTYPES, D.complex64, D.complex128)},
}
_kernels: dict[str, Kernel] = {}
_lock = threading.Lock()


def define(source: Source) -> Kernel | Autotuned:
    """The kernel of ``source`` (made once per distinct text)."""
    with _lock:
        made = _kernels.get(source.text)
        if made is not None:
            return made
        digest = hashlib.sha256(source.text.encode()).hexdigest()[:12]
        filename = f"{GENERATED_PREFIX}{source.name} {digest}>"
        lines = source.text.splitlines(True)
        linecache.cache[filename] = (len(source.text), None, lines, filename)
        namespace = dict(_NAMESPACE)
        exec(compile(source.text, filename, "exec"), namespace)  # noqa: S102 - our codegen
        made = _kernels[source.text] = namespace[source.name]
        return made
