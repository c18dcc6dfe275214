"""Producing one segment, anywhere: its key range streamed from its place in the tar stream
into its own part numbers of the archive's upload, and what the assembler needs into
temporaries (tasks/produce/segments/temporaries.py)."""

from __future__ import annotations

import json
import time
from typing import Callable

from s3arch.core.config import ArchiveSpec
from s3arch.core.coordinator import StreamCoordinator
from s3arch.core.errors import ObjectMissing, SourceChanged
from s3arch.core.stops import Cancel, cancelling
from s3arch.io.listing import ListingFeed
from s3arch.core.outcome import Outcome
from s3arch.format.manifest import MANIFEST_SUFFIX, ArchiveLayout, layout_for
from s3arch.stored.manifests import JsonLinesUpload, read_committed
from s3arch.format.tally import ListingTally
from s3arch.produce.pipeline import stream_archive
from s3arch.core.progress import Progress
from s3arch.io.s3 import S3Clients
from s3arch.io.spent import Spent
from s3arch.produce.streamed import MemoryPlan
from s3arch.format.tarwriter import END_OF_ARCHIVE
from s3arch.io.upload import PartSizer, PartUploader, SharedUpload
from s3arch.produce.segments.keys import plan_key
from s3arch.produce.segments.plan import PlanOutdated, SegmentPlan, read_plan, with_own_put
from s3arch.produce.segments.recorded import recorded_pages
from s3arch.produce.segments.temporaries import get_temporary, put_temporary
from s3arch.io.store import Store


class SegmentRecords:
    """A segment's manifest records, gzip JSON Lines in a temporary object, overwritten by a
    re-run of the segment."""

    def __init__(self, store: Store, bucket: str, key: str, extra_args: dict, coordinator: StreamCoordinator):
        self._lines = JsonLinesUpload(PartUploader(store, bucket, key, storage_class="STANDARD",
                                                   sizer=PartSizer(5 << 20), memory=5 << 20, threads=1,
                                                   extra_args=extra_args, coordinator=coordinator),
                                      level=1)  # read once, by the assembler: no need to squeeze

    def add_object(self, record: dict) -> None:
        self._lines.write(record)

    def close(self, summary: dict) -> None:
        self._lines.write({"type": "summary", **summary})
        self._lines.close()
        self._lines.uploader.complete()

    def abort(self):
        return self._lines.abort()


class SegmentTarget:
    """The stream target of segment ``k`` of a plan (tasks/produce/streamed.py, ``StreamTarget``): its
    key range, from its place on the global block grid, into its own part numbers of the
    archive's shared upload. Its first ``min_part`` bytes (the head) and a rest shorter than a
    part (the tail) are kept back for the assembler; no gzip header or trailer, and no end of
    archive unless it is the last segment. It never aborts the shared upload: a failed segment
    is retried, the upload stays open."""

    framed = False
    keeps_tail = True

    def __init__(self, spec: ArchiveSpec, layout: ArchiveLayout, plan: SegmentPlan, k: int):
        self.spec, self.layout, self.plan = spec, layout, plan
        self.range = plan.ranges[k]
        self.end_of_archive = k == plan.count - 1
        self.start_after: str | None = self.range.start_after
        self.last_key: str | None = self.range.last_key
        self.tar_start = self.range.tar_start
        self.tar_end = self.range.tar_end + (END_OF_ARCHIVE if self.end_of_archive else 0)

    def __str__(self) -> str:
        return f"segment {self.range.index + 1}/{self.plan.count} of {self.spec.source}"

    def nothing_listed(self) -> PlanOutdated:
        return PlanOutdated(f"{self} lists no objects: the source changed since the plan; a new plan is needed")

    def sizer(self, plan: MemoryPlan, feed: ListingFeed[ListingTally]) -> PartSizer:
        total = self.tar_end - self.tar_start + (1 << 20)
        return PartSizer(self.spec.min_part_size, lambda: total, max_part=plan.max_part, parts=self.range.parts)

    def uploader(self, store: Store, sizer: PartSizer, memory: int, coordinator: StreamCoordinator) -> PartUploader:
        return PartUploader(store, self.layout.bucket, self.plan.archive_key, sizer=sizer, memory=memory,
                            extra_args=self.spec.write_options.encryption_args, coordinator=coordinator,
                            shared=SharedUpload(self.plan.upload_id, self.range.first_part, self.range.parts,
                                                head_size=sizer.min_part, owned=False))

    def records(self, store: Store, coordinator: StreamCoordinator) -> SegmentRecords:
        from s3arch.io.retention import scratch_lock_args  # a temporary: no locked version left behind

        extra_args = {**self.spec.write_options.encryption_args, **scratch_lock_args(store, self.layout.bucket)}
        return SegmentRecords(store, self.layout.bucket,
                              self.plan.temp_key(self.layout, self.range.index, MANIFEST_SUFFIX), extra_args,
                              coordinator)

    def check_produced(self, objects: int, tar_end: int) -> None:
        if objects != self.range.objects or tar_end != self.tar_end:
            raise PlanOutdated(f"{self} holds {objects} objects ending at tar offset {tar_end}; the plan said "
                               f"{self.range.objects} ending at {self.tar_end}: the source changed since the plan; "
                               "a new plan is needed")


def produce_segment(spec: ArchiveSpec, clients: S3Clients, layout: ArchiveLayout, plan: SegmentPlan, k: int,
                    progress: Progress | None = None, cancel: Cancel | None = None,
                    billed: Callable[[], dict] | None = None) -> dict:
    """Produce segment ``k``: its parts uploaded, its kept-back bytes, records and result in
    temporaries. Idempotent: a re-run overwrites the segment's parts and temporaries.
    ``cancel`` stops it from above (tasks/core/stops.py). The result carries what producing it
    spent (``requests``, ``cpu_s``), for the assembler's bill: ``billed()``'s (the step's, from
    its start), else what ``clients`` sent and this process used from this call on."""
    target = SegmentTarget(spec, layout, plan, k)
    started = time.monotonic()
    billed = billed or Spent(clients.store.sent).so_far
    listed = recorded_pages(clients.store, layout, plan.listing, target.start_after, target.range.last_key) \
        if plan.listing else None  # a plan made before plans recorded their listing: list the range
    coordinator = StreamCoordinator(f"the archive of {target}", stall_timeout=spec.stall_timeout)
    try:
        with cancelling(coordinator, cancel, f"producing {target}"):
            streamed = stream_archive(spec, clients, target, progress, listed=listed, coordinator=coordinator)
    except (SourceChanged, ObjectMissing) as exc:
        # An object the plan placed vanished or was rewritten (or the plan's listing is gone):
        # the same plan would fail the same way on every retry.
        raise PlanOutdated(f"{target}: the source changed since the plan ({exc}); a new plan is needed") from exc
    uploader = streamed.uploader
    parts = uploader.finish_parts(keep_short_tail=True)
    result = {
        "segment": k, "objects": streamed.objects, "bytes_in": streamed.bytes_in, "tar_bytes": streamed.tar_bytes,
        "size": streamed.bytes_out, "crc32": streamed.archive_crc32, "raw_crc32": streamed.raw_crc32,
        "first_block": target.tar_start // spec.block_size, "last_block": streamed.last_block,
        "last_block_start": streamed.last_block_start, "head": len(uploader.head), "tail": len(uploader.tail),
        "parts": [[p.number, p.etag, p.crc32c, p.size] for p in parts], "gets": streamed.gets,
        "tags_unread": streamed.tags_unread, "throttled": streamed.throttled,
        "peak_buffered": streamed.peak_buffered, "seconds": round(time.monotonic() - started, 3),
    }
    try:
        put_temporary(clients.store, layout, spec.write_options, plan.temp_key(layout, k, ".held"),
                      bytes(uploader.head) + uploader.tail)
        records: SegmentRecords = streamed.manifest
        records.close(result)
    except BaseException as exc:
        problem = streamed.manifest.abort()  # the records' upload; the archive's stays open
        if problem is not None:
            exc.add_note(f"cleanup also failed: {problem}")
        raise
    result.update(with_own_put(billed()))
    # Written last: a segment is done exactly when its result exists.
    put_temporary(clients.store, layout, spec.write_options, plan.temp_key(layout, k, ".json"),
                  json.dumps(result).encode())
    return result


def segment_done(store: Store, layout: ArchiveLayout, plan: SegmentPlan, k: int) -> dict | None:
    """The result of segment ``k`` if it was produced, else None."""
    body = get_temporary(store, layout, plan.temp_key(layout, k, ".json"))
    return None if body is None else json.loads(body)


def produce_planned_segment(spec: ArchiveSpec, clients: S3Clients, k: int, progress: Progress | None = None,
                            cancel: Cancel | None = None, billed: Callable[[], dict] | None = None) -> dict:
    """Segment ``k`` of the plan in progress for ``spec``'s prefix (an Airflow segment task):
    nothing to do if it was produced already, the plan has fewer segments, or the prefix is
    committed and not to be overwritten (whatever plan a dead run left: the re-run of an
    archived day is a success that says so). ``billed``: what the task spent so far, for the
    segment's record (``produce_segment``)."""
    layout = layout_for(spec.source, spec.destination)
    if not spec.overwrite and read_committed(clients.store, layout, spec.source) is not None:
        return {"segment": k, "objects": 0, "status": Outcome.SKIPPED.value,
                "note": f"{spec.source} is already archived; nothing to produce"}
    plan = read_plan(clients.store, layout)
    if plan is None:
        raise ObjectMissing(
            f"no segmented run of {spec.source} is waiting for segments (s3://{layout.bucket}/{plan_key(layout)} "
            "is missing): it was abandoned and cleaned up, or committed since",
            hint="clear this prefix's prepare task (it plans again) with downstream, or run the prefix again")
    if k >= plan.count:
        return {"segment": k, "objects": 0, "status": Outcome.SKIPPED.value,
                "note": f"the plan has {plan.count} segment(s); nothing to do"}
    produced = segment_done(clients.store, layout, plan, k) or produce_segment(spec, clients, layout, plan, k,
                                                                                 progress, cancel, billed)
    return {**produced, "status": Outcome.PRODUCED.value}
