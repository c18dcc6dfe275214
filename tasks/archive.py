"""Archive one prefix: list -> fetch -> tar -> compress -> upload, all stages at once.

The commit protocol (docs/FORMAT.md, "Commit protocol"):
1. a manifest at the destination means done: skip, unless ``overwrite``;
2. abort multipart uploads that an earlier, killed run left for the same keys;
3. stream the archive and the manifest as two multipart uploads;
4. complete the archive, check size and CRC32C against what S3 reports;
5. complete the manifest, last. Any failure before that aborts both uploads;
6. only then, and only if asked, delete sources whose ETag still matches.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass
from datetime import datetime, timezone

from . import __version__
from .compression import CompressedBlock, ParallelCompressor, codec_for
from .config import ArchiveSpec, MiB
from .deletion import delete_archived_sources
from .errors import (AccessDenied, ArchiverError, BadArgument, DestinationConflict, EmptyPrefix, IntegrityError)
from .fetching import ByteBudget, Fetcher
from .listing import ListingFeed, iter_pages
from .manifest import (MANIFEST_PART_SIZE, ArchiveLayout, ManifestWriter, layout_for, manifest_exists,
                       read_header_and_summary)
from .progress import Progress
from .s3 import S3Clients, translate
from .tarwriter import BlockSink, TarStream, member_name, member_size_bound
from .upload import PartSizer, PartUploader, abort_stale_uploads


@dataclass
class ArchiveResult:
    status: str  # archived | skipped | dry_run
    source: str
    archive: str | None
    manifest: str | None
    objects: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    tar_bytes: int = 0
    seconds: float = 0.0
    storage_class: str = ""
    codec: str = ""
    deleted: int = 0
    gets: int = 0
    peak_buffered: int = 0
    stale_uploads_aborted: int = 0
    estimated_bytes_out: int | None = None

    @property
    def ratio(self) -> float:
        return self.bytes_in / self.bytes_out if self.bytes_out else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "ratio": round(self.ratio, 3)}


@dataclass(slots=True)
class _Entry:
    record: dict
    first_block: int
    last_block: int


_PER_GET_OVERHEAD = 384 << 10  # CRT connection and request buffers per GET in flight


def _plan_memory(spec: ArchiveSpec) -> tuple[int, int, int, int]:
    """Split the budget: (fetch reservation, GETs in flight, upload parts in flight,
    compression blocks pending).

    Measured multipliers, not wishes: a fetched byte is held twice while it is delivered
    (CRT's response buffer and the Python chunk), a part once in the upload buffer and once
    in flight, and a block once raw and once compressed; the manifest writer holds up to two
    of its parts.
    """
    pending_blocks = spec.compress_threads + 2
    compress_mem = pending_blocks * spec.block_size * 2
    upload_inflight = max(1, min(8, (spec.memory_budget // 8) // spec.min_part_size - 1))
    upload_mem = 2 * (upload_inflight + 1) * spec.min_part_size
    gets = max(8, min(spec.concurrency, (spec.memory_budget // 4) // _PER_GET_OVERHEAD))
    manifest_mem = 2 * MANIFEST_PART_SIZE
    rest = spec.memory_budget - compress_mem - upload_mem - manifest_mem - gets * _PER_GET_OVERHEAD
    fetch = max(4 * MiB, rest // 3)
    return fetch, gets, upload_inflight, pending_blocks


def archive_prefix(spec: ArchiveSpec, clients: S3Clients | None = None,
                   progress: Progress | None = None) -> ArchiveResult:
    clients = clients or S3Clients.from_session()
    started = time.monotonic()
    layout = layout_for(spec.source, spec.destination)
    archive_key = layout.archive_key(spec.extension)
    if spec.source.bucket == layout.bucket and archive_key.startswith(spec.source.key):
        raise BadArgument(f"the destination s3://{layout.bucket}/{archive_key} lies inside the source "
                          f"prefix {spec.source}", hint="choose a destination outside the source prefix")
    control = clients.control
    check_bucket(control, spec.source.bucket, "source")
    check_bucket(control, layout.bucket, "destination")
    result = ArchiveResult("archived", str(spec.source), f"s3://{layout.bucket}/{archive_key}",
                           layout.manifest_url, storage_class=spec.storage_class, codec=spec.codec)

    previous = None
    if manifest_exists(control, layout):
        header, summary = read_header_and_summary(control, layout)
        if header["source"] != {"bucket": spec.source.bucket, "prefix": spec.source.key}:
            raise DestinationConflict(
                f"{layout.manifest_url} archives {header['source']}, not {spec.source}",
                hint="two prefixes map to the same archive; archive one into another destination")
        if not spec.overwrite:
            result.status = "skipped"
            result.archive = f"s3://{layout.bucket}/{header['archive']['key']}"
            result.objects, result.bytes_in = summary["objects"], summary["bytes"]
            result.bytes_out, result.tar_bytes = summary["archive_size"], summary["tar_size"]
            result.seconds = time.monotonic() - started
            return result
        previous = summary

    if spec.dry_run:
        return _dry_run(spec, clients, result, started)

    for key in (archive_key, layout.manifest_key):
        result.stale_uploads_aborted += abort_stale_uploads(control, layout.bucket, key)
    _run_pipeline(spec, clients, layout, archive_key, result, previous, progress)
    if spec.delete_source:
        result.deleted = delete_archived_sources(control, spec.source, layout)
    result.seconds = time.monotonic() - started
    return result


def check_bucket(control, bucket: str, role: str) -> None:
    what = f"{role} bucket s3://{bucket}"
    try:
        control.head_bucket(Bucket=bucket)
    except Exception as exc:  # noqa: BLE001
        error = translate(exc, what)
        if isinstance(error, AccessDenied):
            # A HEAD answer has no body, so a wrong secret looks like a missing permission;
            # a GET on the bucket returns the real code (SignatureDoesNotMatch, ...).
            try:
                control.list_objects_v2(Bucket=bucket, MaxKeys=0)
            except Exception as probe:  # noqa: BLE001
                error = translate(probe, what)
        raise error from exc


def _dry_run(spec, clients, result, started) -> ArchiveResult:
    """Count what would be archived and estimate the archive from a compressed sample."""
    result.status = "dry_run"
    tar_bound = 0
    sample_in = sample_out = 0
    codec = codec_for(spec.codec, spec.effective_level)
    for page in iter_pages(clients.control, spec.source.bucket, spec.source.key):
        for o in page:
            result.objects += 1
            result.bytes_in += o.size
            tar_bound += member_size_bound(o.key, o.size)
            if sample_in < 8 * MiB and 0 < o.size <= 4 * MiB:
                body = clients.control.get_object(Bucket=spec.source.bucket, Key=o.key,
                                                  IfMatch=o.etag)["Body"].read()
                sample_in += len(body)
                sample_out += len(codec.compress(body, True)[0])
    if result.objects == 0:
        raise EmptyPrefix(f"{spec.source} holds no objects; nothing would be archived")
    ratio = sample_out / sample_in if sample_in else 1.0
    result.tar_bytes = tar_bound
    result.estimated_bytes_out = int(tar_bound * ratio)
    result.seconds = time.monotonic() - started
    return result


def _run_pipeline(spec: ArchiveSpec, clients: S3Clients, layout: ArchiveLayout, archive_key: str,
                  result: ArchiveResult, previous: dict | None, progress: Progress | None) -> None:
    control = clients.control
    abort = threading.Event()
    failure: list[BaseException] = []

    def fail(exc: BaseException) -> None:
        failure.append(exc)
        abort.set()

    fetch_budget, gets_inflight, upload_inflight, pending_blocks = _plan_memory(spec)
    feed = ListingFeed(control, spec.source.bucket, spec.source.key)
    objects = iter(feed)
    try:
        first = next(objects)
    except StopIteration:
        raise EmptyPrefix(f"{spec.source} holds no objects; nothing was written",
                          hint="check the prefix (it must match the keys exactly, trailing / included)")

    def chain():
        yield first
        yield from objects

    progress = progress or Progress()
    progress.start(feed)
    budget = ByteBudget(fetch_budget)
    fetcher = Fetcher(clients.data, spec.source.bucket, budget=budget, concurrency=gets_inflight,
                      chunk=min(spec.large_object_chunk, fetch_budget // 8), abort=abort,
                      stall_timeout=spec.stall_timeout)
    sizer = PartSizer(spec.min_part_size,
                      lambda: (feed.tar_bytes_bound + (1 << 20)) if feed.finished else None)
    extra = {}
    if spec.sse:
        extra["ServerSideEncryption"] = spec.sse
    if spec.sse_kms_key_id:
        extra["SSEKMSKeyId"] = spec.sse_kms_key_id
    uploader = PartUploader(control, layout.bucket, archive_key, storage_class=spec.storage_class,
                            sizer=sizer, max_inflight=upload_inflight, extra_args=extra,
                            abort_event=abort)
    manifest = ManifestWriter(control, layout, {
        "tool": f"s3arch {__version__}",
        "source": {"bucket": spec.source.bucket, "prefix": spec.source.key},
        "archive": {"bucket": layout.bucket, "key": archive_key},
        "codec": spec.codec, "level": spec.effective_level, "block_size": spec.block_size,
        "started": _now(),
    }, abort_event=abort, extra_args=extra)  # the manifest names every key: encrypt it alike
    codec = codec_for(spec.codec, spec.effective_level)
    out = _ArchiveOutput(uploader, manifest, codec, progress)

    compressor = ParallelCompressor(codec, spec.compress_threads, pending_blocks, out.deliver, fail)
    sink = BlockSink(spec.block_size, lambda i, b, final: compressor.submit(i, b, final, abort))
    tar = TarStream(sink)
    try:
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
            progress.bytes_done += piece.size
            sink.emit_ready()
            if failure:
                raise failure[0]
        tar.close()
        compressor.close(wait=True)
        if failure:
            raise failure[0]
        out.finish(sink.offset)

        if not feed.finished or feed.objects_listed != progress.objects_done:
            raise IntegrityError(f"listed {feed.objects_listed} objects but archived "
                                 f"{progress.objects_done}; nothing was committed")
        if previous and previous["objects"] > progress.objects_done:
            raise DestinationConflict(
                f"{layout.manifest_url} holds {previous['objects']} objects, the source now only "
                f"{progress.objects_done}: overwriting would lose archived data",
                hint="restore the archive first, or delete the old archive and manifest by hand")
        if previous:
            control.delete_object(Bucket=layout.bucket, Key=layout.manifest_key)
        uploaded = uploader.complete()
        if uploaded.size != out.size:
            raise IntegrityError(f"archive holds {uploaded.size} bytes, {out.size} were produced")
        manifest.complete({
            "objects": progress.objects_done, "bytes": progress.bytes_done,
            "tar_size": sink.offset, "blocks": sink.blocks,
            "archive_size": uploaded.size, "archive_sha256": out.sha256.hexdigest(),
            "archive_crc32c": uploaded.checksum_crc32c, "archive_etag": uploaded.etag,
            "storage_class": spec.storage_class, "ended": _now(),
        })
    except BaseException as exc:
        abort.set()
        compressor.close(wait=False)
        uploader.abort()
        manifest.abort()
        if isinstance(exc, InterruptedError) and failure:
            exc = failure[0]
        if isinstance(exc, ArchiverError) or not isinstance(exc, Exception):
            raise exc
        raise translate(exc, f"archive {spec.source}") from exc
    finally:
        feed.close()
        progress.stop()
    result.objects = progress.objects_done
    result.bytes_in = progress.bytes_done
    result.bytes_out = out.size
    result.tar_bytes = sink.offset
    result.gets = fetcher.gets
    result.peak_buffered = budget.peak


class _ArchiveOutput:
    """The collector's side: compressed blocks in order into the upload, and manifest
    records out as soon as the compressed range holding their object is known."""

    def __init__(self, uploader: PartUploader, manifest: ManifestWriter, codec, progress: Progress):
        self.uploader = uploader
        self.manifest = manifest
        self.codec = codec
        self.progress = progress
        self.sha256 = hashlib.sha256()
        self.size = 0
        self._crc = 0
        self._raw = 0
        self._entries: deque[_Entry] = deque()
        self._block_start: dict[int, int] = {}
        # First block of the member the tar writer is on: its entry is only expected once
        # its last piece is written, so its blocks' offsets must be kept until then.
        self.open_block = 0

    def _write(self, data: bytes) -> None:
        self.uploader.write(data)
        self.sha256.update(data)
        self.size += len(data)
        self.progress.bytes_out = self.size

    def write_header(self) -> None:
        self._write(self.codec.header())

    def expect(self, entry: _Entry) -> None:
        self._entries.append(entry)

    def deliver(self, block: CompressedBlock) -> None:
        self._block_start[block.index] = self.size
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

    def finish(self, tar_size: int) -> None:
        if self._entries:
            raise IntegrityError(f"{len(self._entries)} objects were never placed in a block")
        if self._raw != tar_size:
            raise IntegrityError(f"compressed {self._raw} tar bytes of {tar_size}")
        self._write(self.codec.trailer(self._crc, self._raw))


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
