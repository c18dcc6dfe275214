"""What streaming one prefix's members produces, and where they go: the vocabulary the
pipeline (tasks/produce/pipeline.py), the segments (tasks/produce/segments/) and the commit protocol share.

``StreamedArchive`` is a stream's result, both uploads still open; a ``StreamTarget`` says
where a stream goes (a whole archive, or one segment) and ``MemoryPlan`` how the memory
budget is split between the stages; ``open_manifest`` starts a manifest's upload."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Protocol

from s3arch.format.compression import codec_for
from s3arch.core.config import ArchiveSpec, MiB, WriteOptions
from s3arch.core.coordinator import StreamCoordinator
from s3arch.core.errors import ArchiverError, BadArgument
from s3arch.io.listing import ListingFeed
from s3arch.format.manifest import ArchiveLayout
from s3arch.stored.manifests import MANIFEST_MEMORY, ManifestWriter
from s3arch.format.tally import ListingTally
from s3arch.io.store import Store
from s3arch.io.upload import PartSizer, PartUploader, upload_memory
from s3arch.core.version import __version__


@dataclass
class StreamedArchive:
    """Everything written, nothing committed: both multipart uploads are open."""

    uploader: PartUploader
    manifest: Any  # ManifestWriter, or a segment's RecordWriter
    objects: int
    bytes_in: int
    bytes_out: int
    tar_bytes: int
    blocks: int
    archive_crc32: int  # CRC32 (gzip's polynomial) of the archive object's bytes
    gets: int
    peak_buffered: int
    short_of_min_billable: int = 0
    source_bytes_by_class: dict = field(default_factory=dict)  # sources not in STANDARD: retrieval fees
    raw_crc32: int = 0  # of the tar bytes (the gzip trailer's CRC)
    last_block: int = 0  # index of the last block, and where its compressed bytes start
    last_block_start: int = 0
    segments: int = 1
    tags_unread: int = 0  # tagged objects archived without their tags (--without-tags)
    throttled: int = 0  # throttled answers (503 SlowDown) the fetcher waited out
    timings: dict = field(default_factory=dict)  # seconds per phase of a segmented run
    # What other processes spent on it, for the run's bill: {"requests": {op: n}, "cpu_s": s}
    elsewhere: dict = field(default_factory=dict)
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


class StreamTarget(Protocol):
    """Where a stream of members goes: a whole archive (``WholeArchive``) or one segment of a
    segmented run (tasks/produce/segments/produce.py, ``SegmentTarget``). The member loop is the same
    for both; the target supplies the key range, the uploader, the record writer, the place in
    the tar stream and the framing, and checks what was produced."""

    start_after: str | None  # keys (start_after, last_key] of the prefix; None: from the start / to the end
    last_key: str | None
    tar_start: int  # tar offset of the first member (the global block grid starts at 0)
    framed: bool  # writes the codec's header and trailer
    end_of_archive: bool  # writes tar's two zero blocks at the end
    keeps_tail: bool  # keeps a rest shorter than a part (for an assembler) instead of uploading it

    def nothing_listed(self) -> ArchiverError: ...

    def sizer(self, plan: MemoryPlan, feed: ListingFeed[ListingTally]) -> PartSizer: ...

    # ``coordinator``: the stream's, handed to each PartUploader (it registers its abort with
    # it, reports failed parts to it, and stops when it stops).
    def uploader(self, store: Store, sizer: PartSizer, memory: int, coordinator: StreamCoordinator) -> PartUploader: ...

    def records(self, store: Store, coordinator: StreamCoordinator) -> RecordWriter: ...

    def check_produced(self, objects: int, tar_end: int) -> None: ...


class RecordWriter(Protocol):
    def add_object(self, record: dict) -> None: ...

    def abort(self) -> ArchiverError | None: ...


def manifest_header(spec: ArchiveSpec, layout: ArchiveLayout, archive_key: str) -> dict:
    """The manifest's header (FORMAT.md): what is archived, where, how, and since when."""
    return {
        "tool": f"s3arch {__version__}",
        "source": {"bucket": spec.source.bucket, "prefix": spec.source.key},
        "archive": {"bucket": layout.bucket, "key": archive_key},
        "codec": spec.codec, "level": spec.effective_level, "block_size": spec.block_size,
        "started": _now(),
    }


def open_manifest(store: Store, layout: ArchiveLayout, header: dict, options: WriteOptions,
                  coordinator: StreamCoordinator | None = None) -> ManifestWriter:
    """The manifest's upload, ``header`` written; encrypted and locked like the archive, since
    it names every key."""
    return ManifestWriter(store, layout, header, coordinator=coordinator,
                          extra_args={**options.encryption_args, **options.lock_args()})


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
