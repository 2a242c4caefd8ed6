"""PyTorch tensors in a kernel and in a collective, without copies (docs/targets.md,
"PyTorch and JAX"). Needs PyTorch (``pip install torch``); without it, it says so.

    python examples/torch_arrays.py
"""

from __future__ import annotations

import importlib.util

import numpy as np

from tessera import bf16, dist, f32, kernel, mut, tile


@kernel
def scale_into(x: bf16[n], y: mut[f32[n]], alpha: f32):
    i = tile.linear_id()
    if i < n:
        y[i] = alpha * x[i]


def main() -> None:
    import torch

    x = torch.linspace(0, 1, 8, dtype=torch.bfloat16)
    y = torch.empty(8)  # float32: the kernel writes into its memory
    scale_into[8](x, y, 2.0)

    w = torch.zeros(8, requires_grad=True)  # refused as it is: autograd cannot see kernels
    scale_into[8](x, w.detach(), 2.0)  # the same memory, without autograd

    dist.Mesh(axes=("dp",), shape=(dist.size(),))
    total = dist.all_reduce(y)  # a new torch.Tensor

    expected = 2 * x.float().numpy() * dist.size()
    np.testing.assert_array_equal(total.numpy(), expected)
    np.testing.assert_array_equal(w.detach().numpy(), 2 * x.float().numpy())
    print(f"scale_into wrote PyTorch tensors in place; all_reduce gave a {type(total).__name__}")


if __name__ == "__main__":
    if importlib.util.find_spec("torch") is None:
        print("PyTorch is not installed (pip install torch); nothing to show")
    else:
        main()
