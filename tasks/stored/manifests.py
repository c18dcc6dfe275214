"""The manifest and its index as objects in S3, through the store (tasks/io/store.py): the
writer that streams a manifest into a multipart upload while its archive is written, and the
readers every other stage uses (commit protocol, restore, scrub, catalog). What the bytes
mean is tasks/format/manifest.py's.
"""

from __future__ import annotations

import gzip
import json
import zlib
from typing import Iterator

from s3arch.core.config import S3Url
from s3arch.core.errors import ArchiveDamaged, ArchiverError, DestinationConflict, IntegrityError
from s3arch.format.manifest import (FORMAT_NAME, FORMAT_VERSION, INDEX_FORMAT, RECORDS_PER_CHUNK, STORED_DAMAGE,
                                    ArchiveLayout, Committed, chunk_of, chunk_range, decode_manifest, dump_record,
                                    inflate_chunk, read_index_body)
from s3arch.io.store import Store
from s3arch.io.upload import PartSizer, PartUploader, UploadResult, upload_memory


# S3's minimum part size, one part in flight: the manifest's share of the memory budget is
# two parts (streamed.MemoryPlan counts it), whatever the number of objects.
MANIFEST_PART_SIZE = 5 << 20


MANIFEST_MEMORY = upload_memory(MANIFEST_PART_SIZE, MANIFEST_PART_SIZE)


class JsonLinesUpload:
    """Records as gzip JSON Lines streamed into a multipart upload, compressed in batches of
    about 1 MiB: the manifest's body, and a segment's records (tasks/produce/segments/produce.py)."""

    def __init__(self, uploader: PartUploader, level: int = 6):
        """``level``: zlib's; a segment's records, read once by the assembler, take 1."""
        self.uploader = uploader
        self.compressed = 0  # bytes of gzip written so far
        self._z = zlib.compressobj(level, zlib.DEFLATED, 31)
        self._pending = bytearray()

    def write(self, record: dict) -> None:
        self.write_line(dump_record(record))

    def write_line(self, line: bytes) -> None:
        """A record already encoded as one line (``dump_record``'s bytes)."""
        self._pending += line
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

    def __init__(self, store: Store, layout: ArchiveLayout, header: dict, coordinator=None,
                 extra_args: dict | None = None):
        """``coordinator``: the stream's, if any (tasks/core/coordinator.py): it stops the upload."""
        self._store = store
        self._layout = layout
        self._extra_args = extra_args or {}
        self._uploader = PartUploader(store, layout.bucket, layout.manifest_key,
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

    def add_object_line(self, line: bytes) -> None:
        """An object record already encoded as one line (``dump_record``'s bytes, as a segment's
        records hold it): the assembler passes them on without parsing them again."""
        if self.objects % RECORDS_PER_CHUNK == 0:
            key = json.loads(line.decode("utf-8", "surrogateescape"))["key"]
            self._chunks.append([key, self._lines.flush_point(), self.objects])
        self.objects += 1
        self._lines.write_line(line)

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
        self._store.call("put_object", f"write the manifest index s3://{self._layout.bucket}/{self._layout.index_key} "
                         "(the prefix is committed; readers fall back to the manifest)",
                         Bucket=self._layout.bucket, Key=self._layout.index_key,
                         Body=gzip.compress(dump_record(index), 6), ContentType="application/gzip", **self._extra_args)

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


def iter_manifest(store: Store, layout: ArchiveLayout) -> Iterator[dict]:
    """Records of a manifest, streamed; raises ArchiveDamaged if it does not end in a summary."""
    return decode_manifest(store.stream(layout.bucket, layout.manifest_key, f"read manifest {layout.manifest_url}",
                                        window=MANIFEST_WINDOW, eager=True, chunk=256 << 10),  # about 2 MB of records
                           layout.manifest_url)


def iter_manifest_lines(store: Store, layout: ArchiveLayout) -> Iterator[bytes]:
    """The lines of a manifest (or of a segment's records) as written, unparsed, streamed;
    ArchiveDamaged if they do not inflate or do not end in a summary record."""
    url = layout.manifest_url
    z = zlib.decompressobj(31)
    tail = last = b""
    try:
        for chunk in store.stream(layout.bucket, layout.manifest_key, f"read {url}", window=MANIFEST_WINDOW,
                                  eager=True, chunk=256 << 10):
            lines = (tail + z.decompress(chunk)).split(b"\n")
            tail = lines.pop()
            if lines:
                last = lines[-1]
                yield from lines
        lines = [line for line in (tail + z.flush()).split(b"\n") if line]
        if lines:
            last = lines[-1]
            yield from lines
    except zlib.error as exc:
        raise ArchiveDamaged(f"{url} is corrupt: {exc}", hint=STORED_DAMAGE) from exc
    if not z.eof or not last.startswith(b'{"type":"summary"'):
        raise ArchiveDamaged(f"{url} is truncated: no summary record", hint=STORED_DAMAGE)


def manifest_exists(store: Store, layout: ArchiveLayout) -> bool:
    return store.head(layout.bucket, layout.manifest_key, f"check manifest {layout.manifest_url}") is not None


def read_header_and_summary(store: Store, layout: ArchiveLayout) -> tuple[dict, dict]:
    """The manifest's first and last records: from its index (one small GET), or, for a
    manifest written before indexes carried them, by reading it through."""
    index = read_index(store, layout)
    if index is not None and "summary" in index:
        return index["header"], index["summary"]
    header = summary = None
    for record in iter_manifest(store, layout):
        if record["type"] == "header":
            header = record
        elif record["type"] == "summary":
            summary = record
    if header is None or summary is None:
        raise ArchiveDamaged(f"{layout.manifest_url} has no header or no summary record", hint=STORED_DAMAGE)
    return header, summary


def read_index(store: Store, layout: ArchiveLayout) -> dict | None:
    """The manifest's index, or None for manifests written before indexes existed."""
    response = store.read(layout.bucket, layout.index_key,
                          f"read the manifest index s3://{layout.bucket}/{layout.index_key}", missing_ok=True)
    return None if response is None else read_index_body(response["Body"], layout)


def read_chunk(store: Store, layout: ArchiveLayout, index: dict, i: int) -> list[dict]:
    """The records of chunk ``i``, from one ranged GET of the manifest."""
    start, end = chunk_range(index, i)
    response = store.read(layout.bucket, layout.manifest_key, f"read the manifest {layout.manifest_url}",
                          Range=f"bytes={start}-{end - 1}")
    assert response is not None  # not missing_ok: a 404 raises
    return inflate_chunk(response["Body"], layout, i)


def find_records(store: Store, layout: ArchiveLayout, keys: list[str]) -> tuple[dict, dict[str, dict]]:
    """(header, {key: record}) for the keys the archive holds, looked up through the index
    (one ranged GET per chunk involved) or, for manifests without one, by one scan."""
    index = read_index(store, layout)
    wanted = set(keys)
    found: dict[str, dict] = {}
    if index is None:
        header = None
        for record in iter_manifest(store, layout):
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
        records = {r["key"]: r for r in read_chunk(store, layout, index, i)}
        found.update({k: records[k] for k in chunk_keys if k in records})
    return index["header"], found


def read_committed(store: Store, layout: ArchiveLayout, source: S3Url | None = None) -> Committed | None:
    """The manifest's header and summary, or None if the prefix is not committed."""
    if not manifest_exists(store, layout):
        return None
    header, summary = read_header_and_summary(store, layout)
    if source is not None and header["source"] != {"bucket": source.bucket, "prefix": source.key}:
        raise DestinationConflict(
            f"{layout.manifest_url} archives {header['source']}, not {source}",
            hint="two prefixes map to the same archive; archive one into another destination")
    return Committed(header, summary)


def read_through(store: Store, layout, sample: int = 0, rng=None) -> tuple[dict, dict, list[dict]]:
    """The manifest's header and summary read from the manifest itself (a day without an index,
    or with a damaged one), and a uniform random sample of ``sample`` of its object records
    (reservoir sampling: one pass, whatever the manifest's size). IntegrityError if it is
    damaged or truncated."""
    header = summary = None
    picked: list[dict] = []
    seen = 0
    for record in iter_manifest(store, layout):
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
