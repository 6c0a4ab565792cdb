"""``cdc_run_failure_alert``: a run-failure sensor that tells an operator.

Every failed run of the code location is logged (ERROR) and, when the environment variable
``CDC_ALERT_WEBHOOK_URL`` names a URL, posted to it as JSON ``{"text", "run_id", "job",
"tags", "error"}`` (the shape Slack-style incoming webhooks accept). A webhook that does not
answer is logged, never retried: the next failure posts again.

Once per failure: an alerted run gets the tag ``cdc/alerted``, and a run with it is never
alerted again (the sensor's cursor can go back, e.g. when its state is reset); a failure older
than ``max_age_seconds`` when the sensor first sees it (a run that failed while the daemon was
down) is logged at INFO and not posted. A requested stop is not a failure: the long-lived run
ends SUCCESS (docs/dagster.md).
"""

import json
import logging
import os
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from dagster import (
    DefaultSensorStatus,
    RunFailureSensorContext,
    SensorDefinition,
    run_failure_sensor,
)

__all__ = [
    "ALERTED_TAG",
    "WEBHOOK_ENV",
    "alert_payload",
    "build_run_failure_alert",
    "post_alert",
]

ALERTED_TAG = "cdc/alerted"
"""Run tag set once a failed run was alerted (its value: when)."""
WEBHOOK_ENV = "CDC_ALERT_WEBHOOK_URL"
"""Environment variable holding the webhook URL (it may carry a token: never logged)."""

log = logging.getLogger(__name__)


def alert_payload(
    run_id: str, job: str, tags: Mapping[str, str], error: str | None
) -> dict[str, Any]:
    """What the webhook receives."""
    name = tags.get("cdc/destination") or tags.get("cdc/mirrors") or ""
    where = f" of destination {name}" if name else ""
    return {
        "text": f"cdc-platform: run {run_id[:8]} of job {job}{where} failed: "
        f"{error or 'no message'}",
        "run_id": run_id,
        "job": job,
        "tags": dict(tags),
        "error": error,
    }


def post_alert(url: str, payload: Mapping[str, Any], timeout: float = 5.0) -> str | None:
    """POST ``payload`` as JSON; None when the server took it, else why not (no URL in it)."""
    if not url.startswith(("http://", "https://")):
        return f"{WEBHOOK_ENV} is not an http(s) URL"
    request = urllib.request.Request(  # noqa: S310 - the operator's own URL, http(s) only
        url,
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (an http(s) URL of the operator's own config)
            status = int(response.status)
    except urllib.error.HTTPError as exc:
        status = int(exc.code)
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"webhook not reached: {type(exc).__name__}: {reason}"
    return None if 200 <= status < 300 else f"webhook answered HTTP {status}"


def build_run_failure_alert(
    *,
    default_status: DefaultSensorStatus = DefaultSensorStatus.RUNNING,
    max_age_seconds: float = 900.0,
    minimum_interval_seconds: int = 15,
) -> SensorDefinition:
    """The `cdc_run_failure_alert` sensor (every job of the code location), evaluated every
    ``minimum_interval_seconds`` (the platform's `dagster.sensor_interval_seconds`, like the
    monitors: Dagster's own default would alert only every 30 s)."""

    @run_failure_sensor(
        name="cdc_run_failure_alert",
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        description=f"Logs every failed run and posts it to ${WEBHOOK_ENV} when set.",
    )
    def cdc_run_failure_alert(context: RunFailureSensorContext) -> None:
        run = context.dagster_run
        error = context.failure_event.message
        payload = alert_payload(run.run_id, run.job_name, run.tags, error)
        if ALERTED_TAG in run.tags:
            return
        record = context.instance.get_run_record_by_id(run.run_id)
        ended = record.end_time if record is not None and record.end_time else time.time()
        age = time.time() - ended
        if age > max_age_seconds:
            context.log.info(f"not alerted (failed {age:.0f} s ago): {payload['text']}")
            return
        context.instance.add_run_tags(run.run_id, {ALERTED_TAG: str(int(time.time()))})
        context.log.error(payload["text"])
        url = os.environ.get(WEBHOOK_ENV)
        if url:
            problem = post_alert(url, payload)
            if problem:
                context.log.warning(f"alert not delivered: {problem}")

    return cdc_run_failure_alert
