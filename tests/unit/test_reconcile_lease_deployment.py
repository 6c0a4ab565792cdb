"""Reconciliation's own-lease repair refuses a shared lake with a local SQLite lease.

A repair taken under this process's own lease is a writer like `run`: with a lake on object
storage and a lease in a local SQLite file, a process on another machine would hold its own
lease and write the same change log. The refusal comes before the lease is taken.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_platform.config import load_config
from cdc_platform.errors import ConfigError
from cdc_platform.reconcile.repair_route import repair_with_own_lease
from cdc_platform.testing.fakes import InMemoryLease, InMemoryLeaseStore

pytestmark = pytest.mark.unit


def test_the_own_lease_repair_refuses_a_sqlite_lease_with_a_remote_lake(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / "conf"
    (conf / "destinations" / "shop").mkdir(parents=True)
    (conf / "platform.yaml").write_text("lake_root: s3://lake/p\n")
    (conf / "destinations" / "shop" / "instance.yaml").write_text(
        "source: {host: h, port: 3306, user: u, password_env: PW, server_id: 7}\n"
    )
    monkeypatch.setenv("PW", "x")
    lease = InMemoryLease(InMemoryLeaseStore(), "shop")
    with pytest.raises(ConfigError, match=r"lease\.single_machine: true"):
        repair_with_own_lease(load_config(conf), "shop", [], lease, 1.0)
    assert lease.epoch is None, "the lease was never taken"
