"""SASS, the GPU's own instructions, of a kernel's cubin (``k.inspect("sass", ...)``).

ptxas turns PTX into SASS; what a loop costs is decided there (how many integer
instructions a k-tile of a GEMM loop spends beside its ``HMMA``, whether anything went to
local memory). NVIDIA's disassembler ``nvdisasm`` reads a cubin without a GPU; it comes
with the CUDA toolkit and as the pip wheel ``nvidia-cuda-nvdisasm`` (the test extras
install it). :func:`loops` and :func:`counts` read its text the way the project's SASS
checks do: each loop's body (a labelled block that branches back to its own label) and
its instructions by opcode.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass

from ....errors import TesseraError

_INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;")
_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_BRANCH = re.compile(r"\bBRA\b.*`\((\.L_x_\d+)\)")


def nvdisasm() -> str | None:
    """The path of ``nvdisasm``: on ``PATH``, else in an installed ``nvidia-cuda-nvdisasm``
    wheel, else None."""
    found = shutil.which("nvdisasm")
    if found:
        return found
    spec = importlib.util.find_spec("nvidia")
    for root in spec.submodule_search_locations if spec is not None else ():
        for sub in sorted(os.listdir(root)):
            path = os.path.join(root, sub, "bin", "nvdisasm")
            if os.access(path, os.X_OK):
                return path
    return None


def disassemble(cubin: bytes, kernel: str) -> str:
    """The SASS text of ``cubin`` (its code sections), by ``nvdisasm``."""
    tool = nvdisasm()
    if tool is None:
        raise TesseraError(
            f"k.inspect('sass') of kernel '{kernel}' needs NVIDIA's nvdisasm: install the "
            "CUDA toolkit or `pip install nvidia-cuda-nvdisasm` (no GPU is needed)"
        )
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        done = subprocess.run([tool, "-c", path], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise TesseraError(
            f"nvdisasm could not read the cubin of kernel '{kernel}': {done.stderr.strip()}"
        )
    return done.stdout


@dataclass(frozen=True)
class Block:
    """A labelled block of SASS: its label and its instructions' text, in order."""

    label: str
    instructions: tuple[str, ...]

    @property
    def is_loop(self) -> bool:
        """Whether the block branches back to its own label (a loop's body; what follows
        that branch in the block is the loop's exit)."""
        return any(
            (m := _BRANCH.search(text)) is not None and m.group(1) == self.label
            for text in self.instructions
        )


def blocks(sass: str) -> list[Block]:
    """The labelled blocks of ``sass`` (instructions before the first label: ``""``)."""
    out: list[Block] = []
    label, body = "", []
    for line in sass.splitlines():
        found = _LABEL.match(line)
        if found:
            out.append(Block(label, tuple(body)))
            label, body = found.group(1), []
            continue
        inst = _INSTRUCTION.search(line)
        if inst:
            body.append(inst.group(1))
    out.append(Block(label, tuple(body)))
    return [b for b in out if b.instructions]


def loops(sass: str) -> list[Block]:
    """The blocks of ``sass`` that are loop bodies."""
    return [b for b in blocks(sass) if b.is_loop]


def opcode(text: str) -> str:
    """An instruction's opcode without its guard and modifiers: ``@!P0 HMMA.16816.F32
    R4, ...`` → ``HMMA``."""
    words = text.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else ""


def counts(block: Block) -> Counter:
    """A block's instructions by opcode."""
    return Counter(opcode(text) for text in block.instructions)


def local_memory(sass: str) -> list[str]:
    """The instructions of ``sass`` that touch local memory (spills: ``LDL``/``STL``)."""
    return [text for b in blocks(sass) for text in b.instructions if opcode(text) in ("LDL", "STL")]
