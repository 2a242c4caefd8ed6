"""``python -m tessera.runtime.rank_output COMMAND...``: run COMMAND with every line it prints
prefixed by this process's rank (``[3] loss 0.25``), which is how ``tessera run`` labels
the ranks' output whatever the launcher (mpiexec, srun).

Launchers can label output themselves, but each in its own format (Hydra's ``[3] ``,
Open MPI's ``[1,3]<stdout>:``, srun's ``3: ``) and with its own flag; one wrapper started
by the launcher in each rank's place gives the same labels under all of them. The command
inherits every file descriptor (PMI's socket, ``PMI_FD``, must reach the MPI library) and
dies with the wrapper, so a launcher that kills its direct children on an abort ends the
ranks too.

The wrapper also sees how its rank ends. A rank that joined the MPI world through Tessera
says so on a pipe (``_TESSERA_RANK_STATUS``: the pipe's descriptor and the wrapper's pid),
and says again that it is finishing when its interpreter exits (tessera.runtime.world). A rank
whose process ends with status 0 between the two — ``os._exit(0)`` mid-job, which skips
the exit handlers and MPI_Finalize — left the job before the others: MPICH's Hydra then
kills the other ranks and exits 0, a batch job that reports success with its results
missing. The wrapper says which rank left and exits 1 instead, so the job fails.

``python -m tessera.runtime.rank_output --no-prefix COMMAND...`` only watches (``tessera run
--no-prefix``).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading

from ..observe.session import stand_down
from .launchers import detect

USAGE = "usage: python -m tessera.runtime.rank_output [--no-prefix] COMMAND [ARGS...]"
STATUS_VARIABLE = "_TESSERA_RANK_STATUS"  # "fd,pid": the pipe a rank reports on (world.py)


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the wrapper dies (Linux's PR_SET_PDEATHSIG;
    elsewhere nothing)."""
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # 1 is PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _pump(source, sink, prefix: bytes) -> None:
    """Copy ``source`` to ``sink`` line by line, each line prefixed (a last line without a
    newline too)."""
    for line in iter(source.readline, b""):
        sink.write(prefix + line)
        sink.flush()
    source.close()


def run(command: list[str], rank: int, prefix: bool = True) -> int:
    """Run ``command`` with its stdout and stderr lines prefixed by ``[rank] `` (unless not
    ``prefix``); its exit status (128 + N when a signal N ended it, as a shell reports it),
    or 1 when the rank left the job early (see the module's docstring)."""
    status_read, status_write = os.pipe()
    os.set_blocking(status_read, False)
    os.set_inheritable(status_write, True)  # the rank writes to it (close_fds=False)
    env = dict(os.environ, **{STATUS_VARIABLE: f"{status_write},{os.getpid()}"})
    pipe = subprocess.PIPE if prefix else None
    child = subprocess.Popen(
        command,
        stdout=pipe,
        stderr=pipe,
        close_fds=False,
        env=env,
        preexec_fn=_die_with_parent if sys.platform == "linux" else None,
    )
    os.close(status_write)
    label = f"[{rank}] ".encode()
    pumps = [
        threading.Thread(target=_pump, args=(child.stdout, sys.stdout.buffer, label)),
        threading.Thread(target=_pump, args=(child.stderr, sys.stderr.buffer, label)),
    ]
    if prefix:
        for pump in pumps:
            pump.start()
    for sig in (signal.SIGINT, signal.SIGTERM):  # the launcher's signals reach the rank
        signal.signal(sig, lambda number, _frame: child.send_signal(number))
    status = child.wait()
    if prefix:
        for pump in pumps:
            pump.join()
    said = _read_all(status_read)
    if status == 0 and b"S" in said and b"F" not in said:
        sys.stderr.write(
            f"tessera: rank {rank} left the job before the others: its process ended "
            "(exit status 0) without finishing (os._exit, or an exit that skipped Python's "
            "exit handlers and MPI_Finalize); the job fails\n"
        )
        sys.stderr.flush()
        return 1
    return 128 - status if status < 0 else status


def _read_all(fd: int) -> bytes:
    """What is in the status pipe now (never waits: a process the rank started may hold
    the pipe open)."""
    chunks = []
    try:
        while chunk := os.read(fd, 4096):
            chunks.append(chunk)
    except BlockingIOError:
        pass
    os.close(fd)
    return b"".join(chunks)


def main(argv: list[str] | None = None) -> int:
    stand_down()  # the rank traces itself: a trace here would overwrite its file at exit
    command = sys.argv[1:] if argv is None else argv
    prefix = not command or command[0] != "--no-prefix"
    command = command if prefix else command[1:]
    if not command:
        print(USAGE, file=sys.stderr)
        return 2
    launch = detect()
    return run(command, launch.rank if launch is not None else 0, prefix)


if __name__ == "__main__":
    sys.exit(main())
