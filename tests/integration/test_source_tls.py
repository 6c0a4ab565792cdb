"""source.tls against a private MariaDB that serves TLS with certificates the test makes and
refuses every connection without it (require_secure_transport): a side read, the binlog
stream with its control connection and a MySQL lease database all pass through TLS, and a
certificate the configured CA did not sign is refused for good, with advice."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from cdc_platform.config.source import SourceConfig
from cdc_platform.config.tls import TlsConfig
from cdc_platform.errors import LeaseBackendError, SourceLoginError, SourceSettingsError
from cdc_platform.events import EventKind
from cdc_platform.infra.sqldb import Database
from cdc_platform.source import BinlogSource
from cdc_platform.source.mysql import SourceServer
from cdc_platform.source.reading.row_reader import read_chunk
from cdc_platform.source.reading.table_description import describe_table
from cdc_platform.testing.destinations import PASSWORD_ENV
from cdc_platform.testing.mariadb import MariaDBServer, ReplicationUser
from cdc_platform.testing.tls import Certificates, make_certificates

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def tls_server(
    tmp_path_factory: pytest.TempPathFactory, certificates: Certificates
) -> Iterator[tuple[MariaDBServer, ReplicationUser]]:
    server = MariaDBServer(tmp_path_factory.mktemp("mariadb-tls"), tls=certificates)
    server.start()
    try:
        user = server.create_replication_user()
        server.execute(
            "CREATE DATABASE tls_db",
            "CREATE TABLE tls_db.t (id INT PRIMARY KEY, v VARCHAR(10))",
            "INSERT INTO tls_db.t VALUES (1, 'one')",
        )
        yield server, user
    finally:
        server.stop()


def _config(server: MariaDBServer, user: ReplicationUser, tls: TlsConfig) -> SourceConfig:
    return SourceConfig(
        host=server.host,
        port=server.port,
        user=user.name,
        password_env=PASSWORD_ENV,
        server_id=2417,
        include_tables=[r"tls_db\..*"],
        tls=tls,
    )


def test_every_connection_of_a_verified_source_is_tls(
    tls_server: tuple[MariaDBServer, ReplicationUser], certificates: Certificates
) -> None:
    server, user = tls_server
    tls = TlsConfig(mode="verify_identity", ca_file=str(certificates.ca_file))
    config = _config(server, user, tls)

    # A side read (snapshot, repair, reconciliation): TLS, and the keyset reader works on it.
    conn = SourceServer(config, user.password, purpose="snapshot").connect(30.0)
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW SESSION STATUS LIKE 'Ssl_version'")
            row = cur.fetchone()
        assert row is not None
        assert str(row[1]).startswith("TLS"), row
        spec = describe_table(conn, "tls_db", "t")
        assert [json.loads(i) for _, i in read_chunk(conn, spec, None, 10).rows] == [
            {"id": 1, "v": "one"}
        ]
    finally:
        conn.close()

    # The binlog stream and its control connection (the server refuses plain text).
    source = BinlogSource(config, password=user.password)
    start = source.current_position()
    server.execute("INSERT INTO tls_db.t VALUES (2, 'two')")
    stream = BinlogSource(config, resume=start, password=user.password)
    rows = []
    for event in stream.events():
        if event.kind is EventKind.ROW:
            rows.append(json.loads(event.after or "{}"))
            stream.stop()
    assert rows == [{"id": 2, "v": "two"}]

    # A MySQL lease database on the same server.
    db = Database(
        f"mysql://{user.name}@{server.host}:{server.port}/tls_db",
        password=SecretStr(user.password),
        tls=tls,
    )
    with db.transaction() as tx:
        row = tx.one("SHOW SESSION STATUS LIKE 'Ssl_version'")
    assert row is not None
    assert str(row[1]).startswith("TLS"), row


def test_a_certificate_the_ca_did_not_sign_is_refused_for_good(
    tls_server: tuple[MariaDBServer, ReplicationUser], tmp_path: Path
) -> None:
    server, user = tls_server
    stranger = make_certificates(tmp_path / "other", ca_name="another CA")
    config = _config(server, user, TlsConfig(mode="verify_ca", ca_file=str(stranger.ca_file)))
    with pytest.raises(SourceSettingsError, match=r"TLS to MySQL/MariaDB failed") as caught:
        SourceServer(config, user.password, purpose="snapshot").connect(30.0)
    assert not caught.value.transient
    assert "verify_ca" in str(caught.value)
    assert user.password not in str(caught.value)
    # The cause, named (issue 42.14): not "error 2003: Can't connect to MySQL server".
    for message in (str(caught.value), _stream_refusal(config, user)):
        assert "not signed by" in message, message
        assert "'another CA'" in message, message  # the CA ca_file holds
        assert str(stranger.ca_file) in message, message
        assert "Can't connect" not in message, message


def _stream_refusal(config: SourceConfig, user: ReplicationUser) -> str:
    """The binlog source's refusal (its control connection, through pymysqlreplication)."""
    with pytest.raises(SourceSettingsError, match=r"TLS to MySQL/MariaDB failed") as caught:
        BinlogSource(config, password=user.password).current_position()
    assert not caught.value.transient
    return str(caught.value)


def test_a_host_name_the_certificate_does_not_name_is_refused_naming_both(
    tls_server: tuple[MariaDBServer, ReplicationUser], certificates: Certificates
) -> None:
    """The certificate names 127.0.0.1; the source is reached as localhost (same server)."""
    server, user = tls_server
    tls = TlsConfig(mode="verify_identity", ca_file=str(certificates.ca_file))
    config = _config(server, user, tls).model_copy(update={"host": "localhost"})
    with pytest.raises(SourceSettingsError, match=r"TLS to MySQL/MariaDB failed") as caught:
        SourceServer(config, user.password, purpose="snapshot").connect(30.0)
    assert not caught.value.transient
    for message in (str(caught.value), _stream_refusal(config, user)):
        assert "certificate names 127.0.0.1, not 'localhost'" in message, message
        assert "Can't connect" not in message, message
        assert user.password not in message
    # A MySQL lease database reached by the same name: the same cause.
    db = Database(
        f"mysql://{user.name}@localhost:{server.port}/tls_db",
        password=SecretStr(user.password),
        tls=tls,
    )
    refused = pytest.raises(LeaseBackendError, match=r"names 127\.0\.0\.1, not 'localhost'")
    with refused, db.transaction() as tx:
        tx.one("SELECT 1")


def test_a_client_certificate_is_presented(
    tls_server: tuple[MariaDBServer, ReplicationUser], certificates: Certificates
) -> None:
    """A user that must show a certificate signed by the CA (REQUIRE X509)."""
    server, _ = tls_server
    user = ReplicationUser("x509_user", "x509-pw")
    server.execute(
        f"CREATE USER IF NOT EXISTS '{user.name}'@'%' IDENTIFIED BY '{user.password}' REQUIRE X509",
        f"GRANT SELECT ON tls_db.* TO '{user.name}'@'%'",
    )
    with_cert = TlsConfig(
        mode="verify_identity",
        ca_file=str(certificates.ca_file),
        cert_file=str(certificates.client_cert),
        key_file=str(certificates.client_key),
    )
    conn = SourceServer(_config(server, user, with_cert), user.password).connect(30.0)
    conn.close()
    without = TlsConfig(mode="verify_identity", ca_file=str(certificates.ca_file))
    with pytest.raises(SourceLoginError, match="access denied"):
        SourceServer(_config(server, user, without), user.password).connect(30.0)
