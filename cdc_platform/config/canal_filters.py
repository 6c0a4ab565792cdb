"""Canal's table filters as ``include_tables``/``exclude_tables``, and the warnings for
Canal settings that would capture less (or differently) than the import will."""

from __future__ import annotations

import difflib
import re

from cdc_platform.config.canal_properties import LayeredProperties, split_filter_regex
from cdc_platform.errors import ConfigError

__all__ = ["FILTER_DEFAULTS", "capture_warnings", "table_filters"]

FILTER_DEFAULTS = {
    "canal.instance.filter.druid.ddl": "true",
    "canal.instance.filter.query.dcl": "false",
    "canal.instance.filter.query.dml": "false",
    "canal.instance.filter.query.ddl": "false",
    "canal.instance.filter.table.error": "false",
    "canal.instance.filter.rows": "false",
    "canal.instance.filter.transaction.entry": "false",
    "canal.instance.filter.dml.insert": "false",
    "canal.instance.filter.dml.update": "false",
    "canal.instance.filter.dml.delete": "false",
    "canal.instance.filter.field": "",
    "canal.instance.filter.black.field": "",
}
"""Canal's filter settings beside the table regexes, with the values that filter nothing."""


def table_filters(props: LayeredProperties, name: str, notes: list[str]) -> dict[str, list[str]]:
    """``include_tables``/``exclude_tables`` from Canal's table regexes, split and matched as
    Canal does (case-insensitively)."""
    out: dict[str, list[str]] = {}
    for key, setting in (
        ("canal.instance.filter.regex", "include_tables"),
        ("canal.instance.filter.black.regex", "exclude_tables"),
    ):
        value = props.get(key)
        patterns: list[str] = []
        for part in split_filter_regex(value):
            pattern = part
            if "\\\\" in pattern:
                # Canal's shipped example doubles the escape; no table name holds a backslash.
                pattern = pattern.replace("\\\\", "\\")
                notes.append(f"{name}: {key}: doubled backslashes read as one in {part!r}")
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ConfigError(
                    f"{props.where(key)}: {part!r} is not a valid regex: {exc}"
                ) from None
            patterns.append(f"(?i){pattern}")
        if patterns:
            out[setting] = patterns
    return out


def capture_warnings(props: LayeredProperties, name: str, password_env: str) -> list[str]:
    """Settings that make Canal capture less (or differently) than the import will."""
    warnings: list[str] = []
    for key in sorted(k for k in props.names() if k.startswith("canal.instance.filter.")):
        value = props.get(key)
        if key in ("canal.instance.filter.regex", "canal.instance.filter.black.regex"):
            continue
        if key in FILTER_DEFAULTS:
            if value.lower() != FILTER_DEFAULTS[key]:
                what = (
                    "column filter: every column is captured here (check personal data)"
                    if key.endswith("field")
                    else "Canal filters these changes out; cdc-platform captures them"
                )
                warnings.append(f"{name}: {props.where(key)} is set ({what})")
            continue
        known = [
            *FILTER_DEFAULTS,
            "canal.instance.filter.regex",
            "canal.instance.filter.black.regex",
        ]
        guess = difflib.get_close_matches(key, known, n=1)
        hint = f"; did you mean {guess[0]}?" if guess else ""
        extra = (
            " Without filter.regex this destination captures ALL tables."
            if guess == ["canal.instance.filter.regex"] and not props.get(guess[0])
            else ""
        )
        warnings.append(f"{name}: {props.where(key)} is not a Canal setting{hint}{extra}")
    if props.get("canal.instance.enableDruid").lower() == "true":
        warnings.append(
            f"{name}: canal.instance.enableDruid=true: the dbPassword in the file is encrypted; "
            f"put the PLAINTEXT password in {password_env}"
        )
    return warnings
