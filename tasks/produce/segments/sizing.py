"""Sizing a prefix: listing it up to the thresholds that make it large enough for segments
(``segment_min_objects``, ``segment_min_bytes``), alone (the archive DAG's size task, ``--segments``)
or beside a pipeline that starts on its first page (``SizingListing``)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from typing import Callable, Iterator

from s3arch.core.config import S3Url
from s3arch.io.sources import resolved, source_pages
from s3arch.io.store import Store


# What a sizing does with a large prefix's pages (in key order) and the epoch seconds its
# listing started, given the prefix: writes them for the task that plans it, and answers the
# hand-off that task takes over (tasks/produce/segments/sized.py).
HandOff = Callable[[str, list, float], dict]


@dataclass(frozen=True)
class PrefixSize:
    """What listing a prefix up to a threshold showed: enough to decide one task or segments."""

    prefix: str
    objects: int
    bytes: int
    complete: bool  # the listing ended (else it stopped at the threshold: at least this much)
    seconds: float
    requests: int
    handoff: dict | None = None  # a large prefix's pages, written for its plan (``HandOff``)

    def large(self, min_objects: int, min_bytes: int) -> bool:
        return self.objects >= min_objects or self.bytes >= min_bytes


def size_prefix(store: Store, bucket: str, prefix: str, min_objects: int, min_bytes: int,
                hand_off: HandOff | None = None) -> PrefixSize:
    """List ``prefix`` until it proves large or ends: at most ``min_objects / 1,000`` LISTs,
    so sizing a small prefix costs what listing it costs, and a large one no more. A large
    one's pages go to ``hand_off``, whose answer is its size's ``handoff``."""
    source = resolved(store, S3Url(bucket, prefix))  # a pattern: the prefixes it expands to
    sizing = SizingListing(store, source, min_objects, min_bytes)
    size = sizing.result()
    if hand_off is None or not size.large(min_objects, min_bytes):
        return size
    return replace(size, handoff=hand_off(prefix, sizing.listed() or [], sizing.listed_at))


SIZING_THREADS = 8  # prefixes sized at once (each is LISTs one after another, up to its threshold)


def size_prefixes(store: Store, bucket: str, prefixes: list[str], min_objects: int, min_bytes: int,
                  threads: int = SIZING_THREADS, hand_off: HandOff | None = None) -> list[PrefixSize]:
    """``size_prefix`` of each prefix, in order, at most ``threads`` at once: a backfill's
    days are sized in the time of the slowest few, not of all of them one after another."""
    from concurrent.futures import ThreadPoolExecutor

    if len(prefixes) <= 1:
        return [size_prefix(store, bucket, p, min_objects, min_bytes, hand_off) for p in prefixes]
    with ThreadPoolExecutor(min(threads, len(prefixes)), thread_name_prefix="s3arch-sizing") as pool:
        return list(pool.map(lambda p: size_prefix(store, bucket, p, min_objects, min_bytes, hand_off), prefixes))


class PrefixIsLarge(Exception):
    """Raised into a pipeline that started on a prefix still being sized, once the sizing
    shows it is large enough for segments: the pipeline stops (its uploads aborted) and the
    run goes on as segments. Never leaves the commit protocol."""


class SizingListing:
    """``size_prefix`` in a thread, its pages handed on as they arrive: a pipeline can start
    on the first page while the rest of the prefix is sized, instead of waiting for up to
    ``min_objects / 1,000`` LISTs one after the other. If the prefix proves large, the
    pipeline's listing raises ``PrefixIsLarge``; the pages listed are kept for ``result``
    (at most the threshold's worth)."""

    def __init__(self, store: Store, source: S3Url, min_objects: int, min_bytes: int):
        self._store, self._source = store, source
        self._min_objects, self._min_bytes = min_objects, min_bytes
        self._pages: list = []
        self._done = False
        self._large = False
        self._error: BaseException | None = None
        self._started = time.monotonic()
        self.listed_at = time.time()  # for a hand-off of its pages
        self._cond = threading.Condition()
        threading.Thread(target=self._list, name="s3arch-sizing", daemon=True).start()

    def _list(self) -> None:
        objects = size = 0
        try:
            for page in source_pages(self._store, self._source):
                objects += len(page)
                size += sum(o.size for o in page)
                with self._cond:
                    self._pages.append(page)
                    self._large = objects >= self._min_objects or size >= self._min_bytes
                    self._cond.notify_all()
                if self._large:
                    break
        except BaseException as exc:  # noqa: BLE001 - handed to whoever reads the pages
            self._error = exc
        with self._cond:
            self._done = True
            self._cond.notify_all()

    def pages(self) -> Iterator[list]:
        """The prefix's pages as they are listed; ``PrefixIsLarge`` once it proves large."""
        i = 0
        while True:
            with self._cond:
                while i >= len(self._pages) and not self._done and not self._large:
                    self._cond.wait()
                if self._large:
                    raise PrefixIsLarge()
                if i < len(self._pages):
                    page = self._pages[i]
                elif self._error is not None:
                    raise self._error
                else:
                    return
            yield page
            i += 1

    def result(self) -> PrefixSize:
        with self._cond:
            while not self._done:
                self._cond.wait()
        if self._error is not None:
            raise self._error
        return PrefixSize(self._source.key, sum(map(len, self._pages)), sum(o.size for p in self._pages for o in p),
                          not self._large, time.monotonic() - self._started, max(1, len(self._pages)))

    def listed(self) -> list[list] | None:
        """Once the sizing ended, the pages it listed: the prefix's first keys, in key order, for
        the plan to go on from (None if it failed: the plan lists from the start)."""
        with self._cond:
            while not self._done:
                self._cond.wait()
        return None if self._error is not None else list(self._pages)
