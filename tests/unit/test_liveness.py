"""The holder's liveness listener and a standby's probe: the probe's decisions on scripted
connections, and the listener and probe against each other on real loopback sockets."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import ValidationError

from cdc_platform.config.leases import DatabaseLeaseConfig, LivenessConfig, ZooKeeperLeaseConfig
from cdc_platform.config.platform import PlatformConfig
from cdc_platform.coordination.factory import open_lease
from cdc_platform.ha.liveness import (
    GREETING,
    HolderProbe,
    LivenessListener,
    ProbeFollower,
    split_address,
)
from cdc_platform.ha.running_node import RunningData
from cdc_platform.testing.processes import wait_for

pytestmark = pytest.mark.unit

HELLO = GREETING + b"holder\n"
EOF_ = b""


class FakeConn:
    """Answers ``recv`` from a script: bytes, or an exception to raise."""

    def __init__(self, *script: bytes | BaseException) -> None:
        self.script = list(script)
        self.closed = False

    def recv(self, size: int, /) -> bytes:
        if not self.script:
            raise TimeoutError
        item = self.script.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item

    def settimeout(self, value: float | None, /) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def scripted(*outcomes: FakeConn | BaseException) -> Callable[[tuple[str, int], float], FakeConn]:
    """A connect function that answers each call with the next outcome."""
    left = list(outcomes)

    def connect(address: tuple[str, int], timeout: float) -> FakeConn:
        assert left, "the probe connected more often than the script allows"
        item = left.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item

    return connect


def probe(*outcomes: FakeConn | BaseException) -> tuple[HolderProbe, list[int]]:
    """Run a probe of run id 'holder' over scripted connections; how often it said dead."""
    deaths: list[int] = []
    p = HolderProbe(
        "10.0.0.1:4000",
        "holder",
        lambda: deaths.append(1),
        connect=scripted(*outcomes),
        sleep=lambda _s: None,
    )
    p.run()
    return p, deaths


def test_closed_then_refused_is_death() -> None:
    p, deaths = probe(FakeConn(HELLO, EOF_), ConnectionRefusedError())
    assert deaths == [1]
    assert p.outcome == "dead"


def test_a_reset_then_refused_is_death() -> None:
    _p, deaths = probe(FakeConn(HELLO, ConnectionResetError()), ConnectionRefusedError())
    assert deaths == [1]


def test_another_process_greeting_on_the_port_is_death() -> None:
    _p, deaths = probe(FakeConn(HELLO, EOF_), FakeConn(GREETING + b"newcomer\n"))
    assert deaths == [1]


def test_a_reconnect_the_holder_greets_keeps_watching() -> None:
    """A connection closed by the network, not the holder: it answers again, so it lives."""
    _p, deaths = probe(FakeConn(HELLO, EOF_), FakeConn(HELLO, EOF_), ConnectionRefusedError())
    assert deaths == [1], "the second close, with the port refused, is the death"


def test_a_dying_listener_that_accepts_without_greeting_is_asked_again() -> None:
    _p, deaths = probe(FakeConn(HELLO, EOF_), FakeConn(EOF_), ConnectionRefusedError())
    assert deaths == [1]


def test_a_listener_that_never_greets_proves_nothing() -> None:
    p, deaths = probe(FakeConn(HELLO, EOF_), FakeConn(EOF_), FakeConn(EOF_), FakeConn(EOF_))
    assert deaths == []
    assert p.outcome is not None
    assert "3 times" in p.outcome


@pytest.mark.parametrize(
    "after_close",
    [TimeoutError(), OSError(113, "No route to host"), FakeConn(TimeoutError())],
    ids=["connect timeout", "unreachable", "greeting timeout"],
)
def test_no_answer_after_the_close_proves_nothing(after_close: FakeConn | BaseException) -> None:
    p, deaths = probe(FakeConn(HELLO, EOF_), after_close)
    assert deaths == []
    assert p.outcome is not None
    assert p.outcome.startswith("after the close")


@pytest.mark.parametrize(
    "first",
    [
        ConnectionRefusedError(),
        TimeoutError(),
        FakeConn(GREETING + b"someone-else\n"),
        FakeConn(b"HTTP/1.1 400 Bad Request\r\n"),
        FakeConn(EOF_),
    ],
    ids=["refused", "timeout", "another run id", "not a listener", "closed"],
)
def test_without_a_first_greeting_the_probe_gives_up(first: FakeConn | BaseException) -> None:
    """A holder of an older version, a firewall, a wrong address: the session expiry decides."""
    p, deaths = probe(first)
    assert deaths == []
    assert p.outcome is not None
    assert p.outcome.startswith("first contact")


def test_a_stopped_probe_never_reports() -> None:
    deaths: list[int] = []
    conn = FakeConn(HELLO, EOF_)
    p = HolderProbe(
        "10.0.0.1:4000",
        "holder",
        lambda: deaths.append(1),
        connect=scripted(conn, ConnectionRefusedError()),
    )
    p.stop()
    p.run()
    assert deaths == []
    assert p.outcome == "stopped"
    assert conn.closed


def test_addresses() -> None:
    assert split_address("10.0.0.1:4000") == ("10.0.0.1", 4000)
    assert split_address("[::1]:4000") == ("::1", 4000)
    assert split_address("host-without-port") is None
    assert split_address("host:0") is None
    assert split_address(":4000") is None


# -- the follower: one probe on the current other holder ----------------------------------------


class RecordingProbe:
    made: list[RecordingProbe] = []

    def __init__(self, address: str, run_id: str, on_dead: Callable[[], None], **_: object):
        self.address, self.run_id, self.on_dead = address, run_id, on_dead
        self.started = self.stopped = False
        RecordingProbe.made.append(self)

    def start(self) -> None:
        self.started = True

    def stop(self) -> None:
        self.stopped = True


def test_the_follower_probes_each_other_holder_once() -> None:
    RecordingProbe.made = []
    dead: list[tuple[str, int]] = []
    follower = ProbeFollower(
        "me", lambda run_id, epoch: dead.append((run_id, epoch)), probe_factory=RecordingProbe
    )
    follower.follow("a", 3, "h:1")
    follower.follow("a", 3, "h:1")
    assert len(RecordingProbe.made) == 1
    assert RecordingProbe.made[0].started
    follower.follow("b", 4, "h:2")
    first, second = RecordingProbe.made
    assert first.stopped
    assert second.started
    assert not second.stopped
    second.on_dead()
    assert dead == [("b", 4)]
    follower.follow("me", 5, "h:3")  # this process holds it: nothing to probe
    follower.follow("c", 6, None)  # an older holder without a listener: nothing to probe
    assert second.stopped
    assert len(RecordingProbe.made) == 2


# -- real sockets --------------------------------------------------------------------------------


def test_a_closed_listener_is_reported_dead_over_loopback() -> None:
    listener = LivenessListener("holder", LivenessConfig(host="127.0.0.1"))
    died = threading.Event()
    p = HolderProbe(listener.address, "holder", died.set)
    p.start()
    # The probe is connected once the listener greeted it; then the holder goes.
    wait_for(lambda: p.outcome is None and listener.connections == 1, "the probe to connect")
    listener.close()
    assert died.wait(10), p.outcome
    assert p.outcome == "dead"


def test_the_listener_drops_connections_its_peers_closed() -> None:
    listener = LivenessListener("holder", LivenessConfig(host="127.0.0.1"))
    try:
        host, port = split_address(listener.address) or ("", 0)
        conns = [socket.create_connection((host, port), timeout=5) for _ in range(3)]
        for conn in conns:
            assert conn.recv(64) == HELLO
        wait_for(lambda: listener.connections == 3, "three connections held")
        for conn in conns:
            conn.close()
        wait_for(lambda: listener.connections == 0, "the closed connections dropped")
    finally:
        listener.close()


# -- settings and the running node ---------------------------------------------------------------


def test_liveness_is_on_by_default_and_refuses_a_wildcard_host() -> None:
    lease = ZooKeeperLeaseConfig(backend="zookeeper", hosts="zk:2181")
    assert lease.liveness.enabled
    assert lease.liveness.port == 0
    assert DatabaseLeaseConfig(backend="database").liveness.enabled
    with pytest.raises(ValidationError, match="wildcard"):
        LivenessConfig(host="0.0.0.0")
    with pytest.raises(ValidationError):
        LivenessConfig(port=70000)


def test_the_running_node_carries_the_listener_and_reads_nodes_without_it() -> None:
    data = RunningData("a", "r1", True, 4, 1.0, "10.0.0.1:4000")
    assert RunningData.parse(data.to_bytes()) == data
    older = b'{"address": "a", "run_id": "r1", "active": true, "epoch": 4}'
    parsed = RunningData.parse(older)
    assert parsed is not None
    assert parsed.liveness is None


def test_the_configured_settings_reach_the_lease(tmp_path: Path) -> None:
    platform = PlatformConfig.model_validate(
        {
            "lease": {
                "backend": "database",
                "url": f"sqlite:///{tmp_path}/lease.db",
                "liveness": {"enabled": False, "host": "127.0.0.1", "port": 4711},
            }
        }
    )
    lease = open_lease(platform, tmp_path / "conf", "shop")
    try:
        assert lease.liveness == LivenessConfig(enabled=False, host="127.0.0.1", port=4711)
        assert lease.liveness_address() is None, "disabled: no listener"
    finally:
        lease.close()
