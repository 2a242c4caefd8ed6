"""``tessera --help`` and each command's ``--help`` are plain text for users: no reST
markup (double backquotes, ``:func:`` roles, backquoted code) and no internal module
names (``tessera.runtime.runner``)."""

from __future__ import annotations

import re

import pytest

from tessera.cli import main

COMMANDS = (
    "",
    "info",
    "demo",
    "cache",
    "tune",
    "run",
    "bench",
    "pack-repro",
    "replay",
    "trace",
    "metrics",
)
MARKUP = re.compile(r"``|:[a-z]+:`|`[^`\n]+`")
MODULE = re.compile(r"\btessera\.[a-z_]+")


@pytest.mark.parametrize("command", COMMANDS)
def test_help_is_plain_text_without_markup_or_module_names(command, capsys):
    argv = [command, "--help"] if command else ["--help"]
    try:
        status = main(argv)  # tessera run parses its own options and returns
    except SystemExit as stop:  # argparse's --help exits
        status = stop.code
    assert status in (0, None)
    text = capsys.readouterr().out
    assert "usage:" in text
    assert not MARKUP.search(text), MARKUP.search(text).group()
    assert not MODULE.search(text), MODULE.search(text).group()
