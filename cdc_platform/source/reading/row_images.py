"""Selected rows as the change log's JSON: each row's image and primary-key text.

A snapshot chunk of 40,000 rows spent about 100 ms making a dict per row with
``dict(zip(names, row))``, a tuple per row for the caller and lists of pairs that the commit
then split again (``bench/snapshot.py``'s table, 200,000 rows). :func:`rows_json` writes one
function per table instead: each column's value taken from the row into a local, the
conversions only for the columns that need one, the image as a dict display and the key's
JSON, appended to two lists (about a third of that time). The text of every image and key is
the same as before, byte for byte. As in :mod:`.result_rows`, only fixed templates and column
numbers go into the function's text; column names and conversions are passed as values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["RowsJson", "rows_json"]

RowsJson = Callable[[Sequence[Sequence[Any]]], tuple[list[str], list[str]]]
"""Rows as the driver returned them (the table's columns first) -> (key JSONs, image JSONs)."""


def rows_json(
    names: Sequence[str],
    converted: Sequence[tuple[int, Callable[[Any], Any]]],
    key: Sequence[int],
    write: Callable[[Any], str],
    key_json: Sequence[str],
) -> RowsJson:
    """The function turning rows into their key and image JSON.

    ``names``: the table's columns, in the order of each row's first values (values after
    them are left out of the image); ``converted``: (index, conversion) of the columns whose
    driver value needs a conversion when not NULL; ``key``: the primary key's column indices,
    in key order; ``write``: the image encoder; ``key_json``: each key column's name as JSON
    text. A key of one column whose value is an int is written directly (``{"id":5}``, the
    same text ``write`` gives); any other key goes through ``write``.
    """
    namespace: dict[str, Any] = {"write": write}
    lines = [
        "def build(records):",
        "    pks = []",
        "    images = []",
        "    add_pk = pks.append",
        "    add_image = images.append",
        "    for r in records:",
    ]
    for i, name in enumerate(names):
        namespace[f"n{i}"] = name
        lines.append(f"        v{i} = r[{i}]")
    for i, convert in converted:
        namespace[f"c{i}"] = convert
        lines += [f"        if v{i} is not None:", f"            v{i} = c{i}(v{i})"]
    image = ", ".join(f"n{i}: v{i}" for i in range(len(names)))
    lines.append(f"        add_image(write({{{image}}}))")
    key_dict = "{" + ", ".join(f"n{i}: v{i}" for i in key) + "}"
    if len(key) == 1:
        (k,) = key
        namespace["kj"] = key_json[0]
        lines += [
            f"        if type(v{k}) is int:",
            f'            add_pk(f"{{{{{{kj}}:{{v{k}}}}}}}")',
            "        else:",
            f"            add_pk(write({key_dict}))",
        ]
    else:
        lines.append(f"        add_pk(write({key_dict}))")
    lines.append("    return pks, images")
    exec("\n".join(lines), namespace)  # noqa: S102 (text made only from the templates above)
    build: RowsJson = namespace["build"]
    return build
