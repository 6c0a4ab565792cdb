"""README's command table names every subcommand of `cdc-platform` and every one of its
flags, so the README cannot fall behind the parser."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from cdc_platform.cli.parser import build_parser
from cdc_platform.testing.library_internals import option_strings, subcommands

pytestmark = pytest.mark.unit

README = Path(__file__).resolve().parents[2] / "README.md"


def _commands(
    parser: argparse.ArgumentParser, prefix: str = ""
) -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}
    for name, sub in subcommands(parser).items():
        nested = _commands(sub, f"{prefix}{name} ")
        found.update(nested or {f"{prefix}{name}": sub})
    return found


def test_every_command_and_flag_is_in_the_readme_table() -> None:
    table = README.read_text(encoding="utf-8").split("## Commands", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `cdc-platform ")]
    missing: list[str] = []
    for command, sub in _commands(build_parser()).items():
        mine = [row for row in rows if row.startswith(f"| `cdc-platform {command} ")]
        if not mine:
            missing.append(command)
            continue
        text = " ".join(mine)
        for flag in option_strings(sub):
            documented = re.search(rf"{re.escape(flag)}\b", text) is not None
            if flag.startswith("--") and flag != "--help" and not documented:
                missing.append(f"{command} {flag}")
    assert not missing, f"README's command table lacks: {missing}"
