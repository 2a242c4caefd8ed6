"""Whether another rank's process still runs: what lets a wait on a collective end as soon
as a member on this node has exited, instead of at the deadline.

A launcher usually ends the job when one of its processes dies (MPICH's hydra, Open MPI's
mpirun and Slurm's srun kill the others), but not always, and not always at once: a
launcher that does not notice (``-disable-auto-cleanup``, a process that left a child
holding its pipes, a launcher of one's own) leaves the others waiting on a collective
until ``TESSERA_COLLECTIVE_TIMEOUT``. So every rank publishes who it is when a mesh is
made (:func:`identity`), and a long wait checks whether the members it waits on are still
there (:func:`exited`). Only members on this node can be checked (their process ids mean
something here); the others end at the deadline, as before.
"""

from __future__ import annotations

import os
import socket


def identity() -> tuple[str, int, str]:
    """This process, for the other ranks: ``(node, pid, start)``. ``node`` names the
    machine and its process-id namespace (two containers on one host have different ones);
    ``start`` is the process's start time where the system tells it (so that a process id
    used again by a new process is not mistaken for the rank), else ``""``."""
    return _node(), os.getpid(), _start_time(os.getpid())


def exited(member: tuple[str, int, str], mine: tuple[str, int, str]) -> bool:
    """True when ``member`` (an :func:`identity`) runs on this node and its process has
    ended: it is gone, a zombie, or its id now belongs to a process started later. False
    when it still runs, or when it runs elsewhere (nothing can be said from here)."""
    node, pid, start = member
    if node != mine[0] or pid == mine[1]:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # it exists, another user's: /proc tells whether it is ours
        pass
    except OSError:
        return False
    state = _stat(pid)
    if state is None:
        return False  # no /proc here: alive, as far as can be told
    if not state:  # it ended between the two checks
        return True
    return state[0] in "ZX" or (bool(start) and state[1] != start)


def _node() -> str:
    name = socket.gethostname()
    for path in ("/proc/sys/kernel/random/boot_id",):
        try:
            with open(path) as f:
                name += "/" + f.read().strip()
        except OSError:
            pass
    try:
        name += "/" + os.readlink("/proc/self/ns/pid")
    except OSError:
        pass
    return name


def _stat(pid: int) -> tuple[str, str] | None | tuple[()]:
    """``(state, start time)`` of process ``pid`` from /proc; ``()`` when it has gone;
    None where there is no /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except FileNotFoundError:
        return () if os.path.isdir("/proc/self") else None
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may hold spaces: split after it
    fields = text[text.rfind(")") + 2 :].split()
    return fields[0], fields[19]  # fields 3 and 22 of proc(5)


def _start_time(pid: int) -> str:
    state = _stat(pid)
    return state[1] if state else ""
