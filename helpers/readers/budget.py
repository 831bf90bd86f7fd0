"""What a read may still decode: the limits on bytes and events, held for a folder's ranks together.

Every reader charges what it decodes as it decodes it: the bytes a file gives (after decompression,
before any other decoding) and the trace events a parser has seen. One file is refused by its own
limits where it is read; a folder of ranks is also refused once its ranks *together* pass them, in
whatever order and in however many processes they are read (the counts are then shared through
memory the processes inherit), so a folder of many small ranks, or of hard links to one rank, cannot
slip past a limit that each of its files keeps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import TraceError
from ..outputs import size_words


class Budget:
    """The bytes and events a folder's ranks may decode together (``folder``), counted across processes
    when ``shared`` holds two ``multiprocessing.Value('q')`` counters that the reading processes inherit."""

    def __init__(self, folder: Path, max_bytes: int, max_events: int, shared: tuple[Any, Any] | None = None) -> None:
        self.folder, self.max_bytes, self.max_events = folder, max_bytes, max_events
        self.shared = shared
        self.bytes = 0
        self.events = 0

    def _add(self, index: int, n: int) -> int:
        if self.shared is None:
            if index == 0:
                self.bytes += n
                return self.bytes
            self.events += n
            return self.events
        counter = self.shared[index]
        with counter.get_lock():
            counter.value += n
            return int(counter.value)

    def add_bytes(self, n: int) -> None:
        """``n`` more bytes decoded; over the folder's limit is refused."""
        if n and self._add(0, n) > self.max_bytes:
            raise TraceError(f"{self.folder}: its ranks together expand to over {size_words(self.max_bytes)}, over the "
                             "limit; if the job is really this big raise it with --max-mb (API: max_bytes=)")

    def add_events(self, n: int) -> None:
        """``n`` more trace events seen; over the folder's limit is refused."""
        if n and self._add(1, n) > self.max_events:
            raise TraceError(f"{self.folder}: its ranks together hold more than {self.max_events:,} events, over the "
                             "limit; if the job is really this big raise it with --max-events (API: max_events=)")


def charge_bytes(budget: Budget | None, n: int) -> None:
    if budget is not None:
        budget.add_bytes(n)


def charge_events(budget: Budget | None, n: int) -> None:
    if budget is not None:
        budget.add_events(n)
