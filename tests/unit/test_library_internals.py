"""The private internals of mysql-replication and pymysql the source relies on are there."""

from __future__ import annotations

import pathlib
import re

import pymysql
import pytest
from pymysqlreplication import BinLogStreamReader

from cdc_platform.source import library_internals
from cdc_platform.source.library_internals import missing_internals
from cdc_platform.testing.library_internals import missing_internals as missing_test_internals

pytestmark = pytest.mark.unit


def test_the_installed_libraries_have_every_internal_the_source_uses() -> None:
    missing = missing_internals()
    assert not missing, (
        "a library upgrade moved internals the source relies on (supported: mysql-replication "
        f"1.0.17, PyMySQL 1.1-1.x; docs/source.md): {', '.join(missing)}"
    )


def test_a_moved_method_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(pymysql.connections.Connection, "_read_packet")
    assert missing_internals() == ["pymysql: Connection._read_packet"]


def test_a_renamed_reader_attribute_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    original = BinLogStreamReader.__init__

    def init_without_checksum(self: BinLogStreamReader, *args: object, **kwargs: object) -> None:
        original(self, *args, **kwargs)
        del self._BinLogStreamReader__use_checksum

    monkeypatch.setattr(BinLogStreamReader, "__init__", init_without_checksum)
    mangled = "_BinLogStreamReader__use_checksum"
    assert missing_internals() == [f"mysql-replication: BinLogStreamReader.{mangled}"]


def test_no_other_engine_module_names_these_internals() -> None:
    """Only :mod:`library_internals` spells them (a grep would miss a new use elsewhere)."""

    root = pathlib.Path(library_internals.__file__).parents[1]
    uses = re.compile(
        r"_BinLogStreamReader__|\._read_packet\b|_create_ssl_ctx|(?<!self)\._sock\b|\"_sock\""
    )
    users = sorted(
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if path.name != "library_internals.py" and uses.search(path.read_text())
    )
    assert users == []


def test_the_installed_libraries_have_every_internal_the_tests_read() -> None:
    missing = missing_test_internals()
    assert not missing, f"a library upgrade moved internals the tests read: {', '.join(missing)}"


def test_a_moved_internal_the_tests_read_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(BinLogStreamReader, "_allowed_event_list")
    assert missing_test_internals() == ["mysql-replication: BinLogStreamReader._allowed_event_list"]
