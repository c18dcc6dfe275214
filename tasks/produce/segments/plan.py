"""Planning a segmented run: where its segments start (sizing.py says whether a prefix is large).

The plan lists the prefix once and cuts it into contiguous key ranges balanced by bytes and
object count; since a tar member's length follows from its key and size alone, it also knows
where in the tar stream each segment starts, and gives each its own range of part numbers.
A plan made for segments produced elsewhere (Airflow tasks) is stored as ``plan.json``.
"""

from __future__ import annotations

import itertools
import json
import secrets
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Callable, Iterable

from s3arch.core.config import ArchiveSpec, WriteOptions
from s3arch.core.errors import ArchiverError, EmptyPrefix
from s3arch.io.keys import key_order
from s3arch.io.sources import source_listing
from s3arch.format.manifest import ArchiveLayout, layout_for
from s3arch.format.tally import ListingTally
from s3arch.format.tarwriter import END_OF_ARCHIVE, member_size
from s3arch.io.multipart import create_upload
from s3arch.io.upload import MAX_PARTS
from s3arch.produce.segments.keys import plan_key, segment_key
from s3arch.produce.segments.recorded import ListingChunk, ListingRecorder, recorded_pages
from s3arch.produce.segments.temporaries import get_temporary, put_temporary
from s3arch.io.store import Store
from s3arch.io.spent import bill_sum

# What one object costs beyond its bytes, as bytes of the same cost: about 1,300 small
# objects/s against 200 MB/s per process here (bench/README.md), so one object ~ 150 KB.
OBJECT_WEIGHT = 150_000


@dataclass(frozen=True)
class SegmentRange:
    """One segment of a plan: keys (``start_after``, ``last_key``], its tar range, and the
    part numbers it may use."""

    index: int
    start_after: str | None
    last_key: str
    objects: int
    bytes: int
    tar_start: int
    tar_end: int  # without the end of archive
    first_part: int
    parts: int


@dataclass(frozen=True)
class SegmentPlan:
    run: str  # names the temporaries
    upload_id: str  # the archive's multipart upload, created once the plan is made
    archive_key: str
    objects: int
    bytes: int
    tar_size: int  # the whole tar stream, end of archive included
    short_of_min_billable: int
    ranges: tuple[SegmentRange, ...]
    planned_in_s: float = 0.0
    listing: tuple[ListingChunk, ...] = ()  # the prefix as the plan listed it (older plans: none)
    # What the step that made and wrote it spent (an Airflow prepare task; older plans: nothing),
    # for the assembler's bill (tasks/protocol/bill.py): requests by operation, CPU-seconds.
    requests: dict = field(default_factory=dict, hash=False)
    cpu_s: float = 0.0

    @property
    def count(self) -> int:
        return len(self.ranges)

    @property
    def final_part(self) -> int:
        return self.ranges[-1].first_part + self.ranges[-1].parts

    def temp_key(self, layout: ArchiveLayout, k: int, what: str) -> str:
        return segment_key(layout, self.run, k, what)

    def to_dict(self) -> dict:
        return {**asdict(self), "ranges": [asdict(r) for r in self.ranges],
                "listing": [[c.first, c.last, c.objects, c.key] for c in self.listing]}

    @classmethod
    def from_dict(cls, d: dict) -> "SegmentPlan":
        return cls(**{**d, "ranges": tuple(SegmentRange(**r) for r in d["ranges"]),
                      "listing": tuple(ListingChunk(*c) for c in d.get("listing", ()))})


def could_use_segments(spec: ArchiveSpec) -> bool:
    """Whether ``spec``'s run could use segments at all: not with one process, or a budget
    that holds one pipeline only, unless segments are asked for."""
    return min(spec.processes, processes_within(spec.memory_budget)) >= 2 or bool(spec.segments)


class PlanOutdated(ArchiverError):
    """The source changed since the plan was made (an object the plan placed was removed or
    rewritten, or the plan's recorded listing is gone): no segment of this plan can be
    produced again as planned, so it is never retried per segment; a new plan is needed.
    Retryable where the retry plans again (a CLI run: the next run makes a new plan); not
    for an Airflow segment task, whose retries would read the same plan (``retryable``)."""

    def __init__(self, message: str, hint: str | None = None, *, retryable: bool = True):
        self.detail = message
        super().__init__(message, hint=hint or "run the prefix again: a new plan is made (in Airflow, clear "
                                               "the prefix's prepare task with downstream)")
        self.retryable = retryable


MIN_SHARE = 48 << 20  # the smallest memory a pipeline holds (ArchiveSpec's floor)
# A spawned worker's resident memory before its segment buffers a byte: the interpreter, the
# engine's imports and its S3 clients (measured: 58 MiB). Counted in --memory-budget, so the
# budget bounds the process tree; the parent's own interpreter is what every run has, one or
# many processes (the measured tree stays within the budget plus 64 MiB).
WORKER_INTERPRETER = 60 << 20
LEAST_SEGMENTED_BUDGET = 2 * MIN_SHARE + WORKER_INTERPRETER  # one worker and the assembler


def processes_within(budget: int) -> int:
    """Worker processes a budget holds: a share and an interpreter each, and a share for the
    assembler."""
    return max(1, (budget - MIN_SHARE) // (MIN_SHARE + WORKER_INTERPRETER))


def worker_share(budget: int, processes: int) -> int:
    """Each of ``processes`` workers' pipeline budget (the assembler keeps one more share):
    what is left of ``budget`` after their interpreters, split evenly."""
    return (budget - processes * WORKER_INTERPRETER) // (processes + 1)


SIZED = "sized"  # the key range of the pages ``plan_segments`` is handed, recorded as any range


@dataclass
class _Page:
    first: str
    last: str
    objects: int
    bytes: int
    tar: int


def plan_segments(spec: ArchiveSpec, store: Store, archive_key: str, count: int,
                  stop: Callable[[], None] | None = None, listed: list[list] | None = None) -> SegmentPlan:
    """List the prefix and cut it into at most ``count`` segments of about equal weight
    (bytes plus ``OBJECT_WEIGHT`` per object). The prefix is listed in parallel key ranges,
    its pages taken as they come and recorded (the segments read that recording, never the
    source's listing); memory is one small record per page, put in key order once all are
    in. The pages a cut falls in are read back from the recording to find the exact key: the
    plan and its segments see one listing, whatever the source does meanwhile. ``stop`` is
    called between pages and raises to stop the plan (its lease was lost). ``listed``: the
    prefix's first pages, in key order, as its sizing listed them moments before in this run:
    they are not listed again, the listing goes on after their last key."""
    started = time.monotonic()
    run = secrets.token_hex(8)
    layout = layout_for(spec.source, spec.destination)
    pages, tally, recorded = _list_and_record(spec, store, layout, run, stop, listed)
    objects = tally.objects
    if not objects:
        raise EmptyPrefix(f"{spec.source} holds no objects; nothing was written",
                          hint="check the prefix (it must match the keys exactly, trailing / included)")
    ends = _segment_ends(pages, objects, max(1, min(count, objects)),
                         lambda i: _recorded_objects(store, layout, recorded, pages[i - 1].last if i else None,
                                                     pages[i].last), stop)
    parts_each = (MAX_PARTS - 1) // len(ends)  # one number per segment for the part before it, one final
    ranges: list[SegmentRange] = []
    before: tuple[str | None, int, int, int] = (None, 0, 0, 0)
    for k, end in enumerate(ends):
        ranges.append(SegmentRange(k, before[0], end[0], end[1] - before[1], end[2] - before[2], before[3], end[3],
                                   first_part=k * parts_each + 2, parts=parts_each - 1))
        before = end
    return SegmentPlan(run=run, upload_id="",
                       archive_key=archive_key, objects=objects, bytes=ends[-1][2],
                       tar_size=ends[-1][3] + END_OF_ARCHIVE, short_of_min_billable=tally.short_of_min_billable, ranges=tuple(ranges),
                       planned_in_s=time.monotonic() - started, listing=recorded)


def _list_and_record(spec: ArchiveSpec, store: Store, layout: ArchiveLayout, run: str,
                     stop: Callable[[], None] | None, listed: list[list] | None
                     ) -> tuple[list[_Page], ListingTally, tuple[ListingChunk, ...]]:
    """The prefix listed (after the sizing's ``listed`` pages) and recorded for the segments:
    one small record per page, in key order; its tally; the recording."""
    pages: list[_Page] = []
    tally = ListingTally(member_size)  # exact: the segments' tar offsets follow from it
    listed = [page for page in listed or () if page]
    listing = source_listing(store, spec.source, start_after=listed[-1][-1].key if listed else None)
    recorder = ListingRecorder(spec.write_options, store, layout, run)
    sized = [*((SIZED, page) for page in listed), (SIZED, None)] if listed else []
    try:
        for source, page in itertools.chain(sized, listing.by_range()):
            if stop is not None:
                stop()
            if page is None:
                recorder.end(source)
                continue
            tar = tally.add(page)
            recorder.add(source, page)
            pages.append(_Page(page[0].key, page[-1].key, len(page), sum(o.size for o in page), tar))
        if tally.classes.unreadable:  # refused once listed, before any GET
            raise tally.classes.refusal(str(spec.source), tally.objects, complete=True)
        recorded = recorder.close()
    except BaseException:
        recorder.abandon()  # what it wrote is left to the temporaries' cleanup
        raise
    finally:
        listing.close()
    pages.sort(key=lambda p: key_order(p.first))
    return pages, tally, recorded


def _segment_ends(pages: list[_Page], objects: int, count: int, objects_of: Callable[[int], Iterable],
                  stop: Callable[[], None] | None) -> list[tuple[str, int, int, int]]:
    """(last key, objects, bytes, tar end) of each of ``count`` segments of about equal weight:
    pages are walked whole; where a cut falls inside page ``i``, its objects (``objects_of(i)``,
    read back from the recording) are walked one by one."""
    total = sum(p.tar + OBJECT_WEIGHT * p.objects for p in pages)
    cuts = [total * k / count for k in range(1, count)]
    ends: list[tuple[str, int, int, int]] = []
    weight = n = nbytes = tar = 0
    for i, p in enumerate(pages):
        # Every segment gets at least one object: a cut is forced where only as many objects
        # are left as segments still to fill (one huge object would otherwise take two cuts).
        if not cuts or (weight + p.tar + OBJECT_WEIGHT * p.objects < cuts[0]
                        and objects - n - p.objects > len(cuts)):
            weight += p.tar + OBJECT_WEIGHT * p.objects
            n, nbytes, tar = n + p.objects, nbytes + p.bytes, tar + p.tar
            continue
        if stop is not None:
            stop()
        for o in objects_of(i):
            weight += member_size(o.key, o.size) + OBJECT_WEIGHT
            n, nbytes, tar = n + 1, nbytes + o.size, tar + member_size(o.key, o.size)
            if cuts and (weight >= cuts[0] or objects - n == len(cuts)) and n > (ends[-1][1] if ends else 0):
                ends.append((o.key, n, nbytes, tar))
                cuts.pop(0)
    ends.append((pages[-1].last, n, nbytes, tar))
    return ends


def _recorded_objects(store: Store, layout: ArchiveLayout, recorded: tuple[ListingChunk, ...], after: str | None,
                      last: str):
    for listed in recorded_pages(store, layout, recorded, after, last):
        yield from listed


def open_upload(options: WriteOptions, store: Store, layout: ArchiveLayout, plan: SegmentPlan) -> SegmentPlan:
    """Create the archive's multipart upload the segments write into; the plan with its id."""
    return replace(plan, upload_id=create_upload(store, layout.bucket, plan.archive_key,
                                                 storage_class=options.storage_class,
                                                 extra_args={**options.encryption_args, **options.lock_args()}))


def write_plan(options: WriteOptions, store: Store, layout: ArchiveLayout, plan: SegmentPlan,
               billed: Callable[[], dict] | None = None) -> None:
    """Record ``plan`` as the plan in progress (``plan_key``) for the segment and assemble
    tasks that run elsewhere; with ``billed`` (what the step spent so far:
    ``{"requests": ..., "cpu_s": ...}``), that bill and this write's own PUT in it."""
    if billed is not None:
        plan = replace(plan, **with_own_put(billed()))
    put_temporary(store, layout, options, plan_key(layout), json.dumps(plan.to_dict()).encode())


def with_own_put(bill: dict) -> dict:
    """``bill`` with one more ``put_object``: the PUT of the record that carries it, sent next
    (counted once, as ``Store.call`` counts it, whatever botocore resends)."""
    return bill_sum(bill, {"requests": {"put_object": 1}})


def read_plan(store: Store, layout: ArchiveLayout) -> SegmentPlan | None:
    """The plan in progress, or None if there is none."""
    body = get_temporary(store, layout, plan_key(layout))
    return None if body is None else SegmentPlan.from_dict(json.loads(body))
