"""The passes over the kernel IR. Shared ones run for every target; a target may list its
own (``Target.passes``). ``pipeline.py`` holds the one list that orders them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Pass:
    """A named pass: ``run(spec, constexprs)`` rewrites or annotates ``spec.kir``."""

    name: str
    run: Callable
    doc: str = ""
