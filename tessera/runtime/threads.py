"""How many threads a parallel CPU launch uses: the node's cores divided among the ranks
on the node.

Numba's default is every core the process may use, which is right for one process and
wrong for several on one node: two ranks on two cores would run two threads each and
fight over the cores. So the default is ``cores // ranks on this node`` (at least 1),
where the ranks on the node come first from the launcher's variables (tessera.runtime.launchers;
read at ``import tessera``, before Numba starts its thread pool) and then from MPI's
shared-memory communicator (``Split_type(COMM_TYPE_SHARED)``) when the first mesh is
made (a collective every rank joins; making the world is not one).
When the launcher has already bound the process to fewer cores than the node has (``mpiexec
--bind-to core``, ``srun --cpu-bind``), those cores are this rank's share as they are.

``TESSERA_THREADS=N`` (or Numba's own ``NUMBA_NUM_THREADS``) sets the count outright.
The count takes effect through ``NUMBA_NUM_THREADS``, which both Numba and the warm-start
loader read when they start the pool; a pool that is already running is narrowed with
``numba.set_num_threads`` (it cannot grow past the size it started with).
"""

from __future__ import annotations

import os
import sys

from ..config import count_or_auto
from ..config import get as setting
from . import launchers

_chosen: dict[str, object] = {}  # what set_default decided: count and reason
# set beside NUMBA_NUM_THREADS when the count is Tessera's choice, so that this process
# later, and the processes it starts, can tell it from a count the user set
CHOSEN = "_TESSERA_THREADS_CHOSEN"  # (not a TESSERA_* name: no setting)


def node_cores() -> int:
    return os.cpu_count() or 1


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return node_cores()


def choose(ranks_on_node: int | None, environ=None) -> tuple[int, str]:
    """The thread count and why, for ``ranks_on_node`` ranks on this node (None: unknown)."""
    env = os.environ if environ is None else environ
    count = count_or_auto(setting("threads"), "TESSERA_THREADS")
    if count is not None:
        return count, "TESSERA_THREADS"
    numba_own = env.get("NUMBA_NUM_THREADS", "").strip()
    if numba_own and env.get(CHOSEN) != numba_own:  # the user's, not Tessera's choice
        return int(numba_own), "NUMBA_NUM_THREADS"
    cores, usable = node_cores(), usable_cores()
    if usable < cores:
        return usable, f"the {usable} cores the launcher bound this process to"
    if ranks_on_node and ranks_on_node > 1:
        return max(1, cores // ranks_on_node), f"{cores} cores / {ranks_on_node} ranks on node"
    return usable, f"{usable} cores"


def set_default(ranks_on_node: int | None = None) -> None:
    """Choose the count and make it the pool's (see the module docstring). Called at
    ``import tessera`` with the launcher's count of ranks on the node, and again by the
    first mesh with MPI's."""
    if ranks_on_node is None:
        ranks_on_node = launchers.ranks_on_node()
    count, reason = choose(ranks_on_node)
    _chosen.update(count=str(count), reason=reason, ranks_on_node=ranks_on_node)
    if reason == "NUMBA_NUM_THREADS":
        return
    os.environ["NUMBA_NUM_THREADS"] = os.environ[CHOSEN] = str(count)
    parallel = sys.modules.get("numba.np.ufunc.parallel")
    if parallel is not None and parallel._is_initialized:  # the pool runs: narrow it
        numba = sys.modules["numba"]
        numba.set_num_threads(min(count, numba.config.NUMBA_NUM_THREADS))
    elif "numba.core.config" in sys.modules:  # imported, pool not started: its size
        sys.modules["numba.core.config"].NUMBA_NUM_THREADS = count


def describe() -> str:
    """The count and its reason, for ``tessera info``."""
    if not _chosen:
        set_default()
    return f"{_chosen['count']} threads ({_chosen['reason']})"
