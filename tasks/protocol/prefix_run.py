"""One run of the commit protocol as it reads its prefix before writing (steps 1-4 of
tasks/protocol/commit.py, which builds on it): where the prefix's archive and manifest live, the
run's result, the day's committed state read without the lease (a skip, a dry run's answer),
the lease itself, the cleanup of runs that are gone, and an overwrite's checks."""

from __future__ import annotations

import time

from s3arch.core.config import ArchiveSpec
from s3arch.core.errors import AccessDenied, ConcurrentRun
from s3arch.core.outcome import Outcome
from s3arch.core.stops import Cancel
from s3arch.format.day import Part, part_layout
from s3arch.format.manifest import Committed, layout_for
from s3arch.io.s3 import S3Clients
from s3arch.io.throttling import throttled
from s3arch.produce.segments import SegmentPlan
from s3arch.protocol.checks import check_archive_intact
from s3arch.protocol.lease import PrefixLease
from s3arch.protocol.overwrite import check_overwrite
from s3arch.protocol.parts import LateCheck, check_late, record_parts
from s3arch.protocol.result import ArchiveResult, State
from s3arch.protocol.stale import clean_stale, uploads_left
from s3arch.stored.days import committed_parts
from s3arch.stored.manifests import read_committed


class PrefixRun:
    """A run's prefix, its result and its lease: what every step of the protocol shares."""

    def __init__(self, spec: ArchiveSpec, clients: S3Clients, cancel: Cancel | None = None):
        """``cancel``: the caller's stop from above (tasks/core/stops.py)."""
        self.spec = spec
        self.cancel = cancel
        self.clients = clients
        # Not bound to ``cancel``: the protocol stops at its steps and through its coordinator,
        # and its cleanups (aborts, the lease's release) must still be sent after a stop.
        self.store = clients.store
        self.layout = layout_for(spec.source, spec.destination)
        self.archive_key = self.layout.archive_key(spec.extension)
        self.started = time.monotonic()
        self.later_parts: list[Part] = []  # of a day being overwritten: dropped before its new manifest
        self.replaced_objects = 0  # objects the day being overwritten holds (each key once)
        self.throttled_before = throttled(clients.control)  # the control plane's count when the run began
        self.result = ArchiveResult(Outcome.ARCHIVED, str(spec.source), self.archive_url, self.layout.manifest_url,
                                    storage_class=spec.storage_class, codec=spec.codec)

    @property
    def archive_url(self) -> str:
        return f"s3://{self.layout.bucket}/{self.archive_key}"

    def _check_late(self, committed: Committed) -> LateCheck:
        parts = committed_parts(self.store, self.layout, self.spec.source, first=committed)
        return check_late(self.store, self.spec.source, parts)

    def skipped_if_committed(self) -> ArchiveResult | None:
        """Reading only: the result of a run that would skip (the prefix is committed and
        not to be overwritten) or archive late objects as a next part, else None. A dry run
        says what the real run would."""
        checked = self._check_without_lease()
        if checked is None:
            return None
        committed, late = checked
        r = self._skipped(committed, late.parts)
        if late.late:
            part = part_layout(self.layout, late.next_part)
            r.status, r.state, r.part, r.late = Outcome.DRY_RUN, State.COMMITTED.value, late.next_part, late.late
            r.objects, r.bytes_in = late.late, late.found.late_bytes
            r.archive, r.manifest = f"s3://{part.bucket}/{part.archive_key(self.spec.extension)}", part.manifest_url
            r.notes.append(late.note().replace("archived as", "a run would archive them as")
                           + "; first: " + ", ".join(late.found.first))
        return r

    def skipped_before_lease(self) -> ArchiveResult | None:
        """Reading only, no lease: the skip of a committed day with nothing new whose day index
        is up to date (what a late window's re-check expects), else None: the run decides."""
        checked = self._check_without_lease()
        if checked is None or checked[1].late or checked[1].index is not None or self.spec.delete_source:
            return None
        self._skipped(checked[0], checked[1].parts)
        return self._done()

    def _check_without_lease(self) -> tuple[Committed, LateCheck] | None:
        committed = None if self.spec.overwrite else read_committed(self.store, self.layout, self.spec.source)
        return None if committed is None else (committed, self._check_late(committed))

    def _clean_stale(self, keep: SegmentPlan | None = None) -> None:
        """Step 4 (tasks/protocol/stale.py)."""
        self.result.stale_uploads_aborted += clean_stale(self.store, self.layout, self.archive_key, keep)

    def _abort_uploads_of_dead_runs(self, late: LateCheck) -> None:
        """A skip writes nothing (the lease it took meanwhile, if any, is gone again) unless a
        dead run left uploads, or the day index is missing or behind: then, only if the lease
        is free (no run is alive on this prefix), abort them and write it."""
        try:
            # A segmented run in progress has its archive upload open too, so this finds it.
            if not uploads_left(self.store, self.layout, self.archive_key) and late.index is None:
                return
            with self._lease().held():
                self._clean_stale()
                if late.index is not None:
                    record_parts(self.store, self.layout, late.index, self.spec)
        except (AccessDenied, ConcurrentRun):
            pass  # a read-only caller may still be told the prefix is done; a live run owns them

    def _lease(self) -> PrefixLease:
        return PrefixLease(self.store, self.layout.bucket, self.layout.lease_key,
                           purpose=f"archive of {self.spec.source}", ttl=self.spec.lease_ttl)

    def _skipped(self, committed: Committed, parts: list[Part] | None = None) -> ArchiveResult:
        self.result.retention = check_archive_intact(self.store, self.layout, committed) or None
        self.result.record_skip(f"s3://{self.layout.bucket}/{committed.archive_key}", committed,
                                [p.committed.summary for p in parts] if parts else [committed.summary])
        return self._done()

    def _done(self) -> ArchiveResult:
        self.result.seconds = time.monotonic() - self.started
        return self.result

    def _check_overwrite(self, committed: Committed) -> None:
        """An --overwrite rebuilds the whole day as one part: its later parts go too."""
        replaced = check_overwrite(self.store, self.layout, self.spec.source, committed)
        self.later_parts, self.replaced_objects = replaced.later_parts, replaced.objects

    def _current_etag(self, key: str) -> str | None:
        head = self.store.head(self.layout.bucket, key, f"check s3://{self.layout.bucket}/{key}")
        return head["ETag"] if head else None
