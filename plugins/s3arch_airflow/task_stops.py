"""Stops from above: the reasons a task's run reads when Airflow stops it (``on_kill``) or its
supervisor is gone, and the watch that cancels an orphaned task process."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from s3arch.core.stops import Cancel

# The reasons a task's run reads when it is stopped from above (tasks/core/stops.py).
KILLED = "cancelled by Airflow (the task was killed: marked failed or cleared, or it timed out)"

ORPHANED = "cancelled: this task's supervisor is gone, and Airflow retries the work elsewhere"


def cancel_if_orphaned(cancel: Cancel, log, interval: float = 1.0) -> threading.Event:
    """Set ``cancel`` if this task process loses its supervisor.

    Airflow runs each task in its own process group under a supervisor process that
    heartbeats for it. If the supervisor dies (its Celery worker was SIGKILLed or OOM-killed),
    the task process lives on, reparented, with nobody heartbeating: Airflow soon fails the try
    and retries it elsewhere, while this orphan would go on writing (a segment's temporaries
    after the prefix was committed, a lease the retry has to wait out). So an orphan cancels
    itself: its uploads are aborted, its lease released, and nothing is committed. Returns
    the event that ends the watch (set it when the task's work is over)."""
    import os

    parent, done = os.getppid(), threading.Event()

    def watch() -> None:
        while not done.wait(interval) and not cancel.is_set():
            if os.getppid() != parent:
                log.error("this task's supervisor (pid %d) is gone: cancelling, so that the retry Airflow "
                          "schedules elsewhere is the only run of this work", parent)
                cancel.set(ORPHANED)
                return

    threading.Thread(target=watch, name="s3arch-orphan-watch", daemon=True).start()
    return done
