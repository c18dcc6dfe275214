"""One coordinator per archive stream: its one status, its one exception, its cleanups and its
requests in flight (the way s3transfer's ``TransferCoordinator`` keeps a transfer's).

- **One exception, the first real one.** Every stage (listing thread, fetch scheduler, CRT
  callbacks, compressors, part uploads, the member loop) reports a failure with
  ``set_exception``; only the first is kept, and it is what the stream raises. A stage that
  stops *because* the stream stopped raises ``Stopped``, which is never a cause: it is not
  recorded, and whoever catches it raises the coordinator's exception instead. So the user
  always gets the first real cause, whichever thread saw it first.
- **Cancel is one-way, from above only** (a person or Ctrl-C, Airflow's ``on_kill``, a lost
  lease: tasks/core/stops.py says how each arrives): ``cancel(reason)`` records the reason as the exception (unless a real failure came
  first), cancels every request in flight and runs the failure cleanups. No stage ever
  cancels: a stage that fails calls ``set_exception``.
- **Failure cleanups are registered by whoever creates a resource** (an upload registers its
  abort), and run once, on cancel or when the stream stops on a failure; a stream that ends
  well (``announce_done``) drops them, handing its open uploads to the commit protocol.
- **One table of requests in flight** (GETs, tag and checksum reads, listing pages, part
  uploads), read by the stall watchdog: a request that made no progress for
  ``stall_timeout`` and can be cancelled is cancelled (it then fails as a transient error and
  is retried by whoever sent it); the others (boto3 calls, which have their own timeouts)
  are only listed.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass
from typing import Callable

from s3arch.core.errors import Cancelled

RUNNING, FAILED, CANCELLED, DONE = "running", "failed", "cancelled", "done"


class Stopped(InterruptedError):
    """A stage stopped because its stream was stopped (a failure elsewhere, or a cancel).
    A signal, never a cause: the cause is the coordinator's ``exception``."""


@dataclass(eq=False, slots=True)
class Request:
    """One request in flight. ``cancel`` (None until known, or for calls that cannot be
    cancelled) makes it fail at once; ``active`` is when it last made progress."""

    what: str
    active: float
    cancel: Callable[[], object] | None = None
    cancelled: bool = False

    def progressed(self) -> None:
        self.active = time.monotonic()


class StreamCoordinator:
    """The status, exception, cleanups and requests in flight of one archive stream."""

    def __init__(self, what: str = "the stream", *, stall_timeout: float = 60.0):
        self.what = what
        self.stall_timeout = stall_timeout
        self._lock = threading.Lock()
        self._status = RUNNING
        self._exception: BaseException | None = None
        self._stopping = threading.Event()
        self._cleanups: list[Callable[[], object]] = []
        self._cleaned = False
        self._requests: dict[int, Request] = {}
        self._ids = itertools.count()
        self._watching: threading.Event | None = None
        self._attempts: list[StreamCoordinator] = []
        self.stalls_cancelled = 0

    def __repr__(self) -> str:
        return f"<StreamCoordinator {self.what}: {self._status}, {len(self._requests)} in flight>"

    # -- status and exception -------------------------------------------------------------

    @property
    def status(self) -> str:
        return self._status

    @property
    def exception(self) -> BaseException | None:
        return self._exception

    def is_set(self) -> bool:
        """Whether the stream is stopping (failed or cancelled): what waiting stages poll.
        Named like ``threading.Event.is_set`` so a stage may take either."""
        return self._stopping.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._stopping.wait(timeout)

    def set_exception(self, exc: BaseException) -> bool:
        """Report a stage's failure. The first real failure wins and stops the stream; a
        ``Stopped`` signal is no failure and is ignored, and so is anything after the first.
        Returns whether ``exc`` became the stream's exception."""
        if isinstance(exc, Stopped):
            return False
        with self._lock:
            if self._status != RUNNING:
                return False
            self._exception, self._status = exc, FAILED
        self._stopping.set()
        return True

    def cancel(self, reason: str | BaseException = "cancelled") -> bool:
        """Stop the stream from above: ``reason`` (an exception, e.g. the lease's
        ``ConcurrentRun``; or a message for ``Cancelled``) becomes its exception unless a real
        failure came first; every request in flight is cancelled and the failure cleanups
        run (on this thread). One-way; returns False if the stream had already stopped or
        ended."""
        exc = reason if isinstance(reason, BaseException) else Cancelled(reason)
        with self._lock:
            if self._status != RUNNING:
                return False
            self._exception, self._status = exc, CANCELLED
            attempts, self._attempts = self._attempts, []
        self._stopping.set()
        for attempt in attempts:
            attempt.cancel(exc)
        self.cancel_requests()
        for problem in self.run_failure_cleanups():
            exc.add_note(f"cleanup also failed: {problem}")
        return True

    def attempt(self, what: str) -> "StreamCoordinator":
        """A coordinator for a stream this one may give up and go on without (the pipeline of
        a prefix that proves large, which segments then produce): a cancel of this one cancels
        it with the same reason (at once if this one is cancelled already), while its own
        failure stops only itself."""
        attempt = StreamCoordinator(what, stall_timeout=self.stall_timeout)
        with self._lock:
            if self._status != CANCELLED:
                self._attempts.append(attempt)
                return attempt
        assert self._exception is not None  # a cancel records its reason
        attempt.cancel(self._exception)
        return attempt

    def announce_done(self) -> bool:
        """The stream ended well: its resources are handed on (the cleanups are dropped, not
        run). False if it was stopped first, and then it must stop as such."""
        with self._lock:
            if self._status != RUNNING:
                return False
            self._status = DONE
            self._cleanups = []
        return True

    def raise_if_stopped(self) -> None:
        """For a stage: the signal that the stream stopped (the cause is raised above it)."""
        if self._stopping.is_set():
            raise Stopped(f"{self.what} stopped")

    def raise_cause_if_stopped(self) -> None:
        """For whoever raises the stream's outcome (a plan between pages, the loop that waits
        for segments): the cause, once the stream stopped."""
        if self._stopping.is_set() and self._exception is not None:
            raise self._exception

    def failure(self, caught: BaseException) -> BaseException:
        """What the stream raises once it stopped with ``caught`` in hand: the first real
        failure (``caught`` itself if it is the first). A ``Stopped`` with no cause recorded
        is a bug in the stopping, raised as one."""
        self.set_exception(caught)
        if self._exception is None:
            return RuntimeError(f"{self.what} stopped without a recorded cause")
        return self._exception

    # -- failure cleanups -------------------------------------------------------------------

    def add_failure_cleanup(self, cleanup: Callable[[], object]) -> None:
        """Run ``cleanup`` if the stream fails or is cancelled (at once, if it already has).
        A cleanup returns the error of a cleanup that failed (or raises it); neither hides the
        stream's exception."""
        with self._lock:
            if not self._cleaned:
                self._cleanups.append(cleanup)
                return
            late = self._status in (FAILED, CANCELLED)
        if late:
            _run(cleanup)

    def run_failure_cleanups(self) -> list[BaseException]:
        """Run the registered cleanups once (later calls run nothing); their failures."""
        with self._lock:
            cleanups, self._cleanups, self._cleaned = self._cleanups, [], True
        return [problem for problem in map(_run, cleanups) if problem is not None]

    # -- requests in flight and the stall watchdog ---------------------------------------

    def track(self, what: str, cancel: Callable[[], object] | None = None) -> Request:
        request = Request(what, time.monotonic(), cancel)
        with self._lock:
            self._requests[id(request)] = request
        if self._stopping.is_set() and cancel is not None:
            _quietly(cancel)
        return request

    def untrack(self, request: Request) -> None:
        request.cancel = None  # the CRT request holds callbacks that hold this entry: no cycle
        with self._lock:
            self._requests.pop(id(request), None)

    def cancellable(self, request: Request, cancel: Callable[[], object]) -> None:
        """``request`` can now be cancelled by ``cancel`` (if it is still in flight)."""
        with self._lock:
            if id(request) not in self._requests:
                return
            request.cancel = cancel
        if self._stopping.is_set():
            _quietly(cancel)

    def in_flight(self) -> list[Request]:
        with self._lock:
            return list(self._requests.values())

    def cancel_requests(self) -> None:
        for request in self.in_flight():
            if request.cancel is not None and not request.cancelled:
                request.cancelled = True
                _quietly(request.cancel)

    def start_watchdog(self) -> None:
        """Watch the requests in flight for stalls (it never stops the stream itself)."""
        if self._watching is not None:
            return
        self._watching = finished = threading.Event()
        threading.Thread(target=self._watch, args=(finished,), name="s3arch-watchdog", daemon=True).start()

    def stop_watchdog(self) -> None:
        if self._watching is not None:
            self._watching.set()

    def _watch(self, finished: threading.Event) -> None:
        interval = max(0.05, min(0.2, self.stall_timeout / 4))
        while not finished.wait(interval):
            if self._status != RUNNING:
                return
            self.cancel_stalled()

    def cancel_stalled(self, now: float | None = None) -> int:
        """Cancel the requests that made no progress for ``stall_timeout``, once per attempt
        (each retry is a new entry); how many."""
        now = time.monotonic() if now is None else now
        cancelled = 0
        for request in self.in_flight():
            if not request.cancelled and request.cancel is not None and now - request.active > self.stall_timeout:
                request.cancelled = True
                cancelled += 1
                _quietly(request.cancel)
        self.stalls_cancelled += cancelled
        return cancelled


def _run(cleanup: Callable[[], object]) -> BaseException | None:
    try:
        problem = cleanup()
    except Exception as exc:  # noqa: BLE001 - reported as a note, never instead of the cause
        return exc
    return problem if isinstance(problem, BaseException) else None


def _quietly(call: Callable[[], object]) -> None:
    try:
        call()
    except Exception:  # noqa: BLE001 - a request that ended meanwhile cannot be cancelled
        pass
