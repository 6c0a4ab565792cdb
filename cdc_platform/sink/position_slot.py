"""The resume position as one integer, kept where log cleanup cannot take it.

A commit's resume position is in its ``commitInfo`` (dropped by log cleanup) and on its last
row, but a commit without rows (filtered traffic, an idle checkpoint, an empty snapshot
segment) has no row: once cleanup removed its ``commitInfo``, recovery would fall back to the
last row's older position, which the server may have purged by then. So every commit also
carries the app transaction ``<destination>#position``, whose version Delta keeps in every
checkpoint forever: the binlog file's number and the offset in one 63-bit integer.

Only a plain position fits: a position inside a transaction (``skip_events``), one with XA
transactions prepared before it, or a file name without a number gets 0 (nothing kept), and
recovery then uses the last row, as before. The file's name is rebuilt from the last row's
(same base name and width); GTID state is not kept (a MariaDB source fills it in from the
file/position when the reader starts).
"""

from __future__ import annotations

import re
from dataclasses import replace

from cdc_platform.events import ResumePosition

__all__ = ["NO_SLOT", "decode_slot", "encode_slot", "slot_app_id"]

NO_SLOT = 0
"""The slot of a position that does not fit (see the module docstring)."""

_OFFSET_BITS = 40
"""Offsets below 1 TiB; file numbers below 2**23."""
_FILE_NUMBER = re.compile(r"^(.*?)(\d+)$")


def slot_app_id(destination: str) -> str:
    """The app transaction whose version is the newest commit's position slot."""
    return f"{destination}#position"


def encode_slot(resume: ResumePosition) -> int:
    """``resume`` as one integer, or :data:`NO_SLOT` when it does not fit."""
    match = _FILE_NUMBER.match(resume.file)
    if match is None or resume.skip_events or resume.xa_prepared:
        return NO_SLOT
    number = int(match.group(2))
    if not 0 <= resume.pos < 1 << _OFFSET_BITS or number >= 1 << (62 - _OFFSET_BITS):
        return NO_SLOT
    return (number << _OFFSET_BITS) | resume.pos


def decode_slot(slot: int | None, row: ResumePosition) -> ResumePosition | None:
    """The position ``slot`` names, in the binlog of ``row`` (the last row's position: its
    file's base name and width, its server); None when the slot keeps nothing newer."""
    match = _FILE_NUMBER.match(row.file)
    if slot is None or slot == NO_SLOT or match is None:
        return None
    prefix, digits = match.groups()
    number, pos = slot >> _OFFSET_BITS, slot & ((1 << _OFFSET_BITS) - 1)
    found = ResumePosition(f"{prefix}{number:0{len(digits)}d}", pos, server=row.server)
    if not row.binlog_position < found.binlog_position:
        return None
    return replace(found, filters=row.filters)
