"""What a catalog read or a scrub cost, by request kind: every LIST, GET and HEAD it sent."""

from __future__ import annotations

import threading


class RequestCounter:
    def __init__(self):
        self._lock = threading.Lock()
        self.counts = {"LIST": 0, "GET": 0, "HEAD": 0}

    def add(self, kind: str, n: int = 1) -> None:
        with self._lock:
            self.counts[kind] += n
