"""No secret in any message: bad input a careless user writes, and wrong passwords at real servers.

Each case plants a known secret where a user might put one (in a URL, in a file, in the
environment under a wrong password) and greps everything the platform said: the CLI's stdout
and stderr, the error's text and traceback, and every log record (the suite's autouse check
does the log part for every test).
"""

from __future__ import annotations

import traceback
from pathlib import Path

import pytest

from cdc_platform.cli import main
from cdc_platform.config.leases import DatabaseLeaseConfig
from cdc_platform.config.platform import SparkConfig
from cdc_platform.config.source import SourceConfig
from cdc_platform.errors import CdcError
from cdc_platform.infra.sqldb import Database
from cdc_platform.source.mysql import connect_source
from cdc_platform.spark.session import SparkSessionFactory
from cdc_platform.testing.destinations import PASSWORD_ENV, write_conf
from cdc_platform.testing.library_internals import builder_options
from cdc_platform.testing.secrets import PLANTED_SECRET, leaked_secrets
from tests.conftest import MariaDBDatabase

pytestmark = pytest.mark.integration

SECRET_ENV = "CDC_TEST_PLANTED_SECRET"

BAD_PLATFORM_FILES = {
    "lease url with password": (
        f"lease: {{backend: database, url: 'mysql://cdc:{PLANTED_SECRET}@127.0.0.1:1/leases'}}\n"
    ),
    "lease url, mistyped scheme": (
        f"lease: {{backend: database, url: 'myslq://cdc:{PLANTED_SECRET}@127.0.0.1/leases'}}\n"
    ),
    "lease url, bad port": (
        f"lease: {{backend: database, url: 'mysql://cdc:{PLANTED_SECRET}@h:port/leases'}}\n"
    ),
    "lease url, password with slash and at": (
        f"lease: {{backend: database, url: 'mysql://cdc:a/{PLANTED_SECRET}@b@h/leases'}}\n"
    ),
    "lease url, password parameter": (
        f"lease: {{backend: database, url: 'postgresql://h/l?password={PLANTED_SECRET}'}}\n"
    ),
    "watch url with password": (f"watch: {{url: 'mysql://cdc:{PLANTED_SECRET}@h:3306/state'}}\n"),
    "spark token in url": (
        f"spark: {{mode: connect, connect_url: 'sc://h:15002/;token={PLANTED_SECRET}'}}\n"
    ),
    "password key in platform file": f"lease: {{backend: database, password: {PLANTED_SECRET}}}\n",
}


def _said(capsys: pytest.CaptureFixture[str]) -> str:
    out, err = capsys.readouterr()
    return out + err


@pytest.mark.parametrize("case", sorted(BAD_PLATFORM_FILES))
def test_bad_platform_files_never_print_the_secret(
    case: str,
    mariadb: MariaDBDatabase,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, mariadb.user.password)
    conf = tmp_path / "conf"
    write_conf(
        conf,
        destination="shop",
        server=mariadb.server,
        user=mariadb.user,
        database=mariadb.name,
        lake_root=tmp_path / "lake",
        extra_platform=BAD_PLATFORM_FILES[case],
    )
    for command in (["config", "check"], ["status"], ["run", "--destination", "shop"]):
        code = main([*command, "--conf", str(conf)])
        said = _said(capsys)
        assert code != 0, f"{command} accepted {case}: {said}"
        assert "platform.yaml" in said, said  # the error names the file
        assert not leaked_secrets(said), f"{command} printed the secret: {said}"


def test_wrong_source_password_is_not_shown(mariadb: MariaDBDatabase) -> None:
    source = SourceConfig(
        host=mariadb.server.host,
        port=mariadb.server.port,
        user=mariadb.user.name,
        password_env=SECRET_ENV,
        server_id=4242,
    )
    with pytest.raises(CdcError) as refused:
        connect_source(source, PLANTED_SECRET, purpose="snapshot")
    said = "".join(traceback.format_exception(refused.value)) + repr(source)
    assert "Access denied" in said
    assert not leaked_secrets(said), said


def test_wrong_lease_database_password_is_not_shown(
    mariadb: MariaDBDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SECRET_ENV, PLANTED_SECRET)
    lease = DatabaseLeaseConfig(
        backend="database",
        url=f"mysql://{mariadb.user.name}@{mariadb.server.host}:{mariadb.server.port}/{mariadb.name}",
        password_env=SECRET_ENV,
    )
    database = Database(lease.url, password=lease.password(), timeout=5.0)
    with pytest.raises(CdcError) as refused:
        database.ensure_schema("probe", ["CREATE TABLE IF NOT EXISTS probe (k INT)"])
    said = "".join(traceback.format_exception(refused.value)) + repr(database) + repr(lease)
    assert "Access denied" in said
    assert not leaked_secrets(said), said


def test_spark_token_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET_ENV, PLANTED_SECRET)
    config = SparkConfig(mode="connect", connect_url="sc://127.0.0.1:1", token_env=SECRET_ENV)
    factory = SparkSessionFactory(config)
    assert f";token={PLANTED_SECRET}" in str(builder_options(factory.builder()))
    assert not leaked_secrets(repr(config) + repr(factory.config))
