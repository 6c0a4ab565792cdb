"""The context-manager protocol of objects whose leaving is their ``close()``.

One home for ``with x:`` on the engine's closable objects (a lease, the signal routes):
entering gives the object itself (a subclass may start something first), and leaving, with
or without an exception, calls ``close()``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType
from typing import Self

__all__ = ["Closing"]


class Closing(ABC):
    """Base of objects used as ``with x:``; leaving the block calls :meth:`close`."""

    @abstractmethod
    def close(self) -> None:
        """Give back what the object holds."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
