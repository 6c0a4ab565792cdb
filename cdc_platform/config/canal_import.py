"""`cdc-platform import-canal`: a Canal server's conf directory as destinations.

Reads ``canal.properties`` and each ``<destination>/instance.properties`` (the destinations
named by ``canal.destinations``, else every sub-directory holding an instance.properties) and
maps what has an equivalent here:

====================================================  =========================================
Canal                                                 cdc-platform
====================================================  =========================================
``canal.instance.master.address`` host:port           ``source.host`` / ``source.port``
``canal.instance.dbUsername``                         ``source.user``
``canal.instance.dbPassword``                         ``source.password_env``: the NAME of an
                                                      environment variable; the secret itself
                                                      is never written or printed
``canal.instance.mysql.slaveId``                      ``source.server_id`` (Canal 1.0.26+
                                                      generates one when unset; so do we)
``canal.instance.filter.regex`` / ``.black.regex``    ``include_tables`` / ``exclude_tables``
                                                      (comma-separated, case-insensitive as in
                                                      Canal)
``canal.instance.gtidon``                             ``source.resume_by: gtid``
``master.journal.name`` + ``master.position``         ``start: {mode: position, ...}``
``master.timestamp`` (milliseconds)                   ``start: {mode: timestamp, ...}``
``master.gtid``                                       ``start: {mode: gtid, ...}``
none of them                                          ``start: {mode: latest}`` (Canal's own
                                                      default: the current binlog end)
``canal.instance.memory.buffer.size`` / ``memunit``   ``store.buffer_size`` / ``memunit`` /
/ ``batch.mode``, ``canal.instance.get.ddl.isolation``  ``batch_mode`` / ``ddl_isolation``
``canal.zkServers``                                   ``lease: {backend: zookeeper, hosts}``
====================================================  =========================================

Instance properties override canal.properties, as in Canal. Every other property (MQ,
tsdb, admin, network, ...) is listed in the report by name (never by value: some are
secrets), never dropped silently. The written destinations are loaded back with the normal
loader, so what `config check` would refuse is reported at once.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cdc_platform.config.loader import load_config
from cdc_platform.errors import ConfigError

__all__ = ["CanalImport", "import_canal", "read_properties"]

_INSTANCE = "canal.instance."
_BASE_SERVER_ID = 1001
"""Server ids for instances without ``slaveId`` (Canal generates one too)."""


@dataclass
class CanalImport:
    """What the import wrote and what it left out."""

    destinations: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each destination's instance.yaml content."""
    platform: dict[str, Any] = field(default_factory=dict)
    """platform.yaml content (written only if the output has none)."""
    files: list[Path] = field(default_factory=list)
    not_imported: dict[str, list[str]] = field(default_factory=dict)
    """Per properties file, the keys with no equivalent here (names only, never values)."""
    notes: list[str] = field(default_factory=list)
    password_envs: dict[str, str] = field(default_factory=dict)
    """Destination -> the environment variable its source password must be put in."""
    errors: dict[str, str] = field(default_factory=dict)
    """Destination -> why the written config does not load (what `config check` says)."""


def read_properties(text: str) -> dict[str, str]:
    """Java ``.properties`` text as a dict: ``key=value``, ``key: value`` or ``key value``;
    ``#``/``!`` comments; a trailing backslash continues a line; backslash escapes
    (``\\\\``, ``\\t``, ``\\n``, ``\\uXXXX``, any other escaped character is itself)."""
    out: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            logical += line[:-1]
            continue
        logical += line
        key, value = _split(logical)
        out[key] = value
        logical = ""
    if logical:
        key, value = _split(logical)
        out[key] = value
    return out


def _split(line: str) -> tuple[str, str]:
    index = 0
    while index < len(line):
        char = line[index]
        if char == "\\":
            index += 2
            continue
        if char in "=: \t\f":
            break
        index += 1
    key = line[:index]
    rest = line[index:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return _unescape(key), _unescape(rest).rstrip()


def _unescape(text: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char != "\\" or index + 1 >= len(text):
            out.append(char)
            index += 1
            continue
        nxt = text[index + 1]
        if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[index + 2 : index + 6]):
            out.append(chr(int(text[index + 2 : index + 6], 16)))
            index += 6
            continue
        out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(nxt, nxt))
        index += 2
    return "".join(out)


def _regexes(value: str, notes: list[str], key: str) -> list[str]:
    """Canal's comma-separated, case-insensitive table regexes as include/exclude patterns.

    Canal's shipped example writes ``.*\\\\\\\\..*``, which after properties unescaping is
    ``.*\\\\..*``; a doubled backslash in a table regex is read as the single escape it is
    meant to be (no table name holds a backslash).
    """
    patterns: list[str] = []
    for part in value.split(","):
        pattern = part.strip()
        if not pattern:
            continue
        if "\\\\" in pattern:
            pattern = pattern.replace("\\\\", "\\")
            notes.append(f"{key}: doubled backslashes read as one escape in {part.strip()!r}")
        patterns.append(f"(?i){pattern}")
    return patterns


def _env_name(destination: str) -> str:
    return "CDC_" + re.sub(r"[^A-Za-z0-9]+", "_", destination).upper().strip("_") + "_PASSWORD"


def _timestamp(millis: str) -> str:
    seconds = int(millis) / 1000.0
    whole = int(seconds)
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
    fraction = round((seconds - whole) * 1_000_000)
    return f"{text}.{fraction:06d}Z" if fraction else f"{text}Z"


_STORE_KEYS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "canal.instance.memory.buffer.size": ("buffer_size", int),
    "canal.instance.memory.buffer.memunit": ("memunit", int),
    "canal.instance.memory.batch.mode": ("batch_mode", str),
    "canal.instance.get.ddl.isolation": ("ddl_isolation", lambda v: v.lower() == "true"),
}
_SOURCE_KEYS = {
    "canal.instance.master.address",
    "canal.instance.dbUsername",
    "canal.instance.dbPassword",
    "canal.instance.mysql.slaveId",
    "canal.instance.filter.regex",
    "canal.instance.filter.black.regex",
    "canal.instance.gtidon",
    "canal.instance.master.journal.name",
    "canal.instance.master.position",
    "canal.instance.master.timestamp",
    "canal.instance.master.gtid",
}
_SERVER_KEYS = {"canal.zkServers", "canal.destinations", "canal.conf.dir"}


def _start(props: Mapping[str, str], name: str) -> dict[str, Any]:
    journal = props.get("canal.instance.master.journal.name", "")
    position = props.get("canal.instance.master.position", "")
    stamp = props.get("canal.instance.master.timestamp", "")
    gtid = props.get("canal.instance.master.gtid", "")
    if journal and position:
        return {"mode": "position", "file": journal, "pos": int(position)}
    if journal or position:
        raise ConfigError(
            f"{name}: canal.instance.master.journal.name and .position go together; "
            "one of them is empty"
        )
    if gtid:
        return {"mode": "gtid", "gtid": gtid}
    if stamp:
        return {"mode": "timestamp", "timestamp": _timestamp(stamp)}
    return {"mode": "latest"}


def _destination(
    name: str, server: Mapping[str, str], props: Mapping[str, str], index: int, result: CanalImport
) -> dict[str, Any]:
    merged = {**server, **props}
    address = merged.get("canal.instance.master.address", "")
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(
            f"{name}: canal.instance.master.address must be host:port, got {address!r}"
        )
    slave_id = merged.get("canal.instance.mysql.slaveId", "").strip()
    server_id = int(slave_id) if slave_id.isdigit() and int(slave_id) > 0 else None
    if server_id is None:
        server_id = _BASE_SERVER_ID + index
        result.notes.append(f"{name}: no canal.instance.mysql.slaveId; server_id {server_id}")
    password_env = _env_name(name)
    result.password_envs[name] = password_env
    source: dict[str, Any] = {
        "host": host,
        "port": int(port),
        "user": merged.get("canal.instance.dbUsername", "") or "canal",
        "password_env": password_env,
        "server_id": server_id,
    }
    include = merged.get("canal.instance.filter.regex", "")
    exclude = merged.get("canal.instance.filter.black.regex", "")
    if include:
        source["include_tables"] = _regexes(include, result.notes, f"{name}: filter.regex")
    if exclude:
        source["exclude_tables"] = _regexes(exclude, result.notes, f"{name}: filter.black.regex")
    if merged.get("canal.instance.gtidon", "").lower() == "true":
        source["resume_by"] = "gtid"
    store: dict[str, Any] = {}
    for key, (setting, convert) in _STORE_KEYS.items():
        value = merged.get(key, "").strip()
        if value:
            store[setting] = convert(value)
    instance: dict[str, Any] = {"source": source, "start": _start(merged, name)}
    if store:
        instance["store"] = store
    return instance


def _unknown(props: Mapping[str, str], known: set[str]) -> list[str]:
    return sorted(key for key in props if key not in known)


def import_canal(canal_dir: Path, out: Path) -> CanalImport:
    """Write ``out``/destinations/<name>/instance.yaml for each Canal destination under
    ``canal_dir`` (and ``out``/platform.yaml if there is none); see the module docstring.

    Raises:
        ConfigError: no canal.properties, a destination's directory or address is missing,
            or a destination already exists under ``out``.
    """
    server_file = canal_dir / "canal.properties"
    if not server_file.is_file():
        raise ConfigError(f"{server_file}: not found (the Canal conf directory holds it)")
    server = read_properties(server_file.read_text(encoding="utf-8"))
    result = CanalImport()
    names = [n.strip() for n in server.get("canal.destinations", "").split(",") if n.strip()]
    if not names:
        names = sorted(p.parent.name for p in canal_dir.glob("*/instance.properties"))
        result.notes.append(f"canal.destinations is empty; found {', '.join(names) or 'none'}")
    known = _SOURCE_KEYS | set(_STORE_KEYS) | _SERVER_KEYS
    result.not_imported[str(server_file)] = _unknown(server, known)
    zk_hosts = server.get("canal.zkServers", "").strip()
    if zk_hosts:
        result.platform["lease"] = {"backend": "zookeeper", "hosts": zk_hosts}
    for index, name in enumerate(names):
        instance_file = canal_dir / name / "instance.properties"
        if not instance_file.is_file():
            raise ConfigError(f"{instance_file}: not found (listed in canal.destinations)")
        if (out / "destinations" / name).exists():
            raise ConfigError(f"{out / 'destinations' / name}: exists already; not overwritten")
        props = read_properties(instance_file.read_text(encoding="utf-8"))
        result.destinations[name] = _destination(name, server, props, index, result)
        result.not_imported[str(instance_file)] = _unknown(props, known)
    _write(result, out)
    # The password variables are usually set only where the destination runs: check the rest.
    unset = {v: "" for v in result.password_envs.values() if v not in os.environ}
    environ = {**os.environ, **unset}
    loaded = load_config(out, environ=environ)
    for name in result.destinations:
        if name in loaded.errors:
            result.errors[name] = str(loaded.errors[name])
    return result


def _write(result: CanalImport, out: Path) -> None:
    platform_file = out / "platform.yaml"
    out.mkdir(parents=True, exist_ok=True)
    if platform_file.exists():
        if result.platform:
            result.notes.append(
                f"{platform_file} exists and was kept; add the lease yourself: "
                f"lease: {yaml.safe_dump(result.platform['lease'], default_flow_style=True)}"
            )
    else:
        header = "# Imported from a Canal conf directory by `cdc-platform import-canal`.\n"
        body = yaml.safe_dump(result.platform, sort_keys=False) if result.platform else ""
        platform_file.write_text(header + body, encoding="utf-8")
        result.files.append(platform_file)
    for name, instance in result.destinations.items():
        directory = out / "destinations" / name
        directory.mkdir(parents=True)
        target = directory / "instance.yaml"
        header = (
            f"# Imported from Canal destination {name} by `cdc-platform import-canal`.\n"
            f"# Put the source password in the environment variable "
            f"{instance['source']['password_env']}.\n"
        )
        target.write_text(header + yaml.safe_dump(instance, sort_keys=False), encoding="utf-8")
        result.files.append(target)
