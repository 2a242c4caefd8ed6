"""``tessera aot``: the command line of ahead-of-time compiles (ABI.md §1)."""

from __future__ import annotations

from pathlib import Path

from aot_build import need_cc

from tessera.cli import main

KERNELS = str(Path(__file__).parent / "aot_kernels.py")


def test_the_command_writes_the_module_its_metadata_and_library(tmp_path, capsys):
    need_cc()
    status = main(
        [
            "aot",
            f"{KERNELS}:block_sum",
            f"{KERNELS}:linear_relu",
            "--target",
            "cpu",
            "--constexpr",
            "BM=32",
            "--constexpr",
            "BN=32",
            "--constexpr",
            "BK=16",
            "--layout",
            "contiguous",
            "-o",
            str(tmp_path),
            "--name",
            "blocksum",
            "--lib",
            "--metadata",
        ]
    )
    assert status == 0
    printed = capsys.readouterr().out.split()
    for name in (
        "blocksum.h",
        "blocksum.c",
        "blocksum_cpu.o",
        "tessera_rt.c",
        "blocksum.yaml",
        "libblocksum.a",
    ):
        assert str(tmp_path / name) in printed
    yaml = (tmp_path / "blocksum.yaml").read_text()
    assert "name: linear_relu\n" in yaml and "tile: {M: 32, N: 32, K: 16}" in yaml


def test_a_missing_file_is_a_message_and_status_1(tmp_path, capsys):
    assert main(["aot", "nowhere.py:k", "--target", "cpu", "-o", str(tmp_path)]) == 1
    assert "there is no file nowhere.py" in capsys.readouterr().err


def test_a_kernel_error_is_reported_not_raised(tmp_path, capsys):
    status = main(["aot", f"{KERNELS}:linear_relu", "--target", "cpu", "-o", str(tmp_path)])
    assert status == 1
    assert "constexpr parameter 'BM' has no value" in capsys.readouterr().err
