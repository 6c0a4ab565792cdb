"""`serve`'s decisions: the conf directory on disk vs a fake runner (no threads, no sleeps)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from cdc_platform.config.loader import ConfigSet, Destination, load_config
from cdc_platform.runtime.config_watch import ConfigWatch, is_relevant
from cdc_platform.runtime.serve_monitor import ServeMonitor, platform_file_hash

pytestmark = pytest.mark.unit

ENV = {"SRC_PW": "x"}


def _instance(tables: str = "shop\\\\..*", *, enabled: bool = True) -> str:
    return (
        f"enabled: {str(enabled).lower()}\n"
        "source:\n  host: 127.0.0.1\n  port: 3306\n  user: cdc\n  password_env: SRC_PW\n"
        f"  server_id: 1001\n  include_tables: ['{tables}']\n"
    )


def _write(conf: Path, name: str, text: str) -> None:
    (conf / "destinations" / name).mkdir(parents=True, exist_ok=True)
    (conf / "destinations" / name / "instance.yaml").write_text(text)


class FakeRunner:
    """Records what the monitor asks; ``stuck`` names refuse to stop."""

    def __init__(self) -> None:
        self.live: dict[str, str] = {}
        self.log: list[tuple[str, str]] = []
        self.stuck: set[str] = set()
        self.crashed: dict[str, str] = {}

    def start(self, config: ConfigSet, destination: Destination) -> None:
        assert destination.name not in self.live, "started twice"
        self.live[destination.name] = destination.content_hash
        self.log.append(("start", destination.name))

    def stop(self, name: str) -> bool:
        if name in self.stuck:
            self.log.append(("stop-stuck", name))
            return False
        if self.live.pop(name, None) is not None:
            self.log.append(("stop", name))
        self.crashed.pop(name, None)
        return True

    def running(self) -> set[str]:
        return set(self.live)

    def ended(self, name: str) -> str | None:
        return self.crashed.pop(name, None)

    def crash(self, name: str, why: str) -> None:
        del self.live[name]
        self.crashed[name] = why


@pytest.fixture
def conf(tmp_path: Path) -> Path:
    root = tmp_path / "conf"
    (root / "destinations").mkdir(parents=True)
    (root / "platform.yaml").write_text(f"lake_root: {tmp_path / 'lake'}\n")
    return root


def _monitor(conf: Path, runner: FakeRunner) -> ServeMonitor:
    return ServeMonitor(
        lambda: load_config(conf, ENV), runner, platform_hash=lambda: platform_file_hash(conf)
    )


def test_new_changed_removed_disabled(conf: Path) -> None:
    runner = FakeRunner()
    monitor = _monitor(conf, runner)
    assert not monitor.scan().acted
    _write(conf, "a", _instance())
    _write(conf, "b", _instance())
    assert monitor.scan().started == ["a", "b"]
    assert not monitor.scan().acted  # nothing changed: nothing done
    (conf / "destinations" / "a" / "instance.yaml").touch()  # mtime only
    assert not monitor.scan().acted
    _write(conf, "a", _instance("shop\\\\.orders"))
    result = monitor.scan()
    assert result.reloaded == ["a"]
    assert runner.log[-2:] == [("stop", "a"), ("start", "a")]
    _write(conf, "b", _instance(enabled=False))
    assert monitor.scan().stopped == ["b"]
    (conf / "destinations" / "a" / "instance.yaml").unlink()
    (conf / "destinations" / "a").rmdir()
    assert monitor.scan().stopped == ["a"]
    assert runner.live == {}


def test_invalid_edit_keeps_the_last_good_config(
    conf: Path, caplog: pytest.LogCaptureFixture
) -> None:
    runner = FakeRunner()
    monitor = _monitor(conf, runner)
    _write(conf, "a", _instance())
    monitor.scan()
    good = runner.live["a"]
    _write(conf, "a", _instance() + "store:\n  batch_sise: 3\n")
    result = monitor.scan()
    assert not result.acted
    assert runner.live == {"a": good}
    assert "store.batch_sise" in result.invalid["a"]
    assert "instance.yaml" in result.invalid["a"]
    errors = [r for r in caplog.records if "keeps its last good config" in r.getMessage()]
    monitor.scan()
    again = [r for r in caplog.records if "keeps its last good config" in r.getMessage()]
    assert len(errors) == len(again) == 1  # one clear error, not one per scan
    _write(conf, "a", _instance("shop\\\\.orders"))
    assert monitor.scan().reloaded == ["a"]


def test_a_failed_stop_is_retried_at_the_next_scan(conf: Path) -> None:
    runner = FakeRunner()
    monitor = _monitor(conf, runner)
    _write(conf, "a", _instance())
    monitor.scan()
    runner.stuck.add("a")
    _write(conf, "a", _instance("shop\\\\.orders"))
    result = monitor.scan()
    assert result.stop_pending == ["a"]
    assert not result.reloaded
    assert monitor.scan().stop_pending == ["a"]
    runner.stuck.clear()
    result = monitor.scan()
    assert result.reloaded == ["a"]
    new_hash = load_config(conf, ENV).destinations["a"].content_hash
    assert runner.live == {"a": new_hash}


def test_removed_then_back_before_the_stop_finished(conf: Path) -> None:
    runner = FakeRunner()
    monitor = _monitor(conf, runner)
    _write(conf, "a", _instance())
    monitor.scan()
    runner.stuck.add("a")
    text = (conf / "destinations" / "a" / "instance.yaml").read_text()
    (conf / "destinations" / "a" / "instance.yaml").unlink()
    (conf / "destinations" / "a").rmdir()
    assert monitor.scan().stop_pending == ["a"]
    _write(conf, "a", text)
    assert monitor.scan().stop_pending == ["a"]  # no second start while the first runs
    runner.stuck.clear()
    assert monitor.scan().reloaded == ["a"]
    assert list(runner.live) == ["a"]


def test_a_run_that_ended_on_its_own_starts_again(conf: Path) -> None:
    runner = FakeRunner()
    monitor = _monitor(conf, runner)
    _write(conf, "a", _instance())
    monitor.scan()
    runner.crash("a", "failed: source down")
    assert monitor.scan().restarted == ["a"]
    assert "a" in runner.live


def test_platform_change_is_reported_not_applied(conf: Path) -> None:
    runner = FakeRunner()
    monitor = _monitor(conf, runner)
    _write(conf, "a", _instance())
    monitor.scan()
    (conf / "platform.yaml").write_text("lake_root: /elsewhere\n")
    result = monitor.scan()
    assert result.platform_changed
    assert not result.acted
    assert not monitor.scan().platform_changed  # reported once


def test_unusable_platform_file_changes_nothing(conf: Path) -> None:
    runner = FakeRunner()
    monitor = _monitor(conf, runner)
    _write(conf, "a", _instance())
    monitor.scan()
    (conf / "platform.yaml").write_text("lake_rot: x\n")
    result = monitor.scan()
    assert result.platform_error is not None
    assert "lake_rot" in result.platform_error
    assert list(runner.live) == ["a"]


def test_stop_all(conf: Path) -> None:
    runner = FakeRunner()
    monitor = _monitor(conf, runner)
    _write(conf, "a", _instance())
    _write(conf, "b", _instance())
    monitor.scan()
    runner.stuck.add("b")
    assert monitor.stop_all() == ["b"]
    runner.stuck.clear()
    assert monitor.stop_all() == []
    assert runner.live == {}


@pytest.mark.parametrize(
    ("relative", "is_dir", "relevant"),
    [
        ("platform.yaml", False, True),
        ("destinations/a", True, True),
        ("destinations/a/instance.yaml", False, True),
        ("destinations/a/.instance.yaml.swp", False, False),
        ("destinations/a/instance.yaml~", False, False),
        ("destinations/a/4913", False, False),
        ("destinations/.tmp", True, False),
        ("destinations/a/sub/instance.yaml", False, False),
        ("other.yaml", False, False),
    ],
)
def test_which_paths_wake_the_monitor(
    conf: Path, relative: str, is_dir: bool, relevant: bool
) -> None:
    assert is_relevant(conf, str(conf / relative), is_directory=is_dir) is relevant


def test_watchdog_wakes_on_a_new_destination(conf: Path) -> None:
    wake = threading.Event()
    watch = ConfigWatch(conf, wake)
    watch.start()
    try:
        (conf / "destinations" / "a").mkdir()
        (conf / "destinations" / "a" / ".instance.yaml.swp").write_text("x")
        assert wake.wait(30)
        wake.clear()
        (conf / "destinations" / "a" / "instance.yaml").write_text(_instance())
        assert wake.wait(30)
    finally:
        watch.stop()
