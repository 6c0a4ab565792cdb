"""``cdc_run_failure_alert``: a run-failure sensor that tells an operator.

Every failed run of the code location is logged (ERROR) and, when the environment variable
``CDC_ALERT_WEBHOOK_URL`` names a URL, posted to it as JSON ``{"text", "run_id", "job",
"tags", "error"}`` (the shape Slack-style incoming webhooks accept). A webhook that does not
answer is logged, never retried: the next failure posts again.
"""

import json
import logging
import os
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

__all__ = ["WEBHOOK_ENV", "alert_payload", "build_run_failure_alert", "post_alert"]

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
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            status = int(response.status)
    except urllib.error.HTTPError as exc:
        status = int(exc.code)
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"webhook not reached: {type(exc).__name__}: {reason}"
    return None if 200 <= status < 300 else f"webhook answered HTTP {status}"


def build_run_failure_alert(
    *, default_status: DefaultSensorStatus = DefaultSensorStatus.RUNNING
) -> SensorDefinition:
    """The `cdc_run_failure_alert` sensor (every job of the code location)."""

    @run_failure_sensor(
        name="cdc_run_failure_alert",
        default_status=default_status,
        description=f"Logs every failed run and posts it to ${WEBHOOK_ENV} when set.",
    )
    def cdc_run_failure_alert(context: RunFailureSensorContext) -> None:
        run = context.dagster_run
        error = context.failure_event.message
        payload = alert_payload(run.run_id, run.job_name, run.tags, error)
        context.log.error(payload["text"])
        url = os.environ.get(WEBHOOK_ENV)
        if url:
            problem = post_alert(url, payload)
            if problem:
                context.log.warning(f"alert not delivered: {problem}")

    return cdc_run_failure_alert
