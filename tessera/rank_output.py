"""``python -m tessera.rank_output COMMAND...``: run COMMAND with every line it prints
prefixed by this process's rank (``[3] loss 0.25``), which is how ``tessera run`` labels
the ranks' output whatever the launcher (mpiexec, srun).

Launchers can label output themselves, but each in its own format (Hydra's ``[3] ``,
Open MPI's ``[1,3]<stdout>:``, srun's ``3: ``) and with its own flag; one wrapper started
by the launcher in each rank's place gives the same labels under all of them. The command
inherits every file descriptor (PMI's socket, ``PMI_FD``, must reach the MPI library) and
dies with the wrapper, so a launcher that kills its direct children on an abort ends the
ranks too.
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
import threading

from .launchers import detect

USAGE = "usage: python -m tessera.rank_output COMMAND [ARGS...]"


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


def run(command: list[str], rank: int) -> int:
    """Run ``command`` with its stdout and stderr lines prefixed by ``[rank] ``; its exit
    status (128 + N when a signal N ended it, as a shell reports it)."""
    child = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        close_fds=False,
        preexec_fn=_die_with_parent if sys.platform == "linux" else None,
    )
    prefix = f"[{rank}] ".encode()
    pumps = [
        threading.Thread(target=_pump, args=(child.stdout, sys.stdout.buffer, prefix)),
        threading.Thread(target=_pump, args=(child.stderr, sys.stderr.buffer, prefix)),
    ]
    for pump in pumps:
        pump.start()
    for sig in (signal.SIGINT, signal.SIGTERM):  # the launcher's signals reach the rank
        signal.signal(sig, lambda number, _frame: child.send_signal(number))
    status = child.wait()
    for pump in pumps:
        pump.join()
    return 128 - status if status < 0 else status


def main(argv: list[str] | None = None) -> int:
    command = sys.argv[1:] if argv is None else argv
    if not command:
        print(USAGE, file=sys.stderr)
        return 2
    launch = detect()
    return run(command, launch.rank if launch is not None else 0)


if __name__ == "__main__":
    sys.exit(main())
