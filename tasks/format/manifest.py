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
from typing import Iterable, Iterator

from s3arch.core.config import S3Url
from s3arch.core.errors import ArchiveDamaged, BadArgument
from s3arch.io.keys import key_order
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


def dump_record(record: dict) -> bytes:
    """One record as a line of the manifest (keys that are not UTF-8 kept as their bytes)."""
    return _ENCODER.encode(record).encode("utf-8", "surrogateescape") + b"\n"


def parse_lines(data: bytes) -> Iterator[dict]:
    """The records of whole lines of a manifest (a chunk's, or a segment's records)."""
    for line in data.split(b"\n"):
        if line:
            yield json.loads(line)


def decode_manifest(compressed: Iterable[bytes], url: str) -> Iterator[dict]:
    """The records of a manifest from its gzip bytes, in order, as they arrive; ArchiveDamaged
    if they do not inflate or parse, or do not end in a summary record."""
    z = zlib.decompressobj(31)
    tail = b""
    last_type = None
    try:
        for chunk in compressed:
            lines = (tail + z.decompress(chunk)).split(b"\n")
            tail = lines.pop()
            for line in lines:
                record = json.loads(line)
                last_type = record.get("type")
                if last_type == "header":
                    check_version(record, url)
                yield record
        for line in filter(None, (tail + z.flush()).split(b"\n")):
            record = json.loads(line)
            last_type = record.get("type")
            if last_type == "header":
                check_version(record, url)
            yield record
    except (zlib.error, ValueError) as exc:
        raise ArchiveDamaged(f"{url} is corrupt: {exc}", hint=STORED_DAMAGE) from exc
    if last_type != "summary":
        raise ArchiveDamaged(f"{url} is truncated: no summary record", hint=STORED_DAMAGE)


def read_index_body(body: bytes, layout: "ArchiveLayout") -> dict:
    """The manifest index in ``body`` (the index object of ``layout``), checked: ArchiveDamaged
    if it does not parse or is not one, BadArgument if its manifest is of a newer format."""
    url = f"s3://{layout.bucket}/{layout.index_key}"
    try:
        index = json.loads(gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body)
    except (OSError, EOFError, ValueError) as exc:  # EOFError: a truncated gzip stream
        raise ArchiveDamaged(f"{url} is corrupt: {exc}", hint=STORED_DAMAGE) from exc
    if not isinstance(index, dict) or index.get("format") != INDEX_FORMAT:
        raise ArchiveDamaged(f"{url} is not a manifest index", hint=STORED_DAMAGE)
    check_version(index.get("header", {}), layout.manifest_url)
    return index


def inflate_chunk(data: bytes, layout: "ArchiveLayout", i: int) -> list[dict]:
    """The object records of chunk ``i`` of ``layout``'s manifest, from its raw deflate bytes."""
    try:
        inflated = zlib.decompressobj(-15).decompress(data)
    except zlib.error as exc:
        raise ArchiveDamaged(f"{layout.manifest_url}: chunk {i} does not inflate: {exc}", hint=STORED_DAMAGE) from exc
    return [r for r in parse_lines(inflated) if r.get("type") == "object"]


def chunk_range(index: dict, i: int) -> tuple[int, int]:
    """Where chunk ``i`` lies in the manifest: [start, end) of its compressed bytes."""
    chunks = index["chunks"]
    return chunks[i][1], chunks[i + 1][1] if i + 1 < len(chunks) else index["manifest_size"]


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


@dataclass(frozen=True)
class Committed:
    """What a manifest records about its archive."""

    header: dict
    summary: dict

    @property
    def archive_key(self) -> str:
        return self.header["archive"]["key"]


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


