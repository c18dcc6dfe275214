"""Late arrivals: what a re-run of a committed day finds that none of its parts holds, and
the producer that archives them as the day's next part (docs/FORMAT.md, "Parts").

An object is late when its key is in no part, or when the latest part that holds its key
holds another ETag (it was rewritten after it was archived: the new content is archived too,
and the older part keeps the old one). The check costs one listing of the source when the
day index's digest matches it (nothing new) or the source is empty (all archived and
deleted); otherwise it also streams the parts' manifests, in key order, beside the listing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

from s3arch.core.config import ArchiveSpec, S3Url
from s3arch.core.progress import Progress
from s3arch.format.day import (DayIndex, Part, day_records, digest_of, index_for, part_layout, read_day_index,
                               write_day_index)
from s3arch.format.manifest import ArchiveLayout, ManifestWriter
from s3arch.io.listed import ListedObject
from s3arch.io.keys import key_order
from s3arch.io.sources import source_pages
from s3arch.io.s3 import S3Clients
from s3arch.produce.pipeline import WholeArchive, stream_archive
from s3arch.produce.segments import SegmentPlan
from s3arch.core.coordinator import StreamCoordinator
from s3arch.produce.streamed import StreamedArchive, manifest_header, open_manifest

_PAGE = 1000


@dataclass
class LateCheck:
    """What a re-check of a committed day found."""

    parts: list[Part]
    listed: int = 0
    late: list[ListedObject] = field(default_factory=list)  # in key order
    changed: int = 0  # of ``late``: keys a part holds with another ETag
    manifests_read: bool = False  # False: the day index's digest (or an empty source) settled it
    index: DayIndex | None = None  # the day index to write: missing or behind its parts
    archived: tuple[int, int] = (0, 0)  # (count, digest) of what the parts hold, when read
    superseded: int = 0  # digest of the (key, ETag) pairs the late rewrites replace

    @property
    def next_part(self) -> int:
        return self.parts[-1].number + 1

    def pages(self) -> Iterator[list[ListedObject]]:
        for i in range(0, len(self.late), _PAGE):
            yield self.late[i:i + _PAGE]

    def note(self) -> str:
        changed = f" ({self.changed:,} of them rewritten since they were archived)" if self.changed else ""
        return (f"{len(self.late):,} objects newer than the archive{changed}: archived as part "
                f"{self.next_part} of the day")

    def index_after(self, part: Part) -> DayIndex:
        """The day index once ``part`` (made of ``late``) is committed."""
        count, digest = self.archived
        _, late_digest = digest_of((o.key, o.etag) for o in self.late)
        return index_for([*self.parts, part], count + len(self.late) - self.changed,
                         (digest - self.superseded + late_digest) % (1 << 64))


def check_late(control, source: S3Url, parts: list[Part]) -> LateCheck:
    """Compare the source with the committed ``parts`` of its day (reads only)."""
    check = LateCheck(parts)
    index = read_day_index(control, parts[0].layout)
    listed = digest_of((o.key, o.etag) for page in source_pages(control, source) for o in page)
    check.listed = listed[0]
    fresh = index is not None and index.matches(parts)
    if check.listed == 0 or (fresh and index is not None and (index.objects, index.digest) == listed):
        return check
    _merge(control, source, check)
    if not check.late and not fresh:
        check.index = index_for(parts, *check.archived)
    return check


def _merge(control, source: S3Url, check: LateCheck) -> None:
    """One pass over the listing and the parts' records, both in key order."""
    check.manifests_read = True
    count = digest = superseded = 0
    records = day_records(control, check.parts)

    def advance() -> dict | None:
        nonlocal count, digest
        record = next(records, None)
        if record is not None:
            _, one = digest_of([(record["key"], record["etag"])])
            count, digest = count + 1, (digest + one) % (1 << 64)
        return record

    record = advance()
    for page in source_pages(control, source):
        for obj in page:
            order = key_order(obj.key)
            while record is not None and key_order(record["key"]) < order:
                record = advance()
            if record is not None and record["key"] == obj.key:
                if record["etag"] == obj.etag:
                    continue
                check.changed += 1
                superseded += digest_of([(record["key"], record["etag"])])[1]
            check.late.append(obj)
    while record is not None:
        record = advance()
    check.archived, check.superseded = (count, digest), superseded % (1 << 64)


class _PartTarget(WholeArchive):
    """A whole archive of the late objects, whose manifest header says which part it is."""

    def __init__(self, spec: ArchiveSpec, layout: ArchiveLayout, archive_key: str, number: int, day: ArchiveLayout):
        super().__init__(spec, layout, archive_key)
        self.number, self.day = number, day

    def records(self, control, coordinator: StreamCoordinator) -> ManifestWriter:
        header = {**manifest_header(self.spec, self.layout, self.archive_key),
                  "part": self.number, "day": self.day.manifest_key}
        return open_manifest(control, self.layout, header, self.spec.write_options, coordinator)


class LatePart:
    """The producer of the day's next part: the late objects the check found, no listing of
    its own. Such parts are small, so it is always one pipeline in this process."""

    keep: SegmentPlan | None = None
    segmented = False

    def __init__(self, spec: ArchiveSpec, clients: S3Clients, check: LateCheck, progress: Progress | None = None):
        self.spec, self.clients, self.check, self.progress = spec, clients, check, progress
        self.day = check.parts[0].layout
        self.layout = part_layout(self.day, check.next_part)
        self.archive_key = self.layout.archive_key(spec.extension)

    def claim(self) -> None:
        pass

    def start(self) -> None:
        pass

    def produce(self, coordinator: StreamCoordinator) -> StreamedArchive:
        target = _PartTarget(self.spec, self.layout, self.archive_key, self.check.next_part, self.day)
        # The stream hands its uploads on through a coordinator of its own (as every producer's
        # stream does); a stop of the run's stops it with the same reason.
        return stream_archive(self.spec, self.clients, target, self.progress, listed=self.check.pages(),
                              coordinator=coordinator.attempt(f"part {self.check.next_part} of {self.day.manifest_key}"))


def record_parts(control, day: ArchiveLayout, index: DayIndex, spec: ArchiveSpec) -> None:
    """Write the day index (under the day's lease, after the manifests it names)."""
    write_day_index(control, day, index, spec.write_options.encryption_args)
