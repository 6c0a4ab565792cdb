"""State watch: numbered events, bounded history, catch-up or re-list, fences; memory and SQLite."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdc_platform.errors import TooFarBehindError, WatchError
from cdc_platform.infra.sqldb import Database
from cdc_platform.watch import (
    EventKind,
    MemoryStateStore,
    SqlStateStore,
    StatePublisher,
    StateStore,
)

pytestmark = pytest.mark.unit


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StateStore]:
    if request.param == "memory":
        yield MemoryStateStore(history=5)
    else:
        sql = SqlStateStore(f"sqlite:///{tmp_path}/state.db", history=5)
        yield sql
        sql.close()


def test_events_are_numbered_in_order(store: StateStore) -> None:
    assert store.index() == 0
    assert store.put("lease/a", "1") == 1
    assert store.put("lease/b", "2") == 2
    assert store.put("lease/a", "3") == 3
    assert store.delete("lease/b") == 4
    assert store.delete("lease/b") is None, "absent: no event"
    events = store.events("lease/", 0)
    assert [(e.index, e.key, e.kind, e.value) for e in events] == [
        (1, "lease/a", EventKind.PUT, "1"),
        (2, "lease/b", EventKind.PUT, "2"),
        (3, "lease/a", EventKind.PUT, "3"),
        (4, "lease/b", EventKind.DELETE, None),
    ]
    entry = store.get("lease/a")
    assert entry is not None
    assert entry.value == "3"
    assert entry.index == 3
    assert store.get("lease/b") is None


def test_a_reconnecting_watcher_gets_exactly_what_it_missed(store: StateStore) -> None:
    store.put("lease/a", "1")
    store.put("config/a", "x")
    store.put("lease/a", "2")
    assert [e.value for e in store.events("lease/", 1)] == ["2"]
    assert store.events("lease/", 3) == []
    assert [e.index for e in store.events("", 1, limit=1)] == [2]


def test_too_far_behind_says_so_and_the_listing_gives_the_way_back(store: StateStore) -> None:
    for i in range(8):  # history is 5: events 1..3 are dropped
        store.put(f"k/{i % 3}", str(i))
    with pytest.raises(TooFarBehindError) as caught:
        store.events("k/", 2)
    assert caught.value.current == 8
    assert caught.value.oldest == 4
    assert "re-list" in str(caught.value)
    assert len(store.events("k/", 3)) == 5, "exactly at the edge is fine"
    listing = store.listing("k/")
    assert listing.index == 8
    assert {e.key: e.value for e in listing.entries} == {"k/0": "6", "k/1": "7", "k/2": "5"}
    assert store.events("k/", listing.index) == []


def test_an_index_from_the_future_means_relist(store: StateStore) -> None:
    store.put("a", "1")
    with pytest.raises(TooFarBehindError):
        store.events("", 99)


def test_fence_refuses_a_deposed_writer(store: StateStore) -> None:
    assert store.put("status/a", "new holder", fence=5) is not None
    assert store.put("status/a", "old holder, late", fence=4) is None
    entry = store.get("status/a")
    assert entry is not None
    assert entry.value == "new holder"
    assert entry.fence == 5
    assert store.put("status/a", "same epoch", fence=5) is not None
    assert store.put("status/a", "unfenced write") is not None
    entry = store.get("status/a")
    assert entry is not None
    assert entry.fence == 5, "an unfenced write keeps the fence"
    assert store.delete("status/a", fence=4) is None


def test_prefix_with_like_wildcards_is_exact(store: StateStore) -> None:
    store.put("a_b/1", "x")
    store.put("axb/1", "y")
    assert [e.key for e in store.listing("a_b/").entries] == ["a_b/1"]
    assert [e.key for e in store.events("a_b/", 0)] == ["a_b/1"]


def test_publisher_coalesces_and_flushes(store: StateStore) -> None:
    publisher = StatePublisher(store, interval=60.0)
    try:
        publisher.publish("status/a", {"n": 1}, fence=1, urgent=True)
        assert publisher.flush(10)
        for n in range(2, 50):
            publisher.publish("status/a", {"n": n}, fence=1)
        assert publisher.flush(10)
        entry = store.get("status/a")
        assert entry is not None
        assert json.loads(entry.value) == {"n": 49}
        assert store.index() <= 3, "49 publishes became at most 3 writes"
    finally:
        publisher.close()


def test_publisher_survives_an_unreachable_store(tmp_path: Path) -> None:
    (tmp_path / "dir.db").mkdir()
    store = SqlStateStore(Database(f"sqlite:///{tmp_path}/dir.db", error=WatchError))
    publisher = StatePublisher(store, interval=0.05)
    publisher.publish("status/a", "x", urgent=True)
    assert not publisher.flush(0.3), "never written, never raised"
    publisher.close(timeout=1.0)


def test_sql_store_is_shared_between_connections(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/state.db"
    one, two = SqlStateStore(url), SqlStateStore(url)
    one.put("lease/a", "x", fence=1)
    assert two.events("lease/", 0)[0].value == "x"
    two.put("lease/a", "y", fence=2)
    assert one.put("lease/a", "late", fence=1) is None
    entry = one.get("lease/a")
    assert entry is not None
    assert entry.value == "y"
