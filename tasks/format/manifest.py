"""Where an archive and its manifest live, and the manifest itself (docs/FORMAT.md).

The manifest is gzip-compressed JSON Lines: a ``header`` record, one ``object`` record per
archived object in archive order, and a closing ``summary`` record. It is streamed to S3 by
multipart upload while the archive is written (so a prefix of ten million objects never
holds its index in memory) and completed last, after the archive is verified: a manifest
that exists means a complete archive.
"""

from __future__ import annotations

import bisect
import gzip
import json
import zlib
from dataclasses import dataclass
from typing import Iterator

from s3arch.core.config import S3Url
from s3arch.core.errors import (IO_ERRORS, ArchiveDamaged, ArchiverError, BadArgument, DestinationConflict,
                                IntegrityError, translate)
from s3arch.io.keys import key_order
from s3arch.io.reads import none_if_missing, read_object, stream_object
from s3arch.io.upload import PartSizer, PartUploader, UploadResult, upload_memory
from s3arch.core.version import __version__

FORMAT_NAME = "s3arch-manifest"
# 2: object records carry the object's attributes (FORMAT.md, "Object attributes"). A
# version 1 manifest is read as one whose objects had none.
FORMAT_VERSION = 2
MANIFEST_SUFFIX = ".manifest.jsonl.gz"
INDEX_SUFFIX = ".manifest-index.json.gz"
INDEX_FORMAT = "s3arch-manifest-index"
# Object records per indexed chunk of the manifest: a lookup reads one chunk, about 40 KB
# compressed, and the index holds one entry per chunk (10,000 for ten million objects).
RECORDS_PER_CHUNK = 1000
ARCHIVE_SUFFIXES = (".tar.gz", ".tar.zst")
# A manifest or index that does not parse was changed or cut after it was written (every read
# is checked against its length and resumed): a retry would read the same bytes.
STORED_DAMAGE = ("it was changed or cut after it was written: restore an earlier version if the bucket is "
                 "versioned, or archive the prefix again with --overwrite while its sources exist")


@dataclass(frozen=True)
class ArchiveLayout:
    bucket: str
    stem: str  # destination key without suffix

    def archive_key(self, extension: str) -> str:
        return self.stem + extension

    @property
    def manifest_key(self) -> str:
        return self.stem + MANIFEST_SUFFIX

    @property
    def manifest_url(self) -> str:
        return f"s3://{self.bucket}/{self.manifest_key}"

    @property
    def index_key(self) -> str:
        return self.stem + INDEX_SUFFIX

    @property
    def lease_key(self) -> str:
        """The lease object a run holds while it writes this archive (tasks/protocol/lease.py)."""
        return self.stem + ".lease.json"

    @property
    def probe_key(self) -> str:
        """A scratch object for finding out whether the endpoint honours conditional deletes."""
        return self.stem + ".delete-probe"


def layout_for(source: S3Url, destination: S3Url) -> ArchiveLayout:
    """Destination keys as a pure function of (source bucket, source prefix).

    ``s3://logs/app/2026/11/21/`` into ``s3://vault/archive/`` gives
    ``archive/logs/app/2026/11/21.tar.gz`` and ``archive/logs/app/2026/11/21.manifest.jsonl.gz``.
    The manifest key does not depend on the codec, so "done" means done whatever codec made it.
    """
    dest = destination.key
    if dest and not dest.endswith("/"):
        dest += "/"
    return ArchiveLayout(destination.bucket, dest + _source_part(source))


def destination_of(layout: ArchiveLayout, source: S3Url) -> S3Url:
    """The destination ``layout_for`` turned into ``layout`` for ``source``: its inverse."""
    tail = _source_part(source)
    if not layout.stem.endswith(tail):
        raise BadArgument(f"s3://{layout.bucket}/{layout.stem} is not where {source} is archived")
    return S3Url(layout.bucket, layout.stem[: -len(tail)])


def _source_part(source: S3Url) -> str:
    # A date inside key names (logs/2026-11-21-) names its archive logs/2026-11-21.tar.gz.
    return f"{source.bucket}/{source.key.rstrip(TRAILING_SEPARATORS) or '_bucket'}"


TRAILING_SEPARATORS = "/-_."  # what a prefix may end with after its date


def layout_from_url(url: S3Url) -> ArchiveLayout:
    """The layout of an archive given the URL of the archive or of its manifest."""
    for suffix in (MANIFEST_SUFFIX, *ARCHIVE_SUFFIXES):
        if url.key.endswith(suffix):
            return ArchiveLayout(url.bucket, url.key[: -len(suffix)])
    raise BadArgument(f"{url} is neither an archive nor a manifest",
                      hint=f"give the key ending in {' or '.join((MANIFEST_SUFFIX, *ARCHIVE_SUFFIXES))}")


# One encoder for every record: json.dumps with options builds a new one per call, a third of
# a record's cost.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str)


def _dumps(record: dict) -> bytes:
    return _ENCODER.encode(record).encode("utf-8", "surrogateescape") + b"\n"


# S3's minimum part size, one part in flight: the manifest's share of the memory budget is
# two parts (streamed.MemoryPlan counts it), whatever the number of objects.
MANIFEST_PART_SIZE = 5 << 20
MANIFEST_MEMORY = upload_memory(MANIFEST_PART_SIZE, MANIFEST_PART_SIZE)


class JsonLinesUpload:
    """Records as gzip JSON Lines streamed into a multipart upload, compressed in batches of
    about 1 MiB: the manifest's body, and a segment's records (tasks/produce/segments/produce.py)."""

    def __init__(self, uploader: PartUploader):
        self.uploader = uploader
        self.compressed = 0  # bytes of gzip written so far
        self._z = zlib.compressobj(6, zlib.DEFLATED, 31)
        self._pending = bytearray()

    def write(self, record: dict) -> None:
        self._pending += _dumps(record)
        if len(self._pending) >= 1 << 20:
            self._emit(self._z.compress(self._pending))
            self._pending.clear()

    def flush_point(self) -> int:
        """A full flush (byte aligned, no back-references across it, so a raw inflater can
        start here); its compressed offset."""
        self._emit(self._z.compress(self._pending) + self._z.flush(zlib.Z_FULL_FLUSH))
        self._pending.clear()
        return self.compressed

    def close(self) -> None:
        """The gzip trailer; the upload is left to complete."""
        self._emit(self._z.compress(self._pending) + self._z.flush())
        self._pending.clear()

    def abort(self) -> ArchiverError | None:
        return self.uploader.abort()

    def _emit(self, data: bytes) -> None:
        if data:
            self.uploader.write(data)
            self.compressed += len(data)


class ManifestWriter:
    """Streams records into a gzip JSON Lines object by multipart upload, and writes its index.

    Every ``RECORDS_PER_CHUNK`` object records the deflate stream is fully flushed (byte
    aligned, no back-references across the flush), so a raw inflater can start there; the
    first key and compressed offset of each chunk go into a small index object, written once
    the manifest is completed (docs/FORMAT.md, "Manifest index").
    """

    def __init__(self, control, layout: ArchiveLayout, header: dict, coordinator=None,
                 extra_args: dict | None = None):
        """``coordinator``: the stream's, if any (tasks/core/coordinator.py): it stops the upload."""
        self._control = control
        self._layout = layout
        self._extra_args = extra_args or {}
        self._uploader = PartUploader(control, layout.bucket, layout.manifest_key,
                                      storage_class="STANDARD", sizer=PartSizer(MANIFEST_PART_SIZE),
                                      memory=MANIFEST_PART_SIZE, threads=1, extra_args=extra_args,
                                      coordinator=coordinator)
        self._lines = JsonLinesUpload(self._uploader)
        self._chunks: list[list] = []  # [first key, compressed offset, ordinal of its first record]
        self._index: dict = {}
        self.header = {"type": "header", "format": FORMAT_NAME, "version": FORMAT_VERSION, **header}
        self.objects = 0
        self._lines.write(self.header)

    def add_object(self, record: dict) -> None:
        if self.objects % RECORDS_PER_CHUNK == 0:
            self._chunks.append([record["key"], self._lines.flush_point(), self.objects])
        self.objects += 1
        self._lines.write(record)

    def complete(self, summary: dict) -> UploadResult:
        """Write the summary and complete the manifest only if no manifest exists (of two runs
        that both got this far, one commits and the other fails as ConcurrentRun). The index
        is ``write_index``'s, after."""
        self._lines.write({"type": "summary", **summary})
        self._lines.close()
        self._index = {"format": INDEX_FORMAT, "version": FORMAT_VERSION, "header": self.header,
                       "summary": {"type": "summary", **summary},
                       "archive_etag": summary.get("archive_etag"), "manifest_size": self._lines.compressed,
                       "objects": self.objects, "chunks": self._chunks}
        return self._uploader.complete(if_none_match=True)

    def write_index(self) -> None:
        """The index of the manifest ``complete`` committed. Only the run whose manifest became
        the commit writes it, so no run can ever overwrite (or clean up) the winner's index. A
        run that dies before leaves a committed prefix without an index, which every reader
        handles by reading the manifest itself (read_header_and_summary)."""
        index = self._index
        try:
            self._control.put_object(Bucket=self._layout.bucket, Key=self._layout.index_key,
                                     Body=gzip.compress(_dumps(index), 6), ContentType="application/gzip",
                                     **self._extra_args)
        except IO_ERRORS as exc:
            raise translate(exc, f"write the manifest index s3://{self._layout.bucket}/{self._layout.index_key} "
                                 "(the prefix is committed; readers fall back to the manifest)") from exc

    def abort(self) -> ArchiverError | None:
        """Abort the manifest's upload (never raises; returns the error of a failed abort)."""
        return self._uploader.abort()

    @property
    def url(self) -> str:
        return self._uploader.url


# A manifest is read in windows of this many compressed bytes, each one ranged GET read whole
# before its records are used: no connection stays open while a caller works between records
# (a deletion of ten million sources takes hours), and a fault costs one window, not the read.
MANIFEST_WINDOW = 4 << 20


def iter_manifest(control, layout: ArchiveLayout) -> Iterator[dict]:
    """Records of a manifest, streamed; raises ArchiveDamaged if it does not end in a summary."""
    what = f"read manifest {layout.manifest_url}"
    z = zlib.decompressobj(31)
    tail = b""
    last_type = None
    try:
        for chunk in stream_object(control, layout.bucket, layout.manifest_key, what, window=MANIFEST_WINDOW,
                                   eager=True, chunk=256 << 10):  # about 2 MB of records at a time
            lines = (tail + z.decompress(chunk)).split(b"\n")
            tail = lines.pop()
            for line in lines:
                record = json.loads(line)
                last_type = record.get("type")
                if last_type == "header":
                    check_version(record, layout.manifest_url)
                yield record
        lines = (tail + z.flush()).split(b"\n")
        for line in filter(None, lines):
            record = json.loads(line)
            last_type = record.get("type")
            if last_type == "header":
                check_version(record, layout.manifest_url)
            yield record
    except (zlib.error, ValueError) as exc:
        raise ArchiveDamaged(f"{layout.manifest_url} is corrupt: {exc}", hint=STORED_DAMAGE) from exc
    if last_type != "summary":
        raise ArchiveDamaged(f"{layout.manifest_url} is truncated: no summary record", hint=STORED_DAMAGE)


def manifest_exists(control, layout: ArchiveLayout) -> bool:
    return none_if_missing(lambda: control.head_object(Bucket=layout.bucket, Key=layout.manifest_key),
                           f"check manifest {layout.manifest_url}", control=control, bucket=layout.bucket,
                           key=layout.manifest_key) is not None


def read_header_and_summary(control, layout: ArchiveLayout) -> tuple[dict, dict]:
    """The manifest's first and last records: from its index (one small GET), or, for a
    manifest written before indexes carried them, by reading it through."""
    index = read_index(control, layout)
    if index is not None and "summary" in index:
        return index["header"], index["summary"]
    header = summary = None
    for record in iter_manifest(control, layout):
        if record["type"] == "header":
            header = record
        elif record["type"] == "summary":
            summary = record
    if header is None or summary is None:
        raise ArchiveDamaged(f"{layout.manifest_url} has no header or no summary record", hint=STORED_DAMAGE)
    return header, summary


def _parse_lines(data: bytes) -> Iterator[dict]:
    for line in data.split(b"\n"):
        if line:
            yield json.loads(line)


def read_index(control, layout: ArchiveLayout) -> dict | None:
    """The manifest's index, or None for manifests written before indexes existed."""
    response = read_object(control, layout.bucket, layout.index_key,
                           f"read the manifest index s3://{layout.bucket}/{layout.index_key}", missing_ok=True)
    if response is None:
        return None
    body = response["Body"]
    try:
        index = json.loads(gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body)
    except (OSError, EOFError, ValueError) as exc:  # EOFError: a truncated gzip stream
        raise ArchiveDamaged(f"s3://{layout.bucket}/{layout.index_key} is corrupt: {exc}", hint=STORED_DAMAGE) from exc
    if not isinstance(index, dict) or index.get("format") != INDEX_FORMAT:
        raise ArchiveDamaged(f"s3://{layout.bucket}/{layout.index_key} is not a manifest index", hint=STORED_DAMAGE)
    check_version(index.get("header", {}), layout.manifest_url)
    return index


def check_version(header: dict, url: str) -> None:
    """Refuse a manifest from a newer format rather than misread it (older ones all read)."""
    version = header.get("version", 1)
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise BadArgument(f"{url} is manifest format version {version}; this s3arch {__version__} reads "
                          f"versions 1 to {FORMAT_VERSION}", hint="read it with a newer s3arch")


def chunk_of(index: dict, key: str) -> int | None:
    """Which chunk of the manifest holds ``key``, if any can."""
    firsts = [key_order(c[0]) for c in index["chunks"]]
    i = bisect.bisect_right(firsts, key_order(key)) - 1
    return i if i >= 0 else None


def read_chunk(control, layout: ArchiveLayout, index: dict, i: int) -> list[dict]:
    """The records of chunk ``i``, from one ranged GET of the manifest."""
    chunks = index["chunks"]
    start = chunks[i][1]
    end = chunks[i + 1][1] if i + 1 < len(chunks) else index["manifest_size"]
    response = read_object(control, layout.bucket, layout.manifest_key, f"read the manifest {layout.manifest_url}",
                           Range=f"bytes={start}-{end - 1}")
    assert response is not None  # not missing_ok: a 404 raises
    body = response["Body"]
    try:
        data = zlib.decompressobj(-15).decompress(body)
    except zlib.error as exc:
        raise ArchiveDamaged(f"{layout.manifest_url}: chunk {i} does not inflate: {exc}", hint=STORED_DAMAGE) from exc
    return [r for r in _parse_lines(data) if r.get("type") == "object"]


def find_records(control, layout: ArchiveLayout, keys: list[str]) -> tuple[dict, dict[str, dict]]:
    """(header, {key: record}) for the keys the archive holds, looked up through the index
    (one ranged GET per chunk involved) or, for manifests without one, by one scan."""
    index = read_index(control, layout)
    wanted = set(keys)
    found: dict[str, dict] = {}
    if index is None:
        header = None
        for record in iter_manifest(control, layout):
            if record["type"] == "header":
                header = record
            elif record["type"] == "object" and record["key"] in wanted:
                found[record["key"]] = record
                if len(found) == len(wanted):
                    break
        if header is None:
            raise ArchiveDamaged(f"{layout.manifest_url} has no header record", hint=STORED_DAMAGE)
        return header, found
    by_chunk: dict[int, list[str]] = {}
    for key in wanted:
        i = chunk_of(index, key)
        if i is not None:
            by_chunk.setdefault(i, []).append(key)
    for i, chunk_keys in sorted(by_chunk.items()):
        records = {r["key"]: r for r in read_chunk(control, layout, index, i)}
        found.update({k: records[k] for k in chunk_keys if k in records})
    return index["header"], found


@dataclass(frozen=True)
class Committed:
    """What a manifest records about its archive."""

    header: dict
    summary: dict

    @property
    def archive_key(self) -> str:
        return self.header["archive"]["key"]


def read_committed(control, layout: ArchiveLayout, source: S3Url | None = None) -> Committed | None:
    """The manifest's header and summary, or None if the prefix is not committed."""
    if not manifest_exists(control, layout):
        return None
    header, summary = read_header_and_summary(control, layout)
    if source is not None and header["source"] != {"bucket": source.bucket, "prefix": source.key}:
        raise DestinationConflict(
            f"{layout.manifest_url} archives {header['source']}, not {source}",
            hint="two prefixes map to the same archive; archive one into another destination")
    return Committed(header, summary)


def parse_index(body: bytes) -> tuple[dict | None, str | None]:
    """A manifest index's content, or why it is damaged: (index, None) or (None, problem).

    Whatever a damaged object raises is caught here (a truncated gzip raises EOFError, which
    is neither OSError nor ValueError; JSON of another shape raises nothing until used), so
    no reader of a day crashes on one; it reads the manifest instead."""
    try:
        index = json.loads(gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body)
    except (OSError, EOFError, ValueError, zlib.error) as exc:
        return None, f"does not parse ({type(exc).__name__}: {exc})"
    if not isinstance(index, dict) or index.get("format") != INDEX_FORMAT:
        return None, "is not a manifest index"
    header, summary = index.get("header"), index.get("summary", {})
    if not (isinstance(header, dict) and isinstance(header.get("archive"), dict) and "key" in header["archive"]
            and isinstance(summary, dict) and isinstance(index.get("chunks", []), list)
            and isinstance(index.get("manifest_size", 0), int)):
        return None, "lacks the header, summary or chunks a manifest index has"
    return index, None


def read_through(control, layout, sample: int = 0, rng=None) -> tuple[dict, dict, list[dict]]:
    """The manifest's header and summary read from the manifest itself (a day without an index,
    or with a damaged one), and a uniform random sample of ``sample`` of its object records
    (reservoir sampling: one pass, whatever the manifest's size). IntegrityError if it is
    damaged or truncated."""
    header = summary = None
    picked: list[dict] = []
    seen = 0
    for record in iter_manifest(control, layout):
        kind = record.get("type")
        if kind == "header":
            header = record
        elif kind == "summary":
            summary = record
        elif kind == "object" and sample:
            seen += 1
            if len(picked) < sample:
                picked.append(record)
            elif (j := rng.randrange(seen)) < sample:
                picked[j] = record
    if header is None or summary is None:
        raise IntegrityError(f"{layout.manifest_url} has no header or no summary record")
    return header, summary, picked
