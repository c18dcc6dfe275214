"""Progress of one archive run, sampled by a reporter thread for humans and task logs."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable


@dataclass
class ProgressSnapshot:
    objects_done: int
    bytes_done: int
    bytes_out: int
    objects_listed: int
    bytes_listed: int
    listing_finished: bool
    elapsed: float

    def line(self) -> str:
        rate = self.bytes_done / self.elapsed if self.elapsed else 0.0
        ops = self.objects_done / self.elapsed if self.elapsed else 0.0
        total = f"/{self.objects_listed:,}" if self.listing_finished else f" (listed {self.objects_listed:,}+)"
        eta = ""
        if self.listing_finished and rate > 0:
            eta = f", ETA {max(0.0, (self.bytes_listed - self.bytes_done) / rate):.0f}s"
        return (f"{self.objects_done:,}{total} objects, {human_bytes(self.bytes_done)} in -> "
                f"{human_bytes(self.bytes_out)} out, {ops:,.0f} obj/s, {human_bytes(rate)}/s{eta}")


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


class Progress:
    """Counters written by the pipeline; ``report`` is called every ``interval`` seconds."""

    def __init__(self, report: Callable[[ProgressSnapshot], None] | None = None, interval: float = 5.0):
        self.objects_done = 0
        self.bytes_done = 0
        self.bytes_out = 0
        self._feed = None
        self._start = time.monotonic()
        self._report = report
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, feed) -> None:
        self._feed = feed
        self._start = time.monotonic()
        self._stop = threading.Event()  # a run that starts over (segments after all) reports again
        if self._report:
            self._thread = threading.Thread(target=self._run, name="s3arch-progress", daemon=True)
            self._thread.start()

    def snapshot(self) -> ProgressSnapshot:
        feed = self._feed
        return ProgressSnapshot(self.objects_done, self.bytes_done, self.bytes_out,
                                feed.objects_listed if feed else 0, feed.bytes_listed if feed else 0,
                                bool(feed and feed.finished), time.monotonic() - self._start)

    def _run(self) -> None:
        report = self._report
        assert report is not None  # started only with one
        while not self._stop.wait(self._interval):
            report(self.snapshot())

    def stop(self) -> None:
        self._stop.set()

    def reset(self) -> None:
        """Forget what a pipeline that was stopped had done (the run starts over)."""
        self.objects_done = self.bytes_done = self.bytes_out = 0


class TerminalLine:
    """One live progress line on a terminal (rich), for people; logs and Airflow keep the
    plain periodic lines. Use as the ``report`` of a Progress with a short interval."""

    def __init__(self, stream):
        from rich.console import Console
        from rich.live import Live

        self._live = Live(console=Console(file=stream), refresh_per_second=4, transient=True)
        self._live.start()

    def __call__(self, snap: ProgressSnapshot) -> None:
        from rich.text import Text

        self._live.update(Text(snap.line()))

    def close(self) -> None:
        self._live.stop()
