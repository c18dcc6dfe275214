"""The commit protocol: the one place that decides skip, start clean, overwrite, commit and
delete. Steps are numbered as in docs/FORMAT.md, "Commit protocol".

A prefix's destination is in one of four states:

    ABSENT ──stream+complete archive──> PRODUCED ──complete manifest──> COMMITTED ──delete──> SOURCES_DELETED

- ABSENT: no manifest. An archive object or open uploads a dead run left mean nothing.
- PRODUCED: this run completed the archive and S3's size and CRC32C matched; no manifest yet.
  Only this run (holding the lease) ever sees it; if it dies here, the prefix reads as ABSENT.
- COMMITTED: the manifest exists, so the archive is complete and verified.
- SOURCES_DELETED: committed, and no source object the manifest holds with an unchanged ETag
  is left. Re-reached by any run with --delete-source, which deletes only what remains.

Every transition that writes happens under the prefix's lease (tasks/protocol/lease.py), and the two
completions are conditional, so a second run of the same prefix can never replace what the
first one committed.
"""

from __future__ import annotations

import copy
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict
from datetime import datetime, timezone
from typing import Callable

from s3arch.core.coordinator import Stopped, StreamCoordinator
from s3arch.core.errors import BadArgument, ConcurrentRun, IntegrityError
from s3arch.core.outcome import Outcome
from s3arch.core.stops import cancelling, raise_if_cancelled
from s3arch.format.day import Part
from s3arch.format.manifest import Committed
from s3arch.io.multipart import abort_uploads
from s3arch.io.retention import check_applied
from s3arch.io.throttling import throttled
from s3arch.io.spent import bill_sum
from s3arch.produce.producers import Producer
from s3arch.produce.segments import SegmentPlan, delete_temporaries, open_upload, plan_segments, write_plan
from s3arch.produce.streamed import StreamedArchive
from s3arch.protocol.checks import cost_of
from s3arch.protocol.deletion import DeletionResult, delete_archived_sources
from s3arch.protocol.lease import RELEASE_REQUESTS, Held
from s3arch.protocol.overwrite import refuse_fewer_objects
from s3arch.protocol.parts import LateCheck, LatePart, record_parts
from s3arch.protocol.prefix_run import PrefixRun
from s3arch.protocol.result import ArchiveResult, State
from s3arch.stored.days import committed_parts, drop_later_parts
from s3arch.stored.manifests import read_committed


class CommitProtocol(PrefixRun):
    """The commit protocol's writing steps (module docstring), on a ``PrefixRun``."""

    def run(self, producer: Producer) -> ArchiveResult:
        """Steps 1-8; ``producer`` makes the archive in step 5 (tasks/produce/producers.py)."""
        spec = self.spec
        # Reads that do not depend on each other go out together: a small prefix's run is a
        # handful of round trips however far away S3 is (bench/README.md, "Fixed cost").
        with ThreadPoolExecutor(8, thread_name_prefix="s3arch-state") as reads:
            lease = self._lease()
            # 1-2. A manifest present means COMMITTED: a plain re-run only checks the archive is
            #      intact. Everything that writes holds the prefix's lease, taken meanwhile.
            first = reads.submit(read_committed, self.store, self.layout, spec.source)
            taking = reads.submit(lease.acquire)
            try:
                committed = first.result()
                # A committed day: anything newer than its parts? (reads only)
                late = self._check_late(committed) if committed and not spec.overwrite else None
                raise_if_cancelled(self.cancel, f"archiving {spec.source}")  # stopped meanwhile: the lease goes unused
            except BaseException:
                lease.release_once_taken(taking)  # not left for the next run to wait out
                raise
            if committed and late is not None and not late.late and not spec.delete_source:
                lease.release_once_taken(taking)
                self._skipped(committed, late.parts)
                self._abort_uploads_of_dead_runs(late)
                return self._done()
            # A run that writes needs it (ConcurrentRun, AccessDenied, ...), renewed until the
            # end, the last write (the index) included.
            with lease.held(taking) as held:
                rechecking = committed is not None and not spec.overwrite  # no plan of a committed day to claim
                index = self._write_under_lease(producer, rechecking, held, reads)
                # Nothing of this run touches the prefix once the lease is gone; the lease's
                # HEAD goes out while the last of it (the index) is written.
            if index is not None:
                index.result()
        return self._done()

    def _write_under_lease(self, producer: Producer, rechecking: bool, held: Held,
                           reads: ThreadPoolExecutor) -> Future | None:
        """Steps 3-8, under the lease; ``rechecking``: a committed day, not to be overwritten, as
        read before the lease. The future of the manifest index's write, or None if no new
        archive of the day itself was committed (a skip, a late part)."""
        spec = self.spec
        # The state again, under the lease: another run may have committed in between.
        # With it, what a writing run needs: the archive's ETag, the source's size,
        # and step 4 (under the lease, every upload and segment temporary left for
        # our keys belongs to a run that is gone: abort and delete them).
        if not rechecking:
            producer.claim()
        again = reads.submit(read_committed, self.store, self.layout, spec.source)
        cleaned = reads.submit(self._clean_stale, producer.keep)
        etag = reads.submit(self._current_etag, self.archive_key)
        held.after += [again, cleaned, etag]
        producer.start(self.cancel)
        committed = again.result()
        if committed and not spec.overwrite:
            # Again under the lease: a run that held it before us may have archived
            # the same late objects.
            late = self._check_late(committed)
            cleaned.result()
            raise_if_cancelled(self.cancel, f"archiving {spec.source}")  # before the part, the index or a deletion
            if late.late:
                self._archive_late(late, producer, held, reads)
                return None
            if late.index is not None:
                record_parts(self.store, self.layout, late.index, spec)
            self._skipped(committed, late.parts)
            self._delete_sources(held, late.parts)
            return None
        if rechecking:
            producer.claim()  # uncommitted meanwhile (an --overwrite in progress)
        cleaned.result()
        raise_if_cancelled(self.cancel, f"archiving {spec.source}")  # before an overwrite's listing
        if committed:
            # 3. --overwrite must not lose archived data: refuse a shrunken source
            #    before reading any of it (one listing pass), and a locked archive.
            self._check_overwrite(committed)
        index = self._produce_and_commit(producer, committed, etag.result(), held, reads)
        if producer.segmented:
            delete_temporaries(self.store, self.layout)
        # 8. Only now, and only if asked, delete the archived sources.
        self._delete_sources(held)
        return index

    def _produce_and_commit(self, producer: Producer, previous: Committed | None, archive_etag: str | None,
                            held: Held, reads: ThreadPoolExecutor) -> Future:
        """Steps 5-7; the future of the manifest index's write."""
        # 5. Stream the archive and manifest as two open uploads, on the run's one coordinator:
        #    a lost lease and the caller's cancel stop it directly, with their reason
        #    (tasks/core/stops.py).
        coordinator = StreamCoordinator(f"the archive of {self.spec.source}", stall_timeout=self.spec.stall_timeout)
        held.on_lost(coordinator.cancel)
        with cancelling(coordinator, self.cancel, f"archiving {self.spec.source}"):
            try:
                streamed = self._produce(producer, coordinator)
            except BaseException as exc:
                error = coordinator.failure(exc)
                if error is exc:
                    raise
                raise error from exc
            # 6-7. Complete and verify the archive (PRODUCED), then the manifest (COMMITTED);
            #      its index is written while the lease is released.
            index = self._commit(streamed, previous, archive_etag, held, coordinator, reads)
            held.after.append(index)  # the index is the winner's, written under its lease
        return index

    def _archive_late(self, late: LateCheck, producer: Producer, held: Held, reads: ThreadPoolExecutor) -> None:
        """The late objects as the day's next part, committed by a run of its own on the part's
        layout (``_part_run``) as any archive is (its own stale uploads cleaned, conditional
        completions, manifest last), then the day index, then, if asked, the deletion of what
        every part holds."""
        part = LatePart(self.spec, self.clients, late, getattr(producer, "progress", None))
        part_run = self._part_run(part)
        self.result.archive, self.result.manifest = part_run.archive_url, part.layout.manifest_url
        part_run._clean_stale()  # the uploads of a run killed while it made this part
        part_run._produce_and_commit(part, None, part_run._current_etag(part.archive_key), held, reads).result()
        committed = read_committed(self.store, part.layout, self.spec.source)
        assert committed is not None  # this run committed it, under its lease
        new = Part(late.next_part, part.layout, committed)
        held.confirm()
        record_parts(self.store, self.layout, late.index_after(new), self.spec)
        r = self.result
        r.part, r.late = new.number, (late.produced or late.found).late
        r.notes.append(late.note())
        self._delete_sources(held, [*late.parts, new])

    def _part_run(self, part: LatePart) -> CommitProtocol:
        """The protocol of the day's next part: this run (its spec, clients, cancel, result and
        clock) writing the part's archive, on the part's layout, set once here. This run's own
        layout stays the day's, so what names the day (its index, the deletion and its hint)
        names the day's manifest, which ``s3arch delete-sources`` takes."""
        run = copy.copy(self)
        run.layout, run.archive_key = part.layout, part.archive_key
        return run

    def _produce(self, producer: Producer, coordinator: StreamCoordinator) -> StreamedArchive:
        """Step 5: the archive and manifest as two open uploads; ``coordinator`` stops the producer."""
        streamed = producer.produce(coordinator)
        if producer.segmented:
            self.result.notes += streamed.notes
            self.result.segments, self.result.timings = streamed.segments, streamed.timings
        return streamed

    def prepare_segments(self, count: int, billed: Callable[[], dict] | None = None,
                         listed: list[list] | None = None) -> SegmentPlan | None:
        """Steps 1-4 of a segmented run whose segments are produced elsewhere (Airflow segment
        tasks), then, still under the lease: plan ``count`` segments, open the archive's upload
        and record the plan in S3 for them. None if the prefix is committed (``result`` says
        skipped). The lease is renewed while the plan is made (a large prefix's listing takes
        minutes) and released on return: a run that starts after supersedes this one (its
        cleanup aborts this upload), and this one's assembly then fails. A lost lease stops
        the plan, before it opens an upload or writes plan.json. ``billed``: what the step spent
        so far, recorded in the plan (``write_plan``) with the lease's release that follows it.
        ``listed``: the prefix's first pages, as
        its sizing listed them (``plan_segments``)."""
        spec = self.spec
        committed = read_committed(self.store, self.layout, spec.source)
        if committed and not spec.overwrite:
            self._skipped(committed)
            return None
        with self._lease().held() as held:
            committed = read_committed(self.store, self.layout, spec.source)
            if committed and not spec.overwrite:
                self._skipped(committed)
                return None
            if committed:
                self._check_overwrite(committed)
            self._clean_stale()
            planning = StreamCoordinator(f"the plan of {spec.source}")
            held.on_lost(planning.cancel)
            with cancelling(planning, self.cancel, f"planning the segments of {spec.source}",
                            "nothing was written"):
                plan = plan_segments(spec, self.store, self.archive_key, count,
                                     stop=planning.raise_cause_if_stopped, listed=listed)
                planning.raise_cause_if_stopped()
            held.confirm()
            plan = open_upload(spec.write_options, self.store, self.layout, plan)
            try:
                held.confirm()
                write_plan(spec.write_options, self.store, self.layout, plan,
                           billed and (lambda: bill_sum(billed(), {"requests": RELEASE_REQUESTS})))
            except BaseException:
                abort_uploads(self.store, self.layout.bucket, [(plan.archive_key, plan.upload_id)])
                raise
        r = self.result
        r.status, r.segments, r.objects, r.bytes_in = Outcome.PLANNED, plan.count, plan.objects, plan.bytes
        r.timings = {"plan_s": plan.planned_in_s}
        self._done()
        return plan

    def delete_sources_only(self) -> ArchiveResult:
        """Finish (or repeat) the deletion of a committed prefix's sources, nothing else."""
        with self._lease().held() as held:
            parts = committed_parts(self.store, self.layout, self.spec.source)
            if not parts:
                raise BadArgument(f"{self.layout.manifest_url} does not exist: the prefix is not "
                                  "archived, so nothing may be deleted",
                                  hint="archive it first (s3arch archive ... --delete-source)")
            self._skipped(parts[0].committed, parts)
            self._delete_sources(held, parts)
        return self._done()

    def _commit(self, streamed: StreamedArchive, previous: Committed | None, archive_etag: str | None,
                lease: Held, coordinator: StreamCoordinator, pool: ThreadPoolExecutor) -> Future:
        """Steps 6 and 7; the future of the manifest index's write, started once the manifest
        is committed."""
        spec, r = self.spec, self.result
        try:
            # The uploads are the commit's from here (a stop from above no longer aborts them);
            # one stopped since the stream ended commits nothing.
            if not coordinator.announce_done():
                raise coordinator.failure(Stopped("stopped before the commit"))
            if previous:
                refuse_fewer_objects(self.layout, self.replaced_objects, streamed.objects)
            lease.confirm()  # still ours, right before anything becomes visible
            # Conditional on what this run saw under its lease: a run that lost its lease
            # while stalled cannot replace an archive another run has since written. An
            # --overwrite leaves the old manifest in place until here: a run that fails before
            # its archive is complete leaves the old archive committed, guarded and readable.
            uploaded = streamed.uploader.complete(if_none_match=archive_etag is None, if_match=archive_etag)
            if previous:
                self._drop_previous()
            if uploaded.size != streamed.bytes_out:
                raise IntegrityError(f"archive holds {uploaded.size} bytes, {streamed.bytes_out} were produced")
            if spec.write_options.locks:
                r.retention = check_applied(self.store, self.layout.bucket, self.archive_key,
                                            spec.write_options.lock_args())
            r.state = State.PRODUCED.value
            lease.confirm()
            streamed.manifest.complete({
                "objects": streamed.objects, "bytes": streamed.bytes_in,
                "tar_size": streamed.tar_bytes, "blocks": streamed.blocks,
                "archive_size": uploaded.size, "archive_crc32": f"{streamed.archive_crc32:08x}",
                "archive_crc32c": uploaded.checksum_crc32c, "archive_etag": uploaded.etag,
                "storage_class": spec.storage_class, "ended": _now(),
                **({"tags_unread": streamed.tags_unread} if streamed.tags_unread else {}),
            })
        except BaseException as exc:
            for problem in streamed.abort():
                exc.add_note(f"cleanup also failed: {problem}")
            raise
        r.record_commit(streamed, throttled(self.clients.control) - self.throttled_before,
                        cost_of(spec, streamed.objects, streamed.bytes_in, streamed.short_of_min_billable,
                                streamed.bytes_out, streamed.source_bytes_by_class))
        return pool.submit(streamed.manifest.write_index)

    def _drop_previous(self) -> None:
        """The old commit record goes as soon as the new archive is complete, before anything
        else can fail: from here until the new manifest exists the prefix reads as ABSENT, never
        as the old manifest over the new archive. Its index goes with it: the new one is written
        only after the new manifest. The later parts go first: a day read in between is part 1
        and fewer parts, never new parts over an old part 1."""
        drop_later_parts(self.store, self.layout, self.later_parts)
        for key in (self.layout.manifest_key, self.layout.index_key):
            self.store.call("delete_object", f"delete s3://{self.layout.bucket}/{key} (the day is being overwritten)",
                            Bucket=self.layout.bucket, Key=key)

    def _delete_sources(self, held: Held, parts: list[Part] | None = None) -> None:
        """``parts``: the day's committed parts, whose union is what may be deleted."""
        if not self.spec.delete_source:
            return
        held.confirm()  # the lease is renewed while the deletion runs; it starts only while ours

        def stop() -> None:
            # Between batches: once the lease is lost another run may hold the prefix, and once
            # the caller asked for a stop (Airflow's on_kill) nothing more is wanted: this run
            # deletes nothing more (the deletion is resumable: a re-run finishes it).
            raise_if_cancelled(self.cancel, f"deleting the archived sources of {self.spec.source}",
                               "no further batch was deleted")
            if held.lost is not None:
                how = "another run took it over" if isinstance(held.lost, ConcurrentRun) else \
                    "it could not be renewed in time"
                raise ConcurrentRun(f"this run lost its lease {held.lease.url} while it deleted the archived "
                                    f"sources: {how}") from held.lost

        deletion: DeletionResult = delete_archived_sources(self.store, self.spec.source, self.layout,
                                                           versions=self.spec.delete_versions, stop=stop,
                                                           parts=parts)
        self.result.deleted = deletion.deleted
        self.result.deletion = {**asdict(deletion), "finished": True}
        self.result.state = State.SOURCES_DELETED.value
        self.result.notes += deletion.notes


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
