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
import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Iterable

from s3arch.core.errors import ArchiveDamaged
from s3arch.format.manifest import MANIFEST_SUFFIX, ArchiveLayout, Committed

PART_INFIX = ".part-"
DAY_INDEX_SUFFIX = ".parts.json"
DAY_INDEX_FORMAT = "s3arch-day"
_PART_MANIFEST = re.compile(r"\.part-(\d{4,})" + re.escape(MANIFEST_SUFFIX))


def part_layout(day: ArchiveLayout, number: int) -> ArchiveLayout:
    """Where part ``number`` of the day ``day`` (its part 1's layout) lives."""
    return day if number == 1 else ArchiveLayout(day.bucket, f"{day.stem}{PART_INFIX}{number:04d}")


def day_index_key(day: ArchiveLayout) -> str:
    return day.stem + DAY_INDEX_SUFFIX


def part_number(day: ArchiveLayout, key: str) -> int | None:
    """The number of the later part whose manifest is at ``key``, or None if it is not one."""
    match = _PART_MANIFEST.fullmatch(key[len(day.stem):]) if key.startswith(day.stem) else None
    return int(match.group(1)) if match else None


def parse_day_index(body: bytes, url: str) -> DayIndex:
    """The day index in ``body`` (the object at ``url``); ArchiveDamaged if it is not one."""
    try:
        data = json.loads(body)
        if data.get("format") != DAY_INDEX_FORMAT:
            raise ValueError("not a day index")
        return DayIndex(data["source"], data["parts"], data["current"]["objects"], int(data["current"]["digest"], 16))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ArchiveDamaged(f"{url} is corrupt: {exc}",
                             hint="delete it: the next run of the day writes it again from the manifests") from exc


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


