"""List a prefix page by page; pages stream to the fetch stage as they arrive."""

from __future__ import annotations

import queue
import threading
from typing import Generic, Iterator, Protocol, TypeVar

from s3arch.core.coordinator import Stopped, StreamCoordinator
from s3arch.core.errors import ArchivedObjectNotReadable
from s3arch.io.keys import key_order
from s3arch.io.listed import LIST_RESTORE_STATUS, ListedObject, listed_objects
from s3arch.io.ranges import RangeListing
from s3arch.io.store import Store


# Source classes whose objects a GET cannot read until S3 restores them (RestoreObject).
# INTELLIGENT_TIERING's archive tiers are not in any listing (it says INTELLIGENT_TIERING
# whatever the tier): such an object fails at its GET (InvalidObjectState).
NEEDS_RESTORE = frozenset({"GLACIER", "DEEP_ARCHIVE"})


class SourceClasses:
    """What the listing says of the sources' storage classes, page by page: the objects no
    GET can read without a restore (counted, the first few named), and the bytes per class
    that S3 bills a retrieval fee for reading (tasks/core/cost.py)."""

    FIRST = 5

    def __init__(self) -> None:
        self.unreadable = 0
        self.first_unreadable: list[str] = []
        self.unreadable_classes: set[str] = set()
        self.bytes_by_class: dict[str, int] = {}

    def add(self, page: list[ListedObject]) -> None:
        for o in page:
            c = o.storage_class
            if c == "STANDARD":
                continue
            if c in NEEDS_RESTORE:
                self.unreadable += 1
                self.unreadable_classes.add(c)
                if len(self.first_unreadable) < self.FIRST:
                    self.first_unreadable.append(o.key)
            else:
                self.bytes_by_class[c] = self.bytes_by_class.get(c, 0) + o.size

    def refusal(self, source: str, listed: int, complete: bool) -> ArchivedObjectNotReadable:
        """The exit-2 error for a listing that showed objects needing a restore."""
        first = ", ".join(self.first_unreadable) + (", ..." if self.unreadable > len(self.first_unreadable) else "")
        where = "" if complete else f" (in the first {listed:,} listed; `--dry-run` counts them all)"
        return ArchivedObjectNotReadable(
            f"{source}: {self.unreadable:,} source objects{where} are in "
            f"{'/'.join(sorted(self.unreadable_classes))} and cannot be read without a restore; first: {first}. "
            "Nothing was read from them and nothing was written",
            hint="restore the sources first with S3's RestoreObject (aws s3api restore-object --bucket BUCKET "
                 "--key KEY --restore-request '{\"Days\":7,\"GlacierJobParameters\":{\"Tier\":\"Bulk\"}}', "
                 "or S3 Batch Operations for many), wait until they are restored, and run again; or change the "
                 "lifecycle rule that moved them. `s3arch restore` restores archives, not sources "
                 "(docs/RESTORE.md)")

    def note(self, source: str) -> str:
        first = ", ".join(self.first_unreadable) + (", ..." if self.unreadable > len(self.first_unreadable) else "")
        return (f"{self.unreadable:,} source objects are in {'/'.join(sorted(self.unreadable_classes))} and "
                f"must be restored (S3 RestoreObject, aws s3api restore-object) before {source} can be "
                f"archived; a run refuses it with exit 2; first: {first}")


def iter_pages(store: Store, bucket: str, prefix: str, start_after: str | None = None,
               last_key: str | None = None, page_size: int = 1000, workers: int = 1,
               ordered: bool = True) -> Iterator[list[ListedObject]]:
    """Pages of up to ``page_size`` objects in S3's (UTF-8 binary) key order; with
    ``start_after``/``last_key``, only the keys after the one and up to the other (a segment).
    With ``workers`` > 1, key ranges are listed in parallel (``RangeListing``), in the same order
    unless ``ordered`` is False."""
    if workers > 1:
        listing = RangeListing(store, bucket, prefix, start_after, last_key, workers,
                               ordered=ordered, page_size=page_size)
        try:
            yield from listing
        finally:
            listing.close()
        return
    extra: dict[str, object] = {"StartAfter": start_after} if start_after else {}
    extra.update(LIST_RESTORE_STATUS)
    end = key_order(last_key) if last_key is not None else None
    for page in store.pages("list_objects_v2", f"list s3://{bucket}/{prefix}", Bucket=bucket, Prefix=prefix,
                            **extra, PaginationConfig={"PageSize": page_size}):
        listed = listed_objects(page)
        if listed:
            if end is not None and key_order(listed[-1].key) > end:
                listed = [o for o in listed if key_order(o.key) <= end]
                if listed:
                    yield listed
                return
            yield listed


class PageTally(Protocol):
    """Sums a listing's pages as the feed lists them (s3arch.format.tally.ListingTally)."""

    objects: int
    bytes: int
    classes: SourceClasses

    def add(self, page: list[ListedObject]) -> object: ...


Tally = TypeVar("Tally", bound=PageTally)


class ListingFeed(Generic[Tally]):
    """Runs the listing in a thread, a bounded number of pages ahead of the consumer.

    Memory stays bounded (``pages_ahead`` x 1,000 entries) whatever the prefix size, and
    ``tally`` sums each page before it is queued, so the totals listed so far are visible to
    the stages that size things from them.

    A failure of the listing goes to the stream's coordinator (``set_exception``), each page
    request is in its table of requests in flight, and the consumer stops (``Stopped``) once
    the stream stopped. A feed without a coordinator has one of its own, and then its
    consumer gets the listing's failure itself.
    """

    _END = object()

    def __init__(self, store: Store, bucket: str, prefix: str, *, tally: Tally, pages_ahead: int = 8,
                 start_after: str | None = None, last_key: str | None = None, pages=None,
                 coordinator: StreamCoordinator | None = None):
        """``pages``: a listing made already (iterated instead of listing again)."""
        self._own = coordinator is None
        self._coordinator = coordinator or StreamCoordinator(f"the listing of s3://{bucket}/{prefix}")
        self._what = f"LIST s3://{bucket}/{prefix}"
        self.tally = tally  # its source classes: objects that need a restore are refused before their GET
        self._source = f"s3://{bucket}/{prefix}"
        self.finished = False
        self._queue: queue.Queue = queue.Queue(pages_ahead)
        self._stop = threading.Event()
        self._pages = 0
        if pages is None:
            pages = iter_pages(store, bucket, prefix, start_after, last_key)
        self._thread = threading.Thread(target=self._run, args=(pages,),
                                        name="s3arch-list", daemon=True)
        self._thread.start()

    @property
    def objects_listed(self) -> int:
        return self.tally.objects

    @property
    def bytes_listed(self) -> int:
        return self.tally.bytes

    def _run(self, pages):
        coordinator = self._coordinator
        pages = iter(pages)
        try:
            while True:
                request = coordinator.track(f"{self._what} (page {self._pages + 1})")
                try:
                    page = next(pages, self._END)
                finally:
                    coordinator.untrack(request)
                if page is self._END:
                    break
                self._pages += 1
                self.tally.add(page)
                classes = self.tally.classes
                if classes.unreadable:  # before any GET of them: the page never reaches the fetcher
                    raise classes.refusal(self._source, self.tally.objects, complete=False)
                if not self._put(page):
                    return
            self.finished = True
            self._put(self._END)
        except BaseException as exc:  # noqa: BLE001 - the stream's failure (Stopped is no cause)
            coordinator.set_exception(exc)

    def _put(self, item) -> bool:
        while not self._stop.is_set() and not self._coordinator.is_set():
            try:
                self._queue.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> Iterator[ListedObject]:
        coordinator = self._coordinator
        while True:
            if coordinator.is_set():
                self._stopped()
            try:
                item = self._queue.get(timeout=0.2)
            except queue.Empty:
                continue
            if item is self._END:
                return
            yield from item

    def _stopped(self):
        exc = self._coordinator.exception
        if self._own and exc is not None:
            raise exc
        raise Stopped("listing stopped")

    def close(self):
        self._stop.set()
