"""Run under ``mpiexec -n 2``: collectives on PyTorch tensors and JAX arrays move the
ranks' values and give back the caller's kind; writes ``ok`` (or the failure) to
``<folder>/rank<r>.txt``."""

from __future__ import annotations

import sys

import jax.numpy as jnp
import numpy as np
import torch
from mpi_run import report_outcome

from tessera import dist


def check() -> None:
    dist.Mesh(axes=("dp",), shape=(dist.size(),))
    r, n = dist.rank(), dist.size()
    total = dist.all_reduce(torch.full((3,), float(r + 1), dtype=torch.bfloat16))
    assert total.dtype == torch.bfloat16 and total.tolist() == [n * (n + 1) / 2] * 3
    gathered = dist.all_gather(torch.tensor([r], dtype=torch.int64))
    assert isinstance(gathered, torch.Tensor) and gathered.tolist() == list(range(n))
    out = torch.zeros(2)
    assert dist.broadcast(torch.full((2,), float(r)), root=n - 1, out=out) is out
    assert out.tolist() == [float(n - 1)] * 2
    summed = dist.all_reduce(jnp.full(2, r + 1, jnp.float32), op="max")
    assert not isinstance(summed, np.ndarray) and summed.tolist() == [float(n)] * 2
    coalesced = dist.all_reduce_coalesced([torch.ones(2), torch.ones((1, 2))])
    assert [c.tolist() for c in coalesced] == [[n, n], [[n, n]]]


if __name__ == "__main__":
    report_outcome(check, f"{sys.argv[1]}/rank{dist.rank()}.txt")
