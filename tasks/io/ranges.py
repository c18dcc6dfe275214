"""A whole prefix listed as contiguous key ranges in parallel (``RangeListing``), each cut where
the key space (tasks/io/keyspace.py) says its remaining keys split about in half."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Iterator

from s3arch.core.coordinator import Stopped, StreamCoordinator
from s3arch.io.listed import LIST_RESTORE_STATUS, ListedObject, listed_objects
from s3arch.io.keys import key_order, valid_names_near
from s3arch.io.keyspace import KeySpace
from s3arch.io.store import Store


LISTING_WORKERS = 8  # key ranges listed at once where a whole prefix is listed (plan, dry run)


def _start_after(key: str, after: str | None) -> bool:
    """Whether the next page may be asked for as the keys after ``key``: it is a name S3 takes
    back (no lone surrogate, which a key read with surrogateescape may hold) and it moves on
    from ``after`` (a page of MinIO's can answer keys before a StartAfter; see ``_list``)."""
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return after is None or key_order(key) > key_order(after)


def _within(listed: list[ListedObject], upto: str | None, after: str | None) -> tuple[list[ListedObject], bool]:
    """A page's objects that lie in its range: none past ``upto`` (and whether the page went
    past it), none up to ``after`` (a page asked for from that key)."""
    trimmed = upto is not None and bool(listed) and key_order(listed[-1].key) > key_order(upto)
    if upto is not None and trimmed:
        end = key_order(upto)
        listed = [o for o in listed if key_order(o.key) <= end]
    if listed and after and key_order(listed[0].key) <= key_order(after):
        # MinIO's order of such trees is not S3's: a StartAfter LIST can answer keys before
        # it, which another range lists (and a probe would go back).
        start = key_order(after)
        listed = [o for o in listed if key_order(o.key) > start]
    return listed, trimmed


@dataclass(eq=False)
class _Range:
    """Keys (``after``, ``upto``] of a prefix; ``upto`` None: to its end. ``upto`` shrinks when
    the range is cut; a page already under way is then trimmed to it."""

    after: str | None
    upto: str | None
    next: "_Range | None" = None
    first: str | None = None
    last: str | None = None
    listed: int = 0
    since_cut: int = 0  # keys listed since the range was last cut (or began)
    more: bool = True
    waiting: bool = False  # cut from the range before it, whose next page may hold its first keys
    uncuttable_at: str | None = None
    pages: deque = field(default_factory=deque)


class ParallelListing:
    """What a listing by several workers hands its consumer: pages in key order (``__iter__``)
    or as they come (``by_range``), a worker's failure raised to the consumer, ``close``.

    A subclass's workers append each page to its part's ``pages`` (in order) or
    ``(part, page)`` to ``_ready`` and ``(part, None)`` once a part is listed (unordered),
    set its ``more`` to False at its end, notify ``_cond``, and hand a failure to ``_fail``;
    ``_parts`` gives the parts in key order. A part is anything with ``pages`` and ``more``.
    """

    def __init__(self, ordered: bool, coordinator: StreamCoordinator | None, what: str):
        self._ordered = ordered
        self._ready: deque = deque()  # unordered: (part, page) from any part, as they come
        self._own = coordinator is None
        self._coordinator = coordinator or StreamCoordinator(what)
        self._stopped = False  # closed by the consumer, or a worker failed
        self._cond = threading.Condition()

    def _parts(self) -> Iterator:
        """The parts in key order; a part may be added behind the one being consumed."""
        raise NotImplementedError

    def _listing(self) -> list:
        """Every part so far (some may still be listed)."""
        raise NotImplementedError

    def __iter__(self) -> Iterator[list[ListedObject]]:
        if not self._ordered:
            yield from (page for _, page in self.by_range() if page is not None)
            return
        for part in self._parts():
            while True:
                with self._cond:
                    while not part.pages and part.more and not self._coordinator.is_set():
                        self._cond.wait(0.2)
                    self._raise_if_failed()
                    page = part.pages.popleft() if part.pages else None
                    self._cond.notify_all()
                if page is None:
                    break
                yield page

    def by_range(self) -> Iterator[tuple[object, list[ListedObject] | None]]:
        """Unordered: (its part, page) as they come, and (part, None) once a part is listed.
        A part's pages come in key order, one part's after another's in any."""
        while True:
            with self._cond:
                while not self._ready and not self._coordinator.is_set() and any(p.more for p in self._listing()):
                    self._cond.wait(0.2)
                self._raise_if_failed()
                if not self._ready:
                    return
                item = self._ready.popleft()
                self._cond.notify_all()
            yield item

    def close(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def _raise_if_failed(self) -> None:
        if self._coordinator.is_set():
            exc = self._coordinator.exception
            if self._own and exc is not None:
                raise exc
            raise Stopped("listing stopped")

    def _fail(self, exc: BaseException) -> None:
        """A worker's failure: to the coordinator (the first one wins), and every worker stops."""
        self._coordinator.set_exception(exc)
        with self._cond:
            self._stopped = True
            self._cond.notify_all()


class RangeListing(ParallelListing):
    """A prefix listed as contiguous key ranges in parallel, its pages handed on in key order
    or, with ``ordered=False``, as they arrive.

    One worker lists from the start. A worker with nothing to do cuts the range with the most
    keys still to come in two, at a key between the last one listed and the range's end, and
    lists the upper half from there (``StartAfter``); a half with no keys costs one LIST.
    The first cut of a whole prefix asks S3 for the folders after the keys listed so far (one
    LIST with ``Delimiter='/'``): a prefix of folders (a day of hourly ones) is cut at folder
    boundaries, one range for each worker waiting, at once instead of a cut every two pages.
    At most ``workers`` x ``pages_ahead`` pages wait for the consumer, whatever the prefix's
    size. In order, each range holds up to ``pages_ahead`` of them; and since every range has
    its own worker, the consumer, taking ranges in order, never waits on one nobody lists.
    In key order the ranges ahead of the consumer soon wait for it, so a consumer that can
    take pages in any order (one that counts, or sorts small page records) lists faster.

    A worker's failure goes to the coordinator (``set_exception``, the first one wins) and
    stops the other workers; every LIST is in its table of requests in flight. Without a
    coordinator the listing has one of its own and its consumer gets the failure itself;
    with a stream's, the consumer stops (``Stopped``) and the stream raises the cause.
    """

    def __init__(self, store: Store, bucket: str, prefix: str, start_after: str | None = None,
                 last_key: str | None = None, workers: int = 8, pages_ahead: int = 4, ordered: bool = True,
                 page_size: int = 1000, coordinator: StreamCoordinator | None = None):
        self._store, self._bucket, self._prefix = store, bucket, prefix
        self._page_size = page_size
        self._min_cut = 2 * page_size  # keys: cutting off less than two pages is not worth a LIST
        self._ahead = pages_ahead
        super().__init__(ordered, coordinator, f"the listing of s3://{bucket}/{prefix}")
        self._waiting = pages_ahead * workers
        self._first = _Range(start_after, last_key)
        self._ranges = [self._first]
        self._space: KeySpace | None = None
        # Folder cuts: tried once, for a whole prefix; ranges made for the workers waiting.
        self._folders = "untried" if start_after is None and last_key is None else "done"
        self._unassigned: deque[_Range] = deque()
        self._idle = 0  # workers waiting in ``_cut``
        self.requests = 0
        for i in range(workers):
            threading.Thread(target=self._work, args=(self._first if i == 0 else None,),
                             name=f"s3arch-list-{i}", daemon=True).start()

    @property
    def ranges(self) -> int:
        return len(self._ranges)

    def _parts(self) -> Iterator[_Range]:
        r: _Range | None = self._first
        while r is not None:
            yield r
            r = r.next  # read once r is consumed: a cut made meanwhile is followed

    def _listing(self) -> list[_Range]:
        return self._ranges

    def _halted(self) -> bool:
        return self._stopped or self._coordinator.is_set()

    def _full(self, r: _Range) -> bool:
        return len(r.pages) >= self._ahead if self._ordered else len(self._ready) >= self._waiting

    def _work(self, r: _Range | None) -> None:
        try:
            while True:
                if r is None:
                    r = self._cut()
                    if r is None:
                        return
                self._list(r)
                r = None
        except BaseException as exc:  # noqa: BLE001 - the coordinator's; the first one wins
            self._fail(exc)

    def _list(self, r: _Range) -> None:
        token, after, probe = None, r.after, False
        with self._cond:
            while r.waiting and not self._halted():
                self._cond.wait(0.2)
            if not r.more:  # the LIST it waited for listed all of it
                return
            after = r.last or after
        while True:
            with self._cond:
                while self._full(r) and not self._halted():
                    self._cond.wait(0.2)
                if self._halted():
                    return
                args = {"ContinuationToken": token} if token else {"StartAfter": after} if after else {}
            page = self._send(args, after, probe)
            answered_page = listed_objects(page)
            answered = answered_page[-1].key if answered_page else None  # the page's last key, before any trimming
            with self._cond:
                self.requests += 1
                listed, trimmed = _within(answered_page, r.upto, None if token else after)
                if listed:
                    if self._space is None:
                        self._space = KeySpace(self._prefix, [o.key for o in listed])
                    self._add(r, listed)
                token = page.get("NextContinuationToken")
                truncated = bool(page.get("IsTruncated")) and bool(token)
                # MinIO answers some StartAfter LISTs of deep trees whose names hold '.' or '-'
                # short, IsTruncated false (see tests/test_listing.py). A range that began at a
                # StartAfter or has a range after it does not take such a last page on trust:
                # one more LIST of one key from its last key must find none before its end. If
                # it finds one, a page from there follows (and another probe if that one ends
                # short too): every probe that finds a key lists it, so this ends.
                asked_one, probe, by_key = probe, False, "StartAfter" in args
                r.more = truncated and not trimmed
                if not (truncated or trimmed or (asked_one and not listed)) and (r.upto is not None or bool(r.after)
                                                                                 or by_key):
                    probe = not asked_one
                    r.more, after, token = True, r.last or after, None
                elif r.more and answered is not None and _start_after(answered, after):
                    # The next page from the last key answered, not by the token: MinIO starts
                    # a walk to the prefix's end for a second page by token, and each range's
                    # walk ran on after the range was cut (three to four times the server CPU
                    # of one listing, bench/results/listing-*.json); from a key, a page is a
                    # walk of one page. S3 answers both alike.
                    after, token = answered, None
                if not r.more and not self._ordered:
                    self._ready.append((r, None))
                if r.next is not None and r.next.waiting:
                    self._hand_over(r, answered_page, ended=not (r.more or trimmed), probing=probe)
                self._cond.notify_all()
                if not r.more:
                    return

    def _send(self, args: dict, after: str | None, probe: bool) -> dict:
        """One LIST of the range (one key if ``probe``)."""
        return self._request(f"after {after or '(start)'}", MaxKeys=1 if probe else self._page_size, **args,
                          **LIST_RESTORE_STATUS)

    def _request(self, what: str, **params) -> dict:
        """One LIST of the prefix (``what`` names it), in the stream's table of requests in flight."""
        request = self._coordinator.track(f"LIST s3://{self._bucket}/{self._prefix} {what}")
        try:
            return self._store.call("list_objects_v2", f"list s3://{self._bucket}/{self._prefix}", "bucket",
                                    Bucket=self._bucket, Prefix=self._prefix, **params)
        finally:
            self._coordinator.untrack(request)

    def _add(self, r: _Range, listed: list[ListedObject]) -> None:
        if self._ordered:
            r.pages.append(listed)
        else:
            self._ready.append((r, listed))
        r.first = r.first or listed[0].key
        r.last = listed[-1].key
        r.listed += len(listed)
        r.since_cut += len(listed)

    def _hand_over(self, r: _Range, page: list[ListedObject], ended: bool, probing: bool) -> None:
        """``r``'s page is back, and ranges cut from ``r`` wait for it (``waiting``, next to it
        in key order). A page holds every key from where it began to its last, so the keys it
        answered past ``r``'s end are the first keys of the ranges after it: theirs, not listed
        again (without this, each cut cost a LIST of keys the page before it had listed). A
        range the page passed is done; the one it ends in lists on from its last key, and those
        after that, or all if the page did not reach them, from their own start. A page that
        says the prefix ends there is checked by ``r`` (``probing``): they wait for that, and
        once ``r`` saw the prefix's end (``ended``), they hold no key."""
        last = key_order(page[-1].key) if page else None
        h = r.next
        while h is not None and h.waiting:
            start = key_order(h.after) if h.after is not None else None
            if last is not None and start is not None and last > start:
                end = key_order(h.upto) if h.upto is not None else None
                keys = [o for o in page if key_order(o.key) > start and (end is None or key_order(o.key) <= end)]
                h.waiting = False
                if keys:
                    self._add(h, keys)
                if end is not None and last > end:  # all of it was in the page
                    h.more = False
                    if not self._ordered:
                        self._ready.append((h, None))
                    h = h.next
                    continue
                h = h.next
                while h is not None and h.waiting:  # past the page: they list from their start
                    h.waiting, h = False, h.next
                return
            if not ended:
                if probing:
                    return  # r's probe may find keys of theirs, or that none follow
                h.waiting = False  # the page did not reach them: they list from their start
            else:
                h.waiting, h.more = False, False
                if not self._ordered:
                    self._ready.append((h, None))
            h = h.next

    def _cut(self) -> _Range | None:
        """Wait until some range can be cut, cut it, and return its upper half; None when
        every range is listed (or the listing stopped)."""
        with self._cond:
            while True:
                if self._stopped or not any(r.more for r in self._ranges):
                    return None
                if self._unassigned:
                    return self._unassigned.popleft()
                if self._folders == "untried" and self._first.more and self._first.last \
                        and self._first.since_cut >= self._min_cut:
                    self._folders = "asking"  # no other cut meanwhile: the folders may place them
                    after = self._first.last
                    break
                space = self._space if self._folders != "asking" else None
                best: _Range | None = None
                most: float = self._min_cut
                for r in self._ranges:
                    # A range is cut once it has shown two full pages, and again only once it has
                    # shown two more: a prefix of a page or two (most days) costs no LIST more than
                    # one after another would, and a range just cut, whose keys may end well before
                    # the cut (a folder's do), is not cut again in the gap, for a LIST of nothing.
                    if (space is not None and r.more and r.first and r.last and r.uncuttable_at != r.last
                            and r.since_cut >= self._min_cut):
                        keys = space.remaining(r.first, r.last, r.listed, r.upto)
                        if keys >= most:
                            best, most = r, keys
                if space is not None and best is not None and best.last is not None:
                    origin = self._first.first or best.first  # the listing's first key: such cuts double
                    ahead = best.upto if best.upto is not None or origin is None else space.ahead(origin, best.last)
                    at = space.cut(best.last, ahead if ahead is not None and key_order(ahead) > key_order(best.last)
                                   else best.upto)
                    if at is None:
                        best.uncuttable_at = best.last
                        continue
                    upper = _Range(at, best.upto, next=best.next)
                    best.upto, best.next, best.since_cut = at, upper, 0
                    upper.waiting = True  # for the page of ``best`` under way or next
                    self._ranges.append(upper)
                    return upper
                self._idle += 1
                self._cond.wait()
                self._idle -= 1
        try:
            folders = self._folders_after(after)
        except BaseException:
            with self._cond:
                self._folders = "done"
                self._cond.notify_all()
            raise
        with self._cond:
            self._folders = "done"
            cut = self._cut_at_folders(folders)
            self._cond.notify_all()
        return cut if cut is not None else self._cut()

    def _folders_after(self, after: str) -> list[str]:
        """The folders (``CommonPrefixes`` of ``Delimiter='/'``) after key ``after``: one LIST."""
        page = self._request(f"folders after {after}", Delimiter="/", StartAfter=after, MaxKeys=self._page_size)
        with self._cond:
            self.requests += 1
        return [p["Prefix"] for p in page.get("CommonPrefixes") or ()]

    def _cut_at_folders(self, folders: list[str]) -> _Range | None:
        """The open first range cut at ``folders`` boundaries (some of them, evenly), one range
        for this worker and each one waiting; this worker's range, or None if the folders
        cannot place two cuts (a flat prefix: the key space cuts it)."""
        first = self._first
        if first.upto is not None or not first.more or first.last is None:
            return None
        last = key_order(first.last)
        # A folder's name ends in '/', an empty segment MinIO refuses as a StartAfter: the
        # valid name just below it (or above) cuts there as well, ranges being contiguous.
        named = {near[-1] for near in (valid_names_near(f, self._prefix) for f in folders) if near}
        folders = sorted((f for f in named if key_order(f) > last and _start_after(f, first.last)), key=key_order)
        count = min(len(folders), self._idle + 1)
        if count < 2:
            return None
        step = len(folders) / count
        cuts = [folders[int(i * step)] for i in range(count)]
        ranges = [_Range(at, upto) for at, upto in zip(cuts, [*cuts[1:], None])]
        for r, following in zip(ranges, [*ranges[1:], first.next]):
            r.next = following
        first.upto, first.next, first.since_cut = cuts[0], ranges[0], 0
        ranges[0].waiting = True  # the page of ``first`` under way may hold its first keys
        self._ranges.extend(ranges)
        self._unassigned.extend(ranges[1:])  # each taken by a worker waiting in ``_cut``
        return ranges[0]
