"""Load `conf/`: the platform file and every destination directory.

A bad destination never stops the others: the loader returns each destination that parses and,
for each one that does not, one `ConfigFileError` naming the file, the key path and the problem.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from cdc_platform.config.base import env_var_label
from cdc_platform.config.instance import DESTINATION_NAME, InstanceConfig
from cdc_platform.config.lake import LakeLocation
from cdc_platform.config.platform import PlatformConfig
from cdc_platform.errors import ConfigFileError

__all__ = [
    "DESTINATIONS_DIR",
    "INSTANCE_FILE",
    "PLATFORM_FILE",
    "ConfigSet",
    "Destination",
    "load_config",
    "load_destination",
    "load_platform",
    "resolve_lake",
]

M = TypeVar("M", bound=BaseModel)

PLATFORM_FILE = "platform.yaml"
DESTINATIONS_DIR = "destinations"
INSTANCE_FILE = "instance.yaml"


@dataclass(frozen=True)
class Destination:
    """One valid destination: its name, file, parsed config and content hash."""

    name: str
    path: Path
    config: InstanceConfig
    content_hash: str
    """sha256 of the instance file's bytes: a reload is a change of content, not of mtime."""


@dataclass(frozen=True)
class ConfigSet:
    """Everything under one conf directory, valid and invalid destinations side by side."""

    conf_dir: Path
    platform: PlatformConfig
    destinations: Mapping[str, Destination] = field(default_factory=dict)
    errors: Mapping[str, ConfigFileError] = field(default_factory=dict)
    """Destination name -> why it could not be loaded."""

    @property
    def lake(self) -> LakeLocation:
        """The lake: its URI and the storage options every delta-rs call on it takes."""
        return resolve_lake(self.conf_dir, self.platform)

    @property
    def lake_root(self) -> Path:
        """The local lake directory, for the parts that still keep local files; ConfigError
        for a lake on object storage (see :meth:`LakeLocation.local_path`)."""
        return self.lake.local_path()


def resolve_lake(
    conf_dir: Path, platform: PlatformConfig, environ: Mapping[str, str] | None = None
) -> LakeLocation:
    """The lake of ``platform``; relative paths are relative to the conf directory's parent."""
    return LakeLocation.resolve(
        platform.lake_root,
        conf_dir.resolve().parent,
        platform.lake_storage_options,
        os.environ if environ is None else environ,
    )


def _key_path(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif parts:
            parts.append(f".{item}")
        else:
            parts.append(str(item))
    return "".join(parts)


def _problem(error: Mapping[str, Any]) -> str:
    kind = error.get("type", "")
    if kind == "extra_forbidden":
        if error.get("loc", ("",))[-1] == "password":
            return (
                "unknown key: secrets never go in files; "
                "name an environment variable in password_env"
            )
        return "unknown key"
    if kind == "missing":
        return "required key is missing"
    message = str(error.get("msg", "invalid"))
    return message.removeprefix("Value error, ")


def _translate(path: Path, exc: ValidationError) -> ConfigFileError:
    # Unknown keys first: a misspelt key usually also makes the intended key "missing".
    errors = sorted(exc.errors(), key=lambda e: e.get("type") != "extra_forbidden")
    # A discriminated union reports the tag in the location (lease.database.url): drop it, the
    # user wrote lease.url.
    first = errors[0]
    loc = tuple(first["loc"])
    problem = _problem(first)
    if len(errors) > 1:
        others = "; ".join(f"{_key_path(tuple(e['loc']))}: {_problem(e)}" for e in errors[1:])
        problem = f"{problem} (also: {others})"
    return ConfigFileError(str(path), _key_path(_strip_tags(loc)), problem)


def _strip_tags(loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    tags = {"zookeeper", "database"}
    return tuple(
        item
        for index, item in enumerate(loc)
        if not (index > 0 and loc[0] == "lease" and item in tags)
    )


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key repeated in one mapping: PyYAML keeps the last one
    silently, so the first one's siblings would fall back to defaults unnoticed."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> Any:
    seen: dict[Any, int] = {}
    for key_node, _value in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"key {key!r} appears twice in one mapping (lines {seen[key]} and {line}); "
                "keep one",
                key_node.start_mark,
            )
        seen[key] = line
    return loader.construct_mapping(node, deep=True)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping
)


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigFileError(str(path), "", f"cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigFileError(str(path), "", "not UTF-8 text") from exc
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        reason = getattr(exc, "problem", None) or str(exc)
        raise ConfigFileError(str(path), "", f"not valid YAML{where}: {reason}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigFileError(
            str(path), "", f"must be a mapping of keys, got {type(data).__name__}"
        )
    return data


def _validate(model: type[M], path: Path, data: dict[str, Any]) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _translate(path, exc) from None


def load_platform(conf_dir: Path) -> PlatformConfig:
    """`conf/platform.yaml`, or the defaults when the file does not exist."""
    path = conf_dir / PLATFORM_FILE
    if not path.exists():
        return PlatformConfig()
    return _validate(PlatformConfig, path, _read_yaml(path))


def load_destination(
    directory: Path, environ: Mapping[str, str] | None = None, *, check_secrets: bool = True
) -> Destination:
    """Load one destination directory; raises ConfigFileError naming file, key and problem.

    ``check_secrets=False`` skips the check that the password variable is set: for readers
    (`status`) that never connect to the source.
    """
    env = os.environ if environ is None else environ
    path = directory / INSTANCE_FILE
    name = directory.name
    if not DESTINATION_NAME.match(name):
        raise ConfigFileError(
            str(directory),
            "",
            f"destination name {name!r} must be 1-63 letters, digits, '_' or '-', "
            "starting with a letter or digit",
        )
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigFileError(
            str(path), "", "missing: every destination needs an instance.yaml"
        ) from None
    config = _validate(InstanceConfig, path, _read_yaml(path))
    if check_secrets and config.source.password_env not in env:
        raise ConfigFileError(
            str(path),
            "source.password_env",
            f"{env_var_label(config.source.password_env)} is not set",
        )
    return Destination(name, path, config, hashlib.sha256(raw).hexdigest())


def load_config(
    conf_dir: Path, environ: Mapping[str, str] | None = None, *, check_secrets: bool = True
) -> ConfigSet:
    """The platform file and every destination under `conf/destinations/`.

    A bad platform file raises (nothing can run without it); bad destinations are returned in
    `errors` next to the good ones. ``check_secrets=False``: see :func:`load_destination`.
    """
    if not conf_dir.is_dir():
        raise ConfigFileError(str(conf_dir), "", "configuration directory does not exist")
    platform = load_platform(conf_dir)
    destinations: dict[str, Destination] = {}
    errors: dict[str, ConfigFileError] = {}
    root = conf_dir / DESTINATIONS_DIR
    if root.is_dir():
        for directory in sorted(
            p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")
        ):
            try:
                destinations[directory.name] = load_destination(
                    directory, environ, check_secrets=check_secrets
                )
            except ConfigFileError as exc:
                errors[directory.name] = exc
    return ConfigSet(conf_dir, platform, destinations, errors)
