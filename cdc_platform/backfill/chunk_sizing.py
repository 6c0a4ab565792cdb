"""How many rows the snapshot's next chunk reads: a fixed number, or as many as fit a time.

Each chunk costs a fixed part (the high watermark, the segment's cut, one Delta commit, two
writes of the progress file) and a part per row. Small chunks spend most of their time on
the fixed part; large ones hold the stream back, since the binlog reaches the change log
only with each chunk's commit (a change waits about one chunk's time). Sizing by time gets
both: the chunk grows while a chunk takes less than ``target_seconds`` and shrinks when it
takes longer (a wider table, a busier machine), at most by a factor of two per chunk so one
slow commit does not swing it, and always within ``min_rows`` .. ``max_rows`` (memory: a
chunk's rows are held until its commit).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DEFAULT_CHUNK_SECONDS",
    "DEFAULT_FIRST_CHUNK",
    "DEFAULT_MAX_CHUNK",
    "DEFAULT_MIN_CHUNK",
    "ChunkSizer",
]

DEFAULT_CHUNK_SECONDS = 0.5
"""Target time of one chunk (read, segment, commit) when sizing by time."""
DEFAULT_FIRST_CHUNK = 2000
"""The first chunk's rows when sizing by time (the fixed size before sizing existed)."""
DEFAULT_MIN_CHUNK = 500
DEFAULT_MAX_CHUNK = 50_000

_MAX_STEP = 2.0
"""A chunk is at most this factor larger, or smaller, than the one before it."""


@dataclass
class ChunkSizer:
    """The next chunk's rows; :meth:`observe` each chunk's rows and time to adapt them.

    With ``target_seconds`` None the size stays ``rows``.
    """

    rows: int
    target_seconds: float | None = None
    min_rows: int = DEFAULT_MIN_CHUNK
    max_rows: int = DEFAULT_MAX_CHUNK

    def __post_init__(self) -> None:
        if self.rows < 1:
            raise ValueError(f"chunk size must be >= 1, not {self.rows}")
        if self.target_seconds is not None:
            if self.target_seconds <= 0:
                raise ValueError(f"chunk seconds must be > 0, not {self.target_seconds}")
            if not 1 <= self.min_rows <= self.max_rows:
                raise ValueError(f"chunk bounds {self.min_rows}..{self.max_rows} are empty")
            self.rows = min(self.max_rows, max(self.min_rows, self.rows))

    @classmethod
    def for_settings(cls, chunk_size: int | None, chunk_seconds: float | None) -> ChunkSizer:
        """A fixed ``chunk_size``, or (None) sized by ``chunk_seconds`` from the default
        first chunk (docs/snapshot.md)."""
        if chunk_size is not None:
            return cls(chunk_size)
        return cls(DEFAULT_FIRST_CHUNK, chunk_seconds or DEFAULT_CHUNK_SECONDS)

    @property
    def adaptive(self) -> bool:
        """Whether the size follows the chunks' times."""
        return self.target_seconds is not None

    def observe(self, asked: int, read: int, seconds: float) -> None:
        """One chunk asked ``asked`` rows, got ``read`` and took ``seconds`` in all.

        A short chunk (the table's last) or one that read nothing says little about the rate
        and leaves the size as it is.
        """
        if self.target_seconds is None or read < asked or read <= 0 or seconds < 0:
            return
        rate_rows = read * self.target_seconds / max(seconds, 1e-6)
        wanted = min(asked * _MAX_STEP, max(asked / _MAX_STEP, rate_rows))
        self.rows = int(min(self.max_rows, max(self.min_rows, wanted)))
