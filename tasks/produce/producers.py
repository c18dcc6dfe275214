"""Step 5 of the commit protocol: the archive and its manifest made as two open uploads, by
the producer the caller picks (tasks/archive.py). The commit protocol (tasks/protocol/commit.py) only
holds the lease around it and commits what it made; which of the three producers ran is
none of its business:

- one pipeline in this process (tasks/produce/pipeline.py),
- N segments on worker processes of this machine, assembled here (a large prefix, more
  than one process: ``segments.stream_segmented``),
- the assembly of the segments other tasks produced for the plan in progress (an Airflow
  segmented run: ``segments.assemble``).

The first two are ``OnThisMachine``: it starts on the pipeline and turns to segments when the
prefix proves large. The third is ``PlannedAssembly``.
"""

from __future__ import annotations

from typing import Protocol

from s3arch.core.config import ArchiveSpec
from s3arch.core.coordinator import StreamCoordinator
from s3arch.core.stops import Cancel
from s3arch.core.errors import ObjectMissing
from s3arch.format.manifest import ArchiveLayout
from s3arch.produce.pipeline import WholeArchive, stream_archive
from s3arch.core.progress import Progress
from s3arch.io.s3 import S3Clients
from s3arch.produce.segments import (PrefixIsLarge, SegmentPlan, SizingListing, assemble, could_use_segments, read_plan,
                       stream_segmented)
from s3arch.produce.streamed import StreamedArchive


class Producer(Protocol):
    """What the commit protocol asks of a producer, in this order, all under the prefix's lease."""

    # A plan in progress whose uploads and temporaries the cleanup of dead runs must spare.
    keep: SegmentPlan | None
    # Set once ``produce`` made the archive of segments: their temporaries are deleted after
    # the commit.
    segmented: bool

    def claim(self) -> None:
        """Before the cleanup of dead runs: read what the producer needs that a cleanup
        would delete."""

    def start(self, cancel: Cancel | None = None) -> None:
        """Beside the reads of the prefix's state: begin what can begin before them, stopping
        with ``cancel`` (the run's stop from above)."""

    def produce(self, coordinator: StreamCoordinator) -> StreamedArchive:
        """Both uploads, open; ``coordinator`` (the commit protocol's) stops it from above."""


class OnThisMachine:
    """One pipeline, started on the pages the prefix is sized with (no second listing, and no
    waiting for the size of a small prefix); a prefix that proves large stops it and goes to
    segments on worker processes, as does a run that asks for segments."""

    keep: SegmentPlan | None = None

    def __init__(self, spec: ArchiveSpec, clients: S3Clients, layout: ArchiveLayout, archive_key: str,
                 progress: Progress | None = None, listed: list[list] | None = None):
        self.spec, self.clients, self.layout, self.archive_key = spec, clients, layout, archive_key
        self.progress = progress
        self._listed = listed  # the first pages of a prefix its caller sized (``archive_prefix``)
        self.segmented = False
        self._sizing: SizingListing | None = None

    def claim(self) -> None:
        pass

    def start(self, cancel: Cancel | None = None) -> None:
        # The source's size, in a thread of its own: a pipeline starts on its first page. Its
        # store stops with the run: a stopped run lists no further page.
        spec = self.spec
        if not spec.segments and could_use_segments(spec):
            self._sizing = SizingListing(self.clients.store.bound(cancel), spec.source,
                                         spec.segment_min_objects, spec.segment_min_bytes)

    def produce(self, coordinator: StreamCoordinator) -> StreamedArchive:
        spec = self.spec
        if not spec.segments:
            target = WholeArchive(spec, self.layout, self.archive_key)
            try:
                # An attempt of its own: the PrefixIsLarge that stops it does not stop the
                # segments that follow, while a stop from above stops either.
                return stream_archive(spec, self.clients, target, self.progress,
                                      listed=self._sizing.pages() if self._sizing else None,
                                      coordinator=coordinator.attempt(f"the archive of {target}"))
            except PrefixIsLarge:
                if self.progress:
                    self.progress.reset()
        # The pages the sizing listed are the plan's first: no key of them is listed twice.
        streamed = stream_segmented(spec, self.clients, self.layout, self.archive_key, coordinator, self.progress,
                                    listed=self._sizing.listed() if self._sizing else self._listed)
        self.segmented = True
        return streamed


class PlannedAssembly:
    """The segments of the plan in progress (``prepare_segments``), produced by other tasks,
    assembled into the archive."""

    segmented = True

    def __init__(self, spec: ArchiveSpec, clients: S3Clients, layout: ArchiveLayout):
        self.spec, self.clients, self.layout = spec, clients, layout
        self.keep: SegmentPlan | None = None

    def claim(self) -> None:
        self.keep = read_plan(self.clients.store, self.layout)
        if self.keep is None:
            raise ObjectMissing(f"no segment plan for {self.spec.source} to assemble: it was never made, or a "
                                "run of the prefix since then cleaned it up",
                                hint="run the prefix again from its prepare task (clear it with downstream)")

    def start(self, cancel: Cancel | None = None) -> None:
        pass

    def produce(self, coordinator: StreamCoordinator) -> StreamedArchive:
        assert self.keep is not None  # claim() read it
        return assemble(self.spec, self.clients, self.layout, self.keep, coordinator, keep_open=True)
