"""The coordination services a deployment configures, above both ``ha/`` and ``watch/``.

:mod:`~cdc_platform.coordination.factory` builds the lease, the node registry and the state
watch store that ``conf/platform.yaml`` names; :mod:`~cdc_platform.coordination.status` reads
them (and the change log) back for ``cdc-platform status``. Neither ``ha/`` nor ``watch/``
imports the other: what both need lives in ``infra/``.
"""
