"""Which launcher started this process, read from the environment it leaves behind.

Every launcher tells its processes who they are through environment variables: MPICH's
Hydra (``PMI_RANK``/``PMI_SIZE``, ``MPI_LOCALNRANKS``), Open MPI (``OMPI_COMM_WORLD_*``),
PMIx (``PMIX_RANK``), Slurm's ``srun`` (``SLURM_PROCID``, ``SLURM_STEP_NUM_TASKS``), Flux
(``FLUX_TASK_RANK``, ``FLUX_JOB_SIZE``), Cray PALS (``PALS_RANKID``) and torchrun
(``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``). Reading them costs nothing and needs no MPI,
which is why they matter twice: the world of processes (tessera.runtime.world) compares what the
launcher says with what MPI says, so that a launcher whose processes MPI cannot see (srun
with an MPI that does not talk to Slurm, torchrun) is an error instead of N worlds of one
rank each; and the CPU thread count (tessera.runtime.threads) divides the node's cores among the
ranks on the node before any MPI is started.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# (launcher, rank variable, size variable, ranks-on-this-node variable), most specific
# first: mpiexec inside a Slurm allocation (Hydra starts its proxies with srun) leaves
# both PMI_* and SLURM_* behind, and the PMI ones describe the MPI processes; torchrun
# inside srun describes its own workers, of which srun's tasks are the agents.
SOURCES = (
    ("mpiexec (Hydra/PMI)", "PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS"),
    ("Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"),
    ("Flux", "FLUX_TASK_RANK", "FLUX_JOB_SIZE", None),
    ("srun", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", None),
    ("Cray PALS", "PALS_RANKID", None, "PALS_LOCAL_SIZE"),
    ("PMIx", "PMIX_RANK", None, None),
)

# torchrun's variable names are generic (RANK, WORLD_SIZE): believe them only together
# with one that torchrun (torch.distributed.elastic) always sets.
TORCHRUN_MARKERS = ("TORCHELASTIC_RUN_ID", "LOCAL_WORLD_SIZE", "GROUP_RANK")


@dataclass(frozen=True)
class Launch:
    """What the launcher says about this process. ``size`` is None where the launcher's
    variables do not carry it (PMIx alone, Cray PALS)."""

    launcher: str
    rank: int
    size: int | None
    variables: tuple[str, ...]  # the variables this was read from, as NAME=value

    def describe(self) -> str:
        of = f" of {self.size}" if self.size is not None else ""
        return f"{self.launcher} started it as rank {self.rank}{of} ({', '.join(self.variables)})"


def detect(environ=None) -> Launch | None:
    """The launcher that started this process, or None when none did (run alone)."""
    env = os.environ if environ is None else environ
    for launcher, rank_var, size_var, _ in SOURCES:
        if rank_var not in env:
            continue
        if launcher == "torchrun" and not any(m in env for m in TORCHRUN_MARKERS):
            continue
        rank = _int(env, rank_var)
        size = _int(env, size_var) if size_var else None
        if rank is None:
            continue
        names = [v for v in (rank_var, size_var) if v and v in env]
        return Launch(launcher, rank, size, tuple(f"{v}={env[v]}" for v in names))
    return None


def ranks_on_node(environ=None) -> int | None:
    """How many ranks the launcher put on this node, where its variables say so."""
    env = os.environ if environ is None else environ
    launch = detect(env)
    if launch is None:
        return None
    for launcher, _, _, local_var in SOURCES:
        if launcher == launch.launcher and local_var:
            return _int(env, local_var)
    return None


def in_slurm_allocation(environ=None) -> bool:
    """Inside ``salloc``/``sbatch`` (where ``srun`` starts the job's tasks)."""
    env = os.environ if environ is None else environ
    return "SLURM_JOB_ID" in env or "SLURM_JOBID" in env


def _int(env, name: str) -> int | None:
    try:
        return int(env[name])
    except (KeyError, ValueError):
        return None
