"""The properties reader against Java's own: ``java.util.Properties.load`` (as Canal loads
its files) run by a real JVM over the unit tests' cases and Canal's shipped
``canal.properties`` and ``example/instance.properties``; every key and value must agree."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from cdc_platform.config.canal_import import import_canal
from cdc_platform.config.canal_properties import read_properties_file
from cdc_platform.config.java_properties import parse_properties
from tests.unit.test_java_properties import CASES

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).parent.parent / "fixtures"
DUMP = FIXTURES / "java" / "PropertiesDump.java"
SHIPPED = FIXTURES / "canal_shipped"


def _text(units: str) -> str:
    return "" if units == "-" else "".join(chr(int(u, 16)) for u in units.split(" "))


def java_reads(paths: list[Path]) -> dict[str, dict[str, str]]:
    """What Java's ``Properties.load`` reads from each file (one JVM for all)."""
    java = shutil.which("java")
    assert java is not None, "no java on PATH (scripts/setup.sh installs one)"
    modules = subprocess.run([java, "--list-modules"], capture_output=True, text=True, check=True)
    if "jdk.compiler" not in modules.stdout:
        pytest.skip("this Java has no compiler (a JRE): java cannot run PropertiesDump.java")
    done = subprocess.run(
        [java, str(DUMP), *map(str, paths)], capture_output=True, text=True, check=True
    )
    out: dict[str, dict[str, str]] = {}
    current: dict[str, str] = {}
    for line in done.stdout.splitlines():
        if line.startswith("file "):
            current = out.setdefault(line.removeprefix("file "), {})
        elif line.startswith("error "):
            current["<error>"] = line
        else:
            key, value = line.split("\t")
            current[_text(key)] = _text(value)
    return out


def test_the_reader_agrees_with_java_on_every_case(tmp_path: Path) -> None:
    paths = {}
    for index, (name, (raw, _)) in enumerate(sorted(CASES.items())):
        path = tmp_path / f"case{index}.properties"
        path.write_bytes(raw)
        paths[name] = path
    java = java_reads(list(paths.values()))
    for name, path in paths.items():
        ours = parse_properties(path.read_bytes().decode("iso-8859-1"))[0]
        assert ours == java[str(path)], name
        assert ours == CASES[name][1], name  # the unit test's expectation is Java's


def test_canals_shipped_files_read_as_java_reads_them_and_import(tmp_path: Path) -> None:
    files = [SHIPPED / "canal.properties", SHIPPED / "example" / "instance.properties"]
    java = java_reads(files)
    for path in files:
        ours = read_properties_file(path)
        assert ours.encoding == "utf-8"  # ASCII: the same text either way
        assert ours.values == java[str(path)], path
        assert len(ours.values) > 15
    result = import_canal(SHIPPED, tmp_path / "conf")
    assert result.errors == {}
    source = result.destinations["example"]["source"]
    assert (source["host"], source["port"], source["user"]) == ("127.0.0.1", 3306, "canal")
    assert result.destinations["example"]["start"] == {"mode": "latest"}
