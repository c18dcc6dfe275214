"""Read archives back: list members, fetch one object by ranged GET, verify the whole.

Everything here works from the manifest: ``cat`` fetches only the compressed blocks that
hold one object; ``verify`` reads the archive end to end with Python's tarfile in stream
mode and checks every member's name, size and SHA-256 against the manifest.
"""

from __future__ import annotations

import hashlib
import tarfile
from dataclasses import dataclass
from typing import BinaryIO, Iterable, Iterator

from isal import isal_zlib

from s3arch.core.errors import BadArgument, IntegrityError
from s3arch.format.manifest import ArchiveLayout
from s3arch.stored.manifests import find_records, iter_manifest
from s3arch.restore.glacier import require_readable
from s3arch.io.store import Store
from s3arch.format.tarwriter import member_name


def list_members(store: Store, layout: ArchiveLayout) -> Iterator[dict]:
    return (r for r in iter_manifest(store, layout) if r["type"] == "object")


# Compressed bytes handed to a decompressor at a time. Tar of tiny objects is mostly zero
# padding and headers, which deflate shrinks 50-100 times: a 1 MiB chunk decoded at once held
# about 100 MB, the largest share of a full read's peak memory.
DECODE_CHUNK = 64 << 10


def decompressor_for(codec: str, from_block_start: bool):
    if codec == "gzip":
        return isal_zlib.decompressobj(-15 if from_block_start else 31)
    import zstandard

    return _ZstdFrames(zstandard.ZstdDecompressor())


class _ZstdFrames:
    """Decompress concatenated zstd frames incrementally."""

    def __init__(self, dctx):
        self._dctx = dctx
        self._d = dctx.decompressobj()

    def decompress(self, data: bytes) -> bytes:
        out = []
        while data:
            out.append(self._d.decompress(data))
            if not self._d.eof:
                break
            data = self._d.unused_data
            self._d = self._dctx.decompressobj()
        return b"".join(out)


def cat_object(store: Store, layout: ArchiveLayout, key: str, out: BinaryIO) -> dict:
    """Write one archived object to ``out`` using one ranged GET of its blocks; the manifest
    record is found through the manifest's index (a few small GETs at any archive size)."""
    header, found = find_records(store, layout, [key])
    record = found.get(key)
    if record is None:
        raise BadArgument(f"{key!r} is not in {layout.manifest_url}",
                          hint="s3arch ls lists the archived keys")
    require_readable(store, layout.bucket, header["archive"]["key"])
    size, sha256 = read_member(store, layout.bucket, header, record, out)
    if size != record["size"] or sha256 != record["sha256"]:
        raise IntegrityError(f"{key!r} read back from the archive does not match its manifest "
                             f"entry (missing {record['size'] - size} bytes or SHA-256 differs)")
    return record


def read_member(store: Store, bucket: str, header: dict, record: dict, out: BinaryIO | None = None) -> tuple[int, str]:
    """One member read by one ranged GET of its blocks, written to ``out`` if given: the size
    and SHA-256 (hex) of what was read, for the caller to hold against ``record``'s."""
    start, end = record["range"]
    archive_key = header["archive"]["key"]
    compressed = store.stream(bucket, archive_key, f"read s3://{bucket}/{archive_key}",
                              start=start, end=end, chunk=DECODE_CHUNK)
    digest, size = hashlib.sha256(), 0
    try:
        for data in member_data(compressed, record, header):
            digest.update(data)
            size += len(data)
            if out is not None:
                out.write(data)
    finally:
        compressed.close()
    return size, digest.hexdigest()


def member_data(compressed: Iterable[bytes], record: dict, header: dict) -> Iterator[bytes]:
    """The bytes of one member, from the compressed bytes of its record's ``range`` (which
    starts at its first block): decompressed, the block's bytes before the member skipped, cut
    at the member's size. Fewer bytes than ``record["size"]`` if ``compressed`` ends early; the
    caller checks size and SHA-256."""
    d = decompressor_for(header["codec"], from_block_start=True)
    skip = record["data_offset"] - record["block"] * header["block_size"]
    remaining = record["size"]
    for chunk in compressed:
        data = d.decompress(chunk)
        if skip:
            cut = min(skip, len(data))
            data, skip = data[cut:], skip - cut
        data = data[:remaining]
        remaining -= len(data)
        if data:
            yield data
        if not remaining:
            return


class _DecompressingReader:
    """A file-like view of the decompressed archive, counting and hashing the raw bytes."""

    def __init__(self, chunks: Iterator[bytes], codec: str):
        self._chunks = chunks
        self._d = decompressor_for(codec, from_block_start=False)
        self._buf = bytearray()
        self.raw_size = 0
        self.raw_crc32 = 0
        self.raw_sha256 = hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        while n < 0 or len(self._buf) < n:
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            self.raw_size += len(chunk)
            self.raw_crc32 = isal_zlib.crc32(chunk, self.raw_crc32)
            self.raw_sha256.update(chunk)
            self._buf += self._d.decompress(chunk)
        n = len(self._buf) if n < 0 else min(n, len(self._buf))
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out


class _ForgetfulTar(tarfile.TarFile):
    """Python's tarfile, read member by member with ``next()``, without keeping every member it
    read in ``members`` (which stream mode does: 667 MiB of TarInfo at a million members)."""

    def next(self) -> tarfile.TarInfo | None:
        member = super().next()
        self.members.clear()  # type: ignore[attr-defined]  # the list tarfile appends to
        return member


@dataclass
class VerifyReport:
    objects: int
    bytes: int
    archive_size: int


def verify_archive(store: Store, layout: ArchiveLayout) -> VerifyReport:
    """Read the whole archive and check it member by member against the manifest."""
    records = iter_manifest(store, layout)
    header = next(records)
    require_readable(store, layout.bucket, header["archive"]["key"])
    archive_key = header["archive"]["key"]
    chunks = store.stream(layout.bucket, archive_key, f"verify s3://{layout.bucket}/{archive_key}",
                          chunk=DECODE_CHUNK)
    reader = _DecompressingReader(chunks, header["codec"])
    objects = total = 0
    summary = None
    with _ForgetfulTar.open(fileobj=reader, mode="r|") as tar:  # type: ignore[call-overload]  # a readable stream
        members = iter(tar.next, None)
        for record in records:
            if record["type"] == "summary":
                summary = record
                break
            member = next(members, None)
            key = record["key"]
            expected_name = member_name(key, record["size"])[0].rstrip("/")
            if member is None or member.name != expected_name or member.size != record["size"]:
                raise IntegrityError(f"archive member for {key!r} is "
                                     f"{member.name if member else 'missing'!r}, size "
                                     f"{member.size if member else '-'}; manifest says "
                                     f"{expected_name!r}, size {record['size']}")
            if member.isfile():
                digest = hashlib.sha256()
                f = tar.extractfile(member)
                while chunk := f.read(1 << 20):
                    digest.update(chunk)
                if digest.hexdigest() != record["sha256"]:
                    raise IntegrityError(f"{key!r}: SHA-256 in the archive differs from the manifest")
            objects += 1
            total += record["size"]
        if next(members, None) is not None:
            raise IntegrityError("the archive holds members the manifest does not list")
    reader.read()  # drain to the end so size and checksum cover every byte
    chunks.close()
    if summary is None:
        raise IntegrityError(f"{layout.manifest_url} has no summary record")
    # Manifests since 0.3 carry the archive's CRC32 (cheap, and composable across segments);
    # older ones its SHA-256.
    found = {"archive_size": reader.raw_size, "archive_crc32": f"{reader.raw_crc32:08x}",
             "archive_sha256": reader.raw_sha256.hexdigest()}
    expected = {k: summary[k] for k in found if k in summary}
    if {k: found[k] for k in expected} != expected:
        raise IntegrityError(f"archive is {', '.join(f'{k} {found[k]}' for k in expected)}; the manifest says "
                             f"{', '.join(f'{k} {v}' for k, v in expected.items())}")
    if objects != summary["objects"]:
        raise IntegrityError(f"archive holds {objects} objects, manifest summary says {summary['objects']}")
    return VerifyReport(objects, total, reader.raw_size)
