"""The distributed surface: ``from tessera import dist``.

    mesh = dist.Mesh(axes=("dp", "tp"), shape=(2, 2))
    total = dist.all_reduce(local, axis="dp")

Re-exports only; the logic lives in tessera/mesh/.
"""

from .mesh import *  # noqa: F403 - the surface is mesh's public names, listed once there
from .mesh import __all__  # noqa: F401
