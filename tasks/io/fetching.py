"""Fetch listed objects in parallel within a memory budget, delivered in listing order.

Each object becomes one or more *pieces*: objects up to ``chunk`` bytes are one GET, larger
ones are ranged GETs of ``chunk`` bytes, so no object is ever held whole. Before a piece is
requested its size is reserved in a ``ByteBudget``; the reservation is released once the tar
writer has consumed it, so bytes in flight plus bytes waiting stay under the budget. Every
GET carries ``If-Match`` with the listed ETag, and every piece is checked against the length
the listing promised (a short body is fetched again, never archived short).

An object's first piece also brings its attributes (tasks/io/attributes.py); the follow-ups
they need (its tags, the checksum a ranged GET lacks) run before the piece is handed on, so
the object's record is complete when the tar writer gets to it. Follow-ups are requests like
the GETs: in the stream's table of requests in flight (the stall watchdog cancels them),
retried with the same backoff, and whatever a callback raises on CRT's thread settles its
piece with that error (CRT swallows exceptions: uncaught, the piece would never settle).

Throttling (503 SlowDown) is not a failure to count down: a throttled request is sent again
after a pause drawn at random up to a ceiling that doubles with each throttled answer
(``backoff.THROTTLED``), for as long as S3 keeps throttling, until the throttle
budget (``ArchiveSpec.throttle_budget``: --throttle-budget, else S3ARCH_THROTTLE_BUDGET, else
15 minutes) runs out; meanwhile the
requests in flight are fewer (``InFlightLimit``: halved on a throttle, grown back by one per
window of successes). Other faults keep their few tries (``backoff.FETCH``).

Failures go to the stream's coordinator (tasks/core/coordinator.py), the one place a stream's
failure is kept; a fetch stage stopped by the stream raises ``Stopped``, which is no cause.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from s3arch.io import attributes
from s3arch.core import backoff
from s3arch.core.config import resolve_throttle_budget
from s3arch.core.coordinator import Request, Stopped, StreamCoordinator
from s3arch.core.errors import AccessDenied, ArchiverError, CredentialsExpired, IntegrityError, Throttled, TransientError
from s3arch.io.flow import ByteBudget, InFlightLimit
from s3arch.io.listed import ListedObject


# What a piece holds besides its payload while it is in flight or waits for the tar writer:
# the Piece, its listed object and record fields, its callbacks and its entry in the table of
# requests in flight (its response headers are dropped once its attributes are captured).
# Counted in the fetch budget, so that zero-byte and tiny objects waiting behind a stalled GET
# are bounded too, not only their bytes.
PIECE_COST = 4 << 10


@dataclass(slots=True)
class Tries:
    """One request's answers that called for another try: faults (``backoff.FETCH``) and
    throttles (retried until the throttle budget runs out; with S3ARCH_GET_PATH=crt, each
    after the CRT client's own retries)."""

    failures: int = 0
    throttling: backoff.Throttling = field(default_factory=backoff.Throttling)


@dataclass(slots=True)
class Piece:
    obj: ListedObject
    index: int
    last: bool
    start: int
    end: int
    chunks: list = field(default_factory=list)
    received: int = 0
    tries: Tries = field(default_factory=Tries)
    holding: bool = False  # holds a slot of the in-flight limit
    headers: list | None = None  # the first piece's response headers, until they are captured
    captured: attributes.Captured | None = None  # the object's attributes (first piece only)
    settled: bool = False  # handed on or failed; its GET slot released

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def cost(self) -> int:
        """What the piece takes of the fetch budget."""
        return self.end - self.start + PIECE_COST


class Fetcher:
    def __init__(self, data_plane, bucket: str, *, budget: ByteBudget, concurrency: int,
                 chunk: int, coordinator: StreamCoordinator, without_tags: bool = False,
                 throttle_seconds: float | None = None):
        self.data = data_plane
        self.without_tags = without_tags  # a denied tag read is recorded instead of failing the run
        self.tags_unread = 0
        self.coordinator = coordinator
        self.bucket = bucket
        self.budget = budget
        self.chunk = chunk
        self.gets = 0
        self.follow_ups = 0
        self.throttled = 0  # throttled answers (503 SlowDown) to GETs and follow-ups, each retried
        self.throttle_budget = resolve_throttle_budget(throttle_seconds)
        self.limit = InFlightLimit(concurrency)
        self._cond = threading.Condition()
        self._done: dict[int, Piece] = {}
        self._total: int | None = None

    def pieces(self, objects: Iterable[ListedObject]) -> Iterator[Piece]:
        """Pieces in listing order; the consumer owns each piece's bytes until it asks for
        the next one, when the piece's budget is released. Raises ``Stopped`` once the stream
        stopped (the cause is the coordinator's)."""
        threading.Thread(target=self._schedule, args=(objects,), name="s3arch-fetch", daemon=True).start()
        seq = 0
        while True:
            with self._cond:
                while seq not in self._done and self._total != seq:
                    self.coordinator.raise_if_stopped()
                    self._cond.wait(0.2)
                self.coordinator.raise_if_stopped()
                if seq not in self._done:
                    return
                piece = self._done.pop(seq)
            yield piece
            self.budget.release(piece.cost)
            seq += 1

    def _fail(self, exc: BaseException) -> None:
        self.coordinator.set_exception(exc)
        with self._cond:
            self._cond.notify_all()

    def _schedule(self, objects: Iterable[ListedObject]) -> None:
        seq = 0
        coordinator = self.coordinator
        try:
            for obj in objects:
                if obj.size <= self.chunk:
                    spans = [(0, obj.size)]
                else:
                    spans = [(s, min(s + self.chunk, obj.size)) for s in range(0, obj.size, self.chunk)]
                for i, (start, end) in enumerate(spans):
                    piece = Piece(obj, i, i == len(spans) - 1, start, end)
                    if not self.budget.acquire(piece.cost, coordinator):
                        return
                    while not self.limit.acquire(timeout=0.2):
                        if coordinator.is_set():
                            return
                    piece.holding = True
                    self._request(seq, piece)
                    seq += 1
            with self._cond:
                self._total = seq
                self._cond.notify_all()
        except BaseException as exc:  # noqa: BLE001 - listing errors end up here (Stopped is no cause)
            self._fail(exc)

    # -- settling a piece, whatever thread it is on --------------------------------------

    def _settle(self, seq: int, piece: Piece, error: BaseException | None) -> None:
        """Hand the piece on, or fail the stream with ``error``; its GET slot is released once."""
        if piece.settled:
            if error is not None:
                self._fail(error)
            return
        piece.settled = True
        self._release(piece)
        if error is not None:
            piece.chunks = []
            self._fail(error)
            return
        with self._cond:
            self._done[seq] = piece
            self._cond.notify_all()

    def _guarded(self, seq: int, piece: Piece, call, *args) -> None:
        """Run ``call`` for ``piece`` on a thread that would lose what it raises (CRT's, a
        timer's): an exception settles the piece with it, so the stream fails with it."""
        try:
            call(*args)
        except BaseException as exc:  # noqa: BLE001 - never lost: it becomes the piece's failure
            self._settle(seq, piece, exc)

    def _release(self, piece: Piece) -> None:
        if piece.holding:
            piece.holding = False
            self.limit.release()

    def _retry_later(self, error: ArchiverError, tries: Tries, again, seq: int, piece: Piece) -> ArchiverError | None:
        """Send a request again after the backoff if ``error`` is one another try can cure:
        None if it will be, else the error to fail with."""
        # ExpiredToken: signed again with the credentials botocore has refreshed meanwhile.
        if (self.coordinator.is_set() or not isinstance(error, (IntegrityError, TransientError, CredentialsExpired))
                or not error.retryable or error.retries_spent):
            return error
        if isinstance(error, Throttled):
            self.throttled += 1
            self.limit.throttled()
            delay = tries.throttling.next_pause(self.throttle_budget)
            if delay is None:
                return Throttled(f"S3 kept throttling for {tries.throttling.lasted():.0f} s, longer than the "
                                 f"throttle budget ({self.throttle_budget:g} s, --throttle-budget): {error}")
            self._release(piece)  # fewer in flight while it lasts: the retry waits for a slot
            self._later(delay, seq, piece, self._resend, seq, piece, again)
            return None
        tries.failures += 1
        if not backoff.FETCH.allows(tries.failures):
            return error
        self._later(backoff.FETCH.pause(tries.failures), seq, piece, again)
        return None

    def _later(self, delay: float, seq: int, piece: Piece, call, *args) -> None:
        timer = threading.Timer(delay, self._guarded, args=(seq, piece, call, *args))
        timer.daemon = True
        timer.start()

    def _resend(self, seq: int, piece: Piece, again) -> None:
        """Send a throttled request again once the in-flight limit lets it."""
        while not self.limit.acquire(timeout=0.2, retry=True):
            if self.coordinator.is_set():
                self._settle(seq, piece, Stopped("fetch stopped"))
                return
        piece.holding = True
        again()

    # -- the GET of a piece --------------------------------------------------------------

    def _request(self, seq: int, piece: Piece) -> None:
        piece.chunks = []
        piece.received = 0
        piece.headers = [] if piece.index == 0 else None
        whole = piece.index == 0 and piece.last
        # A ranged GET of a zero-byte object is answered 416, so whole objects go unranged.
        byte_range = None if whole else (piece.start, piece.end)
        entry = self.coordinator.track(f"GET s3://{self.bucket}/{piece.obj.key}"
                                       + ("" if whole else f" bytes {piece.start}-{piece.end - 1}"))

        def on_body(chunk: bytes) -> None:
            piece.chunks.append(chunk)
            piece.received += len(chunk)
            entry.active = time.monotonic()

        def finish(error: ArchiverError | None) -> None:
            self.coordinator.untrack(entry)
            if error is None and piece.received != piece.size:
                error = IntegrityError(
                    f"GET s3://{self.bucket}/{piece.obj.key}: received {piece.received} bytes "
                    f"of {piece.size} for bytes {piece.start}-{piece.end}")
            if error is not None:
                error = self._retry_later(error, piece.tries, lambda: self._request(seq, piece), seq, piece)
                if error is None:
                    return
            else:
                self.limit.succeeded()
            if error is None and piece.index == 0:
                self._follow_up(seq, piece)
                return
            self._settle(seq, piece, error)

        self.gets += 1
        request = self.data.get(piece.obj.key, etag=piece.obj.etag, byte_range=byte_range, on_body=on_body,
                                on_done=lambda error: self._guarded(seq, piece, finish, error),
                                on_headers=piece.headers.extend if piece.headers is not None else None)
        self.coordinator.cancellable(entry, request.cancel)

    # -- follow-ups: the object's tags, the checksum a ranged GET lacks ---------------------

    def _follow_up(self, seq: int, piece: Piece) -> None:
        """Complete the object's attributes from its first piece's headers (dropped once
        read): its tags if it has any, its checksum if it is fetched in ranges; then hand the
        piece on."""
        captured = piece.captured = attributes.from_headers(piece.headers or [])
        piece.headers = None
        steps = []
        if captured.tag_count:
            steps.append(self._read_tags)
        if not piece.last and not captured.has_checksum:
            steps.append(self._read_checksum)

        def next_step(error: BaseException | None = None) -> None:
            if error is None and steps:
                if self.coordinator.is_set():
                    self._settle(seq, piece, Stopped("fetch stopped"))
                else:
                    steps.pop(0)(seq, piece, next_step)
            else:
                self._settle(seq, piece, error)

        next_step()

    def _send(self, seq: int, piece: Piece, what: str, tries: Tries, send, finish, again) -> None:
        """One attempt of a follow-up request: tracked in flight (the watchdog may cancel it),
        retried with the GETs' backoff, its callbacks guarded. ``send(on_body_progress,
        on_done)`` starts it and returns the data plane's request; ``finish(error)`` reads the answer."""
        entry: Request = self.coordinator.track(what)

        def done(error: ArchiverError | None) -> None:
            self.coordinator.untrack(entry)
            if error is not None:
                error = self._retry_later(error, tries, again, seq, piece)
                if error is None:
                    return
            else:
                self.limit.succeeded()
            finish(error)

        self.follow_ups += 1
        request = send(entry.progressed, lambda error: self._guarded(seq, piece, done, error))
        self.coordinator.cancellable(entry, request.cancel)

    def _read_tags(self, seq: int, piece: Piece, then, tries: Tries | None = None) -> None:
        tries = tries or Tries()
        body: list[bytes] = []
        captured = piece.captured
        assert captured is not None

        def on_body(progressed):
            def received(chunk: bytes) -> None:
                body.append(chunk)
                progressed()
            return received

        def finish(error: ArchiverError | None) -> None:
            if error is None:
                captured.fields["tags"] = attributes.parse_tagging(b"".join(body))
            elif isinstance(error, AccessDenied):
                if not self.without_tags:
                    error = AccessDenied(
                        f"{error}: the object has {captured.tag_count} tags and they cannot be read, so "
                        "the archive would lose them; nothing was committed and nothing deleted",
                        hint="grant s3:GetObjectTagging (and s3:GetObjectVersionTagging on a versioned "
                             "bucket) on the source, or pass --without-tags to archive without them "
                             "(the manifest records which objects lack their tags)")
                else:
                    captured.fields["tags_unread"] = "AccessDenied"
                    self.tags_unread += 1
                    error = None
            then(error)

        self._send(seq, piece, f"GetObjectTagging s3://{self.bucket}/{piece.obj.key}", tries,
                   lambda progressed, on_done: self.data.tagging(piece.obj.key, version_id=captured.version_id,
                                                                 on_body=on_body(progressed), on_done=on_done),
                   finish, lambda: self._read_tags(seq, piece, then, tries))

    def _read_checksum(self, seq: int, piece: Piece, then, tries: Tries | None = None) -> None:
        tries = tries or Tries()
        headers: list[tuple[str, str]] = []
        captured = piece.captured
        assert captured is not None

        def finish(error: ArchiverError | None) -> None:
            if error is None:
                checksum = attributes.checksum_from_headers(headers)
                if checksum:
                    captured.fields["checksum"] = checksum
            then(error)

        self._send(seq, piece, f"HeadObject s3://{self.bucket}/{piece.obj.key}", tries,
                   lambda progressed, on_done: self.data.head(piece.obj.key, etag=piece.obj.etag,
                                                              on_headers=headers.extend, on_done=on_done),
                   finish, lambda: self._read_checksum(seq, piece, then, tries))
