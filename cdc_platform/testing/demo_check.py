"""Check the demo as a user would: start it, ask the Dagster webserver, look at the page, stop it.

    .venv/bin/python -m cdc_platform.testing.demo_check [--screenshots var/demo/shots]

Starts `cdc-platform demo` on a free port, waits (GraphQL) until the `shop` run is STARTED and
its change-log asset has materializations (with ``--screenshots``, also until a mirror was
materialized twice), optionally takes headless-Chromium screenshots (the asset graph, a
mirror's page, the automation page), then sends Ctrl-C and checks that nothing the demo
started is left running. The runs' final states are in the project's ``dagster_home``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdc_platform.testing.processes import free_port

__all__ = ["DemoCheck", "check_demo", "take_screenshots"]

RUNS_QUERY = """{ runsOrError(filter: {tags: [{key: "cdc/destination", value: "shop"}]}) {
  ... on Runs { results { runId status } } } }"""
MATERIALIZATIONS_QUERY = """{ assetOrError(assetKey: {path: ["cdc", "shop", "changes"]}) {
  ... on Asset { assetMaterializations(limit: 100) { timestamp runId
    metadataEntries { label ... on IntMetadataEntry { intValue } } } } } }"""
MIRROR_QUERY = """{ assetOrError(assetKey: {path: ["cdc", "shop", "orders"]}) {
  ... on Asset { assetMaterializations(limit: 10) { timestamp } } } }"""
CHECKS_QUERY = """{ assetNodes(assetKeys: [{path: ["cdc", "shop", "orders"]}]) {
  assetChecksOrError { ... on AssetChecks { checks {
    name executionForLatestMaterialization { status } } } } } }"""
PAGES = [
    # (file, path under the webserver, text to wait for, times it must show)
    ("asset_graph.png", "/locations/cdc_platform/asset-groups/cdc", "orders", 1),
    ("mirror_page.png", "/assets/cdc/shop/orders", "Freshness", 1),
    ("history_page.png", "/assets/cdc/shop/orders_daily_history", "Partitions", 1),
    ("history_graph.png", "/locations/cdc_platform/asset-groups/cdc_history", "orders", 1),
    ("runs.png", "/runs", "cdc_destination", 1),
    # the long-lived run, found with a tag filter (docs/dagster.md)
    ("runs_destination.png", "/runs?q%5B0%5D=tag%3Acdc%2Fdestination%3Dshop", "cdc_destination", 1),
    ("mirror_checks.png", "/assets/cdc/shop/orders?view=checks", "reconciled", 1),
    ("change_log.png", "/assets/cdc/shop/changes", "cdc_destination", 1),
    # every sensor's row rendered, not only the first ones (the rest were still skeletons)
    ("automation.png", "/automation", "Standard sensor", 4),
]
SETTLE_MS = 5_000
"""After the text shows and the network is idle: the rows' tick histories load lazily."""


@dataclass
class DemoCheck:
    """What the check saw."""

    url: str = ""
    run_status: str | None = None
    materializations: int = 0
    rows_reported: int = 0
    mirror_materializations: int = 0
    mirror_checks: dict[str, str | None] = field(default_factory=dict)
    """Each check of a mirror: its status for the newest materialization (None: not
    evaluated for it)."""
    screenshots: list[Path] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)
    log_tail: str = ""


def _graphql(url: str, query: str) -> dict[str, Any]:
    request = urllib.request.Request(  # noqa: S310 (a local http URL we built)
        f"{url}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 (an http(s) URL of the operator's own config)
        data: dict[str, Any] = json.loads(response.read())
    return data


def _group_alive(pgid: int) -> list[str]:
    try:
        out = subprocess.run(
            ["ps", "-o", "pid=,args=", "-g", str(pgid)], capture_output=True, text=True, check=False
        ).stdout
    except OSError:
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def take_screenshots(url: str, directory: Path) -> list[Path]:
    """Screenshot the pages of :data:`PAGES` in Debian's Chromium, driven by Playwright.

    A fresh browser profile shows Dagster's "Join the Dagster community" modal over the page;
    the script clicks its "Skip" button first, as a person would.
    """
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return []
    from playwright.sync_api import TimeoutError as PlaywrightTimeout  # noqa: PLC0415 (dev only)
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 (dev only)

    directory.mkdir(parents=True, exist_ok=True)
    taken = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=chromium,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            modal_wait = 20_000  # the modal shows once per browser profile
            for name, path, text, times in PAGES:
                page.goto(f"{url}{path}", wait_until="networkidle", timeout=60_000)
                with contextlib.suppress(PlaywrightTimeout):  # no modal this time
                    page.get_by_role("button", name="Skip").first.click(timeout=modal_wait)
                    modal_wait = 2_000
                with contextlib.suppress(PlaywrightTimeout):  # shoot what is there anyway
                    page.wait_for_function(
                        "([text, times]) => document.body.innerText.split(text).length > times",
                        arg=[text, times],
                        timeout=30_000,
                    )
                    page.wait_for_load_state("networkidle", timeout=30_000)
                page.wait_for_timeout(SETTLE_MS)
                page.screenshot(path=str(directory / name))
                taken.append(directory / name)
        finally:
            browser.close()
    return taken


def check_demo(
    project: Path, *, timeout: float = 180.0, screenshots: Path | None = None
) -> DemoCheck:
    """Run the demo, check it through GraphQL (and a screenshot), stop it, look for leftovers."""
    port = free_port()
    result = DemoCheck(url=f"http://127.0.0.1:{port}")
    log = project / "var" / "demo-check.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cdc_platform.cli",
                "demo",
                "--conf",
                str(project / "conf"),
                "--port",
                str(port),
                "--rate",
                "20",
            ],
            cwd=project,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                runs = _graphql(result.url, RUNS_QUERY)["data"]["runsOrError"]["results"]
                result.run_status = runs[0]["status"] if runs else None
                asset = _graphql(result.url, MATERIALIZATIONS_QUERY)["data"]["assetOrError"]
                events = asset.get("assetMaterializations") or []
                result.materializations = len(events)
                result.rows_reported = sum(
                    entry.get("intValue") or 0
                    for event in events
                    for entry in event["metadataEntries"]
                    if entry["label"] == "rows"
                )
                mirror = _graphql(result.url, MIRROR_QUERY)["data"]["assetOrError"]
                result.mirror_materializations = len(mirror.get("assetMaterializations") or [])
                (node,) = _graphql(result.url, CHECKS_QUERY)["data"]["assetNodes"]
                result.mirror_checks = {
                    c["name"]: (c["executionForLatestMaterialization"] or {}).get("status")
                    for c in node["assetChecksOrError"]["checks"]
                }
            except (OSError, KeyError, TypeError, ValueError):
                pass
            # for the screenshots, also until the mirror's checks count (reconciliation is
            # due after reconcile.interval_minutes: the timeout shoots what is there then)
            mirrors_ok = screenshots is None or (
                result.mirror_materializations >= 2
                and bool(result.mirror_checks)
                and all(v in {"SUCCEEDED", "FAILED"} for v in result.mirror_checks.values())
            )
            if result.run_status == "STARTED" and result.materializations >= 2 and mirrors_ok:
                break
            time.sleep(1.0)
        if screenshots is not None and result.materializations:
            result.screenshots = take_screenshots(result.url, screenshots)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=150)  # cancelling the runs, then stopping Dagster
            except subprocess.TimeoutExpired:
                result.leftovers.append("the demo did not exit within 150 s of Ctrl-C")
                os.killpg(proc.pid, signal.SIGKILL)
        time.sleep(1.0)
        result.leftovers += _group_alive(proc.pid)
        result.log_tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
    return result


def main() -> None:
    """Command line entry: print what the check saw; exit 1 if the demo did not work."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--project", type=Path, default=Path.cwd())
    parser.add_argument("--screenshots", type=Path, default=None, help="directory for PNGs")
    parser.add_argument("--timeout", type=float, default=180.0)
    args = parser.parse_args()
    result = check_demo(args.project.resolve(), timeout=args.timeout, screenshots=args.screenshots)
    print(f"webserver: {result.url}")
    print(f"shop run status: {result.run_status}")
    print(f"change-log materializations: {result.materializations} ({result.rows_reported} rows)")
    print(f"mirror materializations (shop.orders): {result.mirror_materializations}")
    print(f"mirror checks (shop.orders, newest materialization): {result.mirror_checks}")
    print(f"screenshots: {[str(p) for p in result.screenshots]}")
    print(f"left running after Ctrl-C: {result.leftovers or 'nothing'}")
    ok = result.run_status == "STARTED" and result.materializations > 0 and not result.leftovers
    if not ok:
        print(result.log_tail)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
