"""Sources that span many prefixes: a pattern with ``*`` wildcards (``AWSLogs/*/CloudTrail/*/2026/11/21/``)
expanded into the prefixes it matches, and those prefixes listed as one stream.

A ``*`` stands for one run of characters up to the literal character after it (``/`` for a
path segment, ``.`` in ``*.2026-11-21-``), never across a ``/``. It is expanded with LISTs
whose ``Delimiter`` is that character: level by level, every prefix of a level listed at once
(a bounded pool), each (prefix, delimiter) listed once for the life of the S3 clients. The
prefixes found never overlap, so listed one after another in key order they are one listing
in S3's key order, and a key range (``start_after``, ``last_key``: a segment) is a range over
their union.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterator

from s3arch.core.config import ArchiveSpec, S3Url
from s3arch.core.errors import BadArgument
from s3arch.io.listed import ListedObject
from s3arch.io.keys import key_order
from s3arch.io.listing import iter_pages
from s3arch.io.ranges import LISTING_WORKERS, ParallelListing, RangeListing
from s3arch.io.store import Store

WILDCARD = "*"
DEFAULT_MAX_PREFIXES = ArchiveSpec.max_prefixes  # prefixes a pattern may expand to (a job's max_prefixes)
EXPAND_THREADS = 16  # delimiter LISTs in flight while expanding one level
# Prefixes of a pattern listed at once: a day's prefixes hold a page or two each, so the
# listing is that many round trips deep, not one per prefix.
PREFIX_WORKERS = 16


@dataclass(frozen=True)
class Source(S3Url):
    """A pattern (``key``: its name in messages, manifests and destination keys) and the
    prefixes it expanded to, in key order."""

    expanded: tuple[str, ...] = ()

    @property
    def prefixes(self) -> tuple[str, ...]:
        return self.expanded


def is_pattern(key: str) -> bool:
    return WILDCARD in key


def check_pattern(pattern: str, what: str) -> None:
    """Every ``*`` must be followed by a literal character (the delimiter that ends it)."""
    for i, char in enumerate(pattern):
        if char == WILDCARD and (i + 1 == len(pattern) or pattern[i + 1] == WILDCARD):
            raise BadArgument(f"{what} {pattern!r}: a '*' must be followed by the character that ends it",
                              hint="write a wildcard as a whole path segment (AWSLogs/*/CloudTrail/) or before "
                                   "a separator in a name (*.2026-11-21-)")


class _Levels:
    """Delimiter listings made for one set of S3 clients: each (bucket, prefix, delimiter) once
    (threads that ask for one being listed wait for it), again only after ``LEVELS_TTL``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.found: dict[tuple[str, str, str], tuple[Future, float]] = {}
        self.requests = 0


# A long-lived process (the catalog's) sees accounts and regions added since: a run is shorter.
LEVELS_TTL = 300.0
_LEVELS: "weakref.WeakKeyDictionary[object, _Levels]" = weakref.WeakKeyDictionary()
_LEVELS_LOCK = threading.Lock()


def _levels_of(store: Store) -> _Levels:
    with _LEVELS_LOCK:  # one per set of clients: every store over one client shares it
        levels = _LEVELS.get(store.client)
        if levels is None:
            levels = _LEVELS[store.client] = _Levels()
        return levels


def _common_prefixes(store: Store, levels: _Levels, bucket: str, prefix: str, delimiter: str) -> list[str]:
    key = (bucket, prefix, delimiter)
    with levels.lock:
        entry = levels.found.get(key)
        if entry is not None and time.monotonic() - entry[1] < LEVELS_TTL:
            future, mine = entry[0], False
        else:
            future, mine = Future(), True
            levels.found[key] = (future, time.monotonic())
    if not mine:
        return future.result()
    try:
        found = _list_level(store, levels, bucket, prefix, delimiter)
    except BaseException as exc:
        with levels.lock:
            levels.found.pop(key, None)  # a failure is not remembered: the next caller lists again
        future.set_exception(exc)
        raise
    future.set_result(found)
    return found


def _list_level(store: Store, levels: _Levels, bucket: str, prefix: str, delimiter: str) -> list[str]:
    found: list[str] = []
    for page in store.pages("list_objects_v2", f"list s3://{bucket}/{prefix} (delimiter {delimiter!r})",
                            Bucket=bucket, Prefix=prefix, Delimiter=delimiter):
        with levels.lock:
            levels.requests += 1
        found += [p["Prefix"] for p in page.get("CommonPrefixes") or ()]
    # A value never spans a '/': '*' is a path segment, or a part of a name.
    return [p for p in found if p[len(prefix):-1] and "/" not in p[len(prefix):-1]]


def expand(store: Store, bucket: str, pattern: str, max_prefixes: int = DEFAULT_MAX_PREFIXES,
           split_at: int | None = None) -> list[str]:
    """The prefixes ``pattern`` matches in ``bucket``, in key order. With ``split_at`` (a
    wildcard's number, from 1), only the wildcards up to it are expanded: the names of the
    split's parts. No match, or more than ``max_prefixes`` at any level, is a ``BadArgument``
    naming the pattern, raised before anything is written."""
    check_pattern(pattern, f"s3://{bucket}/ pattern")
    pieces = pattern.split(WILDCARD)
    stop = len(pieces) - 1 if split_at is None else split_at
    levels = _levels_of(store)
    candidates = [pieces[0]]
    with ThreadPoolExecutor(EXPAND_THREADS, thread_name_prefix="s3arch-expand") as pool:
        for literal in pieces[1:stop + 1]:
            found = pool.map(lambda c: _common_prefixes(store, levels, bucket, c, literal[0]), candidates)
            candidates = [p + literal[1:] for level in found for p in level]
            if not candidates:
                raise BadArgument(f"s3://{bucket}/{pattern} matches no prefix: no key is under "
                                  f"s3://{bucket}/{pieces[0]}... as far as the wildcards reach",
                                  hint="check the pattern against a key of the bucket (aws s3 ls); each '*' "
                                       "stands for one path segment or the part of a name before its separator")
            if len(candidates) > max_prefixes:
                raise BadArgument(f"s3://{bucket}/{pattern} expands to more than {max_prefixes:,} prefixes "
                                  f"({len(candidates):,} at '{literal}'); nothing was written",
                                  hint="narrow the pattern (name an account or region), split the job by a "
                                       "wildcard (split_by), or raise max_prefixes")
    if split_at is not None:
        rest = WILDCARD.join(pieces[stop + 1:])
        candidates = [c + (WILDCARD + rest if stop + 1 < len(pieces) else "") for c in candidates]
    return sorted(candidates, key=key_order)


def child_prefixes(store: Store, bucket: str, prefix: str, delimiter: str = "/") -> list[str]:
    """The ``CommonPrefixes`` of a delimiter listing of ``prefix``, listed once per set of
    clients like a pattern's levels (``expansion_requests`` counts them)."""
    return _common_prefixes(store, _levels_of(store), bucket, prefix, delimiter)


def expansion_requests(store: Store) -> int:
    """The delimiter LISTs made so far with these clients (for the bench and the reports)."""
    return _levels_of(store).requests


def resolved(store: Store, source: S3Url, max_prefixes: int = DEFAULT_MAX_PREFIXES) -> S3Url:
    """``source`` itself if its key is a plain prefix, else the ``Source`` it expands to."""
    if not is_pattern(source.key) or isinstance(source, Source):
        return source
    return Source(source.bucket, source.key, tuple(expand(store, source.bucket, source.key, max_prefixes)))


def holds_objects(store: Store, bucket: str, name: str, max_prefixes: int = DEFAULT_MAX_PREFIXES) -> tuple[bool, int]:
    """(whether a source name, a prefix or a pattern, holds at least one object; the LISTs of
    one key it made to tell): one per prefix until one answers. A pattern's levels are listed
    once per set of clients (``expansion_requests`` counts those)."""
    try:
        prefixes = expand(store, bucket, name, max_prefixes) if is_pattern(name) else [name]
    except BadArgument:
        return False, 0  # matches no prefix
    for probes, prefix in enumerate(prefixes, 1):
        page = store.call("list_objects_v2", f"list s3://{bucket}/{prefix}", "bucket", Bucket=bucket, Prefix=prefix,
                          MaxKeys=1)
        if page.get("KeyCount") or page.get("Contents"):
            return True, probes
    return False, len(prefixes)


def source_pages(store: Store, source: S3Url, start_after: str | None = None, last_key: str | None = None,
                 workers: int = 1, ordered: bool = True) -> Iterator[list[ListedObject]]:
    """``iter_pages`` over every prefix of ``source``, in key order (unless not ``ordered``),
    keys in (``start_after``, ``last_key``] only."""
    prefixes = _in_range(source.prefixes, start_after, last_key)
    if len(source.prefixes) == 1:
        yield from iter_pages(store, source.bucket, source.prefixes[0], start_after, last_key,
                              workers=workers, ordered=ordered)
        return
    listing = PrefixesListing(store, source.bucket, prefixes, start_after, last_key,
                              workers=max(workers, PREFIX_WORKERS), ordered=ordered)
    try:
        yield from listing
    finally:
        listing.close()


def source_listing(store: Store, source: S3Url, workers: int = PREFIX_WORKERS, start_after: str | None = None):
    """An unordered parallel listing of ``source`` with ``by_range()`` and ``close()``:
    ``RangeListing`` for one prefix (key ranges in parallel), ``PrefixesListing`` for many;
    keys after ``start_after`` only."""
    if len(source.prefixes) == 1:
        return RangeListing(store, source.bucket, source.prefixes[0], start_after, workers=LISTING_WORKERS,
                            ordered=False)
    return PrefixesListing(store, source.bucket, _in_range(source.prefixes, start_after, None), start_after,
                           workers=workers, ordered=False)


def _in_range(prefixes: tuple[str, ...], start_after: str | None, last_key: str | None) -> list[str]:
    """The prefixes that can hold keys in (``start_after``, ``last_key``]: since no prefix
    is another's, all keys under one sort before all keys under a later one."""
    kept = []
    for prefix in prefixes:
        if last_key is not None and key_order(last_key) < key_order(prefix):
            break
        if start_after is not None and not start_after.startswith(prefix) \
                and key_order(start_after) > key_order(prefix):
            continue
        kept.append(prefix)
    return kept


@dataclass(eq=False)
class _Prefix:
    prefix: str
    pages: deque
    more: bool = True


class PrefixesListing(ParallelListing):
    """Many prefixes listed at once, ``workers`` at a time in key order, their pages handed on
    in key order or, with ``ordered=False``, as they arrive (``by_range``: (prefix, page) and
    (prefix, None) once a prefix is listed). At most ``pages_ahead`` pages wait per prefix in
    flight. A worker's failure stops the others and is raised to the consumer."""

    def __init__(self, store, bucket: str, prefixes: list[str], start_after: str | None = None,
                 last_key: str | None = None, workers: int = LISTING_WORKERS, pages_ahead: int = 4,
                 ordered: bool = True):
        self._store, self._bucket = store, bucket
        self._start_after, self._last_key = start_after, last_key
        super().__init__(ordered, None, f"the listing of {len(prefixes):,} prefixes of s3://{bucket}/")
        self._todo = deque(_Prefix(p, deque()) for p in prefixes)
        self._order = list(self._todo)
        self._ahead = pages_ahead
        for i in range(max(1, min(workers, len(prefixes)))):
            threading.Thread(target=self._work, name=f"s3arch-list-prefixes-{i}", daemon=True).start()

    def _parts(self) -> Iterator[_Prefix]:
        return iter(self._order)

    def _listing(self) -> list[_Prefix]:
        return self._order

    def _full(self, item: _Prefix) -> bool:
        return len(item.pages) >= self._ahead if self._ordered else len(self._ready) >= 4 * self._ahead

    def _work(self) -> None:
        try:
            while True:
                with self._cond:
                    if self._stopped or not self._todo:
                        return
                    item = self._todo.popleft()
                for page in iter_pages(self._store, self._bucket, item.prefix, self._after(item.prefix),
                                       self._last_key):
                    with self._cond:
                        while self._full(item) and not self._stopped:
                            self._cond.wait(0.2)
                        if self._stopped:
                            return
                        if self._ordered:
                            item.pages.append(page)
                        else:
                            self._ready.append((item, page))
                        self._cond.notify_all()
                with self._cond:
                    item.more = False
                    if not self._ordered:
                        self._ready.append((item, None))
                    self._cond.notify_all()
        except BaseException as exc:  # noqa: BLE001 - the consumer's; the first one wins
            self._fail(exc)

    def _after(self, prefix: str) -> str | None:
        after = self._start_after
        return after if after is not None and after.startswith(prefix) else None
