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
from s3arch.core.errors import SourceChanged
from s3arch.core.progress import Progress
from s3arch.core.stops import Cancel
from s3arch.format.day import DayIndex, Part, digest_of, index_for, part_layout
from s3arch.stored.days import day_records, read_day_index, write_day_index
from s3arch.format.manifest import ArchiveLayout
from s3arch.stored.manifests import ManifestWriter
from s3arch.io.listed import ListedObject
from s3arch.io.keys import key_order
from s3arch.io.sources import source_pages
from s3arch.io.s3 import S3Clients
from s3arch.io.store import Store
from s3arch.produce.pipeline import WholeArchive, stream_archive
from s3arch.produce.segments import SegmentPlan
from s3arch.core.coordinator import StreamCoordinator
from s3arch.produce.streamed import StreamedArchive, manifest_header, open_manifest

_PAGE = 1000
_FIRST = 5  # late keys a message names


@dataclass
class _Tally:
    """Counts of one pass of the merge: what the parts hold, and the late objects found."""

    archived: int = 0  # records of the parts (one per key)
    archived_digest: int = 0
    late: int = 0
    late_bytes: int = 0
    late_digest: int = 0
    changed: int = 0  # of ``late``: keys a part holds with another ETag
    superseded: int = 0  # digest of the (key, ETag) pairs the late rewrites replace
    first: list[str] = field(default_factory=list)  # the first few late keys, for messages


@dataclass
class LateCheck:
    """What a re-check of a committed day found: counts only. The late objects themselves are
    listed again, streamed, when they are archived (``pages``): a day where a million objects
    arrived late holds a page of them at a time, never a list of all."""

    store: Store
    source: S3Url
    parts: list[Part]
    listed: int = 0
    found: _Tally = field(default_factory=_Tally)
    manifests_read: bool = False  # False: the day index's digest (or an empty source) settled it
    index: DayIndex | None = None  # the day index to write: missing or behind its parts
    produced: _Tally | None = None  # the pass that fed the next part (``pages``)

    @property
    def late(self) -> int:
        return self.found.late

    @property
    def changed(self) -> int:
        return self.found.changed

    @property
    def next_part(self) -> int:
        return self.parts[-1].number + 1

    def pages(self) -> Iterator[list[ListedObject]]:
        """The late objects as the source holds them now (a second pass of the merge), in pages;
        what this pass hands on is what ``index_after`` counts."""
        self.produced = _Tally()
        page: list[ListedObject] = []
        for obj in _late_objects(self.store, self.source, self.parts, self.produced):
            page.append(obj)
            if len(page) == _PAGE:
                yield page
                page = []
        if page:
            yield page

    def note(self) -> str:
        found = self.produced or self.found
        changed = f" ({found.changed:,} of them rewritten since they were archived)" if found.changed else ""
        return (f"{found.late:,} objects newer than the archive{changed}: archived as part "
                f"{self.next_part} of the day")

    def index_after(self, part: Part) -> DayIndex:
        """The day index once ``part`` (made of what ``pages`` handed on) is committed."""
        t = self.produced or self.found
        return index_for([*self.parts, part], t.archived + t.late - t.changed,
                         (t.archived_digest - t.superseded + t.late_digest) % (1 << 64))


def check_late(store: Store, source: S3Url, parts: list[Part]) -> LateCheck:
    """Compare the source with the committed ``parts`` of its day (reads only)."""
    check = LateCheck(store, source, parts)
    index = read_day_index(store, parts[0].layout)
    listed = digest_of((o.key, o.etag) for page in source_pages(store, source) for o in page)
    check.listed = listed[0]
    fresh = index is not None and index.matches(parts)
    if check.listed == 0 or (fresh and index is not None and (index.objects, index.digest) == listed):
        return check
    check.manifests_read = True
    for _ in _late_objects(store, source, parts, check.found):
        pass
    if not check.late and not fresh:
        check.index = index_for(parts, check.found.archived, check.found.archived_digest)
    return check


def _late_objects(store: Store, source: S3Url, parts: list[Part], tally: _Tally) -> Iterator[ListedObject]:
    """One pass over the listing and the parts' records, both in key order (a merge of two
    sorted streams: nothing held but a page of each): the late objects, counted in ``tally``."""
    records = day_records(store, parts)

    def advance() -> dict | None:
        record = next(records, None)
        if record is not None:
            tally.archived += 1
            tally.archived_digest = (tally.archived_digest + _digest(record["key"], record["etag"])) % (1 << 64)
        return record

    record = advance()
    for page in source_pages(store, source):
        for obj in page:
            order = key_order(obj.key)
            while record is not None and key_order(record["key"]) < order:
                record = advance()
            if record is not None and record["key"] == obj.key:
                if record["etag"] == obj.etag:
                    continue
                tally.changed += 1
                tally.superseded = (tally.superseded + _digest(record["key"], record["etag"])) % (1 << 64)
            tally.late += 1
            tally.late_bytes += obj.size
            tally.late_digest = (tally.late_digest + _digest(obj.key, obj.etag)) % (1 << 64)
            if len(tally.first) < _FIRST:
                tally.first.append(obj.key)
            yield obj
    while record is not None:
        record = advance()


def _digest(key: str, etag: str) -> int:
    return digest_of([(key, etag)])[1]


class _PartTarget(WholeArchive):
    """A whole archive of the late objects, whose manifest header says which part it is."""

    def __init__(self, spec: ArchiveSpec, layout: ArchiveLayout, archive_key: str, number: int, day: ArchiveLayout):
        super().__init__(spec, layout, archive_key)
        self.number, self.day = number, day

    def nothing_listed(self) -> SourceChanged:
        # The late objects are listed again for the part: gone meanwhile, the day is as it was.
        return SourceChanged(f"the objects newer than {self.day.manifest_url} are gone from the source since "
                             "they were found; nothing was written", hint="run it again: it re-checks the day")

    def records(self, store: Store, coordinator: StreamCoordinator) -> ManifestWriter:
        header = {**manifest_header(self.spec, self.layout, self.archive_key),
                  "part": self.number, "day": self.day.manifest_key}
        return open_manifest(store, self.layout, header, self.spec.write_options, coordinator)


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

    def start(self, cancel: Cancel | None = None) -> None:
        pass

    def produce(self, coordinator: StreamCoordinator) -> StreamedArchive:
        target = _PartTarget(self.spec, self.layout, self.archive_key, self.check.next_part, self.day)
        # The stream hands its uploads on through a coordinator of its own (as every producer's
        # stream does); a stop of the run's stops it with the same reason.
        return stream_archive(self.spec, self.clients, target, self.progress, listed=self.check.pages(),
                              coordinator=coordinator.attempt(f"part {self.check.next_part} of {self.day.manifest_key}"))


def record_parts(store: Store, day: ArchiveLayout, index: DayIndex, spec: ArchiveSpec) -> None:
    """Write the day index (under the day's lease, after the manifests it names)."""
    write_day_index(store, day, index, spec.write_options.encryption_args)
