"""The Airflow environment gets the engine's requirements from requirements-airflow.txt (the
project goes in with --no-deps, so Dagster stays out): that list must stay pyproject.toml's
dependencies less dagster, or .venv-airflow silently runs the engine on other versions."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

pytestmark = pytest.mark.unit

PROJECT = Path(__file__).resolve().parents[2]


def _requirements(lines: list[str]) -> dict[str, str]:
    found = {}
    for line in lines:
        text = line.split("#", 1)[0].strip()
        if text:
            req = Requirement(text)
            found[req.name.lower()] = str(req)
    return found


def test_airflow_requirements_are_the_engines_without_dagster() -> None:
    declared = tomllib.loads((PROJECT / "pyproject.toml").read_text())["project"]
    engine = _requirements(declared["dependencies"])
    airflow = _requirements((PROJECT / "requirements-airflow.txt").read_text().splitlines())
    assert "dagster" in engine, "the Dagster face's own requirement moved: update this test"
    expected = {name: req for name, req in engine.items() if name != "dagster"}
    listed = {name: req for name, req in airflow.items() if name in engine or name == "dagster"}
    assert listed == expected
    pins = (PROJECT / "constraints-airflow.txt").read_text().splitlines()
    (pinned,) = [p.split("==")[1] for p in pins if p.startswith("apache-airflow==")]
    assert Requirement(airflow["apache-airflow"]).specifier.contains(pinned)
    airflow_extra = _requirements(declared["optional-dependencies"]["airflow"])
    assert airflow_extra["apache-airflow"] == airflow["apache-airflow"]


def test_airflow_constraints_pin_no_dagster() -> None:
    pins = (PROJECT / "constraints-airflow.txt").read_text().lower().splitlines()
    assert not [line for line in pins if line.startswith("dagster")]
    assert any(line.startswith("apache-airflow==3.") for line in pins)
