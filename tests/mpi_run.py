"""Running test scripts on several MPI ranks: the skip marker, the ``mpiexec`` call, and
(script side) writing each rank's outcome to a file that the test then reads."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))


def mpi_missing() -> bool:
    from tessera.runtime.world import find_mpiexec

    return importlib.util.find_spec("mpi4py") is None or find_mpiexec() is None


def run_mpi(
    script: str,
    ranks: int,
    *args,
    env: dict | None = None,
    timeout: int = 240,
    launcher: tuple[str, ...] = (),
):
    """``mpiexec [launcher...] -n ranks python tests/<script> args...``, from the tests
    folder."""
    from tessera.runtime.world import find_mpiexec

    command = [find_mpiexec(), *launcher, "-n", str(ranks), sys.executable]
    command.append(os.path.join(HERE, script))
    # Open MPI's mpiexec refuses to start as root (CI containers, GPU machines) unless told
    env = dict(os.environ if env is None else env)
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return subprocess.run(
        command + [str(a) for a in args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=HERE,
        env=env,
    )


def start_mpi(script: str, ranks: int, *args, env: dict, launcher: tuple[str, ...] = ()):
    """``mpiexec [launcher...] -n ranks python tests/<script> args...`` started and not
    waited for (several short runs side by side): a ``subprocess.Popen`` whose output
    goes to files beside the outcome (``communicate()`` gives the two texts)."""
    from tessera.runtime.world import find_mpiexec

    command = [find_mpiexec(), *launcher, "-n", str(ranks), sys.executable]
    command += [os.path.join(HERE, script), *(str(a) for a in args)]
    env = dict(env)
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=HERE, env=env
    )


def hydra_missing() -> bool:
    """True unless ``mpiexec`` is MPICH's hydra (whose options some tests use)."""
    from tessera.runtime.world import find_mpiexec

    if mpi_missing():
        return True
    found = subprocess.run([find_mpiexec(), "--version"], capture_output=True, text=True)
    return "HYDRA" not in found.stdout


def report_outcome(check, path: str) -> None:
    """Run ``check()`` and write ``ok`` or its traceback to ``path`` (script side)."""
    try:
        check()
        result = "ok"
    except Exception:
        result = traceback.format_exc()
    with open(path, "w") as f:
        f.write(result)
