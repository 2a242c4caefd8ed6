"""The compiler's stages by name: ``k.inspect(stage, ...)`` and ``TESSERA_DUMP``.

``ir`` (the typed kernel IR), ``regions`` (the region schedule of a grouped kernel) and
``cpu`` (the generated Python) are the text of a specialisation; ``llvm`` and ``asm``
come from compiling it. ``TESSERA_DUMP=ir,regions,cpu`` writes the first three, one file
per kernel, specialisation and stage, into ``TESSERA_DUMP_DIR`` when a specialisation is
built.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..config import get as setting
from ..errors import TesseraError
from .ir_print import format_kernel, format_schedule

STAGES = ("ir", "regions", "cpu", "llvm", "asm")
TEXT_STAGES = ("ir", "regions", "cpu")
DUMPS = TEXT_STAGES + ("meta",)  # meta: CUDA kernel metadata, as YAML


def stage_text(program, stage: str) -> str:
    """The text of ``stage`` for a built CPU program (``llvm``/``asm`` compile it)."""
    spec = program.spec
    if stage == "ir":
        return format_kernel(spec.kir)
    if stage == "regions":
        if spec.schedule is None:
            return "flat kernel: one region, run once per tile\n"
        return format_schedule(spec.schedule)
    if stage == "cpu":
        return program.source
    raise TesseraError(f"unknown stage {stage!r}; choose one of {', '.join(STAGES)}")


def requested_dumps() -> list[str]:
    stages = [s.strip() for s in setting("dump").split(",") if s.strip()]
    for s in stages:
        if s not in DUMPS:
            raise TesseraError(
                f"TESSERA_DUMP names unknown stage {s!r}; choose from {', '.join(DUMPS)}"
            )
    return stages


def dump(kernel: str, number: int, program) -> list[Path]:
    """Write the requested stages of a newly built specialisation; returns the files."""
    stages = [s for s in requested_dumps() if s in TEXT_STAGES]
    return [
        _write(f"{kernel}.{number}.{stage}.txt", stage_text(program, stage)) for stage in stages
    ]


def dump_metadata(kernel: str, number: int, metadata) -> Path | None:
    """With ``meta`` in TESSERA_DUMP: write a CUDA specialisation's metadata as YAML.
    ``metadata`` is called only then (it compiles a cubin)."""
    if "meta" not in requested_dumps():
        return None
    return _write(f"{kernel}.{number}.meta.yaml", to_yaml(metadata()))


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
