"""The Dagster face of cdc-platform: thin resources, jobs, sensors and assets over the engine.

Add it to a Dagster project with :func:`build_definitions` (merge its result with your own
definitions) or with the :class:`CdcComponent` in a components project; rename its assets
with a :class:`CdcTranslator` subclass.
"""

from dagster_defs.component import CdcComponent
from dagster_defs.factory import build_definitions
from dagster_defs.translator import CdcTranslator

__all__ = ["CdcComponent", "CdcTranslator", "build_definitions"]
