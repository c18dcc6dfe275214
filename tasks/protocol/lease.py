"""A lease on one prefix's destination, so two runs never write the same archive at once.

The lease is a small STANDARD object beside the archive (``STEM.lease.json``). It is
created with ``If-None-Match: *``, renewed with ``PutObject If-Match`` on its own ETag, and
deleted on release; S3 and MinIO both enforce those two preconditions, so exactly one run
holds a prefix at a time. A holder that fails to renew has lost the lease and stops before
it commits anything.

A lease whose holder is gone may be taken over, again with ``If-Match`` on the dead lease's
ETag so that two takers cannot both win. Gone means provably dead, never guessed:
- the holder ran on this machine (same host name and kernel boot id) and its process no
  longer exists (pid plus the process start time, so a reused pid does not count), or
- S3 has not seen it renewed for ``ttl`` seconds, measured on S3's own clock (the object's
  LastModified against the response's Date header), so clock skew between workers does not
  matter.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from concurrent.futures import Future, wait
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Callable, Iterable, Iterator

from s3arch.core import backoff
from s3arch.core.errors import ArchiverError, ConcurrentRun, TransientError
from s3arch.io.own_writes import Written
from s3arch.io.store import Store
from s3arch.core.timestamps import parse_s3_time

DEFAULT_TTL = 180.0


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def _start_ticks(pid: int) -> str | None:
    """The process's start time in clock ticks since boot, or None if it does not exist."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


# What ``release`` sends once the work under the lease is done (a HEAD, then the DELETE): a
# record written under the lease that carries its step's bill counts them in advance
# (``CommitProtocol.prepare_segments``), as they are sent after it.
RELEASE_REQUESTS = {"head_object": 1, "delete_object": 1}


@dataclass(frozen=True)
class Holder:
    owner: str
    host: str
    boot_id: str
    pid: int
    pid_start: str | None
    purpose: str

    @classmethod
    def me(cls, purpose: str) -> "Holder":
        return cls(uuid.uuid4().hex, socket.gethostname(), _boot_id(), os.getpid(),
                   _start_ticks(os.getpid()), purpose)

    def provably_dead(self) -> bool:
        if not self.boot_id or self.host != socket.gethostname() or self.boot_id != _boot_id():
            return False  # another machine (or boot): only the TTL can tell
        return _start_ticks(self.pid) != self.pid_start

    def describe(self) -> str:
        return f"{self.purpose} by pid {self.pid} on {self.host}"


class PrefixLease:
    def __init__(self, store: Store, bucket: str, key: str, *, purpose: str, ttl: float = DEFAULT_TTL,
                 extra_args: dict | None = None):
        self.store = store
        self.bucket = bucket
        self.key = key
        self.ttl = ttl
        self.me = Holder.me(purpose)
        self.extra_args = extra_args or {}
        self._etag: str | None = None
        self._version: str | None = None  # of the lease this run last wrote, in a versioned bucket
        self._written: str | None = None
        self._renewed = 0.0  # monotonic time the last write of the lease that succeeded was sent
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    def _body(self) -> bytes:
        return json.dumps({**self.me.__dict__, "renewed": datetime.now(timezone.utc).isoformat(),
                           "ttl_seconds": self.ttl}).encode()

    def _put(self, what: str, **condition) -> str:
        """Write the lease under ``condition``; its ETag. The body names this run's owner token
        and the time of this very write, so a write S3 applied whose answer was lost is
        recognised as this run's own (``Store.write``), never as another run's."""
        from s3arch.io.retention import scratch_lock_args

        body = self._body()
        written = Written(len(body), frozenset(), body=body)
        response = self.store.write("put_object", f"{what} {self.url}", "object", written,
                                    Bucket=self.bucket, Key=self.key, Body=body, ContentType="application/json",
                                    StorageClass="STANDARD", **self.extra_args,
                                    **scratch_lock_args(self.store, self.bucket), **condition)
        self._written = response.get("VersionId")
        return response["ETag"]

    def _forget(self, version: str | None) -> None:
        """In a versioned bucket every write of the lease is a version of its own (locked, under
        a default retention): delete one this run no longer needs, for good. Best effort: one
        left behind is only clutter (unlocked within ``retention.SCRATCH_HOLD_SECONDS``)."""
        if version is None or version == "null":
            return
        from s3arch.io.retention import delete_scratch_version

        try:
            delete_scratch_version(self.store, self.bucket, self.key, version)
        except ArchiverError:
            pass

    def acquire(self) -> None:
        for race in range(backoff.LEASE_RACE.tries):
            if race:
                time.sleep(backoff.LEASE_RACE.pause(race))
            sent = time.monotonic()
            try:
                self._etag = self._put("take the lease", IfNoneMatch="*")
                self._version, self._renewed = self._written, sent
                return
            except ArchiverError as error:
                if error.status not in (409, 412):
                    raise
            current = self._read()
            if current is None:
                continue  # released in between: try to create it again
            holder, etag, age, dead_version = current
            if not (holder is None or holder.provably_dead() or age > self.ttl):
                raise ConcurrentRun(
                    f"another run holds this prefix ({holder.describe()}, lease {self.url} renewed "
                    f"{age:.0f}s ago)", hint=f"it is retried later; the lease expires {self.ttl:.0f}s "
                                             "after its holder's last renewal if that run died")
            try:
                self._etag = self._put("take over the lease", IfMatch=etag)  # atomically
                self._version, self._renewed = self._written, sent
                self._forget(dead_version)  # else our release would make it current again
                return
            except ArchiverError as error:
                if error.status not in (404, 409, 412):
                    raise
        raise ConcurrentRun(f"the lease {self.url} changed hands repeatedly while this run tried to take it",
                            hint="another run of this prefix is starting; retry later")

    def _read(self) -> tuple[Holder | None, str, float, str | None] | None:
        response = self.store.read(self.bucket, self.key, f"read the lease {self.url}", missing_ok=True)
        if response is None:
            return None
        body = response["Body"]
        date = response["ResponseMetadata"]["HTTPHeaders"].get("date")
        # S3's own clock when it says (it always does); a proxy that drops Date leaves ours.
        now = parsedate_to_datetime(date) if date else datetime.now(timezone.utc)
        modified = parse_s3_time(response["LastModified"])
        try:
            fields = json.loads(body)
            holder = Holder(**{k: fields[k] for k in Holder.__dataclass_fields__})
        except (ValueError, KeyError, TypeError):
            holder = None  # unreadable: treat as dead, it protects nothing
        return holder, response["ETag"], (now - modified).total_seconds(), response.get("VersionId")

    def renew(self) -> None:
        """Prove the lease is still ours and extend it; ConcurrentRun if it was taken over."""
        with self._lock:
            sent = time.monotonic()
            try:
                self._etag = self._put("renew the lease", IfMatch=self._etag)
                previous, self._version, self._renewed = self._version, self._written, sent
            except ArchiverError as error:
                if error.status in (404, 409, 412):
                    raise ConcurrentRun(f"this run's lease {self.url} was taken over by another run; "
                                        "nothing was committed",
                                        hint="the other run archives this prefix; re-run later to see it skipped") from error
                raise
            if previous != self._version:
                self._forget(previous)

    def confirm(self) -> None:
        """Right before something becomes visible: prove the lease is still ours. A lease
        written less than ttl/6 ago needs no round trip: another run may take it over only
        after a whole ttl without renewal (or once this process is gone), and a renewal that
        found it taken has already stopped the run (``keep_alive``)."""
        if time.monotonic() - self._renewed >= self.ttl / 6:
            self.renew()

    def keep_alive(self, on_lost: Callable[[ArchiverError], None]) -> None:
        """Renew in the background every ttl/6, and tell the run to stop (``on_lost``) once
        5/6 of a ttl passed on the monotonic clock since the last renewal that succeeded was
        sent: however slow or failing the renewals are, a holder never runs past its TTL
        believing it still holds the prefix."""
        from concurrent.futures import ThreadPoolExecutor, TimeoutError as Pending

        interval, grace = self.ttl / 6, self.ttl * 5 / 6

        def loop():
            renewing = ThreadPoolExecutor(1, thread_name_prefix="s3arch-lease-renew")
            renewed_at = next_at = time.monotonic()  # acquire() just wrote it
            next_at += interval
            try:
                while not self._stop.wait(max(0.0, next_at - time.monotonic())):
                    sent = time.monotonic()
                    try:
                        renewing.submit(self.renew).result(timeout=max(0.0, renewed_at + grace - sent))
                        renewed_at, next_at = sent, sent + interval
                    except ConcurrentRun as exc:
                        on_lost(exc)
                        return
                    except (ArchiverError, Pending) as exc:
                        if time.monotonic() - renewed_at >= grace:
                            on_lost(exc if isinstance(exc, ArchiverError) else TransientError(
                                f"the lease {self.url} could not be renewed for {grace:.0f}s; nothing was "
                                "committed", hint="S3 did not answer in time; the next try starts over"))
                            return
                        next_at = min(time.monotonic() + interval, renewed_at + grace)
            finally:
                renewing.shutdown(wait=False)

        self._thread = threading.Thread(target=loop, name="s3arch-lease", daemon=True)
        self._thread.start()

    def release(self, after: Iterable[Future] = ()) -> None:
        """Delete the lease if it is still ours, once the writes ``after`` are over (they
        belong to the lease; its HEAD goes out meanwhile). Never raises: an unreleased lease
        only makes the next run wait for the TTL (or notice this process is gone)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            if self._etag is None:
                wait(list(after))
                return
            try:
                head = self.store.call("head_object", f"check the lease {self.url}", Bucket=self.bucket, Key=self.key)
                wait(list(after))
                if self._version not in (None, "null"):
                    self._forget(self._version)  # ours, current or not: no delete marker, no locked copy
                elif head["ETag"] == self._etag:
                    self.store.call("delete_object", f"release the lease {self.url}", Bucket=self.bucket,
                                    Key=self.key, IfMatch=self._etag)
            except Exception:  # noqa: BLE001
                pass
            self._etag = self._version = None

    @contextmanager
    def held(self, taking: Future | None = None) -> Iterator["Held"]:
        """The one way a writing path holds the prefix: take the lease (or wait for
        ``taking``, its ``acquire`` already sent beside other reads), renew it every ttl/6
        while the block runs, tell every ``Held.on_lost`` hook if it is lost (they stop the
        work: a lost lease cancels it), and release it on every exit, once the writes the
        block put in ``Held.after`` are over."""
        if taking is None:
            self.acquire()
        else:
            taking.result()  # ConcurrentRun, AccessDenied...: nothing was taken, nothing to release
        holding = Held(self)
        try:
            self.keep_alive(holding.lose)
            yield holding
        finally:
            self.release(after=holding.after)

    def release_once_taken(self, taking: Future) -> None:
        """For a run that sent ``acquire`` beside its first reads and then needs no lease (it
        skips, or a read failed): release it if it was taken, so that the next run does not
        wait out the TTL."""
        wait([taking])
        if taking.exception() is None:
            self.release()


class Held:
    """A lease while ``PrefixLease.held`` holds it. ``on_lost`` hooks are how the work is
    stopped when the lease is lost: the commit protocol hooks its run's coordinator's
    ``cancel`` (tasks/core/stops.py); ``after`` lists writes the release waits for."""

    def __init__(self, lease: PrefixLease):
        self.lease = lease
        self.lost: ArchiverError | None = None
        self.after: list[Future] = []
        self._hooks: list[Callable[[ArchiverError], object]] = []
        self._lock = threading.Lock()

    def on_lost(self, hook: Callable[[ArchiverError], object]) -> None:
        """Call ``hook(error)`` once if the lease is lost (at once if it is already)."""
        with self._lock:
            if self.lost is None:
                self._hooks.append(hook)
                return
        hook(self.lost)

    def lose(self, error: ArchiverError) -> None:
        with self._lock:
            if self.lost is not None:
                return
            self.lost, hooks = error, list(self._hooks)
        for hook in hooks:
            try:
                hook(error)
            except Exception:  # noqa: BLE001 - one hook failing must not keep the others from stopping
                pass

    def raise_if_lost(self) -> None:
        if self.lost is not None:
            raise self.lost

    def confirm(self) -> None:
        """Right before something becomes visible: the lease is still ours (``PrefixLease.confirm``)."""
        self.raise_if_lost()
        self.lease.confirm()
