"""The Hopper instruction texts of isa/wgmma.py, isa/tma.py and isa/mbarrier.py, put into
small PTX kernels and assembled by ptxas (nvJitLink) for sm_90a: they are instructions the
assembler takes, with the operands as the tables give them (no GPU needed)."""

from __future__ import annotations

import pytest

from tessera.errors import TesseraError
from tessera.kernel.targets.cuda.isa import mbarrier, tma, wgmma

toolchain = pytest.importorskip("tessera.kernel.targets.cuda.toolchain")
pytest.importorskip("cuda.bindings.nvjitlink")

HEADER = ".version 8.0\n.target {arch}\n.address_size 64\n"


def _wgmma_kernel(n: int, dtype: str, acc: str, arch: str = "sm_90a") -> str:
    kind, reg = ("f", ".f32") if acc == "f32" else ("r", ".b32")
    count = n // 2 if acc != "f16" else n // 4  # f16 accumulators: two per register
    names = ", ".join(f"%{kind}{i}" for i in range(count))
    text = wgmma.instruction(n, dtype, acc)
    text = text.replace("{d...}", "{" + names + "}").replace("descA", "%rd1")
    text = text.replace("descB", "%rd2")
    return (
        HEADER.format(arch=arch)
        + f"""
.visible .entry probe(.param .u64 out) {{
  .reg {reg} %{kind}<{count + 1}>;
  .reg .b64 %rd<4>;
  .reg .pred p;
  mov.b64 %rd1, {wgmma.k_major(0, 64, 128).encode()};
  mov.b64 %rd2, {wgmma.k_major(8192, 64, 128).encode()};
  setp.eq.u32 p, 1, 1;
  wgmma.fence.sync.aligned;
  {text}
  wgmma.commit_group.sync.aligned;
  wgmma.wait_group.sync.aligned 0;
  ld.param.u64 %rd3, [out];
  st.global{reg} [%rd3], %{kind}0;
  ret;
}}
"""
    )


@pytest.mark.parametrize(
    "n, dtype, acc",
    [
        (128, "f16", "f32"),
        (256, "bf16", "f32"),
        (64, "tf32", "f32"),
        (64, "e4m3", "f32"),
        (32, "s8", "s32"),
        (64, "f16", "f16"),
    ],
)
def test_every_wgmma_form_assembles_for_sm_90a(n, dtype, acc):
    cubin, log = toolchain.link([_wgmma_kernel(n, dtype, acc)], "sm_90a")
    assert cubin[:4] == b"\x7fELF"
    assert "0 bytes spill" in log or "spill" not in log


def test_plain_sm_90_refuses_wgmma():
    with pytest.raises(TesseraError, match="ptxas failed for sm_90"):
        toolchain.link([_wgmma_kernel(64, "f16", "f32", arch="sm_90")], "sm_90")


def test_the_ring_instructions_assemble_for_sm_90a():
    box = tma.load_ptx(2, "smem", "%rd1", ["%r1", "%r2"], "bar")
    body = "\n  ".join(
        [
            mbarrier.PTX["init"].format(bar="bar", count=1),
            tma.FENCE_PROXY_ASYNC,
            mbarrier.PTX["arrive_expect_tx"].format(bar="bar", nbytes=16384),
            box,
            "WAIT:",
            mbarrier.PTX["try_wait_parity"].format(pred="p", bar="bar", parity=0),
            "@!p bra WAIT;",
            mbarrier.PTX["arrive"].format(bar="bar"),
        ]
    )
    ptx = (
        HEADER.format(arch="sm_90a")
        + f"""
.shared .align 1024 .b8 smem[16384];
.shared .align 8 .b64 bar;
.visible .entry ring(.param .u64 tmap) {{
  .reg .b64 %rd<2>;
  .reg .b32 %r<3>;
  .reg .pred p;
  ld.param.u64 %rd1, [tmap];
  mov.u32 %r1, 0;
  mov.u32 %r2, 0;
  {body}
  ret;
}}
"""
    )
    cubin, _ = toolchain.link([ptx], "sm_90a")
    assert cubin[:4] == b"\x7fELF"
