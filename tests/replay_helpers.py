"""A real repro pack to replay, and crafted variants of it (tests/test_replay_*.py)."""

from __future__ import annotations

import io
import zipfile

import numpy as np

import tessera
from tessera import f32, kernel, mut, tile
from tessera.observe import record
from tessera.observe.repro import pack


@kernel
def double(x: f32[n], y: mut[f32[n]], alpha: f32):
    i = tile.linear_id()
    y[i] = alpha * x[i]


def made_here(tmp_path) -> tuple:
    """A pack of a recorded launch of ``double``, sealed by this user: (path, its files)."""
    x, y = np.arange(16, dtype=np.float32), np.zeros(16, np.float32)
    with tessera.config(target="cpu", crash_dir=str(tmp_path / "crashes")):
        capture = record(double, 16, x, y, 3.0)
    path = pack(capture, tmp_path / "repro.zip")
    with zipfile.ZipFile(path) as z:
        return path, {name: z.read(name) for name in z.namelist()}


def crafted(tmp_path, files: dict, name: str = "crafted.zip", **changes) -> object:
    """A zip of ``files`` with ``changes`` (file name -> bytes, or None to leave it out)."""
    path = tmp_path / name
    with zipfile.ZipFile(path, "w") as z:
        for member, data in {**files, **changes}.items():
            if data is not None:
                z.writestr(member, data)
    return path


def npz(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def marker_kernel(marker) -> bytes:
    """A kernel.py that leaves ``marker`` behind when it runs (it must not run)."""
    return (
        f"open({str(marker)!r}, 'w').close()\n"
        "from tessera import f32, kernel, mut, tile\n"
        "@kernel\n"
        "def double(x: f32[n], y: mut[f32[n]], alpha: f32):\n"
        "    i = tile.linear_id()\n"
        "    y[i] = alpha * x[i]\n"
    ).encode()
