"""Sizing and planning a segmented run: is a prefix large, and where its segments start.

The plan lists the prefix once and cuts it into contiguous key ranges balanced by bytes and
object count; since a tar member's length follows from its key and size alone, it also knows
where in the tar stream each segment starts, and gives each its own range of part numbers.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import asdict, dataclass, replace
from typing import Iterator

from ..config import ArchiveSpec
from ..errors import EmptyPrefix
from ..listing import ListedObject, iter_pages
from ..manifest import ArchiveLayout
from ..tarwriter import END_OF_ARCHIVE, member_size
from ..upload import MAX_PARTS, create_upload

# What one object costs beyond its bytes, as bytes of the same cost: about 1,300 small
# objects/s against 200 MB/s per process here (bench/README.md), so one object ~ 150 KB.
OBJECT_WEIGHT = 150_000


def segments_prefix(layout: ArchiveLayout) -> str:
    """Where every run's segment temporaries live: one prefix to list and clean."""
    return layout.stem + ".segments/"


def plan_key(layout: ArchiveLayout) -> str:
    """The plan of the segmented run in progress, for segment and assemble tasks elsewhere."""
    return segments_prefix(layout) + "plan.json"


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

    @property
    def count(self) -> int:
        return len(self.ranges)

    @property
    def final_part(self) -> int:
        return self.ranges[-1].first_part + self.ranges[-1].parts

    def temp_key(self, layout: ArchiveLayout, k: int, what: str) -> str:
        return f"{segments_prefix(layout)}{self.run}/{k:05d}{what}"

    def to_dict(self) -> dict:
        return {**asdict(self), "ranges": [asdict(r) for r in self.ranges]}

    @classmethod
    def from_dict(cls, d: dict) -> "SegmentPlan":
        return cls(**{**d, "ranges": tuple(SegmentRange(**r) for r in d["ranges"])})


@dataclass(frozen=True)
class PrefixSize:
    """What listing a prefix up to a threshold showed: enough to decide one task or segments."""

    prefix: str
    objects: int
    bytes: int
    complete: bool  # the listing ended (else it stopped at the threshold: at least this much)
    seconds: float
    requests: int
    pages: tuple = ()  # a complete listing's pages, for the one pipeline to use instead of listing again

    def large(self, min_objects: int, min_bytes: int) -> bool:
        return self.objects >= min_objects or self.bytes >= min_bytes


def size_prefix(control, bucket: str, prefix: str, min_objects: int, min_bytes: int) -> PrefixSize:
    """List ``prefix`` until it proves large or ends: at most ``min_objects / 1,000`` LISTs,
    so sizing a small prefix costs what listing it costs, and a large one no more."""
    started = time.monotonic()
    objects = size = 0
    pages = []
    for page in iter_pages(control, bucket, prefix):
        pages.append(page)
        objects += len(page)
        size += sum(o.size for o in page)
        if objects >= min_objects or size >= min_bytes:
            return PrefixSize(prefix, objects, size, False, time.monotonic() - started, len(pages))
    return PrefixSize(prefix, objects, size, True, time.monotonic() - started, max(1, len(pages)), tuple(pages))


def sized_for_segments(spec: ArchiveSpec, control) -> PrefixSize | None:
    """Whether ``spec``'s run could use segments at all (None: one process, or a budget that
    holds one pipeline), and if so the prefix's size up to the threshold: a small prefix's
    pages then feed the one pipeline, so deciding costs no second listing."""
    if min(spec.processes, processes_within(spec.memory_budget)) < 2 and not spec.segments:
        return None
    return size_prefix(control, spec.source.bucket, spec.source.key, spec.segment_min_objects,
                       spec.segment_min_bytes)


MIN_SHARE = 48 << 20  # the smallest memory a pipeline holds (ArchiveSpec's floor)


def processes_within(budget: int) -> int:
    """Worker processes a budget holds: a share each, and one for the assembler."""
    return max(1, budget // MIN_SHARE - 1)


@dataclass
class _Page:
    after: str | None  # the key before the page
    last: str
    objects: int
    bytes: int
    tar: int


def plan_segments(spec: ArchiveSpec, control, archive_key: str, count: int) -> SegmentPlan:
    """List the prefix and cut it into at most ``count`` segments of about equal weight
    (bytes plus ``OBJECT_WEIGHT`` per object). Memory is one small record per listing page:
    the pages a cut falls in are listed again to find the exact key."""
    from ..cost import short_of_minimum

    started = time.monotonic()
    pages: list[_Page] = []
    short = 0
    after = None
    for page in iter_pages(control, spec.source.bucket, spec.source.key):
        tar = sum(member_size(o.key, o.size) for o in page)
        pages.append(_Page(after, page[-1].key, len(page), sum(o.size for o in page), tar))
        short += sum(short_of_minimum(o.size) for o in page)
        after = page[-1].key
    objects = sum(p.objects for p in pages)
    if not objects:
        raise EmptyPrefix(f"{spec.source} holds no objects; nothing was written",
                          hint="check the prefix (it must match the keys exactly, trailing / included)")
    count = max(1, min(count, objects))
    total = sum(p.tar + OBJECT_WEIGHT * p.objects for p in pages)
    cuts = [total * k / count for k in range(1, count)]
    # Walk pages; where a cut falls inside a page, list that page again object by object.
    ends: list[tuple[str, int, int, int]] = []  # (last key, objects, bytes, tar end) per segment
    weight = n = nbytes = tar = 0
    for p in pages:
        # Every segment gets at least one object: a cut is forced where only as many objects
        # are left as segments still to fill (one huge object would otherwise take two cuts).
        if not cuts or (weight + p.tar + OBJECT_WEIGHT * p.objects < cuts[0]
                        and objects - n - p.objects > len(cuts)):
            weight += p.tar + OBJECT_WEIGHT * p.objects
            n, nbytes, tar = n + p.objects, nbytes + p.bytes, tar + p.tar
            continue
        for o in _page_objects(control, spec, p):
            weight += member_size(o.key, o.size) + OBJECT_WEIGHT
            n, nbytes, tar = n + 1, nbytes + o.size, tar + member_size(o.key, o.size)
            if cuts and (weight >= cuts[0] or objects - n == len(cuts)) and n > (ends[-1][1] if ends else 0):
                ends.append((o.key, n, nbytes, tar))
                cuts.pop(0)
    ends.append((pages[-1].last, n, nbytes, tar))
    parts_each = (MAX_PARTS - 1) // len(ends)  # one number per segment for the part before it, one final
    ranges: list[SegmentRange] = []
    before: tuple[str | None, int, int, int] = (None, 0, 0, 0)
    for k, end in enumerate(ends):
        ranges.append(SegmentRange(k, before[0], end[0], end[1] - before[1], end[2] - before[2], before[3], end[3],
                                   first_part=k * parts_each + 2, parts=parts_each - 1))
        before = end
    return SegmentPlan(run=secrets.token_hex(8), upload_id="",
                       archive_key=archive_key, objects=objects, bytes=ends[-1][2],
                       tar_size=ends[-1][3] + END_OF_ARCHIVE, short_of_min_billable=short, ranges=tuple(ranges),
                       planned_in_s=time.monotonic() - started)


def _page_objects(control, spec: ArchiveSpec, page: _Page) -> Iterator[ListedObject]:
    for listed in iter_pages(control, spec.source.bucket, spec.source.key, page.after, page.last):
        yield from listed


def open_upload(spec: ArchiveSpec, control, layout: ArchiveLayout, plan: SegmentPlan) -> SegmentPlan:
    """Create the archive's multipart upload the segments write into; the plan with its id."""
    return replace(plan, upload_id=create_upload(control, layout.bucket, plan.archive_key,
                                                 storage_class=spec.storage_class,
                                                 extra_args={**spec.encryption_args, **spec.lock_args()}))
