"""Where an imported Canal destination starts and how it resumes: Canal's ``master.*``
position settings and ``canal.instance.gtidon``, written as what works on the source.

Canal resumes by GTID on MySQL and on MariaDB alike (it asks the server which it is). Here a
GTID start and ``resume_by: gtid`` work on MariaDB only: on MySQL the first start at a GTID
fails, and ``resume_by: gtid`` reads by file/position anyway. The import cannot ask the
server, but the GTID's own format tells (MariaDB ``domain-server-seq``, MySQL
``uuid:interval``):

* ``gtidon=true`` and a MariaDB ``master.gtid``: start after it, resume by GTID (as Canal);
* ``gtidon=true`` and a MySQL ``master.gtid``: resume by file/position; start at
  ``master.journal.name``/``position`` or ``master.timestamp`` when given (a note says the GTID
  was not used), else the destination is refused, saying what to set;
* ``gtidon=true`` and no ``master.gtid``: resume by file/position (right on both servers); a
  note says to set ``resume_by: gtid`` when the source is MariaDB.
"""

from __future__ import annotations

import re
import time
from typing import Any

from cdc_platform.config.canal_properties import LayeredProperties
from cdc_platform.errors import ConfigError

__all__ = ["start_and_resume"]

_MARIADB_GTID = re.compile(r"^\d+-\d+-\d+(,\d+-\d+-\d+)*$")
"""MariaDB's GTID list (as ``config/start.py`` accepts it); anything else here is MySQL's."""


def _timestamp(millis: int) -> str:
    seconds = millis / 1000.0
    whole = int(seconds)
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
    fraction = round((seconds - whole) * 1_000_000)
    return f"{text}.{fraction:06d}Z" if fraction else f"{text}Z"


def _position_start(props: LayeredProperties, name: str, notes: list[str]) -> dict[str, Any]:
    """The start Canal takes from ``master.journal.name``/``position``/``timestamp``."""
    journal = props.get("canal.instance.master.journal.name")
    position = props.number("canal.instance.master.position")
    stamp = props.number("canal.instance.master.timestamp")
    if journal:
        if position is not None and position > 0:
            return {"mode": "position", "file": journal, "pos": max(position, 4)}
        if stamp:
            notes.append(
                f"{name}: journal.name with a timestamp and no position: Canal searches that "
                "file by time; cdc-platform searches every binlog by time"
            )
            return {"mode": "timestamp", "timestamp": _timestamp(stamp)}
        notes.append(f"{name}: journal.name without a position: starts at its offset 4, as Canal")
        return {"mode": "position", "file": journal, "pos": 4}
    if position:
        notes.append(f"{name}: master.position without journal.name is ignored, as in Canal")
    if stamp:
        return {"mode": "timestamp", "timestamp": _timestamp(stamp)}
    return {"mode": "latest"}


def _mysql_gtid_start(
    props: LayeredProperties, name: str, gtid: str, notes: list[str]
) -> dict[str, Any]:
    """A start for a MySQL GTID set: the position settings beside it, or a refusal."""
    position_keys = ("journal.name", "timestamp")
    if not any(props.get(f"canal.instance.master.{key}") for key in position_keys):
        raise ConfigError(
            f"{props.where('canal.instance.master.gtid')} is a MySQL GTID set ({gtid}); "
            "cdc-platform starts at a GTID on MariaDB only: set canal.instance.master."
            "journal.name and master.position to that GTID's binlog position (SHOW BINLOG "
            "EVENTS, mysqlbinlog) or master.timestamp, and import again"
        )
    start = _position_start(props, name, notes)
    notes.append(
        f"{name}: master.gtid {gtid} is a MySQL GTID set: cdc-platform starts at a GTID on "
        f"MariaDB only, so this destination starts at {start} from the position settings "
        "instead (check that it is the GTID's position)"
    )
    return start


def start_and_resume(
    props: LayeredProperties, name: str, notes: list[str]
) -> tuple[dict[str, Any], str | None]:
    """The ``start`` section and ``source.resume_by`` (None: the default, file/position) for
    a destination without a stored position (see the module docstring)."""
    gtidon = props.get("canal.instance.gtidon").lower() == "true"
    gtid = props.get("canal.instance.master.gtid")
    if gtid and not gtidon:
        notes.append(
            f"{name}: master.gtid is set but gtidon is not true; Canal ignores it, so do we"
        )
    if not gtidon:
        return _position_start(props, name, notes), None
    if gtid and _MARIADB_GTID.match(gtid):
        return {"mode": "gtid", "gtid": gtid}, "gtid"
    if gtid:
        return _mysql_gtid_start(props, name, gtid, notes), None
    notes.append(
        f"{name}: gtidon=true: resumes by binlog file/position (what works on MySQL); if the "
        "source is MariaDB, set source.resume_by: gtid to resume by GTID, as Canal does, "
        "across a switch of primary"
    )
    return _position_start(props, name, notes), None
