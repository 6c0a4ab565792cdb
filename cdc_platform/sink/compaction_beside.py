"""A compaction merged beside the stream and committed by the writer between two appends.

Merging a compaction's files took 100-310 ms (median 176) of the 150-380 ms that each
compaction held the stream back at 5,000 rows/s, and the batches behind it were the slowest
of a run. So the writer only plans a compaction (a few milliseconds, from its own snapshot),
a thread merges and uploads the new files (:func:`~.compaction.write_plan`; pyarrow and the
object store release the interpreter lock), and the writer commits the swap after a later
append, once the thread is done: one small commit instead of the whole merge.

The commit is made on the writer's newest version instead of the plan's. That is safe when
no commit since the plan removed a file: only compactions remove files, so every planned file
is then still in the table and held by no other compaction. The writer's own commits since the
plan are appends (:meth:`PendingCompaction.follow` records them); any other version in between
(a snapshot's or a re-read's chunk, written by another object of the same destination, or
anyone else's commit) is read from the log and must hold no ``remove`` action
(:func:`removes_nothing`). The commit itself is refused by delta-rs (no retries) when anyone
committed after the writer's newest version. Otherwise the new files are deleted and nothing
changes; the next compaction plans again.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable

import pyarrow as pa

from cdc_platform.errors import SinkError
from cdc_platform.sink.compaction import CompactedFile, discard, write_plan
from cdc_platform.sink.compaction_plan import CompactionPlan
from cdc_platform.sink.lake_files import LakeFile

__all__ = ["PendingCompaction", "removes_nothing"]

logger = logging.getLogger("cdc_platform.sink")


class PendingCompaction:
    """One compaction whose files a thread is writing while the writer goes on appending.

    Created by the writer right after planning; :meth:`follow` is told the version of each
    of the writer's later commits; :meth:`written` hands the finished files over once.
    """

    def __init__(
        self, root: LakeFile, plan: CompactionPlan, schema: pa.Schema, *, name: str
    ) -> None:
        self.plan = plan
        self._own: set[int] = set()
        self._root = root
        self._schema = schema
        self._files: list[CompactedFile] | None = None
        self._error: BaseException | None = None
        self._taken = False
        self._thread = threading.Thread(target=self._write, name=name, daemon=True)
        self._thread.start()

    def _write(self) -> None:
        try:
            self._files = write_plan(self._root, self.plan, self._schema)
        except BaseException as exc:  # handed to the writer by written()
            self._error = exc

    def follow(self, version: int) -> None:
        """The writer committed ``version`` (an append)."""
        self._own.add(version)

    def others_before(self, version: int) -> list[int]:
        """The versions after the plan's, up to ``version``, that the writer did not commit."""
        return [v for v in range(self.plan.version + 1, version + 1) if v not in self._own]

    def safe_on(self, version: int) -> bool:
        """Whether the swap may be committed on ``version``: no commit since the plan's
        removed a file (see the module docstring)."""
        return version >= self.plan.version and removes_nothing(
            self._root, self.others_before(version)
        )

    @property
    def done(self) -> bool:
        """Whether the thread finished (its files written, or failed)."""
        return not self._thread.is_alive()

    def written(self) -> list[CompactedFile]:
        """The new files, after waiting for the thread.

        Raises:
            SinkError: the merge failed (the files it wrote are already deleted).
        """
        self._thread.join()
        if self._taken:
            raise RuntimeError("the files of a pending compaction are handed over once")
        self._taken = True
        if self._error is not None:
            raise self._error
        assert self._files is not None
        return self._files

    def abandon(self) -> None:
        """Wait for the thread and delete what it wrote (no commit will refer to it)."""
        self._thread.join()
        if not self._taken and self._files is not None:
            self._taken = True
            discard(self._files)


def removes_nothing(root: LakeFile, versions: Iterable[int]) -> bool:
    """Whether the commits ``versions`` of the table at ``root`` hold no ``remove`` action
    (False when one cannot be read: log cleanup may have removed it)."""
    for version in versions:
        try:
            text = root.child("_delta_log", f"{version:020d}.json").read_text()
        except SinkError as exc:
            logger.info("commit %d of %s unreadable (%s): compaction dropped", version, root, exc)
            return False
        if text is None:
            return False
        for line in text.splitlines():
            if line.strip() and "remove" in json.loads(line):
                return False
    return True
