"""How a run stops before its end, every way there is, and what the user then reads.

A stream (tasks/produce/pipeline.py, a segmented run's workers and assembly) is stopped only
through its coordinator (tasks/core/coordinator.py): ``coordinator.cancel(reason)`` records the
reason as the stream's exception, cancels its requests in flight and runs its failure
cleanups (its uploads are aborted), and the stream raises that exception. The commit protocol
(tasks/protocol/commit.py) creates the coordinator of its run, so every cause below reaches it
directly, with its reason, and nothing commits after it:

- **A person** (Ctrl-C): ``KeyboardInterrupt`` in the stream's thread cancels the stream
  ("was interrupted") and propagates as itself; the CLI prints "interrupted; uploads in
  progress were aborted" and exits 130.
- **Airflow's ``on_kill``** (the task marked failed, cleared or timed out) and **a task whose
  supervisor is gone** (``cancel_if_orphaned``): they set the task's ``Cancel`` with their
  reason; the run raises ``Cancelled`` whose message starts with that reason. ``on_kill`` runs
  in a signal handler, so ``Cancel.set`` only records and sets; the cancel itself runs on the
  one thread the ``Cancel`` keeps blocked on it (no polling).
- **A lost lease** (tasks/protocol/lease.py): the renewal thread that finds the lease taken over
  (``ConcurrentRun``) or unrenewable for 5/6 of its TTL (``TransientError``) calls
  ``coordinator.cancel(that error)``; the run raises it (exit 3: the next try finds the other
  run's archive, or the lease expired).
- **The stall watchdog** (``StreamCoordinator.start_watchdog``) never stops a stream: it cancels
  one request that made no progress for ``stall_timeout``; that request fails as a transient
  error and its sender retries it. Only a fault that outlasts those retries fails the stream
  (``TransientError``, exit 3).

A plan made under the lease (``CommitProtocol.prepare_segments``) stops the same way between
its listing's pages, before it opens an upload or writes plan.json; an Airflow segment task,
which has no commit protocol, makes its stream's coordinator itself (``produce_segment``) and
hands it to its ``Cancel`` the same way (``cancelling``).

What runs before a coordinator exists, or without one, reads the ``Cancel`` between its steps
(``raise_if_cancelled``): an Airflow task of several prefixes starts no further prefix (their
rows say they were not run); a run stops before its bucket checks, after its first reads and
the late check (its lease released unused), and under the lease after the stale cleanup, before
it writes; a source deletion stops before its next batch (a re-run finishes it).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator

from s3arch.core.coordinator import StreamCoordinator
from s3arch.core.errors import Cancelled

CANCELLED = "cancelled"


class Cancel(threading.Event):
    """A stop from above that its caller owns (Airflow's ``on_kill``, a task whose supervisor is
    gone, a test): ``set(reason)`` stops every stream it was handed to, with that reason. An
    event, so what only waits for it (``is_set``, ``wait``) takes it as one."""

    def __init__(self) -> None:
        super().__init__()
        self.reason: str | None = None
        self._hooks: list[Callable[[str], object]] = []
        self._lock = threading.Lock()
        self._watching = False

    def set(self, reason: str = CANCELLED) -> None:
        """Safe in a signal handler (``on_kill`` runs in one): it takes no lock a stopped thread
        may hold; the hooks run on the watching thread. The first reason wins."""
        if self.reason is None:
            self.reason = reason
        super().set()

    def on_set(self, hook: Callable[[str], object]) -> Callable[[], None]:
        """Call ``hook(reason)`` once this is set (at once, on this thread, if it is already:
        the stream is stopped before it starts); returns what forgets it."""
        if self.is_set():
            hook(self.reason or CANCELLED)
            return lambda: None
        with self._lock:
            self._hooks.append(hook)
            start, self._watching = not self._watching, True
        if start:
            threading.Thread(target=self._watch, name="s3arch-cancel", daemon=True).start()
        return lambda: self._forget(hook)

    def _forget(self, hook: Callable[[str], object]) -> None:
        with self._lock:
            if hook in self._hooks:
                self._hooks.remove(hook)

    def _watch(self) -> None:
        self.wait()
        while True:
            with self._lock:
                if not self._hooks:
                    self._watching = False
                    return
                hook = self._hooks.pop(0)
            try:
                hook(self.reason or CANCELLED)
            except Exception:  # noqa: BLE001 - one stream failing to stop must not keep the others running
                pass


@contextmanager
def cancelling(coordinator: StreamCoordinator, cancel: Cancel | None, doing: str,
               consequence: str = "its uploads were aborted and nothing was committed") -> Iterator[StreamCoordinator]:
    """While the block runs, ``cancel`` set from above cancels ``coordinator`` at once. The user
    reads "REASON while DOING: CONSEQUENCE" (e.g. "cancelled while archiving s3://logs/day/: its
    uploads were aborted and nothing was committed")."""
    if cancel is None:
        yield coordinator
        return
    forget = cancel.on_set(lambda reason: coordinator.cancel(f"{reason} while {doing}: {consequence}"))
    try:
        yield coordinator
    finally:
        forget()


def raise_if_cancelled(cancel: Cancel | None, doing: str, consequence: str = "nothing was committed") -> None:
    """Between steps no coordinator stops: ``Cancelled`` if ``cancel`` was set, read as
    ``cancelling``'s stop is ("REASON while DOING: CONSEQUENCE")."""
    if cancel is not None and cancel.is_set():
        raise Cancelled(f"{cancel.reason or CANCELLED} while {doing}: {consequence}")
