"""The DAGs of one destination (``$CDC_AIRFLOW_DESTINATION``, default ``shop``) of the conf
directory the ``cdc_default`` connection (or ``$CDC_CONF_DIR``) names; see
:mod:`cdc_airflow.dags`. Start the capture itself as a service: ``cdc-platform run`` or
``serve``; run Airflow's triggerer for the mirrors' asset watcher."""

from __future__ import annotations

import os

from cdc_airflow.dags import destination_dags

for _dag in destination_dags(os.environ.get("CDC_AIRFLOW_DESTINATION", "shop")):
    globals()[_dag.dag_id] = _dag
