"""The one place that picks a destination's source by ``source.mode``.

Both sources offer what the runtime uses (:class:`Source`): ``check()``, ``current_position()``,
``start_position()``, ``events()`` (whole transactions, each ended by a COMMIT event and naming
the server it was read from) and ``event_lists()`` (the same in lists), ``stop()`` and
``reconnects``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

from pydantic import SecretStr

from cdc_platform.config.source import SourceConfig
from cdc_platform.config.start import StartConfig
from cdc_platform.events import ChangeEvent, ResumePosition
from cdc_platform.source.id_watch.watch import IdWatchSource
from cdc_platform.source.stream.binlog import BinlogSource

__all__ = ["Source", "open_source"]


class Source(Protocol):
    """What :class:`~cdc_platform.runtime.instance.DestinationRuntime` needs from a source."""

    reconnects: int

    def check(self) -> object:
        """Verify the server and settings; raises SourceError/ConfigError naming the fix."""
        ...

    def current_position(self) -> ResumePosition:
        """The source's position now (the binlog's end; the id watch's start)."""
        ...

    def start_position(self, start: StartConfig) -> ResumePosition:
        """Where a destination without a checkpoint begins: ``start`` resolved on the binlog
        source's server (see :mod:`.start_position`); the id watch begins at its own start."""
        ...

    def events(self) -> Iterator[ChangeEvent]:
        """Blocking stream of whole transactions until :meth:`stop`; each names the server it
        was read from (``Transaction.server``; None: the source has no such notion)."""
        ...

    def event_lists(self) -> Iterator[Sequence[ChangeEvent]]:
        """:meth:`events` in non-empty lists, for a consumer that stores a list at once."""
        ...

    def stop(self) -> None:
        """End :meth:`events` promptly, from any thread."""
        ...

    def oldest_prepared_xa_age(self) -> float | None:
        """Seconds the longest-prepared XA transaction held has waited (None: none held)."""
        ...

    def binlog_retention_headroom(self, committed_source_time: float | None) -> float | None:
        """Seconds before the server may purge the log a restart from ``committed_source_time``
        needs (``inf``: kept for ever; None: not known or not a log-reading source)."""
        ...


def open_source(  # noqa: PLR0913 (the config; the rest keyword-only, as each source needs)
    config: SourceConfig,
    *,
    resume: ResumePosition | None,
    password: str | SecretStr | None = None,
    table_uri: str | None = None,
    storage_options: dict[str, str] | None = None,
    heartbeats: bool = False,
) -> Source:
    """The source for ``config.mode``: the binlog reader, or the id watch, which reads the
    change log at ``table_uri`` on start to rebuild what it already emitted. ``heartbeats``:
    the binlog reader emits idle COMMITs on server heartbeats (``Transaction.idle``)."""
    if config.mode == "id_watch":
        return IdWatchSource(
            config,
            resume=resume,
            password=password,
            table_uri=table_uri,
            storage_options=storage_options,
        )
    return BinlogSource(config, resume=resume, password=password, heartbeats=heartbeats)
