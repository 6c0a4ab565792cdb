"""``table_checks``: a multi-asset check over table mirrors, whatever the tables are named.

Dagster's ``@multi_asset_check`` names the op's inputs and outputs after the checked asset
keys, and refuses keys whose parts are not identifiers (``shop/it's``, ``shop/Ünï``). This
builds the same definition with names from :func:`~dagster_defs.names.unique_identifiers`
of each table's ``db``, ``table``: valid and distinct for any source name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from dagster import (
    AssetChecksDefinition,
    AssetCheckSpec,
    In,
    Nothing,
    Out,
    op,
)

from cdc_platform.coordination.table_catalog import CatalogTable
from dagster_defs.names import unique_identifiers

__all__ = ["table_checks"]


def table_checks(
    *, name: str, specs: Sequence[AssetCheckSpec], tables: Sequence[CatalogTable]
) -> Callable[[Callable[..., Any]], AssetChecksDefinition]:
    """Decorator like ``@multi_asset_check(name=, specs=, can_subset=True)``; ``specs[i]``
    checks the mirror of ``tables[i]`` (the body takes ``OpExecutionContext`` and resources)."""
    names = unique_identifiers([(t.db, t.table) for t in tables])

    outputs = {f"{n}__{s.name}": s for n, s in zip(names, specs, strict=True)}

    def build(fn: Callable[..., Any]) -> AssetChecksDefinition:
        node = op(
            name=name,
            ins={n: In(Nothing) for n in names},
            out={o: Out(None, is_required=False) for o in outputs},
        )(fn)
        checks: AssetChecksDefinition = AssetChecksDefinition.create(
            keys_by_input_name={n: s.asset_key for n, s in zip(names, specs, strict=True)},
            node_def=node,
            check_specs_by_output_name=outputs,
            can_subset=True,
        )
        return checks

    return build
