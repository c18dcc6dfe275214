"""A day's parts: the first archive of a prefix and the late parts that followed it
(docs/FORMAT.md, "Parts").

Part 1 is the prefix's archive and manifest as they always were. Part N (N >= 2) is an archive
and manifest of their own, at the same stem plus ``.part-NNNN``, made by a re-run that found
objects the earlier parts do not hold. The parts that exist are those whose manifest exists:
one LIST of ``STEM.part-`` finds them. The day index (``STEM.parts.json``) names them too and
carries the digest of the objects the day holds, so a re-run with nothing new compares one
listing against it and reads no manifest; it is written after each part's manifest, and a
run killed in between leaves it one part behind until the next run (readers LIST).
"""

from __future__ import annotations

import hashlib
import heapq
import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Iterable, Iterator

from s3arch.core.config import S3Url
from s3arch.core.errors import IO_ERRORS, ArchiveDamaged, DestinationConflict, translate
from s3arch.format.manifest import MANIFEST_SUFFIX, STORED_DAMAGE, ArchiveLayout, Committed, iter_manifest, \
    read_committed
from s3arch.io.keys import key_order
from s3arch.io.listing import iter_pages
from s3arch.io.reads import read_object

PART_INFIX = ".part-"
DAY_INDEX_SUFFIX = ".parts.json"
DAY_INDEX_FORMAT = "s3arch-day"
_PART_MANIFEST = re.compile(r"\.part-(\d{4,})" + re.escape(MANIFEST_SUFFIX))


def part_layout(day: ArchiveLayout, number: int) -> ArchiveLayout:
    """Where part ``number`` of the day ``day`` (its part 1's layout) lives."""
    return day if number == 1 else ArchiveLayout(day.bucket, f"{day.stem}{PART_INFIX}{number:04d}")


def day_index_key(day: ArchiveLayout) -> str:
    return day.stem + DAY_INDEX_SUFFIX


def listed_parts(day: ArchiveLayout, listed) -> list[ArchiveLayout]:
    """The later parts' layouts whose manifests are among the ``listed`` keys (a listing the
    caller made of the destination)."""
    found: list[ArchiveLayout] = []
    while (layout := part_layout(day, len(found) + 2)).manifest_key in listed:
        found.append(layout)
    return found


@dataclass(frozen=True)
class Part:
    number: int
    layout: ArchiveLayout
    committed: Committed


def committed_parts(control, day: ArchiveLayout, source: S3Url | None = None,
                    first: Committed | None = None) -> list[Part]:
    """Every committed part of the day, in order: [] if part 1 is not committed. Part 1's
    state is read as every run reads it (or is ``first``, read already); later parts are
    found by one LIST."""
    first = first or read_committed(control, day, source)
    if first is None:
        return []
    parts = [Part(1, day, first)]
    for number in _later_part_numbers(control, day):
        layout = part_layout(day, number)
        committed = read_committed(control, layout, source)
        if committed is None:  # deleted between the LIST and the read
            raise ArchiveDamaged(f"{layout.manifest_url} was listed but is gone", hint=STORED_DAMAGE)
        if number != len(parts) + 1:
            raise ArchiveDamaged(f"the parts of {day.manifest_url} skip from {len(parts)} to {number}: "
                                 f"part {len(parts) + 1}'s manifest is missing", hint=STORED_DAMAGE)
        if committed.header["source"] != first.header["source"]:
            raise DestinationConflict(f"{layout.manifest_url} archives {committed.header['source']}, "
                                      f"not {first.header['source']}",
                                      hint="a prefix ending in .part-NNNN maps onto another day's parts; "
                                           "archive one of them into another destination")
        parts.append(Part(number, layout, committed))
    return parts


def _later_part_numbers(control, day: ArchiveLayout) -> list[int]:
    found = []
    for page in iter_pages(control, day.bucket, day.stem + PART_INFIX):
        for entry in page:
            match = _PART_MANIFEST.fullmatch(entry.key[len(day.stem):])
            if match:
                found.append(int(match.group(1)))
    return sorted(found)


def day_records(control, parts: Iterable[Part], every: bool = False) -> Iterator[dict]:
    """The object records of every part merged in key order, one per key: a key held by more
    than one part (rewritten after it was archived) has the record of its latest part, with
    ``part`` set to that part's number. ``every``: each part's record of such a key, the
    latest part's first."""
    def records(part: Part) -> Iterator[tuple[bytes, int, dict]]:
        for record in iter_manifest(control, part.layout):
            if record["type"] == "object":
                yield key_order(record["key"]), -part.number, record

    last = None
    for order, negative_part, record in heapq.merge(*(records(p) for p in parts)):
        if order != last or every:
            last = order
            yield {**record, "part": -negative_part}


def day_objects(control, parts: list[Part]) -> int:
    """How many keys the day holds (a key rewritten into a later part counts once)."""
    if len(parts) == 1:
        return parts[0].committed.summary["objects"]
    return sum(1 for _ in day_records(control, parts))


def drop_later_parts(control, day: ArchiveLayout, parts: list[Part]) -> None:
    """Delete the later ``parts`` of a day being overwritten, the highest first (the parts
    left stay contiguous), then the day index."""
    for part in sorted(parts, key=lambda p: -p.number):
        for key in (part.layout.manifest_key, part.layout.index_key, part.committed.archive_key):
            _delete(control, day.bucket, key)
    _delete(control, day.bucket, day_index_key(day))


def _delete(control, bucket: str, key: str) -> None:
    try:
        control.delete_object(Bucket=bucket, Key=key)
    except IO_ERRORS as exc:
        raise translate(exc, f"delete s3://{bucket}/{key} (the day is being overwritten)") from exc


def digest_of(pairs: Iterable[tuple[str, str]]) -> tuple[int, int]:
    """(count, digest) of a set of (key, ETag) pairs: the digest is the sum modulo 2^64 of each
    pair's 64-bit BLAKE2b, so it is independent of order and sums across disjoint sets."""
    count = total = 0
    for key, etag in pairs:
        count += 1
        total += int.from_bytes(hashlib.blake2b(f"{key}\0{etag}".encode("utf-8", "surrogateescape"),
                                                digest_size=8).digest(), "big")
    return count, total % (1 << 64)


@dataclass
class DayIndex:
    """What ``STEM.parts.json`` holds: the parts, and the count and digest of the (key, ETag)
    pairs the day holds now (each key's latest part)."""

    source: dict
    parts: list[dict] = field(default_factory=list)
    objects: int = 0
    digest: int = 0

    def to_json(self) -> bytes:
        return json.dumps({"format": DAY_INDEX_FORMAT, "version": 1, "source": self.source, "parts": self.parts,
                           "current": {"objects": self.objects, "digest": f"{self.digest:016x}"},
                           "written": datetime.now(timezone.utc).isoformat(timespec="seconds")},
                          ensure_ascii=False).encode()

    def matches(self, parts: list[Part]) -> bool:
        return [p["part"] for p in self.parts] == [p.number for p in parts]


def index_for(parts: list[Part], objects: int, digest: int) -> DayIndex:
    return DayIndex(parts[0].committed.header["source"], [
        {"part": p.number, "manifest": p.layout.manifest_key, "archive": p.committed.archive_key,
         "objects": p.committed.summary["objects"], "bytes": p.committed.summary["bytes"],
         "archive_size": p.committed.summary["archive_size"]} for p in parts], objects, digest)


def read_day_index(control, day: ArchiveLayout) -> DayIndex | None:
    key = day_index_key(day)
    response = read_object(control, day.bucket, key, f"read the day index s3://{day.bucket}/{key}", missing_ok=True)
    if response is None:
        return None
    try:
        data = json.loads(response["Body"])
        if data.get("format") != DAY_INDEX_FORMAT:
            raise ValueError("not a day index")
        return DayIndex(data["source"], data["parts"], data["current"]["objects"], int(data["current"]["digest"], 16))
    except (ValueError, KeyError, TypeError) as exc:
        raise ArchiveDamaged(f"s3://{day.bucket}/{key} is corrupt: {exc}",
                             hint="delete it: the next run of the day writes it again from the manifests") from exc


def write_day_index(control, day: ArchiveLayout, index: DayIndex, extra_args: dict | None = None) -> None:
    """Written by the run holding the day's lease, after the manifests it names."""
    key = day_index_key(day)
    try:
        control.put_object(Bucket=day.bucket, Key=key, Body=index.to_json(), ContentType="application/json",
                           **(extra_args or {}))
    except IO_ERRORS as exc:
        raise translate(exc, f"write the day index s3://{day.bucket}/{key} (the parts are committed; "
                             "the next run writes it again)") from exc
