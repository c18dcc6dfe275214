"""Where an archive and its manifest live, and the manifest itself (docs/FORMAT.md).

The manifest is gzip-compressed JSON Lines: a ``header`` record, one ``object`` record per
archived object in archive order, and a closing ``summary`` record. It is streamed to S3 by
multipart upload while the archive is written (so a prefix of ten million objects never
holds its index in memory) and completed last, after the archive is verified: a manifest
that exists means a complete archive.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from typing import Iterator

from .config import S3Url
from .errors import ArchiverError, BadArgument, IntegrityError, status_of, translate
from .upload import PartSizer, PartUploader, UploadResult, upload_memory

FORMAT_NAME = "s3arch-manifest"
FORMAT_VERSION = 1
MANIFEST_SUFFIX = ".manifest.jsonl.gz"
ARCHIVE_SUFFIXES = (".tar.gz", ".tar.zst")


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
    def lease_key(self) -> str:
        """The lease object a run holds while it writes this archive (tasks/lease.py)."""
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
    stem = source.key.rstrip("/") or "_bucket"
    return ArchiveLayout(destination.bucket, f"{dest}{source.bucket}/{stem}")


def layout_from_url(url: S3Url) -> ArchiveLayout:
    """The layout of an archive given the URL of the archive or of its manifest."""
    for suffix in (MANIFEST_SUFFIX, *ARCHIVE_SUFFIXES):
        if url.key.endswith(suffix):
            return ArchiveLayout(url.bucket, url.key[: -len(suffix)])
    raise BadArgument(f"{url} is neither an archive nor a manifest",
                      hint=f"give the key ending in {' or '.join((MANIFEST_SUFFIX, *ARCHIVE_SUFFIXES))}")


def _dumps(record: dict) -> bytes:
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False,
                      default=str).encode("utf-8", "surrogateescape") + b"\n"


# S3's minimum part size, one part in flight: the manifest's share of the memory budget is
# two parts (pipeline.MemoryPlan counts it), whatever the number of objects.
MANIFEST_PART_SIZE = 5 << 20
MANIFEST_MEMORY = upload_memory(MANIFEST_PART_SIZE, MANIFEST_PART_SIZE)


class ManifestWriter:
    """Streams records into a gzip JSON Lines object by multipart upload."""

    def __init__(self, control, layout: ArchiveLayout, header: dict, abort_event=None,
                 extra_args: dict | None = None):
        self._uploader = PartUploader(control, layout.bucket, layout.manifest_key,
                                      storage_class="STANDARD", sizer=PartSizer(MANIFEST_PART_SIZE),
                                      memory=MANIFEST_PART_SIZE, threads=1, extra_args=extra_args,
                                      abort_event=abort_event)
        self._z = zlib.compressobj(6, zlib.DEFLATED, 31)
        self._pending = bytearray()
        self.objects = 0
        self.write({"type": "header", "format": FORMAT_NAME, "version": FORMAT_VERSION, **header})

    def write(self, record: dict) -> None:
        self._pending += _dumps(record)
        if len(self._pending) >= 1 << 20:
            self._uploader.write(self._z.compress(self._pending))
            self._pending.clear()

    def add_object(self, record: dict) -> None:
        self.objects += 1
        self.write(record)

    def complete(self, summary: dict) -> UploadResult:
        """Write the summary and complete the manifest, only if no manifest exists: of two
        runs that both got this far, one commits and the other fails as ConcurrentRun."""
        self.write({"type": "summary", **summary})
        self._uploader.write(self._z.compress(self._pending) + self._z.flush())
        self._pending.clear()
        return self._uploader.complete(if_none_match=True)

    def abort(self) -> ArchiverError | None:
        return self._uploader.abort()

    @property
    def url(self) -> str:
        return self._uploader.url


def iter_manifest(control, layout: ArchiveLayout) -> Iterator[dict]:
    """Records of a manifest, streamed; raises IntegrityError if it does not end in a summary."""
    what = f"read manifest {layout.manifest_url}"
    try:
        body = control.get_object(Bucket=layout.bucket, Key=layout.manifest_key)["Body"]
    except Exception as exc:  # noqa: BLE001
        raise translate(exc, what) from exc
    z = zlib.decompressobj(31)
    tail = b""
    last_type = None
    try:
        for chunk in body.iter_chunks(1 << 20):
            lines = (tail + z.decompress(chunk)).split(b"\n")
            tail = lines.pop()
            for line in lines:
                record = json.loads(line)
                last_type = record.get("type")
                yield record
        lines = (tail + z.flush()).split(b"\n")
        for line in filter(None, lines):
            record = json.loads(line)
            last_type = record.get("type")
            yield record
    except (zlib.error, ValueError) as exc:
        raise IntegrityError(f"{layout.manifest_url} is corrupt: {exc}") from exc
    finally:
        body.close()
    if last_type != "summary":
        raise IntegrityError(f"{layout.manifest_url} is truncated: no summary record")


def manifest_exists(control, layout: ArchiveLayout) -> bool:
    try:
        control.head_object(Bucket=layout.bucket, Key=layout.manifest_key)
        return True
    except Exception as exc:  # noqa: BLE001
        if status_of(exc) == 404:
            return False
        raise translate(exc, f"check manifest {layout.manifest_url}") from exc


def read_header_and_summary(control, layout: ArchiveLayout) -> tuple[dict, dict]:
    header = summary = None
    for record in iter_manifest(control, layout):
        if record["type"] == "header":
            header = record
        elif record["type"] == "summary":
            summary = record
    return header, summary
