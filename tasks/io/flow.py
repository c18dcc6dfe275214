"""How much a stream may fetch at once: bytes held in flight and waiting (``ByteBudget``), and
requests in flight, fewer while S3 throttles (``InFlightLimit``). The fetcher (tasks/io/fetching.py)
and an extract's PUTs (tasks/restore/to_s3.py) wait on them.
"""

from __future__ import annotations

import threading
import time


class ByteBudget:
    """A counting semaphore in bytes. One reservation larger than the cap is let through
    when nothing else is held, so progress never deadlocks."""

    def __init__(self, cap: int):
        self.cap = cap
        self.used = 0
        self.peak = 0
        self._cond = threading.Condition()

    def acquire(self, n: int, abort) -> bool:
        """Reserve ``n`` bytes; False once ``abort`` (an event, or the stream's coordinator)
        is set."""
        with self._cond:
            while self.used and self.used + n > self.cap:
                if abort.is_set():
                    return False
                self._cond.wait(0.2)
            self.used += n
            self.peak = max(self.peak, self.used)
            return True

    def release(self, n: int) -> None:
        with self._cond:
            self.used -= n
            self._cond.notify_all()


class InFlightLimit:
    """The requests the fetcher keeps in flight, AIMD as in TCP: halved when S3 throttles (at
    most once per ``cooldown``, so one burst of throttled answers is one cut; never below one),
    grown back by one per ``limit`` successes, up to the configured concurrency. A request sent
    again after a throttle (``retry=True``) goes before new ones, so the oldest piece, the one
    the tar writer waits for, is not starved."""

    def __init__(self, cap: int, *, cooldown: float = 1.0, clock=time.monotonic):
        self.cap = max(1, cap)
        self.cooldown = cooldown
        self.held = 0
        self.lowest = self.cap
        self._limit = float(self.cap)
        self._clock = clock
        self._cut_at: float | None = None
        self._retries = 0  # retries waiting for a slot
        self._cond = threading.Condition()

    @property
    def limit(self) -> int:
        return max(1, int(self._limit))

    def acquire(self, timeout: float, retry: bool = False) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            if retry:
                self._retries += 1
            try:
                while self.held >= self.limit or (self._retries and not retry):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._cond.wait(left)
                self.held += 1
                return True
            finally:
                if retry:
                    self._retries -= 1
                    self._cond.notify_all()

    def release(self) -> None:
        with self._cond:
            self.held -= 1
            self._cond.notify_all()

    def throttled(self) -> None:
        with self._cond:
            now = self._clock()
            if self._cut_at is None or now - self._cut_at >= self.cooldown:
                self._limit = max(1.0, self._limit / 2)
                self._cut_at = now
                self.lowest = min(self.lowest, self.limit)

    def succeeded(self) -> None:
        with self._cond:
            if self._limit < self.cap:
                self._limit = min(float(self.cap), self._limit + 1.0 / self._limit)
                self._cond.notify_all()
