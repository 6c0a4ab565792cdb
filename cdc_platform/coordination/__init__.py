"""The coordination services a deployment configures, above both ``ha/`` and ``watch/``.

:mod:`~cdc_platform.coordination.factory` builds the lease, the node registry and the state
watch store that ``conf/platform.yaml`` names; :mod:`~cdc_platform.coordination.lease` is the
one way every writer takes a destination's lease (the epoch floor, the lake check, the commit
gate); :mod:`~cdc_platform.coordination.status` reads them (and the change log) back for
``cdc-platform status``, and :mod:`~cdc_platform.coordination.table_catalog` says which tables
a destination mirrors (from the source and the change log) for the Dagster and Airflow faces.
Neither ``ha/`` nor ``watch/`` imports the other: what both need lives in ``infra/``.
"""
