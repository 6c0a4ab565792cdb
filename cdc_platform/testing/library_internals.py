"""Every private name of a library that the tests read, in one place (the engine's own are in
:mod:`cdc_platform.source.library_internals`).

Some claims can only be checked inside a library, which offers no public way to look:

* the settings a PySpark session builder holds before it starts anything
  (``SparkSession.Builder._options``): what the platform configures, without a JVM;
* argparse's subcommands and flags of a parser (``_actions``, ``_SubParsersAction``): the
  README's command table is checked against them;
* whether pymysql requires TLS or only prefers it (``Connection._ssl_required``);
* mysql-replication's event filter (``BinLogStreamReader._allowed_event_list``): the
  events its packet parser decodes for a given set, as the binlog reader asks for them.

An upgrade that moves one of them is named by :func:`missing_internals` (a unit test runs
it), not found as an AttributeError inside a test that claims something else.
"""

from __future__ import annotations

import argparse
from typing import Any

import pymysql
from pymysqlreplication import BinLogStreamReader
from pyspark.sql import SparkSession

__all__ = [
    "builder_options",
    "library_event_filter",
    "missing_internals",
    "option_strings",
    "ssl_required",
    "subcommands",
]

_BUILDER_OPTIONS = "_options"
_ACTIONS = "_actions"
_SUBPARSERS = "_SubParsersAction"
_SSL_REQUIRED = "_ssl_required"
_EVENT_FILTER = "_allowed_event_list"


def builder_options(builder: SparkSession.Builder) -> dict[str, str]:
    """The settings ``builder`` would start its session with (keys as given to ``config``)."""
    return dict(getattr(builder, _BUILDER_OPTIONS))


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """``parser``'s subcommands by name (empty when it has none)."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in getattr(parser, _ACTIONS):
        if isinstance(action, getattr(argparse, _SUBPARSERS)):
            found.update(action.choices)
    return found


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every flag ``parser`` takes (``-h``, ``--help`` included)."""
    return [flag for action in getattr(parser, _ACTIONS) for flag in action.option_strings]


def ssl_required(connection: pymysql.connections.Connection[Any]) -> bool:
    """Whether ``connection`` refuses a server without TLS (not only prefers TLS)."""
    return bool(getattr(connection, _SSL_REQUIRED))


def library_event_filter(only_events: Any) -> Any:
    """The event classes mysql-replication's parser decodes for ``only_events`` (its reader's
    own filter; the method uses no state of the reader)."""
    return getattr(BinLogStreamReader, _EVENT_FILTER)(None, only_events, None, False)


def missing_internals() -> list[str]:
    """What of the above the installed libraries no longer have, each named with its owner
    (empty: they are all there)."""
    missing: list[str] = []
    if not hasattr(SparkSession.Builder(), _BUILDER_OPTIONS):
        missing.append(f"pyspark: SparkSession.Builder.{_BUILDER_OPTIONS}")
    if not hasattr(argparse.ArgumentParser(), _ACTIONS):
        missing.append(f"argparse: ArgumentParser.{_ACTIONS}")
    if not isinstance(getattr(argparse, _SUBPARSERS, None), type):
        missing.append(f"argparse: {_SUBPARSERS}")
    if not hasattr(pymysql.connections.Connection(defer_connect=True), _SSL_REQUIRED):
        missing.append(f"pymysql: Connection.{_SSL_REQUIRED}")
    if not callable(getattr(BinLogStreamReader, _EVENT_FILTER, None)):
        missing.append(f"mysql-replication: BinLogStreamReader.{_EVENT_FILTER}")
    return missing
