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
        if s not in TEXT_STAGES:
            raise TesseraError(
                f"TESSERA_DUMP names unknown stage {s!r}; choose from {', '.join(TEXT_STAGES)}"
            )
    return stages


def dump(kernel: str, number: int, program) -> list[Path]:
    """Write the requested stages of a newly built specialisation; returns the files."""
    stages = requested_dumps()
    if not stages:
        return []
    folder = Path(setting("dump_dir") or os.getcwd())
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for stage in stages:
        path = folder / f"{kernel}.{number}.{stage}.txt"
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(stage_text(program, stage))
        os.replace(tmp, path)
        written.append(path)
    return written
