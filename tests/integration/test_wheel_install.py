"""The built wheel installs beside a Dagster other than the one CI pins (within the range
pyproject.toml declares), and its definitions load there: a user's existing Dagster project
need not move to our exact versions.

A fresh virtual environment gets the wheel and the Dagster packages at the range's lower
bound; every other distribution comes from the checkout's environment through a ``.pth`` file
placed after the fresh site-packages (a full install would fetch ~1 GB of Spark and Arrow for
nothing this test checks). Every requirement the wheel and that Dagster declare is then checked
against what the fresh interpreter sees, as ``pip check`` would, and the definitions load.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

PROJECT = Path(__file__).resolve().parents[2]
OTHER_DAGSTER = "1.13.20"
"""The lower bound of pyproject.toml's ``dagster`` range (CI pins a newer one)."""

CHECK = """
import json, os
from importlib import metadata
from packaging.requirements import Requirement

def unmet(dist):
    out = []
    for text in metadata.requires(dist) or []:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            have = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            out.append(f"{dist}: {req} (missing)")
            continue
        if req.specifier and not req.specifier.contains(have, prereleases=True):
            out.append(f"{dist}: {req} (have {have})")
    return out

import dagster
from dagster_defs.definitions import defs
repo = defs.get_repository_def()
print(json.dumps({
    "dagster": dagster.__version__,
    "unmet": unmet("cdc-platform") + unmet("dagster"),
    "jobs": sorted(j.name for j in repo.get_all_jobs()),
    "assets": sorted(k.to_user_string() for k in repo.asset_graph.get_all_asset_keys()),
    "module": os.path.dirname(__import__("dagster_defs").__file__),
}))
"""


def _run(args: list[str], **kwargs: object) -> str:
    done = subprocess.run(args, capture_output=True, text=True, check=False, **kwargs)
    tail = f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert done.returncode == 0, f"{args[:4]} failed:\n{tail}"
    return str(done.stdout)


def test_wheel_installs_beside_another_dagster_and_loads(tmp_path: Path) -> None:
    declared = (PROJECT / "pyproject.toml").read_text()
    assert f'"dagster>={OTHER_DAGSTER},<' in declared, "test the range's lower bound"
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(PROJECT)])
    (wheel,) = dist.glob("cdc_platform-*.whl")
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    python = venv / "bin" / "python"
    dagster = [
        f"{name}=={OTHER_DAGSTER}" for name in ("dagster", "dagster-pipes", "dagster-shared")
    ]
    _run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel), *dagster])
    fresh = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
        ).strip()
    )
    (fresh / "zz_checkout_environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    conf = tmp_path / "conf"
    (conf / "destinations" / "shop").mkdir(parents=True)
    (conf / "platform.yaml").write_text(f"lake_root: {tmp_path / 'lake'}\n")
    (conf / "destinations" / "shop" / "instance.yaml").write_text(
        "source: {user: cdc, password_env: CDC_WHEEL_PW, server_id: 7, "
        "include_tables: ['shop\\\\..*']}\n"
    )
    env = {**os.environ, "CDC_CONF_DIR": str(conf), "CDC_WHEEL_PW": "unused"}
    env.pop("PYTHONPATH", None)
    loaded = json.loads(_run([str(python), "-c", CHECK], env=env, cwd=tmp_path).splitlines()[-1])
    assert loaded["dagster"] == OTHER_DAGSTER
    assert loaded["unmet"] == []
    assert loaded["module"].startswith(str(fresh)), "the wheel's code, not the checkout's"
    assert "cdc_destination" in loaded["jobs"]
    assert "cdc/shop/changes" in loaded["assets"]
