"""The serialized module image (``.tsrm``) that ``tessera_rt.c`` loads (ABI.md §4).

Little-endian throughout. A 16-byte prefix: the magic ``TSRM``, the ABI major and minor
(u16 each), the CRC-32 of the body and the body's size (u32 each). The body:

* ``str`` module name, ``str`` versions (Tessera, Numba, llvmlite), ``u32`` kernel count;
* per kernel: ``str`` name; ``u32`` flags (1: grouped), grid rank, the three ``tile=``
  extents (1 past its dims; 0 for a flat kernel), static shared bytes, the dynamic shared
  array's call-argument index (``i32``, -1: none) and element size; ``u32`` parameter
  count, per parameter ``str`` name, ``u8`` kind (0 array, 1 scalar), DLPack type code,
  bits, ``mut``, ``u32`` dims, per dim an ``i64`` (>= 0 a literal extent, -1 - k size
  symbol k); ``u32`` symbol count and ``str`` names; ``str`` metadata JSON; ``u32``
  specialisation count, per specialisation ``u8`` target (0 cpu, 1 cuda), layout class (0
  contiguous, 1 strided), two zero bytes, ``str`` arch, ``str`` entry symbol, ``i32`` blob
  (-1: none), ``u32`` CPU entry index, block threads, dynamic shared bytes, slot count,
  per slot a ``u8`` kind (:data:`SLOT_KINDS`), then ``u32`` count and the array positions
  whose 4-byte alignment is an extra argument (CUDA's 16-bit async copies);
* ``u32`` blob count, per blob ``str`` arch, ``u32`` kind (0 cubin, 1 PTX), ``u32`` size
  and the bytes, padded to 8.

A ``str`` is a ``u32`` length, the bytes and a NUL (not counted). The slots of a kernel
are the values its compiled code takes, in its order: per array ``meminfo``, ``parent``,
``nitems``, ``itemsize``, ``data``, ``shape...``, ``strides...`` (bytes); per scalar one;
then the size symbols, then one per grid axis; a CPU entry's chunk index comes before them
and its chunk count after, outside the slots.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field

MAGIC = b"TSRM"
ABI_MAJOR, ABI_MINOR = 1, 0
SLOT_KINDS = {"ptr": 1, "i64": 2, "i32": 3, "i16": 4, "i8": 5, "f32": 6, "f64": 7, "b1": 8}
TARGETS = ("cpu", "cuda")
LAYOUTS = ("contiguous", "strided")
BLOB_KINDS = ("cubin", "ptx")


class ImageFormatError(ValueError):
    """Bytes that are not a module image this reader understands."""


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # "array" or "scalar"
    dtype: str  # Tessera's name: "f32", "bf16", ...
    dl_code: int  # DLPack's type code and bits
    bits: int
    mutable: bool = False
    dims: tuple = ()  # ints (literal extents) and str (size symbols)


@dataclass(frozen=True)
class Spec:
    target: str  # "cpu" or "cuda"
    layout: str  # "contiguous" or "strided"
    arch: str  # "" on the CPU
    entry: str  # the symbol the runtime calls or looks up
    slots: tuple[str, ...]  # SLOT_KINDS keys
    blob: int = -1  # the module's blob holding the cubin or PTX
    entry_index: int = 0  # the CPU entry's place in the linked entry table
    threads: int = 0  # a CUDA block's threads
    align: tuple[int, ...] = ()  # array positions passed as alignment flags too
    shared: int = 0  # CUDA: the dynamic shared bytes its code takes per block


@dataclass
class KernelEntry:
    name: str
    grouped: bool
    grid_rank: int
    tile: tuple[int, int, int]
    params: list[Param]
    symbols: list[str]
    metadata: dict
    specs: list[Spec] = field(default_factory=list)
    static_shared: int = 0
    dynamic_arg: int = -1  # the call argument sizing tshared.dynamic, -1: none
    dynamic_itemsize: int = 0


@dataclass(frozen=True)
class Blob:
    arch: str
    kind: str  # "cubin" or "ptx"
    data: bytes


@dataclass
class Module:
    name: str
    versions: str
    kernels: list[KernelEntry]
    blobs: list[Blob] = field(default_factory=list)
    abi: tuple[int, int] = (ABI_MAJOR, ABI_MINOR)

    def to_bytes(self) -> bytes:
        w = _Writer()
        w.text(self.name)
        w.text(self.versions)
        w.u32(len(self.kernels))
        for k in self.kernels:
            _write_kernel(w, k)
        w.u32(len(self.blobs))
        for b in self.blobs:
            w.text(b.arch)
            w.u32(BLOB_KINDS.index(b.kind))
            w.u32(len(b.data))
            w.raw(b.data)
            w.pad(8)
        body = bytes(w.out)
        prefix = MAGIC + struct.pack("<HHII", *self.abi, zlib.crc32(body), len(body))
        return prefix + body

    @classmethod
    def from_bytes(cls, data: bytes) -> Module:
        if len(data) < 16 or data[:4] != MAGIC:
            raise ImageFormatError("not a Tessera module image (no TSRM magic)")
        major, minor, crc, size = struct.unpack_from("<HHII", data, 4)
        body = data[16 : 16 + size]
        if len(body) != size:
            raise ImageFormatError(f"the image is truncated ({len(data)} of {16 + size} bytes)")
        if zlib.crc32(body) != crc:
            raise ImageFormatError("the image's CRC-32 does not match its contents")
        r = _Reader(body)
        module = cls(r.text(), r.text(), [], abi=(major, minor))
        module.kernels = [_read_kernel(r) for _ in range(r.u32())]
        for _ in range(r.u32()):
            arch, kind, n = r.text(), BLOB_KINDS[r.u32()], r.u32()
            module.blobs.append(Blob(arch, kind, r.raw(n)))
            r.pad(8)
        return module


def _write_kernel(w: _Writer, k: KernelEntry) -> None:
    w.text(k.name)
    for v in (int(k.grouped), k.grid_rank, *k.tile, k.static_shared):
        w.u32(v)
    w.i32(k.dynamic_arg)
    w.u32(k.dynamic_itemsize)
    w.u32(len(k.params))
    for p in k.params:
        w.text(p.name)
        w.raw(bytes([0 if p.kind == "array" else 1, p.dl_code, p.bits, int(p.mutable)]))
        w.u32(len(p.dims))
        for d in p.dims:
            w.i64(d if isinstance(d, int) else -1 - k.symbols.index(d))
    w.u32(len(k.symbols))
    for s in k.symbols:
        w.text(s)
    w.text(json.dumps(k.metadata, sort_keys=True))
    w.u32(len(k.specs))
    for s in k.specs:
        w.raw(bytes([TARGETS.index(s.target), LAYOUTS.index(s.layout), 0, 0]))
        w.text(s.arch)
        w.text(s.entry)
        w.i32(s.blob)
        for v in (s.entry_index, s.threads, s.shared, len(s.slots)):
            w.u32(v)
        w.raw(bytes(SLOT_KINDS[kind] for kind in s.slots))
        w.pad(4)
        w.u32(len(s.align))
        for a in s.align:
            w.u32(a)


def _read_kernel(r: _Reader) -> KernelEntry:
    name = r.text()
    grouped, rank, t0, t1, t2, static = (r.u32() for _ in range(6))
    dynamic_arg, dynamic_itemsize = r.i32(), r.u32()
    raw_params = []
    for _ in range(r.u32()):
        pname = r.text()
        kind, code, bits, mut = r.raw(4)
        dims = [r.i64() for _ in range(r.u32())]
        raw_params.append((pname, kind, code, bits, mut, dims))
    symbols = [r.text() for _ in range(r.u32())]
    params = [
        Param(
            pname,
            "array" if kind == 0 else "scalar",
            "",
            code,
            bits,
            bool(mut),
            tuple(d if d >= 0 else symbols[-1 - d] for d in dims),
        )
        for pname, kind, code, bits, mut, dims in raw_params
    ]
    metadata = json.loads(r.text())
    kernel = KernelEntry(
        name,
        bool(grouped),
        rank,
        (t0, t1, t2),
        params,
        symbols,
        metadata,
        [],
        static,
        dynamic_arg,
        dynamic_itemsize,
    )
    names = {v: k for k, v in SLOT_KINDS.items()}
    for _ in range(r.u32()):
        target, layout, _, _ = r.raw(4)
        arch, entry, blob = r.text(), r.text(), r.i32()
        entry_index, threads, shared, nslots = r.u32(), r.u32(), r.u32(), r.u32()
        slots = tuple(names[b] for b in r.raw(nslots))
        r.pad(4)
        align = tuple(r.u32() for _ in range(r.u32()))
        kernel.specs.append(
            Spec(
                TARGETS[target],
                LAYOUTS[layout],
                arch,
                entry,
                slots,
                blob,
                entry_index,
                threads,
                align,
                shared,
            )
        )
    return kernel


class _Writer:
    def __init__(self):
        self.out = bytearray()

    def u32(self, v: int) -> None:
        self.out += struct.pack("<I", v)

    def i32(self, v: int) -> None:
        self.out += struct.pack("<i", v)

    def i64(self, v: int) -> None:
        self.out += struct.pack("<q", v)

    def raw(self, b: bytes) -> None:
        self.out += b

    def text(self, s: str) -> None:
        data = s.encode()
        self.u32(len(data))
        self.out += data + b"\0"

    def pad(self, n: int) -> None:
        self.out += b"\0" * (-len(self.out) % n)


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def raw(self, n: int) -> bytes:
        if self.at + n > len(self.data):
            raise ImageFormatError("the image ends inside a record")
        out = self.data[self.at : self.at + n]
        self.at += n
        return out

    def u32(self) -> int:
        return struct.unpack("<I", self.raw(4))[0]

    def i32(self) -> int:
        return struct.unpack("<i", self.raw(4))[0]

    def i64(self) -> int:
        return struct.unpack("<q", self.raw(8))[0]

    def text(self) -> str:
        n = self.u32()
        out = self.raw(n + 1)
        if out[-1:] != b"\0":
            raise ImageFormatError("a string of the image is not NUL-terminated")
        return out[:-1].decode()

    def pad(self, n: int) -> None:
        self.raw(-self.at % n)
