"""``tessera run``: start a program on N ranks with the launcher that fits where it runs.

    tessera run -n 4 script.py ARGS...                       # python script.py on 4 ranks
    tessera run -n 4 --bind-to core -- python script.py      # launcher options before --

Inside a Slurm allocation (``SLURM_JOB_ID`` set, ``srun`` on PATH) the launcher is
``srun``, which knows the allocation's nodes; elsewhere ``mpiexec``, the site's (first on
PATH) before the ``mpich`` wheel's (tessera.runtime.world.find_mpiexec). Options that ``tessera
run`` does not know are the launcher's and go to it unchanged, so they must come before a
``--`` that starts the command. Each line a rank prints is prefixed with its rank (``[3]
...``, tessera.runtime.rank_output) unless ``--no-prefix``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

from .launchers import in_slurm_allocation
from .world import find_mpiexec

USAGE = """\
usage: tessera run [-n N] [--launcher auto|srun|mpiexec] [--no-prefix] SCRIPT.py [ARGS...]
       tessera run [-n N] [OPTIONS] [LAUNCHER OPTIONS...] -- COMMAND [ARGS...]

Start a program on N ranks: with srun inside a Slurm allocation, else with the site's
mpiexec (the first on PATH), else with the mpich wheel's. A SCRIPT.py runs with this
Python. Options tessera run does not know go to the launcher (put them before --).
  -n N            ranks (inside a Slurm allocation: default the allocation's tasks)
  --launcher L    auto (default), srun or mpiexec
  --no-prefix     leave the ranks' output lines as they are (default: '[rank] ' before each)
"""


class UsageError(Exception):
    """A ``tessera run`` command line that cannot be run (the message says why)."""


@dataclass
class Request:
    ranks: int | None = None
    launcher: str = "auto"
    prefix: bool = True
    launcher_args: list[str] = field(default_factory=list)
    command: list[str] = field(default_factory=list)


def parse(argv: list[str]) -> Request:
    """Split ``tessera run``'s own options from the launcher's and from the command."""
    if "--" in argv:
        options, command = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
        forward = True
    else:
        options, command, forward = argv, [], False
    request = Request()
    i = 0
    while i < len(options):
        token = options[i]
        if token in ("-n", "-np", "--ranks", "--launcher"):
            if i + 1 >= len(options):
                raise UsageError(f"{token} needs a value")
            value, i = options[i + 1], i + 2
        elif token.startswith("-n") and token[2:].isdigit():
            token, value, i = "-n", token[2:], i + 1
        elif token.startswith(("--ranks=", "--launcher=")):
            token, value = token.split("=", 1)
            i += 1
        elif token == "--no-prefix":
            request.prefix, i = False, i + 1
            continue
        elif token in ("-h", "--help"):
            raise UsageError("")
        elif forward:
            request.launcher_args.append(token)
            i += 1
            continue
        elif token.startswith("-"):
            raise UsageError(f"unknown option {token}: launcher options go before -- COMMAND")
        else:
            command, options = options[i:], []
            break
        if token == "--launcher":
            if value not in ("auto", "srun", "mpiexec"):
                raise UsageError(f"--launcher {value}: choose auto, srun or mpiexec")
            request.launcher = value
        else:
            if not value.isdigit() or int(value) < 1:
                raise UsageError(f"{token} {value}: the number of ranks must be a count >= 1")
            request.ranks = int(value)
    if not command:
        raise UsageError("no program to run: tessera run -n N SCRIPT.py, or ... -- COMMAND")
    request.command = [sys.executable, *command] if command[0].endswith(".py") else command
    return request


def launcher_for(request: Request, environ=None) -> list[str]:
    """The launcher's command with its rank count (``srun -n 4`` / ``mpiexec -n 4``)."""
    env = os.environ if environ is None else environ
    srun = shutil.which("srun", path=env.get("PATH"))
    use_srun = request.launcher == "srun" or (
        request.launcher == "auto" and srun is not None and in_slurm_allocation(env)
    )
    if use_srun:
        if srun is None:
            raise UsageError("--launcher srun: no srun on PATH")
        ranks = [] if request.ranks is None else ["-n", str(request.ranks)]
        return [srun, *ranks]
    mpiexec = find_mpiexec(env.get("PATH"))
    if mpiexec is None:
        raise UsageError(
            "no mpiexec found; load the site's MPI (module load ...) or "
            "pip install 'tessera-kernels[mpi]'"
        )
    if request.ranks is None:
        raise UsageError("-n N is needed outside a Slurm allocation (how many ranks?)")
    return [mpiexec, "-n", str(request.ranks)]


def command_line(request: Request, environ=None) -> list[str]:
    """The whole command ``tessera run`` starts."""
    # every rank runs under the wrapper, which labels its lines and fails the job when
    # the rank leaves before the others (tessera.runtime.rank_output)
    wrap = [sys.executable, "-m", "tessera.runtime.rank_output"] + (
        [] if request.prefix else ["--no-prefix"]
    )
    return [*launcher_for(request, environ), *request.launcher_args, *wrap, *request.command]


def main(argv: list[str]) -> int:
    try:
        command = command_line(parse(argv))
    except UsageError as exc:
        if not str(exc):  # -h
            print(USAGE, end="")
            return 0
        print(f"tessera run: {exc}\n{USAGE.splitlines()[0]}", file=sys.stderr)
        return 2
    return subprocess.call(command)
