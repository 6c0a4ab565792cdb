"""The test servers' retry when the port ``free_port()`` chose was taken before they bound it."""

from __future__ import annotations

import pytest

from cdc_platform.testing.processes import ServerStartError, start_on_a_free_port

pytestmark = pytest.mark.unit

SPARK = (
    "java.net.BindException: Failed to bind to address /127.0.0.1:44265: Service "
    "'org.apache.spark.sql.connect.service.SparkConnectService' failed after 0 retries"
)
POSTGRES = 'LOG:  could not bind IPv4 address "127.0.0.1": Address already in use'
SEAWEEDFS = (
    "E1127 11:23:14.974315 mini.go:1244 Port allocation failed: port 46801 for S3 (specified "
    "by flag s3.port) is not available on 127.0.0.1 and cannot be used"
)


class Server:
    """Fails its first ``failures`` starts with ``message``, then starts."""

    def __init__(self, failures: int, message: str) -> None:
        self.failures, self.message = failures, message
        self.starts = self.moves = 0

    def start_once(self) -> None:
        self.starts += 1
        if self.starts <= self.failures:
            raise ServerStartError(f"exited with 1\n{self.message}")

    def move(self) -> None:
        self.moves += 1


@pytest.mark.parametrize("message", [SPARK, POSTGRES, SEAWEEDFS])
def test_a_taken_port_moves_the_server_and_starts_again(message: str) -> None:
    server = Server(2, message)
    start_on_a_free_port(server.start_once, server.move, tries=3)
    assert (server.starts, server.moves) == (3, 2)


def test_the_third_taken_port_is_the_error() -> None:
    server = Server(3, POSTGRES)
    with pytest.raises(ServerStartError, match="Address already in use"):
        start_on_a_free_port(server.start_once, server.move, tries=3)
    assert (server.starts, server.moves) == (3, 2)


def test_other_failures_and_restarts_are_not_retried() -> None:
    other = Server(1, "InnoDB: corrupt page")
    with pytest.raises(ServerStartError, match="corrupt"):
        start_on_a_free_port(other.start_once, other.move, tries=3)
    assert (other.starts, other.moves) == (1, 0)
    restart = Server(1, POSTGRES)  # a restart keeps its address: one try
    with pytest.raises(ServerStartError):
        start_on_a_free_port(restart.start_once, restart.move, tries=1)
    assert (restart.starts, restart.moves) == (1, 0)
