"""`cdc-platform import-canal`: a Canal server's conf directory as destinations.

Reads ``canal.properties`` and each destination's ``<name>/instance.properties`` the way a Canal
server would start them (``canal.destinations.expr``, else ``canal.destinations``, plus every
directory ``canal.auto.scan`` would start) and maps what has an equivalent here:

====================================================  =========================================
Canal                                                 cdc-platform
====================================================  =========================================
``canal.instance.master.address`` host:port           ``source.host`` / ``source.port``
``canal.instance.dbUsername``                         ``source.user``
``canal.instance.dbPassword``                         ``source.password_env``: the NAME of an
                                                      environment variable; the secret itself
                                                      is never written or printed
``canal.instance.mysql.slaveId``                      ``source.server_id`` (Canal 1.0.26+
                                                      generates one when unset or 0; so do we)
``canal.instance.filter.regex`` / ``.black.regex``    ``include_tables`` / ``exclude_tables``
                                                      (split and matched as Canal does)
``canal.instance.gtidon``                             ``source.resume_by: gtid`` with a MariaDB
                                                      ``master.gtid``, else file/position (a
                                                      note; :mod:`canal_start`)
``master.gtid`` (only with gtidon=true)               ``start: {mode: gtid, ...}`` (MariaDB
                                                      GTIDs; a MySQL set: the position keys)
``master.journal.name`` [+ ``master.position``]       ``start: {mode: position, ...}`` (offset 4
                                                      without a position)
``master.timestamp`` (milliseconds)                   ``start: {mode: timestamp, ...}``
none of them                                          ``start: {mode: latest}`` (Canal's own
                                                      default: the current binlog end)
``canal.instance.memory.buffer.size`` / ``memunit``   ``store.buffer_size`` / ``memunit`` /
/ ``batch.mode``, ``canal.instance.get.ddl.isolation``  ``batch_mode`` / ``ddl_isolation``
``canal.zkServers``                                   ``lease: {backend: zookeeper, hosts}``
====================================================  =========================================

Instance properties override canal.properties, as in Canal. Settings that would change WHAT is
captured (column filters, DML/query filters, a misspelt filter key) lead the report as
warnings; every other property is listed by name (never by value: some are secrets). A bad
destination is reported and skipped, never stops the others; destinations already under the
output directory are kept as they are. The written destinations are loaded back with the normal
loader, so what `config check` would refuse is reported at once.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cdc_platform.config.canal_filters import capture_warnings, table_filters
from cdc_platform.config.canal_properties import (
    LayeredProperties,
    PropertiesFile,
    read_properties,
    read_properties_file,
)
from cdc_platform.config.canal_start import start_and_resume
from cdc_platform.config.instance import DESTINATION_NAME
from cdc_platform.config.loader import load_config
from cdc_platform.errors import ConfigError

__all__ = ["CanalImport", "import_canal", "read_properties"]

_BASE_SERVER_ID = 1001
"""Server ids for instances without ``slaveId`` (Canal generates one too)."""


@dataclass
class CanalImport:
    """What the import wrote and what it left out."""

    destinations: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each written destination's instance.yaml content."""
    platform: dict[str, Any] = field(default_factory=dict)
    """platform.yaml content (written only if the output has none)."""
    files: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    """Settings that change what Canal captures and that were not imported: read these first."""
    not_imported: dict[str, list[str]] = field(default_factory=dict)
    """Per properties file, the keys with no equivalent here (names only, never values)."""
    notes: list[str] = field(default_factory=list)
    password_envs: dict[str, str] = field(default_factory=dict)
    """Destination -> the environment variable its source password must be put in."""
    errors: dict[str, str] = field(default_factory=dict)
    """Destination -> why it was not imported, or why its written config does not load."""


_INSTANCE = "canal.instance."
_STORE_KEYS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "canal.instance.memory.buffer.size": ("buffer_size", int),
    "canal.instance.memory.buffer.memunit": ("memunit", int),
    "canal.instance.memory.batch.mode": ("batch_mode", str.upper),
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
_SERVER_KEYS = {
    "canal.zkServers",
    "canal.destinations",
    "canal.destinations.expr",
    "canal.conf.dir",
    "canal.auto.scan",
}


def _env_name(destination: str) -> str:
    return "CDC_" + re.sub(r"[^A-Za-z0-9]+", "_", destination).upper().strip("_") + "_PASSWORD"


def _server_id(props: LayeredProperties, name: str, generated: int, notes: list[str]) -> int:
    key = "canal.instance.mysql.slaveId"
    raw = props.get(key)
    value = props.number(key)
    if value is None or value == 0:
        why = "is 0" if raw else "is not set"
        notes.append(f"{name}: {key} {why}; server_id {generated} generated (as Canal 1.0.26+)")
        return generated
    if not 1 <= value <= 2**32 - 1:
        raise ConfigError(f"{props.where(key)} must be 1..4294967295, got {value}")
    return value


def _destination(
    name: str, props: LayeredProperties, generated_id: int, result: CanalImport
) -> dict[str, Any]:
    address = props.get("canal.instance.master.address")
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        where = props.where("canal.instance.master.address")
        raise ConfigError(f"{where} must be host:port, got {address!r}")
    user = props.get("canal.instance.dbUsername")
    if not user:
        raise ConfigError(
            f"{props.where('canal.instance.dbUsername')} is empty: set the replication user "
            "and import again"
        )
    source: dict[str, Any] = {
        "host": host,
        "port": int(port),
        "user": user,
        "password_env": result.password_envs[name],
        "server_id": _server_id(props, name, generated_id, result.notes),
    }
    source.update(table_filters(props, name, result.notes))
    start, resume_by = start_and_resume(props, name, result.notes)
    if resume_by is not None:
        source["resume_by"] = resume_by
    store: dict[str, Any] = {}
    for key, (setting, convert) in _STORE_KEYS.items():
        value = props.get(key)
        if value:
            if convert is int:
                store[setting] = props.number(key)
            else:
                store[setting] = convert(value)
    instance: dict[str, Any] = {"source": source, "start": start}
    if store:
        instance["store"] = store
    return instance


def _unknown(props: PropertiesFile, known: set[str]) -> list[str]:
    return sorted(
        key
        for key in props.values
        if key not in known
        and not key.startswith(f"{_INSTANCE}filter.")
        and key != "canal.instance.enableDruid"
    )


def _expand_expr(expr: str, server: LayeredProperties) -> list[str]:
    """``canal.destinations.expr`` as Canal expands it: ``prefix{1-3}`` -> prefix1..prefix3."""
    match = re.fullmatch(r"([^{]*)\{\s*(\d+)\s*-\s*(\d+)\s*\}.*", expr)
    if match is None:
        raise ConfigError(
            f"{server.where('canal.destinations.expr')} must look like name{{1-3}}, got {expr!r}"
        )
    prefix, first, last = match.group(1), int(match.group(2)), int(match.group(3))
    return [f"{prefix}{i}" for i in range(first, last + 1)]


def _server_file(canal_dir: Path) -> PropertiesFile:
    server_file = canal_dir / "canal.properties"
    local = canal_dir / "canal_local.properties"
    if not server_file.is_file():
        if local.is_file():
            raise ConfigError(
                f"{local}: Canal manager mode (Canal Admin keeps the instance settings): export "
                f"each instance's properties to {canal_dir}/<name>/instance.properties beside a "
                "canal.properties, then import again"
            )
        raise ConfigError(f"{server_file}: not found (the Canal conf directory holds it)")
    server = read_properties_file(server_file)
    manager = server.values.get("canal.admin.manager", "").strip()
    if manager:
        raise ConfigError(
            f"{server_file}: canal.admin.manager is set (manager mode: Canal Admin keeps the "
            f"instance settings): export each instance's properties to "
            f"{canal_dir}/<name>/instance.properties, remove canal.admin.manager, import again"
        )
    return server


def _names(canal_dir: Path, server: LayeredProperties, result: CanalImport) -> list[str]:
    expr = server.get("canal.destinations.expr")
    listed = (
        _expand_expr(expr, server)
        if expr
        else [n.strip() for n in server.get("canal.destinations").split(",") if n.strip()]
    )
    names: list[str] = []
    for name in listed:
        if name in names:
            result.notes.append(f"{name}: listed twice in canal.destinations; imported once")
        else:
            names.append(name)
    if server.get("canal.auto.scan").lower() == "true":
        scanned = sorted(
            p.parent.name
            for p in canal_dir.glob("*/instance.properties")
            if p.parent.name.lower() != "spring" and p.parent.name not in names
        )
        for name in scanned:
            result.notes.append(f"{name}: not in canal.destinations, but canal.auto.scan starts it")
        names.extend(scanned)
    return names


def _password_envs(names: list[str], result: CanalImport) -> None:
    taken: dict[str, str] = {}
    for name in names:
        variable = _env_name(name)
        if variable in taken:
            base = variable.removesuffix("_PASSWORD")
            index = 2
            while f"{base}_{index}_PASSWORD" in taken:
                index += 1
            variable = f"{base}_{index}_PASSWORD"
            result.notes.append(
                f"{name}: {_env_name(name)} is already {taken[_env_name(name)]}'s; using {variable}"
            )
        taken[variable] = name
        result.password_envs[name] = variable


def _server_ids_in(out: Path) -> set[int]:
    """The server ids the destinations already under ``out`` use (a generated id avoids them:
    two readers with one id disconnect each other)."""
    ids: set[int] = set()
    for path in sorted((out / "destinations").glob("*/instance.yaml")):
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        source = data.get("source") if isinstance(data, dict) else None
        server_id = source.get("server_id") if isinstance(source, dict) else None
        if isinstance(server_id, int):
            ids.add(server_id)
    return ids


def import_canal(canal_dir: Path, out: Path) -> CanalImport:
    """Write ``out``/destinations/<name>/instance.yaml for each Canal destination under
    ``canal_dir`` (and ``out``/platform.yaml if there is none); see the module docstring.

    Raises:
        ConfigError: no canal.properties (or manager mode), no destination at all, or a
            server-wide setting is malformed. A bad destination is reported in ``errors``.
    """
    server_file = _server_file(canal_dir)
    server = LayeredProperties(server_file)
    result = CanalImport()
    names = _names(canal_dir, server, result)
    if not names:
        raise ConfigError(
            f"{server_file.path}: no destination: canal.destinations is empty and no "
            f"{canal_dir}/<name>/instance.properties was found"
        )
    valid = []
    for name in names:
        if DESTINATION_NAME.match(name):
            valid.append(name)
        else:
            result.errors[name] = (
                f"{server_file.path}: destination name {name!r} must be 1-63 letters, digits, "
                "'_' or '-', starting with a letter or digit; not imported"
            )
    _password_envs(valid, result)
    known = _SOURCE_KEYS | set(_STORE_KEYS) | _SERVER_KEYS
    result.not_imported[str(server_file.path)] = _unknown(server_file, known)
    zk_hosts = server.get("canal.zkServers")
    if zk_hosts:
        result.platform["lease"] = {"backend": "zookeeper", "hosts": zk_hosts}
    ids = _server_ids_in(out)
    for index, name in enumerate(valid):
        instance_file = canal_dir / name / "instance.properties"
        if not instance_file.is_file():
            result.errors[name] = f"{instance_file}: not found (listed in canal.destinations)"
            continue
        if (out / "destinations" / name).exists():
            result.notes.append(f"{name}: {out / 'destinations' / name} exists; kept as it is")
            del result.password_envs[name]
            continue
        try:
            props_file = read_properties_file(instance_file)
            props = LayeredProperties(server_file, props_file)
            generated = _BASE_SERVER_ID + index
            while generated in ids:
                generated += 1
            instance = _destination(name, props, generated, result)
        except ConfigError as exc:
            result.errors[name] = str(exc)
            del result.password_envs[name]
            continue
        ids.add(instance["source"]["server_id"])
        result.warnings.extend(capture_warnings(props, name, result.password_envs[name]))
        result.destinations[name] = instance
        result.not_imported[str(instance_file)] = _unknown(props_file, known)
    _write(result, out)
    # The password variables are usually set only where the destination runs: check the rest.
    unset = {v: "" for v in result.password_envs.values() if v not in os.environ}
    loaded = load_config(out, environ={**os.environ, **unset})
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
    root = (out / "destinations").resolve()
    for name, instance in result.destinations.items():
        directory = root / name
        if directory.resolve().parent != root:  # names are validated; never write elsewhere
            raise ConfigError(f"destination name {name!r} would leave {root}")
        directory.mkdir(parents=True)
        target = directory / "instance.yaml"
        header = (
            f"# Imported from Canal destination {name} by `cdc-platform import-canal`.\n"
            f"# Put the source password in the environment variable "
            f"{instance['source']['password_env']}.\n"
        )
        target.write_text(header + yaml.safe_dump(instance, sort_keys=False), encoding="utf-8")
        result.files.append(target)
