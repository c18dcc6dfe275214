"""The plan's listing, recorded for the segments: a prefix is listed once per segmented run.

The plan lists the prefix in parallel key ranges (tasks/io/ranges.py) and writes what it lists
into chunks, temporaries of at most ``CHUNK_PAGES`` listing pages, each from one key range
and so in key order. The plan names every chunk with its first and last key; a segment reads
the chunks its range overlaps instead of listing the source again. It also archives exactly
the objects the plan counted and placed in the tar stream, so a key written into its range
after the plan no longer fails the segment (that key is left for the next run, and
``--delete-source`` never deletes it: it is not in the manifest).
"""

from __future__ import annotations

import gzip
import json
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Iterator

from s3arch.core.config import WriteOptions
from s3arch.io.listed import ListedObject
from s3arch.io.keys import key_order
from s3arch.format.manifest import ArchiveLayout
from s3arch.produce.segments.keys import chunk_key
from s3arch.produce.segments.temporaries import get_temporary, put_temporary
from s3arch.io.store import Store

CHUNK_PAGES = 20  # about 20,000 keys, 0.5-1 MB gzipped
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class ListingChunk:
    first: str
    last: str
    objects: int
    key: str


@dataclass
class _Open:
    first: str
    last: str = ""
    objects: int = 0
    lines: list[bytes] = field(default_factory=list)


def page_line(page: list[ListedObject], classes: bool = False) -> bytes:
    """A listing page as one JSON line, by column, times as seconds since the epoch: no Python
    loop per object (isoformat alone would cost more than the listing), and exact to the
    microsecond. ``classes``: the storage classes too (a fifth column)."""
    keys, sizes, etags, times, listed_classes = zip(*page)
    columns = [keys, sizes, etags, list(map(datetime.timestamp, times))]
    return json.dumps([*columns, listed_classes] if classes else columns).encode()


def page_of(line: bytes) -> list[ListedObject]:
    """The page ``page_line`` wrote (without its classes: STANDARD)."""
    keys, sizes, etags, seconds, *classes = json.loads(line)
    times = [_EPOCH + timedelta(seconds=t) for t in seconds]
    return list(map(ListedObject, keys, sizes, etags, times, *classes))


class ListingRecorder:
    """Chunks of listing pages, one being filled per key range, written in the background
    (at most ``uploads`` at once) while the listing goes on."""

    def __init__(self, options: WriteOptions, store: Store, layout: ArchiveLayout, run: str, uploads: int = 4):
        self._options, self._store, self._layout, self._run = options, store, layout, run
        self._open: dict[object, _Open] = {}
        self._chunks: list[ListingChunk] = []
        self._pool = ThreadPoolExecutor(uploads, thread_name_prefix="s3arch-record")
        self._slots = threading.Semaphore(2 * uploads)  # chunks in memory, waiting or being written
        self._pending: list[Future] = []

    def add(self, source: object, page: list[ListedObject]) -> None:
        """A page of key range ``source``, which lists its pages in key order."""
        chunk = self._open.get(source)
        if chunk is None:
            chunk = self._open[source] = _Open(page[0].key)
        chunk.lines.append(page_line(page))  # classes: checked by the plan
        chunk.last, chunk.objects = page[-1].key, chunk.objects + len(page)
        if len(chunk.lines) >= CHUNK_PAGES:
            self.end(source)

    def end(self, source: object) -> None:
        """Key range ``source`` is listed (or its chunk is full): write its chunk."""
        chunk = self._open.pop(source, None)
        if chunk is None:
            return
        record = ListingChunk(chunk.first, chunk.last, chunk.objects, chunk_key(self._layout, self._run,
                                                                                len(self._chunks)))
        self._chunks.append(record)
        body = gzip.compress(b"\n".join(chunk.lines) + b"\n", compresslevel=1)
        self._slots.acquire()

        def write():
            try:
                put_temporary(self._store, self._layout, self._options, record.key, body)
            finally:
                self._slots.release()

        self._pending.append(self._pool.submit(write))
        self._pending = [f for f in self._pending if not f.done() or f.exception() is not None]

    def close(self) -> tuple[ListingChunk, ...]:
        """Every chunk written (the first error raised otherwise), in key order."""
        for source in list(self._open):
            self.end(source)
        try:
            for f in self._pending:
                f.result()
        finally:
            self._pool.shutdown(cancel_futures=True)
        return tuple(sorted(self._chunks, key=lambda c: key_order(c.first)))

    def abandon(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def recorded_pages(store: Store, layout: ArchiveLayout, chunks: tuple[ListingChunk, ...], start_after: str | None,
                   last_key: str) -> Iterator[list[ListedObject]]:
    """The pages of keys (``start_after``, ``last_key``] as the plan listed them."""
    after = key_order(start_after) if start_after is not None else None
    end = key_order(last_key)
    for chunk in chunks:
        if (after is not None and key_order(chunk.last) <= after) or key_order(chunk.first) > end:
            continue
        body = get_temporary(store, layout, chunk.key)
        if body is None:
            from s3arch.core.errors import ObjectMissing

            raise ObjectMissing(f"s3://{layout.bucket}/{chunk.key}, the plan's listing, is missing: the run's "
                                "temporaries were cleaned up", hint="run the prefix again; a new plan is made")
        for line in gzip.decompress(body).splitlines():
            page = page_of(line)
            if after is not None and key_order(page[0].key) <= after:
                page = [o for o in page if key_order(o.key) > after]
            if page and key_order(page[-1].key) > end:
                page = [o for o in page if key_order(o.key) <= end]
            if page:
                yield page
