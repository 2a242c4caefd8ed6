"""Writing the compiler's stages to files: ``TESSERA_DUMP`` and ``TESSERA_DUMP_DIR``.

A stage is a pass of the pipeline (the IR after it; ``ir`` is the IR after all of them)
or a stage a target adds (``cpu``: the generated Python; ``meta``: a CUDA kernel's
metadata as YAML). ``TESSERA_DUMP=ir,regions,cpu`` writes those, one file per kernel,
specialisation and stage, into ``TESSERA_DUMP_DIR`` when a specialisation is built.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..config import get as setting
from ..errors import TesseraError

# stages that layers above the kernel write (the operator layer's graph passes)
EXTRA_STAGES: list[str] = []


def named_dumps() -> list[str]:
    """The stage names ``TESSERA_DUMP`` lists, as written."""
    return [s.strip() for s in setting("dump").split(",") if s.strip()]


def requested_dumps(known: tuple[str, ...]) -> list[str]:
    """The stages of ``known`` that ``TESSERA_DUMP`` names (a name that no layer knows is
    an error)."""
    stages = named_dumps()
    for s in stages:
        if s not in known and s not in EXTRA_STAGES:
            choices = ", ".join((*known, *EXTRA_STAGES))
            raise TesseraError(f"TESSERA_DUMP names unknown stage {s!r}; choose from {choices}")
    return [s for s in stages if s in known]


def write(kernel: str, number: int, stage: str, content: object) -> Path:
    """Write one stage of a newly built specialisation; returns the file."""
    if isinstance(content, dict):
        return _write(f"{kernel}.{number}.{stage}.yaml", to_yaml(content))
    return _write(f"{kernel}.{number}.{stage}.txt", str(content))


def to_yaml(value, indent: int = 0) -> str:
    """The small YAML subset metadata needs: nested mappings, flow lists, scalars."""
    lines = []
    for key, item in value.items():
        pad = "  " * indent
        if isinstance(item, dict):
            lines.append(f"{pad}{key}:")
            lines.append(to_yaml(item, indent + 1).rstrip("\n"))
        elif isinstance(item, (list, tuple)):
            lines.append(f"{pad}{key}: [{', '.join(str(v) for v in item)}]")
        else:
            lines.append(f"{pad}{key}: {item}")
    return "\n".join(lines) + "\n"


def _write(name: str, text: str) -> Path:
    folder = Path(setting("dump_dir") or os.getcwd())
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path
