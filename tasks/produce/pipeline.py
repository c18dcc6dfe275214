"""The streaming pipeline of one prefix: list -> fetch -> tar -> compress -> upload.

All stages run at once, joined by bounded queues; nothing touches local disk. The pipeline
uploads every part of the archive and writes every manifest record, then returns a
``StreamedArchive`` with both uploads still open: completing them is the commit protocol's
business (tasks/protocol/commit.py), and so is aborting them if the commit does not happen.
"""

from __future__ import annotations

import hashlib
import itertools
from collections import deque
from dataclasses import dataclass
from datetime import timezone
from typing import Iterable

from isal import isal_zlib

from s3arch.format.compression import CompressedBlock, ParallelCompressor, codec_for
from s3arch.core.config import ArchiveSpec, MiB
from s3arch.core.coordinator import Stopped, StreamCoordinator
from s3arch.core.errors import ArchiverError, EmptyPrefix, IntegrityError
from s3arch.io.fetching import Fetcher
from s3arch.io.flow import ByteBudget
from s3arch.io.listing import ListingFeed
from s3arch.io.sources import source_pages
from s3arch.format.manifest import ArchiveLayout
from s3arch.stored.manifests import ManifestWriter
from s3arch.core.progress import Progress
from s3arch.io.s3 import S3Clients
from s3arch.io.store import Store
from s3arch.produce.streamed import MemoryPlan, RecordWriter, StreamedArchive, StreamTarget, manifest_header, open_manifest
from s3arch.format.tally import ListingTally
from s3arch.format.tarwriter import BlockSink, TarStream, member_name
from s3arch.io.upload import PartSizer, PartUploader


@dataclass(slots=True)
class _Entry:
    record: dict
    first_block: int
    last_block: int


class WholeArchive:
    """The target of a one-process run: the whole archive and its manifest."""

    start_after: str | None = None
    last_key: str | None = None
    tar_start = 0
    framed = True
    end_of_archive = True
    keeps_tail = False

    def __init__(self, spec: ArchiveSpec, layout: ArchiveLayout, archive_key: str):
        self.spec, self.layout, self.archive_key = spec, layout, archive_key

    def __str__(self) -> str:
        return str(self.spec.source)

    def nothing_listed(self) -> ArchiverError:
        return EmptyPrefix(f"{self.spec.source} holds no objects; nothing was written",
                           hint="check the prefix (it must match the keys exactly, trailing / included)")

    def sizer(self, plan: MemoryPlan, feed: ListingFeed[ListingTally]) -> PartSizer:
        # The total is known once the listing ended; until then sizes follow a schedule.
        return PartSizer(self.spec.min_part_size, lambda: (feed.tally.tar_bytes + MiB) if feed.finished else None,
                         max_part=plan.max_part, growth_every=self.spec.part_growth_every)

    def uploader(self, store: Store, sizer: PartSizer, memory: int, coordinator: StreamCoordinator) -> PartUploader:
        options = self.spec.write_options
        return PartUploader(store, self.layout.bucket, self.archive_key, storage_class=options.storage_class,
                            sizer=sizer, memory=memory, extra_args={**options.encryption_args, **options.lock_args()},
                            coordinator=coordinator)

    def records(self, store: Store, coordinator: StreamCoordinator) -> ManifestWriter:
        return open_manifest(store, self.layout, manifest_header(self.spec, self.layout, self.archive_key),
                             self.spec.write_options, coordinator)

    def check_produced(self, objects: int, tar_end: int) -> None:
        pass  # the listing check below covers a whole archive


def stream_archive(spec: ArchiveSpec, clients: S3Clients, target: StreamTarget, progress: Progress | None = None,
                   listed: Iterable[list] | None = None,
                   coordinator: StreamCoordinator | None = None) -> StreamedArchive:
    """Stream ``target``'s objects into its uploads, and return them open.

    A stream stops from above one way: ``coordinator.cancel(reason)`` (a lost lease, a
    cancel: tasks/core/stops.py); ``reason`` is then what it raises. On any failure the
    uploads are aborted and the first real failure is raised, whichever stage saw it.
    ``listed``: the prefix's pages, when an earlier step listed it already."""
    if coordinator is None:
        coordinator = StreamCoordinator(f"the archive of {target}", stall_timeout=spec.stall_timeout)
    return _Stream(spec, clients, target, progress or Progress(), coordinator, listed).run()


class _Stream:
    """One run of the member loop: list -> fetch -> tar -> compress -> upload, and records.

    Its stages report to one coordinator (tasks/core/coordinator.py): the listing thread, the
    fetcher's scheduler and CRT callbacks, the compressors and collector, the part uploads
    and this loop. The first real failure stops every stage; a stage stopped that way raises
    ``Stopped``, and the loop then raises the coordinator's exception, never the signal."""

    def __init__(self, spec: ArchiveSpec, clients: S3Clients, target: StreamTarget, progress: Progress,
                 coordinator: StreamCoordinator, listed: Iterable[list] | None):
        self.spec, self.clients, self.target, self.progress = spec, clients, target, progress
        self.coordinator = coordinator
        self.plan = MemoryPlan.for_spec(spec)
        if listed is None:
            listed = source_pages(clients.store, spec.source, target.start_after, target.last_key)
        self.feed = ListingFeed(clients.store, spec.source.bucket, spec.source.key, tally=ListingTally(), pages=listed,
                                coordinator=coordinator)

    def run(self) -> StreamedArchive:
        self.coordinator.start_watchdog()
        try:
            objects = self._first_listed()
            self._open()
            try:
                self._members(objects)
                self._finish()
                if not self.coordinator.announce_done():  # cancelled at the last moment
                    raise Stopped("stopped before the end")
            except BaseException as exc:
                self._stop(exc)
            finally:
                self.progress.stop()
        finally:
            self.coordinator.stop_watchdog()
            self.feed.close()
        return self._streamed()

    def _first_listed(self):
        """The listed objects, once at least one is known: an empty range opens nothing."""
        objects = iter(self.feed)
        try:
            first = next(objects)
        except StopIteration:
            raise self.target.nothing_listed() from None
        except BaseException as exc:
            error = self.coordinator.failure(exc)
            if error is exc:
                raise
            raise error  # noqa: B904 - the cause, not the signal that reported it
        return itertools.chain((first,), objects)

    def _open(self) -> None:
        spec, plan, store, coordinator = self.spec, self.plan, self.clients.store, self.coordinator
        self.progress.start(self.feed)
        self.budget = ByteBudget(plan.fetch)
        self.fetcher = Fetcher(self.clients.data_for(spec.source.bucket, plan.gets), spec.source.bucket,
                               budget=self.budget, concurrency=plan.gets,
                               chunk=min(spec.large_object_chunk, plan.fetch // 8), coordinator=coordinator,
                               without_tags=spec.without_tags, throttle_seconds=spec.throttle_budget)
        self.sizer = self.target.sizer(plan, self.feed)
        self.uploader = self.target.uploader(store, self.sizer, plan.upload_inflight, coordinator)
        self.records = self.target.records(store, coordinator)
        self.codec = codec_for(spec.codec, spec.effective_level)
        self.out = _ArchiveOutput(self.uploader, self.records, self.codec, self.progress)
        self.compressor = ParallelCompressor(self.codec, plan.threads, plan.pending_blocks, self.out.deliver,
                                             coordinator.set_exception)
        self.sink = BlockSink(spec.block_size,
                              lambda i, b, final: self.compressor.submit(i, b, final, coordinator),
                              start=self.target.tar_start)
        self.tar = TarStream(self.sink)

    def _members(self, objects) -> None:
        block_size, progress, out, tar, sink = self.spec.block_size, self.progress, self.out, self.tar, self.sink
        stopping = self.coordinator.is_set
        if self.target.framed:
            out.write_header()
        hasher = hashlib.sha256()
        for piece in self.fetcher.pieces(objects):
            obj = piece.obj
            if piece.index == 0:
                hasher = hashlib.sha256()
                captured = piece.captured
                out.open_block = sink.offset // block_size
                header_offset, data_offset = tar.begin(obj.key, obj.size, int(obj.last_modified.timestamp()))
            for chunk in piece.chunks:
                hasher.update(chunk)
            if piece.last:
                out.expect(_Entry(_record(obj, hasher.hexdigest(), header_offset, data_offset, captured),
                                  header_offset // block_size,
                                  (max(data_offset + obj.size, data_offset) - 1) // block_size))
            for chunk in piece.chunks:
                tar.write(chunk)
            if piece.last:
                tar.end(obj.size)
                progress.objects_done += 1
                if progress.objects_done % 1000 == 0:  # fail as soon as the listing shows it
                    self.sizer.check_capacity(self.feed.tally.tar_bytes)
            progress.bytes_done += piece.size
            sink.emit_ready()
            if stopping():
                raise Stopped("stream stopped")

    def _finish(self) -> None:
        self.tar.close(end_of_archive=self.target.end_of_archive)
        self.compressor.close(wait=True)
        # Blocks may have been refused once the stream stopped: stopped, never corrupt.
        self.coordinator.raise_if_stopped()
        self.out.finish(self.sink.offset - self.target.tar_start, trailer=self.target.framed)
        self.uploader.finish_parts(keep_short_tail=self.target.keeps_tail)
        self.target.check_produced(self.progress.objects_done, self.sink.offset)
        if not self.feed.finished or self.feed.objects_listed != self.progress.objects_done:
            raise IntegrityError(f"listed {self.feed.objects_listed} objects but archived "
                                 f"{self.progress.objects_done}; nothing was committed")

    def _stop(self, exc: BaseException) -> None:
        """Stop every stage, run the failure cleanups (the uploads' aborts), and raise the
        stream's first real failure: ``exc`` if it is one and came first, else the
        coordinator's exception (``exc`` is then the signal that brought it here, or a later
        failure). Ctrl-C is a cancel from above, and propagates as itself."""
        coordinator = self.coordinator
        interrupted = isinstance(exc, (KeyboardInterrupt, SystemExit))
        if interrupted:
            coordinator.cancel(f"{coordinator.what} was interrupted: its uploads were aborted and nothing was "
                               "committed")
        error = coordinator.failure(exc)
        coordinator.cancel_requests()  # GETs in flight are not waited for
        # Join the collector: once it is gone nothing writes to (or lazily creates) an upload,
        # so the aborts below are the last word on both.
        self.compressor.stop()
        for problem in coordinator.run_failure_cleanups():
            error.add_note(f"cleanup also failed: {problem}")
        if interrupted or error is exc:
            raise exc
        raise error

    def _streamed(self) -> StreamedArchive:
        out, sink = self.out, self.sink
        return StreamedArchive(uploader=self.uploader, manifest=self.records, objects=self.progress.objects_done,
                               bytes_in=self.progress.bytes_done, bytes_out=out.size,
                               tar_bytes=sink.offset - self.target.tar_start, blocks=sink.blocks,
                               archive_crc32=out.crc32, gets=self.fetcher.gets, peak_buffered=self.budget.peak,
                               short_of_min_billable=self.feed.tally.short_of_min_billable, raw_crc32=out.raw_crc32,
                               source_bytes_by_class=self.feed.tally.classes.bytes_by_class,
                               last_block=sink.blocks - 1, last_block_start=out.last_block_start,
                               tags_unread=self.fetcher.tags_unread, throttled=self.fetcher.throttled)


def _record(obj, sha256: str, header_offset: int, data_offset: int, captured) -> dict:
    """An object's manifest record, but for where its compressed bytes lie (added later);
    its attributes follow the fixed fields (FORMAT.md)."""
    modified = obj.last_modified
    if modified.tzinfo is not timezone.utc:  # the listing's are; converting them took most of a record's time
        modified = modified.astimezone(timezone.utc)
    record = {"type": "object", "key": obj.key, "size": obj.size, "etag": obj.etag,
              "last_modified": modified.isoformat(),
              "sha256": sha256, "header_offset": header_offset, "data_offset": data_offset}
    name = member_name(obj.key, obj.size)[0]
    if name != obj.key:
        record["name"] = name
    if captured is not None:
        record.update(captured.fields)
    return record


class _ArchiveOutput:
    """The collector's side: compressed blocks in order into the upload, and manifest
    records out as soon as the compressed range holding their object is known."""

    def __init__(self, uploader: PartUploader, manifest: RecordWriter, codec, progress: Progress):
        self.uploader = uploader
        self.manifest = manifest
        self.codec = codec
        self.progress = progress
        self.crc32 = 0
        self.size = 0
        self._crc = 0
        self._raw = 0
        self._entries: deque[_Entry] = deque()
        self._block_start: dict[int, int] = {}
        # First block of the member the tar writer is on: its entry is only expected once
        # its last piece is written, so its blocks' offsets must be kept until then.
        self.open_block = 0
        self.last_block_start = 0

    def _write(self, data: bytes) -> None:
        self.uploader.write(data)
        self.crc32 = isal_zlib.crc32(data, self.crc32)
        self.size += len(data)
        self.progress.bytes_out = self.size

    def write_header(self) -> None:
        self._write(self.codec.header())

    def expect(self, entry: _Entry) -> None:
        self._entries.append(entry)

    @property
    def raw_crc32(self) -> int:
        return self._crc

    def deliver(self, block: CompressedBlock) -> None:
        self._block_start[block.index] = self.last_block_start = self.size
        self._write(block.data)
        self._crc = self.codec.combine(self._crc, block.crc, block.raw_size)
        self._raw += block.raw_size
        while self._entries and self._entries[0].last_block <= block.index:
            e = self._entries.popleft()
            e.record["block"] = e.first_block
            e.record["range"] = [self._block_start[e.first_block], self.size]
            self.manifest.add_object(e.record)
        keep_from = min(self._entries[0].first_block if self._entries else block.index + 1,
                        self.open_block)
        for index in [i for i in self._block_start if i < keep_from]:
            del self._block_start[index]

    def finish(self, tar_size: int, trailer: bool = True) -> None:
        if self._entries:
            raise IntegrityError(f"{len(self._entries)} objects were never placed in a block")
        if self._raw != tar_size:
            raise IntegrityError(f"compressed {self._raw} tar bytes of {tar_size}")
        if trailer:
            self._write(self.codec.trailer(self._crc, self._raw))
