"""The streaming pipeline of one prefix: list -> fetch -> tar -> compress -> upload.

All stages run at once, joined by bounded queues; nothing touches local disk. The pipeline
uploads every part of the archive and writes every manifest record, then returns a
``StreamedArchive`` with both uploads still open: completing them is the commit protocol's
business (tasks/commit.py), and so is aborting them if the commit does not happen.
"""

from __future__ import annotations

import hashlib
import threading
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timezone

from . import __version__
from isal import isal_zlib

from .compression import CompressedBlock, ParallelCompressor, codec_for
from .config import ArchiveSpec, MiB
from .errors import ArchiverError, BadArgument, EmptyPrefix, IntegrityError, translate
from .fetching import ByteBudget, Fetcher
from .listing import ListingFeed
from .manifest import MANIFEST_MEMORY, ArchiveLayout, ManifestWriter
from .progress import Progress
from .s3 import S3Clients
from .tarwriter import BlockSink, TarStream, member_name
from .upload import PartSizer, PartUploader, upload_memory


@dataclass
class StreamedArchive:
    """Everything written, nothing committed: both multipart uploads are open."""

    uploader: PartUploader
    manifest: ManifestWriter
    objects: int
    bytes_in: int
    bytes_out: int
    tar_bytes: int
    blocks: int
    archive_crc32: int  # CRC32 (gzip's polynomial) of the archive object's bytes
    gets: int
    peak_buffered: int
    short_of_min_billable: int = 0
    raw_crc32: int = 0  # of the tar bytes (the gzip trailer's CRC)
    last_block: int = 0  # index of the last block, and where its compressed bytes start
    last_block_start: int = 0
    segments: int = 1
    timings: dict = field(default_factory=dict)  # seconds per phase of a segmented run
    notes: list = field(default_factory=list)

    def abort(self) -> list[ArchiverError]:
        """Abort both uploads; the errors of aborts that failed (never raised)."""
        return [e for e in (self.uploader.abort(), self.manifest.abort()) if e is not None]


_PER_GET_OVERHEAD = 384 << 10  # CRT connection and request buffers per GET in flight


@dataclass(frozen=True)
class MemoryPlan:
    """How ``--memory-budget`` is split between the stages.

    Measured multipliers, not wishes: a fetched byte is held up to three times while it is
    delivered (CRT's response buffer, the Python chunk, the tar block it is copied into), a block once raw and once compressed, plus
    each compression thread's working memory (zstd -19 needs 17 MiB of it); a part once while
    it uploads, plus the part being filled; the manifest writer likewise with its 5 MiB parts. Compression threads are capped so they take at most a quarter of the budget,
    and parts at a quarter of the upload share, so parts that grow on a long stream still fit.
    """

    fetch: int
    gets: int
    upload_inflight: int
    max_part: int
    threads: int
    pending_blocks: int

    @classmethod
    def for_spec(cls, spec: ArchiveSpec) -> "MemoryPlan":
        budget, block = spec.memory_budget, spec.block_size
        context = codec_for(spec.codec, spec.effective_level).context_memory(block)
        threads = max(1, min(spec.compress_threads, (budget // 4) // (2 * block + context)))
        pending_blocks = threads + 2
        compress_mem = pending_blocks * block * 2 + threads * context
        upload_share = budget // 4
        max_part = max(spec.min_part_size, upload_share // 4)
        upload_inflight = max(max_part, upload_share - 2 * max_part)
        fixed = compress_mem + upload_memory(upload_inflight, max_part) + MANIFEST_MEMORY
        least = fixed + _MIN_GETS * _PER_GET_OVERHEAD + 2 * _MIN_FETCH
        if least > budget:
            raise BadArgument(
                f"--memory-budget {budget >> 20}MiB cannot hold this pipeline ({spec.codec} level "
                f"{spec.effective_level} needs {context / MiB:.1f} MiB per compression thread)",
                hint=f"raise --memory-budget to at least {-(-least // MiB) + 1}MiB, or lower --level")
        gets = max(_MIN_GETS, min(spec.concurrency, ((budget - fixed) // 2) // _PER_GET_OVERHEAD))
        # A fetched byte is held twice, and the tar writer's copy of a piece a third time.
        fetch = max(_MIN_FETCH, (budget - fixed - gets * _PER_GET_OVERHEAD) // 3)
        return cls(fetch=fetch, gets=gets, upload_inflight=upload_inflight, max_part=max_part,
                   threads=threads, pending_blocks=pending_blocks)


_MIN_GETS = 8
_MIN_FETCH = 2 * MiB


@dataclass(slots=True)
class _Entry:
    record: dict
    first_block: int
    last_block: int


def stream_archive(spec: ArchiveSpec, clients: S3Clients, layout: ArchiveLayout, archive_key: str,
                   progress: Progress | None = None, abort: threading.Event | None = None,
                   segment=None, listed: tuple | None = None) -> StreamedArchive:
    """Stream the prefix into the archive and manifest uploads. Setting ``abort`` (the lease
    was lost, the task was killed) stops every stage; on any failure both uploads are aborted
    and the error is raised.

    With ``segment`` (tasks/segments.py, ``SegmentJob``) only that segment's key range is
    streamed, from its place in the tar stream, into its own part numbers of the archive's
    upload and a file of segment records; no gzip header or trailer (the assembler adds them)
    and, unless it is the last segment, no end of archive. ``listed``: the prefix's pages,
    when an earlier step listed it already."""
    control = clients.control
    abort = abort or threading.Event()
    failure: list[BaseException] = []

    def fail(exc: BaseException) -> None:
        failure.append(exc)
        abort.set()

    plan = MemoryPlan.for_spec(spec)
    feed = ListingFeed(control, spec.source.bucket, spec.source.key,
                       start_after=segment.start_after if segment else None,
                       last_key=segment.last_key if segment else None, pages=listed)
    objects = iter(feed)
    try:
        first = next(objects)
    except StopIteration:
        if segment:
            raise IntegrityError(f"{segment} lists no objects: the source changed since the plan")
        raise EmptyPrefix(f"{spec.source} holds no objects; nothing was written",
                          hint="check the prefix (it must match the keys exactly, trailing / included)")

    def chain():
        yield first
        yield from objects

    progress = progress or Progress()
    progress.start(feed)
    budget = ByteBudget(plan.fetch)
    fetcher = Fetcher(clients.data_for(spec.source.bucket, plan.gets), spec.source.bucket, budget=budget,
                      concurrency=plan.gets, chunk=min(spec.large_object_chunk, plan.fetch // 8), abort=abort,
                      stall_timeout=spec.stall_timeout)
    extra = spec.encryption_args
    if segment:
        sizer = PartSizer(spec.min_part_size, lambda: segment.tar_bytes + (1 << 20), max_part=plan.max_part,
                          parts=segment.parts)
        uploader = segment.uploader(control, sizer, plan.upload_inflight, abort)
        manifest = segment.records(control, abort)
    else:
        sizer = PartSizer(spec.min_part_size,
                          lambda: (feed.tar_bytes_bound + (1 << 20)) if feed.finished else None,
                          max_part=plan.max_part, growth_every=spec.part_growth_every)
        uploader = PartUploader(control, layout.bucket, archive_key, storage_class=spec.storage_class,
                                sizer=sizer, memory=plan.upload_inflight, extra_args=extra,
                                abort_event=abort)
        manifest = open_manifest(spec, control, layout, archive_key, abort)
    codec = codec_for(spec.codec, spec.effective_level)
    out = _ArchiveOutput(uploader, manifest, codec, progress)

    compressor = ParallelCompressor(codec, plan.threads, plan.pending_blocks, out.deliver, fail)
    tar_start = segment.tar_start if segment else 0
    sink = BlockSink(spec.block_size, lambda i, b, final: compressor.submit(i, b, final, abort), start=tar_start)
    tar = TarStream(sink)
    try:
        if segment is None:
            out.write_header()
        hasher = None
        for piece in fetcher.pieces(chain()):
            obj = piece.obj
            if piece.index == 0:
                hasher = hashlib.sha256()
                mtime = int(obj.last_modified.timestamp())
                out.open_block = sink.offset // spec.block_size
                header_offset, data_offset = tar.begin(obj.key, obj.size, mtime)
            for chunk in piece.chunks:
                hasher.update(chunk)
            if piece.last:
                end = data_offset + obj.size
                record = {"type": "object", "key": obj.key, "size": obj.size, "etag": obj.etag,
                          "last_modified": obj.last_modified.astimezone(timezone.utc).isoformat(),
                          "sha256": hasher.hexdigest(), "header_offset": header_offset,
                          "data_offset": data_offset}
                name = member_name(obj.key, obj.size)[0]
                if name != obj.key:
                    record["name"] = name
                out.expect(_Entry(record, header_offset // spec.block_size,
                                  (max(end, data_offset) - 1) // spec.block_size))
            for chunk in piece.chunks:
                tar.write(chunk)
            if piece.last:
                tar.end(obj.size)
                progress.objects_done += 1
                if progress.objects_done % 1000 == 0:  # fail as soon as the listing shows it
                    sizer.check_capacity(feed.tar_bytes_bound)
            progress.bytes_done += piece.size
            sink.emit_ready()
            if failure:
                raise failure[0]
        tar.close(end_of_archive=segment is None or segment.is_last)
        compressor.close(wait=True)
        if failure:
            raise failure[0]
        out.finish(sink.offset - tar_start, trailer=segment is None)
        uploader.finish_parts()
        if segment:
            segment.check_produced(progress.objects_done, tar_start, sink.offset)
        if not feed.finished or feed.objects_listed != progress.objects_done:
            raise IntegrityError(f"listed {feed.objects_listed} objects but archived "
                                 f"{progress.objects_done}; nothing was committed")
    except BaseException as exc:
        abort.set()
        compressor.close(wait=False)
        streamed_failure = exc
        if isinstance(exc, InterruptedError) and failure:
            exc = failure[0]
        cleanup = [e for e in (uploader.abort(), manifest.abort()) if e is not None]
        error = exc if isinstance(exc, ArchiverError) or not isinstance(exc, Exception) \
            else translate(exc, f"archive {spec.source}")
        for problem in cleanup:
            error.add_note(f"cleanup also failed: {problem}")
        if error is streamed_failure:
            raise
        raise error
    finally:
        feed.close()
        progress.stop()
    return StreamedArchive(uploader=uploader, manifest=manifest, objects=progress.objects_done,
                           bytes_in=progress.bytes_done, bytes_out=out.size, tar_bytes=sink.offset - tar_start,
                           blocks=sink.blocks, archive_crc32=out.crc32, gets=fetcher.gets,
                           peak_buffered=budget.peak, short_of_min_billable=feed.short_of_min_billable,
                           raw_crc32=out.raw_crc32, last_block=sink.blocks - 1,
                           last_block_start=out.last_block_start)


def open_manifest(spec: ArchiveSpec, control, layout: ArchiveLayout, archive_key: str,
                  abort: threading.Event) -> ManifestWriter:
    """The manifest's upload, its header written; encrypted like the archive, since it names
    every key."""
    return ManifestWriter(control, layout, {
        "tool": f"s3arch {__version__}",
        "source": {"bucket": spec.source.bucket, "prefix": spec.source.key},
        "archive": {"bucket": layout.bucket, "key": archive_key},
        "codec": spec.codec, "level": spec.effective_level, "block_size": spec.block_size,
        "started": _now(),
    }, abort_event=abort, extra_args=spec.encryption_args)


class _ArchiveOutput:
    """The collector's side: compressed blocks in order into the upload, and manifest
    records out as soon as the compressed range holding their object is known."""

    def __init__(self, uploader: PartUploader, manifest: ManifestWriter, codec, progress: Progress):
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


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
